-- 0009_calibration: online calibration of token estimates (issue 4, item 6).
--
-- CountTokens answers a model without a public tokenizer with an estimate and an
-- estimate_id; the estimate (raw: before any correction) is kept here for 24 hours.
-- When Commit or RecordUsage brings the provider's count of that prompt, the ratio
-- provider / raw moves the tenant's factor for the estimate's model (server/store/
-- store_pg_calibration.c): factor += w * (ratio - factor) with w = max(1 / (samples + 1),
-- 0.2), both bounded to 0.25..4, so the first samples average and later ones decay
-- exponentially toward recent behaviour. An estimate calibrates once (used_at).

CREATE TABLE token_estimates (
    tenant_id   uuid        NOT NULL REFERENCES tenants (tenant_id),
    estimate_id text        NOT NULL,
    model       text        NOT NULL,
    raw_tokens  bigint      NOT NULL CHECK (raw_tokens >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    used_at     timestamptz,
    PRIMARY KEY (tenant_id, estimate_id)
);

-- Expiry: rows older than 24 hours are deleted a hundred at a time by the inserts.
CREATE INDEX token_estimates_created ON token_estimates (tenant_id, created_at);

CREATE TABLE token_calibrations (
    tenant_id  uuid        NOT NULL REFERENCES tenants (tenant_id),
    model      text        NOT NULL,
    factor     float8      NOT NULL CHECK (factor >= 0.25 AND factor <= 4),
    samples    bigint      NOT NULL CHECK (samples >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, model)
);

-- 0012_tenant_settings: per-tenant PII redaction settings (admin.proto TenantSettings).
--
-- pii_redact_types: the PiiType numbers (common.proto) redacted before text reaches a
-- summarizer; empty means every type. pii_redact_artifacts: Compress also redacts them in
-- the artifacts it stores (the session history is always stored as sent).
ALTER TABLE tenants
    ADD COLUMN pii_redact_types     smallint[] NOT NULL DEFAULT '{}',
    ADD COLUMN pii_redact_artifacts boolean    NOT NULL DEFAULT false,
    ADD CONSTRAINT tenants_pii_redact_types
        CHECK (pii_redact_types <@ ARRAY[1, 2, 3, 4, 5, 6, 7, 8]::smallint[]);

-- Whether an artifact was redacted before it was stored (ArtifactInfo.pii_redacted).
ALTER TABLE context_artifacts
    ADD COLUMN pii_redacted boolean NOT NULL DEFAULT false;

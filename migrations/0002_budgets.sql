-- 0002_budgets: scopes with their budgets and counters, reservations, the usage ledger.
--
-- Applied by the migration runner (server/store/store_pg.c) inside one transaction,
-- together with its schema_migrations row, so no transaction control here.
-- Table names are unqualified: the connection's search_path picks the schema.
--
-- Every key and index starts with tenant_id (DESIGN.md section 5), and every foreign key
-- stays inside one tenant, so that the schema can be distributed by tenant on Citus.

-- One row per scope: tenant -> session -> task -> agent, named by ids with '' for the
-- levels below it. The tenant's row ('', '', '') is created on first use, without a
-- budget; the others by the first SetBudget that names them. Counters roll up: the store
-- adds to every row of a path in the transaction that locked them, tenant first.
CREATE TABLE scopes (
    tenant_id              uuid             NOT NULL REFERENCES tenants (tenant_id),
    session_id             text             NOT NULL DEFAULT '',
    task_id                text             NOT NULL DEFAULT '',
    agent_id               text             NOT NULL DEFAULT '',
    level                  smallint         NOT NULL,
    -- settings: meaningful when has_budget
    has_budget             boolean          NOT NULL DEFAULT false,
    mode                   smallint         NOT NULL DEFAULT 1,  -- 1 HARD, 2 SOFT, 3 APPROVAL
    limit_tokens           bigint           NOT NULL DEFAULT 0,
    limit_cost_micros      bigint           NOT NULL DEFAULT 0,  -- 0: no cost limit
    warning_ratio          double precision NOT NULL DEFAULT 0.8,
    backpressure_disabled  boolean          NOT NULL DEFAULT false,
    tier_ratio             double precision[] NOT NULL DEFAULT '{}', -- empty: the defaults
    tier_delay_ms          integer[]        NOT NULL DEFAULT '{}',
    on_store_failure       smallint         NOT NULL DEFAULT 1,  -- 1 closed, 2 open, 3 allowance
    local_allowance_tokens bigint           NOT NULL DEFAULT 0,
    reset_period           smallint         NOT NULL DEFAULT 1,  -- 1 none, 2 daily, 3 monthly
    reservation_ttl_ms     integer          NOT NULL DEFAULT 0,
    description            text             NOT NULL DEFAULT '',
    -- counters
    used_tokens            bigint           NOT NULL DEFAULT 0,
    reserved_tokens        bigint           NOT NULL DEFAULT 0,
    used_cost_micros       bigint           NOT NULL DEFAULT 0,
    reserved_cost_micros   bigint           NOT NULL DEFAULT 0,
    -- bookkeeping
    version                bigint           NOT NULL DEFAULT 0,  -- +1 per SetBudget
    created_at             timestamptz      NOT NULL DEFAULT now(),
    updated_at             timestamptz      NOT NULL DEFAULT now(),
    closed_at              timestamptz      NULL,
    updated_by_key_id      text             NOT NULL DEFAULT '',
    -- The parent scope's ids: (s, t, a) -> (s, t, ''), (s, t, '') -> (s, '', ''),
    -- (s, '', '') -> ('', '', ''); the tenant's row is its own parent.
    parent_session_id      text             NOT NULL
        GENERATED ALWAYS AS (CASE WHEN task_id = '' THEN '' ELSE session_id END) STORED,
    parent_task_id         text             NOT NULL
        GENERATED ALWAYS AS (CASE WHEN agent_id = '' THEN '' ELSE task_id END) STORED,
    parent_agent_id        text             NOT NULL GENERATED ALWAYS AS ('') STORED,
    PRIMARY KEY (tenant_id, session_id, task_id, agent_id),
    -- Every scope's parent exists, down from the tenant's row. Row locks are taken tenant
    -- first; that cannot deadlock only if no lower row can exist without the rows above.
    CONSTRAINT scopes_parent FOREIGN KEY (tenant_id, parent_session_id, parent_task_id,
                                          parent_agent_id)
        REFERENCES scopes (tenant_id, session_id, task_id, agent_id),
    CONSTRAINT scopes_shape CHECK ((task_id = '' OR session_id <> '')
                                   AND (agent_id = '' OR task_id <> '')),
    CONSTRAINT scopes_level CHECK (level = 1 + (session_id <> '')::int + (task_id <> '')::int
                                           + (agent_id <> '')::int),
    CONSTRAINT scopes_id_length CHECK (octet_length(session_id) <= 128
                                       AND octet_length(task_id) <= 128
                                       AND octet_length(agent_id) <= 128),
    CONSTRAINT scopes_counters CHECK (used_tokens >= 0 AND reserved_tokens >= 0
                                      AND used_cost_micros >= 0 AND reserved_cost_micros >= 0),
    CONSTRAINT scopes_settings CHECK (mode BETWEEN 1 AND 3
                                      AND on_store_failure BETWEEN 1 AND 3
                                      AND reset_period BETWEEN 1 AND 3
                                      AND (reset_period = 1 OR level = 1)
                                      AND limit_tokens >= 0 AND limit_cost_micros >= 0
                                      AND local_allowance_tokens >= 0
                                      AND reservation_ttl_ms >= 0
                                      AND (NOT has_budget OR limit_tokens > 0)),
    CONSTRAINT scopes_warning_ratio CHECK (warning_ratio > 0 AND warning_ratio <= 1),
    CONSTRAINT scopes_tiers CHECK (cardinality(tier_ratio) = cardinality(tier_delay_ms)
                                   AND cardinality(tier_ratio) <= 8),
    CONSTRAINT scopes_description_length CHECK (char_length(description) <= 200),
    CONSTRAINT scopes_version CHECK (version >= 0),
    CONSTRAINT scopes_closed_after_created CHECK (closed_at IS NULL OR closed_at >= created_at)
);

-- A hold on a path's budgets between Reserve and Commit/Release. It expires at expires_at
-- (the database's clock); the sweeper finds expired ACTIVE ones through
-- reservations_expiry.
CREATE TABLE reservations (
    tenant_id                   uuid        NOT NULL,
    reservation_id              uuid        NOT NULL DEFAULT gen_random_uuid(),
    session_id                  text        NOT NULL,
    task_id                     text        NOT NULL,
    agent_id                    text        NOT NULL,
    tokens                      bigint      NOT NULL,
    cost_micros                 bigint      NOT NULL DEFAULT 0,
    model                       text        NOT NULL DEFAULT '',
    estimate_id                 text        NOT NULL DEFAULT '',
    idempotency_key             text        NULL,
    state                       smallint    NOT NULL DEFAULT 1, -- 1 ACTIVE, 2 COMMITTED,
                                                                -- 3 RELEASED, 4 EXPIRED
    created_at                  timestamptz NOT NULL DEFAULT now(),
    expires_at                  timestamptz NOT NULL,
    settled_at                  timestamptz NULL,
    -- what Commit recorded (state 2)
    committed_input_tokens       bigint      NOT NULL DEFAULT 0,
    committed_output_tokens      bigint      NOT NULL DEFAULT 0,
    committed_cache_read_tokens  bigint      NOT NULL DEFAULT 0,
    committed_cache_write_tokens bigint      NOT NULL DEFAULT 0,
    committed_cost_micros        bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, reservation_id),
    -- NULLs are distinct: reservations without a key never conflict.
    CONSTRAINT reservations_idempotency UNIQUE (tenant_id, idempotency_key),
    CONSTRAINT reservations_scope FOREIGN KEY (tenant_id, session_id, task_id, agent_id)
        REFERENCES scopes (tenant_id, session_id, task_id, agent_id),
    CONSTRAINT reservations_amounts CHECK (tokens >= 0 AND cost_micros >= 0),
    CONSTRAINT reservations_committed CHECK (committed_input_tokens >= 0
                                             AND committed_output_tokens >= 0
                                             AND committed_cache_read_tokens >= 0
                                             AND committed_cache_write_tokens >= 0
                                             AND committed_cost_micros >= 0),
    CONSTRAINT reservations_state CHECK (state BETWEEN 1 AND 4),
    CONSTRAINT reservations_settled CHECK ((state = 1) = (settled_at IS NULL)),
    CONSTRAINT reservations_model_length CHECK (char_length(model) <= 200),
    CONSTRAINT reservations_estimate_id_length CHECK (octet_length(estimate_id) <= 128),
    CONSTRAINT reservations_idempotency_length CHECK (octet_length(idempotency_key) <= 128)
);

CREATE INDEX reservations_expiry ON reservations (tenant_id, state, expires_at);

-- Append-only: what was spent, once per idempotency key and once per reservation.
CREATE TABLE ledger (
    tenant_id          uuid        NOT NULL,
    entry_id           uuid        NOT NULL DEFAULT gen_random_uuid(),
    session_id         text        NOT NULL,
    task_id            text        NOT NULL,
    agent_id           text        NOT NULL,
    input_tokens       bigint      NOT NULL DEFAULT 0,
    output_tokens      bigint      NOT NULL DEFAULT 0,
    cache_read_tokens  bigint      NOT NULL DEFAULT 0,
    cache_write_tokens bigint      NOT NULL DEFAULT 0,
    cost_micros        bigint      NOT NULL DEFAULT 0,
    model              text        NOT NULL DEFAULT '',
    idempotency_key    text        NULL,
    reservation_id     uuid        NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, entry_id),
    CONSTRAINT ledger_idempotency UNIQUE (tenant_id, idempotency_key),
    -- A reservation is settled once: a second entry for it would count its usage twice.
    CONSTRAINT ledger_reservation UNIQUE (tenant_id, reservation_id),
    CONSTRAINT ledger_scope FOREIGN KEY (tenant_id, session_id, task_id, agent_id)
        REFERENCES scopes (tenant_id, session_id, task_id, agent_id),
    CONSTRAINT ledger_reservation_exists FOREIGN KEY (tenant_id, reservation_id)
        REFERENCES reservations (tenant_id, reservation_id),
    CONSTRAINT ledger_amounts CHECK (input_tokens >= 0 AND output_tokens >= 0
                                     AND cache_read_tokens >= 0 AND cache_write_tokens >= 0
                                     AND cost_micros >= 0),
    CONSTRAINT ledger_model_length CHECK (char_length(model) <= 200),
    CONSTRAINT ledger_idempotency_length CHECK (octet_length(idempotency_key) <= 128)
);

CREATE INDEX ledger_scope_time ON ledger (tenant_id, session_id, task_id, agent_id, created_at);

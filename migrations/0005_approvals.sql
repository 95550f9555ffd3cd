-- 0005_approvals: APPROVAL-mode budgets and the durable state machine of approvals.
--
-- Applied by the migration runner (server/store/store_pg.c) inside one transaction,
-- together with its schema_migrations row, so no transaction control here.
-- Table names are unqualified: the connection's search_path picks the schema.
-- Every key and index starts with tenant_id (DESIGN.md section 5).
--
-- An approval is opened when a request of a scope would cross the limit of an APPROVAL-mode
-- level of its path: PENDING -> APPROVED | DENIED | EXPIRED, never back. Approving adds
-- granted_tokens to the level's scopes.approved_extra_tokens (until the next SetBudget or
-- reset of that level). A DENIED approval refuses further requests over the same limit
-- while the level's budget version (and, for a tenant budget, its period) is the one the
-- approval recorded.

ALTER TABLE scopes
    ADD COLUMN approval_ttl_ms       integer NOT NULL DEFAULT 0,  -- 0 without APPROVAL mode
    ADD COLUMN approved_extra_tokens bigint  NOT NULL DEFAULT 0,  -- added to limit_tokens
    ADD CONSTRAINT scopes_approvals CHECK (approval_ttl_ms >= 0 AND approved_extra_tokens >= 0);

CREATE TABLE approvals (
    tenant_id             uuid        NOT NULL,
    approval_id           uuid        NOT NULL DEFAULT gen_random_uuid(),
    -- the scope whose request opened it
    session_id            text        NOT NULL,
    task_id               text        NOT NULL,
    agent_id              text        NOT NULL,
    -- the level of that scope's path whose limit would be crossed (1 tenant .. 4 agent)
    level                 smallint    NOT NULL,
    state                 smallint    NOT NULL DEFAULT 1, -- 1 PENDING, 2 APPROVED,
                                                          -- 3 DENIED, 4 EXPIRED
    requested_tokens      bigint      NOT NULL,
    overage_tokens        bigint      NOT NULL DEFAULT 0,
    granted_tokens        bigint      NOT NULL DEFAULT 0,
    -- the level when it was opened
    limit_tokens          bigint      NOT NULL DEFAULT 0,
    used_tokens           bigint      NOT NULL DEFAULT 0,
    reserved_tokens       bigint      NOT NULL DEFAULT 0,
    budget_version        bigint      NOT NULL DEFAULT 0,
    period_start          timestamptz NULL,
    model                 text        NOT NULL DEFAULT '',
    estimated_cost_micros bigint      NOT NULL DEFAULT 0,
    reason                text        NOT NULL DEFAULT '',
    requested_by_key_id   text        NOT NULL DEFAULT '',
    requested_at          timestamptz NOT NULL,
    expires_at            timestamptz NOT NULL,
    decided_at            timestamptz NULL,
    decided_by            text        NOT NULL DEFAULT '',
    decided_by_key_id     text        NOT NULL DEFAULT '',
    decision_note         text        NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, approval_id),
    CONSTRAINT approvals_scope FOREIGN KEY (tenant_id, session_id, task_id, agent_id)
        REFERENCES scopes (tenant_id, session_id, task_id, agent_id),
    CONSTRAINT approvals_state CHECK (state BETWEEN 1 AND 4),
    CONSTRAINT approvals_level CHECK (level BETWEEN 1 AND 4),
    CONSTRAINT approvals_decided CHECK ((state = 1) = (decided_at IS NULL)),
    CONSTRAINT approvals_amounts CHECK (requested_tokens >= 0 AND overage_tokens >= 0
                                        AND granted_tokens >= 0 AND estimated_cost_micros >= 0
                                        AND (state = 2 OR granted_tokens = 0)),
    CONSTRAINT approvals_expiry CHECK (expires_at > requested_at),
    CONSTRAINT approvals_text_length CHECK (char_length(model) <= 200
                                            AND char_length(decided_by) <= 200
                                            AND char_length(decision_note) <= 1000
                                            AND char_length(reason) <= 1000)
);

-- At most one PENDING approval per scope: concurrent requests that cross the same limit
-- insert ON CONFLICT DO NOTHING against it and then share the one that won.
CREATE UNIQUE INDEX approvals_one_pending ON approvals (tenant_id, session_id, task_id, agent_id)
    WHERE state = 1;

-- The sweeper: PENDING approvals past their expiry, soonest first.
CREATE INDEX approvals_expiry_due ON approvals (tenant_id, state, expires_at);

-- ListApprovals newest first under a scope, and the DENIED lookup of a level.
CREATE INDEX approvals_scope_time ON approvals (tenant_id, session_id, task_id, agent_id,
                                                requested_at);

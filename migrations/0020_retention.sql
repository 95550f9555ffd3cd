-- 0020_retention: a tenant's sessions that nobody saved for history_retention_days are
-- deleted whole (history, artifacts, compaction records) by the sweeper
-- (server/service/sweep.c); 0, the default, keeps them. The sweeper finds them through the
-- index below, oldest first.

ALTER TABLE tenants
    ADD COLUMN history_retention_days integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT tenants_history_retention_days
        CHECK (history_retention_days BETWEEN 0 AND 36500);

CREATE INDEX context_sessions_by_update ON context_sessions (tenant_id, updated_at);

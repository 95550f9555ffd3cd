-- 0011_usage_detail: what a scope spent by kind, when it was last active, and budgets that
-- leave cache-read tokens out of their limit.
--
-- spent_* count every token a Commit or RecordUsage recorded on the scope or below it
-- (cache reads included), in the current period for the tenant level, like used_tokens;
-- used_tokens itself is what the limit sees: for a budget with exclude_cache_read_tokens it
-- leaves cache reads out. last_activity_at moves with every reservation and every usage.
-- Existing rows take their spend from the ledger (the tenant level from its period start).
ALTER TABLE scopes
    ADD COLUMN exclude_cache_read_tokens boolean NOT NULL DEFAULT false,
    ADD COLUMN spent_input_tokens        bigint NOT NULL DEFAULT 0,
    ADD COLUMN spent_output_tokens       bigint NOT NULL DEFAULT 0,
    ADD COLUMN spent_cache_read_tokens   bigint NOT NULL DEFAULT 0,
    ADD COLUMN spent_cache_write_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN last_activity_at          timestamptz NULL,
    ADD CONSTRAINT scopes_spent CHECK (spent_input_tokens >= 0 AND spent_output_tokens >= 0
                                       AND spent_cache_read_tokens >= 0
                                       AND spent_cache_write_tokens >= 0);

UPDATE scopes s
   SET spent_input_tokens = l.i, spent_output_tokens = l.o, spent_cache_read_tokens = l.cr,
       spent_cache_write_tokens = l.cw, last_activity_at = l.last
  FROM (SELECT s2.tenant_id, s2.session_id, s2.task_id, s2.agent_id,
               coalesce(sum(g.input_tokens), 0) AS i, coalesce(sum(g.output_tokens), 0) AS o,
               coalesce(sum(g.cache_read_tokens), 0) AS cr,
               coalesce(sum(g.cache_write_tokens), 0) AS cw, max(g.created_at) AS last
          FROM scopes s2
          JOIN ledger g ON g.tenant_id = s2.tenant_id
                       AND (s2.session_id = '' OR g.session_id = s2.session_id)
                       AND (s2.task_id = '' OR g.task_id = s2.task_id)
                       AND (s2.agent_id = '' OR g.agent_id = s2.agent_id)
                       AND (s2.level > 1 OR s2.period_start IS NULL
                            OR g.created_at >= s2.period_start)
         GROUP BY s2.tenant_id, s2.session_id, s2.task_id, s2.agent_id) l
 WHERE s.tenant_id = l.tenant_id AND s.session_id = l.session_id AND s.task_id = l.task_id
   AND s.agent_id = l.agent_id;

-- ListScopes by last activity (most recent first), within a tenant and level.
CREATE INDEX scopes_level_activity ON scopes (tenant_id, level, last_activity_at DESC NULLS LAST);

-- 0022_usage_rollups: spend history. What the ledger records, summed per scope per minute,
-- hour and day (UTC buckets), for GetUsageHistory's charts.
--
-- The rollups are written with the usage: a statement trigger on the ledger adds what each
-- INSERT statement wrote (its transition table, never the ledger itself) to the rows of
-- every scope on each entry's path (tenant, session, task, agent, as the counters roll up),
-- at the three resolutions, in the transaction that wrote the entries. So a rollup holds
-- exactly the committed ledger entries of its bucket, whatever wrote them (Commit,
-- RecordUsage, their batched forms, the summarizer's charge).
--
-- Lock order: every ledger writer holds its path's scope rows, tenant first (store.h "lock
-- order"), so the rollup rows of a tenant are written by one transaction at a time, and
-- the trigger's upserts cannot deadlock with each other. The trigger's own rows are grouped
-- per key, so one statement never touches a row twice.
--
-- Retention: the sweeper deletes buckets older than rollup_minute_days,
-- rollup_hour_days and rollup_day_days (server configuration) through
-- usage_rollups_by_age.

CREATE TABLE usage_rollups (
    tenant_id          uuid        NOT NULL,
    session_id         text        NOT NULL,
    task_id            text        NOT NULL,
    agent_id           text        NOT NULL,
    resolution         smallint    NOT NULL, -- 1 minute, 2 hour, 3 day
    bucket_start       timestamptz NOT NULL,
    input_tokens       bigint      NOT NULL DEFAULT 0,
    output_tokens      bigint      NOT NULL DEFAULT 0,
    cache_read_tokens  bigint      NOT NULL DEFAULT 0,
    cache_write_tokens bigint      NOT NULL DEFAULT 0,
    cost_micros        bigint      NOT NULL DEFAULT 0,
    entries            bigint      NOT NULL DEFAULT 0, -- ledger entries (model calls)
    PRIMARY KEY (tenant_id, session_id, task_id, agent_id, resolution, bucket_start),
    CONSTRAINT usage_rollups_resolution CHECK (resolution BETWEEN 1 AND 3),
    CONSTRAINT usage_rollups_amounts CHECK (input_tokens >= 0 AND output_tokens >= 0
                                            AND cache_read_tokens >= 0
                                            AND cache_write_tokens >= 0 AND cost_micros >= 0
                                            AND entries >= 0)
);

CREATE INDEX usage_rollups_by_age ON usage_rollups (tenant_id, resolution, bucket_start);

-- The rows one set of ledger entries adds to, summed: each entry counts once on each scope
-- of its path (the levels its ids name) at each resolution.
CREATE FUNCTION cg_usage_rollup_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_rollups AS u (tenant_id, session_id, task_id, agent_id, resolution,
                                    bucket_start, input_tokens, output_tokens,
                                    cache_read_tokens, cache_write_tokens, cost_micros, entries)
    SELECT n.tenant_id, p.s, p.t, p.a, r.res, date_trunc(r.unit, n.created_at, 'UTC'),
           sum(n.input_tokens), sum(n.output_tokens), sum(n.cache_read_tokens),
           sum(n.cache_write_tokens), sum(n.cost_micros), count(*)
      FROM new_entries n
     CROSS JOIN LATERAL (VALUES ('', '', '', true),
                                (n.session_id, '', '', n.session_id <> ''),
                                (n.session_id, n.task_id, '', n.task_id <> ''),
                                (n.session_id, n.task_id, n.agent_id, n.agent_id <> ''))
           AS p(s, t, a, named)
     CROSS JOIN (VALUES (1::smallint, 'minute'), (2::smallint, 'hour'), (3::smallint, 'day'))
           AS r(res, unit)
     WHERE p.named
     GROUP BY 1, 2, 3, 4, 5, 6
     ORDER BY 1, 2, 3, 4, 5, 6
        ON CONFLICT (tenant_id, session_id, task_id, agent_id, resolution, bucket_start)
        DO UPDATE SET input_tokens = u.input_tokens + excluded.input_tokens,
                      output_tokens = u.output_tokens + excluded.output_tokens,
                      cache_read_tokens = u.cache_read_tokens + excluded.cache_read_tokens,
                      cache_write_tokens = u.cache_write_tokens + excluded.cache_write_tokens,
                      cost_micros = u.cost_micros + excluded.cost_micros,
                      entries = u.entries + excluded.entries;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_usage_rollups
    AFTER INSERT ON ledger REFERENCING NEW TABLE AS new_entries
    FOR EACH STATEMENT EXECUTE FUNCTION cg_usage_rollup_add();

-- What the ledger already holds, once.
INSERT INTO usage_rollups (tenant_id, session_id, task_id, agent_id, resolution, bucket_start,
                           input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                           cost_micros, entries)
SELECT n.tenant_id, p.s, p.t, p.a, r.res, date_trunc(r.unit, n.created_at, 'UTC'),
       sum(n.input_tokens), sum(n.output_tokens), sum(n.cache_read_tokens),
       sum(n.cache_write_tokens), sum(n.cost_micros), count(*)
  FROM ledger n
 CROSS JOIN LATERAL (VALUES ('', '', '', true),
                            (n.session_id, '', '', n.session_id <> ''),
                            (n.session_id, n.task_id, '', n.task_id <> ''),
                            (n.session_id, n.task_id, n.agent_id, n.agent_id <> ''))
       AS p(s, t, a, named)
 CROSS JOIN (VALUES (1::smallint, 'minute'), (2::smallint, 'hour'), (3::smallint, 'day'))
       AS r(res, unit)
 WHERE p.named
 GROUP BY 1, 2, 3, 4, 5, 6;

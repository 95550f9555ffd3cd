-- 0018_overrun_event: the OVERRUN event (budget.proto USAGE_EVENT_TYPE_OVERRUN = 13) carries
-- what a Commit recorded beyond its reservation.
--
-- A Commit whose usage is above the tokens its reservation held is recorded in full (the
-- spend happened) and appends an OVERRUN event on the reservation's scope, in the Commit's
-- transaction: ref_id is the reservation, ref_tokens the tokens it held, and these columns
-- the usage committed (UsageEvent.reservation.committed_usage). Other events leave them 0.
-- scope_events.type has no CHECK constraint, so the new type needs no widening.
-- The batched write (store_pg_batch.c) inserts no OVERRUN: a batch hands an overrunning
-- Commit to the one-request path, which appends through cg_events_append.

ALTER TABLE scope_events
    ADD COLUMN ref_input_tokens       bigint NOT NULL DEFAULT 0,
    ADD COLUMN ref_output_tokens      bigint NOT NULL DEFAULT 0,
    ADD COLUMN ref_cache_read_tokens  bigint NOT NULL DEFAULT 0,
    ADD COLUMN ref_cache_write_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN ref_cost_micros        bigint NOT NULL DEFAULT 0;

-- As 0015's, storing the ref_* usage too (JSON keys ri, ro, rcr, rcw, rc).
CREATE OR REPLACE FUNCTION cg_events_append(p_tenant uuid, p_events jsonb, p_now_ms bigint)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    stored bigint;
BEGIN
    RETURN QUERY
    WITH ev AS (
        SELECT x.*, j.ord
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS j(v, ord),
               LATERAL jsonb_to_record(j.v)
                   AS x(s text, t text, a text, type smallint, thr float8, fall boolean,
                        delay int, ps bigint, ref text, reft bigint, refs smallint, msg text,
                        ri bigint, ro bigint, rcr bigint, rcw bigint, rc bigint)
    ), counts AS (
        SELECT ev.s, ev.t, ev.a, count(*) AS n FROM ev GROUP BY ev.s, ev.t, ev.a
    ), upd AS (
        UPDATE scopes AS sc SET event_seq = sc.event_seq + c.n
          FROM counts AS c
         WHERE sc.tenant_id = p_tenant AND sc.session_id = c.s AND sc.task_id = c.t
           AND sc.agent_id = c.a
        RETURNING sc.session_id, sc.task_id, sc.agent_id, sc.event_seq, c.n, sc.level,
                  sc.has_budget, sc.mode, sc.limit_tokens, sc.limit_cost_micros,
                  sc.warning_ratio, sc.used_tokens, sc.reserved_tokens, sc.used_cost_micros,
                  sc.reserved_cost_micros, sc.closed_at IS NOT NULL AS closed,
                  sc.allocated_tokens, sc.approved_extra_tokens
    ), numbered AS (
        SELECT e.*, u.level, u.has_budget, u.mode, u.limit_tokens, u.limit_cost_micros,
               u.warning_ratio, u.used_tokens, u.reserved_tokens, u.used_cost_micros,
               u.reserved_cost_micros, u.closed, u.allocated_tokens,
               u.approved_extra_tokens,
               u.event_seq - u.n
                   + row_number() OVER (PARTITION BY e.s, e.t, e.a ORDER BY e.ord) AS seq
          FROM ev AS e
          JOIN upd AS u ON u.session_id = e.s AND u.task_id = e.t AND u.agent_id = e.a
    ), ins AS (
        INSERT INTO scope_events (tenant_id, session_id, task_id, agent_id, seq, type,
                                  occurred_at, level, has_budget, mode, limit_tokens,
                                  limit_cost_micros, warning_ratio, used_tokens,
                                  reserved_tokens, used_cost_micros, reserved_cost_micros,
                                  closed, threshold_ratio, falling, delay_ms, period_start_ms,
                                  ref_id, ref_tokens, ref_state, message,
                                  allocated_tokens, approved_extra_tokens,
                                  ref_input_tokens, ref_output_tokens, ref_cache_read_tokens,
                                  ref_cache_write_tokens, ref_cost_micros)
        SELECT p_tenant, n.s, n.t, n.a, n.seq, n.type, to_timestamp(p_now_ms / 1e3), n.level,
               n.has_budget, n.mode, n.limit_tokens, n.limit_cost_micros, n.warning_ratio,
               n.used_tokens, n.reserved_tokens, n.used_cost_micros, n.reserved_cost_micros,
               n.closed, coalesce(n.thr, 0), coalesce(n.fall, false), coalesce(n.delay, 0),
               coalesce(n.ps, 0), coalesce(n.ref, ''), coalesce(n.reft, 0),
               coalesce(n.refs, 0), coalesce(n.msg, ''), n.allocated_tokens,
               n.approved_extra_tokens, coalesce(n.ri, 0), coalesce(n.ro, 0),
               coalesce(n.rcr, 0), coalesce(n.rcw, 0), coalesce(n.rc, 0)
          FROM numbered AS n
        RETURNING session_id, task_id, agent_id, seq
    )
    SELECT p_tenant::text || ' ' || i.seq::text || ' ' || i.session_id || ' ' || i.task_id
           || ' ' || i.agent_id
      FROM ins AS i ORDER BY i.session_id, i.task_id, i.agent_id, i.seq;
    GET DIAGNOSTICS stored = ROW_COUNT;
    IF stored < jsonb_array_length(p_events) THEN
        RAISE EXCEPTION 'cg_events_append: no scope for some events'
            USING ERRCODE = 'P0002';
    END IF;
END;
$$;

-- 0007: events are announced after the transaction that appended them commits.
--
-- A NOTIFY inside a transaction takes a database-wide lock at commit and holds it through
-- the commit's WAL flush, so every writing transaction of the database ran one at a time
-- (measured: a single-row update with a NOTIFY committed ~7x slower alone and ~7x slower
-- at 16 clients than without). cg_events_append now returns the notification payloads
-- ("tenant seq session task agent", one per event) instead of sending them; the server
-- sends them with pg_notify in a statement of its own right after COMMIT. A server that
-- dies between the two loses only the wake-up: the events are in scope_events, and the
-- next notification of the scope makes watchers read every event after the last they saw.
DROP FUNCTION cg_events_append(uuid, jsonb, bigint);

-- Set-based as well: one UPDATE numbers the events of each scope, one INSERT stores them
-- (a loop of one UPDATE and one INSERT per event cost ~0.1 ms an event in a batch of
-- hundreds).
CREATE FUNCTION cg_events_append(p_tenant uuid, p_events jsonb, p_now_ms bigint)
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
                        delay int, ps bigint, ref text, reft bigint, refs smallint, msg text)
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
                  sc.reserved_cost_micros, sc.closed_at IS NOT NULL AS closed
    ), numbered AS (
        SELECT e.*, u.level, u.has_budget, u.mode, u.limit_tokens, u.limit_cost_micros,
               u.warning_ratio, u.used_tokens, u.reserved_tokens, u.used_cost_micros,
               u.reserved_cost_micros, u.closed,
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
                                  ref_id, ref_tokens, ref_state, message)
        SELECT p_tenant, n.s, n.t, n.a, n.seq, n.type, to_timestamp(p_now_ms / 1e3), n.level,
               n.has_budget, n.mode, n.limit_tokens, n.limit_cost_micros, n.warning_ratio,
               n.used_tokens, n.reserved_tokens, n.used_cost_micros, n.reserved_cost_micros,
               n.closed, coalesce(n.thr, 0), coalesce(n.fall, false), coalesce(n.delay, 0),
               coalesce(n.ps, 0), coalesce(n.ref, ''), coalesce(n.reft, 0),
               coalesce(n.refs, 0), coalesce(n.msg, '')
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

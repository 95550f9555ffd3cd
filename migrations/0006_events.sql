-- 0006_events: the durable event log behind WatchUsage (store_pg_events.c).
--
-- An event is written by the transaction that made the change it describes, so a committed
-- change always has its event and a rolled-back one never does. Each scope numbers its
-- events 1, 2, 3, ... (scopes.event_seq, advanced under the row lock the writer already
-- holds on its path), so a watcher sees them in order and can tell when it missed some.
-- Every appended event is announced with NOTIFY cg_events, which PostgreSQL delivers at
-- commit, in commit order, to each server's listening connection; the payload says which
-- event to read: '<tenant_id> <seq> <session_id> <task_id> <agent_id>' (ids hold no spaces).
-- Events are kept for an hour (the sweeper deletes older ones, tenant by tenant).

ALTER TABLE scopes ADD COLUMN event_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE scope_events (
    tenant_id            uuid             NOT NULL,
    session_id           text             NOT NULL,
    task_id              text             NOT NULL,
    agent_id             text             NOT NULL,
    seq                  bigint           NOT NULL,
    event_id             uuid             NOT NULL DEFAULT gen_random_uuid(),
    type                 smallint         NOT NULL,
    occurred_at          timestamptz      NOT NULL,
    level                smallint         NOT NULL,
    -- the scope's row right after the change
    has_budget           boolean          NOT NULL,
    mode                 smallint         NOT NULL,
    limit_tokens         bigint           NOT NULL,
    limit_cost_micros    bigint           NOT NULL,
    warning_ratio        double precision NOT NULL,
    used_tokens          bigint           NOT NULL,
    reserved_tokens      bigint           NOT NULL,
    used_cost_micros     bigint           NOT NULL,
    reserved_cost_micros bigint           NOT NULL,
    closed               boolean          NOT NULL,
    -- what the event type adds
    threshold_ratio      double precision NOT NULL DEFAULT 0,
    falling              boolean          NOT NULL DEFAULT false,
    delay_ms             integer          NOT NULL DEFAULT 0,
    period_start_ms      bigint           NOT NULL DEFAULT 0,
    ref_id               text             NOT NULL DEFAULT '', -- reservation or approval id
    ref_tokens           bigint           NOT NULL DEFAULT 0,
    ref_state            smallint         NOT NULL DEFAULT 0,
    message              text             NOT NULL DEFAULT '',
    PRIMARY KEY (tenant_id, session_id, task_id, agent_id, seq)
);

-- Retention: the sweeper deletes a tenant's events older than an hour.
CREATE INDEX scope_events_age ON scope_events (tenant_id, occurred_at);

-- Appends events to scopes of one tenant, in the order given: each gets the next seq of
-- its scope (the row must exist; the caller holds its lock or takes it here) and the
-- scope's counters as they are now in this transaction. p_events is a JSON array of
-- {"s","t","a","type","thr","fall","delay","ps","ref","reft","refs","msg"}.
-- Returns the seq given to the last event.
CREATE FUNCTION cg_events_append(p_tenant uuid, p_events jsonb, p_now_ms bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    e record;
    r record;
BEGIN
    r := NULL;
    FOR e IN SELECT * FROM jsonb_to_recordset(p_events) AS x(s text, t text, a text,
             type smallint, thr float8, fall boolean, delay int, ps bigint, ref text,
             reft bigint, refs smallint, msg text) LOOP
        UPDATE scopes SET event_seq = event_seq + 1
         WHERE tenant_id = p_tenant AND session_id = e.s AND task_id = e.t AND agent_id = e.a
         RETURNING * INTO r;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cg_events_append: no scope (%, %, %)', e.s, e.t, e.a
                USING ERRCODE = 'P0002';
        END IF;
        INSERT INTO scope_events (tenant_id, session_id, task_id, agent_id, seq, type,
                                  occurred_at, level, has_budget, mode, limit_tokens,
                                  limit_cost_micros, warning_ratio, used_tokens,
                                  reserved_tokens, used_cost_micros, reserved_cost_micros,
                                  closed, threshold_ratio, falling, delay_ms, period_start_ms,
                                  ref_id, ref_tokens, ref_state, message)
        VALUES (p_tenant, e.s, e.t, e.a, r.event_seq, e.type, to_timestamp(p_now_ms / 1e3),
                r.level, r.has_budget, r.mode, r.limit_tokens, r.limit_cost_micros,
                r.warning_ratio, r.used_tokens, r.reserved_tokens, r.used_cost_micros,
                r.reserved_cost_micros, r.closed_at IS NOT NULL, coalesce(e.thr, 0),
                coalesce(e.fall, false), coalesce(e.delay, 0), coalesce(e.ps, 0),
                coalesce(e.ref, ''), coalesce(e.reft, 0), coalesce(e.refs, 0),
                coalesce(e.msg, ''));
        PERFORM pg_notify('cg_events', p_tenant::text || ' ' || r.event_seq::text || ' '
                          || e.s || ' ' || e.t || ' ' || e.a);
    END LOOP;
    RETURN coalesce(r.event_seq, 0);
END;
$$;

-- 0023_notifications: budget events that reach people. A tenant's notification channels
-- (a generic webhook, signed, or a Slack-compatible incoming webhook) subscribe to event
-- types under a scope prefix; every stored event a channel subscribes to becomes one row of
-- a durable outbox, written in the transaction that stores the event, with its delivery id
-- and the exact body to POST. Replicas' notifiers (server/service/notify.c) claim due rows
-- with a lease (FOR UPDATE SKIP LOCKED, lease_until), so one replica at a time delivers a
-- row; a replica that dies mid-delivery leaves a lease that runs out, and another delivers
-- the row again with the same delivery id (at least once; receivers dedupe by that id).
-- Failures are retried with exponential backoff and jitter until the server's
-- notify_max_attempts, then the row is dead (state 3): listed and re-driven by RPC.

CREATE TABLE notification_channels (
    tenant_id    uuid        NOT NULL REFERENCES tenants (tenant_id),
    channel_id   uuid        NOT NULL DEFAULT gen_random_uuid(),
    kind         smallint    NOT NULL, -- 1 webhook (signed JSON), 2 Slack incoming webhook
    url          text        NOT NULL,
    secret       text        NOT NULL DEFAULT '', -- webhook: the HMAC-SHA256 key
    event_types  smallint[]  NOT NULL DEFAULT '{}', -- UsageEventType values; empty: the default set
    session_id   text        NOT NULL DEFAULT '', -- scope prefix: '' every session
    task_id      text        NOT NULL DEFAULT '',
    description  text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, channel_id),
    CONSTRAINT notification_channels_kind CHECK (kind BETWEEN 1 AND 2),
    CONSTRAINT notification_channels_url CHECK (octet_length(url) <= 2048
                                                AND (url LIKE 'https://%' OR url LIKE 'http://%')),
    CONSTRAINT notification_channels_prefix CHECK (task_id = '' OR session_id <> ''),
    CONSTRAINT notification_channels_lengths CHECK (octet_length(session_id) <= 128
                                                    AND octet_length(task_id) <= 128
                                                    AND char_length(description) <= 200
                                                    AND cardinality(event_types) <= 32)
);

CREATE TABLE notification_outbox (
    tenant_id       uuid        NOT NULL,
    delivery_id     uuid        NOT NULL,
    channel_id      uuid        NOT NULL,
    event_id        uuid        NOT NULL,
    event_type      smallint    NOT NULL,
    body            text        NOT NULL, -- exactly what is POSTed
    state           smallint    NOT NULL DEFAULT 1, -- 1 pending, 2 delivered, 3 dead
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz NULL,
    last_status     integer     NOT NULL DEFAULT 0, -- HTTP status of the last attempt, 0: none
    last_error      text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz NULL,
    PRIMARY KEY (tenant_id, delivery_id),
    CONSTRAINT notification_outbox_once UNIQUE (tenant_id, channel_id, event_id),
    CONSTRAINT notification_outbox_channel FOREIGN KEY (tenant_id, channel_id)
        REFERENCES notification_channels (tenant_id, channel_id) ON DELETE CASCADE,
    CONSTRAINT notification_outbox_state CHECK (state BETWEEN 1 AND 3),
    CONSTRAINT notification_outbox_delivered CHECK ((state = 2) = (delivered_at IS NOT NULL))
);

-- The notifiers' claim: the pending rows (only they are in it), every tenant. Like every
-- index here it starts with tenant_id (distributable by tenant); a claim reads the pending
-- rows, which are few unless receivers are down (dead rows leave it).
CREATE INDEX notification_outbox_due ON notification_outbox (tenant_id, next_attempt_at)
    WHERE state = 1;
-- Listing a tenant's deliveries (dead letters first of all), newest first.
CREATE INDEX notification_outbox_by_state ON notification_outbox (tenant_id, state, created_at);

-- The name of a UsageEventType value, as the proto spells it after USAGE_EVENT_TYPE_.
CREATE FUNCTION cg_event_type_name(t smallint) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE t WHEN 3 THEN 'THRESHOLD_CROSSED' WHEN 4 THEN 'WARNING' WHEN 5 THEN 'EXHAUSTED'
                  WHEN 6 THEN 'APPROVAL_REQUESTED' WHEN 7 THEN 'APPROVAL_DECIDED'
                  WHEN 8 THEN 'RESET' WHEN 9 THEN 'BUDGET_CHANGED' WHEN 10 THEN 'SCOPE_CLOSED'
                  WHEN 11 THEN 'RESERVATION_EXPIRED' WHEN 13 THEN 'OVERRUN'
                  WHEN 14 THEN 'FORECAST_EXHAUSTION' ELSE 'TYPE_' || t END
$$;

-- The events a channel with no event_types gets.
CREATE FUNCTION cg_notify_default_type(t smallint) RETURNS boolean LANGUAGE sql IMMUTABLE
PARALLEL SAFE AS $$
    SELECT t IN (3, 4, 5, 6, 7, 13, 14)
$$;

-- One outbox row per (subscribed channel, stored event): the webhook's signed JSON or a
-- Slack message, built here from the event row as stored.
CREATE FUNCTION cg_notify_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO notification_outbox (tenant_id, delivery_id, channel_id, event_id, event_type,
                                     body)
    SELECT x.tenant_id, x.delivery_id, x.channel_id, x.event_id, x.type,
           CASE WHEN x.kind = 2 THEN
               json_build_object('text', format(
                   '[ctxguard] %s on %s: %s of %s tokens used (%s%%)%s%s',
                   cg_event_type_name(x.type), x.path, x.used_tokens + x.reserved_tokens,
                   x.limit_tokens,
                   CASE WHEN x.limit_tokens > 0
                        THEN round(100.0 * (x.used_tokens + x.reserved_tokens)
                                   / x.limit_tokens, 1)::text
                        ELSE '-' END,
                   CASE WHEN x.ref_id <> '' THEN ', ' || x.ref_id ELSE '' END,
                   CASE WHEN x.message <> '' THEN ': ' || x.message ELSE '' END))::text
           ELSE json_build_object(
               'delivery_id', x.delivery_id, 'event_id', x.event_id,
               'type', cg_event_type_name(x.type), 'tenant_id', x.tenant_id,
               'scope', json_build_object('session_id', x.session_id, 'task_id', x.task_id,
                                          'agent_id', x.agent_id),
               'occurred_at_unix_ms', floor(extract(epoch FROM x.occurred_at) * 1000)::int8,
               'level', x.level, 'has_budget', x.has_budget, 'mode', x.mode,
               'limit_tokens', x.limit_tokens, 'used_tokens', x.used_tokens,
               'reserved_tokens', x.reserved_tokens, 'limit_cost_micros', x.limit_cost_micros,
               'used_cost_micros', x.used_cost_micros, 'threshold_ratio', x.threshold_ratio,
               'falling', x.falling, 'delay_ms', x.delay_ms, 'ref_id', x.ref_id,
               'ref_tokens', x.ref_tokens, 'ref_state', x.ref_state,
               'message', x.message)::text
           END
      FROM (SELECT e.*, c.channel_id, c.kind, gen_random_uuid() AS delivery_id,
                   CASE WHEN e.session_id = '' THEN 'the tenant'
                        ELSE concat_ws('/', e.session_id, nullif(e.task_id, ''),
                                       nullif(e.agent_id, '')) END AS path
              FROM new_events e
              JOIN notification_channels c
                ON c.tenant_id = e.tenant_id
               AND (c.session_id = '' OR c.session_id = e.session_id)
               AND (c.task_id = '' OR c.task_id = e.task_id)
               AND (CASE WHEN cardinality(c.event_types) = 0 THEN cg_notify_default_type(e.type)
                         ELSE e.type = ANY (c.event_types) END)) x
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER scope_events_notify
    AFTER INSERT ON scope_events REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION cg_notify_enqueue();

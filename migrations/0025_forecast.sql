-- 0025_forecast: spend forecasts. A budget whose recent spend rate (the minute rollups of
-- migration 0022 over forecast_window_minutes) would exhaust it within
-- forecast_horizon_minutes gets one FORECAST_EXHAUSTION event (UsageEventType 14) per
-- crossing under the horizon; forecast_alerts remembers which scopes are under it, so that
-- replicas' sweepers alert once (the INSERT that wins appends the event) and alert again
-- only after the scope left the horizon (the row is deleted then).
--
-- The event is stored in scope_events like the others, with its forecast in two existing
-- columns: ref_tokens holds the tokens per minute (rounded) and period_start_ms the
-- forecast exhaustion time (unix ms).

CREATE TABLE forecast_alerts (
    tenant_id  uuid        NOT NULL,
    session_id text        NOT NULL,
    task_id    text        NOT NULL,
    agent_id   text        NOT NULL,
    alerted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id, task_id, agent_id),
    CONSTRAINT forecast_alerts_scope FOREIGN KEY (tenant_id, session_id, task_id, agent_id)
        REFERENCES scopes (tenant_id, session_id, task_id, agent_id) ON DELETE CASCADE
);

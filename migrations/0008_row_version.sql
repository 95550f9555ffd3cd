-- 0008_row_version: a per-row counter that moves on every write of a scope's row, for the
-- caches of CheckBudget (server/rpc/rpc_cache.c, server/store/store_redis.c).
--
-- scopes.version counts SetBudget calls only; a cache must also tell apart two states of
-- the counters, so that a fill read before a write can never replace the value the write
-- left (a cached row is replaced only by one with a larger row_version). The trigger
-- bumps row_version in the same statement as the change, under the row lock the writer
-- holds, so the values a row takes are numbered 1, 2, 3, ... in commit order and an
-- UPDATE ... RETURNING sees the new number. It fires on every column a write may set
-- except event_seq: appending a WatchUsage event (cg_events_append) changes nothing a
-- cache holds, and numbering it would only make the rows a writer got back look stale.
-- A new row starts at 1 (0 is never a stored value: callers read it as "unknown").

ALTER TABLE scopes ADD COLUMN row_version bigint NOT NULL DEFAULT 1;

CREATE FUNCTION cg_scopes_bump_row_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.row_version := OLD.row_version + 1;
    RETURN NEW;
END
$$;

CREATE TRIGGER scopes_row_version
    BEFORE UPDATE OF level, has_budget, mode, limit_tokens, limit_cost_micros, warning_ratio,
        backpressure_disabled, tier_ratio, tier_delay_ms, on_store_failure,
        local_allowance_tokens, reset_period, reservation_ttl_ms, description, used_tokens,
        reserved_tokens, used_cost_micros, reserved_cost_micros, version, created_at,
        updated_at, closed_at, updated_by_key_id, period_start, next_reset_at,
        approval_ttl_ms, approved_extra_tokens, row_version
    ON scopes FOR EACH ROW EXECUTE FUNCTION cg_scopes_bump_row_version();

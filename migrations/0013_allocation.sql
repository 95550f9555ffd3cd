-- 0013_allocation: budgets allocated from their parent (BudgetSettings.allocate_from_parent).
--
-- A session, task or agent whose budget has allocate_from_parent carves its remaining
-- share out of its parent: the parent's allocated_tokens holds, for every OPEN allocated
-- child with a budget, share(child) = max(0, limit_tokens - used_tokens - reserved_tokens).
-- Decisions count a level's (used + reserved + allocated), so siblings cannot spend what
-- a child was given, and the child's own spending (which rolls up into the parent's used
-- and reserved as always) shrinks its share by the same amount: nothing counts twice.
--
-- allocated_tokens is kept by a trigger, so every SQL writer (Reserve, Commit, Release,
-- RecordUsage, their batched forms, the sweeper, CloseScope, SetBudget) is consistent by
-- construction: after each row change of an allocated child it adds the change of the
-- child's share to the parent's row. The share does not depend on allocated_tokens, so
-- the parent's own trigger run changes nothing further (no cascade). Lock order: every
-- writer of a child row has locked its path (tenant first) or its parent with it before
-- (store.h "lock order"; CloseScope locks the path above the subtree), so the parent row
-- is already held by the same transaction and the trigger takes no new lock.
--
-- The trigger's UPDATE of the parent bumps its row_version (0008's trigger now also
-- watches allocated_tokens and allocate_from_parent), so caches see the change. A
-- statement's RETURNING does not see what its AFTER triggers did: writers that hand back
-- rows (store_pg_budget.c path_add, store_pg_batch.c) mirror the same numbers in C
-- (cg_store_alloc_mirror).

ALTER TABLE scopes
    ADD COLUMN allocate_from_parent boolean NOT NULL DEFAULT false,
    ADD COLUMN allocated_tokens     bigint  NOT NULL DEFAULT 0,
    ADD CONSTRAINT scopes_allocated CHECK (allocated_tokens >= 0),
    ADD CONSTRAINT scopes_allocate_level CHECK (NOT allocate_from_parent
                                                OR (level > 1 AND has_budget));

-- A child's share of its parent (0 when it is not an open allocated budget).
CREATE FUNCTION cg_alloc_share(allocate boolean, has_budget boolean, closed_at timestamptz,
                               limit_tokens bigint, used_tokens bigint, reserved_tokens bigint)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN allocate AND has_budget AND closed_at IS NULL
                THEN greatest(0::numeric,
                              limit_tokens::numeric - used_tokens - reserved_tokens)::bigint
                ELSE 0 END
$$;

CREATE FUNCTION cg_scopes_alloc_propagate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    before_share bigint := 0;
    after_share  bigint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        before_share := cg_alloc_share(OLD.allocate_from_parent, OLD.has_budget,
                                       OLD.closed_at, OLD.limit_tokens, OLD.used_tokens,
                                       OLD.reserved_tokens);
    END IF;
    after_share := cg_alloc_share(NEW.allocate_from_parent, NEW.has_budget, NEW.closed_at,
                                  NEW.limit_tokens, NEW.used_tokens, NEW.reserved_tokens);
    IF after_share <> before_share THEN
        UPDATE scopes
           SET allocated_tokens = greatest(0, allocated_tokens + (after_share - before_share))
         WHERE tenant_id = NEW.tenant_id AND session_id = NEW.parent_session_id
           AND task_id = NEW.parent_task_id AND agent_id = NEW.parent_agent_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER scopes_alloc_insert
    AFTER INSERT ON scopes FOR EACH ROW WHEN (NEW.allocate_from_parent)
    EXECUTE FUNCTION cg_scopes_alloc_propagate();

CREATE TRIGGER scopes_alloc_update
    AFTER UPDATE OF allocate_from_parent, has_budget, closed_at, limit_tokens, used_tokens,
        reserved_tokens ON scopes
    FOR EACH ROW WHEN (OLD.allocate_from_parent OR NEW.allocate_from_parent)
    EXECUTE FUNCTION cg_scopes_alloc_propagate();

DROP TRIGGER scopes_row_version ON scopes;
CREATE TRIGGER scopes_row_version
    BEFORE UPDATE OF level, has_budget, mode, limit_tokens, limit_cost_micros, warning_ratio,
        backpressure_disabled, tier_ratio, tier_delay_ms, on_store_failure,
        local_allowance_tokens, reset_period, reservation_ttl_ms, description, used_tokens,
        reserved_tokens, used_cost_micros, reserved_cost_micros, version, created_at,
        updated_at, closed_at, updated_by_key_id, period_start, next_reset_at,
        approval_ttl_ms, approved_extra_tokens, row_version, exclude_cache_read_tokens,
        allocate_from_parent, allocated_tokens
    ON scopes FOR EACH ROW EXECUTE FUNCTION cg_scopes_bump_row_version();

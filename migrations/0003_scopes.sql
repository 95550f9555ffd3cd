-- 0003_scopes: indexes for CloseScope, GetUsage and ListScopes (store_pg_scopes.c).
--
-- Applied by the migration runner inside one transaction with its schema_migrations row.
-- Every index starts with tenant_id (DESIGN.md section 5).
--
-- No last_activity_at column: keeping one current needs every Reserve, Commit and
-- RecordUsage to touch it (store_pg_budget.c's path_add), so ListScopes answers
-- UNIMPLEMENTED for LAST_ACTIVITY_DESC until that is done there.

-- The ACTIVE reservations of a subtree: CloseScope locks and releases them, and the
-- usage tree counts them (open_reservations). Partial: settled reservations pile up,
-- active ones are few.
CREATE INDEX reservations_active_scope ON reservations (tenant_id, session_id, task_id, agent_id)
    WHERE state = 1;

-- ListScopes and the children of GetUsage, oldest first: the scopes of one level in creation
-- order (session_id then narrows to one parent).
CREATE INDEX scopes_level_created ON scopes (tenant_id, level, created_at, session_id, task_id,
                                             agent_id);

-- No index on used_tokens: it changes on every Commit and RecordUsage, and an index on it
-- would make each of those updates non-HOT (every index of the row rewritten). ListScopes
-- by USED_TOKENS_DESC sorts the scopes of one level under one parent instead.

-- 0024_budget_gauges: the budgets the metrics rank (ctxguard_budget_used_ratio, read every
-- few seconds by each replica's monitor thread: server/store/store_pg_gauges.c). The ranking
-- reads the tenant and session rows (task_id = '') that have a token limit and are open,
-- across tenants; this partial index lists exactly those, so the read costs what there is
-- to rank, not a scan of every scope.
--
-- Nothing a budget write changes is in it: its columns (tenant_id, level) never move and its
-- predicate's (has_budget, limit_tokens, task_id, closed_at) move only with SetBudget and
-- CloseScope, so the counter writes of Reserve, Commit and RecordUsage stay HOT updates
-- (0014_hot_scopes). used_tokens is read from the rows the index points to.
CREATE INDEX scopes_budgeted_upper ON scopes (tenant_id, level)
    WHERE has_budget AND limit_tokens > 0 AND task_id = '' AND closed_at IS NULL;

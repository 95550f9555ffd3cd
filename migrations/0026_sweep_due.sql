-- 0026_sweep_due: the sweeper finds the tenants that have work due instead of asking every
-- tenant (server/store/store_pg_sweep.c, cg_pg_sweep_due).
--
-- Each pass (sweep_interval_ms, 2 s) used to run six statements for every tenant, due work
-- or not: with a few hundred tenants that was ~1,000 statements a second and ~10 % of the
-- server's CPU under a write load, and it grows with the number of tenants, not with the
-- work. Now one statement reads, for each kind of urgent work, a range of a partial index
-- keyed by the due time: the rows due, whatever the number of tenants. Retention (old
-- events, rollups, deliveries, idle sessions) walks the tenants a page per statement every
-- retention_interval_ms instead.
--
-- These indexes do not start with tenant_id: they are not unique, and a distributed
-- PostgreSQL (Citus) builds them on every shard, where the read runs on each shard.
--
-- Reservations: only ACTIVE rows are in either index, so a Commit or Release (state 1 -> 2
-- or 3) adds no entry to them; reservations_expiry, which the per-tenant expiry and the
-- scope-wide releases use (tenant_id, state = 1, expires_at order), becomes partial the
-- same way. A Reserve adds one entry to each.
DROP INDEX IF EXISTS reservations_expiry;
CREATE INDEX reservations_expiry ON reservations (tenant_id, expires_at) WHERE state = 1;
CREATE INDEX reservations_due ON reservations (expires_at) INCLUDE (tenant_id) WHERE state = 1;

-- Approvals: PENDING ones, by expiry.
CREATE INDEX approvals_due ON approvals (expires_at) INCLUDE (tenant_id) WHERE state = 1;

-- Resets: the tenant rows that have a reset period. next_reset_at and the ids never move
-- with a counter write, so those stay HOT updates (0014_hot_scopes).
CREATE INDEX scopes_reset_due ON scopes (next_reset_at) INCLUDE (tenant_id)
    WHERE session_id = '' AND task_id = '' AND agent_id = '' AND next_reset_at IS NOT NULL;

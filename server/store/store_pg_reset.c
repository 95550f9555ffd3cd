/* store_pg_reset.c - the calendar reset of a tenant budget, applied inside the transaction
 * of whoever locks the tenant row first after a period boundary: a budget read
 * (cg_pg_path_read, store_pg_budget.c) or the sweeper (cg_pg_reset_apply, store_pg_sweep.c).
 * Its own file so that both call it and neither calls the other back. Period boundaries
 * are computed by the functions of migrations/0004_resets.sql on the tenant's wall clock.
 */
#include "store/store_pg_reset.h"

#include <stdio.h>

#include "base/log.h"
#include "store/store_pg_events.h"
#include "store/store_pg_internal.h"

cg_status cg__pg_reset_if_due(struct cg_pg *pg, const char *tenant_id, int64_t now_ms,
                              struct cg_budget_row *tenant_row, bool *applied, struct cg_err *err)
{
    *applied = false;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "reset", err);
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    const char *values[] = {tenant_id, now_text};
    /* The condition is evaluated again on the row as a concurrent transaction left it (READ
     * COMMITTED re-checks an updated row), so a boundary is reset once, by whoever locks
     * the row first after it; reserved counters are live holds and stay. */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "reset",
        "UPDATE scopes s SET used_tokens = 0, used_cost_micros = 0, approved_extra_tokens = 0,"
        " spent_input_tokens = 0, spent_output_tokens = 0, spent_cache_read_tokens = 0,"
        " spent_cache_write_tokens = 0,"
        " period_start = cg_period_start(s.reset_period, t.time_zone,"
        "  to_timestamp($2::int8 / 1e3)),"
        " next_reset_at = cg_period_next(s.reset_period, t.time_zone,"
        "  to_timestamp($2::int8 / 1e3))"
        " FROM tenants t"
        " WHERE t.tenant_id = $1::uuid AND s.tenant_id = $1::uuid AND s.session_id = ''"
        "  AND s.task_id = '' AND s.agent_id = '' AND s.reset_period <> 1"
        "  AND s.next_reset_at <= to_timestamp($2::int8 / 1e3)"
        " RETURNING floor(extract(epoch FROM s.period_start) * 1000)::int8,"
        "  floor(extract(epoch FROM s.next_reset_at) * 1000)::int8",
        2, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) == 1) {
        *applied = true;
        tenant_row->used_tokens = 0;
        tenant_row->used_cost_micros = 0;
        tenant_row->spent_input_tokens = 0;
        tenant_row->spent_output_tokens = 0;
        tenant_row->spent_cache_read_tokens = 0;
        tenant_row->spent_cache_write_tokens = 0;
        tenant_row->approved_extra_tokens = 0; /* a reset ends approved extensions */
        tenant_row->period_start_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
        tenant_row->next_reset_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
        /* WatchUsage: the reset's event commits with it. */
        struct cg_event_in ev = {.type = 8 /* RESET */};
        ev.fields.period_start_ms = tenant_row->period_start_ms;
        rc = cg__pg_events_append(pg, tenant_id, &ev, 1, now_ms, err);
        cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg),
               "tenant budget reset: tenant=%s period_start_ms=%lld next_reset_ms=%lld", tenant_id,
               (long long)tenant_row->period_start_ms, (long long)tenant_row->next_reset_ms);
    }
out:
    PQclear(res);
    return rc;
}

/* store_pg_reset.h - the calendar reset of a tenant budget (internal to server/store; see
 * store.h, "sweeper and resets", for what it means). Used by the budget reads
 * (store_pg_budget.c) and the sweeper (store_pg_sweep.c).
 */
#ifndef CG_STORE_STORE_PG_RESET_H
#define CG_STORE_STORE_PG_RESET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "store/store.h"

struct cg_pg;

/* Inside a transaction (cg_pg_path_read's): applies the reset of the tenant budget when it
 * is due at now_ms; the tenant row is locked by the update (already, when the caller holds
 * the path lock). When applied, *applied is true and tenant_row's used counters and period
 * are set to what was stored; when not (nothing due, or a concurrent transaction that held
 * the row applied it first), *applied is false and tenant_row is untouched. */
cg_status cg__pg_reset_if_due(struct cg_pg *pg, const char *tenant_id, int64_t now_ms,
                              struct cg_budget_row *tenant_row, bool *applied,
                              struct cg_err *err) CG_MUST_CHECK;

#endif

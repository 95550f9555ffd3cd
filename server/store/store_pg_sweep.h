/* store_pg_sweep.h - the PostgreSQL side of the sweeper and of calendar resets (internal
 * to server/store; see store.h, "sweeper and resets", for what they mean).
 *
 * As everywhere in store_pg*: arguments are expected to be checked by the facade
 * (store_sweep.c); errors are statuses with SQL details in the log; a cg_pg belongs to one
 * thread. "now_ms" is always the caller's time in unix milliseconds.
 */
#ifndef CG_STORE_STORE_PG_SWEEP_H
#define CG_STORE_STORE_PG_SWEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "store/store.h"

struct cg_pg;

/* See cg_store_sweep_tenants; after_id "" for the first page. */
cg_status cg_pg_sweep_tenants(struct cg_pg *pg, const char *after_id, int limit,
                              char (*ids)[CG_UUID_LEN + 1], int *count,
                              struct cg_err *err) CG_MUST_CHECK;

/* See cg_store_sweep_due. */
cg_status cg_pg_sweep_due(struct cg_pg *pg, int64_t now_ms, int limit, struct cg_sweep_due *out,
                          int *count, bool *more, struct cg_err *err) CG_MUST_CHECK;

/* See cg_store_reset_apply: its own transaction. */
cg_status cg_pg_reset_apply(struct cg_pg *pg, const char *tenant_id, int64_t now_ms, bool *reset,
                            struct cg_err *err) CG_MUST_CHECK;

/* See cg_store_reservations_expire: its own transaction. */
cg_status cg_pg_reservations_expire(struct cg_pg *pg, const char *tenant_id, int64_t now_ms,
                                    int limit, cg_path_events_fn events, void *ctx, int *expired,
                                    struct cg_err *err) CG_MUST_CHECK;

#endif

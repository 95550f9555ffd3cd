/* store_pg_history.h - the PostgreSQL side of spend history and forecasts
 * (store_pg_history.c), for the facade (store_history.c) only. Contracts in store.h ("spend
 * history"): these take a normalized tenant id and checked arguments. */
#ifndef CG_STORE_PG_HISTORY_H
#define CG_STORE_PG_HISTORY_H

#include "store/store.h"
#include "store/store_pg.h"

cg_status cg_pg_usage_history(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, int resolution, int64_t from_ms,
                              int64_t to_ms, int64_t step_ms, struct cg_usage_point *out, int cap,
                              int *count, struct cg_err *err);
cg_status cg_pg_rollups_expire(struct cg_pg *pg, const char *tenants, int resolution,
                               int64_t before_ms, int limit, int *deleted, struct cg_err *err);

cg_status cg_pg_spend_in_window(struct cg_pg *pg, const char *tenant_id,
                                const struct cg_scope_ids *ids, const bool *exclude_cache_read,
                                int n, int64_t window_ms, int64_t *spent, struct cg_err *err);
cg_status cg_pg_forecast_tenants(struct cg_pg *pg, int64_t window_ms, const char *after_id,
                                 int limit, char (*ids)[CG_UUID_LEN + 1], int *count,
                                 struct cg_err *err);
cg_status cg_pg_forecast_candidates(struct cg_pg *pg, const char *tenant_id, int64_t window_ms,
                                    struct cg_forecast_candidate *out, int cap, int *count,
                                    struct cg_err *err);
cg_status cg_pg_forecast_mark(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, bool *marked, struct cg_err *err);
cg_status cg_pg_forecast_rearm(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_scope_ids *under, int n, int *rearmed,
                               struct cg_err *err);

#endif

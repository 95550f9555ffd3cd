/* store_history.c - the facade of spend history: checks and deadline, then PostgreSQL
 * (store_pg_history.c). Contracts in store.h ("spend history"). */
#include "store/store_internal.h"
#include "store/store_pg_history.h"

#include "core/budget_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROLLUPS_EXPIRE_MAX 100000

int64_t cg_rollup_bucket_ms(cg_rollup_resolution r)
{
    switch (r) {
    case CG_ROLLUP_MINUTE:
        return 60 * 1000;
    case CG_ROLLUP_HOUR:
        return 3600 * 1000;
    case CG_ROLLUP_DAY:
        return 86400 * 1000;
    }
    return 0;
}

cg_status cg_store_usage_history(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, cg_rollup_resolution resolution,
                                 int64_t from_ms, int64_t to_ms, int64_t step_ms,
                                 struct cg_usage_point *out, int cap, int *count,
                                 struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    int64_t bucket = cg_rollup_bucket_ms(resolution);
    if (bucket == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "resolution: must be 1 minute, 2 hour or 3 day");
    if (step_ms <= 0 || step_ms % bucket != 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "step: must be a positive multiple of the resolution's bucket");
    if (from_ms < 0 || to_ms < from_ms)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "from, to: must be 0 <= from <= to");
    if (cap < 1 || out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "cap: must be at least 1");
    return cg_pg_usage_history(store->pg, id, ids, resolution, from_ms, to_ms, step_ms, out, cap,
                               count, err);
}

cg_status cg_store_rollups_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                  int n, const int64_t before_ms[CG_ROLLUP_RESOLUTIONS], int limit,
                                  int *deleted, struct cg_err *err)
{
    *deleted = 0;
    if (limit < 1 || limit > ROLLUPS_EXPIRE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", ROLLUPS_EXPIRE_MAX);
    char *tenants = NULL;
    cg_status rc = cg__store_open_page(store, tenant_ids, n, &tenants, err);
    for (int r = 1; rc == CG_OK && r <= CG_ROLLUP_RESOLUTIONS; r++) {
        if (before_ms[r - 1] <= 0)
            continue;
        int k = 0;
        rc = cg_pg_rollups_expire(store->pg, tenants, r, before_ms[r - 1], limit, &k, err);
        *deleted += k;
    }
    free(tenants);
    return rc;
}

/* ------------------------------------------------------------------ forecasts --- */

#define WINDOW_MAX_MS (1440 * 60 * 1000LL)

cg_status cg_store_spend_in_window(struct cg_store *store, const char *tenant_id,
                                   const struct cg_scope_ids *ids, const bool *exclude_cache_read,
                                   int n, int64_t window_ms, int64_t *spent, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (n < 1 || n > CG_STORE_USAGE_NODES_MAX || window_ms < 1 || window_ms > WINDOW_MAX_MS)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n or window_ms: out of range");
    return cg_pg_spend_in_window(store->pg, id, ids, exclude_cache_read, n, window_ms, spent, err);
}

cg_status cg_store_forecast_tenants(struct cg_store *store, int64_t window_ms, const char *after_id,
                                    int limit, char (*ids)[CG_UUID_LEN + 1], int *count,
                                    struct cg_err *err)
{
    *count = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (window_ms < 1 || window_ms > WINDOW_MAX_MS)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "window_ms: out of range");
    if (ids == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "ids: missing");
    char after[CG_UUID_LEN + 1] = "";
    if (after_id != NULL && after_id[0] != '\0' && !cg__store_normalize_uuid(after_id, after))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: not a tenant id");
    return cg_pg_forecast_tenants(store->pg, window_ms, after, limit, ids, count, err);
}

cg_status cg_store_forecast_candidates(struct cg_store *store, const char *tenant_id,
                                       int64_t window_ms, struct cg_forecast_candidate *out,
                                       int cap, int *count, struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1];
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (!cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    if (cap < 1 || window_ms < 1 || window_ms > WINDOW_MAX_MS)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "cap or window_ms: out of range");
    return cg_pg_forecast_candidates(store->pg, id, window_ms, out, cap, count, err);
}

cg_status cg_store_forecast_alert(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_ids *ids,
                                  const struct cg_event_fields *fields, int64_t now_ms,
                                  bool *alerted, struct cg_err *err)
{
    *alerted = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if ((rc = cg_pg_begin(store->pg, err)) != CG_OK)
        return rc;
    /* The mark first: the replica whose insert wins appends the event; the event locks the
     * scope's row alone (no other row is held: no lock order to keep). */
    rc = cg_pg_forecast_mark(store->pg, id, ids, alerted, err);
    if (rc == CG_OK && *alerted)
        rc = cg_store_event_append(store, id, ids, CG_EVENT_FORECAST_EXHAUSTION, fields, now_ms,
                                   err);
    if (rc == CG_OK)
        rc = cg_pg_commit(store->pg, err);
    if (rc != CG_OK) {
        cg_pg_rollback(store->pg);
        *alerted = false;
    }
    return rc;
}

cg_status cg_store_forecast_rearm(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_ids *under, int n, int *rearmed,
                                  struct cg_err *err)
{
    *rearmed = 0;
    char id[CG_UUID_LEN + 1];
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (!cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    if (n < 0 || (n > 0 && under == NULL))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "under: out of range");
    return cg_pg_forecast_rearm(store->pg, id, under, n, rearmed, err);
}

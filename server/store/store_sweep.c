/* store_sweep.c - the facade of the sweeper and of resets: checks, deadline, then
 * PostgreSQL (store_pg_sweep.c). See store.h, "sweeper and resets". */
#include <string.h>

#include "store/store_internal.h"
#include "store/store_pg_sweep.h"

cg_status cg_store_sweep_tenants(struct cg_store *store, const char *after_id, int limit,
                                 char (*ids)[CG_UUID_LEN + 1], int *count, struct cg_err *err)
{
    *count = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (ids == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "ids: missing");
    char after[CG_UUID_LEN + 1] = "";
    if (after_id != NULL && after_id[0] != '\0' && !cg__store_normalize_uuid(after_id, after))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: not a tenant id");
    return cg_pg_sweep_tenants(store->pg, after, limit, ids, count, err);
}

cg_status cg_store_sweep_due(struct cg_store *store, int64_t now_ms, int limit,
                             struct cg_sweep_due *out, int *count, bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "out: missing");
    return cg_pg_sweep_due(store->pg, now_ms, limit, out, count, more, err);
}

cg_status cg_store_reset_apply(struct cg_store *store, const char *tenant_id, int64_t now_ms,
                               bool *reset, struct cg_err *err)
{
    *reset = false;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    return cg_pg_reset_apply(store->pg, id, now_ms, reset, err);
}

cg_status cg_store_reservations_expire(struct cg_store *store, const char *tenant_id,
                                       int64_t now_ms, int limit, int *expired, struct cg_err *err)
{
    return cg_store_reservations_expire_events(store, tenant_id, now_ms, limit, NULL, NULL, expired,
                                               err);
}

cg_status cg_store_reservations_expire_events(struct cg_store *store, const char *tenant_id,
                                              int64_t now_ms, int limit, cg_path_events_fn events,
                                              void *ctx, int *expired, struct cg_err *err)
{
    *expired = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CG_SWEEP_BATCH_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_SWEEP_BATCH_MAX);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    return cg_pg_reservations_expire(store->pg, id, now_ms, limit, events, ctx, expired, err);
}

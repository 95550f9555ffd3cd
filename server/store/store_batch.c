/* store_batch.c - the facade of batched budget writes: argument checks and the call's
 * deadline, then PostgreSQL (store_pg_batch.c). */
#include "store/store_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/crypto.h"

static cg_status check_count(int n, struct cg_err *err)
{
    if (n < 0 || n > CG_BATCH_MAX * CG_PATH_ROWS_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: out of range");
    return CG_OK;
}

/* The checks every batch call starts with: the call's deadline, n, and that tenants[i] is a
 * canonical lower-case UUID (name[i] in the message otherwise). */
static cg_status open_batch(const struct cg_store *store, const char *const *tenants, int n,
                            const char *name, struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    cg_status rc = check_count(n, err);
    for (int i = 0; rc == CG_OK && i < n; i++) {
        if (!cg__store_uuid_is_canonical(tenants[i]))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "%s[%d]: not a canonical tenant UUID", name,
                            i);
    }
    return rc;
}

cg_status cg_store_batch_lock_reservations(struct cg_store *store, const char *const *tenants,
                                           char (*const ids)[CG_UUID_LEN + 1], int n,
                                           struct cg_reservation *out, bool *found,
                                           struct cg_err *err)
{
    cg_status rc = open_batch(store, tenants, n, "tenants", err);
    for (int i = 0; rc == CG_OK && i < n; i++) {
        if (!cg__store_uuid_is_canonical(ids[i]))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "ids[%d]: not a canonical UUID", i);
    }
    if (rc != CG_OK)
        return rc;
    return cg_pg_batch_lock_reservations(store->pg, tenants, ids, n, out, found, err);
}

cg_status cg_store_batch_lock_scopes(struct cg_store *store, const char *const *tenants,
                                     const struct cg_scope_ids *keys, int n,
                                     struct cg_budget_row *out, char (*row_tenant)[CG_UUID_LEN + 1],
                                     int cap, int *nout, struct cg_err *err)
{
    *nout = 0;
    cg_status rc = open_batch(store, tenants, n, "tenants", err);
    for (int i = 0; rc == CG_OK && i < n; i++)
        rc = cg__store_check_ids(&keys[i], "keys", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_batch_lock_scopes(store->pg, tenants, keys, n, out, row_tenant, cap, nout, err);
}

cg_status cg_store_batch_keys_used(struct cg_store *store, const char *const *tenants,
                                   const char *const *keys, int n, bool *used, struct cg_err *err)
{
    cg_status rc = open_batch(store, tenants, n, "tenants", err);
    for (int i = 0; rc == CG_OK && i < n; i++)
        rc = cg__store_check_text(keys[i], 0, CG_IDEMPOTENCY_MAX, 0, "keys", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_batch_keys_used(store->pg, tenants, keys, n, used, err);
}

cg_status cg_store_batch_write(struct cg_store *store, const struct cg_batch_write *w,
                               struct cg_err *err)
{
    cg_status rc = check_count(w->n_new + w->n_settle + w->n_ledger + w->n_counters, err);
    if (rc == CG_OK)
        rc = open_batch(store, w->counter_tenants, w->n_counters, "counter_tenants", err);
    if (rc == CG_OK)
        rc = open_batch(store, w->event_tenants, w->n_events, "event_tenants", err);
    for (int i = 0; rc == CG_OK && i < w->n_new; i++)
        rc = open_batch(store, &w->new_res[i].tenant_id, 1, "new_res.tenant_id", err);
    for (int i = 0; rc == CG_OK && i < w->n_settle; i++)
        rc = open_batch(store, &w->settle[i].tenant_id, 1, "settle.tenant_id", err);
    for (int i = 0; rc == CG_OK && i < w->n_ledger; i++)
        rc = open_batch(store, &w->ledger[i].tenant_id, 1, "ledger.tenant_id", err);
    if (rc != CG_OK)
        return rc;
    for (int i = 0; i < w->n_counters; i++) {
        const struct cg_budget_row *c = &w->counters[i];
        if (c->used_tokens < 0 || c->reserved_tokens < 0 || c->used_cost_micros < 0 ||
            c->reserved_cost_micros < 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT, "counters[%d]: negative", i);
    }
    return cg_pg_batch_write(store->pg, w, err);
}

cg_status cg_store_uuid(char out[CG_UUID_LEN + 1])
{
    uint8_t b[16];
    if (cg_random_bytes(b, sizeof b) != CG_OK)
        return CG_INTERNAL;
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    /* 8-4-4-4-12 lower-case hex digits (not printf: every Reserve and Commit makes one, and
     * printf showed in the server's profile). */
    static const int group[] = {4, 2, 2, 2, 6};
    char *p = out;
    const uint8_t *in = b;
    for (int g = 0; g < 5; g++) {
        if (g > 0)
            *p++ = '-';
        cg_hex_encode(in, (size_t)group[g], p);
        in += group[g];
        p += 2 * group[g];
    }
    return CG_OK;
}

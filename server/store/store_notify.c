/* store_notify.c - the facade of notification channels and their outbox: checks and the
 * deadline, then PostgreSQL (store_pg_notify.c). Contracts in store_notify.h. */
#include "store/store_internal.h"
#include "store/store_notify.h"
#include "store/store_pg_notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLAIM_MAX 1000

cg_status cg_store_channel_create(struct cg_store *store, const char *tenant_id,
                                  const struct cg_channel *in, const struct cg_audit *audit,
                                  struct cg_channel *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (in->kind < 1 || in->kind > 2 || in->n_event_types < 0 ||
        in->n_event_types > CG_NOTIFY_EVENT_TYPES_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "kind or event_types: out of range");
    return cg_pg_channel_create(store->pg, id, in, audit, out, err);
}

cg_status cg_store_channel_list(struct cg_store *store, const char *tenant_id,
                                struct cg_channel *out, int cap, int *count, struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (cap < 1 || out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "cap: must be at least 1");
    return cg_pg_channel_list(store->pg, id, out, cap, count, err);
}

cg_status cg_store_channel_delete(struct cg_store *store, const char *tenant_id,
                                  const char *channel_id, const struct cg_audit *audit,
                                  struct cg_channel *out, int64_t *dropped, struct cg_err *err)
{
    *dropped = 0;
    char id[CG_UUID_LEN + 1], ch[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (!cg__store_normalize_uuid(channel_id, ch))
        return cg_err_set(err, CG_NOT_FOUND, "channel_id: no such channel");
    return cg_pg_channel_delete(store->pg, id, ch, audit, out, dropped, err);
}

cg_status cg_store_delivery_list(struct cg_store *store, const char *tenant_id, int state,
                                 const char *channel_id, const struct cg_delivery_cursor *after,
                                 int limit, struct cg_delivery *out, int *count, bool *more,
                                 struct cg_delivery_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char id[CG_UUID_LEN + 1], ch[CG_UUID_LEN + 1] = "";
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (state < 0 || state > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "state: must be 0..3");
    if (limit < 1 || limit > CG_STORE_PAGE_MAX || out == NULL || next == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (channel_id[0] != '\0' && !cg__store_normalize_uuid(channel_id, ch))
        return cg_err_set(err, CG_NOT_FOUND, "channel_id: no such channel");
    if (after != NULL && !cg__store_normalize_uuid(after->delivery_id, (char[CG_UUID_LEN + 1]){0}))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "after: not a delivery id");
    return cg_pg_delivery_list(store->pg, id, state, ch, after, limit, out, count, more, next, err);
}

cg_status cg_store_delivery_redrive(struct cg_store *store, const char *tenant_id,
                                    const char *const *ids, int n, bool all_dead,
                                    const char *channel_id, const struct cg_audit *audit,
                                    int64_t *count, struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1], ch[CG_UUID_LEN + 1] = "";
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (n < 0 || n > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "delivery_ids: at most %d", CG_STORE_PAGE_MAX);
    if (channel_id[0] != '\0' && !cg__store_normalize_uuid(channel_id, ch))
        return cg_err_set(err, CG_NOT_FOUND, "channel_id: no such channel");
    /* "{id,id,...}": every id a canonical UUID, so no quoting is needed. */
    char *lit = malloc((size_t)n * (CG_UUID_LEN + 1) + 3);
    if (lit == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    size_t len = 0;
    lit[len++] = '{';
    for (int i = 0; i < n; i++) {
        char u[CG_UUID_LEN + 1];
        if (!cg__store_normalize_uuid(ids[i], u)) {
            free(lit);
            return cg_err_set(err, CG_INVALID_ARGUMENT, "delivery_ids[%d]: not a delivery id", i);
        }
        if (i > 0)
            lit[len++] = ',';
        memcpy(lit + len, u, CG_UUID_LEN);
        len += CG_UUID_LEN;
    }
    lit[len++] = '}';
    lit[len] = '\0';
    rc = cg_pg_delivery_redrive(store->pg, id, lit, all_dead, ch, audit, count, err);
    free(lit);
    return rc;
}

cg_status cg_store_outbox_claim(struct cg_store *store, int64_t lease_ms, int limit,
                                struct cg_outbox_item *out, int *count, struct cg_err *err)
{
    *count = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CLAIM_MAX || lease_ms < 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit or lease_ms: out of range");
    return cg_pg_outbox_claim(store->pg, lease_ms, limit, out, count, err);
}

void cg_outbox_items_free(struct cg_outbox_item *items, int n)
{
    for (int i = 0; i < n; i++) {
        free(items[i].body);
        items[i].body = NULL;
    }
}

cg_status cg_store_outbox_settle(struct cg_store *store, const struct cg_outbox_item *item,
                                 bool delivered, int http_status, const char *error,
                                 int64_t retry_ms, struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_outbox_settle(store->pg, item->tenant_id, item->delivery_id, item->attempts,
                               delivered, http_status, error ? error : "", retry_ms, err);
}

cg_status cg_store_outbox_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t before_ms, int limit, int *deleted,
                                 struct cg_err *err)
{
    *deleted = 0;
    if (limit < 1 || limit > CLAIM_MAX * 100)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: out of range");
    char *tenants = NULL;
    cg_status rc = cg__store_open_page(store, tenant_ids, n, &tenants, err);
    if (rc == CG_OK)
        rc = cg_pg_outbox_expire(store->pg, tenants, before_ms, limit, deleted, err);
    free(tenants);
    return rc;
}

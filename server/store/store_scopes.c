/* store_scopes.c - the facade of CloseScope, the usage tree and the scope listing: checks,
 * deadline and the transaction around each call, then PostgreSQL (store_pg_scopes.c). */
#include "store/store_internal.h"

#include "base/clock.h"
#include "store/store_pg_events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined in store_pg_scopes.c (see the note there); contracts in store.h. */
cg_status cg_pg_scope_close(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                            struct cg_scope_close *out, struct cg_err *err);
cg_status cg_pg_usage_tree(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                           int depth, int max_children, bool include_closed,
                           struct cg_usage_tree *out, struct cg_err *err);
cg_status cg_pg_scope_list(struct cg_pg *pg, const char *tenant_id,
                           const struct cg_scope_ids *parent, int level, bool include_closed,
                           int order, const struct cg_scope_cursor *after, int limit,
                           struct cg_scope_usage *out, int *count, bool *more,
                           struct cg_scope_cursor *next, struct cg_err *err);

/* Ends the call's transaction: commits after rc == CG_OK, else rolls back. */
static cg_status close_call(struct cg_store *store, cg_status rc, struct cg_err *err)
{
    if (rc == CG_OK) {
        if (cg__store_deadline_passed(store))
            rc = cg__store_deadline_exceeded(err);
        else
            rc = cg_pg_commit(store->pg, err);
    }
    if (rc != CG_OK)
        cg_pg_rollback(store->pg);
    return rc;
}

cg_status cg_store_scope_close(struct cg_store *store, const char *tenant_id,
                               const struct cg_scope_ids *ids, struct cg_scope_close *out,
                               struct cg_err *err)
{
    return cg_store_scope_close_events(store, tenant_id, ids, NULL, NULL, NULL, out, err);
}

cg_status cg_store_scope_close_events(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids,
                                      cg_scope_close_events_fn events, void *ctx,
                                      const struct cg_audit *audit, struct cg_scope_close *out,
                                      struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (cg_scope_level(ids) == 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "scope: the tenant scope cannot be closed (name a session, task or"
                          " agent)");
    if ((rc = cg_pg_begin(store->pg, err)) != CG_OK)
        return rc;
    rc = cg_pg_scope_close(store->pg, id, ids, out, err);
    /* WatchUsage's SCOPE_CLOSED commits with the close, or neither happens. */
    struct cg_event_in ev[CG_STORE_CLOSE_EVENTS_MAX + 1];
    int nev = 0;
    if (rc == CG_OK && events != NULL) {
        /* The path's own events (a share returned to the parent, released reservations),
         * computed by the caller from the rows before and after. */
        nev = events(ctx, out->path_before, out->path_after, out->npath, ev,
                     CG_STORE_CLOSE_EVENTS_MAX);
        if (nev < 0 || nev > CG_STORE_CLOSE_EVENTS_MAX) {
            nev = 0;
            rc = cg_err_set(err, CG_INTERNAL, "scope_close: too many events");
        }
    }
    if (rc == CG_OK && !out->already_closed) {
        memset(&ev[nev], 0, sizeof ev[nev]);
        ev[nev].ids = *ids;
        ev[nev].type = 10; /* SCOPE_CLOSED */
        nev++;
    }
    if (rc == CG_OK && nev > 0)
        rc = cg__pg_events_append(store->pg, id, ev, nev, cg_wall_ms(), err);
    /* The audit row of a close that changed something (a repeated close that found nothing
     * open changed nothing); its figures are counted across the close's statements. */
    if (rc == CG_OK && (!out->already_closed || out->closed_scopes > 0 ||
                        out->released_reservations > 0 || out->expired_approvals > 0)) {
        char before[64], after[256];
        snprintf(before, sizeof before, "{\"closed\": %s}", out->already_closed ? "true" : "false");
        snprintf(after, sizeof after,
                 "{\"closed\": true, \"closed_scopes\": %u, \"released_reservations\": %u,"
                 " \"released_tokens\": %lld, \"released_cost_micros\": %lld,"
                 " \"expired_approvals\": %u}",
                 out->closed_scopes, out->released_reservations, (long long)out->released_tokens,
                 (long long)out->released_cost_micros, out->expired_approvals);
        rc =
            cg_pg_audit_append(store->pg, id, audit, "scope_closed", ids, NULL, before, after, err);
    }
    rc = close_call(store, rc, err);
    if (rc != CG_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

cg_status cg_store_usage_tree(struct cg_store *store, const char *tenant_id,
                              const struct cg_scope_ids *ids, int depth, int max_children,
                              bool include_closed, struct cg_usage_tree *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (depth < 0 || depth > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "depth: must be 0..3");
    if (max_children < 1 || max_children > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "max_children: must be 1..%d",
                          CG_STORE_PAGE_MAX);
    if ((rc = cg_pg_begin(store->pg, err)) != CG_OK)
        return rc;
    rc = cg_pg_usage_tree(store->pg, id, ids, depth, max_children, include_closed, out, err);
    rc = close_call(store, rc, err);
    if (rc != CG_OK)
        cg_usage_tree_cleanup(out);
    return rc;
}

void cg_usage_tree_cleanup(struct cg_usage_tree *tree)
{
    if (tree == NULL)
        return;
    free(tree->nodes);
    tree->nodes = NULL;
    tree->count = 0;
}

cg_status cg_store_scope_list(struct cg_store *store, const char *tenant_id,
                              const struct cg_scope_ids *parent, int level, bool include_closed,
                              int order, const struct cg_scope_cursor *after, int limit,
                              struct cg_scope_usage *out, int *count, bool *more,
                              struct cg_scope_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(parent, "parent", err);
    if (rc != CG_OK)
        return rc;
    if (level <= cg_scope_level(parent) || level > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "level: must be below the parent's level");
    if (order < 1 || order > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "order: must be 1 CREATED_ASC or 3 USED_TOKENS_DESC");
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (out == NULL || next == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "out: missing");
    if (after != NULL && (rc = cg__store_check_ids(&after->ids, "after", err)) != CG_OK)
        return rc;
    if ((rc = cg_pg_begin(store->pg, err)) != CG_OK)
        return rc;
    rc = cg_pg_scope_list(store->pg, id, parent, level, include_closed, order, after, limit, out,
                          count, more, next, err);
    rc = close_call(store, rc, err);
    if (rc != CG_OK) {
        *count = 0;
        *more = false;
    }
    return rc;
}

cg_status cg_store_usage_by_model(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_usage *nodes, int n, int per_node,
                                  struct cg_model_usage *out, int cap, int *count,
                                  struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (n < 0 || n > CG_STORE_USAGE_NODES_MAX || per_node < 1 || cap < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n, per_node or cap: out of range");
    if (n == 0)
        return CG_OK;
    return cg_pg_usage_by_model(store->pg, id, nodes, n, per_node, out, cap, count, err);
}

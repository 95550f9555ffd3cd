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

/* 1 tenant .. 4 agent: the level that well-formed ids name. */
static int scope_depth(const struct cg_scope_ids *ids)
{
    if (ids->session_id[0] == '\0')
        return 1;
    if (ids->task_id[0] == '\0')
        return 2;
    if (ids->agent_id[0] == '\0')
        return 3;
    return 4;
}

/* One id: terminated within its array, at most CG_SCOPE_ID_MAX bytes, valid UTF-8. */
static cg_status check_id(const char *id, size_t cap, const char *field, struct cg_err *err)
{
    size_t n = strnlen(id, cap);
    if (n == cap || n > CG_SCOPE_ID_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: longer than %d bytes", field,
                          CG_SCOPE_ID_MAX);
    if (cg__store_utf8_chars(id) < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: not valid UTF-8", field);
    return CG_OK;
}

/* The same rules as the budget functions (store_budget.c): each id checked, a task needs a
 * session and an agent a task. prefix names the argument ("scope", "parent"). */
static cg_status check_scope_ids(const struct cg_scope_ids *ids, const char *prefix,
                                 struct cg_err *err)
{
    if (ids == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: missing", prefix);
    char field[32];
    snprintf(field, sizeof field, "%s.session_id", prefix);
    cg_status rc = check_id(ids->session_id, sizeof ids->session_id, field, err);
    snprintf(field, sizeof field, "%s.task_id", prefix);
    if (rc == CG_OK)
        rc = check_id(ids->task_id, sizeof ids->task_id, field, err);
    snprintf(field, sizeof field, "%s.agent_id", prefix);
    if (rc == CG_OK)
        rc = check_id(ids->agent_id, sizeof ids->agent_id, field, err);
    if (rc != CG_OK)
        return rc;
    if (ids->task_id[0] != '\0' && ids->session_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s.task_id: needs a %s.session_id", prefix,
                          prefix);
    if (ids->agent_id[0] != '\0' && ids->task_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s.agent_id: needs a %s.task_id", prefix,
                          prefix);
    return CG_OK;
}

/* Opens the call's transaction after the common checks; *id gets the normalized tenant. */
static cg_status open_call(struct cg_store *store, const char *tenant_id, char id[CG_UUID_LEN + 1],
                           struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    return CG_OK;
}

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
    memset(out, 0, sizeof *out);
    char id[CG_UUID_LEN + 1];
    cg_status rc = open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = check_scope_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (scope_depth(ids) == 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "scope: the tenant scope cannot be closed (name a session, task or"
                          " agent)");
    if ((rc = cg_pg_begin(store->pg, err)) != CG_OK)
        return rc;
    rc = cg_pg_scope_close(store->pg, id, ids, out, err);
    /* WatchUsage's SCOPE_CLOSED commits with the close, or neither happens. */
    if (rc == CG_OK && !out->already_closed) {
        struct cg_event_in ev;
        memset(&ev, 0, sizeof ev);
        ev.ids = *ids;
        ev.type = 10; /* SCOPE_CLOSED */
        rc = cg__pg_events_append(store->pg, id, &ev, 1, cg_wall_ms(), err);
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
    cg_status rc = open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = check_scope_ids(ids, "scope", err);
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
    cg_status rc = open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = check_scope_ids(parent, "parent", err);
    if (rc != CG_OK)
        return rc;
    if (level <= scope_depth(parent) || level > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "level: must be below the parent's level");
    if (order != 1 && order != 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "order: must be 1 CREATED_ASC or 3 USED_TOKENS_DESC");
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (out == NULL || next == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "out: missing");
    if (after != NULL && (rc = check_scope_ids(&after->ids, "after", err)) != CG_OK)
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

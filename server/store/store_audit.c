/* store_audit.c - the facade of the audit trail's listing: checks and the deadline, then
 * PostgreSQL (store_pg_audit.c). The rows themselves are written by the store functions of
 * the changes they record, in their transactions. */
#include "store/store_internal.h"

#include <stdlib.h>
#include <string.h>

/* [a-z_]{1,CG_AUDIT_KIND_MAX}, as the table's CHECK. */
static bool kind_valid(const char *kind)
{
    size_t len = strlen(kind);
    return len >= 1 && len <= CG_AUDIT_KIND_MAX &&
           strspn(kind, "abcdefghijklmnopqrstuvwxyz_") == len;
}

static const char *or_empty(const char *s)
{
    return s != NULL ? s : "";
}

cg_status cg_store_audit_list(struct cg_store *store, const char *tenant_id,
                              const struct cg_audit_filter *filter, int64_t before_id, int limit,
                              struct cg_audit_event *out, int *count, bool *more,
                              struct cg_err *err)
{
    *count = 0;
    *more = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_NOT_FOUND)
        return CG_OK; /* a tenant id that is not a UUID has no rows */
    if (rc != CG_OK)
        return rc;
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (before_id < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "before_id: must not be negative");
    if (filter->has_scope && (rc = cg__store_check_ids(&filter->scope, "scope", err)) != CG_OK)
        return rc;
    const char *bound_session = or_empty(filter->bound_session_id);
    const char *bound_task = or_empty(filter->bound_task_id);
    if (strlen(bound_session) > CG_SCOPE_ID_MAX || strlen(bound_task) > CG_SCOPE_ID_MAX ||
        (bound_task[0] != '\0' && bound_session[0] == '\0'))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "bound scope: invalid");
    const char *actor = or_empty(filter->actor_key_id);
    if (filter->has_actor && actor[0] != '\0' && !cg__store_key_id_valid(actor))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "actor_key_id: not a key id");
    const char *kind = or_empty(filter->kind);
    if (kind[0] != '\0' && !kind_valid(kind))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "kind: must be 1..%d of [a-z_]",
                          CG_AUDIT_KIND_MAX);
    if (filter->since_ms < 0 || filter->until_ms < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: must not be negative",
                          filter->since_ms < 0 ? "since" : "until");
    if (out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "out: missing");
    struct cg_audit_filter f = *filter;
    f.bound_session_id = bound_session;
    f.bound_task_id = bound_task;
    f.actor_key_id = actor;
    f.kind = kind;
    if (!f.has_scope)
        memset(&f.scope, 0, sizeof f.scope);
    return cg_pg_audit_list(store->pg, id, &f, before_id, limit, out, count, more, err);
}

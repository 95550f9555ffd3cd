/* store_pg_audit.c - the audit trail in PostgreSQL (store.h "the audit trail"): the actor's
 * parameters, the row of a change computed across statements, and the operators' listing.
 * See store_pg.c for how statements run.
 */
#include "store/store_pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Here, next to the reads that malloc the JSON it frees (the facade, store_audit.c, only
 * checks arguments). */
void cg_audit_events_cleanup(struct cg_audit_event *events, int count)
{
    for (int i = 0; i < count; i++) {
        free(events[i].before_json);
        free(events[i].after_json);
        events[i].before_json = NULL;
        events[i].after_json = NULL;
    }
}

void cg__pg_actor(const struct cg_audit *audit, struct cg__pg_actor *out)
{
    out->key_id = audit != NULL && audit->actor_key_id != NULL ? audit->actor_key_id : "";
    snprintf(out->role, sizeof out->role, "%d", audit != NULL ? audit->actor_role : 0);
    const char *rid = audit != NULL && audit->request_id != NULL ? audit->request_id : "";
    cg__pg_copy_str(out->request_id, sizeof out->request_id, rid);
}

cg_status cg_pg_audit_append(struct cg_pg *pg, const char *tenant_id, const struct cg_audit *audit,
                             const char *kind, const struct cg_scope_ids *ids, const char *target,
                             const char *before_json, const char *after_json, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "audit_append", err);
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id,
                            actor.key_id,
                            actor.role,
                            kind,
                            ids != NULL ? ids->session_id : "",
                            ids != NULL ? ids->task_id : "",
                            ids != NULL ? ids->agent_id : "",
                            target != NULL ? target : "",
                            before_json,
                            after_json,
                            actor.request_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "audit_append",
                              AUDIT_INSERT " VALUES ($1::uuid, $2::text, $3::int2, $4::text,"
                                           " $5::text, $6::text, $7::text, $8::text, $9::jsonb,"
                                           " $10::jsonb, $11::text)",
                              11, values, NULL, NULL, 0, &res, err);
    PQclear(res);
    return rc;
}

/* Columns of a listed row: before and after longer than CG_AUDIT_JSON_MAX are replaced by a
 * marker object, never cut (a cut would not be JSON). */
#define AUDIT_JSON_COLUMNS                                                                         \
    "CASE WHEN octet_length(before::text) > 65536 THEN '{\"cut_off\": true}'"                      \
    " ELSE before::text END,"                                                                      \
    " CASE WHEN octet_length(after::text) > 65536 THEN '{\"cut_off\": true}'"                      \
    " ELSE after::text END"

_Static_assert(CG_AUDIT_JSON_MAX == 65536, "AUDIT_JSON_COLUMNS' bound");

static char *json_copy(PGresult *res, int row, int col, bool *oom)
{
    if (PQgetisnull(res, row, col))
        return NULL;
    char *s = strdup(PQgetvalue(res, row, col));
    if (s == NULL)
        *oom = true;
    return s;
}

/* Newest first by audit_id, which the primary key (tenant_id, audit_id) serves; the page
 * token is the last audit_id of the page. The scope filter ($3..$6) takes the scope and what
 * is under it; the bound key's subtree ($7, $8) leaves out other sessions and the rows
 * without a scope. */
static const char list_sql[] =
    "SELECT audit_id, floor(extract(epoch FROM at) * 1000)::int8, actor_key_id, actor_role,"
    " kind, session_id, task_id, agent_id, target, " AUDIT_JSON_COLUMNS ", request_id"
    " FROM audit_events"
    " WHERE tenant_id = $1::uuid"
    "  AND ($2::int8 = 0 OR audit_id < $2::int8)"
    "  AND (NOT $3::boolean OR (($4::text = '' OR session_id = $4::text)"
    "   AND ($5::text = '' OR task_id = $5::text) AND ($6::text = '' OR agent_id = $6::text)))"
    "  AND ($7::text = '' OR (session_id = $7::text"
    "   AND ($8::text = '' OR task_id = $8::text)))"
    "  AND (NOT $9::boolean OR actor_key_id = $10::text)"
    "  AND ($11::text = '' OR kind = $11::text)"
    "  AND ($12::int8 = 0 OR at >= to_timestamp($12::int8 / 1000.0))"
    "  AND ($13::int8 = 0 OR at < to_timestamp($13::int8 / 1000.0))"
    " ORDER BY audit_id DESC LIMIT $14::int";

cg_status cg_pg_audit_list(struct cg_pg *pg, const char *tenant_id,
                           const struct cg_audit_filter *filter, int64_t before_id, int limit,
                           struct cg_audit_event *out, int *count, bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char before[24], since[24], until[24], limit_text[16];
    snprintf(before, sizeof before, "%lld", (long long)before_id);
    snprintf(since, sizeof since, "%lld", (long long)filter->since_ms);
    snprintf(until, sizeof until, "%lld", (long long)filter->until_ms);
    /* One row more than asked tells whether another page exists. */
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    const struct cg_scope_ids *sc = &filter->scope;
    const char *values[] = {tenant_id,
                            before,
                            filter->has_scope ? "t" : "f",
                            sc->session_id,
                            sc->task_id,
                            sc->agent_id,
                            filter->bound_session_id ? filter->bound_session_id : "",
                            filter->bound_task_id ? filter->bound_task_id : "",
                            filter->has_actor ? "t" : "f",
                            filter->actor_key_id ? filter->actor_key_id : "",
                            filter->kind ? filter->kind : "",
                            since,
                            until,
                            limit_text};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "audit_list", list_sql, 14, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        goto out;
    int rows = PQntuples(res);
    int n = rows > limit ? limit : rows;
    bool oom = false;
    for (int i = 0; i < n && !oom; i++) {
        struct cg_audit_event *e = &out[i];
        memset(e, 0, sizeof *e);
        e->audit_id = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        e->at_ms = cg__pg_parse_i64(PQgetvalue(res, i, 1));
        cg__pg_copy_str(e->actor_key_id, sizeof e->actor_key_id, PQgetvalue(res, i, 2));
        e->actor_role = (int)cg__pg_parse_i64(PQgetvalue(res, i, 3));
        cg__pg_copy_str(e->kind, sizeof e->kind, PQgetvalue(res, i, 4));
        cg__pg_copy_str(e->ids.session_id, sizeof e->ids.session_id, PQgetvalue(res, i, 5));
        cg__pg_copy_str(e->ids.task_id, sizeof e->ids.task_id, PQgetvalue(res, i, 6));
        cg__pg_copy_str(e->ids.agent_id, sizeof e->ids.agent_id, PQgetvalue(res, i, 7));
        cg__pg_copy_str(e->target, sizeof e->target, PQgetvalue(res, i, 8));
        e->before_json = json_copy(res, i, 9, &oom);
        e->after_json = json_copy(res, i, 10, &oom);
        cg__pg_copy_str(e->request_id, sizeof e->request_id, PQgetvalue(res, i, 11));
        *count = i + 1;
    }
    if (oom) {
        cg_audit_events_cleanup(out, *count);
        *count = 0;
        rc = cg_err_set(err, CG_NOMEM, "out of memory");
        goto out;
    }
    *more = rows > limit;
out:
    PQclear(res);
    return rc;
}

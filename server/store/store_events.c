/* store_events.c - the facade of the event log and of the LISTEN connection: checks,
 * deadline, then PostgreSQL (store_pg_events.c). See store.h, "events". The key
 * notifications' payloads (migrations/0017) are validated here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store_internal.h"
#include "core/budget_events.h"
#include "store/store_pg_events.h"

#define APPEND_MAX 64
#define FETCH_WANTS_MAX 256
#define EXPIRE_LIMIT_MAX 100000
#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_STATEMENT_TIMEOUT_MS 5000
#define MOD "store"

struct cg_store_listener {
    struct cg_pg *pg;
    void *listening; /* the connection LISTEN was sent on (compared, never dereferenced) */
    struct cg_pg_key_payloads keys; /* of the last wait */
    struct cg_pg_row_notices rows;  /* of the last wait */
};

cg_status cg_store_event_append(struct cg_store *store, const char *tenant_id,
                                const struct cg_scope_ids *ids, int type,
                                const struct cg_event_fields *fields, int64_t now_ms,
                                struct cg_err *err)
{
    struct cg_event_in e;
    memset(&e, 0, sizeof e);
    if (ids != NULL)
        e.ids = *ids;
    e.type = type;
    if (fields != NULL)
        e.fields = *fields;
    return cg_store_events_append(store, tenant_id, &e, 1, now_ms, err);
}

cg_status cg_store_events_append(struct cg_store *store, const char *tenant_id,
                                 const struct cg_event_in *events, int n, int64_t now_ms,
                                 struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (events == NULL || n < 1 || n > APPEND_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "events: 1..%d needed", APPEND_MAX);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    for (int i = 0; i < n; i++) {
        cg_status rc = cg__store_check_ids(&events[i].ids, "scope", err);
        if (rc != CG_OK)
            return rc;
        if (events[i].type < 1 || events[i].type > CG_EVENT_TYPE_MAX) /* UsageEventType */
            return cg_err_set(err, CG_INVALID_ARGUMENT, "type: not an event type");
    }
    return cg__pg_events_append(store->pg, id, events, n, now_ms, err);
}

/* The checks of the event reads: the deadline, max in 1..CG_STORE_PAGE_MAX, the ids; the
 * tenant id normalized into id (false: not a UUID, so no events). */
static cg_status read_checks(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, int max, char id[CG_UUID_LEN + 1],
                             bool *any, struct cg_err *err)
{
    *any = false;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (max < 1 || max > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "max: must be 1..%d", CG_STORE_PAGE_MAX);
    cg_status rc = cg__store_check_ids(ids, "scope", err);
    if (rc == CG_OK)
        *any = cg__store_normalize_uuid(tenant_id, id);
    return rc;
}

cg_status cg_store_events_read(struct cg_store *store, const char *tenant_id,
                               const struct cg_scope_ids *ids, int64_t after_seq, int max,
                               struct cg_event *out, int *count, struct cg_err *err)
{
    *count = 0;
    char id[CG_UUID_LEN + 1];
    bool any;
    cg_status rc = read_checks(store, tenant_id, ids, max, id, &any, err);
    if (rc != CG_OK || !any)
        return rc;
    return cg_pg_events_read(store->pg, id, ids, after_seq, max, out, count, err);
}

cg_status cg_store_events_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t before_ms, int limit, int *deleted,
                                 struct cg_err *err)
{
    *deleted = 0;
    if (limit < 1 || limit > EXPIRE_LIMIT_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", EXPIRE_LIMIT_MAX);
    char *tenants = NULL;
    cg_status rc = cg__store_open_page(store, tenant_ids, n, &tenants, err);
    if (rc == CG_OK)
        rc = cg_pg_events_expire(store->pg, tenants, before_ms, limit, deleted, err);
    free(tenants);
    return rc;
}

struct cg_store_listener *cg_store_listener_new(const struct cg_store_opts *opts)
{
    struct cg_store_listener *l = calloc(1, sizeof *l);
    if (l == NULL)
        return NULL;
    l->pg = cg_pg_new(opts->pg_dsn,
                      opts->pg_connect_timeout_ms > 0 ? opts->pg_connect_timeout_ms
                                                      : DEFAULT_CONNECT_TIMEOUT_MS,
                      opts->pg_statement_timeout_ms > 0 ? opts->pg_statement_timeout_ms
                                                        : DEFAULT_STATEMENT_TIMEOUT_MS);
    if (l->pg == NULL) {
        free(l);
        return NULL;
    }
    cg_pg_set_request_id(l->pg, "events");
    cg_pg_set_outage_log(l->pg, opts->outages ? &opts->outages->pg : NULL);
    return l;
}

void cg_store_listener_free(struct cg_store_listener *l)
{
    if (l == NULL)
        return;
    cg_pg_free(l->pg);
    free(l);
}

cg_status cg_store_listener_wait(struct cg_store_listener *l, int timeout_ms,
                                 struct cg_event_notice *out, int max, int *count, bool *relistened,
                                 struct cg_err *err)
{
    *count = 0;
    *relistened = false;
    if (max < 1 || out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "max: must be at least 1");
    return cg_pg_listen_wait(l->pg, &l->listening, timeout_ms < 0 ? 0 : timeout_ms, out, max, count,
                             &l->keys, &l->rows, relistened, err);
}

/* '<tenant uuid>:<key_id>' into out; false when payload is not that. */
static bool parse_key_payload(const char *payload, struct cg_key_notice *out)
{
    const char *colon = strchr(payload, ':');
    if (colon == NULL || colon - payload != CG_UUID_LEN)
        return false;
    char tenant[CG_UUID_LEN + 1];
    memcpy(tenant, payload, CG_UUID_LEN);
    tenant[CG_UUID_LEN] = '\0';
    if (!cg__store_normalize_uuid(tenant, out->tenant_id) || !cg__store_key_id_valid(colon + 1))
        return false;
    memcpy(out->key_id, colon + 1, strlen(colon + 1) + 1); /* at most CG_KEY_ID_LEN */
    return true;
}

bool cg_store_listener_keys(struct cg_store_listener *l, struct cg_key_notice *out, int max,
                            int *count)
{
    *count = 0;
    if (l->keys.overflow || l->keys.count > max)
        return true;
    for (int i = 0; i < l->keys.count; i++) {
        const char *payload = l->keys.payload[i];
        if (strcmp(payload, "*") == 0)
            return true;
        if (parse_key_payload(payload, &out[*count]))
            (*count)++;
        else
            cg_log(CG_LOG_WARN, MOD, NULL, "cg_keys: ignored a notification that names no key");
    }
    return false;
}

const struct cg_row_notice *cg_store_listener_rows(struct cg_store_listener *l, int *count)
{
    int kept = 0;
    for (int i = 0; i < l->rows.count; i++) {
        struct cg_row_notice *r = &l->rows.rows[i];
        char tenant[CG_UUID_LEN + 1];
        if (!cg__store_normalize_uuid(r->tenant_id, tenant)) {
            cg_log(CG_LOG_WARN, MOD, NULL, "cg_rows: ignored a notification that names no tenant");
            continue;
        }
        memcpy(r->tenant_id, tenant, sizeof tenant);
        if (kept != i)
            l->rows.rows[kept] = *r;
        kept++;
    }
    l->rows.count = kept;
    *count = kept;
    return l->rows.rows;
}

/* ---- cg_rows announcements of whole tenants ---- */

#define ANNOUNCE_PENDING_MAX 64 /* tenants kept for the next try */

void cg_store_tenant_announce(struct cg_store *store, const char *tenant_id)
{
    char id[CG_UUID_LEN + 1];
    if (store == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return;
    /* The tenants not announced yet, then this one: "<t1>\x1e<t2>...". */
    char text[ANNOUNCE_PENDING_MAX * (CG_UUID_LEN + 1) + CG_UUID_LEN + 1];
    size_t len = store->announce_len;
    memcpy(text, store->announce_pending, len);
    if (len > 0)
        text[len++] = '\x1e';
    memcpy(text + len, id, CG_UUID_LEN);
    len += CG_UUID_LEN;
    text[len] = '\0';
    struct cg_err err;
    cg_err_clear(&err);
    if (cg_pg_rows_announce(store->pg, text, &err) == CG_OK) {
        store->announce_len = 0;
        return;
    }
    cg_log(CG_LOG_WARN, MOD, NULL,
           "cg_rows: tenant %s changed but not announced (sent again with the next): %s", id,
           cg_err_text(&err));
    size_t from = 0; /* the oldest go when too many wait */
    while (len - from > sizeof store->announce_pending)
        from += CG_UUID_LEN + 1;
    if (from > 0)
        cg_log(CG_LOG_WARN, MOD, NULL,
               "cg_rows: %zu tenant announcements lost; other replicas may serve their rows "
               "for up to cache_row_ttl_ms",
               from / (CG_UUID_LEN + 1));
    store->announce_len = len - from;
    memcpy(store->announce_pending, text + from, store->announce_len);
}

cg_status cg_store_listener_fetch(struct cg_store_listener *l, const char *tenant_id,
                                  const struct cg_event_want *wants, int nwants, int64_t since_ms,
                                  struct cg_event *out, int max, int *count, struct cg_err *err)
{
    *count = 0;
    if (nwants < 0 || nwants > FETCH_WANTS_MAX || (nwants > 0 && wants == NULL))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "wants: at most %d", FETCH_WANTS_MAX);
    if (max < 1 || max > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "max: must be 1..%d", CG_STORE_PAGE_MAX);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    for (int i = 0; i < nwants; i++) {
        cg_status rc = cg__store_check_ids(&wants[i].ids, "scope", err);
        if (rc != CG_OK)
            return rc;
    }
    return cg_pg_events_fetch(l->pg, id, wants, nwants, since_ms, out, max, count, err);
}

cg_status cg_store_event_seq(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t *seq, struct cg_err *err)
{
    *seq = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    cg_status rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    return cg_pg_event_seq(store->pg, id, ids, seq, err);
}

cg_status cg_store_events_since(struct cg_store *store, const char *tenant_id,
                                const struct cg_scope_ids *ids, int level, bool descendants,
                                int64_t since_ms, int max, struct cg_event *out, int *count,
                                bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    if (level < 1 || level > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "level: must be 1..4");
    char id[CG_UUID_LEN + 1];
    bool any;
    cg_status rc = read_checks(store, tenant_id, ids, max, id, &any, err);
    if (rc != CG_OK || !any)
        return rc;
    return cg_pg_events_since(store->pg, id, ids, level, descendants, since_ms, max, out, count,
                              more, err);
}

/* store.c - the storage facade of store.h: validates arguments, checks the deadline, and
 * puts the Redis key cache in front of PostgreSQL. It holds no SQL and no Redis commands;
 * those live in store_pg.c and store_redis.c.
 */
#include "store/store_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/metrics.h"
#include "store/migrate.h"
#include "store/store_pg.h"
#include "store/store_redis.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_STATEMENT_TIMEOUT_MS 5000
#define DEFAULT_REDIS_TIMEOUT_MS 100

/* ------------------------------------------------------------------ validation --- */

/* Copies a canonical UUID (8-4-4-4-12 hex digits, either case) into out in lower case, so
 * that cache keys and comparisons do not depend on the caller's spelling. */
bool cg__store_normalize_uuid(const char *s, char out[CG_UUID_LEN + 1])
{
    if (s == NULL || strlen(s) != CG_UUID_LEN)
        return false;
    for (int i = 0; i < CG_UUID_LEN; i++) {
        char c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return false;
        } else if (c >= 'A' && c <= 'F') {
            c = (char)(c - 'A' + 'a');
        } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            return false;
        }
        out[i] = c;
    }
    out[CG_UUID_LEN] = '\0';
    return true;
}

bool cg__store_uuid_is_canonical(const char *s)
{
    if (s == NULL)
        return false;
    for (int i = 0; i < CG_UUID_LEN; i++) {
        unsigned char c = (unsigned char)s[i]; /* a NUL before the end fails here */
        bool ok = (i == 8 || i == 13 || i == 18 || i == 23)
                      ? c == '-'
                      : (unsigned)(c - '0') < 10u || (unsigned)(c - 'a') < 6u;
        if (!ok)
            return false;
    }
    return s[CG_UUID_LEN] == '\0';
}

bool cg__store_key_id_valid(const char *s)
{
    if (s == NULL)
        return false;
    size_t n = strlen(s);
    if (n == 0 || n > CG_KEY_ID_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok)
            return false;
    }
    return true;
}

/* Number of characters of a UTF-8 string, or -1 when it is not valid UTF-8 (overlong
 * forms, surrogates and code points past U+10FFFF included). */
long cg__store_utf8_chars(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    long chars = 0;
    while (*p) {
        unsigned int c = *p;
        int extra;
        unsigned int cp;
        if (c < 0x80) {
            extra = 0;
            cp = c;
        } else if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return -1;
        }
        for (int i = 1; i <= extra; i++) {
            if ((p[i] & 0xC0) != 0x80)
                return -1;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return -1;
        p += extra + 1;
        chars++;
    }
    return chars;
}

static cg_status check_name(const char *name, bool required, struct cg_err *err)
{
    long chars = cg__store_utf8_chars(name);
    if (chars < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "name: not valid UTF-8");
    if (required && chars == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "name: must not be empty");
    if (chars > CG_NAME_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "name: longer than %d characters", CG_NAME_MAX);
    return CG_OK;
}

/* Rejects what cannot be an IANA zone name before asking PostgreSQL, which decides. */
static cg_status check_time_zone(const char *tz, struct cg_err *err)
{
    size_t n = tz ? strlen(tz) : 0;
    bool ok = n > 0 && n <= CG_TZ_MAX;
    for (size_t i = 0; ok && i < n; i++) {
        char c = tz[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '/' || c == '_' || c == '+' || c == '-';
    }
    if (!ok)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "time_zone: not a time zone name (IANA, e.g. Europe/Paris)");
    return CG_OK;
}

static cg_status check_limit(int limit, struct cg_err *err)
{
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    return CG_OK;
}

bool cg__store_deadline_passed(const struct cg_store *store)
{
    return store->deadline_mono_ms != 0 && cg_mono_ms() >= store->deadline_mono_ms;
}

cg_status cg__store_deadline_exceeded(struct cg_err *err)
{
    return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
}

static bool cache_enabled(const struct cg_store *store)
{
    return store->redis != NULL && store->key_cache_ttl_s > 0;
}

void cg_store_err_scope(struct cg_err *err, const struct cg_scope_ids *ids)
{
    if (err == NULL)
        return;
    char path[CG_ERR_META_VALUE_MAX + 1];
    cg_scope_path_text(ids, path, sizeof path);
    cg_err_meta(err, "scope", path);
}

/* ------------------------------------------------------------------ lifecycle --- */

struct cg_store *cg_store_new(const struct cg_store_opts *opts)
{
    struct cg_store *store = calloc(1, sizeof *store);
    if (store == NULL)
        return NULL;
    int connect_ms =
        opts->pg_connect_timeout_ms > 0 ? opts->pg_connect_timeout_ms : DEFAULT_CONNECT_TIMEOUT_MS;
    int statement_ms = opts->pg_statement_timeout_ms > 0 ? opts->pg_statement_timeout_ms
                                                         : DEFAULT_STATEMENT_TIMEOUT_MS;
    int redis_ms = opts->redis_timeout_ms > 0 ? opts->redis_timeout_ms : DEFAULT_REDIS_TIMEOUT_MS;
    store->meters = opts->meters;
    store->pg = cg_pg_new(opts->pg_dsn, connect_ms, statement_ms);
    if (store->pg == NULL)
        goto fail;
    cg_pg_set_outage_log(store->pg, opts->outages ? &opts->outages->pg : NULL);
    cg_pg_set_meters(store->pg, opts->meters.pg_seconds, opts->meters.pg_errors,
                     CG_METRICS_SHARED_SLOT);
    cg_pg_set_count_meter(store->pg, CG_PG_COUNT_APPROVAL_REQUESTED,
                          opts->meters.approvals_requested);
    cg_pg_set_count_meter(store->pg, CG_PG_COUNT_APPROVAL_APPROVED,
                          opts->meters.approvals_approved);
    cg_pg_set_count_meter(store->pg, CG_PG_COUNT_APPROVAL_DENIED, opts->meters.approvals_denied);
    cg_pg_set_count_meter(store->pg, CG_PG_COUNT_APPROVAL_EXPIRED, opts->meters.approvals_expired);
    if (opts->redis_url != NULL && opts->redis_url[0] != '\0') {
        store->redis = cg_redis_new(opts->redis_url, redis_ms);
        if (store->redis == NULL)
            goto fail;
        cg_redis_set_outage_log(store->redis, opts->outages ? &opts->outages->redis : NULL);
        cg_redis_set_meters(store->redis, opts->meters.redis_seconds, opts->meters.redis_errors,
                            CG_METRICS_SHARED_SLOT);
        cg_redis_cluster_mode mode;
        if (!cg_redis_cluster_mode_parse(opts->redis_cluster, &mode))
            mode = CG_REDIS_CLUSTER_AUTO; /* the config table admits the three words only */
        cg_redis_set_cluster_mode(store->redis, mode);
    }
    store->key_cache_ttl_s = opts->key_cache_ttl_s > 0 ? opts->key_cache_ttl_s : 0;
    return store;
fail:
    cg_store_free(store);
    return NULL;
}

void cg_store_set_metrics_slot(struct cg_store *store, uint32_t slot)
{
    const struct cg_store_meters *m = &store->meters;
    cg_pg_set_meters(store->pg, m->pg_seconds, m->pg_errors, slot);
    if (store->redis != NULL)
        cg_redis_set_meters(store->redis, m->redis_seconds, m->redis_errors, slot);
}

void cg_store_free(struct cg_store *store)
{
    if (store == NULL)
        return;
    cg_pg_free(store->pg);
    cg_redis_free(store->redis);
    free(store);
}

void cg_store_set_deadline(struct cg_store *store, int64_t deadline_mono_ms)
{
    store->deadline_mono_ms = deadline_mono_ms;
    cg_pg_set_deadline(store->pg, deadline_mono_ms);
}

void cg_store_set_request_id(struct cg_store *store, const char *rid)
{
    cg_pg_set_request_id(store->pg, rid);
}

cg_status cg_store_ping(struct cg_store *store, struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_ping(store->pg, err);
}

bool cg_store_redis_ok(const struct cg_store *store)
{
    return cg_redis_ok(store->redis);
}

cg_status cg_store_migrate(struct cg_store *store, int *applied, struct cg_err *err)
{
    if (applied != NULL)
        *applied = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_migrate(store->pg, cg_migrations, applied, err);
}

/* ------------------------------------------------------------------ tenants --- */

cg_status cg_store_tenant_create(struct cg_store *store, const char *name, const char *time_zone,
                                 struct cg_tenant *out, struct cg_err *err)
{
    return cg_store_tenant_create_with(store, name, time_zone, NULL, NULL, out, err);
}

static cg_status check_settings(const struct cg_tenant_settings *s, struct cg_err *err)
{
    if (s->redact_types & ~CG_TENANT_PII_TYPES_MASK)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.redact_types: unknown PiiType");
    if (s->max_call_tokens < 0 || s->max_call_tokens > 100000000)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.max_call_tokens: must be 0..100000000 (0: the default)");
    if (s->history_retention_days < 0 || s->history_retention_days > 36500)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.history_retention_days: must be 0..36500 (0: kept)");
    return CG_OK;
}

cg_status cg_store_tenant_create_with(struct cg_store *store, const char *name,
                                      const char *time_zone,
                                      const struct cg_tenant_settings *settings,
                                      const struct cg_audit *audit, struct cg_tenant *out,
                                      struct cg_err *err)
{
    static const struct cg_tenant_settings defaults = {0};
    if (settings == NULL)
        settings = &defaults;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    cg_status rc = check_name(name ? name : "", true, err);
    if (rc == CG_OK)
        rc = check_time_zone(time_zone, err);
    if (rc == CG_OK)
        rc = check_settings(settings, err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_tenant_create(store->pg, name, time_zone, settings, audit, out, err);
}

cg_status cg_store_tenant_settings_put(struct cg_store *store, const char *tenant_id,
                                       const struct cg_tenant_settings *settings,
                                       const struct cg_audit *audit, struct cg_tenant *out,
                                       struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    cg_status rc = check_settings(settings, err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_tenant_settings_put(store->pg, id, settings, audit, out, err);
}

cg_status cg_store_tenant_get(struct cg_store *store, const char *tenant_id, struct cg_tenant *out,
                              struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    return cg_pg_tenant_get(store->pg, id, out, err);
}

cg_status cg_store_tenant_list(struct cg_store *store, const char *after_id, int limit,
                               struct cg_tenant *out, int *count, bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    cg_status rc = check_limit(limit, err);
    if (rc != CG_OK)
        return rc;
    char id[CG_UUID_LEN + 1] = "";
    if (after_id != NULL && after_id[0] != '\0' && !cg__store_normalize_uuid(after_id, id))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: not a tenant id");
    return cg_pg_tenant_list(store->pg, id, limit, out, count, more, err);
}

/* ------------------------------------------------------------------ API keys --- */

static const char *or_empty(const char *s)
{
    return s != NULL ? s : "";
}

cg_status cg_store_key_create(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const uint8_t secret_hash[32], const struct cg_api_key_spec *spec,
                              const struct cg_audit *audit, struct cg_api_key *out,
                              struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    if (!cg__store_key_id_valid(key_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "key_id: must be 1..%d characters of A-Z a-z 0-9 _ -", CG_KEY_ID_LEN);
    if (secret_hash == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "secret_hash: missing");
    struct cg_api_key_spec s = *spec;
    s.name = or_empty(s.name);
    s.scope_session_id = or_empty(s.scope_session_id);
    s.scope_task_id = or_empty(s.scope_task_id);
    s.created_by_key_id = or_empty(s.created_by_key_id);
    cg_status rc = check_name(s.name, false, err);
    if (rc != CG_OK)
        return rc;
    if (s.role < 1 || s.role > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "role: must be 1..4");
    if (strlen(s.scope_session_id) > CG_SCOPE_ID_MAX || strlen(s.scope_task_id) > CG_SCOPE_ID_MAX ||
        (s.scope_task_id[0] != '\0' && s.scope_session_id[0] == '\0'))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "scope: invalid");
    if (s.expires_at_ms < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "expires_at: negative");
    if (s.created_by_key_id[0] != '\0' && !cg__store_key_id_valid(s.created_by_key_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "created_by_key_id: invalid");
    /* No cache entry can exist for a key id that was never stored (misses are not cached),
     * so there is nothing to invalidate here. */
    return cg_pg_key_create(store->pg, id, key_id, secret_hash, &s, audit, out, err);
}

cg_status cg_store_key_list(struct cg_store *store, const char *tenant_id, int limit,
                            struct cg_api_key *out, int *count, struct cg_err *err)
{
    *count = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    cg_status rc = check_limit(limit, err);
    if (rc != CG_OK)
        return rc;
    char id[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    return cg_pg_key_list(store->pg, id, limit, out, count, err);
}

/* What every call on one key checks first: the deadline, then the tenant (normalized into
 * id) and the key id; a malformed one is a key that does not exist. */
static cg_status key_call_in(const struct cg_store *store, const char *tenant_id,
                             const char *key_id, char id[CG_UUID_LEN + 1], struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (!cg__store_normalize_uuid(tenant_id, id) || !cg__store_key_id_valid(key_id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_API_KEY_NOT_FOUND, "key_id: no such key");
    return CG_OK;
}

cg_status cg_store_key_revoke(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const struct cg_audit *audit, struct cg_api_key *out,
                              struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = key_call_in(store, tenant_id, key_id, id, err);
    if (rc != CG_OK)
        return rc;
    rc = cg_pg_key_revoke(store->pg, id, key_id, audit, out, err);
    /* Marked revoked, not deleted: a lookup elsewhere that read PostgreSQL just before the
     * commit cannot put the key back as valid (cg_redis_key_put keeps a revoked entry).
     * Also when the outcome is unknown (connection lost, timed out): a key marked revoked
     * that is not gets read from PostgreSQL again within key_cache_ttl_s at most. */
    if (store->redis != NULL &&
        (rc == CG_OK || rc == CG_UNAVAILABLE || rc == CG_DEADLINE_EXCEEDED)) {
        if (cache_enabled(store))
            (void)cg_redis_key_revoke(store->redis, id, key_id, store->key_cache_ttl_s);
        else
            (void)cg_redis_key_drop(store->redis, id, key_id);
    }
    return rc;
}

/* cg_store_key_lookup and cg_store_key_lookup_fresh: read_cache says whether Redis is read
 * first. PostgreSQL's answer is written to Redis either way. */
static cg_status key_lookup(struct cg_store *store, const char *tenant_id, const char *key_id,
                            bool read_cache, struct cg_key_auth *out, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = key_call_in(store, tenant_id, key_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (read_cache && cache_enabled(store) && cg_redis_key_get(store->redis, id, key_id, out))
        return CG_OK;
    rc = cg_pg_key_lookup(store->pg, id, key_id, out, err);
    if (rc == CG_OK && cache_enabled(store))
        cg_redis_key_put(store->redis, id, key_id, out, store->key_cache_ttl_s);
    return rc;
}

cg_status cg_store_key_lookup(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_key_auth *out, struct cg_err *err)
{
    return key_lookup(store, tenant_id, key_id, true, out, err);
}

cg_status cg_store_key_lookup_fresh(struct cg_store *store, const char *tenant_id,
                                    const char *key_id, struct cg_key_auth *out, struct cg_err *err)
{
    return key_lookup(store, tenant_id, key_id, false, out, err);
}

cg_status cg_store_key_touch(struct cg_store *store, const char *tenant_id, const char *key_id,
                             struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = key_call_in(store, tenant_id, key_id, id, err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_key_touch(store->pg, id, key_id, err);
}

/* ------------------------------------------------------------------ shared checks --- */

cg_status cg__store_check_text(const char *s, size_t cap, size_t max_bytes, long max_chars,
                               const char *field, struct cg_err *err)
{
    size_t n = cap > 0 ? strnlen(s, cap) : strlen(s);
    if ((cap > 0 && n == cap) || (max_bytes > 0 && n > max_bytes))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: longer than %zu bytes", field,
                          max_bytes > 0 ? max_bytes : cap - 1);
    long chars = cg__store_utf8_chars(s);
    if (chars < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: not valid UTF-8", field);
    if (max_chars > 0 && chars > max_chars)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: longer than %ld characters", field,
                          max_chars);
    return CG_OK;
}

cg_status cg__store_check_ids(const struct cg_scope_ids *ids, const char *prefix,
                              struct cg_err *err)
{
    if (ids == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: missing", prefix);
    const char *parts[] = {ids->session_id, ids->task_id, ids->agent_id};
    const char *names[] = {"session_id", "task_id", "agent_id"};
    for (int i = 0; i < 3; i++) {
        char field[48];
        snprintf(field, sizeof field, "%s.%s", prefix, names[i]);
        cg_status rc =
            cg__store_check_text(parts[i], CG_SCOPE_ID_MAX + 1, CG_SCOPE_ID_MAX, 0, field, err);
        if (rc != CG_OK)
            return rc;
    }
    if (ids->task_id[0] != '\0' && ids->session_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s.task_id: needs a %s.session_id", prefix,
                          prefix);
    if (ids->agent_id[0] != '\0' && ids->task_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s.agent_id: needs a %s.task_id", prefix,
                          prefix);
    return CG_OK;
}

cg_status cg__store_open_call(struct cg_store *store, const char *tenant_id,
                              char id[CG_UUID_LEN + 1], struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (tenant_id == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
    return CG_OK;
}

cg_status cg__store_open_page(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                              int n, char **array, struct cg_err *err)
{
    *array = NULL;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (tenant_ids == NULL || n < 1 || n > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "tenant_ids: must be 1..%d ids",
                          CG_STORE_PAGE_MAX);
    /* "{" id ("," id)* "}": uuids need no quoting. */
    char *a = malloc((size_t)n * (CG_UUID_LEN + 1) + 2);
    if (a == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    char *p = a;
    *p++ = '{';
    for (int i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        if (!cg__store_normalize_uuid(tenant_ids[i], p)) {
            free(a);
            return cg_err_set(err, CG_INVALID_ARGUMENT, "tenant_ids[%d]: not a tenant id", i);
        }
        p += CG_UUID_LEN;
    }
    *p++ = '}';
    *p = '\0';
    *array = a;
    return CG_OK;
}

bool cg_store_uuid_canonical(const char *s, char out[CG_UUID_LEN + 1])
{
    return cg__store_normalize_uuid(s, out);
}

/* ------------------------------------------------------------------ allocation --- */

int64_t cg_store_alloc_share(const struct cg_budget_row *row)
{
    if (row == NULL || !row->allocate_from_parent || !row->has_budget || row->closed_at_ms != 0)
        return 0;
    int64_t held;
    int64_t used = row->used_tokens > 0 ? row->used_tokens : 0;
    int64_t reserved = row->reserved_tokens > 0 ? row->reserved_tokens : 0;
    if (__builtin_add_overflow(used, reserved, &held) || held >= row->limit_tokens)
        return 0;
    return row->limit_tokens - held;
}

void cg_store_alloc_mirror(struct cg_budget_row *rows, int n, const int64_t *share_before,
                           bool add_allocated)
{
    for (int i = 0; i < n; i++) {
        if (rows[i].level < 2)
            continue;
        int64_t delta = cg_store_alloc_share(&rows[i]) - share_before[i];
        if (delta == 0)
            continue;
        struct cg_scope_ids parent;
        cg_scope_prefix(&rows[i].ids, rows[i].level - 1, &parent);
        for (int j = 0; j < n; j++) {
            if (j == i || rows[j].level != rows[i].level - 1 ||
                !cg_scope_equal(&rows[j].ids, &parent))
                continue;
            /* The trigger's UPDATE of the parent bumps its row_version once. */
            rows[j].row_version++;
            if (add_allocated) {
                int64_t a = rows[j].allocated_tokens + delta;
                rows[j].allocated_tokens = a < 0 ? 0 : a;
            }
            break;
        }
    }
}

/* ------------------------------------------------------------------ row cache --- */

bool cg_store_cache_path_get(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, struct cg_budget_row out[4], int *n,
                             int64_t *gen)
{
    *gen = -1;
    char id[CG_UUID_LEN + 1];
    if (store->redis == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return false;
    return cg_redis_path_get(store->redis, id, ids, out, n, gen);
}

void cg_store_cache_rows_put(struct cg_store *store, const char *tenant_id,
                             const struct cg_budget_row *rows, int n, int64_t fill_gen)
{
    char id[CG_UUID_LEN + 1];
    if (store->redis == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return;
    cg_redis_rows_put(store->redis, id, rows, n, fill_gen);
}

void cg_store_cache_rows_put_many(struct cg_store *store, const struct cg_store_rows *sets, int n)
{
    if (store->redis == NULL || n < 1)
        return;
    struct cg_redis_rows *out = malloc((size_t)n * sizeof *out);
    char(*ids)[CG_UUID_LEN + 1] = malloc((size_t)n * sizeof *ids);
    int m = 0;
    for (int i = 0; out != NULL && ids != NULL && i < n; i++)
        if (cg__store_normalize_uuid(sets[i].tenant_id, ids[m]))
            out[m] = (struct cg_redis_rows){ids[m], sets[i].rows, sets[i].n}, m++;
    if (m > 0)
        cg_redis_rows_put_many(store->redis, out, m);
    free(out);
    free(ids);
}

void cg_store_cache_tenant_drop(struct cg_store *store, const char *tenant_id)
{
    char id[CG_UUID_LEN + 1];
    if (store->redis == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return;
    (void)cg_redis_tenant_bump(store->redis, id);
}

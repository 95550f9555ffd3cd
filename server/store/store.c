/* store.c - the storage facade of store.h: validates arguments, checks the deadline, and
 * puts the Redis key cache in front of PostgreSQL. It holds no SQL and no Redis commands;
 * those live in store_pg.c and store_redis.c.
 */
#include "store/store.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "store/migrate.h"
#include "store/store_pg.h"
#include "store/store_redis.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 3000
#define DEFAULT_STATEMENT_TIMEOUT_MS 5000
#define DEFAULT_REDIS_TIMEOUT_MS 100

struct cg_store {
    struct cg_pg *pg;
    struct cg_redis *redis; /* NULL: cache disabled */
    int key_cache_ttl_s;
    int64_t deadline_mono_ms;
};

/* ------------------------------------------------------------------ validation --- */

/* Copies a canonical UUID (8-4-4-4-12 hex digits, either case) into out in lower case, so
 * that cache keys and comparisons do not depend on the caller's spelling. */
static bool normalize_uuid(const char *s, char out[CG_UUID_LEN + 1])
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

static bool key_id_valid(const char *s)
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
static long utf8_chars(const char *s)
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
    long chars = utf8_chars(name);
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

static bool deadline_passed(const struct cg_store *store)
{
    return store->deadline_mono_ms != 0 && cg_mono_ms() >= store->deadline_mono_ms;
}

static cg_status deadline_exceeded(struct cg_err *err)
{
    return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
}

static bool cache_enabled(const struct cg_store *store)
{
    return store->redis != NULL && store->key_cache_ttl_s > 0;
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
    store->pg = cg_pg_new(opts->pg_dsn, connect_ms, statement_ms);
    if (store->pg == NULL)
        goto fail;
    if (opts->redis_url != NULL && opts->redis_url[0] != '\0') {
        store->redis = cg_redis_new(opts->redis_url, redis_ms);
        if (store->redis == NULL)
            goto fail;
    }
    store->key_cache_ttl_s = opts->key_cache_ttl_s > 0 ? opts->key_cache_ttl_s : 0;
    return store;
fail:
    cg_store_free(store);
    return NULL;
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
    if (deadline_passed(store))
        return deadline_exceeded(err);
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
    if (deadline_passed(store))
        return deadline_exceeded(err);
    return cg_pg_migrate(store->pg, cg_migrations, applied, err);
}

/* ------------------------------------------------------------------ tenants --- */

cg_status cg_store_tenant_create(struct cg_store *store, const char *name, const char *time_zone,
                                 struct cg_tenant *out, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    cg_status rc = check_name(name ? name : "", true, err);
    if (rc == CG_OK)
        rc = check_time_zone(time_zone, err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_tenant_create(store->pg, name, time_zone, out, err);
}

cg_status cg_store_tenant_get(struct cg_store *store, const char *tenant_id, struct cg_tenant *out,
                              struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    return cg_pg_tenant_get(store->pg, id, out, err);
}

cg_status cg_store_tenant_list(struct cg_store *store, const char *after_id, int limit,
                               struct cg_tenant *out, int *count, bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    if (deadline_passed(store))
        return deadline_exceeded(err);
    cg_status rc = check_limit(limit, err);
    if (rc != CG_OK)
        return rc;
    char id[CG_UUID_LEN + 1] = "";
    if (after_id != NULL && after_id[0] != '\0' && !normalize_uuid(after_id, id))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: not a tenant id");
    return cg_pg_tenant_list(store->pg, id, limit, out, count, more, err);
}

/* ------------------------------------------------------------------ API keys --- */

cg_status cg_store_key_create(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const uint8_t secret_hash[32], const char *name,
                              struct cg_api_key *out, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    if (!key_id_valid(key_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "key_id: must be 1..%d characters of A-Z a-z 0-9 _ -", CG_KEY_ID_LEN);
    if (secret_hash == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "secret_hash: missing");
    if (name == NULL)
        name = "";
    cg_status rc = check_name(name, false, err);
    if (rc != CG_OK)
        return rc;
    /* No cache entry can exist for a key id that was never stored (misses are not cached),
     * so there is nothing to invalidate here. */
    return cg_pg_key_create(store->pg, id, key_id, secret_hash, name, out, err);
}

cg_status cg_store_key_list(struct cg_store *store, const char *tenant_id, int limit,
                            struct cg_api_key *out, int *count, struct cg_err *err)
{
    *count = 0;
    if (deadline_passed(store))
        return deadline_exceeded(err);
    cg_status rc = check_limit(limit, err);
    if (rc != CG_OK)
        return rc;
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    return cg_pg_key_list(store->pg, id, limit, out, count, err);
}

cg_status cg_store_key_revoke(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_api_key *out, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id) || !key_id_valid(key_id))
        return cg_err_set(err, CG_NOT_FOUND, "key_id: no such key");
    cg_status rc = cg_pg_key_revoke(store->pg, id, key_id, out, err);
    /* Also when the outcome is unknown (connection lost, timed out): dropping an entry
     * that is still right costs one PostgreSQL read, keeping a stale one does not. */
    if (store->redis != NULL && (rc == CG_OK || rc == CG_UNAVAILABLE || rc == CG_DEADLINE_EXCEEDED))
        (void)cg_redis_key_drop(store->redis, id, key_id);
    return rc;
}

cg_status cg_store_key_lookup(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_key_auth *out, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id) || !key_id_valid(key_id))
        return cg_err_set(err, CG_NOT_FOUND, "key_id: no such key");
    if (cache_enabled(store) && cg_redis_key_get(store->redis, id, key_id, out))
        return CG_OK;
    cg_status rc = cg_pg_key_lookup(store->pg, id, key_id, out, err);
    if (rc == CG_OK && cache_enabled(store))
        cg_redis_key_put(store->redis, id, key_id, out, store->key_cache_ttl_s);
    return rc;
}

/* ------------------------------------------------------------------ budgets --- */

/* Checks a text argument: valid UTF-8, at most max_bytes bytes (when > 0) and max_chars
 * characters (when > 0). cap is the size of the buffer it lives in, if any (0: a plain
 * string), so that an unterminated fixed array is caught too. */
static cg_status check_text(const char *s, size_t cap, size_t max_bytes, long max_chars,
                            const char *field, struct cg_err *err)
{
    size_t n = cap > 0 ? strnlen(s, cap) : strlen(s);
    if ((cap > 0 && n == cap) || (max_bytes > 0 && n > max_bytes))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: longer than %zu bytes", field,
                          max_bytes > 0 ? max_bytes : cap - 1);
    long chars = utf8_chars(s);
    if (chars < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: not valid UTF-8", field);
    if (max_chars > 0 && chars > max_chars)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: longer than %ld characters", field,
                          max_chars);
    return CG_OK;
}

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

/* Each id at most CG_SCOPE_ID_MAX bytes of valid UTF-8; a task needs a session, an agent a
 * task. */
static cg_status check_scope_ids(const struct cg_scope_ids *ids, struct cg_err *err)
{
    if (ids == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "scope: missing");
    cg_status rc = check_text(ids->session_id, sizeof ids->session_id, CG_SCOPE_ID_MAX, 0,
                              "scope.session_id", err);
    if (rc == CG_OK)
        rc =
            check_text(ids->task_id, sizeof ids->task_id, CG_SCOPE_ID_MAX, 0, "scope.task_id", err);
    if (rc == CG_OK)
        rc = check_text(ids->agent_id, sizeof ids->agent_id, CG_SCOPE_ID_MAX, 0, "scope.agent_id",
                        err);
    if (rc != CG_OK)
        return rc;
    if (ids->task_id[0] != '\0' && ids->session_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "scope.task_id: needs a scope.session_id");
    if (ids->agent_id[0] != '\0' && ids->task_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "scope.agent_id: needs a scope.task_id");
    return CG_OK;
}

static cg_status check_usage(const struct cg_usage *usage, struct cg_err *err)
{
    if (usage == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "usage: missing");
    const struct {
        int64_t value;
        const char *field;
    } amounts[] = {
        {usage->input_tokens, "usage.input_tokens"},
        {usage->output_tokens, "usage.output_tokens"},
        {usage->cache_read_tokens, "usage.cache_read_tokens"},
        {usage->cache_write_tokens, "usage.cache_write_tokens"},
        {usage->cost_micros, "usage.cost_micros"},
    };
    for (size_t i = 0; i < sizeof amounts / sizeof amounts[0]; i++) {
        if (amounts[i].value < 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: must not be negative",
                              amounts[i].field);
    }
    return CG_OK;
}

/* The checks the table's constraints would make, with the field named. The detailed
 * rules (tiers ascending, bounds from the API) are core/budget's; these keep the row
 * storable. */
static cg_status check_settings(const struct cg_budget_row *row, int level, struct cg_err *err)
{
    if (row->mode < 1 || row->mode > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.mode: must be 1 HARD, 2 SOFT or 3 APPROVAL");
    if (row->limit_tokens <= 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.limit_tokens: must be positive");
    if (row->limit_cost_micros < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.limit_cost_micros: must not be negative");
    if (!isfinite(row->warning_ratio) || row->warning_ratio <= 0 || row->warning_ratio > 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.warning_ratio: must be in (0, 1]");
    if (row->ntiers < 0 || row->ntiers > CG_TIERS_STORE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.backpressure_tiers: at most %d tiers",
                          CG_TIERS_STORE_MAX);
    for (int i = 0; i < row->ntiers; i++) {
        if (!isfinite(row->tier_ratio[i]) || row->tier_ratio[i] <= 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "settings.backpressure_tiers[%d].threshold_ratio: must be a"
                              " positive number",
                              i);
        if (row->tier_delay_ms[i] > INT32_MAX)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "settings.backpressure_tiers[%d].delay_ms: too large", i);
    }
    if (row->on_store_failure < 1 || row->on_store_failure > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.on_store_failure: must be 1 FAIL_CLOSED, 2 FAIL_OPEN or 3"
                          " LOCAL_ALLOWANCE");
    if (row->local_allowance_tokens < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.local_allowance_tokens: must not be negative");
    if (row->reset_period < 1 || row->reset_period > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.reset_period: must be 1 NONE, 2 DAILY or 3 MONTHLY");
    if (row->reset_period != 1 && level != 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.reset_period: only a tenant budget resets");
    if (row->reservation_ttl_ms > INT32_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.reservation_ttl_ms: too large");
    return CG_OK;
}

cg_status cg_store_begin(struct cg_store *store, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    return cg_pg_begin(store->pg, err);
}

cg_status cg_store_commit(struct cg_store *store, struct cg_err *err)
{
    /* Past the deadline nothing is sent: the transaction stays open for the caller's
     * rollback, and the caller answers DEADLINE_EXCEEDED with nothing written. */
    if (deadline_passed(store))
        return deadline_exceeded(err);
    return cg_pg_commit(store->pg, err);
}

void cg_store_rollback(struct cg_store *store)
{
    cg_pg_rollback(store->pg);
}

cg_status cg_store_path_read(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool lock, bool allow_missing_last,
                             struct cg_budget_row out[4], int *n, struct cg_err *err)
{
    *n = 0;
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    cg_status rc = check_scope_ids(ids, err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_path_read(store->pg, id, ids, lock, allow_missing_last, out, n, err);
}

cg_status cg_store_budget_put(struct cg_store *store, const char *tenant_id,
                              const struct cg_budget_row *row, int64_t expected_version,
                              const char *key_id, struct cg_budget_row *out, bool *created,
                              struct cg_err *err)
{
    *created = false;
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    if (row == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings: missing");
    cg_status rc = check_scope_ids(&row->ids, err);
    if (rc != CG_OK)
        return rc;
    if (expected_version < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "expected_version: must not be negative");
    if (key_id != NULL && key_id[0] != '\0' && !key_id_valid(key_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "key_id: must be 1..%d characters of A-Z a-z 0-9 _ -", CG_KEY_ID_LEN);
    rc = check_text(row->description, sizeof row->description, 0, CG_NAME_MAX,
                    "settings.description", err);
    if (rc != CG_OK)
        return rc;

    /* The level follows from the ids; a row without a budget keeps neutral settings, so
     * that what it stores never depends on fields that mean nothing. */
    struct cg_budget_row stored = *row;
    stored.level = scope_depth(&row->ids);
    if (stored.has_budget) {
        rc = check_settings(&stored, stored.level, err);
        if (rc != CG_OK)
            return rc;
    } else {
        stored.mode = 1;
        stored.limit_tokens = 0;
        stored.limit_cost_micros = 0;
        stored.warning_ratio = 0.8;
        stored.backpressure_disabled = false;
        stored.ntiers = 0;
        stored.on_store_failure = 1;
        stored.local_allowance_tokens = 0;
        stored.reset_period = 1;
        stored.reservation_ttl_ms = 0;
    }
    return cg_pg_budget_put(store->pg, id, &stored, expected_version, key_id, out, created, err);
}

cg_status cg_store_path_add(struct cg_store *store, const char *tenant_id,
                            struct cg_budget_row *rows, int n, int64_t used_tokens,
                            int64_t reserved_tokens, int64_t used_cost_micros,
                            int64_t reserved_cost_micros, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    if (rows == NULL || n < 1 || n > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: must be 1..4 rows of a path");
    cg_status rc = check_scope_ids(&rows[n - 1].ids, err);
    if (rc != CG_OK)
        return rc;
    if (scope_depth(&rows[n - 1].ids) != n)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: does not match the path in rows");
    return cg_pg_path_add(store->pg, id, rows, n, used_tokens, reserved_tokens, used_cost_micros,
                          reserved_cost_micros, err);
}

cg_status cg_store_reservation_insert(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids, int64_t tokens,
                                      int64_t cost_micros, const char *model,
                                      const char *estimate_id, const char *idempotency_key,
                                      uint32_t ttl_ms, struct cg_reservation *out,
                                      struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    cg_status rc = check_scope_ids(ids, err);
    if (rc != CG_OK)
        return rc;
    if (tokens < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "tokens: must not be negative");
    if (cost_micros < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "cost_micros: must not be negative");
    if (ttl_ms == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "ttl_ms: must be positive");
    model = model ? model : "";
    estimate_id = estimate_id ? estimate_id : "";
    idempotency_key = idempotency_key ? idempotency_key : "";
    rc = check_text(model, 0, 0, CG_MODEL_MAX, "model", err);
    if (rc == CG_OK)
        rc = check_text(estimate_id, 0, CG_IDEMPOTENCY_MAX, 0, "estimate_id", err);
    if (rc == CG_OK)
        rc = check_text(idempotency_key, 0, CG_IDEMPOTENCY_MAX, 0, "idempotency_key", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_reservation_insert(store->pg, id, ids, tokens, cost_micros, model, estimate_id,
                                    idempotency_key, ttl_ms, out, err);
}

cg_status cg_store_reservation_lock(struct cg_store *store, const char *tenant_id,
                                    const char *reservation_id, struct cg_reservation *out,
                                    struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1], rid[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id) || !normalize_uuid(reservation_id, rid))
        return cg_err_set(err, CG_NOT_FOUND, "reservation_id: no such reservation");
    return cg_pg_reservation_lock(store->pg, id, rid, out, err);
}

cg_status cg_store_reservation_settle(struct cg_store *store, const char *tenant_id,
                                      const char *reservation_id, int state,
                                      const struct cg_usage *usage, struct cg_err *err)
{
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1], rid[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id) || !normalize_uuid(reservation_id, rid))
        return cg_err_set(err, CG_NOT_FOUND, "reservation_id: no such reservation");
    if (state < 2 || state > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "state: must be 2 COMMITTED, 3 RELEASED or 4 EXPIRED");
    if (state == 2) {
        cg_status rc = check_usage(usage, err);
        if (rc != CG_OK)
            return rc;
    }
    /* Only a commit records usage; the others settle with none. */
    return cg_pg_reservation_settle(store->pg, id, rid, state, state == 2 ? usage : NULL, err);
}

cg_status cg_store_ledger_append(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_usage *usage,
                                 const char *model, const char *idempotency_key,
                                 const char *reservation_id, char *entry_id,
                                 struct cg_usage *previous, char *previous_model,
                                 struct cg_err *err)
{
    if (entry_id != NULL)
        entry_id[0] = '\0';
    if (deadline_passed(store))
        return deadline_exceeded(err);
    char id[CG_UUID_LEN + 1];
    if (!normalize_uuid(tenant_id, id))
        return cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
    if (entry_id == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "entry_id: missing");
    cg_status rc = check_scope_ids(ids, err);
    if (rc == CG_OK)
        rc = check_usage(usage, err);
    model = model ? model : "";
    idempotency_key = idempotency_key ? idempotency_key : "";
    if (rc == CG_OK)
        rc = check_text(model, 0, 0, CG_MODEL_MAX, "model", err);
    if (rc == CG_OK)
        rc = check_text(idempotency_key, 0, CG_IDEMPOTENCY_MAX, 0, "idempotency_key", err);
    if (rc != CG_OK)
        return rc;
    char rid[CG_UUID_LEN + 1] = "";
    if (reservation_id != NULL && reservation_id[0] != '\0' && !normalize_uuid(reservation_id, rid))
        return cg_err_set(err, CG_NOT_FOUND, "reservation_id: no such reservation");
    return cg_pg_ledger_append(store->pg, id, ids, usage, model, idempotency_key, rid, entry_id,
                               previous, previous_model, err);
}

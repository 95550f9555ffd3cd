/* store_redis.c - the Redis operations of the store (API keys, budget rows), their
 * encodings and the URL; store_redis_conn.c runs the commands (one node, or the node of
 * the keys' slot on a cluster).
 *
 * Every command names its keys (first index and count) so that it can be routed by slot;
 * the keys of one command always share the tenant's hash tag, hence one slot.
 */
#include "store/store_redis.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crypto.h"
#include "base/log.h"
#include "store/store_redis_internal.h"

#define MOD "store_redis"
#define KEY_NAME_MAX 128
#define DB_MAX 1000000

/* Replaces an entry and sets its expiry in one step, so that a failure between the two can
 * never leave an entry that does not expire. Revocation is one-way: an entry (or marker)
 * saying revoked is not replaced by a valid one read before the revocation. */
static const char put_script[] =
    "if ARGV[3] == '0' and redis.call('HGET', KEYS[1], 'revoked') == '1' then return 0 end "
    "redis.call('DEL', KEYS[1]) "
    "redis.call('HSET', KEYS[1], 'tenant_name', ARGV[1], 'secret_hash', ARGV[2], "
    "'revoked', ARGV[3], 'grant', ARGV[4], 'scope_session', ARGV[5], 'scope_task', ARGV[6]) "
    "redis.call('EXPIRE', KEYS[1], ARGV[7]) "
    "return 1";

/* ------------------------------------------------------------------ URL --- */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Copies [s, s+n) into dst (size cap) decoding %XX escapes. false when it does not fit or
 * an escape is malformed or decodes to NUL. */
static bool copy_decoded(char *dst, size_t cap, const char *s, size_t n)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '%') {
            if (i + 2 >= n)
                return false;
            int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
            if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                return false;
            c = (char)(hi << 4 | lo);
            i += 2;
        }
        if (out + 1 >= cap)
            return false;
        dst[out++] = c;
    }
    dst[out] = '\0';
    return true;
}

static bool parse_number(const char *s, size_t n, long max, long *out)
{
    if (n == 0 || n > 9)
        return false;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

cg_status cg_redis_url_parse(const char *url, struct cg_redis_addr *out, struct cg_err *err)
{
    static const char scheme[] = "redis://";
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (url == NULL || strncmp(url, scheme, sizeof scheme - 1) != 0) {
        if (url != NULL && strncmp(url, "rediss://", 9) == 0)
            return cg_err_set(err, CG_CONFIG, "redis_url: TLS (rediss://) is not supported");
        return cg_err_set(err, CG_CONFIG, "redis_url: must start with redis://");
    }
    const char *authority = url + sizeof scheme - 1;
    const char *end = authority + strcspn(authority, "/?#");
    if (*end == '?' || *end == '#')
        return cg_err_set(err, CG_CONFIG, "redis_url: query parameters are not supported");

    /* userinfo: the last '@' of the authority (a password may contain an escaped '@'). */
    const char *host = authority;
    for (const char *p = authority; p < end; p++) {
        if (*p == '@')
            host = p + 1;
    }
    if (host != authority) {
        const char *userinfo_end = host - 1;
        const char *colon = memchr(authority, ':', (size_t)(userinfo_end - authority));
        const char *user_end = colon ? colon : userinfo_end;
        if (!copy_decoded(out->user, sizeof out->user, authority, (size_t)(user_end - authority)))
            return cg_err_set(err, CG_CONFIG, "redis_url: user name is malformed or too long");
        if (colon != NULL && !copy_decoded(out->password, sizeof out->password, colon + 1,
                                           (size_t)(userinfo_end - colon - 1)))
            return cg_err_set(err, CG_CONFIG, "redis_url: password is malformed or too long");
    }

    const char *host_end;
    const char *port_start = NULL;
    if (*host == '[') {
        const char *close = memchr(host, ']', (size_t)(end - host));
        if (close == NULL)
            return cg_err_set(err, CG_CONFIG, "redis_url: unterminated [ in host");
        host_end = close;
        host++;
        if (close + 1 < end) {
            if (close[1] != ':')
                return cg_err_set(err, CG_CONFIG, "redis_url: junk after ] in host");
            port_start = close + 2;
        }
    } else {
        const char *colon = memchr(host, ':', (size_t)(end - host));
        host_end = colon ? colon : end;
        if (colon != NULL)
            port_start = colon + 1;
    }
    size_t host_len = (size_t)(host_end - host);
    if (host_len == 0)
        return cg_err_set(err, CG_CONFIG, "redis_url: host is missing");
    if (host_len >= sizeof out->host)
        return cg_err_set(err, CG_CONFIG, "redis_url: host is too long");
    memcpy(out->host, host, host_len);
    out->host[host_len] = '\0';

    if (port_start != NULL) {
        long port;
        if (!parse_number(port_start, (size_t)(end - port_start), 65535, &port) || port == 0)
            return cg_err_set(err, CG_CONFIG, "redis_url: port must be 1..65535");
        out->port = (int)port;
    }
    if (*end == '/' && end[1] != '\0') {
        long db;
        if (!parse_number(end + 1, strlen(end + 1), DB_MAX, &db))
            return cg_err_set(err, CG_CONFIG, "redis_url: database must be a number");
        out->db = (int)db;
    }
    return CG_OK;
}

bool cg_redis_key_name(const char *tenant_id, const char *key_id, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "cg:{%s}:key:%s", tenant_id, key_id);
    return n > 0 && (size_t)n < cap;
}

/* ------------------------------------------------------------------ public --- */

/* ------------------------------------------------------------------ handle --- */

bool cg_redis_cluster_mode_parse(const char *text, cg_redis_cluster_mode *out)
{
    if (text == NULL || strcmp(text, "auto") == 0)
        *out = CG_REDIS_CLUSTER_AUTO;
    else if (strcmp(text, "on") == 0)
        *out = CG_REDIS_CLUSTER_ON;
    else if (strcmp(text, "off") == 0)
        *out = CG_REDIS_CLUSTER_OFF;
    else
        return false;
    return true;
}

static void rows_put_name(char sha[41]);

struct cg_redis *cg_redis_new(const char *url, int timeout_ms)
{
    struct cg_redis *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 1;
    r->outage_logged = &r->own_outage_logged;
    rows_put_name(r->rows_put_sha);
    struct cg_err err;
    r->addr_valid = cg_redis_url_parse(url, &r->addr, &err) == CG_OK;
    if (!r->addr_valid)
        cg_log(CG_LOG_ERROR, MOD, NULL, "cache disabled: %s", err.msg);
    cg__redis_copy_str(r->seed.host, sizeof r->seed.host, r->addr.host, strlen(r->addr.host));
    r->seed.port = r->addr.port;
    return r;
}

void cg_redis_set_cluster_mode(struct cg_redis *redis, cg_redis_cluster_mode mode)
{
    redis->cluster_mode = mode;
}

void cg_redis_set_outage_log(struct cg_redis *redis, atomic_int *flag)
{
    redis->outage_logged = flag != NULL ? flag : &redis->own_outage_logged;
}

void cg_redis_set_meters(struct cg_redis *redis, struct cg_metric *seconds,
                         struct cg_metric *errors, uint32_t slot)
{
    redis->seconds = seconds;
    redis->errors = errors;
    redis->metrics_slot = slot;
}

void cg_redis_free(struct cg_redis *redis)
{
    if (redis == NULL)
        return;
    cg__redis_node_close(&redis->seed);
    cg__redis_map_clear(redis);
    free(redis);
}

bool cg_redis_ok(const struct cg_redis *redis)
{
    return redis != NULL && redis->ok;
}

static bool is_string(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING;
}

/* The "grant" field: "<role> <expires_at_ms> <max_call_tokens>", each a decimal number. */
static bool parse_grant(const char *s, size_t len, struct cg_key_auth *out)
{
    char buf[80];
    if (len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    int role;
    long long expires, max_call;
    int used = 0;
    if (sscanf(buf, "%d %lld %lld%n", &role, &expires, &max_call, &used) != 3 ||
        (size_t)used != len || role < 1 || role > 4 || expires < 0 || max_call < 1)
        return false;
    out->role = role;
    out->expires_at_ms = expires;
    out->max_call_tokens = max_call;
    return true;
}

/* A scope id field: at most 128 bytes of 0x21..0x7E, or empty. */
static bool copy_scope_id(char *dst, size_t cap, const redisReply *r)
{
    if (!is_string(r) || r->len >= cap)
        return false;
    for (size_t i = 0; i < r->len; i++)
        if (r->str[i] < 0x21 || r->str[i] > 0x7e)
            return false;
    cg__redis_copy_str(dst, cap, r->str, r->len);
    return true;
}

bool cg_redis_key_get(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      struct cg_key_auth *out)
{
    char key[KEY_NAME_MAX];
    if (!cg_redis_key_name(tenant_id, key_id, key, sizeof key))
        return false;
    const char *argv[] = {"HMGET",   key,     "tenant_name",   "secret_hash",
                          "revoked", "grant", "scope_session", "scope_task"};
    redisReply *reply = cg__redis_command(redis, "HMGET", 8, argv, NULL, 1, 1);
    if (reply == NULL)
        return false;

    /* An entry written by an older version (no grant) is a miss: PostgreSQL is read. */
    bool hit = false;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 6) {
        const redisReply *name = reply->element[0];
        const redisReply *hash = reply->element[1];
        const redisReply *revoked = reply->element[2];
        const redisReply *grant = reply->element[3];
        if (is_string(name) && is_string(hash) && is_string(revoked) && is_string(grant)) {
            hit = name->len < sizeof out->tenant_name && memchr(name->str, 0, name->len) == NULL &&
                  hash->len == 2 * sizeof out->secret_hash && revoked->len == 1 &&
                  (revoked->str[0] == '0' || revoked->str[0] == '1') &&
                  parse_grant(grant->str, grant->len, out) &&
                  copy_scope_id(out->scope_session_id, sizeof out->scope_session_id,
                                reply->element[4]) &&
                  copy_scope_id(out->scope_task_id, sizeof out->scope_task_id, reply->element[5]);
            for (size_t i = 0; hit && i < sizeof out->secret_hash; i++) {
                int hi = hex_value(hash->str[2 * i]), lo = hex_value(hash->str[2 * i + 1]);
                if (hi < 0 || lo < 0)
                    hit = false;
                else
                    out->secret_hash[i] = (uint8_t)(hi << 4 | lo);
            }
            if (hit) {
                cg__redis_copy_str(out->tenant_name, sizeof out->tenant_name, name->str, name->len);
                out->revoked = revoked->str[0] == '1';
            } else {
                cg_log(CG_LOG_WARN, MOD, NULL, "malformed cache entry, ignored key=%s", key);
            }
        }
    }
    freeReplyObject(reply);
    return hit;
}

void cg_redis_key_put(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, int ttl_s)
{
    char key[KEY_NAME_MAX];
    if (ttl_s <= 0 || !cg_redis_key_name(tenant_id, key_id, key, sizeof key))
        return;
    char hash_hex[2 * sizeof entry->secret_hash + 1];
    cg_hex_encode(entry->secret_hash, sizeof entry->secret_hash, hash_hex);
    char ttl[16], grant[80];
    snprintf(ttl, sizeof ttl, "%d", ttl_s);
    snprintf(grant, sizeof grant, "%d %lld %lld", entry->role, (long long)entry->expires_at_ms,
             (long long)entry->max_call_tokens);
    const char *argv[] = {"EVAL",
                          put_script,
                          "1",
                          key,
                          entry->tenant_name,
                          hash_hex,
                          entry->revoked ? "1" : "0",
                          grant,
                          entry->scope_session_id,
                          entry->scope_task_id,
                          ttl};
    redisReply *reply = cg__redis_command(redis, "EVAL", 11, argv, NULL, 3, 1);
    if (reply != NULL)
        freeReplyObject(reply);
}

bool cg_redis_key_drop(struct cg_redis *redis, const char *tenant_id, const char *key_id)
{
    char key[KEY_NAME_MAX];
    if (!cg_redis_key_name(tenant_id, key_id, key, sizeof key))
        return false;
    const char *argv[] = {"DEL", key};
    redisReply *reply = cg__redis_command(redis, "DEL", 2, argv, NULL, 1, 1);
    if (reply == NULL)
        return false;
    freeReplyObject(reply);
    return true;
}

/* Marks an entry revoked; a key without an entry gets a marker of that one field (no
 * tenant_name, no secret_hash: cg_redis_key_get misses on it), expiring in ARGV[1] s. */
static const char revoke_script[] =
    "redis.call('HSET', KEYS[1], 'revoked', '1') "
    "if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end "
    "return 1";

bool cg_redis_key_revoke(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                         int ttl_s)
{
    char key[KEY_NAME_MAX];
    if (ttl_s <= 0 || !cg_redis_key_name(tenant_id, key_id, key, sizeof key))
        return false;
    char ttl[16];
    snprintf(ttl, sizeof ttl, "%d", ttl_s);
    const char *argv[] = {"EVAL", revoke_script, "1", key, ttl};
    redisReply *reply = cg__redis_command(redis, "EVAL", 5, argv, NULL, 3, 1);
    if (reply == NULL)
        return false;
    bool ok = reply->type == REDIS_REPLY_INTEGER;
    freeReplyObject(reply);
    return ok;
}

/* ------------------------------------------------------------------ budget rows --- */

/* Keeps the newest row_version of each key. ARGV[1] the expiry (ms), ARGV[2] the fill's
 * generation ("-1": a committed write, stored in the current generation), then per key its
 * row_version and its text without the leading "<row_version> <generation> ". KEYS[1] is
 * the tenant's generation key, KEYS[2..] the rows. Returns how many rows were stored. */
static const char rows_put_script[] =
    "local g = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local fill = tonumber(ARGV[2]) "
    "if fill >= 0 and fill ~= g then return 0 end "
    "local n = 0 "
    "for i = 2, #KEYS do "
    "  local v = tonumber(ARGV[2 * i - 1]) "
    "  local cur = redis.call('GET', KEYS[i]) "
    "  local cv, cg = 0, -1 "
    "  if cur then "
    "    local a, b = string.match(cur, '^(%d+) (%d+) ') "
    "    cv, cg = tonumber(a or '0'), tonumber(b or '-1') "
    "  end "
    "  if cg ~= g or v > cv then "
    "    redis.call('SET', KEYS[i], ARGV[2 * i - 1] .. ' ' .. g .. ' ' .. ARGV[2 * i], "
    "               'PX', ARGV[1]) "
    "    n = n + 1 "
    "  end "
    "end "
    "return n";

/* The rows script's EVALSHA name. */
static void rows_put_name(char sha[41])
{
    cg_sha1_hex(rows_put_script, sizeof rows_put_script - 1, sha);
}

static bool gen_key_name(const char *tenant_id, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "cg:{%s}:gen", tenant_id);
    return n > 0 && (size_t)n < cap;
}

/* The writer of the row's text and names: appends to buf[0..cap), ok false once it would
 * not fit. Whole numbers and short decimals are written by hand (no printf: a row is
 * written after every committed write), other doubles with %.17g (which reads back
 * exactly). */
struct text_out {
    char *buf;
    size_t cap, len;
    bool ok;
};

static void out_bytes(struct text_out *o, const char *s, size_t n)
{
    if (!o->ok || o->cap - o->len <= n) {
        o->ok = false;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

/* "cg:{<tenant>}:row2:<session> <task> <agent>": a name per row of every write. */
static bool row_key_name(const char *tenant_id, const struct cg_scope_ids *ids, char *buf,
                         size_t cap)
{
    struct text_out o = {buf, cap, 0, cap > 0};
    const char *parts[] = {"cg:{", tenant_id,    "}:row2:", ids->session_id,
                           " ",    ids->task_id, " ",       ids->agent_id};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        out_bytes(&o, parts[i], strlen(parts[i]));
    return o.ok;
}

/* " v" (no space first when first). */
static void out_i64(struct text_out *o, int64_t v, bool first)
{
    char tmp[24], *p = tmp + sizeof tmp;
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    if (!first)
        *--p = ' ';
    out_bytes(o, p, (size_t)(tmp + sizeof tmp - p));
}

static void out_double(struct text_out *o, double v)
{
    /* Most doubles of a row are ratios with a few decimals (warning_ratio 0.8): k decimals
     * of a whole number n read back exactly when n / 10^k, correctly rounded, is v (strtod
     * rounds the decimal to the same double). Others go through %.17g. */
    static const double pow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
    for (int k = 0; k < 7 && v >= 0 && v < 1e9 && !signbit(v); k++) {
        double scaled = v * pow10[k];
        int64_t n = (int64_t)(scaled + 0.5);
        if ((double)n / pow10[k] != v)
            continue;
        char tmp[32], *p = tmp + sizeof tmp;
        for (int d = 0; d < k; d++, n /= 10)
            *--p = (char)('0' + n % 10);
        if (k > 0)
            *--p = '.';
        do {
            *--p = (char)('0' + n % 10);
            n /= 10;
        } while (n != 0);
        *--p = ' ';
        out_bytes(o, p, (size_t)(tmp + sizeof tmp - p));
        return;
    }
    char tmp[40];
    int n = snprintf(tmp, sizeof tmp, " %.17g", v);
    if (n < 0 || (size_t)n >= sizeof tmp)
        o->ok = false;
    else
        out_bytes(o, tmp, (size_t)n);
}

size_t cg_redis_row_encode(const struct cg_budget_row *row, int64_t gen, char *buf, size_t cap)
{
    struct text_out o = {buf, cap, 0, cap > 0};
    out_i64(&o, row->row_version, true);
    const int64_t head[] = {gen,       row->level,        row->has_budget ? 1 : 0,
                            row->mode, row->limit_tokens, row->limit_cost_micros};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++)
        out_i64(&o, head[i], false);
    out_double(&o, row->warning_ratio);
    out_i64(&o, row->backpressure_disabled ? 1 : 0, false);
    out_i64(&o, row->ntiers, false);
    for (int i = 0; i < row->ntiers && i < CG_TIERS_STORE_MAX; i++) {
        out_double(&o, row->tier_ratio[i]);
        out_i64(&o, row->tier_delay_ms[i], false);
    }
    const int64_t tail[] = {row->on_store_failure,
                            row->local_allowance_tokens,
                            row->reset_period,
                            row->reservation_ttl_ms,
                            row->used_tokens,
                            row->reserved_tokens,
                            row->used_cost_micros,
                            row->reserved_cost_micros,
                            row->version,
                            row->created_at_ms,
                            row->updated_at_ms,
                            row->closed_at_ms,
                            row->period_start_ms,
                            row->next_reset_ms,
                            row->approval_ttl_ms,
                            row->approved_extra_tokens,
                            row->allocate_from_parent ? 1 : 0,
                            row->allocated_tokens,
                            row->exclude_cache_read_tokens ? 1 : 0,
                            row->spent_input_tokens,
                            row->spent_output_tokens,
                            row->spent_cache_read_tokens,
                            row->spent_cache_write_tokens,
                            row->last_activity_ms};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++)
        out_i64(&o, tail[i], false);
    out_bytes(&o, " =", 2);
    out_bytes(&o, row->updated_by_key_id, strlen(row->updated_by_key_id));
    out_bytes(&o, "\n", 1);
    out_bytes(&o, row->description, strlen(row->description));
    return o.ok ? o.len : 0;
}

/* A cursor over the cached text (NUL-terminated copy). */
struct cursor {
    const char *p;
    bool ok;
};

static int64_t next_i64(struct cursor *c, int64_t min, int64_t max)
{
    if (!c->ok)
        return 0;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(c->p, &end, 10);
    if (errno != 0 || end == c->p || (*end != ' ' && *end != '\n') || v < min || v > max) {
        c->ok = false;
        return 0;
    }
    c->p = end + 1;
    return v;
}

static double next_double(struct cursor *c, double min, double max)
{
    if (!c->ok)
        return 0;
    char *end = NULL;
    double v = strtod(c->p, &end);
    if (end == c->p || *end != ' ' || !(v >= min && v <= max)) { /* NaN fails too */
        c->ok = false;
        return 0;
    }
    c->p = end + 1;
    return v;
}

bool cg_redis_row_decode(const char *text, size_t len, struct cg_budget_row *row, int64_t *gen)
{
    char copy[CG_REDIS_ROW_TEXT_MAX];
    if (len >= sizeof copy || memchr(text, '\0', len) != NULL)
        return false;
    memcpy(copy, text, len);
    copy[len] = '\0';
    struct cursor c = {copy, true};
    const int64_t big = INT64_MAX;
    row->row_version = next_i64(&c, 1, big);
    *gen = next_i64(&c, 0, big);
    row->level = (int)next_i64(&c, 1, 4);
    row->has_budget = next_i64(&c, 0, 1) == 1;
    row->mode = (int)next_i64(&c, 1, 3);
    row->limit_tokens = next_i64(&c, 0, big);
    row->limit_cost_micros = next_i64(&c, 0, big);
    row->warning_ratio = next_double(&c, 0, 1e6);
    row->backpressure_disabled = next_i64(&c, 0, 1) == 1;
    row->ntiers = (int)next_i64(&c, 0, CG_TIERS_STORE_MAX);
    for (int i = 0; c.ok && i < row->ntiers; i++) {
        row->tier_ratio[i] = next_double(&c, 0, 1e6);
        row->tier_delay_ms[i] = (uint32_t)next_i64(&c, 0, UINT32_MAX);
    }
    row->on_store_failure = (int)next_i64(&c, 1, 3);
    row->local_allowance_tokens = next_i64(&c, 0, big);
    row->reset_period = (int)next_i64(&c, 1, 3);
    row->reservation_ttl_ms = (uint32_t)next_i64(&c, 0, UINT32_MAX);
    row->used_tokens = next_i64(&c, 0, big);
    row->reserved_tokens = next_i64(&c, 0, big);
    row->used_cost_micros = next_i64(&c, 0, big);
    row->reserved_cost_micros = next_i64(&c, 0, big);
    row->version = next_i64(&c, 0, big);
    row->created_at_ms = next_i64(&c, INT64_MIN, big);
    row->updated_at_ms = next_i64(&c, INT64_MIN, big);
    row->closed_at_ms = next_i64(&c, 0, big);
    row->period_start_ms = next_i64(&c, INT64_MIN, big);
    row->next_reset_ms = next_i64(&c, INT64_MIN, big);
    row->approval_ttl_ms = (uint32_t)next_i64(&c, 0, UINT32_MAX);
    row->approved_extra_tokens = next_i64(&c, 0, big);
    row->allocate_from_parent = next_i64(&c, 0, 1) == 1;
    row->allocated_tokens = next_i64(&c, 0, big);
    row->exclude_cache_read_tokens = next_i64(&c, 0, 1) == 1;
    row->spent_input_tokens = next_i64(&c, 0, big);
    row->spent_output_tokens = next_i64(&c, 0, big);
    row->spent_cache_read_tokens = next_i64(&c, 0, big);
    row->spent_cache_write_tokens = next_i64(&c, 0, big);
    row->last_activity_ms = next_i64(&c, 0, big);
    if (!c.ok || *c.p != '=')
        return false;
    const char *key_end = strchr(c.p, '\n');
    if (key_end == NULL || (size_t)(key_end - c.p - 1) >= sizeof row->updated_by_key_id)
        return false;
    cg__redis_copy_str(row->updated_by_key_id, sizeof row->updated_by_key_id, c.p + 1,
                       (size_t)(key_end - c.p - 1));
    size_t dlen = strlen(key_end + 1);
    if (dlen >= sizeof row->description)
        return false;
    memcpy(row->description, key_end + 1, dlen + 1);
    return true;
}

#define ROW_KEY_MAX (CG_UUID_LEN + 3 * (CG_SCOPE_ID_MAX + 1) + 16)

bool cg_redis_path_get(struct cg_redis *redis, const char *tenant_id,
                       const struct cg_scope_ids *ids, struct cg_budget_row out[4], int *n,
                       int64_t *gen)
{
    *gen = -1;
    char keys[5][ROW_KEY_MAX];
    const char *argv[6] = {"MGET"};
    int depth = cg_scope_level(ids);
    struct cg_scope_ids level[4];
    if (!gen_key_name(tenant_id, keys[0], sizeof keys[0]))
        return false;
    argv[1] = keys[0];
    for (int i = 0; i < depth; i++) {
        cg_scope_prefix(ids, i + 1, &level[i]);
        if (!row_key_name(tenant_id, &level[i], keys[i + 1], sizeof keys[i + 1]))
            return false;
        argv[i + 2] = keys[i + 1];
    }
    redisReply *reply = cg__redis_command(redis, "MGET", depth + 2, argv, NULL, 1, depth + 1);
    if (reply == NULL)
        return false;
    bool hit = false;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == (size_t)depth + 1) {
        const redisReply *g = reply->element[0];
        int64_t current = 0;
        bool gen_ok = true;
        if (g->type == REDIS_REPLY_STRING) {
            char *end = NULL;
            char tmp[24];
            cg__redis_copy_str(tmp, sizeof tmp, g->str, g->len);
            errno = 0;
            long long v = strtoll(tmp, &end, 10);
            gen_ok = errno == 0 && end != tmp && *end == '\0' && v >= 0;
            current = gen_ok ? v : 0;
        }
        if (gen_ok)
            *gen = current;
        hit = gen_ok;
        for (int i = 0; hit && i < depth; i++) {
            const redisReply *e = reply->element[i + 1];
            int64_t row_gen = -1;
            memset(&out[i], 0, sizeof out[i]);
            if (e->type != REDIS_REPLY_STRING) {
                hit = false;
            } else if (!cg_redis_row_decode(e->str, e->len, &out[i], &row_gen) ||
                       out[i].level != i + 1) {
                cg_log(CG_LOG_WARN, MOD, NULL, "malformed cache entry, ignored key=%s",
                       keys[i + 1]);
                hit = false;
            } else {
                out[i].ids = level[i];
                hit = row_gen == current;
            }
        }
    }
    freeReplyObject(reply);
    if (hit)
        *n = depth;
    return hit;
}

/* One EVAL of rows_put_script, its arguments built in place. */
struct rows_put {
    char keys[5][ROW_KEY_MAX];
    char versions[4][24];
    char texts[4][CG_REDIS_ROW_TEXT_MAX];
    char ttl[16], fill[24], nkeys[16];
    const char *argv[3 + 5 + 2 + 8];
    size_t lens[3 + 5 + 2 + 8];
    int argc;
    int count; /* rows in it */
};

/* Builds the EVAL that stores rows[0..n) of tenant_id; false when there is nothing to store
 * (no row with a row_version, or a name that does not fit). */
static bool rows_put_build(struct rows_put *c, const char *sha, const char *tenant_id,
                           const struct cg_budget_row *rows, int n, int64_t fill_gen)
{
    int k = 0, count = 0;
    if (n < 1 || n > 4 || !gen_key_name(tenant_id, c->keys[0], sizeof c->keys[0]))
        return false;
    const char *row_args[8];
    size_t row_lens[8];
    for (int i = 0; i < n; i++) {
        if (rows[i].row_version <= 0 ||
            !row_key_name(tenant_id, &rows[i].ids, c->keys[count + 1], sizeof c->keys[count + 1]))
            continue;
        char full[CG_REDIS_ROW_TEXT_MAX];
        size_t len = cg_redis_row_encode(&rows[i], 0, full, sizeof full);
        const char *rest = len ? strchr(full, ' ') : NULL;
        rest = rest ? strchr(rest + 1, ' ') : NULL; /* past "<row_version> <generation>" */
        if (rest == NULL)
            continue;
        struct text_out vo = {c->versions[count], sizeof c->versions[count], 0, true};
        out_i64(&vo, rows[i].row_version, true);
        size_t rest_len = len - (size_t)(rest + 1 - full);
        memcpy(c->texts[count], rest + 1, rest_len);
        row_args[2 * count] = c->versions[count];
        row_lens[2 * count] = strlen(c->versions[count]);
        row_args[2 * count + 1] = c->texts[count];
        row_lens[2 * count + 1] = rest_len;
        count++;
    }
    if (count == 0)
        return false;
    snprintf(c->ttl, sizeof c->ttl, "%d", CG_REDIS_ROW_TTL_MS);
    snprintf(c->fill, sizeof c->fill, "%lld", (long long)(fill_gen < 0 ? -1 : fill_gen));
    snprintf(c->nkeys, sizeof c->nkeys, "%d", count + 1);
    c->argv[k] = "EVALSHA", c->lens[k++] = 7;
    c->argv[k] = sha, c->lens[k++] = 40;
    c->argv[k] = c->nkeys, c->lens[k++] = strlen(c->nkeys);
    for (int i = 0; i <= count; i++)
        c->argv[k] = c->keys[i], c->lens[k++] = strlen(c->keys[i]);
    c->argv[k] = c->ttl, c->lens[k++] = strlen(c->ttl);
    c->argv[k] = c->fill, c->lens[k++] = strlen(c->fill);
    for (int i = 0; i < 2 * count; i++)
        c->argv[k] = row_args[i], c->lens[k++] = row_lens[i];
    c->argc = k;
    c->count = count;
    return true;
}

/* The put c, built for EVALSHA, sends the script's text instead (EVAL), after the node
 * answered NOSCRIPT. */
static void rows_put_with_text(struct rows_put *c)
{
    c->argv[0] = "EVAL", c->lens[0] = 4;
    c->argv[1] = rows_put_script, c->lens[1] = sizeof rows_put_script - 1;
}

void cg_redis_rows_put(struct cg_redis *redis, const char *tenant_id,
                       const struct cg_budget_row *rows, int n, int64_t fill_gen)
{
    struct rows_put c;
    if (!rows_put_build(&c, redis->rows_put_sha, tenant_id, rows, n, fill_gen))
        return;
    redisReply *reply = cg__redis_command(redis, "EVALSHA", c.argc, c.argv, c.lens, 3, c.count + 1);
    if (reply != NULL && cg__redis_reply_noscript(reply)) {
        freeReplyObject(reply);
        rows_put_with_text(&c);
        reply = cg__redis_command(redis, "EVAL", c.argc, c.argv, c.lens, 3, c.count + 1);
    }
    if (reply != NULL)
        freeReplyObject(reply);
}

void cg_redis_rows_put_many(struct cg_redis *redis, const struct cg_redis_rows *sets, int n)
{
    if (n < 1)
        return;
    struct rows_put *builds = malloc((size_t)n * sizeof *builds);
    struct cg__redis_cmd *cmds = malloc((size_t)n * sizeof *cmds);
    redisReply **replies = malloc((size_t)n * sizeof *replies);
    int m = 0;
    for (int i = 0; builds != NULL && cmds != NULL && replies != NULL && i < n; i++) {
        if (!rows_put_build(&builds[m], redis->rows_put_sha, sets[i].tenant_id, sets[i].rows,
                            sets[i].n, -1))
            continue;
        cmds[m] = (struct cg__redis_cmd){builds[m].argc, builds[m].argv, builds[m].lens, 3,
                                         builds[m].count + 1};
        m++;
    }
    if (m > 0) {
        cg__redis_commands(redis, "EVALSHA", m, cmds, replies);
        /* A node without the script (new, restarted, flushed) answered NOSCRIPT: those
         * puts again with its text, which the node then keeps. */
        int again = 0;
        for (int i = 0; i < m; i++) {
            if (replies[i] != NULL && cg__redis_reply_noscript(replies[i])) {
                rows_put_with_text(&builds[i]);
                cmds[again++] = cmds[i];
            }
            if (replies[i] != NULL)
                freeReplyObject(replies[i]);
        }
        if (again > 0) {
            cg__redis_commands(redis, "EVAL", again, cmds, replies);
            for (int i = 0; i < again; i++)
                if (replies[i] != NULL)
                    freeReplyObject(replies[i]);
        }
    }
    free(builds);
    free(cmds);
    free(replies);
}

bool cg_redis_tenant_bump(struct cg_redis *redis, const char *tenant_id)
{
    char key[KEY_NAME_MAX];
    if (!gen_key_name(tenant_id, key, sizeof key))
        return false;
    const char *argv[] = {"INCR", key};
    redisReply *reply = cg__redis_command(redis, "INCR", 2, argv, NULL, 1, 1);
    if (reply == NULL)
        return false;
    freeReplyObject(reply);
    return true;
}

/* store_redis.h - the Redis side of a cg_store: a cache and nothing more (internal to
 * server/store).
 *
 * One struct cg_redis is one thread's connections: to a standalone Redis, one hiredis
 * connection; to a Redis Cluster, one per master node, routed by the cluster's slot map
 * (read with CLUSTER SLOTS when first needed, again on MOVED, after a node failed, and
 * every 10 s), MOVED and ASK followed (at most CG_REDIS_REDIRECTS_MAX per command, then
 * a miss). Which of the two the server is comes from INFO cluster (cg_redis_cluster_mode
 * AUTO) or from the setting. Connections are made lazily. Nothing here ever fails a call:
 * any trouble (unreachable, timeout, error reply) frees that node's connection, counts as
 * a cache miss, logs one warning per outage (mod=store_redis, shared by the process) and
 * waits about a second before the next connection attempt to that node; on a cluster the
 * other nodes' slots keep being served. The store_redis*.c files are the only ones that
 * include hiredis.h (store_redis_internal.h).
 *
 * Keys carry the tenant as a hash tag so that Redis Cluster keeps a tenant's keys on one
 * slot: the entry of an API key is the hash `cg:{<tenant_id>}:key:<key_id>` with the fields
 * tenant_name, secret_hash (64 lower-case hex digits) and revoked ("0" or "1").
 *
 * Budget rows (the shared hot cache of CheckBudget): the row of a scope is the string
 * `cg:{<tenant_id>}:row2:<session_id> <task_id> <agent_id>` (ids hold no spaces; "row2" is the
 * format's version: 2 added allocate_from_parent, allocated_tokens,
 * exclude_cache_read_tokens, the spent_* counters and last_activity_ms), "<row_version>
 * <generation> <fields...>\n<description>" (see cg_redis_row_encode), expiring after
 * CG_REDIS_ROW_TTL_MS; `cg:{<tenant_id>}:gen` is the tenant's generation, a counter that
 * invalidates all its rows at once (a row counts only while its generation is the current
 * one). Writes go through a Lua script that keeps the newest row_version: a fill read
 * before a write can never replace the row that write stored, and a fill read before a
 * generation bump is refused. All keys of a tenant share one hash slot, so one script
 * covers a whole path.
 * Not thread-safe: one cg_redis belongs to one thread at a time.
 */
#ifndef CG_STORE_STORE_REDIS_H
#define CG_STORE_STORE_REDIS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "store/store.h"

#define CG_REDIS_HOST_MAX 255
#define CG_REDIS_SECRET_MAX 255
#define CG_REDIS_ROW_TTL_MS 10000
#define CG_REDIS_ROW_TEXT_MAX 2048
#define CG_REDIS_REDIRECTS_MAX 5

/* Whether the Redis of the URL is a Redis Cluster (config key redis_cluster). */
typedef enum {
    CG_REDIS_CLUSTER_AUTO = 0, /* ask it (INFO cluster: cluster_enabled) on each connect */
    CG_REDIS_CLUSTER_ON,       /* a cluster: its slot map is read, nothing asked */
    CG_REDIS_CLUSTER_OFF,      /* one Redis: every command goes to the URL's node */
} cg_redis_cluster_mode;

/* The parts of redis://[[user]:password@]host[:port][/db]. */
struct cg_redis_addr {
    char host[CG_REDIS_HOST_MAX + 1]; /* "[::1]" brackets removed */
    int port;                         /* 6379 when absent */
    int db;                           /* 0 when absent */
    char user[CG_REDIS_SECRET_MAX + 1];
    char password[CG_REDIS_SECRET_MAX + 1];
};

/* Parses a redis:// URL into *out. CG_CONFIG with err naming the problem (never the
 * password) when it is not one. Thread-safe. */
cg_status cg_redis_url_parse(const char *url, struct cg_redis_addr *out,
                             struct cg_err *err) CG_MUST_CHECK;

/* A new, unconnected handle for url (copied), with connect and command timeouts of
 * timeout_ms. A URL that does not parse is logged once and gives a handle that never
 * connects (every lookup a miss). NULL when out of memory. */
struct cg_redis *cg_redis_new(const char *url, int timeout_ms);

/* The cluster mode of "auto", "on" or "off" (NULL: auto) into *out. false for anything
 * else. Thread-safe. */
bool cg_redis_cluster_mode_parse(const char *text, cg_redis_cluster_mode *out) CG_MUST_CHECK;

/* Sets the cluster mode of a handle that has sent no command yet (default AUTO). */
void cg_redis_set_cluster_mode(struct cg_redis *redis, cg_redis_cluster_mode mode);

/* Closes every connection and frees the handle. NULL is a no-op. */
void cg_redis_free(struct cg_redis *redis);

/* Shares flag (borrowed, must outlive redis; NULL: redis's own) with the other handles of
 * the process: an outage is logged as a warning once, by the first handle to see it. */
void cg_redis_set_outage_log(struct cg_redis *redis, atomic_int *flag);

/* Counts every command's time into seconds and the commands that got no answer into errors,
 * in the given metrics slot (base/metrics.h; NULL handles: nothing). */
void cg_redis_set_meters(struct cg_redis *redis, struct cg_metric *seconds,
                         struct cg_metric *errors, uint32_t slot);

/* Whether the last command got an answer (false before the first one). */
bool cg_redis_ok(const struct cg_redis *redis);

/* Reads the cached entry of a key into *out. true on a hit; false on a miss, a malformed
 * entry or any Redis trouble (out is then unspecified). */
bool cg_redis_key_get(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      struct cg_key_auth *out);

/* Caches an entry for ttl_s seconds (> 0), replacing any previous one, atomically (the
 * entry never exists without its expiry), except that an entry saying revoked is never
 * replaced by one that does not: a lookup that read PostgreSQL before a revocation and
 * writes after it cannot bring the key back (cg_redis_key_revoke). Best effort. */
void cg_redis_key_put(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, int ttl_s);

/* Marks the entry of a key revoked, keeping its expiry; without an entry, leaves a marker
 * that expires in ttl_s seconds (> 0), which cg_redis_key_get reads as a miss and which
 * keeps cg_redis_key_put from storing the key as valid meanwhile. Best effort: returns
 * whether Redis confirmed it. */
bool cg_redis_key_revoke(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                         int ttl_s);

/* Deletes the entry of a key. Best effort: returns whether Redis confirmed it. */
bool cg_redis_key_drop(struct cg_redis *redis, const char *tenant_id, const char *key_id);

/* Writes the cache key of (tenant_id, key_id) into buf of size cap. Returns false when it
 * does not fit. Thread-safe. */
bool cg_redis_key_name(const char *tenant_id, const char *key_id, char *buf, size_t cap);

/* Encodes row (with generation gen) as the cached text into buf of size cap; returns its
 * length, 0 when it does not fit. Thread-safe. */
size_t cg_redis_row_encode(const struct cg_budget_row *row, int64_t gen, char *buf, size_t cap);

/* Decodes len bytes of cached text into *row (ids not touched) and *gen; false when they
 * are not a well-formed row (hostile input: every field is bounded and checked).
 * Thread-safe. */
bool cg_redis_row_decode(const char *text, size_t len, struct cg_budget_row *row, int64_t *gen);

/* Reads the path to ids (levels 1..depth, tenant first) in one MGET into out[] (each
 * row's ids filled from ids): true when every row is cached in the current generation.
 * *gen gets the tenant's generation when Redis answered (0 when none yet), -1 otherwise;
 * a fill that read PostgreSQL after this call passes it to cg_redis_rows_put. */
bool cg_redis_path_get(struct cg_redis *redis, const char *tenant_id,
                       const struct cg_scope_ids *ids, struct cg_budget_row out[4], int *n,
                       int64_t *gen);

/* Stores rows[0..n) (1..4, one tenant) in one script, each only when newer than the cached
 * one (row_version; rows with row_version 0 are skipped). fill_gen >= 0: a fill, refused
 * when the tenant's generation moved past fill_gen; -1: a committed write, stored in the
 * current generation. Best effort. */
void cg_redis_rows_put(struct cg_redis *redis, const char *tenant_id,
                       const struct cg_budget_row *rows, int n, int64_t fill_gen);

/* The rows of one tenant's path as a committed write left them (1..4 rows). */
struct cg_redis_rows {
    const char *tenant_id;
    const struct cg_budget_row *rows;
    int n;
};

/* cg_redis_rows_put of each set of sets[0..n) (fill_gen -1: committed writes), the sets of
 * one node in one round trip (a pipeline). Best effort. */
void cg_redis_rows_put_many(struct cg_redis *redis, const struct cg_redis_rows *sets, int n);

/* Invalidates every cached row of the tenant (its generation + 1). Best effort: returns
 * whether Redis confirmed it. */
bool cg_redis_tenant_bump(struct cg_redis *redis, const char *tenant_id);

#endif

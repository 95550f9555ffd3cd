/* store_redis.h - the Redis side of a cg_store: a cache and nothing more (internal to
 * server/store).
 *
 * One struct cg_redis is one hiredis connection, made lazily. Nothing here ever fails a
 * call: any trouble (unreachable, timeout, error reply) frees the connection, counts as a
 * cache miss, logs one warning per outage (mod=store_redis, shared by the process) and
 * waits about a second before the next connection attempt. store_redis.c is the only file
 * that includes hiredis.h.
 *
 * Keys carry the tenant as a hash tag so that Redis Cluster keeps a tenant's keys on one
 * slot: the entry of an API key is the hash `cg:{<tenant_id>}:key:<key_id>` with the fields
 * tenant_name, secret_hash (64 lower-case hex digits) and revoked ("0" or "1").
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

/* Closes the connection and frees the handle. NULL is a no-op. */
void cg_redis_free(struct cg_redis *redis);

/* Whether the last command got an answer (false before the first one). */
bool cg_redis_ok(const struct cg_redis *redis);

/* Reads the cached entry of a key into *out. true on a hit; false on a miss, a malformed
 * entry or any Redis trouble (out is then unspecified). */
bool cg_redis_key_get(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      struct cg_key_auth *out);

/* Caches an entry for ttl_s seconds (> 0), replacing any previous one, atomically (the
 * entry never exists without its expiry). Best effort. */
void cg_redis_key_put(struct cg_redis *redis, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, int ttl_s);

/* Deletes the entry of a key. Best effort: returns whether Redis confirmed it. */
bool cg_redis_key_drop(struct cg_redis *redis, const char *tenant_id, const char *key_id);

/* Writes the cache key of (tenant_id, key_id) into buf of size cap. Returns false when it
 * does not fit. Thread-safe. */
bool cg_redis_key_name(const char *tenant_id, const char *key_id, char *buf, size_t cap);

#endif

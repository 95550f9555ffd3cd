/* store.h - the storage interface the rpc layer sees.
 *
 * A cg_store is one worker's pair of connections: PostgreSQL (the source of truth)
 * and Redis (a cache only). Each worker-pool thread owns one; a cg_store is not
 * thread-safe and must not be shared. Connections are made lazily and remade after
 * a failure, so a store survives PostgreSQL or Redis restarts by itself.
 *
 * Errors: PostgreSQL unreachable -> CG_UNAVAILABLE ("storage unavailable"); a statement
 * that ran past its timeout -> CG_DEADLINE_EXCEEDED; SQL text and SQLSTATEs go to the
 * log only. Redis trouble is never an error: it is a cache miss and a warning.
 * A success return means the write is committed. A connection found dead before a
 * statement is sent is replaced silently; a read cut off after it was sent is retried
 * once on a new connection; a write cut off after it may have reached the server is
 * never re-sent: CG_UNAVAILABLE (its outcome is unknown).
 * Tenant ids are UUIDs in the canonical 8-4-4-4-12 form (either case); they come back in
 * lower case.
 */
#ifndef CG_STORE_STORE_H
#define CG_STORE_STORE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define CG_UUID_LEN 36
#define CG_KEY_ID_LEN 16
#define CG_NAME_MAX 200
#define CG_TZ_MAX 64
#define CG_STORE_PAGE_MAX 1000 /* largest `limit` of the list functions */

struct cg_store;

struct cg_store_opts {
    const char *pg_dsn;          /* libpq URI or keyword string; its settings win */
    const char *redis_url;       /* NULL or "" disables the cache */
    int pg_connect_timeout_ms;   /* <= 0: 3000 */
    int pg_statement_timeout_ms; /* <= 0: 5000 */
    int redis_timeout_ms;        /* connect and command timeout; <= 0: 100 */
    int key_cache_ttl_s;         /* 0: do not cache key lookups */
};

struct cg_tenant {
    char tenant_id[CG_UUID_LEN + 1];
    char name[CG_NAME_MAX * 4 + 1]; /* UTF-8: up to 200 characters */
    char time_zone[CG_TZ_MAX + 1];
    int64_t created_at_ms;
};

struct cg_api_key {
    char tenant_id[CG_UUID_LEN + 1];
    char key_id[CG_KEY_ID_LEN + 1];
    char name[CG_NAME_MAX * 4 + 1];
    int64_t created_at_ms;
    int64_t revoked_at_ms; /* 0 while active */
};

/* What authentication needs from a key lookup. */
struct cg_key_auth {
    char tenant_name[CG_NAME_MAX * 4 + 1];
    uint8_t secret_hash[32];
    bool revoked;
};

/* A new store; connects lazily. opts' strings are copied. NULL when out of memory. */
struct cg_store *cg_store_new(const struct cg_store_opts *opts);

/* Closes the connections and frees the store. NULL is a no-op. */
void cg_store_free(struct cg_store *store);

/* Sets the monotonic deadline (cg_mono_ms clock) of the current call: statements get
 * a timeout no longer than what is left (and no longer than pg_statement_timeout_ms);
 * 0 clears it. When the deadline has passed, calls fail with CG_DEADLINE_EXCEEDED
 * without touching the database. */
void cg_store_set_deadline(struct cg_store *store, int64_t deadline_mono_ms);

/* Sets the request id that the store's log lines carry (copied, at most 32 bytes);
 * NULL clears it. */
void cg_store_set_request_id(struct cg_store *store, const char *rid);

/* Runs `SELECT 1` on PostgreSQL (reconnecting if needed). CG_OK when it answered. */
cg_status cg_store_ping(struct cg_store *store, struct cg_err *err) CG_MUST_CHECK;

/* Whether Redis answered the last command (for logs and tests). */
bool cg_store_redis_ok(const struct cg_store *store);

/* Applies pending migrations (see migrate.h) under an advisory lock, so that replicas
 * starting together apply each migration once. *applied gets how many were applied.
 * Each migration commits with its schema_migrations row; a failing one -> CG_INTERNAL
 * naming it (the ones before it stay applied). No statement timeout applies to
 * migrations, only the deadline when one is set. */
cg_status cg_store_migrate(struct cg_store *store, int *applied, struct cg_err *err) CG_MUST_CHECK;

/* --- tenants --------------------------------------------------------------------- */

/* Creates a tenant. name: valid UTF-8, 1..200 characters; time_zone must be an IANA name
 * PostgreSQL knows. CG_INVALID_ARGUMENT naming `name` or `time_zone` otherwise. */
cg_status cg_store_tenant_create(struct cg_store *store, const char *name, const char *time_zone,
                                 struct cg_tenant *out, struct cg_err *err) CG_MUST_CHECK;

/* Reads a tenant. CG_NOT_FOUND when there is none (also for ids that are not UUIDs). */
cg_status cg_store_tenant_get(struct cg_store *store, const char *tenant_id, struct cg_tenant *out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Pages tenants by creation order. after_id: "" (or NULL) for the first page, else the
 * last id of the previous page (CG_INVALID_ARGUMENT naming after_id when it names no
 * tenant). Fills up to `limit` (1..CG_STORE_PAGE_MAX, else CG_INVALID_ARGUMENT naming
 * limit) entries of out (caller-allocated); *count gets how many; *more whether another
 * page exists. */
cg_status cg_store_tenant_list(struct cg_store *store, const char *after_id, int limit,
                               struct cg_tenant *out, int *count, bool *more,
                               struct cg_err *err) CG_MUST_CHECK;

/* --- API keys ---------------------------------------------------------------------- */

/* Stores a key: id and the SHA-256 of its secret (never the secret). CG_NOT_FOUND when
 * the tenant does not exist; CG_INVALID_ARGUMENT naming key_id (1..16 of [A-Za-z0-9_-]),
 * secret_hash (NULL) or name (valid UTF-8, at most 200 characters; NULL means "");
 * CG_ALREADY_EXISTS naming key_id when the tenant already has that key id. */
cg_status cg_store_key_create(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const uint8_t secret_hash[32], const char *name,
                              struct cg_api_key *out, struct cg_err *err) CG_MUST_CHECK;

/* Lists a tenant's keys, newest first, at most `limit` (1..CG_STORE_PAGE_MAX) entries of
 * out (caller-allocated); *count gets how many. CG_NOT_FOUND when the tenant does not
 * exist. */
cg_status cg_store_key_list(struct cg_store *store, const char *tenant_id, int limit,
                            struct cg_api_key *out, int *count, struct cg_err *err) CG_MUST_CHECK;

/* Revokes a key (idempotent: revoking twice keeps the first time) and drops it from
 * the cache. CG_NOT_FOUND when the tenant has no such key. */
cg_status cg_store_key_revoke(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_api_key *out, struct cg_err *err) CG_MUST_CHECK;

/* Looks a key up for authentication: Redis first (when enabled), PostgreSQL on a miss
 * (then cached for key_cache_ttl_s). CG_NOT_FOUND when there is no such key (also for
 * malformed ids). A revoked key is found, with revoked set. */
cg_status cg_store_key_lookup(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_key_auth *out, struct cg_err *err) CG_MUST_CHECK;

#endif

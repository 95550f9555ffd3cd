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

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "core/scope.h"

struct cg_metric; /* base/metrics.h */

#define CG_UUID_LEN 36
/* Requests of one batched transaction, at most (store.h "batches"). */
#define CG_BATCH_MAX 128
/* Rows of one scope path: tenant, session, task, agent. */
#define CG_PATH_ROWS_MAX 4
#define CG_KEY_ID_LEN 16
#define CG_NAME_MAX 200
#define CG_TZ_MAX 64
#define CG_CALL_TOKENS_DEFAULT 10000000LL /* a tenant's max_call_tokens unless set */
#define CG_STORE_PAGE_MAX 1000            /* largest `limit` of the list functions */
#define CG_STORE_USAGE_NODES_MAX 5000     /* most nodes of one cg_store_usage_by_model call */

struct cg_store;
struct cg_audit; /* who made a change ("the audit trail" below) */

/* Whether an outage of PostgreSQL (pg) or Redis (redis) has been logged and not yet been
 * followed by a success. Shared by every store and listener of a process (the application
 * object owns it) so that an outage is one warning, not one per thread. Zero-initialised;
 * must outlive the stores that use it. */
struct cg_store_outages {
    atomic_int pg;
    atomic_int redis;
};

struct cg_store_opts {
    const char *pg_dsn;               /* libpq URI or keyword string; its settings win */
    const char *redis_url;            /* NULL or "" disables the cache */
    int pg_connect_timeout_ms;        /* <= 0: 3000 */
    int pg_statement_timeout_ms;      /* <= 0: 5000 */
    int redis_timeout_ms;             /* connect and command timeout; <= 0: 100 */
    const char *redis_cluster;        /* "auto" (NULL), "on" or "off": store_redis.h */
    int key_cache_ttl_s;              /* 0: do not cache key lookups */
    struct cg_store_outages *outages; /* borrowed, shared; NULL: the store logs on its own */
    /* What every store counts (base/metrics.h handles, borrowed; NULL members: nothing):
     * each PostgreSQL statement and Redis command's time, and those that failed for the
     * store's sake (unreachable, timed out, broken); the approvals it opened, decided and
     * stored expired (every path: a request, ResolveApproval, the sweeper, CloseScope),
     * each counted when the transaction that wrote it commits. */
    struct cg_store_meters {
        struct cg_metric *pg_seconds, *pg_errors;
        struct cg_metric *redis_seconds, *redis_errors;
        struct cg_metric *approvals_requested, *approvals_approved, *approvals_denied,
            *approvals_expired;
    } meters;
};

/* What a tenant's calls do with PII (admin.proto TenantSettings). */
struct cg_tenant_settings {
    unsigned redact_types;      /* 1u << PiiType per type (bits 1..8); 0: every type */
    bool redact_artifacts;      /* Compress redacts offloaded artifacts before storing them */
    int64_t max_call_tokens;    /* the most tokens one Commit/RecordUsage records; 0: default */
    int history_retention_days; /* sessions idle this long are deleted (sweeper); 0: kept */
};

#define CG_TENANT_PII_TYPES_MASK 0x1feu /* bits 1..8: the PiiTypes there are */

struct cg_tenant {
    char tenant_id[CG_UUID_LEN + 1];
    char name[CG_NAME_MAX * 4 + 1]; /* UTF-8: up to 200 characters */
    char time_zone[CG_TZ_MAX + 1];
    int64_t created_at_ms;
    struct cg_tenant_settings settings;
};

struct cg_api_key {
    char tenant_id[CG_UUID_LEN + 1];
    char key_id[CG_KEY_ID_LEN + 1];
    char name[CG_NAME_MAX * 4 + 1];
    int64_t created_at_ms;
    int64_t revoked_at_ms;                      /* 0 while active */
    int role;                                   /* core/role.h cg_role: 1 agent .. 4 admin */
    char scope_session_id[CG_SCOPE_ID_MAX + 1]; /* the bound subtree; "" the whole tenant */
    char scope_task_id[CG_SCOPE_ID_MAX + 1];    /* "" unless bound to a task */
    int64_t expires_at_ms;                      /* 0 never */
    int64_t last_used_at_ms;                    /* 0 never */
    char created_by_key_id[CG_KEY_ID_LEN + 1];  /* "" for the server's admin key */
};

/* What a new key is (cg_store_key_create): its role, bound subtree and expiry. */
struct cg_api_key_spec {
    const char *name;              /* NULL or "" for none */
    int role;                      /* 1..4 */
    const char *scope_session_id;  /* NULL or "" for the whole tenant */
    const char *scope_task_id;     /* NULL or "": not bound to a task */
    int64_t expires_at_ms;         /* unix ms; 0 never */
    const char *created_by_key_id; /* NULL or "" for the server's admin key */
};

/* What authentication needs from a key lookup. */
struct cg_key_auth {
    char tenant_name[CG_NAME_MAX * 4 + 1];
    uint8_t secret_hash[32];
    bool revoked;
    int role; /* cg_role */
    char scope_session_id[CG_SCOPE_ID_MAX + 1];
    char scope_task_id[CG_SCOPE_ID_MAX + 1];
    int64_t expires_at_ms;   /* unix ms; 0 never */
    int64_t max_call_tokens; /* the tenant's setting */
};

/* A new store; connects lazily. opts' strings are copied. NULL when out of memory. */
struct cg_store *cg_store_new(const struct cg_store_opts *opts);

/* The metrics slot (base/metrics.h) the store's thread counts into: the thread's own (claimed
 * by it), or CG_METRICS_SHARED_SLOT, the default. */
void cg_store_set_metrics_slot(struct cg_store *store, uint32_t slot);

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

/* Runs `SELECT 1` on PostgreSQL (reconnecting if needed). CG_OK when it answered. The
 * store's deadline is strict here: no answer by then is an error (the connection is
 * dropped), so a frozen server cannot hold the caller past it. */
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
 * PostgreSQL knows. CG_INVALID_ARGUMENT naming `name` or `time_zone` otherwise. Audited as
 * tenant_created by the server's admin key, without a request id. */
cg_status cg_store_tenant_create(struct cg_store *store, const char *name, const char *time_zone,
                                 struct cg_tenant *out, struct cg_err *err) CG_MUST_CHECK;

/* cg_store_tenant_create with settings (NULL: the defaults, all zero), in one statement
 * that also writes the audit row tenant_created (after: name, time zone, settings) by
 * audit's actor. CG_INVALID_ARGUMENT naming `settings.redact_types` for bits outside
 * CG_TENANT_PII_TYPES_MASK. */
cg_status cg_store_tenant_create_with(struct cg_store *store, const char *name,
                                      const char *time_zone,
                                      const struct cg_tenant_settings *settings,
                                      const struct cg_audit *audit, struct cg_tenant *out,
                                      struct cg_err *err) CG_MUST_CHECK;

/* Replaces a tenant's settings and reads the tenant back into out, in one statement that
 * also writes the audit row tenant_settings_updated (the settings before and after) by
 * audit's actor. CG_NOT_FOUND "tenant_id: no such tenant"; CG_INVALID_ARGUMENT as for
 * cg_store_tenant_create_with. */
cg_status cg_store_tenant_settings_put(struct cg_store *store, const char *tenant_id,
                                       const struct cg_tenant_settings *settings,
                                       const struct cg_audit *audit, struct cg_tenant *out,
                                       struct cg_err *err) CG_MUST_CHECK;

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
 * secret_hash (NULL), spec's name (valid UTF-8, at most 200 characters; NULL means ""),
 * role (1..4) or scope (ids of at most 128 bytes, a task needs its session);
 * CG_ALREADY_EXISTS naming key_id when the tenant already has that key id. The same
 * statement writes the audit row api_key_created (target the key id; after: role, scope,
 * expiry, name) by audit's actor. */
cg_status cg_store_key_create(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const uint8_t secret_hash[32], const struct cg_api_key_spec *spec,
                              const struct cg_audit *audit, struct cg_api_key *out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Lists a tenant's keys, newest first, at most `limit` (1..CG_STORE_PAGE_MAX) entries of
 * out (caller-allocated); *count gets how many. CG_NOT_FOUND when the tenant does not
 * exist. */
cg_status cg_store_key_list(struct cg_store *store, const char *tenant_id, int limit,
                            struct cg_api_key *out, int *count, struct cg_err *err) CG_MUST_CHECK;

/* Revokes a key (idempotent: revoking twice keeps the first time) and marks it revoked
 * in the Redis cache. The commit announces it to every server (cg_keys, migrations/0017).
 * The revocation that takes effect writes, in its transaction, the audit row
 * api_key_revoked (target the key id) by audit's actor; a repeated one writes none.
 * CG_NOT_FOUND when the tenant has no such key. */
cg_status cg_store_key_revoke(struct cg_store *store, const char *tenant_id, const char *key_id,
                              const struct cg_audit *audit, struct cg_api_key *out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Looks a key up for authentication: Redis first (when enabled), PostgreSQL on a miss
 * (then cached for key_cache_ttl_s). CG_NOT_FOUND when there is no such key (also for
 * malformed ids). A revoked key is found, with revoked set. */
cg_status cg_store_key_lookup(struct cg_store *store, const char *tenant_id, const char *key_id,
                              struct cg_key_auth *out, struct cg_err *err) CG_MUST_CHECK;

/* As cg_store_key_lookup, but reads PostgreSQL without looking at Redis first (its answer
 * is still written there): for a key announced as revoked or changed, whose Redis entry
 * may predate the announcement. */
cg_status cg_store_key_lookup_fresh(struct cg_store *store, const char *tenant_id,
                                    const char *key_id, struct cg_key_auth *out,
                                    struct cg_err *err) CG_MUST_CHECK;

/* Records that the key was used now (ApiKey.last_used_at_unix_ms, to the minute): at most
 * one write per key per minute in PostgreSQL. Best effort: callers may ignore a failure. */
cg_status cg_store_key_touch(struct cg_store *store, const char *tenant_id, const char *key_id,
                             struct cg_err *err);

/* --- budgets (scopes) -------------------------------------------------------------- *
 *
 * A scope is tenant -> session -> task -> agent, named by ids ("" for the levels below
 * it). Each scope that exists has one row: its budget (when set) and its counters, kept
 * for all replicas in PostgreSQL. Operations on budgets run inside a transaction the
 * caller opens with cg_store_begin and ends with cg_store_commit or cg_store_rollback;
 * cg_store_path_lock locks the rows of a path (tenant first, always in that order, so
 * concurrent transactions cannot deadlock) and no interleaving of callers on any number
 * of replicas can then act on stale counters.
 */

#define CG_TIERS_STORE_MAX 8
#define CG_MODEL_MAX 200
#define CG_IDEMPOTENCY_MAX 128

/* struct cg_scope_ids, its level and path: core/scope.h. */

/* Adds "scope" to err's metadata (status.h): the scope's path "session/task/agent" as far as
 * ids go, or "tenant" for the tenant level. err may be NULL. Never allocates. */
void cg_store_err_scope(struct cg_err *err, const struct cg_scope_ids *ids);

/* --- the audit trail -------------------------------------------------------------- *
 *
 * Every privileged change (SetBudget, CloseScope, ResolveApproval, key creation and
 * revocation, tenant creation and settings) writes one row of audit_events
 * (migrations/0016_trust.sql, admin.proto AuditEvent) in the transaction of the change: a
 * change that rolls back leaves no row, one that commits always has its row. The table is
 * append-only (a trigger refuses UPDATE, DELETE and TRUNCATE); nothing here prunes it.
 * The functions that change something take the actor as a `const struct cg_audit *`; NULL
 * means the server's admin key with no request id (what tests and tools use).
 */

#define CG_AUDIT_KIND_MAX 40       /* bytes of a kind, [a-z_] */
#define CG_AUDIT_REQUEST_ID_MAX 64 /* bytes of a request id kept (x-request-id's bound) */
#define CG_AUDIT_TARGET_MAX 64     /* bytes of a target: a key id, an approval id */
#define CG_AUDIT_JSON_MAX 65536    /* bytes of before or after read back (longer: cut off) */

/* Who made a change. Strings are borrowed for the call. */
struct cg_audit {
    const char *actor_key_id; /* NULL or "" for the server's admin key */
    int actor_role;           /* 0 the server's admin key, else the key's role 1..4 */
    const char *request_id;   /* NULL or "" for none; cut to CG_AUDIT_REQUEST_ID_MAX */
};

/* One row of the trail as read back. */
struct cg_audit_event {
    int64_t audit_id; /* increases with each row of a tenant */
    int64_t at_ms;    /* unix ms */
    char actor_key_id[CG_KEY_ID_LEN + 1];
    int actor_role;
    char kind[CG_AUDIT_KIND_MAX + 1];
    struct cg_scope_ids ids; /* all "" when the change has no scope */
    char target[CG_AUDIT_TARGET_MAX + 1];
    char request_id[CG_AUDIT_REQUEST_ID_MAX + 1];
    char *before_json; /* owned (cg_audit_events_cleanup); NULL when there is none */
    char *after_json;
};

/* What cg_store_audit_list selects. Zero it, then set what applies. */
struct cg_audit_filter {
    /* with has_scope: rows of scope and the scopes under it (an empty session: every row) */
    bool has_scope;
    struct cg_scope_ids scope;
    /* the subtree a scope-bound key reaches ("" unbound): rows outside it are left out, and
     * so are rows without a scope when bound_session_id is set */
    const char *bound_session_id;
    const char *bound_task_id;
    bool has_actor;           /* only rows of actor_key_id ("" = the server's admin key) */
    const char *actor_key_id; /* with has_actor */
    const char *kind;         /* NULL or "" any; else [a-z_]{1,40} */
    int64_t since_ms;         /* at or after (unix ms); 0 unbounded */
    int64_t until_ms;         /* before; 0 unbounded */
};

/* One page of the tenant's trail, newest first: rows with audit_id < before_id (0: from
 * the newest) that match filter, up to limit (1..CG_STORE_PAGE_MAX, else
 * CG_INVALID_ARGUMENT naming limit) into out (caller-allocated); *count gets how many,
 * *more whether older rows follow (the next page starts before out[*count - 1].audit_id).
 * CG_INVALID_ARGUMENT naming kind, before_id or the scope's field when malformed. A tenant
 * id that is not a UUID has no rows. One statement. On success the caller frees out's
 * JSON with cg_audit_events_cleanup(out, *count); on error nothing is held. */
cg_status cg_store_audit_list(struct cg_store *store, const char *tenant_id,
                              const struct cg_audit_filter *filter, int64_t before_id, int limit,
                              struct cg_audit_event *out, int *count, bool *more,
                              struct cg_err *err) CG_MUST_CHECK;

/* Frees the JSON of events[0..count); harmless twice. */
void cg_audit_events_cleanup(struct cg_audit_event *events, int count);

/* One scope's row. Settings are meaningful when has_budget. */
struct cg_budget_row {
    struct cg_scope_ids ids;
    int level; /* 1 tenant, 2 session, 3 task, 4 agent */
    bool has_budget;
    int mode; /* 1 HARD, 2 SOFT, 3 APPROVAL */
    int64_t limit_tokens;
    int64_t limit_cost_micros; /* 0: none */
    double warning_ratio;
    bool backpressure_disabled;
    double tier_ratio[CG_TIERS_STORE_MAX];
    uint32_t tier_delay_ms[CG_TIERS_STORE_MAX];
    int ntiers;           /* 0 with backpressure enabled: the defaults */
    int on_store_failure; /* 1 fail closed, 2 fail open, 3 local allowance */
    int64_t local_allowance_tokens;
    int reset_period; /* 1 none, 2 daily, 3 monthly (tenant level only) */
    uint32_t reservation_ttl_ms;
    char description[CG_NAME_MAX * 4 + 1];
    /* counters */
    int64_t used_tokens;
    int64_t reserved_tokens;
    int64_t used_cost_micros;
    int64_t reserved_cost_micros;
    /* bookkeeping */
    int64_t version;     /* +1 on every SetBudget */
    int64_t row_version; /* +1 on every write of the row (migration 0008); 0: unknown */
    int64_t created_at_ms;
    int64_t updated_at_ms;
    int64_t closed_at_ms; /* 0 while open */
    char updated_by_key_id[CG_KEY_ID_LEN + 1];
    /* resets: with a reset period (tenant level), the period the used counters count,
     * [period_start_ms, next_reset_ms) in unix ms; both 0 without a reset period */
    int64_t period_start_ms;
    int64_t next_reset_ms;
    /* approvals (APPROVAL mode): how long an approval stays PENDING (0 outside that mode),
     * and the tokens approvals added to limit_tokens since the last SetBudget or reset */
    uint32_t approval_ttl_ms;
    int64_t approved_extra_tokens;
    /* migration 0011: used_tokens leaves cache reads out when set; spent_* count every
     * token recorded on the scope or below by kind (current period, like used_tokens);
     * last_activity_ms is the last reservation or usage (0: none) */
    bool exclude_cache_read_tokens;
    int64_t spent_input_tokens;
    int64_t spent_output_tokens;
    int64_t spent_cache_read_tokens;
    int64_t spent_cache_write_tokens;
    int64_t last_activity_ms;
    /* migration 0013: the budget carves its share out of its parent (allocate_from_parent);
     * allocated_tokens is what this scope holds for its open allocated children, the sum
     * of their cg_store_alloc_share() (kept by a trigger on every write) */
    bool allocate_from_parent;
    int64_t allocated_tokens;
};

/* The share an open allocated child (allocate_from_parent, with a budget, not closed) holds
 * of its parent: max(0, limit_tokens - used_tokens - reserved_tokens), saturating; 0 for
 * any other row. As migrations/0013_allocation.sql's cg_alloc_share. */
int64_t cg_store_alloc_share(const struct cg_budget_row *row);

/* A statement changed rows[0..n) in place, whose shares before it were share_before[i]
 * (cg_store_alloc_share of each row before); this does to the rows what the allocation
 * trigger of migration 0013 did after the statement, which the statement's RETURNING
 * does not show: for each row whose share changed, its parent (when among rows[]) gets
 * one more row_version, and with add_allocated also allocated_tokens moved by the change
 * (never below 0). Rows whose parent is not in rows[] change nothing. Thread-safe. */
void cg_store_alloc_mirror(struct cg_budget_row *rows, int n, const int64_t *share_before,
                           bool add_allocated);

struct cg_usage {
    int64_t input_tokens;
    int64_t output_tokens;
    int64_t cache_read_tokens;
    int64_t cache_write_tokens;
    int64_t cost_micros;
};

struct cg_reservation {
    char reservation_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    int64_t tokens;
    int64_t cost_micros;
    char model[CG_MODEL_MAX * 4 + 1];
    char estimate_id[CG_IDEMPOTENCY_MAX + 1];
    int state; /* 1 ACTIVE, 2 COMMITTED, 3 RELEASED, 4 EXPIRED */
    int64_t created_at_ms;
    int64_t expires_at_ms;
    int64_t settled_at_ms;
    struct cg_usage committed; /* when COMMITTED */
    bool replayed;             /* set by cg_store_reservation_insert for a repeated key */
};

/* Transactions: one at a time per store. begin fails with CG_UNAVAILABLE when PostgreSQL
 * cannot be reached; commit returns CG_OK only once the transaction is durable; any error
 * inside leaves the transaction to be rolled back by the caller. rollback is harmless
 * when no transaction is open.
 * A connection lost inside a transaction takes the transaction with it: that call and
 * every later one answer CG_UNAVAILABLE (nothing is re-sent, not even a read) until the
 * caller rolls back; a commit cut off that way is CG_UNAVAILABLE (outcome unknown). A
 * commit past the deadline sends nothing (CG_DEADLINE_EXCEEDED) and leaves the transaction
 * to rollback, which runs whatever the deadline, since it releases row locks. A commit
 * after an error inside the transaction is CG_INTERNAL (PostgreSQL rolled it back). begin
 * with a transaction still open rolls that one back first (and logs an error). The
 * functions below that run "inside a transaction" answer CG_INTERNAL outside one.
 * Scope ids in all of them: each at most CG_SCOPE_ID_MAX bytes of valid UTF-8; a task
 * needs a session, an agent a task (CG_INVALID_ARGUMENT naming the field otherwise). */
cg_status cg_store_begin(struct cg_store *store, struct cg_err *err) CG_MUST_CHECK;
cg_status cg_store_commit(struct cg_store *store, struct cg_err *err) CG_MUST_CHECK;
void cg_store_rollback(struct cg_store *store);

/* Inside a transaction: reads, and with lock FOR UPDATE locks, the rows of the path to
 * ids, tenant first: out[0] the tenant (a row without a budget when none was ever set),
 * then each level down to ids'. *n gets how many (1..4). A missing session, task or agent
 * row: CG_NOT_FOUND naming the field ("scope.session_id: no such session", ...), unless
 * allow_missing_last, in which case the last level may be missing (*n is one short) so
 * that SetBudget can create it. The tenant row is created when missing. A tenant that
 * does not exist: CG_NOT_FOUND "tenant_id: no such tenant". (The lock is FOR NO KEY
 * UPDATE: it excludes other path locks and updates, not foreign key checks.)
 * now_ms (unix ms; cg_wall_ms() in production) is the time of the call: when the tenant
 * budget's reset is due (next_reset_ms <= now_ms) it is applied in this transaction before
 * anything is returned (see "sweeper and resets"), so out[0] counts the new period. That
 * writes the tenant row (and so locks it) also when lock is false. */
cg_status cg_store_path_read(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool lock, bool allow_missing_last,
                             int64_t now_ms, struct cg_budget_row out[4], int *n,
                             struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: creates or replaces the settings of row->ids (counters untouched,
 * version + 1, updated_by_key_id recorded). *out gets the row as stored, *created whether
 * it is new. expected_version > 0 must equal the stored version (CG_ABORTED naming
 * `expected_version` otherwise).
 * Call it after cg_store_path_read with lock (and allow_missing_last) on the same path, so
 * that rows are locked in path order. The level follows from row->ids (row->level is not
 * read). The parent of a task or agent must exist (CG_NOT_FOUND naming the first missing
 * id); a session's parent, the tenant row, is created when missing. With has_budget the
 * settings are checked (CG_INVALID_ARGUMENT naming `settings.<field>`; a reset_period
 * other than 1 only at the tenant level); without it neutral settings are stored.
 * *created is true when this call gave the scope its first budget (the stored version is
 * 1): a new row, or the tenant's row that had only counted usage. A scope that has never
 * had a budget has version 0, so an expected_version > 0 for it is CG_ABORTED. key_id NULL
 * or "" records none.
 * A tenant budget whose reset_period changes (or that gets its first) starts counting
 * periods at now_ms (unix ms): period_start_ms and next_reset_ms are those of the period
 * containing now_ms in the tenant's time zone. The counters are not touched: usage counted
 * so far stays until the next boundary. An unchanged reset_period keeps its period.
 * The same statement writes the audit row budget_set (before: the budget as it was, null
 * when the scope had none; after: as stored) by audit's actor. */
cg_status cg_store_budget_put(struct cg_store *store, const char *tenant_id,
                              const struct cg_budget_row *row, int64_t expected_version,
                              const char *key_id, int64_t now_ms, const struct cg_audit *audit,
                              struct cg_budget_row *out, bool *created,
                              struct cg_err *err) CG_MUST_CHECK;

/* Outside a transaction: reads the path like cg_store_path_read without locks, in one
 * statement (a consistent snapshot of the rows), for answers that only read. When that
 * read cannot be the answer without writing first (the tenant row does not exist yet, or
 * a reset is due at now_ms), *need_tx is set and the caller reads with cg_store_path_read
 * in a transaction instead. CG_NOT_FOUND naming the field for a missing scope. */
cg_status cg_store_path_peek(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t now_ms,
                             struct cg_budget_row out[4], int *n, bool *need_tx,
                             struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction, after cg_store_path_read with lock on ids' path: the largest token
 * limit and the largest cost limit (0: none) among the budgets of the scopes under ids, so
 * that SetBudget cannot lower a parent below a child. */
cg_status cg_store_subtree_max_limits(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids, int64_t *max_tokens,
                                      int64_t *max_cost_micros, struct cg_err *err) CG_MUST_CHECK;

/* The id of the ledger entry that settled the reservation (entry_id: CG_UUID_LEN + 1
 * bytes). CG_NOT_FOUND when it has none. One statement, in or out of a transaction. */
cg_status cg_store_ledger_entry_of(struct cg_store *store, const char *tenant_id,
                                   const char *reservation_id, char *entry_id,
                                   struct cg_err *err) CG_MUST_CHECK;

/* ---- batches: many Reserves and Commits of one or several tenants in one transaction --
 * (service/budget_batch.c). Every element names its tenant (tenants[i]: canonical
 * lower-case UUIDs, else CG_INVALID_ARGUMENT); one statement serves every tenant. The lock
 * order of a batch: every reservation first (by tenant, then id), then every scope row (by
 * tenant, then level and ids). For one tenant it is the order above; a transaction of one
 * tenant locks a subset of what such a batch would, in the same order, so none can wait in
 * a cycle with a batch, nor two batches with each other. */

/* Inside a transaction: locks and reads the reservations ids[0..n) of tenants[0..n)
 * (n <= CG_BATCH_MAX, canonical lower-case UUIDs). found[i] says whether tenants[i] has
 * ids[i]; out[i] is its row. */
cg_status cg_store_batch_lock_reservations(struct cg_store *store, const char *const *tenants,
                                           char (*const ids)[CG_UUID_LEN + 1], int n,
                                           struct cg_reservation *out, bool *found,
                                           struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: locks and reads the scope rows named by keys[0..n) of
 * tenants[0..n) (each row of every path the batch touches, tenant rows included; duplicates
 * allowed) into out (cap rows), by tenant (UUID order, which is the order of the canonical
 * texts) then level and ids; row_tenant[r] gets the tenant of out[r]; *nout gets how many
 * exist. Missing rows are simply absent. */
cg_status cg_store_batch_lock_scopes(struct cg_store *store, const char *const *tenants,
                                     const struct cg_scope_ids *keys, int n,
                                     struct cg_budget_row *out, char (*row_tenant)[CG_UUID_LEN + 1],
                                     int cap, int *nout, struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction, after the scope locks: used[i] = whether keys[i] is the
 * idempotency key of a reservation of tenants[i]. */
cg_status cg_store_batch_keys_used(struct cg_store *store, const char *const *tenants,
                                   const char *const *keys, int n, bool *used,
                                   struct cg_err *err) CG_MUST_CHECK;

/* A reservation the batch makes. created_at_ms / expires_at_ms are filled by the write. */
struct cg_batch_new {
    const char *tenant_id;                /* canonical */
    char reservation_id[CG_UUID_LEN + 1]; /* made by the caller (cg_store_uuid) */
    struct cg_scope_ids ids;
    int64_t tokens, cost_micros;
    const char *model, *estimate_id, *idempotency_key; /* "" for none */
    uint32_t ttl_ms;
    int64_t created_at_ms, expires_at_ms;
};

/* An ACTIVE reservation the batch settles (state 2 COMMITTED with usage, 3, 4). */
struct cg_batch_settle {
    const char *tenant_id; /* canonical */
    char reservation_id[CG_UUID_LEN + 1];
    int state;
    struct cg_usage usage;
};

/* A ledger entry the batch appends. */
struct cg_batch_ledger {
    const char *tenant_id;          /* canonical */
    char entry_id[CG_UUID_LEN + 1]; /* made by the caller */
    struct cg_scope_ids ids;
    struct cg_usage usage;
    const char *model;
    const char *idempotency_key; /* "" for none */
    const char *reservation_id;
};

/* Everything a batch writes. counters are the locked rows with their new counter values
 * (absolute: the caller decided on the locked values); only the four counters are
 * written. */
struct cg_batch_write {
    struct cg_batch_new *new_res;
    int n_new;
    const struct cg_batch_settle *settle;
    int n_settle;
    const struct cg_batch_ledger *ledger;
    int n_ledger;
    /* row_version set to the new one by the write; allocated_tokens must be what the
     * allocation trigger leaves after the write (the events store it) */
    struct cg_budget_row *counters;
    const char *const *counter_tenants; /* counters[i]'s tenant (canonical) */
    int n_counters;
    /* WatchUsage events of the batch, in order; each names one of the counters' rows and
     * stores that row as the write leaves it (numbered per scope as cg_store_events_append
     * does; announced after COMMIT). Only the fields threshold_ratio, falling and delay_ms
     * are kept. */
    const struct cg_event_in *events;
    const char *const *event_tenants; /* events[i]'s tenant (canonical) */
    int n_events;
    int64_t now_ms; /* the events' time */
};

/* Inside a transaction, after the locks: writes the batch, events included, in one
 * statement. CG_ABORTED when a row did not change as the locks promised (nothing should
 * then be committed). */
cg_status cg_store_batch_write(struct cg_store *store, const struct cg_batch_write *w,
                               struct cg_err *err) CG_MUST_CHECK;

/* The canonical (lower-case) form of a UUID into out; false when s is not one. */
bool cg_store_uuid_canonical(const char *s, char out[CG_UUID_LEN + 1]);

/* A new random (version 4) UUID in canonical text form. */
cg_status cg_store_uuid(char out[CG_UUID_LEN + 1]) CG_MUST_CHECK;

/* Inside a transaction, after cg_store_path_read with lock: adds the deltas to the counters
 * of the first n rows of the path (used/reserved tokens and cost micros; deltas may be
 * negative; counters never go below 0) and updates rows[] to match. rows[n - 1].ids names
 * the path and must be at level n (CG_INVALID_ARGUMENT naming n otherwise); a counter that
 * would leave the int64 range is CG_INVALID_ARGUMENT (and aborts the transaction). */
cg_status cg_store_path_add(struct cg_store *store, const char *tenant_id,
                            struct cg_budget_row *rows, int n, int64_t used_tokens,
                            int64_t reserved_tokens, int64_t used_cost_micros,
                            int64_t reserved_cost_micros, struct cg_err *err) CG_MUST_CHECK;

/* As cg_store_path_add, for recorded usage: spent (by kind, with its cost) counts on every
 * level of the path — in used_tokens, but for cache reads on a level whose budget leaves
 * them out — and in the spent_* counters; reserved_* change by the deltas; every level's
 * last activity becomes now. */
cg_status cg_store_path_spend(struct cg_store *store, const char *tenant_id,
                              struct cg_budget_row *rows, int n, const struct cg_usage *spent,
                              int64_t reserved_tokens, int64_t reserved_cost_micros,
                              struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: records a new ACTIVE reservation expiring ttl_ms from now (the
 * database's clock). With an idempotency key that the tenant used before, nothing is
 * inserted: *out gets the earlier reservation with replayed = true (whatever its amounts;
 * comparing them is the caller's business), and the transaction stays usable.
 * tokens and cost_micros >= 0, ttl_ms > 0; model (at most CG_MODEL_MAX characters),
 * estimate_id and idempotency_key (at most CG_IDEMPOTENCY_MAX bytes) may be NULL or "" for
 * none. The scope's row must exist (CG_NOT_FOUND naming its deepest id). */
cg_status cg_store_reservation_insert(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids, int64_t tokens,
                                      int64_t cost_micros, const char *model,
                                      const char *estimate_id, const char *idempotency_key,
                                      uint32_t ttl_ms, struct cg_reservation *out,
                                      struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: reads a reservation and locks it. An ACTIVE reservation whose
 * expiry has passed is reported EXPIRED (the caller settles it). CG_NOT_FOUND naming
 * `reservation_id` when the tenant has none such (also for ids that are not UUIDs). */
cg_status cg_store_reservation_lock(struct cg_store *store, const char *tenant_id,
                                    const char *reservation_id, struct cg_reservation *out,
                                    struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: moves a reservation to state (2 COMMITTED with usage, 3 RELEASED,
 * 4 EXPIRED), settled now. Only an ACTIVE reservation (past its expiry or not) moves: one
 * already settled is CG_FAILED_PRECONDITION ("reservation_id: already committed", ...), so
 * that its tokens cannot be returned twice; none is CG_NOT_FOUND. usage is required for
 * COMMITTED and ignored otherwise. */
cg_status cg_store_reservation_settle(struct cg_store *store, const char *tenant_id,
                                      const char *reservation_id, int state,
                                      const struct cg_usage *usage,
                                      struct cg_err *err) CG_MUST_CHECK;

/* The ledger entry that first used an idempotency key (cg_store_ledger_append). */
struct cg_ledger_first {
    struct cg_scope_ids ids; /* its scope */
    struct cg_usage usage;   /* as recorded (priced) */
    char model[CG_MODEL_MAX * 4 + 1];
    int64_t created_at_ms; /* the entry's time */
};

/* Inside a transaction: appends a ledger entry. *entry_id (37 bytes) gets its id. A repeated
 * (tenant, idempotency_key): CG_ALREADY_EXISTS, entry_id gets the earlier entry's id and
 * *first (when not NULL) its scope, usage, model and time, so that the caller can tell a
 * retry (replay the first answer) from a key reused for something else; the transaction
 * stays usable. idempotency_key and reservation_id may be NULL or
 * "" for none. A reservation's usage enters the ledger once: a second entry for it is
 * CG_FAILED_PRECONDITION naming reservation_id (and aborts the transaction); an unknown
 * reservation_id is CG_NOT_FOUND. The scope's row must exist (CG_NOT_FOUND naming its
 * deepest id). */
cg_status cg_store_ledger_append(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_usage *usage,
                                 const char *model, const char *idempotency_key,
                                 const char *reservation_id, char *entry_id,
                                 struct cg_ledger_first *first, struct cg_err *err) CG_MUST_CHECK;

/* As cg_store_ledger_append, with the time the spend happened (unix ms; 0: now) as the
 * entry's time. The caller checks it against the period (RecordUsage). */
cg_status cg_store_ledger_append_at(struct cg_store *store, const char *tenant_id,
                                    const struct cg_scope_ids *ids, const struct cg_usage *usage,
                                    const char *model, const char *idempotency_key,
                                    const char *reservation_id, int64_t occurred_at_ms,
                                    char *entry_id, struct cg_ledger_first *first,
                                    struct cg_err *err) CG_MUST_CHECK;

/* --- the shared row cache (Redis) --------------------------------------------------- *
 *
 * CheckBudget's hot cache of scope rows across replicas (store_redis.h says how it is
 * kept). Never an error: Redis trouble is a miss (and a warning), a put that fails is
 * skipped. Rows carry row_version; the cache keeps the newest.
 */

/* Reads the cached path to ids (levels 1..depth) into out[] and *n: true when every row is
 * cached and current. *gen gets the tenant's cache generation (-1 when Redis did not
 * answer or is disabled), to hand to cg_store_cache_rows_put after reading PostgreSQL. */
bool cg_store_cache_path_get(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, struct cg_budget_row out[4], int *n,
                             int64_t *gen);

/* Caches rows[0..n) (1..4) of one tenant, each only when newer than the cached one.
 * fill_gen: the *gen of the cg_store_cache_path_get that preceded the PostgreSQL read (a
 * fill; refused when the tenant's rows were dropped since), or -1 for rows as a committed
 * write left them. */
void cg_store_cache_rows_put(struct cg_store *store, const char *tenant_id,
                             const struct cg_budget_row *rows, int n, int64_t fill_gen);

/* The rows of one tenant's path (1..4) as a committed write left them. */
struct cg_store_rows {
    const char *tenant_id;
    const struct cg_budget_row *rows;
    int n;
};

/* cg_store_cache_rows_put (fill_gen -1) of each set of sets[0..n), with one round trip to
 * each Redis node for all of them (a batch's paths). */
void cg_store_cache_rows_put_many(struct cg_store *store, const struct cg_store_rows *sets, int n);

/* Invalidates every cached row of the tenant (for writes that do not know their rows). */
void cg_store_cache_tenant_drop(struct cg_store *store, const char *tenant_id);

/* Announces on cg_rows that every row of the tenant may have changed (a committed write
 * that does not know its rows: sweeper, CloseScope, approvals); every server's listener
 * drops the tenant's cached rows (struct cg_row_notice, whole_tenant). Writes of rows are
 * announced with their row_version by the NOTIFY after their COMMIT, with their events
 * (store_pg.c). Call it after the COMMIT, outside any transaction: one statement of its
 * own, sent past the call's deadline.
 * Best effort: when it fails (logged) the tenant is announced again with this store's
 * next call (at most 64 wait; past that the oldest are lost, logged). */
void cg_store_tenant_announce(struct cg_store *store, const char *tenant_id);

/* --- sweeper and resets ----------------------------------------------------------- *
 *
 * Reservations expire and tenant budgets reset without any request arriving: the server's
 * background thread sweeps every sweep_interval_ms (rpc_sweep.c), tenant by tenant, with
 * the functions below. Several replicas may sweep at once: each reservation is settled
 * once (rows locked FOR NO KEY UPDATE SKIP LOCKED, so replicas share the work instead of
 * queueing), each reset is applied once per boundary (a conditional update of the locked
 * tenant row). The lock order is the one of Commit and Release: a reservation's row first,
 * then its path, tenant first.
 *
 * Resets: a tenant budget with reset_period 2 (daily) or 3 (monthly) counts its used
 * tokens and cost per period of the tenant's time zone (tenants.time_zone): at local
 * midnight, or at 00:00 on the first of the month, used_tokens and used_cost_micros of the
 * tenant row return to 0 (reserved tokens and cost stay: those holds are live, and are
 * returned or spent in the new period). Boundaries are computed by PostgreSQL on the
 * tenant's wall clock, so that they follow DST changes (a spring-forward day is 23 hours).
 * A reset is applied by whichever comes first after the boundary: cg_store_path_read (so a
 * request right after the boundary already sees the new period) or the sweeper. After a
 * gap spanning several boundaries, one reset moves to the period containing now.
 *
 * Time: every function here takes "now" from the caller as unix milliseconds (cg_wall_ms()
 * in production), so that tests can put the clock anywhere. Reservations' expires_at are
 * set by the database's clock (cg_store_reservation_insert) and compared with now_ms.
 * These functions run their own transactions: calling them while one is open is
 * CG_INTERNAL. Not thread-safe (one store per thread, as everywhere).
 */

#define CG_SWEEP_BATCH_MAX 1000

/* What a tenant has due at some time. */
/* A tenant with work due for the sweeper (cg_store_sweep_due). */
struct cg_sweep_due {
    char tenant_id[CG_UUID_LEN + 1];
    bool reset;     /* its budget's next reset is at or before now */
    bool expired;   /* it has an ACTIVE reservation whose expiry is at or before now */
    bool approvals; /* it has a PENDING approval whose expiry is at or before now */
};

/* Tenant ids in id order after after_id ("" or NULL: from the first), up to limit
 * (1..CG_STORE_PAGE_MAX, else CG_INVALID_ARGUMENT naming limit) of ids (caller-allocated);
 * *count gets how many: fewer than limit means the last page. after_id that is not a
 * UUID: CG_INVALID_ARGUMENT naming after_id. One statement, no transaction. */
cg_status cg_store_sweep_tenants(struct cg_store *store, const char *after_id, int limit,
                                 char (*ids)[CG_UUID_LEN + 1], int *count,
                                 struct cg_err *err) CG_MUST_CHECK;

/* The tenants with sweeper work due at now_ms (unix ms), whatever their number: a reset of
 * the tenant budget, an expired ACTIVE reservation, an expired PENDING approval. Each kind
 * is read through an index of its own, soonest due first, up to limit (1..CG_STORE_PAGE_MAX,
 * else CG_INVALID_ARGUMENT naming limit) rows (migrations/0026_sweep_due.sql: a pass costs
 * what is due, not what exists); out (room for limit) gets the distinct tenants of those
 * rows in id order, *count how many, and *more whether a kind had more rows due than limit
 * (a next call finds the rest once these are settled). One statement, no lock. */
cg_status cg_store_sweep_due(struct cg_store *store, int64_t now_ms, int limit,
                             struct cg_sweep_due *out, int *count, bool *more,
                             struct cg_err *err) CG_MUST_CHECK;

/* In a transaction of its own: applies the tenant budget's reset when it is due at now_ms
 * (a conditional update of the tenant row, which waits for a transaction holding its
 * lock and then looks again). *reset is true when this call applied it, false when none
 * was due (or another replica or request applied it first, or there is no such tenant).
 * On error nothing changed. */
cg_status cg_store_reset_apply(struct cg_store *store, const char *tenant_id, int64_t now_ms,
                               bool *reset, struct cg_err *err) CG_MUST_CHECK;

/* In a transaction of its own: settles up to limit (1..CG_SWEEP_BATCH_MAX, else
 * CG_INVALID_ARGUMENT naming limit) of the tenant's ACTIVE reservations whose expiry is at
 * or before now_ms as EXPIRED (settled at now_ms), soonest expired first, and returns their
 * tokens and cost to the reserved counters of every level of their paths. Reservations
 * another transaction holds (a Commit or Release in progress, another replica's sweep) are
 * skipped, not waited for. *expired gets how many were settled: limit means more may be
 * left. A due reset of the tenant budget is applied on the way (the paths are read at
 * now_ms). On error nothing changed and *expired is 0. */
cg_status cg_store_reservations_expire(struct cg_store *store, const char *tenant_id,
                                       int64_t now_ms, int limit, int *expired,
                                       struct cg_err *err) CG_MUST_CHECK;

struct cg_event_in;

/* The WatchUsage events of a change of a path's counters: fills up to cap of out from the
 * path before and after the change (n rows, tenant first) and returns how many, or -1 when
 * they do not fit. The rpc layer provides it (core/budget_events), so that the store needs
 * no core. */
typedef int (*cg_path_events_fn)(void *ctx, const struct cg_budget_row *before,
                                 const struct cg_budget_row *after, int n, struct cg_event_in *out,
                                 int cap);

/* As cg_store_reservations_expire; each expired hold's path gets the events `events` gives
 * for it (threshold crossings as the usage falls, besides USAGE_CHANGED), then its scope a
 * RESERVATION_EXPIRED. events NULL: USAGE_CHANGED on every level only. */
cg_status cg_store_reservations_expire_events(struct cg_store *store, const char *tenant_id,
                                              int64_t now_ms, int limit, cg_path_events_fn events,
                                              void *ctx, int *expired,
                                              struct cg_err *err) CG_MUST_CHECK;

/* --- scopes: close, usage tree, listing ------------------------------------------------ *
 *
 * Unlike the budget functions above, each of these runs its own transaction (call them
 * outside one: as with cg_store_begin, an open one is rolled back first and logged as an
 * error), and a success return means it committed (the
 * reads ran in one REPEATABLE READ snapshot, so counters of parents and children agree).
 * Every statement is keyed by tenant_id; another tenant's scopes are CG_NOT_FOUND. Scope
 * ids are checked as above (CG_INVALID_ARGUMENT naming the field). Not thread-safe (one
 * store, one thread). Errors are the store's (CG_UNAVAILABLE, CG_DEADLINE_EXCEEDED, ...),
 * with nothing changed.
 */

#define CG_USAGE_TREE_MAX 5000 /* nodes a usage tree holds at most (the rest is cut off) */

/* A scope's row and what its usage view adds. */
struct cg_scope_usage {
    struct cg_budget_row row;
    int64_t created_at_us;      /* created_at in microseconds: exact, for page cursors */
    uint32_t open_reservations; /* ACTIVE, unexpired reservations in the scope and below */
    uint32_t child_count;       /* children; closed ones only when the call includes them */
    int64_t last_activity_us;   /* last reservation or usage in µs (0: none), for cursors */
    int parent;                 /* in a usage tree: index of the parent node; -1 elsewhere */
    int nchildren;              /* in a usage tree: children present in the tree */
};

/* What cg_store_scope_close did. */
struct cg_scope_close {
    struct cg_scope_usage usage;    /* the scope after the close (child_count with closed) */
    uint32_t released_reservations; /* ACTIVE ones (expired or not) of the subtree settled */
    int64_t released_tokens;        /* the tokens they held, back on every level of the path */
    int64_t released_cost_micros;
    uint32_t closed_scopes;     /* scopes of the subtree closed by this call */
    bool already_closed;        /* the scope itself was closed before */
    uint32_t expired_approvals; /* PENDING approvals of the subtree expired by this call */
    /* the path, tenant first, the scope last (npath rows): as locked before the close and
     * as the close left it (released reservations, a share returned to the parent) */
    struct cg_budget_row path_before[4];
    struct cg_budget_row path_after[4];
    int npath;
};

/* The WatchUsage events a close makes on its path besides the scope's SCOPE_CLOSED (see
 * cg_store_scope_close_events): a cg_path_events_fn over the path before and after the
 * close. */
typedef cg_path_events_fn cg_scope_close_events_fn;

/* Closes a session, task or agent and its descendants in one transaction: every ACTIVE
 * reservation of the subtree is settled (RELEASED, or EXPIRED when past its expiry) and its
 * tokens and cost leave reserved_* on every level of its path; closed_at is set on each
 * scope of the subtree that was open. Idempotent: closing again changes nothing unless
 * something of the subtree is still open (a scope created under it since, a reservation
 * that was being settled concurrently), and then closes that too.
 * Locks, in this order (Commit and Release lock a reservation, then the path; so no cycle):
 * the subtree's ACTIVE reservations (ORDER BY reservation_id), then the path and subtree
 * scope rows (ORDER BY level, session_id, task_id, agent_id). A reservation made between
 * the two steps and locked by a concurrent Commit or Release is left to that call (its
 * tokens are settled by it, not lost).
 * The tenant scope: CG_INVALID_ARGUMENT naming `scope`; a scope that does not exist:
 * CG_NOT_FOUND naming the first unknown id. A close that changed something writes the
 * audit row scope_closed by the server's admin key (cg_store_scope_close_events: by its
 * audit's actor). */
cg_status cg_store_scope_close(struct cg_store *store, const char *tenant_id,
                               const struct cg_scope_ids *ids, struct cg_scope_close *out,
                               struct cg_err *err) CG_MUST_CHECK;

/* As cg_store_scope_close; when the close changed something and events is not NULL, the
 * events it returns (at most CG_STORE_CLOSE_EVENTS_MAX) are appended in the close's
 * transaction before the scope's SCOPE_CLOSED, so that they commit with it; so is the
 * audit row scope_closed by audit's actor. */
#define CG_STORE_CLOSE_EVENTS_MAX 63
cg_status cg_store_scope_close_events(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids,
                                      cg_scope_close_events_fn events, void *ctx,
                                      const struct cg_audit *audit, struct cg_scope_close *out,
                                      struct cg_err *err) CG_MUST_CHECK;

/* A usage tree: the root's path and the nodes under it, breadth first. */
struct cg_usage_tree {
    struct cg_budget_row path[4]; /* tenant first; path[npath - 1] is the root's row */
    int npath;
    struct cg_scope_usage *nodes; /* nodes[0] the root; each node's children are contiguous,
                                     oldest first, and follow the nodes of the level above */
    int count;
    bool truncated; /* CG_USAGE_TREE_MAX was reached: deeper children are missing */
};

/* Reads the usage tree under ids (the tenant for an empty scope, which then always exists,
 * as a row without a budget when none was ever used) to depth levels below it (0..3), at
 * most max_children (1..CG_STORE_PAGE_MAX) children per node, closed descendants only with
 * include_closed. CG_INVALID_ARGUMENT naming `depth` or `max_children` out of range;
 * CG_NOT_FOUND naming the first unknown id. On success *out owns nodes (free with
 * cg_usage_tree_cleanup); on error *out holds nothing to free. */
cg_status cg_store_usage_tree(struct cg_store *store, const char *tenant_id,
                              const struct cg_scope_ids *ids, int depth, int max_children,
                              bool include_closed, struct cg_usage_tree *out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Spend of one node of a usage tree with one model (GetUsage include_by_model). */
struct cg_model_usage {
    int node; /* index into the nodes given */
    char model[CG_MODEL_MAX * 4 + 1];
    struct cg_usage usage;
    int64_t calls; /* ledger entries */
};

/* The ledger of each of nodes[0..n) (the scope and everything under it; for a tenant row
 * with a reset period, since its period start), summed by model: up to cap entries into
 * out, by node, then most tokens first (then model name); at most per_node models a node.
 * *count gets how many. One statement, outside a transaction. */
cg_status cg_store_usage_by_model(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_usage *nodes, int n, int per_node,
                                  struct cg_model_usage *out, int cap, int *count,
                                  struct cg_err *err) CG_MUST_CHECK;

/* Frees what cg_store_usage_tree put in *tree; harmless twice and on a zeroed tree. */
void cg_usage_tree_cleanup(struct cg_usage_tree *tree);

/* Where a page of cg_store_scope_list starts: after this scope in the page's order. */
struct cg_scope_cursor {
    int64_t sort_key; /* order 2: last activity in µs; order 3: used_tokens; order 1: 0 */
    int64_t created_at_us;
    struct cg_scope_ids ids;
};

/* One page of the scopes at `level` (2..4, below the parent's level, else
 * CG_INVALID_ARGUMENT naming `level`) under parent (an empty scope: the tenant), open ones
 * only unless include_closed, in order 1 (created_at, ids ascending: stable across pages)
 * or 2 (last activity descending, never-active last, then as 1) or 3 (used_tokens
 * descending, then as 1) — with 2 and 3, scopes that move meanwhile may repeat or be
 * missed; another order is CG_INVALID_ARGUMENT naming `order`. after NULL starts at the
 * beginning. Fills up to limit (1..CG_STORE_PAGE_MAX, else CG_INVALID_ARGUMENT naming
 * `limit`) entries of out (caller-allocated; child_count counts open children only unless
 * include_closed); *count gets how many, *more whether another page follows, and *next
 * (when more) the cursor of the next page. A parent that does not exist: CG_NOT_FOUND
 * naming its first unknown id. */
cg_status cg_store_scope_list(struct cg_store *store, const char *tenant_id,
                              const struct cg_scope_ids *parent, int level, bool include_closed,
                              int order, const struct cg_scope_cursor *after, int limit,
                              struct cg_scope_usage *out, int *count, bool *more,
                              struct cg_scope_cursor *next, struct cg_err *err) CG_MUST_CHECK;

/* --- spend history ---------------------------------------------------------------------- *
 *
 * Migration 0022 keeps what the ledger records summed per scope (every scope of an entry's
 * path) per minute, hour and day bucket (UTC), written by a trigger in the transaction that
 * writes the entries; the sweeper deletes buckets past their resolution's retention.
 */

typedef enum {
    CG_ROLLUP_MINUTE = 1,
    CG_ROLLUP_HOUR = 2,
    CG_ROLLUP_DAY = 3,
} cg_rollup_resolution;

#define CG_ROLLUP_RESOLUTIONS 3

/* The length of a bucket of resolution r (1..3), in ms. */
int64_t cg_rollup_bucket_ms(cg_rollup_resolution r);

/* What one step of a history holds. */
struct cg_usage_point {
    int64_t start_ms; /* unix ms, a multiple of the step (from the epoch) */
    struct cg_usage usage;
    int64_t entries; /* ledger entries (model calls) */
};

/* The spend of scope ids (an empty scope: the tenant) in steps of step_ms (a positive
 * multiple of resolution's bucket) over [from_ms, to_ms): the buckets of that resolution
 * summed per step, the steps starting at multiples of step_ms from the epoch. Fills at most
 * cap entries of out with the steps that hold usage, oldest first (*count; more than cap
 * such steps: CG_INVALID_ARGUMENT naming `cap`). A scope that does not exist (closed ones
 * do): CG_NOT_FOUND naming its first unknown id. */
cg_status cg_store_usage_history(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, cg_rollup_resolution resolution,
                                 int64_t from_ms, int64_t to_ms, int64_t step_ms,
                                 struct cg_usage_point *out, int cap, int *count,
                                 struct cg_err *err) CG_MUST_CHECK;

/* Tokens counted against each scope's budget over the last window_ms (the minute buckets
 * that began in it, the current one included): spent[i] for ids[i], n of them
 * (1..CG_STORE_USAGE_NODES_MAX); without cache reads where exclude_cache_read[i]. */
cg_status cg_store_spend_in_window(struct cg_store *store, const char *tenant_id,
                                   const struct cg_scope_ids *ids, const bool *exclude_cache_read,
                                   int n, int64_t window_ms, int64_t *spent,
                                   struct cg_err *err) CG_MUST_CHECK;

struct cg_event_fields; /* below, "events" */

/* A budget with spend in the window, for the forecast (migration 0025). */
struct cg_forecast_candidate {
    struct cg_scope_ids ids;
    int64_t remaining; /* limit + approved extra - used - reserved - allocated */
    int64_t spent;     /* in the window, as the budget counts */
    bool alerted;      /* under the horizon at the last scan (forecast_alerts) */
};

/* The tenants a forecast pass looks at: those with spend in the last window_ms (a minute
 * bucket that began in it) or a scope marked under the horizon (forecast_alerts: its mark
 * may need clearing), in id order after after_id ("" or NULL: from the first), up to limit
 * (1..CG_STORE_PAGE_MAX) into ids (caller-allocated); *count gets how many: fewer than limit
 * means the last page. Bad limit, window_ms or after_id: CG_INVALID_ARGUMENT naming it. One
 * read through an index of the recent buckets (migration 0027): it costs the tenants with
 * recent spend, not every tenant. */
cg_status cg_store_forecast_tenants(struct cg_store *store, int64_t window_ms, const char *after_id,
                                    int limit, char (*ids)[CG_UUID_LEN + 1], int *count,
                                    struct cg_err *err) CG_MUST_CHECK;

/* The tenant's open budgeted scopes with spend in the last window_ms, up to cap into out;
 * *count gets how many. */
cg_status cg_store_forecast_candidates(struct cg_store *store, const char *tenant_id,
                                       int64_t window_ms, struct cg_forecast_candidate *out,
                                       int cap, int *count, struct cg_err *err) CG_MUST_CHECK;

/* In a transaction of its own: marks ids as under the horizon and, when this call made the
 * mark (not another replica's sweeper), appends its FORECAST_EXHAUSTION event (fields as
 * migration 0025 says); *alerted says whether it did. */
cg_status cg_store_forecast_alert(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_ids *ids,
                                  const struct cg_event_fields *fields, int64_t now_ms,
                                  bool *alerted, struct cg_err *err) CG_MUST_CHECK;

/* Clears the marks of the tenant's scopes that are not among the n in `under` (forecast
 * above the horizon, or no spend in the window): they may be alerted again. */
cg_status cg_store_forecast_rearm(struct cg_store *store, const char *tenant_id,
                                  const struct cg_scope_ids *under, int n, int *rearmed,
                                  struct cg_err *err) CG_MUST_CHECK;

/* Deletes up to limit buckets of the n tenants of tenant_ids (a page of the sweeper)
 * older than before_ms[r - 1] at each resolution r (0: keep that resolution); *deleted
 * gets how many (limit at a resolution: more may be left there). */
cg_status cg_store_rollups_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                  int n, const int64_t before_ms[CG_ROLLUP_RESOLUTIONS], int limit,
                                  int *deleted, struct cg_err *err) CG_MUST_CHECK;

/* --- approvals ------------------------------------------------------------------------ *
 *
 * A request (CheckBudget that is not a dry run, Reserve) that would cross the limit of an
 * APPROVAL-mode level opens an approval: PENDING -> APPROVED | DENIED | EXPIRED, never
 * back, with who and when. At most one PENDING approval per scope (the request's scope).
 * Approving adds granted_tokens to the level's approved_extra_tokens, which decisions add
 * to limit_tokens until the next SetBudget of that scope (cg_store_budget_put sets it to
 * 0) or, for the tenant level, the next reset. A DENIED approval makes requests that would
 * cross the same level's limit answer DENY while that level's budget version and period
 * are those it was opened under. A PENDING approval past its expiry reads as EXPIRED
 * everywhere; the sweeper (cg_store_approvals_expire), the next request of its scope, a
 * ResolveApproval or CloseScope store that. Times are unix ms from the caller (cg_wall_ms()
 * in production), so tests can put the clock anywhere. Lock order: the path's scope rows
 * (tenant first), then approval rows. Not thread-safe (one store per thread). Every
 * statement is keyed by tenant_id: another tenant's approvals are CG_NOT_FOUND.
 */

#define CG_APPROVAL_NOTE_MAX 1000   /* characters of a decision note */
#define CG_APPROVAL_REASON_MAX 1000 /* characters of the reason text */

typedef enum {
    CG_APPROVAL_PENDING = 1,
    CG_APPROVAL_APPROVED = 2,
    CG_APPROVAL_DENIED = 3,
    CG_APPROVAL_EXPIRED = 4,
} cg_approval_state;

struct cg_approval {
    char approval_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids; /* the scope whose request opened it */
    int level;               /* the level whose limit would be crossed, 1..4 */
    int state;               /* cg_approval_state */
    int64_t requested_tokens;
    int64_t overage_tokens;
    int64_t granted_tokens; /* APPROVED: added to the level's limit */
    int64_t limit_tokens;   /* the level when it was opened */
    int64_t used_tokens;
    int64_t reserved_tokens;
    int64_t budget_version;  /* the level's version when it was opened */
    int64_t period_start_ms; /* the level's period when it was opened (0: none) */
    char model[CG_MODEL_MAX * 4 + 1];
    int64_t estimated_cost_micros;
    char reason[CG_APPROVAL_REASON_MAX * 4 + 1];
    char requested_by_key_id[CG_KEY_ID_LEN + 1];
    int64_t requested_at_ms;
    int64_t expires_at_ms;
    int64_t decided_at_ms; /* 0 while PENDING */
    char decided_by[CG_NAME_MAX * 4 + 1];
    char decided_by_key_id[CG_KEY_ID_LEN + 1];
    char decision_note[CG_APPROVAL_NOTE_MAX * 4 + 1];
};

/* What cg_store_approval_request found or did. */
typedef enum {
    CG_APPROVAL_OPENED = 1,    /* a new PENDING approval */
    CG_APPROVAL_STILL_PENDING, /* the scope's PENDING approval, opened before */
    CG_APPROVAL_WAS_DENIED,    /* a DENIED approval of the same limit: answer DENY */
} cg_approval_outcome;

/* Inside a transaction, after cg_store_path_read with lock on ids' path (rows[0..n)):
 * the approval step of a request of scope ids that would cross the limit of the APPROVAL
 * level rows[level_index]. In this order: the scope's PENDING approval, when it has one
 * that has not expired at now_ms (one that has is stored EXPIRED first), is the answer
 * (CG_APPROVAL_STILL_PENDING); else a DENIED approval of that level (opened by any scope
 * under it) under its current budget version and period (CG_APPROVAL_WAS_DENIED); else
 * a new PENDING approval is opened (CG_APPROVAL_OPENED) from *request's requested_tokens,
 * overage_tokens, model, estimated_cost_micros, reason and requested_by_key_id, with the
 * level's limit, counters, version and period, requested at now_ms and expiring ttl_ms
 * later. Concurrent callers for one scope open one approval (the others get it as
 * STILL_PENDING). *out gets the approval. CG_INVALID_ARGUMENT naming the argument when
 * rows, n, level_index, ttl_ms (> 0) or a text is out of range; the store's errors
 * otherwise (the caller rolls back). */
cg_status cg_store_approval_request(struct cg_store *store, const char *tenant_id,
                                    const struct cg_scope_ids *ids,
                                    const struct cg_budget_row *rows, int n, int level_index,
                                    const struct cg_approval *request, uint32_t ttl_ms,
                                    int64_t now_ms, struct cg_approval *out,
                                    cg_approval_outcome *outcome, struct cg_err *err) CG_MUST_CHECK;

/* In a transaction of its own: decides approval_id as decision (CG_APPROVAL_APPROVED or
 * CG_APPROVAL_DENIED, else CG_INVALID_ARGUMENT naming `decision`) at now_ms. APPROVED adds
 * granted_tokens (1..10^15; 0 means the requested tokens; must be 0 with DENIED, else
 * CG_INVALID_ARGUMENT naming `granted_tokens`) to the level's approved_extra_tokens.
 * decided_by (at most CG_NAME_MAX characters; NULL or "" means key_id) and note (at most
 * CG_APPROVAL_NOTE_MAX characters) are recorded with key_id. A decided approval decided
 * again the same way is answered as recorded with *replayed true; another decision, or
 * any decision on an EXPIRED one (a PENDING one past expiry is stored EXPIRED first, and
 * that is committed), is CG_FAILED_PRECONDITION naming approval_id and its state. No such
 * approval (or not a UUID): CG_NOT_FOUND naming `approval_id`. *out gets the approval.
 * A decision (not a replay) writes the audit row approval_approved or approval_denied
 * (target the approval id) by audit's actor in its transaction. */
cg_status cg_store_approval_resolve(struct cg_store *store, const char *tenant_id,
                                    const char *approval_id, int decision, int64_t granted_tokens,
                                    const char *decided_by, const char *key_id, const char *note,
                                    int64_t now_ms, const struct cg_audit *audit,
                                    struct cg_approval *out, bool *replayed,
                                    struct cg_err *err) CG_MUST_CHECK;

/* One statement: reads an approval; a PENDING one past its expiry at now_ms reads as
 * EXPIRED (decided at its expiry). CG_NOT_FOUND naming `approval_id` when there is none. */
cg_status cg_store_approval_get(struct cg_store *store, const char *tenant_id,
                                const char *approval_id, int64_t now_ms, struct cg_approval *out,
                                struct cg_err *err) CG_MUST_CHECK;

/* Where a page of cg_store_approval_list starts: after this approval, newest first. */
struct cg_approval_cursor {
    int64_t requested_at_us;
    char approval_id[CG_UUID_LEN + 1];
};

/* One page of the approvals of scope ids (the tenant for an empty scope), with
 * include_descendants also of the scopes below it, newest first (requested_at, then id,
 * descending), only those whose state as read at now_ms (expiry applied) has its bit
 * (1u << state) in states_mask (0: all). after NULL starts at the newest. Fills up to
 * limit (1..CG_STORE_PAGE_MAX, else CG_INVALID_ARGUMENT naming `limit`) entries of out
 * (caller-allocated); *count gets how many, *more whether another page follows and *next
 * (when more) its cursor. A scope that does not exist: CG_NOT_FOUND naming its first
 * unknown id. */
cg_status cg_store_approval_list(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, bool include_descendants,
                                 unsigned states_mask, const struct cg_approval_cursor *after,
                                 int limit, int64_t now_ms, struct cg_approval *out, int *count,
                                 bool *more, struct cg_approval_cursor *next,
                                 struct cg_err *err) CG_MUST_CHECK;

/* In a transaction of its own (one statement): stores as EXPIRED (decided at their expiry)
 * up to limit (1..CG_SWEEP_BATCH_MAX, else CG_INVALID_ARGUMENT naming `limit`) of the
 * tenant's PENDING approvals whose expiry is at or before now_ms, soonest first; those
 * another transaction holds are skipped. *expired gets how many. A tenant id that is not a
 * UUID has none. */
cg_status cg_store_approvals_expire(struct cg_store *store, const char *tenant_id, int64_t now_ms,
                                    int limit, int *expired, struct cg_err *err) CG_MUST_CHECK;

/* --- events ------------------------------------------------------------------------ *
 *
 * The durable log behind WatchUsage (migrations/0006_events.sql): each scope numbers its
 * events 1, 2, 3, ...; an event is appended inside the transaction of the change it
 * describes (so it commits or rolls back with it) and announced with NOTIFY cg_events,
 * which PostgreSQL delivers at commit, in commit order, to every server's listener.
 * Events are kept for an hour (cg_store_events_expire, from the sweeper).
 */

#define CG_EVENT_MESSAGE_MAX 160

/* What an event type adds to the scope's state (zero what does not apply). */
struct cg_event_fields {
    double threshold_ratio;             /* THRESHOLD_CROSSED, WARNING */
    bool falling;                       /* THRESHOLD_CROSSED downwards */
    uint32_t delay_ms;                  /* the backpressure delay in force at the scope after it */
    int64_t period_start_ms;            /* RESET */
    char ref_id[CG_UUID_LEN + 1];       /* RESERVATION_EXPIRED, OVERRUN, APPROVAL_*: the id */
    int64_t ref_tokens;                 /* the reservation's or approval's tokens */
    int ref_state;                      /* the reservation's or approval's state */
    char message[CG_EVENT_MESSAGE_MAX]; /* human-readable summary; "" for a default */
    struct cg_usage ref_usage;          /* OVERRUN: the usage committed (migration 0018) */
};

/* One event to append. */
struct cg_event_in {
    struct cg_scope_ids ids;
    int type; /* cg_event_type (core/budget_events.h) = UsageEventType */
    struct cg_event_fields fields;
};

/* One event as stored: the scope's row right after the change, and the fields. */
struct cg_event {
    char tenant_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    int level;
    int64_t seq;
    char event_id[CG_UUID_LEN + 1];
    int type;
    int64_t occurred_at_ms;
    bool has_budget;
    int mode;
    int64_t limit_tokens;
    int64_t limit_cost_micros;
    double warning_ratio;
    int64_t used_tokens;
    int64_t reserved_tokens;
    int64_t used_cost_micros;
    int64_t reserved_cost_micros;
    bool closed;
    struct cg_event_fields fields;
    /* migration 0015: the shares of its open allocated children, and the tokens approvals
     * added to limit_tokens */
    int64_t allocated_tokens;
    int64_t approved_extra_tokens;
};

/* Inside a transaction: appends one event of `type` to the scope ids (which must exist:
 * CG_NOT_FOUND naming its deepest id otherwise, and the transaction is aborted), numbered
 * after the scope's last, stamped now_ms (unix ms) and with the scope's counters as they
 * are at this point of the transaction. fields may be NULL (all zero). Lock order: the
 * scope row is updated (locked) here, so callers append after cg_store_path_read with lock
 * of a path that contains it (or, for a scope not on a locked path, with no other row
 * locks held after). For the approvals: APPROVAL_REQUESTED / APPROVAL_DECIDED with
 * fields.ref_id = the approval id, ref_tokens its tokens, ref_state its ApprovalState. */
cg_status cg_store_event_append(struct cg_store *store, const char *tenant_id,
                                const struct cg_scope_ids *ids, int type,
                                const struct cg_event_fields *fields, int64_t now_ms,
                                struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: appends n (1..64) events in order, in one statement (each as
 * cg_store_event_append). */
cg_status cg_store_events_append(struct cg_store *store, const char *tenant_id,
                                 const struct cg_event_in *events, int n, int64_t now_ms,
                                 struct cg_err *err) CG_MUST_CHECK;

/* Reads up to max events of the scope ids with seq > after_seq, in seq order, into out
 * (caller-allocated); *count gets how many. One statement, outside or inside a
 * transaction. */
cg_status cg_store_events_read(struct cg_store *store, const char *tenant_id,
                               const struct cg_scope_ids *ids, int64_t after_seq, int max,
                               struct cg_event *out, int *count, struct cg_err *err) CG_MUST_CHECK;

/* The stored events of the scope ids (level 1..4) that occurred at or after since_ms (unix
 * ms), and with descendants those of every scope below it: the newest max (1..
 * CG_STORE_PAGE_MAX) of them, oldest first, into out (caller-allocated); *count gets how
 * many, *more whether older ones matched too (left out). One statement, outside a
 * transaction, that reads at most max + 1 rows. Events are kept an hour. */
cg_status cg_store_events_since(struct cg_store *store, const char *tenant_id,
                                const struct cg_scope_ids *ids, int level, bool descendants,
                                int64_t since_ms, int max, struct cg_event *out, int *count,
                                bool *more, struct cg_err *err) CG_MUST_CHECK;

/* The sequence number of the scope's latest event (0: none yet), so that a new watcher
 * starts after it. One statement. CG_NOT_FOUND when the scope does not exist. */
cg_status cg_store_event_seq(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t *seq,
                             struct cg_err *err) CG_MUST_CHECK;

/* Deletes up to limit (1..100000) of the events of the n tenants of tenant_ids (a page of
 * the sweeper's retention walk) that occurred before before_ms (unix ms); *deleted gets
 * how many (limit: more may be left). One statement, outside a transaction. */
cg_status cg_store_events_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t before_ms, int limit, int *deleted,
                                 struct cg_err *err) CG_MUST_CHECK;

/* A LISTEN connection of its own (one per server process), for the events' delivery
 * thread. Not thread-safe: one thread uses it. */
struct cg_store_listener;

/* Which event a notification announced. */
struct cg_event_notice {
    char tenant_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    int64_t seq;
};

/* An API key that a cg_keys notification announced as revoked, changed or deleted
 * (migrations/0017): whatever a server cached about it is wrong now. */
#define CG_STORE_KEY_NOTICES_MAX 64
struct cg_key_notice {
    char tenant_id[CG_UUID_LEN + 1]; /* lower case */
    char key_id[CG_KEY_ID_LEN + 1];
};

/* A committed write of a scope row, announced on cg_rows (after the COMMIT, with the
 * write's events; or cg_store_tenant_announce) by the replica that committed it: other replicas'
 * cached copies older than row_version are stale. whole_tenant: every row of the tenant may have
 * changed (ids and row_version are then empty). */
#define CG_STORE_ROW_NOTICES_MAX 2048
struct cg_row_notice {
    char tenant_id[CG_UUID_LEN + 1]; /* lower case */
    struct cg_scope_ids ids;
    int64_t row_version;
    bool whole_tenant;
};

/* A range of one scope's events to fetch: seq in (after_seq, upto_seq]; upto 0: no bound. */
struct cg_event_want {
    struct cg_scope_ids ids;
    int64_t after_seq;
    int64_t upto_seq;
};

/* A listener; connects lazily (only opts->pg_dsn and the PostgreSQL timeouts are used; the
 * strings are copied). NULL when out of memory. */
struct cg_store_listener *cg_store_listener_new(const struct cg_store_opts *opts);

/* Closes the connection and frees the listener; NULL is a no-op. */
void cg_store_listener_free(struct cg_store_listener *l);

/* (Re)establishes LISTEN (cg_events, cg_keys and cg_rows) when needed (*relistened is then true:
 * notifications sent while it was not listening are lost, and the caller catches up from
 * the table and drops every cached key), then returns the notifications already received,
 * or waits up to timeout_ms for some (poll() on the socket: no busy loop). Fills up to max
 * of out with events, *count how many (more stay queued for the next call); the keys
 * announced are read with cg_store_listener_keys, the rows with cg_store_listener_rows.
 * CG_UNAVAILABLE when PostgreSQL cannot be reached (the caller retries later; the connection is
 * remade then). */
cg_status cg_store_listener_wait(struct cg_store_listener *l, int timeout_ms,
                                 struct cg_event_notice *out, int max, int *count, bool *relistened,
                                 struct cg_err *err) CG_MUST_CHECK;

/* The keys announced on cg_keys (revoked, changed or deleted: see struct cg_key_notice)
 * among the notifications the last cg_store_listener_wait received: up to max of them into
 * out, *count how many. Returns true when every cached key must be dropped instead: the
 * table was truncated, or more keys were announced at once than CG_STORE_KEY_NOTICES_MAX
 * (then out is not filled). Payloads that are not '<tenant uuid>:<key_id>' or '*' are
 * logged and skipped: a NOTIFY on cg_keys by anyone else names no key of ours. */
bool cg_store_listener_keys(struct cg_store_listener *l, struct cg_key_notice *out, int max,
                            int *count);

/* The rows announced on cg_rows among the notifications the last cg_store_listener_wait
 * received (at most CG_STORE_ROW_NOTICES_MAX: the wait leaves the rest queued for the next
 * call), *count how many. Payloads that are not ours are logged and skipped. The array
 * belongs to the listener and is valid until its next wait. */
const struct cg_row_notice *cg_store_listener_rows(struct cg_store_listener *l, int *count);

/* Fetches the events of one tenant in the ranges of wants[0..nwants) (at most 256), in
 * order of scope then seq, up to max into out; *count gets how many. With since_ms > 0,
 * also every event of the tenant that occurred at or after since_ms (unix ms) in scopes not
 * named by wants (catch-up after a reconnection). One statement. */
cg_status cg_store_listener_fetch(struct cg_store_listener *l, const char *tenant_id,
                                  const struct cg_event_want *wants, int nwants, int64_t since_ms,
                                  struct cg_event *out, int max, int *count,
                                  struct cg_err *err) CG_MUST_CHECK;

/* ---- calibration of token estimates (migrations/0009, store_calibration.c) ----------
 * CountTokens records each estimate it gives for a model without a public tokenizer; a
 * later Commit or RecordUsage with the provider's count of that prompt moves the tenant's
 * correction factor for the estimate's model. Outside transactions; one statement each. */

#define CG_CALIBRATION_FACTOR_MIN 0.25
#define CG_CALIBRATION_FACTOR_MAX 4.0
#define CG_ESTIMATE_MODEL_MAX 200 /* characters of the model an estimate is kept under */

/* A tenant's correction for one model. */
struct cg_calibration {
    double factor;         /* multiplies raw estimates; 1.0 when none was learned */
    int64_t samples;       /* provider counts it was learned from; 0 when none */
    int64_t updated_at_ms; /* unix ms of its last change; 0 when none */
};

/* Records an estimate of raw_tokens (before any correction) under estimate_id (1..128
 * printable ASCII, made by the caller; unique per tenant) for model (UTF-8, up to
 * CG_ESTIMATE_MODEL_MAX characters, "" allowed) and reads the tenant's calibration of that
 * model into *out (factor 1.0 and samples 0 when none). Also deletes up to 100 of the
 * tenant's estimates older than 24 hours. CG_NOT_FOUND for an unknown tenant,
 * CG_ALREADY_EXISTS for a used estimate_id; store errors as usual. */
cg_status cg_store_estimate_record(struct cg_store *store, const char *tenant_id,
                                   const char *estimate_id, const char *model, int64_t raw_tokens,
                                   struct cg_calibration *out, struct cg_err *err) CG_MUST_CHECK;

/* One provider count for calibration: in, estimate_id and provider_tokens (> 0); out,
 * whether it moved the factor and the factor of the estimate's model after the call. */
struct cg_calibration_sample {
    const char *estimate_id;
    int64_t provider_tokens;
    bool updated;
    double factor;
};

/* Applies samples[0..n) (1..CG_BATCH_MAX) of one tenant in one statement: every estimate
 * that exists, is younger than 24 hours and was not used yet is marked used, and its
 * ratio provider_tokens / raw estimate (bounded to 0.25..4) moves its model's factor:
 * factor += w * (ratio - factor), w = max(1 / (samples + 1), 0.2), samples of one model in
 * one call averaged into one step. Unknown, expired or used ids are left with updated =
 * false (not an error). On error nothing changed and every updated is false. */
cg_status cg_store_calibrate(struct cg_store *store, const char *tenant_id,
                             struct cg_calibration_sample *samples, int n,
                             struct cg_err *err) CG_MUST_CHECK;

#endif

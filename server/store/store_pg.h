/* store_pg.h - the PostgreSQL side of a cg_store (internal to server/store).
 *
 * One struct cg_pg is one libpq connection, made lazily, with its statement timeout kept
 * in step with the call's deadline. store_pg.c is the only file that includes libpq-fe.h;
 * callers see statuses and filled structs only.
 *
 * Common to every fallible function here:
 * - the deadline set with cg_pg_set_deadline is checked before anything is sent: passed ->
 *   CG_DEADLINE_EXCEEDED and the database is not touched;
 * - PostgreSQL unreachable (connect refused or timed out, connection lost) ->
 *   CG_UNAVAILABLE "storage unavailable"; a statement cancelled by its timeout ->
 *   CG_DEADLINE_EXCEEDED; anything else unexpected -> CG_INTERNAL "storage error".
 *   SQL errors go to the log (mod=store_pg), never into err;
 * - reads are retried once, transparently, when the connection turned out to be dead;
 *   writes are never re-sent after they may have reached the server (CG_UNAVAILABLE);
 * - arguments are expected to be validated by store.c (ids well-formed, lengths in range);
 *   what slips through is still answered by a status, never by a crash.
 * Not thread-safe: one cg_pg belongs to one thread at a time.
 */
#ifndef CG_STORE_STORE_PG_H
#define CG_STORE_STORE_PG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "store/migrate.h"
#include "store/store.h"

struct cg_pg;

/* A new, unconnected handle. dsn (URI or keyword form, copied) is passed to libpq as is;
 * settings in it win over ctxguard's defaults (keepalives, application name).
 * connect_timeout_ms bounds each connection attempt; statement_timeout_ms (> 0) is the
 * session's statement_timeout when no shorter deadline applies.
 * NULL when out of memory. */
struct cg_pg *cg_pg_new(const char *dsn, int connect_timeout_ms, int statement_timeout_ms);

/* Closes the connection and frees the handle. NULL is a no-op. */
void cg_pg_free(struct cg_pg *pg);

/* Shares flag (borrowed, must outlive pg; NULL: pg's own) with the other handles of the
 * process: an outage is logged as a warning once, by the first handle to see it. */
void cg_pg_set_outage_log(struct cg_pg *pg, atomic_int *flag);

/* Counts every statement's time into seconds and the failures that are the store's
 * (unreachable, timed out, broken) into errors, in the given metrics slot (base/metrics.h;
 * NULL handles: nothing). */
void cg_pg_set_meters(struct cg_pg *pg, struct cg_metric *seconds, struct cg_metric *errors,
                      uint32_t slot);

/* The changes of rows the handle counts as they become durable (store.h cg_store_meters). */
typedef enum {
    CG_PG_COUNT_APPROVAL_REQUESTED, /* an approval opened (PENDING) */
    CG_PG_COUNT_APPROVAL_APPROVED,
    CG_PG_COUNT_APPROVAL_DENIED,
    CG_PG_COUNT_APPROVAL_EXPIRED, /* a PENDING approval stored EXPIRED */
} cg_pg_count;
#define CG_PG_COUNTS 4

/* Counts the changes `which` into h (NULL: not counted), in the slot of cg_pg_set_meters: a
 * change written inside a transaction when that transaction commits (a rollback, or a
 * commit whose outcome is unknown, drops it), one written outside at once. */
void cg_pg_set_count_meter(struct cg_pg *pg, cg_pg_count which, struct cg_metric *h);

/* Sets the monotonic deadline (cg_mono_ms) of the current call; 0 clears it. Sends
 * nothing: the statement timeout is adjusted before the next statement, and only when
 * it must change. */
void cg_pg_set_deadline(struct cg_pg *pg, int64_t deadline_mono_ms);

/* Sets the request id carried by log lines (copied, truncated to 32 bytes); NULL clears. */
void cg_pg_set_request_id(struct cg_pg *pg, const char *rid);

/* Runs SELECT 1, connecting first when needed; the deadline is strict (no grace for the
 * answer after it: the connection is dropped and the result is an error). */
cg_status cg_pg_ping(struct cg_pg *pg, struct cg_err *err) CG_MUST_CHECK;

/* Applies the migrations of the table (sorted by version, ended by a row with sql NULL)
 * that schema_migrations does not record, each in its own transaction with its
 * schema_migrations row, all under a session advisory lock so that concurrent callers
 * apply each one once. Creates schema_migrations when missing. *applied (may be NULL)
 * gets how many were applied by this call, also on error. A failing migration ->
 * CG_INTERNAL naming its version; earlier ones stay applied. Statements run without a
 * statement timeout unless a deadline is set. */
cg_status cg_pg_migrate(struct cg_pg *pg, const struct cg_migration *migrations, int *applied,
                        struct cg_err *err) CG_MUST_CHECK;

/* Inserts a tenant. A time_zone PostgreSQL does not list in pg_timezone_names ->
 * CG_INVALID_ARGUMENT naming time_zone. */
cg_status cg_pg_tenant_create(struct cg_pg *pg, const char *name, const char *time_zone,
                              const struct cg_tenant_settings *settings,
                              const struct cg_audit *audit, struct cg_tenant *out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Replaces a tenant's settings (checked by the caller) and reads it back. CG_NOT_FOUND
 * naming tenant_id when there is no such tenant. */
cg_status cg_pg_tenant_settings_put(struct cg_pg *pg, const char *tenant_id,
                                    const struct cg_tenant_settings *settings,
                                    const struct cg_audit *audit, struct cg_tenant *out,
                                    struct cg_err *err) CG_MUST_CHECK;

/* Reads a tenant by canonical UUID text. CG_NOT_FOUND when there is none. */
cg_status cg_pg_tenant_get(struct cg_pg *pg, const char *tenant_id, struct cg_tenant *out,
                           struct cg_err *err) CG_MUST_CHECK;

/* One page of tenants by (created_at, tenant_id) after the tenant after_id ("" for the
 * first page). limit in 1..CG_STORE_PAGE_MAX. CG_INVALID_ARGUMENT naming after_id when
 * that tenant does not exist. */
cg_status cg_pg_tenant_list(struct cg_pg *pg, const char *after_id, int limit,
                            struct cg_tenant *out, int *count, bool *more,
                            struct cg_err *err) CG_MUST_CHECK;

/* Inserts a key. CG_NOT_FOUND naming tenant_id when the tenant does not exist;
 * CG_ALREADY_EXISTS naming key_id when the tenant already has that key id. */
cg_status cg_pg_key_create(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           const uint8_t secret_hash[32], const struct cg_api_key_spec *spec,
                           const struct cg_audit *audit, struct cg_api_key *out,
                           struct cg_err *err) CG_MUST_CHECK;

/* Up to limit keys of a tenant, newest first. CG_NOT_FOUND when the tenant does not exist. */
cg_status cg_pg_key_list(struct cg_pg *pg, const char *tenant_id, int limit, struct cg_api_key *out,
                         int *count, struct cg_err *err) CG_MUST_CHECK;

/* Sets revoked_at unless already set. CG_NOT_FOUND when the tenant has no such key. */
cg_status cg_pg_key_revoke(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           const struct cg_audit *audit, struct cg_api_key *out,
                           struct cg_err *err) CG_MUST_CHECK;

/* Reads what authentication needs. CG_NOT_FOUND when there is no such key. */
cg_status cg_pg_key_lookup(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           struct cg_key_auth *out, struct cg_err *err) CG_MUST_CHECK;

/* Sets last_used_at to now unless it is less than a minute old. */
cg_status cg_pg_key_touch(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                          struct cg_err *err);

/* --- budgets (scopes) ------------------------------------------------------------------
 *
 * The transaction functions below run on this handle's one connection. While a
 * transaction is open every statement is pinned to it: a connection found dead, or lost
 * while a statement was in flight, is CG_UNAVAILABLE and is never replaced or retried,
 * since the transaction died with it; the handle then answers CG_UNAVAILABLE until
 * cg_pg_rollback (or a failed cg_pg_commit) ends the transaction. The functions that say
 * "inside a transaction" answer CG_INTERNAL when none is open (a caller bug, logged).
 * Ids, tenant ids and amounts are expected to be checked by store.c.
 */

/* BEGIN (READ COMMITTED: row locks then see the latest committed row). Reconnects first
 * when needed, since nothing has happened yet. A transaction left open by a caller that
 * forgot to end it is rolled back first (logged as an error). */
cg_status cg_pg_begin(struct cg_pg *pg, struct cg_err *err) CG_MUST_CHECK;

/* COMMIT. CG_OK only when the server reported the commit; a connection lost meanwhile is
 * CG_UNAVAILABLE (the outcome is unknown); a transaction that an earlier error had already
 * aborted is CG_INTERNAL (it was rolled back). The transaction is over afterwards, except
 * when the deadline had passed before COMMIT was sent (CG_DEADLINE_EXCEEDED): it is still
 * open for cg_pg_rollback. */
cg_status cg_pg_commit(struct cg_pg *pg, struct cg_err *err) CG_MUST_CHECK;

/* ROLLBACK when a transaction is open (also an aborted one), ignoring the deadline: it
 * releases locks. A connection that fails to roll back is closed, which rolls back too.
 * A no-op without a transaction. */
void cg_pg_rollback(struct cg_pg *pg);

/* Inside a transaction: see cg_store_path_read. Rows are locked FOR NO KEY UPDATE (they
 * conflict with each other, not with foreign-key checks) in level order. The tenant's row
 * is inserted (ON CONFLICT DO NOTHING) only when the first read finds it missing. A tenant
 * that does not exist -> CG_NOT_FOUND "tenant_id: no such tenant". */
cg_status cg_pg_path_read(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          bool lock, bool allow_missing_last, int64_t now_ms,
                          struct cg_budget_row out[4], int *n, struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: see cg_store_budget_put. row->level must match row->ids; the
 * settings are stored as given. The parent row of a task or agent must exist
 * (CG_NOT_FOUND naming the first missing id); a session's parent (the tenant row) is
 * created lazily by cg_pg_path_read. *created is true when the stored version is 1: the
 * scope got its first budget with this call. */
cg_status cg_pg_budget_put(struct cg_pg *pg, const char *tenant_id, const struct cg_budget_row *row,
                           int64_t expected_version, const char *key_id, int64_t now_ms,
                           const struct cg_audit *audit, struct cg_budget_row *out, bool *created,
                           struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: appends one audit row of kind for ids (NULL: no scope) and target
 * (NULL: none), with before and after as JSON text (NULL: SQL NULL). For changes whose
 * JSON is figures computed across statements (CloseScope); a change made by one statement
 * writes its row in that statement instead, from the row itself. */
cg_status cg_pg_audit_append(struct cg_pg *pg, const char *tenant_id, const struct cg_audit *audit,
                             const char *kind, const struct cg_scope_ids *ids, const char *target,
                             const char *before_json, const char *after_json,
                             struct cg_err *err) CG_MUST_CHECK;

/* One page of the audit trail: see cg_store_audit_list (arguments checked by the caller;
 * tenant_id canonical). */
cg_status cg_pg_audit_list(struct cg_pg *pg, const char *tenant_id,
                           const struct cg_audit_filter *filter, int64_t before_id, int limit,
                           struct cg_audit_event *out, int *count, bool *more,
                           struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: see cg_store_path_add. rows[n - 1].ids names the path (its depth
 * must be n). A row of the path that does not exist -> CG_NOT_FOUND naming its id. A
 * counter that would pass the bigint range -> CG_INVALID_ARGUMENT. */
cg_status cg_pg_path_add(struct cg_pg *pg, const char *tenant_id, struct cg_budget_row *rows, int n,
                         int64_t used_tokens, int64_t reserved_tokens, int64_t used_cost_micros,
                         int64_t reserved_cost_micros, struct cg_err *err) CG_MUST_CHECK;
cg_status cg_pg_path_change(struct cg_pg *pg, const char *tenant_id, struct cg_budget_row *rows,
                            int n, const struct cg_usage *spent, int64_t used_tokens,
                            int64_t reserved_tokens, int64_t used_cost_micros,
                            int64_t reserved_cost_micros, struct cg_err *err);

/* Inside a transaction: see cg_store_reservation_insert. idempotency_key "" means none.
 * The scope row must exist (CG_NOT_FOUND naming its deepest id). */
cg_status cg_pg_reservation_insert(struct cg_pg *pg, const char *tenant_id,
                                   const struct cg_scope_ids *ids, int64_t tokens,
                                   int64_t cost_micros, const char *model, const char *estimate_id,
                                   const char *idempotency_key, uint32_t ttl_ms,
                                   struct cg_reservation *out, struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: see cg_store_reservation_lock (reservation_id a canonical UUID). */
cg_status cg_pg_reservation_lock(struct cg_pg *pg, const char *tenant_id,
                                 const char *reservation_id, struct cg_reservation *out,
                                 struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: see cg_store_reservation_settle. Only an ACTIVE reservation
 * (expired or not) moves: one already settled -> CG_FAILED_PRECONDITION naming
 * reservation_id; none -> CG_NOT_FOUND. usage (state 2 only; NULL elsewhere) is recorded. */
cg_status cg_pg_reservation_settle(struct cg_pg *pg, const char *tenant_id,
                                   const char *reservation_id, int state,
                                   const struct cg_usage *usage, struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: see cg_store_ledger_append. idempotency_key and reservation_id ""
 * mean none. A repeated key never aborts the transaction (ON CONFLICT DO NOTHING, then the
 * earlier entry is read). A reservation that already has an entry ->
 * CG_FAILED_PRECONDITION naming reservation_id; an unknown one -> CG_NOT_FOUND. */
cg_status cg_pg_ledger_append(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, const struct cg_usage *usage,
                              const char *model, const char *idempotency_key,
                              const char *reservation_id, int64_t occurred_at_ms, char *entry_id,
                              struct cg_ledger_first *first, struct cg_err *err) CG_MUST_CHECK;

/* See cg_store_subtree_max_limits (store.h). */
cg_status cg_pg_subtree_max_limits(struct cg_pg *pg, const char *tenant_id,
                                   const struct cg_scope_ids *ids, int64_t *max_tokens,
                                   int64_t *max_cost_micros, struct cg_err *err);

/* See cg_store_path_peek (store.h). */
cg_status cg_pg_path_peek(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          int64_t now_ms, struct cg_budget_row out[4], int *n, bool *need_tx,
                          struct cg_err *err);

cg_status cg_pg_ledger_entry_of(struct cg_pg *pg, const char *tenant_id, const char *reservation_id,
                                char *entry_id, struct cg_err *err);

/* Batches (store.h "batches"; store_pg_batch.c). */
cg_status cg_pg_batch_lock_reservations(struct cg_pg *pg, const char *const *tenants,
                                        char (*const ids)[CG_UUID_LEN + 1], int n,
                                        struct cg_reservation *out, bool *found,
                                        struct cg_err *err);
cg_status cg_pg_batch_lock_scopes(struct cg_pg *pg, const char *const *tenants,
                                  const struct cg_scope_ids *keys, int n, struct cg_budget_row *out,
                                  char (*row_tenant)[CG_UUID_LEN + 1], int cap, int *nout,
                                  struct cg_err *err);
cg_status cg_pg_batch_keys_used(struct cg_pg *pg, const char *const *tenants,
                                const char *const *keys, int n, bool *used, struct cg_err *err);
cg_status cg_pg_batch_write(struct cg_pg *pg, const struct cg_batch_write *w, struct cg_err *err);

cg_status cg_pg_usage_by_model(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_scope_usage *nodes, int n, int per_node,
                               struct cg_model_usage *out, int cap, int *count, struct cg_err *err);

#endif

/* store_pg_internal.h - what the PostgreSQL files of the store share: the connection
 * object and the statement runner. Private to server/store/store_pg*.c. Not thread-safe:
 * a cg_pg belongs to one worker.
 */
#ifndef CG_STORE_PG_INTERNAL_H
#define CG_STORE_PG_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store_pg.h"

#define MOD "store_pg"

/* Statements kept prepared per connection; more run unnamed. */
#define CG_PG_PREPARED_MAX 160

/* cg__pg_run() flags */
enum {
    RUN_READ = 1,   /* idempotent: may be re-sent once on a new connection */
    RUN_PINNED = 2, /* needs this session (transaction, advisory lock): never reconnect */
    RUN_SIMPLE = 4, /* simple query protocol, several statements, no parameters */
};

struct cg_pg {
    PGconn *conn; /* NULL while not connected */
    char *dsn;
    int connect_timeout_ms;
    int statement_timeout_ms; /* the configured one; 0 means none (migrations) */
    int session_timeout_ms;   /* what the session has; -1 unknown */
    int64_t deadline_mono_ms; /* 0: none */
    char rid[33];
    char sqlstate[6];    /* of the last statement that failed, "" otherwise */
    char constraint[64]; /* the constraint it violated, "" otherwise */
    bool fatal_received; /* the server sent FATAL: it is closing this connection */
    /* The deadline is strict: no grace after it for the server's answer (the health
     * probe, whose verdict must come in time whatever the server does). */
    bool strict_deadline;
    /* Whether an outage was logged and not yet followed by a success: the process's
     * (cg_store_outages.pg) or own_outage_logged. */
    atomic_int *outage_logged;
    atomic_int own_outage_logged;
    struct cg_metric *seconds, *errors; /* cg_pg_set_meters; NULL: not counted */
    uint32_t metrics_slot;
    /* cg_pg_set_count_meter's handles, and what the open transaction wrote of each: added
     * to the handle when it commits, dropped when it does not (cg__pg_count). */
    struct cg_metric *count_meters[CG_PG_COUNTS];
    uint64_t tx_counts[CG_PG_COUNTS];
    /* A transaction is open (cg_pg_begin until commit or rollback). It stays set when the
     * connection is lost, so that later statements fail instead of running outside it. */
    bool in_tx;
    bool timeout_set_in_tx; /* statement_timeout changed inside it: a rollback undoes that */
    bool begin_pending;     /* in_tx, but its BEGIN waits for the first statement */
    /* Hashes of the statements prepared on this connection (store_pg.c send_wait). */
    uint64_t prepared[CG_PG_PREPARED_MAX];
    int nprepared;
    /* Payloads of the events appended in the open transaction, NOTIFYd right after its
     * COMMIT (migrations/0007): NUL-terminated, back to back. */
    char *notices;
    size_t notices_len, notices_cap;
    int nnotices;
    /* The first notices_kept (notices_kept_len bytes) of them are of transactions already
     * committed whose NOTIFY failed: a rollback keeps them, the next commit sends them. */
    size_t notices_kept_len;
    int notices_kept;
};

/* Counts n changes `which` written by the statement that just succeeded: at the open
 * transaction's commit, or at once outside a transaction (cg_pg_set_count_meter). */
void cg__pg_count(struct cg_pg *pg, cg_pg_count which, uint64_t n);

/* Queues a payload to NOTIFY after the open transaction commits (store_pg.c). False when
 * out of memory (the event is committed all the same; only its wake-up is lost). */
bool cg__pg_notice_add(struct cg_pg *pg, const char *payload);

/* The request id of the current call, for log lines ("" when none). */
const char *cg__pg_rid(const struct cg_pg *pg);

/* Copies src into dst (cap bytes), truncating. */
void cg__pg_copy_str(char *dst, size_t cap, const char *src);

/* A decimal int64 from PostgreSQL's text output (0 for NULL or garbage). */
int64_t cg__pg_parse_i64(const char *s);

/* Decodes PostgreSQL's bytea hex output of exactly n bytes. */
bool cg__pg_decode_bytea_hex(const char *s, uint8_t *out, size_t n);

/* Whether the last failed statement had this SQLSTATE. */
bool cg__pg_sqlstate_is(const struct cg_pg *pg, const char *state);

/* Runs one statement (see store_pg.c for deadlines, reconnection and the flags). On CG_OK
 * *out holds the result, which the caller PQclears; on error *out is NULL and err says
 * what the client may see (SQL details go to the log). */
cg_status cg__pg_run(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                     const char *const *values, const int *lengths, const int *formats, int flags,
                     PGresult **out, struct cg_err *err);

/* cg__pg_run for a statement that names one row by its key: an id PostgreSQL cannot parse
 * (22P02) and no row are both CG_NOT_FOUND with `missing` as the message. */
cg_status cg__pg_run_one(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                         const char *const *values, int flags, const char *missing, PGresult **out,
                         struct cg_err *err);

/* items as a PostgreSQL text array literal ("{\"a\",\"b\"}", every element quoted) into buf
 * (cap bytes); false when it does not fit. */
bool cg__pg_text_array(const char *const *items, int n, char *buf, size_t cap);

/* Parses the comma-separated tier columns of a scope row (float8 text reads back exactly)
 * into out's tiers. False when they are malformed or too many. (store_pg_budget.c) */
bool cg__pg_parse_tiers(const char *ratios, const char *delays, struct cg_budget_row *out);

/* "tenant_id: no such tenant", "scope.session_id: no such session", ... by level - 1. */
extern const char *const cg__pg_no_such_scope[4];

/* Sets err to CG_NOT_FOUND with cg__pg_no_such_scope[index] and its reason
 * (TENANT_NOT_FOUND for index 0, SCOPE_NOT_FOUND otherwise). Returns CG_NOT_FOUND. */
cg_status cg__pg_scope_missing(struct cg_err *err, int index);

/* A float8 / boolean from PostgreSQL's text output (0 / false for garbage). */
double cg__pg_parse_double(const char *s);
bool cg__pg_is_true(const char *s);

/* CG_INTERNAL (and a log line) when no transaction is open for `what`. */
cg_status cg__pg_not_in_tx(struct cg_pg *pg, const char *what, struct cg_err *err);

/* The columns cg__pg_read_scope() expects, in order. */
#define SCOPE_COLUMNS                                                                              \
    "session_id, task_id, agent_id, level, has_budget, mode, limit_tokens, limit_cost_micros,"     \
    " warning_ratio, backpressure_disabled, array_to_string(tier_ratio, ','),"                     \
    " array_to_string(tier_delay_ms, ','), on_store_failure, local_allowance_tokens,"              \
    " reset_period, reservation_ttl_ms, description, used_tokens, reserved_tokens,"                \
    " used_cost_micros, reserved_cost_micros, version,"                                            \
    " floor(extract(epoch FROM created_at) * 1000)::int8,"                                         \
    " floor(extract(epoch FROM updated_at) * 1000)::int8,"                                         \
    " coalesce(floor(extract(epoch FROM closed_at) * 1000)::int8, 0), updated_by_key_id,"          \
    " coalesce(floor(extract(epoch FROM period_start) * 1000)::int8, 0),"                          \
    " coalesce(floor(extract(epoch FROM next_reset_at) * 1000)::int8, 0),"                         \
    " approval_ttl_ms, approved_extra_tokens, row_version, exclude_cache_read_tokens,"             \
    " spent_input_tokens, spent_output_tokens, spent_cache_read_tokens,"                           \
    " spent_cache_write_tokens,"                                                                   \
    " coalesce(floor(extract(epoch FROM last_activity_at) * 1000)::int8, 0),"                      \
    " allocate_from_parent, allocated_tokens"

/* The audit trail (store.h, store_pg_audit.c). A statement that writes an audit row runs
 * AUDIT_INSERT with a SELECT of, in this order: tenant_id, actor key id, actor role, kind,
 * session_id, task_id, agent_id, target, before, after, request id; the actor's three come
 * from cg__pg_actor as text parameters. */
#define AUDIT_INSERT                                                                               \
    "INSERT INTO audit_events (tenant_id, actor_key_id, actor_role, kind, session_id, task_id,"    \
    " agent_id, target, before, after, request_id)"

/* What a reader of the trail needs of a budget (scopes aliased `alias`), as jsonb. */
#define AUDIT_BUDGET_JSON(alias)                                                                   \
    "jsonb_build_object('limit_tokens', " alias ".limit_tokens, 'limit_cost_micros', " alias       \
    ".limit_cost_micros, 'mode', (ARRAY['HARD', 'SOFT', 'APPROVAL'])[" alias ".mode::int],"        \
    " 'reset_period', (ARRAY['NONE', 'DAILY', 'MONTHLY'])[" alias ".reset_period::int],"           \
    " 'warning_ratio', " alias ".warning_ratio, 'backpressure_disabled', " alias                   \
    ".backpressure_disabled, 'tier_ratio', " alias ".tier_ratio, 'tier_delay_ms', " alias          \
    ".tier_delay_ms, 'on_store_failure', (ARRAY['FAIL_CLOSED', 'FAIL_OPEN',"                       \
    " 'LOCAL_ALLOWANCE'])[" alias ".on_store_failure::int], 'local_allowance_tokens', " alias      \
    ".local_allowance_tokens, 'reservation_ttl_ms', " alias ".reservation_ttl_ms,"                 \
    " 'approval_ttl_ms', " alias ".approval_ttl_ms, 'exclude_cache_read_tokens', " alias           \
    ".exclude_cache_read_tokens, 'allocate_from_parent', " alias ".allocate_from_parent,"          \
    " 'description', " alias ".description, 'version', " alias ".version)"

/* An actor as the text parameters of AUDIT_INSERT's SELECT. */
struct cg__pg_actor {
    const char *key_id; /* "" for the server's admin key */
    char role[8];
    char request_id[CG_AUDIT_REQUEST_ID_MAX + 1];
};

/* audit (NULL: the server's admin key, no request id) as parameters; the request id is cut
 * to CG_AUDIT_REQUEST_ID_MAX bytes. */
void cg__pg_actor(const struct cg_audit *audit, struct cg__pg_actor *out);

/* Reads row `row` of res (SCOPE_COLUMNS) into out. False when it does not parse. */
bool cg__pg_read_scope(PGresult *res, int row, struct cg_budget_row *out);

/* The columns cg__pg_read_reservation() expects. An ACTIVE reservation past its expiry reads as
 * EXPIRED (4) until somebody settles it. */
#define RESERVATION_COLUMNS                                                                        \
    "reservation_id::text, session_id, task_id, agent_id, tokens, cost_micros, model,"             \
    " estimate_id, CASE WHEN state = 1 AND expires_at <= now() THEN 4 ELSE state END,"             \
    " floor(extract(epoch FROM created_at) * 1000)::int8,"                                         \
    " floor(extract(epoch FROM expires_at) * 1000)::int8,"                                         \
    " coalesce(floor(extract(epoch FROM settled_at) * 1000)::int8, 0),"                            \
    " committed_input_tokens, committed_output_tokens, committed_cache_read_tokens,"               \
    " committed_cache_write_tokens, committed_cost_micros"

/* Reads row `row` of res (RESERVATION_COLUMNS) into out. */
void cg__pg_read_reservation(PGresult *res, int row, struct cg_reservation *out);

#endif

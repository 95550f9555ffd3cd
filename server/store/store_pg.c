/* store_pg.c - PostgreSQL for the store: one libpq connection, its timeouts, the queries
 * and the migration runner. The only file that includes libpq-fe.h.
 *
 * Every statement goes through run(): it checks the deadline, makes sure the connection
 * is alive (reconnecting when nothing has been sent yet), adjusts statement_timeout when
 * the deadline requires it, sends the statement with parameters (PQsendQueryParams) and
 * waits with poll() so that a server that stops answering cannot hold the caller past its
 * statement timeout plus a grace period.
 *
 * Budget operations run inside a transaction the caller opens (cg_pg_begin): while it is
 * open, run() pins every statement to the connection, since a transaction cannot move to
 * another one; a lost connection is CG_UNAVAILABLE until the caller ends the transaction.
 */
#include "store/store_pg.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "base/clock.h"
#include "base/log.h"

#define MOD "store_pg"

/* The session advisory lock that serializes migration runners ("ctxguard" in ASCII). */
#define MIGRATION_LOCK_KEY "7166485292799586916"

/* How long past the statement timeout (or the deadline) we wait for the server's answer
 * before we stop trusting the connection: the server cancels the statement itself at the
 * timeout, so only a dead network or server gets this far. */
#define RESPONSE_GRACE_MS 2000

/* libpq's own connect_timeout is in whole seconds and ignores values below 2. */
#define LIBPQ_MIN_CONNECT_TIMEOUT_S 2

/* run() flags */
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
    /* A transaction is open (cg_pg_begin until commit or rollback). It stays set when the
     * connection is lost, so that later statements fail instead of running outside it. */
    bool in_tx;
    bool timeout_set_in_tx; /* statement_timeout changed inside it: a rollback undoes that */
};

/* Whether a connection failure has been logged and not yet followed by a success, shared by
 * all connections of the process so that an outage is one warning, not one per worker. */
static atomic_int outage_logged;

static const char *rid_of(const struct cg_pg *pg)
{
    return pg->rid[0] ? pg->rid : NULL;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The first line of a libpq message: the rest repeats the statement or adds hints. */
static void first_line(char *dst, size_t cap, const char *src)
{
    copy_str(dst, cap, src ? src : "");
    char *nl = strchr(dst, '\n');
    if (nl != NULL)
        *nl = '\0';
}

/* libpq messages end with newlines and may span lines; logs want one line. */
static void one_line(char *dst, size_t cap, const char *src)
{
    copy_str(dst, cap, src ? src : "");
    for (char *p = dst; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    }
    size_t n = strlen(dst);
    while (n > 0 && dst[n - 1] == ' ')
        dst[--n] = '\0';
}

static int64_t parse_i64(const char *s)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s)
        return 0;
    return (int64_t)v;
}

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

/* Decodes bytea's text output ("\x" + 2n hex digits) into exactly n bytes. */
static bool decode_bytea_hex(const char *s, uint8_t *out, size_t n)
{
    if (s[0] != '\\' || s[1] != 'x' || strlen(s + 2) != 2 * n)
        return false;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(s[2 + 2 * i]), lo = hex_value(s[3 + 2 * i]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* ------------------------------------------------------------------ connection --- */

static void notice_cb(void *arg, const char *message)
{
    struct cg_pg *pg = arg;
    char line[512];
    one_line(line, sizeof line, message);
    /* NOTICEs ("already exists, skipping") are routine; what the server says before it
     * closes a connection (FATAL) is worth seeing. */
    bool fatal = strncmp(line, "FATAL", 5) == 0 || strncmp(line, "PANIC", 5) == 0;
    bool serious = fatal || strncmp(line, "WARNING", 7) == 0 || strncmp(line, "ERROR", 5) == 0;
    if (fatal)
        pg->fatal_received = true;
    cg_log(serious ? CG_LOG_WARN : CG_LOG_DEBUG, MOD, rid_of(pg), "server message: %s", line);
}

static void drop_conn(struct cg_pg *pg)
{
    if (pg->conn != NULL) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
    pg->session_timeout_ms = -1;
}

static void note_outage(const struct cg_pg *pg, const char *what, const char *detail)
{
    char line[512];
    one_line(line, sizeof line, detail);
    if (atomic_exchange(&outage_logged, 1) == 0)
        cg_log(CG_LOG_WARN, MOD, rid_of(pg), "postgresql unavailable: %s: %s", what, line);
    else
        cg_log(CG_LOG_DEBUG, MOD, rid_of(pg), "postgresql still unavailable: %s: %s", what, line);
}

static void note_connected(const struct cg_pg *pg)
{
    if (atomic_exchange(&outage_logged, 0) == 1)
        cg_log(CG_LOG_INFO, MOD, rid_of(pg), "postgresql reachable again");
}

/* Waits until the connection's socket has one of events or until `until` (cg_mono_ms;
 * INT64_MAX: no limit). 1 ready, 0 timed out, -1 failed. */
static int wait_socket(PGconn *conn, short events, int64_t until)
{
    int fd = PQsocket(conn);
    if (fd < 0)
        return -1;
    for (;;) {
        int timeout = -1;
        if (until != INT64_MAX) {
            int64_t left = until - cg_mono_ms();
            if (left <= 0)
                return 0;
            timeout = left > INT_MAX ? INT_MAX : (int)left;
        }
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, timeout);
        if (n > 0)
            return 1;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* Connects with PQconnectStartParams/PQconnectPoll so that the timeout has millisecond
 * resolution and also honours the call's deadline. */
static cg_status connect_pg(struct cg_pg *pg, struct cg_err *err)
{
    int64_t until = cg_mono_ms() + pg->connect_timeout_ms;
    bool deadline_bound = false;
    if (pg->deadline_mono_ms != 0 && pg->deadline_mono_ms < until) {
        until = pg->deadline_mono_ms;
        deadline_bound = true;
    }

    /* Entries before "dbname" are defaults that the DSN can override (libpq processes the
     * arrays in order and the expanded DSN replaces earlier values). connect_timeout only
     * matters to libpq's own blocking paths; ours is the poll loop below. */
    int timeout_s = (pg->connect_timeout_ms + 999) / 1000;
    if (timeout_s < LIBPQ_MIN_CONNECT_TIMEOUT_S)
        timeout_s = LIBPQ_MIN_CONNECT_TIMEOUT_S;
    char timeout_text[16];
    snprintf(timeout_text, sizeof timeout_text, "%d", timeout_s);
    const char *const keys[] = {"connect_timeout",  "keepalives",
                                "keepalives_idle",  "keepalives_interval",
                                "keepalives_count", "fallback_application_name",
                                "dbname",           NULL};
    const char *const values[] = {timeout_text, "1", "30", "10", "3", "ctxguard", pg->dsn, NULL};

    PGconn *conn = PQconnectStartParams(keys, values, 1);
    if (conn == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    if (PQstatus(conn) == CONNECTION_BAD) {
        note_outage(pg, "connect", PQerrorMessage(conn));
        PQfinish(conn);
        return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
    }
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK) {
        if (st == PGRES_POLLING_FAILED) {
            note_outage(pg, "connect", PQerrorMessage(conn));
            PQfinish(conn);
            return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
        }
        int ready = wait_socket(conn, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, until);
        if (ready <= 0) {
            note_outage(pg, "connect", ready == 0 ? "timed out" : "poll failed");
            PQfinish(conn);
            if (ready == 0 && deadline_bound)
                return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
            return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
        }
        st = PQconnectPoll(conn);
    }
    if (PQsetnonblocking(conn, 1) != 0) {
        note_outage(pg, "connect", PQerrorMessage(conn));
        PQfinish(conn);
        return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
    }
    PQsetNoticeProcessor(conn, notice_cb, pg);
    pg->conn = conn;
    pg->session_timeout_ms = -1;
    pg->fatal_received = false;
    note_connected(pg);
    return CG_OK;
}

/* Whether an idle connection still looks usable, without sending anything: reads what the
 * server may have sent meanwhile (a FATAL before it closed the connection, the close
 * itself). False means the connection must be replaced; since nothing was sent, that is
 * safe even for writes. */
static bool idle_conn_alive(struct cg_pg *pg)
{
    PGconn *conn = pg->conn;
    if (PQstatus(conn) != CONNECTION_OK || pg->fatal_received)
        return false;
    int fd = PQsocket(conn);
    if (fd < 0)
        return false;
    /* A read that returns data does not report the end of the stream behind it, so read
     * until the socket has nothing more (bounded: an idle server sends little). */
    for (int reads = 0; reads < 8; reads++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, 0);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK || pg->fatal_received)
            return false;
    }
    if (PQisBusy(conn))
        return false;
    /* A result nobody asked for means the protocol state is not what we think it is. */
    bool stray = false;
    PGresult *res;
    while ((res = PQgetResult(conn)) != NULL) {
        stray = true;
        PQclear(res);
    }
    return !stray;
}

/* ------------------------------------------------------------------ statements --- */

static int64_t time_left(const struct cg_pg *pg)
{
    if (pg->deadline_mono_ms == 0)
        return INT64_MAX;
    return pg->deadline_mono_ms - cg_mono_ms();
}

/* Until when to wait for the answer to a statement sent now. */
static int64_t response_until(const struct cg_pg *pg)
{
    int64_t now = cg_mono_ms();
    int64_t until = INT64_MAX;
    if (pg->session_timeout_ms > 0)
        until = now + pg->session_timeout_ms + RESPONSE_GRACE_MS;
    else if (pg->session_timeout_ms < 0) /* before the first SET: a short statement */
        until = now + pg->connect_timeout_ms + RESPONSE_GRACE_MS;
    if (pg->deadline_mono_ms != 0 && pg->deadline_mono_ms + RESPONSE_GRACE_MS < until)
        until = pg->deadline_mono_ms + RESPONSE_GRACE_MS;
    return until;
}

static cg_status conn_lost(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    char line[512];
    first_line(line, sizeof line, PQerrorMessage(pg->conn));
    cg_log(CG_LOG_WARN, MOD, rid_of(pg), "connection lost query=%s error=\"%s\"", label, line);
    drop_conn(pg);
    return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
}

static cg_status no_answer(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_WARN, MOD, rid_of(pg), "no answer in time, dropping the connection query=%s",
           label);
    drop_conn(pg);
    if (time_left(pg) <= 0)
        return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
    return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
}

/* Sends one statement (or, with RUN_SIMPLE, a script) and waits for its result. CG_OK with
 * *out set (it may be an error result: the first error of a script, else the last result);
 * on a transport failure the connection is dropped and *out stays NULL. */
static cg_status send_wait(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                           const char *const *values, const int *lengths, const int *formats,
                           int flags, PGresult **out, struct cg_err *err)
{
    PGconn *conn = pg->conn;
    int64_t until = response_until(pg);
    *out = NULL;

    int sent = (flags & RUN_SIMPLE)
                   ? PQsendQuery(conn, sql)
                   : PQsendQueryParams(conn, sql, nparams, NULL, values, lengths, formats, 0);
    if (!sent)
        return conn_lost(pg, label, err);
    for (;;) {
        int rc = PQflush(conn);
        if (rc == 0)
            break;
        if (rc < 0)
            return conn_lost(pg, label, err);
        int ready = wait_socket(conn, POLLIN | POLLOUT, until);
        if (ready == 0)
            return no_answer(pg, label, err);
        if (ready < 0 || !PQconsumeInput(conn))
            return conn_lost(pg, label, err);
    }

    PGresult *keep = NULL;
    for (;;) {
        while (PQisBusy(conn)) {
            int ready = wait_socket(conn, POLLIN, until);
            if (ready == 0) {
                PQclear(keep);
                return no_answer(pg, label, err);
            }
            if (ready < 0 || !PQconsumeInput(conn)) {
                PQclear(keep);
                return conn_lost(pg, label, err);
            }
        }
        PGresult *res = PQgetResult(conn);
        if (res == NULL)
            break;
        if (keep != NULL && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
            PQclear(res);
        } else {
            PQclear(keep);
            keep = res;
        }
    }
    if (keep == NULL)
        return conn_lost(pg, label, err);
    *out = keep;
    return CG_OK;
}

/* The band of statement timeouts acceptable for the next statement: never more than what
 * the configuration or the deadline allows (hi), and not so much less (lo) that statements
 * are cut short for nothing. The band lets consecutive calls with similar deadlines reuse
 * the session's value instead of paying a SET round trip per statement. 0 means none. */
static void timeout_band(const struct cg_pg *pg, int *lo, int *hi, int *target)
{
    int configured = pg->statement_timeout_ms;
    int64_t left = time_left(pg);
    if (left == INT64_MAX || (configured > 0 && left >= configured)) {
        *lo = *hi = *target = configured;
        return;
    }
    *hi = left > INT_MAX ? INT_MAX : (int)left;
    if (*hi < 1)
        *hi = 1;
    *lo = *hi - *hi / 4;
    *target = *hi - *hi / 8;
}

static cg_status sync_timeout(struct cg_pg *pg, struct cg_err *err)
{
    int lo, hi, target;
    timeout_band(pg, &lo, &hi, &target);
    int current = pg->session_timeout_ms;
    bool fits = hi == 0 ? current == 0 : (current > 0 && current >= lo && current <= hi);
    if (fits)
        return CG_OK;

    char text[16];
    snprintf(text, sizeof text, "%d", target);
    const char *values[] = {text};
    PGresult *res = NULL;
    cg_status rc = send_wait(pg, "set_statement_timeout",
                             "SELECT set_config('statement_timeout', $1::text, false)", 1, values,
                             NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char line[512];
        one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
        cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "cannot set statement_timeout error=\"%s\"", line);
        PQclear(res);
        drop_conn(pg);
        return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
    }
    PQclear(res);
    pg->session_timeout_ms = target;
    if (pg->in_tx)
        pg->timeout_set_in_tx = true;
    return CG_OK;
}

static bool sqlstate_is(const struct cg_pg *pg, const char *state)
{
    return strcmp(pg->sqlstate, state) == 0;
}

/* Whether an error result means the connection is gone (or the server is going away). */
static bool connection_error(const struct cg_pg *pg)
{
    return PQstatus(pg->conn) != CONNECTION_OK || strncmp(pg->sqlstate, "08", 2) == 0 ||
           sqlstate_is(pg, "57P01") || sqlstate_is(pg, "57P02") || sqlstate_is(pg, "57P03");
}

/* Maps a failed statement to a status, logs it and fills err with a message free of SQL.
 * Callers that expect particular SQLSTATEs (constraint violations) overwrite err. */
static cg_status statement_failed(struct cg_pg *pg, const char *label, PGresult *res,
                                  struct cg_err *err)
{
    const char *state = pg->sqlstate;
    cg_status code = CG_INTERNAL;
    const char *text = "storage error";
    cg_log_level level = CG_LOG_ERROR;
    if (strcmp(state, "57014") == 0) {
        code = CG_DEADLINE_EXCEEDED;
        text = "deadline exceeded";
        level = CG_LOG_WARN;
    } else if (strncmp(state, "40", 2) == 0) {
        code = CG_ABORTED;
        text = "conflict with a concurrent change; retry";
        level = CG_LOG_WARN;
    } else if (strncmp(state, "53", 2) == 0) {
        code = CG_UNAVAILABLE;
        text = "storage unavailable";
    } else if (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0) {
        /* Bad values and constraint violations: the caller usually maps them. */
        level = CG_LOG_INFO;
    }
    char line[512];
    one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
    struct cg_kv fields[] = {{"query", label}, {"sqlstate", state}, {"error", line}};
    cg_log_kv(level, MOD, rid_of(pg), "statement failed", fields, 3);
    return cg_err_set(err, code, "%s", text);
}

/* Runs one statement (see the file comment). On CG_OK, *out is a successful result that
 * the caller PQclears; on error *out is NULL, err is filled and pg->sqlstate holds the
 * SQLSTATE when the server reported one. */
static cg_status run(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                     const char *const *values, const int *lengths, const int *formats, int flags,
                     PGresult **out, struct cg_err *err)
{
    *out = NULL;
    pg->sqlstate[0] = '\0';
    pg->constraint[0] = '\0';
    /* Inside a transaction nothing may be re-sent or moved to another connection. */
    if (pg->in_tx)
        flags = (flags | RUN_PINNED) & ~RUN_READ;
    for (int attempt = 0;; attempt++) {
        if (time_left(pg) <= 0)
            return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");

        bool fresh = false;
        if (pg->conn != NULL && !idle_conn_alive(pg)) {
            if (flags & RUN_PINNED) {
                drop_conn(pg);
                cg_log(CG_LOG_WARN, MOD, rid_of(pg), "connection lost mid-session query=%s", label);
                return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
            }
            cg_log(CG_LOG_INFO, MOD, rid_of(pg), "connection closed while idle; reconnecting");
            drop_conn(pg);
        }
        if (pg->conn == NULL) {
            if (flags & RUN_PINNED)
                return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
            cg_status rc = connect_pg(pg, err);
            if (rc != CG_OK)
                return rc;
            fresh = true;
        }

        /* Nothing of the statement itself has been sent while the timeout is adjusted, so
         * a connection lost here may be replaced for any statement. */
        cg_status rc = sync_timeout(pg, err);
        bool retry_ok = !(flags & RUN_PINNED) && !fresh && attempt == 0;
        if (rc == CG_UNAVAILABLE && retry_ok)
            continue;
        if (rc != CG_OK)
            return rc;

        PGresult *res = NULL;
        rc = send_wait(pg, label, sql, nparams, values, lengths, formats, flags, &res, err);
        retry_ok = retry_ok && (flags & RUN_READ);
        if (rc == CG_UNAVAILABLE && retry_ok) {
            cg_log(CG_LOG_INFO, MOD, rid_of(pg), "retrying a read on a new connection query=%s",
                   label);
            continue;
        }
        if (rc != CG_OK)
            return rc;

        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
            *out = res;
            return CG_OK;
        }
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        copy_str(pg->sqlstate, sizeof pg->sqlstate, state ? state : "");
        const char *constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
        copy_str(pg->constraint, sizeof pg->constraint, constraint ? constraint : "");
        if (connection_error(pg)) {
            char line[512];
            one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
            PQclear(res);
            cg_log(CG_LOG_WARN, MOD, rid_of(pg), "connection lost query=%s error=\"%s\"", label,
                   line);
            drop_conn(pg);
            if (retry_ok) {
                cg_log(CG_LOG_INFO, MOD, rid_of(pg), "retrying a read on a new connection query=%s",
                       label);
                continue;
            }
            return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
        }
        rc = statement_failed(pg, label, res, err);
        PQclear(res);
        return rc;
    }
}

/* ------------------------------------------------------------------ lifecycle --- */

struct cg_pg *cg_pg_new(const char *dsn, int connect_timeout_ms, int statement_timeout_ms)
{
    struct cg_pg *pg = calloc(1, sizeof *pg);
    if (pg == NULL)
        return NULL;
    pg->dsn = strdup(dsn ? dsn : "");
    if (pg->dsn == NULL) {
        free(pg);
        return NULL;
    }
    pg->connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 1;
    pg->statement_timeout_ms = statement_timeout_ms > 0 ? statement_timeout_ms : 1;
    pg->session_timeout_ms = -1;
    return pg;
}

void cg_pg_free(struct cg_pg *pg)
{
    if (pg == NULL)
        return;
    drop_conn(pg);
    free(pg->dsn);
    free(pg);
}

void cg_pg_set_deadline(struct cg_pg *pg, int64_t deadline_mono_ms)
{
    pg->deadline_mono_ms = deadline_mono_ms;
}

void cg_pg_set_request_id(struct cg_pg *pg, const char *rid)
{
    copy_str(pg->rid, sizeof pg->rid, rid ? rid : "");
}

cg_status cg_pg_ping(struct cg_pg *pg, struct cg_err *err)
{
    PGresult *res = NULL;
    cg_status rc = run(pg, "ping", "SELECT 1", 0, NULL, NULL, NULL, RUN_READ, &res, err);
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ migrations --- */

static bool version_recorded(PGresult *res, int version)
{
    for (int i = 0; i < PQntuples(res); i++) {
        if (parse_i64(PQgetvalue(res, i, 0)) == version)
            return true;
    }
    return false;
}

/* Applies one migration and records it, in one transaction. */
static cg_status apply_migration(struct cg_pg *pg, const struct cg_migration *m, struct cg_err *err)
{
    PGresult *res = NULL;
    char version_text[16];
    snprintf(version_text, sizeof version_text, "%d", m->version);
    const char *values[] = {version_text, m->name};

    cg_status rc = run(pg, "migrate_begin", "BEGIN", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        return rc;
    rc = run(pg, m->name, m->sql, 0, NULL, NULL, NULL, RUN_PINNED | RUN_SIMPLE, &res, err);
    PQclear(res);
    if (rc == CG_OK) {
        rc = run(pg, "migrate_record",
                 "INSERT INTO schema_migrations (version, name) VALUES ($1::int, $2::text)", 2,
                 values, NULL, NULL, RUN_PINNED, &res, err);
        PQclear(res);
    }
    if (rc == CG_OK) {
        rc = run(pg, "migrate_commit", "COMMIT", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
        PQclear(res);
    }
    if (rc != CG_OK && pg->conn != NULL) {
        struct cg_err ignored;
        cg_status rollback = run(pg, "migrate_rollback", "ROLLBACK", 0, NULL, NULL, NULL,
                                 RUN_PINNED, &res, &ignored);
        PQclear(res);
        if (rollback != CG_OK)
            drop_conn(pg);
        /* A rolled-back transaction also undoes a SET made inside it. */
        pg->session_timeout_ms = -1;
    }
    return rc;
}

cg_status cg_pg_migrate(struct cg_pg *pg, const struct cg_migration *migrations, int *applied,
                        struct cg_err *err)
{
    int applied_here = 0;
    PGresult *res = NULL;
    PGresult *versions = NULL;
    const char *lock_values[] = {MIGRATION_LOCK_KEY};
    /* Migrations may legitimately run long (index builds): no statement timeout but the
     * deadline, if the caller set one. */
    int configured = pg->statement_timeout_ms;
    pg->statement_timeout_ms = 0;

    cg_status rc = run(pg, "migrate_lock", "SELECT pg_advisory_lock($1::int8)", 1, lock_values,
                       NULL, NULL, 0, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        goto out;

    rc = run(pg, "migrate_table",
             "CREATE TABLE IF NOT EXISTS schema_migrations ("
             " version int PRIMARY KEY,"
             " name text NOT NULL,"
             " applied_at timestamptz NOT NULL DEFAULT now())",
             0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        goto unlock;
    rc = run(pg, "migrate_versions", "SELECT version FROM schema_migrations ORDER BY version", 0,
             NULL, NULL, NULL, RUN_PINNED, &versions, err);
    if (rc != CG_OK)
        goto unlock;

    int newest_known = 0;
    for (const struct cg_migration *m = migrations; m->sql != NULL; m++) {
        newest_known = m->version;
        if (version_recorded(versions, m->version))
            continue;
        rc = apply_migration(pg, m, err);
        if (rc != CG_OK) {
            cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "migration %04d_%s failed", m->version, m->name);
            if (rc == CG_INTERNAL)
                cg_err_set(err, CG_INTERNAL, "migration %04d_%s failed", m->version, m->name);
            goto unlock;
        }
        applied_here++;
        cg_log(CG_LOG_INFO, MOD, rid_of(pg), "applied migration %04d_%s", m->version, m->name);
    }
    int rows = PQntuples(versions);
    if (rows > 0 && parse_i64(PQgetvalue(versions, rows - 1, 0)) > newest_known)
        cg_log(CG_LOG_WARN, MOD, rid_of(pg),
               "the database has migrations newer than this binary knows (newest known %04d)",
               newest_known);

unlock:
    if (pg->conn != NULL) {
        struct cg_err unlock_err;
        cg_status unlocked = run(pg, "migrate_unlock", "SELECT pg_advisory_unlock($1::int8)", 1,
                                 lock_values, NULL, NULL, RUN_PINNED, &res, &unlock_err);
        PQclear(res);
        /* Closing the session releases the lock when the unlock itself failed. */
        if (unlocked != CG_OK)
            drop_conn(pg);
    }
out:
    PQclear(versions);
    pg->statement_timeout_ms = configured;
    if (applied != NULL)
        *applied = applied_here;
    return rc;
}

/* ------------------------------------------------------------------ tenants --- */

#define TENANT_COLUMNS                                                                             \
    "tenant_id::text, name, time_zone, floor(extract(epoch FROM created_at) * 1000)::int8"

static void read_tenant(PGresult *res, int row, struct cg_tenant *out)
{
    copy_str(out->tenant_id, sizeof out->tenant_id, PQgetvalue(res, row, 0));
    copy_str(out->name, sizeof out->name, PQgetvalue(res, row, 1));
    copy_str(out->time_zone, sizeof out->time_zone, PQgetvalue(res, row, 2));
    out->created_at_ms = parse_i64(PQgetvalue(res, row, 3));
}

cg_status cg_pg_tenant_create(struct cg_pg *pg, const char *name, const char *time_zone,
                              struct cg_tenant *out, struct cg_err *err)
{
    /* The time zone must be one PostgreSQL lists by name: abbreviations and POSIX offsets
     * that AT TIME ZONE would also take are not what calendar-aligned resets need. */
    const char *values[] = {name, time_zone};
    PGresult *res = NULL;
    cg_status rc = run(pg, "tenant_create",
                       "INSERT INTO tenants (name, time_zone)"
                       " SELECT $1::text, $2::text"
                       " WHERE EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $2::text)"
                       " RETURNING " TENANT_COLUMNS,
                       2, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "name or time_zone: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_INVALID_ARGUMENT,
                        "time_zone: not a time zone name PostgreSQL knows (IANA, e.g. "
                        "Europe/Paris)");
        goto out;
    }
    read_tenant(res, 0, out);
out:
    PQclear(res);
    return rc;
}

/* run() for a statement that names one row by its key: an id PostgreSQL cannot even
 * parse (22P02) and no row at all are both CG_NOT_FOUND with `missing` as the message.
 * On CG_OK, *out holds exactly one row. */
static cg_status run_one(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                         const char *const *values, int flags, const char *missing, PGresult **out,
                         struct cg_err *err)
{
    cg_status rc = run(pg, label, sql, nparams, values, NULL, NULL, flags, out, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", missing);
        return rc;
    }
    if (PQntuples(*out) != 1)
        return cg_err_set(err, CG_NOT_FOUND, "%s", missing);
    return CG_OK;
}

cg_status cg_pg_tenant_get(struct cg_pg *pg, const char *tenant_id, struct cg_tenant *out,
                           struct cg_err *err)
{
    const char *values[] = {tenant_id};
    PGresult *res = NULL;
    cg_status rc = run_one(pg, "tenant_get",
                           "SELECT " TENANT_COLUMNS " FROM tenants WHERE tenant_id = $1::uuid", 1,
                           values, RUN_READ, "tenant_id: no such tenant", &res, err);
    if (rc == CG_OK)
        read_tenant(res, 0, out);
    PQclear(res);
    return rc;
}

cg_status cg_pg_tenant_list(struct cg_pg *pg, const char *after_id, int limit,
                            struct cg_tenant *out, int *count, bool *more, struct cg_err *err)
{
    /* One row more than asked tells whether another page exists. */
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    PGresult *res = NULL;
    cg_status rc;
    *count = 0;
    *more = false;
    if (after_id[0] == '\0') {
        const char *values[] = {limit_text};
        rc = run(pg, "tenant_list",
                 "SELECT " TENANT_COLUMNS " FROM tenants"
                 " ORDER BY created_at, tenant_id LIMIT $1::int",
                 1, values, NULL, NULL, RUN_READ, &res, err);
    } else {
        const char *values[] = {after_id, limit_text};
        rc = run(pg, "tenant_list_after",
                 "SELECT " TENANT_COLUMNS " FROM tenants t"
                 " WHERE (t.created_at, t.tenant_id) >"
                 "  (SELECT a.created_at, a.tenant_id FROM tenants a WHERE a.tenant_id = $1::uuid)"
                 " ORDER BY t.created_at, t.tenant_id LIMIT $2::int",
                 2, values, NULL, NULL, RUN_READ, &res, err);
    }
    if (rc != CG_OK)
        goto out;
    int rows = PQntuples(res);
    if (rows == 0 && after_id[0] != '\0') {
        /* An empty page after an id that names no tenant would silently end the listing. */
        struct cg_tenant anchor;
        rc = cg_pg_tenant_get(pg, after_id, &anchor, err);
        if (rc == CG_NOT_FOUND)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: no such tenant");
        goto out;
    }
    *more = rows > limit;
    *count = rows > limit ? limit : rows;
    for (int i = 0; i < *count; i++)
        read_tenant(res, i, &out[i]);
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ API keys --- */

#define KEY_COLUMNS                                                                                \
    "tenant_id::text, key_id, name, floor(extract(epoch FROM created_at) * 1000)::int8,"           \
    " coalesce(floor(extract(epoch FROM revoked_at) * 1000)::int8, 0)"

static void read_key(PGresult *res, int row, struct cg_api_key *out)
{
    copy_str(out->tenant_id, sizeof out->tenant_id, PQgetvalue(res, row, 0));
    copy_str(out->key_id, sizeof out->key_id, PQgetvalue(res, row, 1));
    copy_str(out->name, sizeof out->name, PQgetvalue(res, row, 2));
    out->created_at_ms = parse_i64(PQgetvalue(res, row, 3));
    out->revoked_at_ms = parse_i64(PQgetvalue(res, row, 4));
}

cg_status cg_pg_key_create(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           const uint8_t secret_hash[32], const char *name, struct cg_api_key *out,
                           struct cg_err *err)
{
    const char *values[] = {tenant_id, key_id, (const char *)secret_hash, name};
    const int lengths[] = {0, 0, 32, 0};
    const int formats[] = {0, 0, 1, 0}; /* the hash goes as binary bytea */
    PGresult *res = NULL;
    cg_status rc = run(pg, "key_create",
                       "INSERT INTO api_keys (tenant_id, key_id, secret_hash, name)"
                       " VALUES ($1::uuid, $2::text, $3::bytea, $4::text)"
                       " RETURNING " KEY_COLUMNS,
                       4, values, lengths, formats, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "23503") || sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
        else if (sqlstate_is(pg, "23505"))
            rc = cg_err_set(err, CG_ALREADY_EXISTS, "key_id: the tenant already has this key");
        else if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "key_id or name: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
    read_key(res, 0, out);
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_list(struct cg_pg *pg, const char *tenant_id, int limit, struct cg_api_key *out,
                         int *count, struct cg_err *err)
{
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenant_id, limit_text};
    PGresult *res = NULL;
    *count = 0;
    /* The outer row for the tenant tells "no such tenant" from "no keys" in one query; the
     * join stays within one tenant. */
    cg_status rc = run(pg, "key_list",
                       "SELECT k.tenant_id::text, k.key_id, k.name, k.created_ms, k.revoked_ms"
                       " FROM tenants t LEFT JOIN LATERAL ("
                       "  SELECT " KEY_COLUMNS ", created_at AS created"
                       "  FROM api_keys"
                       "  WHERE api_keys.tenant_id = t.tenant_id"
                       "  ORDER BY created_at DESC, key_id DESC LIMIT $2::int"
                       " ) AS k (tenant_id, key_id, name, created_ms, revoked_ms, created) ON true"
                       " WHERE t.tenant_id = $1::uuid"
                       " ORDER BY k.created DESC, k.key_id DESC",
                       2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
        goto out;
    }
    int rows = PQntuples(res);
    if (rows == 0) {
        rc = cg_err_set(err, CG_NOT_FOUND, "tenant_id: no such tenant");
        goto out;
    }
    for (int i = 0; i < rows && *count < limit; i++) {
        if (PQgetisnull(res, i, 1))
            continue; /* the tenant without keys */
        read_key(res, i, &out[(*count)++]);
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_revoke(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           struct cg_api_key *out, struct cg_err *err)
{
    const char *values[] = {tenant_id, key_id};
    PGresult *res = NULL;
    cg_status rc = run_one(pg, "key_revoke",
                           "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())"
                           " WHERE tenant_id = $1::uuid AND key_id = $2::text"
                           " RETURNING " KEY_COLUMNS,
                           2, values, 0, "key_id: no such key", &res, err);
    if (rc == CG_OK)
        read_key(res, 0, out);
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_lookup(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           struct cg_key_auth *out, struct cg_err *err)
{
    const char *values[] = {tenant_id, key_id};
    PGresult *res = NULL;
    cg_status rc = run_one(pg, "key_lookup",
                           "SELECT t.name, k.secret_hash, k.revoked_at IS NOT NULL"
                           " FROM api_keys k JOIN tenants t ON t.tenant_id = k.tenant_id"
                           " WHERE k.tenant_id = $1::uuid AND t.tenant_id = $1::uuid"
                           " AND k.key_id = $2::text",
                           2, values, RUN_READ, "key_id: no such key", &res, err);
    if (rc != CG_OK)
        goto out;
    if (!decode_bytea_hex(PQgetvalue(res, 0, 1), out->secret_hash, sizeof out->secret_hash)) {
        cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "key_lookup: secret_hash is not 32 bytes");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
    copy_str(out->tenant_name, sizeof out->tenant_name, PQgetvalue(res, 0, 0));
    out->revoked = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ transactions --- */

static cg_status not_in_tx(struct cg_pg *pg, const char *what, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "%s called outside a transaction", what);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

/* Ends the transaction's bookkeeping once the server has ended it (or the connection is
 * gone). A statement_timeout set inside a transaction that did not commit was undone. */
static void tx_over(struct cg_pg *pg, bool committed)
{
    if (pg->timeout_set_in_tx && !committed)
        pg->session_timeout_ms = -1;
    pg->in_tx = false;
    pg->timeout_set_in_tx = false;
}

void cg_pg_rollback(struct cg_pg *pg)
{
    if (!pg->in_tx)
        return;
    if (pg->conn != NULL && PQtransactionStatus(pg->conn) != PQTRANS_IDLE) {
        /* A rollback releases locks that others wait for, so it runs even past the
         * deadline; it is bounded by the statement timeout and the grace period. It does
         * not adjust the timeout first: in an aborted transaction that would fail. */
        int64_t deadline = pg->deadline_mono_ms;
        pg->deadline_mono_ms = 0;
        PGresult *res = NULL;
        struct cg_err ignored;
        cg_status rc =
            send_wait(pg, "rollback", "ROLLBACK", 0, NULL, NULL, NULL, 0, &res, &ignored);
        pg->deadline_mono_ms = deadline;
        if (rc == CG_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
            char line[512];
            one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
            cg_log(CG_LOG_WARN, MOD, rid_of(pg),
                   "rollback failed, closing the connection error=\"%s\"", line);
            drop_conn(pg);
        }
        PQclear(res);
    }
    tx_over(pg, false);
}

cg_status cg_pg_begin(struct cg_pg *pg, struct cg_err *err)
{
    if (pg->in_tx) {
        cg_log(CG_LOG_ERROR, MOD, rid_of(pg),
               "begin with a transaction still open; rolling that one back");
        cg_pg_rollback(pg);
    }
    PGresult *res = NULL;
    /* READ COMMITTED whatever the server's default: a row lock that had to wait then sees
     * the row as the other transaction committed it, which is what the counters need. */
    cg_status rc = run(pg, "begin", "BEGIN ISOLATION LEVEL READ COMMITTED", 0, NULL, NULL, NULL,
                       RUN_READ, &res, err);
    PQclear(res);
    if (rc == CG_OK) {
        pg->in_tx = true;
        pg->timeout_set_in_tx = false;
    } else if (pg->conn != NULL && PQtransactionStatus(pg->conn) != PQTRANS_IDLE) {
        /* BEGIN failed without leaving the connection idle: do not reuse it. */
        drop_conn(pg);
    }
    return rc;
}

cg_status cg_pg_commit(struct cg_pg *pg, struct cg_err *err)
{
    if (!pg->in_tx)
        return not_in_tx(pg, "commit", err);
    PGresult *res = NULL;
    cg_status rc = run(pg, "commit", "COMMIT", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    if (rc == CG_OK && strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        /* The server answers COMMIT in an aborted transaction with ROLLBACK, not an error. */
        cg_log(CG_LOG_ERROR, MOD, rid_of(pg),
               "commit of a transaction aborted by an earlier error: rolled back");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
    }
    PQclear(res);
    /* Still in the transaction only when COMMIT was never sent (the deadline had passed):
     * the caller's rollback ends it then. */
    if (pg->conn == NULL || PQtransactionStatus(pg->conn) == PQTRANS_IDLE)
        tx_over(pg, rc == CG_OK);
    return rc;
}

/* ------------------------------------------------------------------ scopes --- */

/* The columns read_scope() expects, in order. */
#define SCOPE_COLUMNS                                                                              \
    "session_id, task_id, agent_id, level, has_budget, mode, limit_tokens, limit_cost_micros,"     \
    " warning_ratio, backpressure_disabled, array_to_string(tier_ratio, ','),"                     \
    " array_to_string(tier_delay_ms, ','), on_store_failure, local_allowance_tokens,"              \
    " reset_period, reservation_ttl_ms, description, used_tokens, reserved_tokens,"                \
    " used_cost_micros, reserved_cost_micros, version,"                                            \
    " floor(extract(epoch FROM created_at) * 1000)::int8,"                                         \
    " floor(extract(epoch FROM updated_at) * 1000)::int8,"                                         \
    " coalesce(floor(extract(epoch FROM closed_at) * 1000)::int8, 0), updated_by_key_id"

/* The rows of a path, tenant first: ('', '', ''), (s, '', ''), (s, t, ''), (s, t, a). For
 * shorter paths the tuples repeat, which selects nothing more. Each tuple is a primary key
 * lookup. */
#define PATH_WHERE                                                                                 \
    " WHERE tenant_id = $1::uuid AND (session_id, task_id, agent_id) IN (('', '', ''),"            \
    " ($2::text, '', ''), ($2::text, $3::text, ''), ($2::text, $3::text, $4::text))"

static const char *const no_such_scope[] = {
    "tenant_id: no such tenant",
    "scope.session_id: no such session",
    "scope.task_id: no such task",
    "scope.agent_id: no such agent",
};

/* 1 tenant .. 4 agent: the level of the scope ids name. */
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

static double parse_double(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    return end == s ? 0 : v;
}

static bool is_true(const char *s)
{
    return s[0] == 't';
}

/* Parses the comma-separated tier columns (float8 output is exact: the shortest text that
 * reads back as the same double). */
static bool parse_tiers(const char *ratios, const char *delays, struct cg_budget_row *out)
{
    int n = 0;
    while (*ratios != '\0' || *delays != '\0') {
        if (n == CG_TIERS_STORE_MAX)
            return false;
        char *end = NULL;
        double ratio = strtod(ratios, &end);
        if (end == ratios || (*end != ',' && *end != '\0'))
            return false;
        ratios = *end == ',' ? end + 1 : end;
        errno = 0;
        long long delay = strtoll(delays, &end, 10);
        if (errno != 0 || end == delays || (*end != ',' && *end != '\0') || delay < 0 ||
            delay > UINT32_MAX)
            return false;
        delays = *end == ',' ? end + 1 : end;
        out->tier_ratio[n] = ratio;
        out->tier_delay_ms[n] = (uint32_t)delay;
        n++;
    }
    out->ntiers = n;
    return true;
}

static bool read_scope(PGresult *res, int row, struct cg_budget_row *out)
{
    memset(out, 0, sizeof *out);
    copy_str(out->ids.session_id, sizeof out->ids.session_id, PQgetvalue(res, row, 0));
    copy_str(out->ids.task_id, sizeof out->ids.task_id, PQgetvalue(res, row, 1));
    copy_str(out->ids.agent_id, sizeof out->ids.agent_id, PQgetvalue(res, row, 2));
    out->level = (int)parse_i64(PQgetvalue(res, row, 3));
    out->has_budget = is_true(PQgetvalue(res, row, 4));
    out->mode = (int)parse_i64(PQgetvalue(res, row, 5));
    out->limit_tokens = parse_i64(PQgetvalue(res, row, 6));
    out->limit_cost_micros = parse_i64(PQgetvalue(res, row, 7));
    out->warning_ratio = parse_double(PQgetvalue(res, row, 8));
    out->backpressure_disabled = is_true(PQgetvalue(res, row, 9));
    bool tiers_ok = parse_tiers(PQgetvalue(res, row, 10), PQgetvalue(res, row, 11), out);
    out->on_store_failure = (int)parse_i64(PQgetvalue(res, row, 12));
    out->local_allowance_tokens = parse_i64(PQgetvalue(res, row, 13));
    out->reset_period = (int)parse_i64(PQgetvalue(res, row, 14));
    out->reservation_ttl_ms = (uint32_t)parse_i64(PQgetvalue(res, row, 15));
    copy_str(out->description, sizeof out->description, PQgetvalue(res, row, 16));
    out->used_tokens = parse_i64(PQgetvalue(res, row, 17));
    out->reserved_tokens = parse_i64(PQgetvalue(res, row, 18));
    out->used_cost_micros = parse_i64(PQgetvalue(res, row, 19));
    out->reserved_cost_micros = parse_i64(PQgetvalue(res, row, 20));
    out->version = parse_i64(PQgetvalue(res, row, 21));
    out->created_at_ms = parse_i64(PQgetvalue(res, row, 22));
    out->updated_at_ms = parse_i64(PQgetvalue(res, row, 23));
    out->closed_at_ms = parse_i64(PQgetvalue(res, row, 24));
    copy_str(out->updated_by_key_id, sizeof out->updated_by_key_id, PQgetvalue(res, row, 25));
    return tiers_ok && out->level >= 1 && out->level <= 4;
}

static cg_status bad_row(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "%s: a stored row does not parse", label);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

/* Reads the rows of the path into found[level - 1]; *present gets a bit per level found. */
static cg_status select_path(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool lock,
                             struct cg_budget_row found[4], unsigned *present, struct cg_err *err)
{
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    /* LockRows runs above the sort, so the rows are locked in level order: every
     * transaction takes the tenant first, then the session, task and agent, and two of
     * them can wait for each other but never deadlock. */
    const char *sql = lock ? "SELECT " SCOPE_COLUMNS " FROM scopes" PATH_WHERE
                             " ORDER BY level FOR NO KEY UPDATE"
                           : "SELECT " SCOPE_COLUMNS " FROM scopes" PATH_WHERE " ORDER BY level";
    const char *label = lock ? "path_lock" : "path_read";
    PGresult *res = NULL;
    *present = 0;
    cg_status rc = run(pg, label, sql, 4, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[0]);
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_budget_row row;
        if (!read_scope(res, i, &row)) {
            rc = bad_row(pg, label, err);
            goto out;
        }
        found[row.level - 1] = row;
        *present |= 1u << (row.level - 1);
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_path_read(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          bool lock, bool allow_missing_last, struct cg_budget_row out[4], int *n,
                          struct cg_err *err)
{
    *n = 0;
    if (!pg->in_tx)
        return not_in_tx(pg, "path_read", err);
    unsigned present = 0;
    cg_status rc = select_path(pg, tenant_id, ids, lock, out, &present, err);
    if (rc != CG_OK)
        return rc;
    if (!(present & 1u)) {
        /* The tenant's row is made on first use. Inserting it only when the read missed
         * it keeps the usual path to one statement; a concurrent insert of the same row
         * makes this one wait for it and then do nothing. No row below it can exist
         * (scopes_parent), so the read locked nothing that would now be held out of
         * order while this waits. */
        if (present != 0) {
            cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "path_read: scopes below a missing tenant row");
            return cg_err_set(err, CG_INTERNAL, "storage error");
        }
        const char *values[] = {tenant_id};
        PGresult *res = NULL;
        rc = run(pg, "tenant_scope_create",
                 "INSERT INTO scopes (tenant_id, session_id, task_id, agent_id, level)"
                 " VALUES ($1::uuid, '', '', '', 1) ON CONFLICT DO NOTHING",
                 1, values, NULL, NULL, 0, &res, err);
        PQclear(res);
        if (rc != CG_OK) {
            if (sqlstate_is(pg, "23503"))
                rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[0]);
            return rc;
        }
        rc = select_path(pg, tenant_id, ids, lock, out, &present, err);
        if (rc != CG_OK)
            return rc;
        if (!(present & 1u)) {
            cg_log(CG_LOG_ERROR, MOD, rid_of(pg), "path_read: the tenant row is still missing");
            return cg_err_set(err, CG_INTERNAL, "storage error");
        }
    }
    int depth = scope_depth(ids);
    for (int level = 2; level <= depth; level++) {
        if (present & (1u << (level - 1)))
            continue;
        if (level == depth && allow_missing_last) {
            *n = depth - 1;
            return CG_OK;
        }
        return cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[level - 1]);
    }
    *n = depth;
    return CG_OK;
}

/* "{r1,r2,...}" and "{d1,d2,...}": array literals made from numbers only. */
static void format_tiers(const struct cg_budget_row *row, char *ratios, size_t ratios_cap,
                         char *delays, size_t delays_cap)
{
    size_t r = 0, d = 0;
    ratios[r++] = '{';
    delays[d++] = '{';
    for (int i = 0; i < row->ntiers && i < CG_TIERS_STORE_MAX; i++) {
        const char *sep = i > 0 ? "," : "";
        r += (size_t)snprintf(ratios + r, ratios_cap - r, "%s%.17g", sep, row->tier_ratio[i]);
        d += (size_t)snprintf(delays + d, delays_cap - d, "%s%u", sep,
                              (unsigned)row->tier_delay_ms[i]);
    }
    snprintf(ratios + r, ratios_cap - r, "}");
    snprintf(delays + d, delays_cap - d, "}");
}

/* After an upsert that stored nothing: tells a version mismatch from a missing parent. */
static cg_status explain_put_refusal(struct cg_pg *pg, const char *tenant_id,
                                     const struct cg_budget_row *row, int64_t expected_version,
                                     struct cg_err *err)
{
    const char *values[] = {tenant_id, row->ids.session_id, row->ids.task_id, row->ids.agent_id};
    PGresult *res = NULL;
    cg_status rc =
        run(pg, "budget_put_check",
            "SELECT (SELECT version FROM scopes WHERE tenant_id = $1::uuid"
            "  AND session_id = $2::text AND task_id = $3::text AND agent_id = $4::text),"
            " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
            "  AND session_id = $2::text AND task_id = '' AND agent_id = ''),"
            " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
            "  AND session_id = $2::text AND task_id = $3::text AND agent_id = '')",
            4, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    bool exists = !PQgetisnull(res, 0, 0);
    int64_t stored = exists ? parse_i64(PQgetvalue(res, 0, 0)) : 0;
    if (exists && expected_version > 0 && stored != expected_version) {
        rc = cg_err_set(err, CG_ABORTED,
                        "expected_version %lld does not match the stored version %lld",
                        (long long)expected_version, (long long)stored);
    } else if (row->level >= 3 && !is_true(PQgetvalue(res, 0, 1))) {
        rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[1]);
    } else if (row->level == 4 && !is_true(PQgetvalue(res, 0, 2))) {
        rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[2]);
    } else if (!exists && expected_version > 0) {
        rc = cg_err_set(err, CG_ABORTED,
                        "expected_version %lld does not match the stored version 0 (no budget)",
                        (long long)expected_version);
    } else {
        cg_log(CG_LOG_WARN, MOD, rid_of(pg), "budget_put stored nothing for no visible reason");
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_budget_put(struct cg_pg *pg, const char *tenant_id, const struct cg_budget_row *row,
                           int64_t expected_version, const char *key_id, struct cg_budget_row *out,
                           bool *created, struct cg_err *err)
{
    *created = false;
    if (!pg->in_tx)
        return not_in_tx(pg, "budget_put", err);
    char level[8], mode[8], limit[24], cost[24], warning[32], ratios[256], delays[128];
    char on_failure[8], allowance[24], reset[8], ttl[16], expected[24];
    snprintf(level, sizeof level, "%d", row->level);
    snprintf(mode, sizeof mode, "%d", row->mode);
    snprintf(limit, sizeof limit, "%lld", (long long)row->limit_tokens);
    snprintf(cost, sizeof cost, "%lld", (long long)row->limit_cost_micros);
    snprintf(warning, sizeof warning, "%.17g", row->warning_ratio);
    format_tiers(row, ratios, sizeof ratios, delays, sizeof delays);
    snprintf(on_failure, sizeof on_failure, "%d", row->on_store_failure);
    snprintf(allowance, sizeof allowance, "%lld", (long long)row->local_allowance_tokens);
    snprintf(reset, sizeof reset, "%d", row->reset_period);
    snprintf(ttl, sizeof ttl, "%u", (unsigned)row->reservation_ttl_ms);
    snprintf(expected, sizeof expected, "%lld", (long long)expected_version);
    /* The parent of a task is its session's row, of an agent its task's. */
    const char *parent_session = row->level >= 3 ? row->ids.session_id : "";
    const char *parent_task = row->level == 4 ? row->ids.task_id : "";
    const char *values[] = {tenant_id,
                            row->ids.session_id,
                            row->ids.task_id,
                            row->ids.agent_id,
                            level,
                            row->has_budget ? "t" : "f",
                            mode,
                            limit,
                            cost,
                            warning,
                            row->backpressure_disabled ? "t" : "f",
                            ratios,
                            delays,
                            on_failure,
                            allowance,
                            reset,
                            ttl,
                            row->description,
                            key_id ? key_id : "",
                            parent_session,
                            parent_task,
                            expected};
    /* One statement: the SELECT's WHERE refuses a missing parent, and a missing row when a
     * version is expected (no insert is even tried); the DO UPDATE's WHERE refuses a
     * stored version other than the expected one. Either way no row comes back and
     * explain_put_refusal() says which. A session's parent, the tenant's row, is made
     * here when missing (scopes_parent requires it; the foreign key check at the end of
     * the statement sees it). */
    PGresult *res = NULL;
    cg_status rc = run(
        pg, "budget_put",
        "WITH tenant_scope AS (INSERT INTO scopes (tenant_id, session_id, task_id, agent_id, level)"
        "  SELECT $1::uuid, '', '', '', 1 WHERE $5::int2 >= 2 ON CONFLICT DO NOTHING)"
        " INSERT INTO scopes AS s (tenant_id, session_id, task_id, agent_id, level, has_budget,"
        " mode, limit_tokens, limit_cost_micros, warning_ratio, backpressure_disabled,"
        " tier_ratio, tier_delay_ms, on_store_failure, local_allowance_tokens, reset_period,"
        " reservation_ttl_ms, description, version, updated_by_key_id)"
        " SELECT $1::uuid, $2::text, $3::text, $4::text, $5::int2, $6::boolean, $7::int2,"
        "  $8::int8, $9::int8, $10::float8, $11::boolean, $12::float8[], $13::int4[], $14::int2,"
        "  $15::int8, $16::int2, $17::int4, $18::text, 1, $19::text"
        " WHERE ($5::int2 <= 2 OR EXISTS (SELECT 1 FROM scopes p WHERE p.tenant_id = $1::uuid"
        "   AND p.session_id = $20::text AND p.task_id = $21::text AND p.agent_id = ''))"
        "  AND ($22::int8 = 0 OR EXISTS (SELECT 1 FROM scopes c WHERE c.tenant_id = $1::uuid"
        "   AND c.session_id = $2::text AND c.task_id = $3::text AND c.agent_id = $4::text))"
        " ON CONFLICT (tenant_id, session_id, task_id, agent_id) DO UPDATE SET"
        "  has_budget = excluded.has_budget, mode = excluded.mode,"
        "  limit_tokens = excluded.limit_tokens, limit_cost_micros = excluded.limit_cost_micros,"
        "  warning_ratio = excluded.warning_ratio,"
        "  backpressure_disabled = excluded.backpressure_disabled,"
        "  tier_ratio = excluded.tier_ratio, tier_delay_ms = excluded.tier_delay_ms,"
        "  on_store_failure = excluded.on_store_failure,"
        "  local_allowance_tokens = excluded.local_allowance_tokens,"
        "  reset_period = excluded.reset_period,"
        "  reservation_ttl_ms = excluded.reservation_ttl_ms,"
        "  description = excluded.description, version = s.version + 1, updated_at = now(),"
        /* A row that existed only to count usage (the tenant's) gets its budget now. */
        "  created_at = CASE WHEN s.version = 0 THEN now() ELSE s.created_at END,"
        "  updated_by_key_id = excluded.updated_by_key_id"
        " WHERE $22::int8 = 0 OR s.version = $22::int8"
        " RETURNING " SCOPE_COLUMNS,
        22, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        /* scopes_parent only fires for a parent made missing meanwhile (the WHERE checks
         * first); the tenants foreign key for a tenant that does not exist. */
        if (sqlstate_is(pg, "23503") && strcmp(pg->constraint, "scopes_parent") == 0)
            rc = cg_err_set(err, CG_NOT_FOUND, "%s",
                            no_such_scope[row->level >= 2 ? row->level - 2 : 0]);
        else if (sqlstate_is(pg, "23503") || sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[0]);
        else if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "settings: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        rc = explain_put_refusal(pg, tenant_id, row, expected_version, err);
        goto out;
    }
    if (!read_scope(res, 0, out)) {
        rc = bad_row(pg, "budget_put", err);
        goto out;
    }
    *created = out->version == 1;
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_path_add(struct cg_pg *pg, const char *tenant_id, struct cg_budget_row *rows, int n,
                         int64_t used_tokens, int64_t reserved_tokens, int64_t used_cost_micros,
                         int64_t reserved_cost_micros, struct cg_err *err)
{
    if (!pg->in_tx)
        return not_in_tx(pg, "path_add", err);
    if (used_tokens == 0 && reserved_tokens == 0 && used_cost_micros == 0 &&
        reserved_cost_micros == 0)
        return CG_OK;
    const struct cg_scope_ids *ids = &rows[n - 1].ids;
    char deltas[4][24];
    snprintf(deltas[0], sizeof deltas[0], "%lld", (long long)used_tokens);
    snprintf(deltas[1], sizeof deltas[1], "%lld", (long long)reserved_tokens);
    snprintf(deltas[2], sizeof deltas[2], "%lld", (long long)used_cost_micros);
    snprintf(deltas[3], sizeof deltas[3], "%lld", (long long)reserved_cost_micros);
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id,
                            deltas[0], deltas[1],       deltas[2],    deltas[3]};
    /* The rows are already locked (cg_pg_path_read), so the order in which this UPDATE
     * visits them cannot deadlock. A negative delta larger than the counter (a release
     * after a reset, say) stops at 0. */
    PGresult *res = NULL;
    cg_status rc =
        run(pg, "path_add",
            "UPDATE scopes SET"
            " used_tokens = greatest(0, used_tokens + $5::int8),"
            " reserved_tokens = greatest(0, reserved_tokens + $6::int8),"
            " used_cost_micros = greatest(0, used_cost_micros + $7::int8),"
            " reserved_cost_micros = greatest(0, reserved_cost_micros + $8::int8)" PATH_WHERE
            " RETURNING " SCOPE_COLUMNS,
            8, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "22003"))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "tokens: a counter would leave its range");
        else if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[0]);
        goto out;
    }
    struct cg_budget_row updated[4];
    unsigned present = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_budget_row row;
        if (!read_scope(res, i, &row) || row.level > n) {
            rc = bad_row(pg, "path_add", err);
            goto out;
        }
        updated[row.level - 1] = row;
        present |= 1u << (row.level - 1);
    }
    for (int level = 1; level <= n; level++) {
        if (!(present & (1u << (level - 1)))) {
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[level - 1]);
            goto out;
        }
    }
    memcpy(rows, updated, (size_t)n * sizeof *rows);
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ reservations --- */

/* The columns read_reservation() expects. An ACTIVE reservation past its expiry reads as
 * EXPIRED (4) until somebody settles it. */
#define RESERVATION_COLUMNS                                                                        \
    "reservation_id::text, session_id, task_id, agent_id, tokens, cost_micros, model,"             \
    " estimate_id, CASE WHEN state = 1 AND expires_at <= now() THEN 4 ELSE state END,"             \
    " floor(extract(epoch FROM created_at) * 1000)::int8,"                                         \
    " floor(extract(epoch FROM expires_at) * 1000)::int8,"                                         \
    " coalesce(floor(extract(epoch FROM settled_at) * 1000)::int8, 0),"                            \
    " committed_input_tokens, committed_output_tokens, committed_cache_read_tokens,"               \
    " committed_cache_write_tokens, committed_cost_micros"

static void read_reservation(PGresult *res, int row, struct cg_reservation *out)
{
    memset(out, 0, sizeof *out);
    copy_str(out->reservation_id, sizeof out->reservation_id, PQgetvalue(res, row, 0));
    copy_str(out->ids.session_id, sizeof out->ids.session_id, PQgetvalue(res, row, 1));
    copy_str(out->ids.task_id, sizeof out->ids.task_id, PQgetvalue(res, row, 2));
    copy_str(out->ids.agent_id, sizeof out->ids.agent_id, PQgetvalue(res, row, 3));
    out->tokens = parse_i64(PQgetvalue(res, row, 4));
    out->cost_micros = parse_i64(PQgetvalue(res, row, 5));
    copy_str(out->model, sizeof out->model, PQgetvalue(res, row, 6));
    copy_str(out->estimate_id, sizeof out->estimate_id, PQgetvalue(res, row, 7));
    out->state = (int)parse_i64(PQgetvalue(res, row, 8));
    out->created_at_ms = parse_i64(PQgetvalue(res, row, 9));
    out->expires_at_ms = parse_i64(PQgetvalue(res, row, 10));
    out->settled_at_ms = parse_i64(PQgetvalue(res, row, 11));
    out->committed.input_tokens = parse_i64(PQgetvalue(res, row, 12));
    out->committed.output_tokens = parse_i64(PQgetvalue(res, row, 13));
    out->committed.cache_read_tokens = parse_i64(PQgetvalue(res, row, 14));
    out->committed.cache_write_tokens = parse_i64(PQgetvalue(res, row, 15));
    out->committed.cost_micros = parse_i64(PQgetvalue(res, row, 16));
}

cg_status cg_pg_reservation_insert(struct cg_pg *pg, const char *tenant_id,
                                   const struct cg_scope_ids *ids, int64_t tokens,
                                   int64_t cost_micros, const char *model, const char *estimate_id,
                                   const char *idempotency_key, uint32_t ttl_ms,
                                   struct cg_reservation *out, struct cg_err *err)
{
    if (!pg->in_tx)
        return not_in_tx(pg, "reservation_insert", err);
    char tokens_text[24], cost_text[24], ttl_text[16];
    snprintf(tokens_text, sizeof tokens_text, "%lld", (long long)tokens);
    snprintf(cost_text, sizeof cost_text, "%lld", (long long)cost_micros);
    snprintf(ttl_text, sizeof ttl_text, "%u", (unsigned)ttl_ms);
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id,   tokens_text,
                            cost_text, model,           estimate_id,  idempotency_key, ttl_text};
    /* A key used before makes this insert do nothing (after waiting for a concurrent
     * transaction that holds the same key, if any); the earlier reservation is read next.
     * A unique violation would abort the caller's transaction instead. */
    PGresult *res = NULL;
    cg_status rc = run(pg, "reservation_insert",
                       "INSERT INTO reservations (tenant_id, session_id, task_id, agent_id, tokens,"
                       " cost_micros, model, estimate_id, idempotency_key, expires_at)"
                       " VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int8, $6::int8,"
                       " $7::text, $8::text, NULLIF($9::text, ''),"
                       " now() + $10::int8 * interval '1 millisecond')"
                       " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
                       " RETURNING " RESERVATION_COLUMNS,
                       10, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "23503") || sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[scope_depth(ids) - 1]);
        else if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "reservation: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1) {
        read_reservation(res, 0, out);
        goto out;
    }
    PQclear(res);
    res = NULL;
    const char *key_values[] = {tenant_id, idempotency_key};
    rc = run(pg, "reservation_replay",
             "SELECT " RESERVATION_COLUMNS " FROM reservations"
             " WHERE tenant_id = $1::uuid AND idempotency_key = $2::text",
             2, key_values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) != 1) {
        /* Only a key released between the two statements gets here: not possible while
         * rows are never deleted, but not worth a crash. */
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
        goto out;
    }
    read_reservation(res, 0, out);
    out->replayed = true;
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_reservation_lock(struct cg_pg *pg, const char *tenant_id,
                                 const char *reservation_id, struct cg_reservation *out,
                                 struct cg_err *err)
{
    if (!pg->in_tx)
        return not_in_tx(pg, "reservation_lock", err);
    const char *values[] = {tenant_id, reservation_id};
    PGresult *res = NULL;
    cg_status rc = run_one(pg, "reservation_lock",
                           "SELECT " RESERVATION_COLUMNS " FROM reservations"
                           " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid"
                           " FOR NO KEY UPDATE",
                           2, values, 0, "reservation_id: no such reservation", &res, err);
    if (rc == CG_OK)
        read_reservation(res, 0, out);
    PQclear(res);
    return rc;
}

static const char *state_name(int state)
{
    switch (state) {
    case 1:
        return "active";
    case 2:
        return "committed";
    case 3:
        return "released";
    case 4:
        return "expired";
    default:
        return "settled";
    }
}

cg_status cg_pg_reservation_settle(struct cg_pg *pg, const char *tenant_id,
                                   const char *reservation_id, int state,
                                   const struct cg_usage *usage, struct cg_err *err)
{
    if (!pg->in_tx)
        return not_in_tx(pg, "reservation_settle", err);
    static const struct cg_usage none;
    if (usage == NULL)
        usage = &none;
    char state_text[8], amounts[5][24];
    snprintf(state_text, sizeof state_text, "%d", state);
    snprintf(amounts[0], sizeof amounts[0], "%lld", (long long)usage->input_tokens);
    snprintf(amounts[1], sizeof amounts[1], "%lld", (long long)usage->output_tokens);
    snprintf(amounts[2], sizeof amounts[2], "%lld", (long long)usage->cache_read_tokens);
    snprintf(amounts[3], sizeof amounts[3], "%lld", (long long)usage->cache_write_tokens);
    snprintf(amounts[4], sizeof amounts[4], "%lld", (long long)usage->cost_micros);
    const char *values[] = {tenant_id,  reservation_id, state_text, amounts[0],
                            amounts[1], amounts[2],     amounts[3], amounts[4]};
    /* Only an ACTIVE reservation moves: settling twice would return its tokens twice. */
    PGresult *res = NULL;
    cg_status rc = run(pg, "reservation_settle",
                       "UPDATE reservations SET state = $3::int2, settled_at = now(),"
                       " committed_input_tokens = $4::int8, committed_output_tokens = $5::int8,"
                       " committed_cache_read_tokens = $6::int8,"
                       " committed_cache_write_tokens = $7::int8, committed_cost_micros = $8::int8"
                       " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid AND state = 1"
                       " RETURNING 1",
                       8, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "reservation_id: no such reservation");
        else if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "usage: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1)
        goto out;
    PQclear(res);
    res = NULL;
    rc = run_one(pg, "reservation_state",
                 "SELECT state FROM reservations"
                 " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid",
                 2, values, 0, "reservation_id: no such reservation", &res, err);
    if (rc == CG_OK)
        rc = cg_err_set(err, CG_FAILED_PRECONDITION, "reservation_id: already %s",
                        state_name((int)parse_i64(PQgetvalue(res, 0, 0))));
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ ledger --- */

cg_status cg_pg_ledger_append(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, const struct cg_usage *usage,
                              const char *model, const char *idempotency_key,
                              const char *reservation_id, char *entry_id, struct cg_usage *previous,
                              char *previous_model, struct cg_err *err)
{
    entry_id[0] = '\0';
    if (!pg->in_tx)
        return not_in_tx(pg, "ledger_append", err);
    char amounts[5][24];
    snprintf(amounts[0], sizeof amounts[0], "%lld", (long long)usage->input_tokens);
    snprintf(amounts[1], sizeof amounts[1], "%lld", (long long)usage->output_tokens);
    snprintf(amounts[2], sizeof amounts[2], "%lld", (long long)usage->cache_read_tokens);
    snprintf(amounts[3], sizeof amounts[3], "%lld", (long long)usage->cache_write_tokens);
    snprintf(amounts[4], sizeof amounts[4], "%lld", (long long)usage->cost_micros);
    const char *values[] = {tenant_id,  ids->session_id, ids->task_id,    ids->agent_id,
                            amounts[0], amounts[1],      amounts[2],      amounts[3],
                            amounts[4], model,           idempotency_key, reservation_id};
    /* ON CONFLICT DO NOTHING rather than a unique violation, which would abort the
     * caller's transaction: a repeated key is an answer (the first entry), not a failure. */
    PGresult *res = NULL;
    cg_status rc = run(pg, "ledger_append",
                       "INSERT INTO ledger (tenant_id, session_id, task_id, agent_id, input_tokens,"
                       " output_tokens, cache_read_tokens, cache_write_tokens, cost_micros, model,"
                       " idempotency_key, reservation_id)"
                       " VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int8, $6::int8,"
                       " $7::int8, $8::int8, $9::int8, $10::text, NULLIF($11::text, ''),"
                       " NULLIF($12::text, '')::uuid)"
                       " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
                       " RETURNING entry_id::text",
                       12, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (sqlstate_is(pg, "23505") && strcmp(pg->constraint, "ledger_reservation") == 0)
            rc = cg_err_set(err, CG_FAILED_PRECONDITION,
                            "reservation_id: its usage is already in the ledger");
        else if (sqlstate_is(pg, "23503") &&
                 strcmp(pg->constraint, "ledger_reservation_exists") == 0)
            rc = cg_err_set(err, CG_NOT_FOUND, "reservation_id: no such reservation");
        else if (sqlstate_is(pg, "23503"))
            rc = cg_err_set(err, CG_NOT_FOUND, "%s", no_such_scope[scope_depth(ids) - 1]);
        else if (sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_NOT_FOUND, "tenant_id or reservation_id: not found");
        else if (sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "usage: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1) {
        copy_str(entry_id, CG_UUID_LEN + 1, PQgetvalue(res, 0, 0));
        goto out;
    }
    PQclear(res);
    res = NULL;
    const char *key_values[] = {tenant_id, idempotency_key};
    rc = run(pg, "ledger_previous",
             "SELECT entry_id::text, input_tokens, output_tokens, cache_read_tokens,"
             " cache_write_tokens, cost_micros, model FROM ledger"
             " WHERE tenant_id = $1::uuid AND idempotency_key = $2::text",
             2, key_values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
        goto out;
    }
    copy_str(entry_id, CG_UUID_LEN + 1, PQgetvalue(res, 0, 0));
    if (previous != NULL) {
        previous->input_tokens = parse_i64(PQgetvalue(res, 0, 1));
        previous->output_tokens = parse_i64(PQgetvalue(res, 0, 2));
        previous->cache_read_tokens = parse_i64(PQgetvalue(res, 0, 3));
        previous->cache_write_tokens = parse_i64(PQgetvalue(res, 0, 4));
        previous->cost_micros = parse_i64(PQgetvalue(res, 0, 5));
    }
    if (previous_model != NULL)
        copy_str(previous_model, CG_MODEL_MAX * 4 + 1, PQgetvalue(res, 0, 6));
    rc = cg_err_set(err, CG_ALREADY_EXISTS, "idempotency_key: already used");
out:
    PQclear(res);
    return rc;
}

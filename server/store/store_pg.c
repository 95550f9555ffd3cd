/* store_pg.c - PostgreSQL for the store: one libpq connection, its timeouts, the queries
 * and the migration runner. The only file that includes libpq-fe.h.
 *
 * Every statement goes through cg__pg_run(): it checks the deadline, makes sure the connection
 * is alive (reconnecting when nothing has been sent yet), adjusts statement_timeout when
 * the deadline requires it, sends the statement with parameters (PQsendQueryParams) and
 * waits with poll() so that a server that stops answering cannot hold the caller past its
 * statement timeout plus a grace period.
 *
 * Budget operations run inside a transaction the caller opens (cg_pg_begin): while it is
 * open, cg__pg_run() pins every statement to the connection, since a transaction cannot move to
 * another one; a lost connection is CG_UNAVAILABLE until the caller ends the transaction.
 */
#include "store/store_pg_internal.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/metrics.h"
#include "core/hash64.h"
#include "core/scope.h"
#include "store/store_pg_events.h"

/* The session advisory lock that serializes migration runners ("ctxguard" in ASCII). */
#define MIGRATION_LOCK_KEY "7166485292799586916"

/* How long past the statement timeout (or the deadline) we wait for the server's answer
 * before we stop trusting the connection: the server cancels the statement itself at the
 * timeout, so only a dead network or server gets this far. */
#define RESPONSE_GRACE_MS 2000

/* libpq's own connect_timeout is in whole seconds and ignores values below 2. */
#define LIBPQ_MIN_CONNECT_TIMEOUT_S 2

const char *cg__pg_rid(const struct cg_pg *pg)
{
    return pg->rid[0] ? pg->rid : NULL;
}

void cg__pg_copy_str(char *dst, size_t cap, const char *src)
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
    cg__pg_copy_str(dst, cap, src ? src : "");
    char *nl = strchr(dst, '\n');
    if (nl != NULL)
        *nl = '\0';
}

/* libpq messages end with newlines and may span lines; logs want one line. */
static void one_line(char *dst, size_t cap, const char *src)
{
    cg__pg_copy_str(dst, cap, src ? src : "");
    for (char *p = dst; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    }
    size_t n = strlen(dst);
    while (n > 0 && dst[n - 1] == ' ')
        dst[--n] = '\0';
}

int64_t cg__pg_parse_i64(const char *s)
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
bool cg__pg_decode_bytea_hex(const char *s, uint8_t *out, size_t n)
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
    cg_log(serious ? CG_LOG_WARN : CG_LOG_DEBUG, MOD, cg__pg_rid(pg), "server message: %s", line);
}

static void drop_conn(struct cg_pg *pg)
{
    if (pg->conn != NULL) {
        PQfinish(pg->conn);
        pg->conn = NULL;
    }
    pg->session_timeout_ms = -1;
    pg->nprepared = 0; /* prepared statements die with their session */
}

static void note_outage(const struct cg_pg *pg, const char *what, const char *detail)
{
    char line[512];
    one_line(line, sizeof line, detail);
    if (atomic_exchange(pg->outage_logged, 1) == 0)
        cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "postgresql unavailable: %s: %s", what, line);
    else
        cg_log(CG_LOG_DEBUG, MOD, cg__pg_rid(pg), "postgresql still unavailable: %s: %s", what,
               line);
}

static void note_connected(const struct cg_pg *pg)
{
    if (atomic_exchange(pg->outage_logged, 0) == 1)
        cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg), "postgresql reachable again");
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
    int64_t grace = pg->strict_deadline ? 0 : RESPONSE_GRACE_MS;
    if (pg->deadline_mono_ms != 0 && pg->deadline_mono_ms + grace < until)
        until = pg->deadline_mono_ms + grace;
    return until;
}

static cg_status conn_lost(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    char line[512];
    first_line(line, sizeof line, PQerrorMessage(pg->conn));
    cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "connection lost query=%s error=\"%s\"", label, line);
    drop_conn(pg);
    return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
}

static cg_status no_answer(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "no answer in time, dropping the connection query=%s",
           label);
    drop_conn(pg);
    if (time_left(pg) <= 0)
        return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
    return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
}

/* Sends what libpq holds for the server, bounded by until; on a failure the connection is
 * dropped (no_answer, conn_lost). */
static cg_status flush_out(struct cg_pg *pg, const char *label, int64_t until, struct cg_err *err)
{
    PGconn *conn = pg->conn;
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
    return CG_OK;
}

/* Sends one statement (or, with RUN_SIMPLE, a script) and waits for its result. CG_OK with
 * *out set (it may be an error result: the first error of a script, else the last result);
 * on a transport failure the connection is dropped and *out stays NULL. */
/* Flushes what was sent and collects the command's result (the last one; an error wins). */
static cg_status collect(struct cg_pg *pg, const char *label, int64_t until, PGresult **out,
                         struct cg_err *err)
{
    PGconn *conn = pg->conn;
    *out = NULL;
    cg_status sent = flush_out(pg, label, until, err);
    if (sent != CG_OK)
        return sent;

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

/* The hash of a statement's text, eight bytes a step (the batch's write is 4 KiB of SQL,
 * hashed on every run): its prepared statement's name on a connection. */
static uint64_t sql_hash(const char *sql)
{
    return cg_hash64(0, sql, strlen(sql));
}

/* "cg_" and h in 16 lower-case hex digits: the prepared statement's name. */
static void statement_name(uint64_t h, char name[24])
{
    uint8_t be[8];
    for (int i = 0; i < 8; i++)
        be[i] = (uint8_t)(h >> (56 - 8 * i));
    memcpy(name, "cg_", 3);
    cg_hex_encode(be, sizeof be, name + 3);
}

static bool is_prepared(const struct cg_pg *pg, uint64_t h)
{
    for (int i = 0; i < pg->nprepared; i++)
        if (pg->prepared[i] == h)
            return true;
    return false;
}

static bool result_sqlstate_is(const PGresult *res, const char *state)
{
    const char *s = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return s != NULL && strcmp(s, state) == 0;
}

/* Prepares sql as `name` on this connection unless done before. CG_OK with *failed set
 * (the error result, for the caller to report) when the server refused it. */
static cg_status prepare(struct cg_pg *pg, const char *label, const char *name, uint64_t h,
                         const char *sql, int nparams, int64_t until, PGresult **failed,
                         struct cg_err *err)
{
    *failed = NULL;
    if (is_prepared(pg, h))
        return CG_OK;
    if (!PQsendPrepare(pg->conn, name, sql, nparams, NULL))
        return conn_lost(pg, label, err);
    PGresult *res = NULL;
    cg_status rc = collect(pg, label, until, &res, err);
    if (rc != CG_OK)
        return rc;
    /* 42P05: the session has it already (a pooler's connection, say): use it. */
    if (PQresultStatus(res) != PGRES_COMMAND_OK && !result_sqlstate_is(res, "42P05")) {
        *failed = res;
        return CG_OK;
    }
    PQclear(res);
    pg->prepared[pg->nprepared++] = h;
    return CG_OK;
}

#define BEGIN_SQL "BEGIN ISOLATION LEVEL READ COMMITTED"

/* Waits until a result can be read without blocking; false on a timeout or a lost
 * connection (err filled). */
static bool wait_readable(struct cg_pg *pg, const char *label, int64_t until, cg_status *rc,
                          struct cg_err *err)
{
    while (PQisBusy(pg->conn)) {
        int ready = wait_socket(pg->conn, POLLIN, until);
        if (ready == 0) {
            *rc = no_answer(pg, label, err);
            return false;
        }
        if (ready < 0 || !PQconsumeInput(pg->conn)) {
            *rc = conn_lost(pg, label, err);
            return false;
        }
    }
    return true;
}

/* BEGIN and the transaction's first statement in one round trip (libpq pipeline mode): the
 * BEGIN of cg_pg_begin is held until then. *out gets the statement's result, or BEGIN's
 * (or the PREPARE's) when that failed. prepare_name: the statement's prepared name, or NULL
 * to send it with its text; prepare: whether to PREPARE it first. *prepared: whether the
 * PREPARE itself succeeded, whatever became of the statement after it (a statement timeout,
 * say): the session then has it, and the caller must count it as prepared. */
static cg_status send_with_begin(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                                 const char *const *values, const int *lengths, const int *formats,
                                 const char *prepare_name, bool prepare, bool *prepared,
                                 PGresult **out, struct cg_err *err)
{
    PGconn *conn = pg->conn;
    int64_t until = response_until(pg);
    *out = NULL;
    *prepared = false;
    if (!PQenterPipelineMode(conn))
        return conn_lost(pg, label, err);
    int commands = 2 + (prepare ? 1 : 0);
    bool sent = PQsendQueryParams(conn, BEGIN_SQL, 0, NULL, NULL, NULL, NULL, 0) &&
                (!prepare || PQsendPrepare(conn, prepare_name, sql, nparams, NULL)) &&
                (prepare_name
                     ? PQsendQueryPrepared(conn, prepare_name, nparams, values, lengths, formats, 0)
                     : PQsendQueryParams(conn, sql, nparams, NULL, values, lengths, formats, 0)) &&
                PQpipelineSync(conn);
    if (!sent)
        return conn_lost(pg, label, err);
    cg_status flushed = flush_out(pg, label, until, err);
    if (flushed != CG_OK)
        return flushed;
    /* Each command's results end with a NULL; the sync's result ends the pipeline. The
     * first failure is what the caller sees (later commands then come back aborted). */
    PGresult *first_error = NULL, *last = NULL;
    cg_status rc = CG_OK;
    int done = 0;
    bool synced = false;
    while (!synced) {
        if (!wait_readable(pg, label, until, &rc, err))
            break;
        PGresult *res = PQgetResult(conn);
        if (res == NULL) {
            done++;
            continue;
        }
        ExecStatusType st = PQresultStatus(res);
        if (prepare && done == 1 && st == PGRES_COMMAND_OK)
            *prepared = true; /* the PREPARE's own result */
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            synced = true;
        } else if ((st == PGRES_FATAL_ERROR || st == PGRES_NONFATAL_ERROR) && first_error == NULL) {
            first_error = res;
        } else if (done == commands - 1 && st != PGRES_PIPELINE_ABORTED) {
            PQclear(last);
            last = res;
        } else {
            PQclear(res);
        }
    }
    if (rc != CG_OK || !PQexitPipelineMode(conn)) {
        PQclear(first_error);
        PQclear(last);
        return rc != CG_OK ? rc : conn_lost(pg, label, err);
    }
    if (first_error != NULL) {
        PQclear(last);
        *out = first_error;
        return CG_OK;
    }
    if (last == NULL)
        return conn_lost(pg, label, err);
    *out = last;
    return CG_OK;
}

/* Sends one statement and waits (bounded by the deadline and the statement timeout) for
 * its result. Statements with parameters run as prepared statements, prepared once per
 * connection: parsing and planning them on every call cost more than running them. The
 * first statement of a transaction carries its BEGIN (send_with_begin). */
static cg_status send_wait(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                           const char *const *values, const int *lengths, const int *formats,
                           int flags, PGresult **out, struct cg_err *err)
{
    PGconn *conn = pg->conn;
    int64_t until = response_until(pg);
    *out = NULL;
    if (pg->begin_pending) {
        pg->begin_pending = false;
        if ((flags & RUN_SIMPLE) || nparams == 0) {
            /* Pipelines take no simple queries, and a statement without parameters may be
             * one that must follow BEGIN on its own (SET TRANSACTION): BEGIN first. */
            PGresult *res = NULL;
            cg_status rc = send_wait(pg, "begin", BEGIN_SQL, 0, NULL, NULL, NULL, 0, &res, err);
            bool ok = rc == CG_OK && PQresultStatus(res) == PGRES_COMMAND_OK;
            if (rc == CG_OK && !ok) {
                *out = res;
                return CG_OK;
            }
            PQclear(res);
            if (rc != CG_OK)
                return rc;
        } else {
            bool named = nparams > 0;
            uint64_t h = named ? sql_hash(sql) : 0;
            bool known = named && is_prepared(pg, h);
            named = named && (known || pg->nprepared < CG_PG_PREPARED_MAX);
            char name[24];
            statement_name(h, name);
            bool prepared = false;
            cg_status rc =
                send_with_begin(pg, label, sql, nparams, values, lengths, formats,
                                named ? name : NULL, named && !known, &prepared, out, err);
            /* Counted by the PREPARE's own result, not the statement's: a statement that
             * failed after its PREPARE succeeded (a statement timeout) leaves it in the
             * session, and preparing it again would fail with 42P05. A lost connection
             * (rc != CG_OK) took its statements with it. */
            if (rc == CG_OK && prepared && pg->conn != NULL)
                pg->prepared[pg->nprepared++] = h;
            return rc;
        }
    }
    bool named = !(flags & RUN_SIMPLE) && nparams > 0;
    uint64_t h = named ? sql_hash(sql) : 0;
    named = named && (is_prepared(pg, h) || pg->nprepared < CG_PG_PREPARED_MAX);
    char name[24];
    statement_name(h, name);
    for (int attempt = 0;; attempt++) {
        int sent;
        if (named) {
            PGresult *failed = NULL;
            cg_status rc = prepare(pg, label, name, h, sql, nparams, until, &failed, err);
            if (rc != CG_OK)
                return rc;
            if (failed != NULL) {
                *out = failed;
                return CG_OK;
            }
            sent = PQsendQueryPrepared(conn, name, nparams, values, lengths, formats, 0);
        } else {
            sent = (flags & RUN_SIMPLE)
                       ? PQsendQuery(conn, sql)
                       : PQsendQueryParams(conn, sql, nparams, NULL, values, lengths, formats, 0);
        }
        if (!sent)
            return conn_lost(pg, label, err);
        cg_status rc = collect(pg, label, until, out, err);
        /* 26000: the session lost its prepared statements (DISCARD ALL by a pooler): the
         * statement did not run; prepare again and run it once more. */
        if (rc == CG_OK && named && attempt == 0 && result_sqlstate_is(*out, "26000")) {
            PQclear(*out);
            *out = NULL;
            pg->nprepared = 0;
            continue;
        }
        return rc;
    }
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
    /* Before a BEGIN that waits for its first statement: outside the transaction, where a
     * first statement such as SET TRANSACTION must not find a query before it. */
    bool before_begin = pg->begin_pending;
    pg->begin_pending = false;
    cg_status rc = send_wait(pg, "set_statement_timeout",
                             "SELECT set_config('statement_timeout', $1::text, false)", 1, values,
                             NULL, NULL, 0, &res, err);
    pg->begin_pending = before_begin;
    if (rc != CG_OK)
        return rc;
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        char line[512];
        one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "cannot set statement_timeout error=\"%s\"",
               line);
        PQclear(res);
        drop_conn(pg);
        return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
    }
    PQclear(res);
    pg->session_timeout_ms = target;
    if (pg->in_tx && !before_begin)
        pg->timeout_set_in_tx = true;
    return CG_OK;
}

bool cg__pg_sqlstate_is(const struct cg_pg *pg, const char *state)
{
    return strcmp(pg->sqlstate, state) == 0;
}

/* Whether an error result means the connection is gone (or the server is going away). */
static bool connection_error(const struct cg_pg *pg)
{
    return PQstatus(pg->conn) != CONNECTION_OK || strncmp(pg->sqlstate, "08", 2) == 0 ||
           cg__pg_sqlstate_is(pg, "57P01") || cg__pg_sqlstate_is(pg, "57P02") ||
           cg__pg_sqlstate_is(pg, "57P03");
}

/* Records the SQLSTATE and constraint of a failed result (pg->sqlstate, pg->constraint).
 * When the failure means the connection is gone, logs it, drops the connection and
 * returns true. */
static bool failure_lost_conn(struct cg_pg *pg, const char *label, const PGresult *res)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    cg__pg_copy_str(pg->sqlstate, sizeof pg->sqlstate, state ? state : "");
    const char *constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    cg__pg_copy_str(pg->constraint, sizeof pg->constraint, constraint ? constraint : "");
    if (!connection_error(pg))
        return false;
    char line[512];
    one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
    cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "connection lost query=%s error=\"%s\"", label, line);
    drop_conn(pg);
    return true;
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
    bool reset = false;
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
    } else if (strcmp(state, "42P05") == 0 || strcmp(state, "26000") == 0) {
        /* The session's prepared statements are not what this connection believes (which
         * its bookkeeping should prevent): nothing ran; a new session starts in step. The
         * open transaction, if any, goes with the connection (the caller rolls back). */
        code = CG_UNAVAILABLE;
        text = "storage unavailable: the database session was reset; retry";
        reset = true;
    } else if (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0) {
        /* Bad values and constraint violations: the caller usually maps them. */
        level = CG_LOG_INFO;
    }
    char line[512];
    one_line(line, sizeof line, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
    struct cg_kv fields[] = {{"query", label}, {"sqlstate", state}, {"error", line}};
    cg_log_kv(level, MOD, cg__pg_rid(pg), "statement failed", fields, 3);
    if (reset)
        drop_conn(pg);
    return cg_err_set(err, code, "%s", text);
}

/* Runs one statement (see the file comment). On CG_OK, *out is a successful result that
 * the caller PQclears; on error *out is NULL, err is filled and pg->sqlstate holds the
 * SQLSTATE when the server reported one. */
/* cg__pg_run without the counting. */
static cg_status run_statement(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                               const char *const *values, const int *lengths, const int *formats,
                               int flags, PGresult **out, struct cg_err *err)
{
    *out = NULL;
    pg->sqlstate[0] = '\0';
    pg->constraint[0] = '\0';
    /* Inside a transaction nothing may be re-sent or moved to another connection, but for
     * its first statement, which carries the BEGIN: nothing of the transaction is there yet,
     * and a connection lost under it takes the whole transaction with it. */
    /* The transaction's first statement carries its BEGIN: until it is sent, a dead idle
     * connection may still be replaced; once sent, it is pinned like the rest. */
    bool carries_begin = pg->in_tx && pg->begin_pending;
    if (pg->in_tx)
        flags = (flags | RUN_PINNED) & ~RUN_READ;
    for (int attempt = 0;; attempt++) {
        if (time_left(pg) <= 0)
            return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");

        bool fresh = false;
        if (pg->conn != NULL && !idle_conn_alive(pg)) {
            if ((flags & RUN_PINNED) && !carries_begin) {
                drop_conn(pg);
                cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "connection lost mid-session query=%s",
                       label);
                return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
            }
            cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg), "connection closed while idle; reconnecting");
            drop_conn(pg);
        }
        if (pg->conn == NULL) {
            if ((flags & RUN_PINNED) && !carries_begin)
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
        if (rc == CG_UNAVAILABLE && retry_ok) {
            pg->begin_pending = carries_begin;
            continue;
        }
        if (rc != CG_OK)
            return rc;

        PGresult *res = NULL;
        rc = send_wait(pg, label, sql, nparams, values, lengths, formats, flags, &res, err);
        retry_ok = retry_ok && (flags & RUN_READ);
        if (rc == CG_UNAVAILABLE && retry_ok) {
            cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg), "retrying a read on a new connection query=%s",
                   label);
            pg->begin_pending = carries_begin;
            continue;
        }
        if (rc != CG_OK)
            return rc;

        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
            *out = res;
            return CG_OK;
        }
        if (failure_lost_conn(pg, label, res)) {
            PQclear(res);
            if (retry_ok) {
                cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg),
                       "retrying a read on a new connection query=%s", label);
                pg->begin_pending = carries_begin;
                continue;
            }
            return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
        }
        rc = statement_failed(pg, label, res, err);
        PQclear(res);
        return rc;
    }
}

/* Whether a statement's failure is the store's (not the data's: a missing row, a conflict). */
static bool store_failure(cg_status st)
{
    return st == CG_UNAVAILABLE || st == CG_DEADLINE_EXCEEDED || st == CG_INTERNAL || st == CG_IO ||
           st == CG_NOMEM;
}

cg_status cg__pg_run(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                     const char *const *values, const int *lengths, const int *formats, int flags,
                     PGresult **out, struct cg_err *err)
{
    if (pg->seconds == NULL && pg->errors == NULL)
        return run_statement(pg, label, sql, nparams, values, lengths, formats, flags, out, err);
    int64_t started = cg_mono_ns();
    cg_status st =
        run_statement(pg, label, sql, nparams, values, lengths, formats, flags, out, err);
    cg_metric_observe(pg->seconds, pg->metrics_slot, (double)(cg_mono_ns() - started) / 1e9);
    if (store_failure(st))
        cg_metric_inc(pg->errors, pg->metrics_slot);
    return st;
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
    pg->outage_logged = &pg->own_outage_logged;
    return pg;
}

void cg_pg_set_outage_log(struct cg_pg *pg, atomic_int *flag)
{
    pg->outage_logged = flag != NULL ? flag : &pg->own_outage_logged;
}

void cg_pg_set_meters(struct cg_pg *pg, struct cg_metric *seconds, struct cg_metric *errors,
                      uint32_t slot)
{
    pg->seconds = seconds;
    pg->errors = errors;
    pg->metrics_slot = slot;
}

void cg_pg_set_count_meter(struct cg_pg *pg, cg_pg_count which, struct cg_metric *h)
{
    if ((int)which >= 0 && which < CG_PG_COUNTS)
        pg->count_meters[which] = h;
}

void cg__pg_count(struct cg_pg *pg, cg_pg_count which, uint64_t n)
{
    if ((int)which < 0 || which >= CG_PG_COUNTS || n == 0)
        return;
    if (pg->in_tx)
        pg->tx_counts[which] += n;
    else
        cg_metric_add(pg->count_meters[which], pg->metrics_slot, n);
}

void cg_pg_free(struct cg_pg *pg)
{
    if (pg == NULL)
        return;
    drop_conn(pg);
    free(pg->notices);
    free(pg->dsn);
    free(pg);
}

/* At most this many bytes of payloads wait for a commit; past it, wake-ups are dropped
 * (the events themselves are not). */
#define NOTICES_CAP (1u << 20)

bool cg__pg_notice_add(struct cg_pg *pg, const char *payload)
{
    size_t n = strlen(payload) + 1;
    if (pg->notices_len + n > NOTICES_CAP)
        return false;
    if (pg->notices_len + n > pg->notices_cap) {
        size_t cap = pg->notices_cap ? pg->notices_cap : 1024;
        while (cap < pg->notices_len + n)
            cap *= 2;
        char *b = realloc(pg->notices, cap);
        if (b == NULL)
            return false;
        pg->notices = b;
        pg->notices_cap = cap;
    }
    memcpy(pg->notices + pg->notices_len, payload, n);
    pg->notices_len += n;
    pg->nnotices++;
    return true;
}

/* The NOTIFY after a COMMIT: the events' wake-ups on cg_events, one per event, and on
 * cg_rows the scope rows the events name, "<tenant>" then "\n<row_version> <session> <task>
 * <agent>" per row, up to ROWS_PER_NOTIFY rows of a tenant in one payload (a batch of
 * several calls of a tenant is one or a few notifications, not one per row), with each
 * row_version read after the COMMIT (service/cache.h: other replicas drop older cached
 * copies). Every write that moves a row's counters or budget appends an event naming that
 * row (USAGE_CHANGED at least), so the events name every row written. The version read is
 * the one committed or a later one, as safe to announce (a reader then needs at least
 * that, and PostgreSQL has it). A row named by several events is announced once; a scope
 * that is gone announces nothing. In the statement that already carried the events'
 * wake-ups: no round trip more, one primary-key lookup per event. ROWS_PER_NOTIFY keeps a
 * payload under PostgreSQL's 8,000 bytes with the longest ids (16 lines of at most 410
 * bytes) and under the listener's CG_PG_ROWS_PER_PAYLOAD. */
#define ROWS_PER_NOTIFY 16
#define TEXT_OF_(x) #x
#define TEXT_OF(x) TEXT_OF_(x) /* the digits of a macro's value, for SQL text */
_Static_assert(ROWS_PER_NOTIFY <= CG_PG_ROWS_PER_PAYLOAD &&
                   ROWS_PER_NOTIFY * (20 + 3 * (CG_SCOPE_ID_MAX + 1)) + CG_UUID_LEN < 8000,
               "a cg_rows payload: within the listener's bound and PostgreSQL's 8,000 bytes");
#define NOTIFY_SQL                                                                                 \
    "WITH p AS (SELECT p, split_part(p, ' ', 1) AS t FROM unnest($1::text[]) AS p),"               \
    " r AS (SELECT DISTINCT p.t, sc.row_version || ' ' || sc.session_id || ' ' || sc.task_id"      \
    "  || ' ' || sc.agent_id AS line FROM p JOIN scopes sc ON sc.tenant_id = p.t::uuid"            \
    "  AND sc.session_id = split_part(p.p, ' ', 3) AND sc.task_id = split_part(p.p, ' ', 4)"       \
    "  AND sc.agent_id = split_part(p.p, ' ', 5)),"                                                \
    " g AS (SELECT t, string_agg(line, E'\\n') AS lines FROM (SELECT t, line,"                     \
    "  (row_number() OVER (PARTITION BY t ORDER BY line) - 1) / " TEXT_OF(                         \
        ROWS_PER_NOTIFY) " AS k"                                                                   \
                         "  FROM r) x GROUP BY t, k)"                                              \
                         " SELECT (SELECT count(pg_notify('cg_events', p)) FROM p),"               \
                         " (SELECT count(pg_notify('cg_rows', t || E'\\n' || lines)) FROM g)"

/* The queued payloads as a text array literal, each quoted (malloc'd; NULL when out of
 * memory, logged). */
static char *notices_literal(const struct cg_pg *pg)
{
    size_t cap = pg->notices_len * 2 + 2 * (size_t)pg->nnotices + 3;
    char *lit = malloc(cap);
    if (lit == NULL) {
        cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "events committed but not announced: no memory");
        return NULL;
    }
    size_t k = 0;
    lit[k++] = '{';
    const char *p = pg->notices;
    for (int i = 0; i < pg->nnotices; i++) {
        if (i)
            lit[k++] = ',';
        lit[k++] = '"';
        for (; *p; p++) {
            if (*p == '"' || *p == '\\')
                lit[k++] = '\\';
            lit[k++] = *p;
        }
        p++;
        lit[k++] = '"';
    }
    lit[k++] = '}';
    lit[k] = '\0';
    return lit;
}

/* After a commit: the queued payloads were announced (forgotten) or not (kept for the
 * next commit's NOTIFY, logged with why). */
static void notices_sent(struct cg_pg *pg, bool sent, const char *why)
{
    if (sent) {
        pg->notices_kept_len = 0;
        pg->notices_kept = 0;
        return;
    }
    cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg),
           "events committed but not announced (sent again with the next commit): %s", why);
    pg->notices_kept_len = pg->notices_len;
    pg->notices_kept = pg->nnotices;
}

/* Sends the queued notifications in one statement of their own, after the COMMIT that made
 * their events visible. Best effort: a failure is logged, the write stands, and the
 * payloads are kept for the next commit's NOTIFY (notices_kept). */
static void send_notices(struct cg_pg *pg)
{
    if (pg->nnotices == 0)
        return;
    char *lit = notices_literal(pg);
    if (lit == NULL)
        return;
    /* Past the call's deadline too: the write is done and others wait for the news. */
    int64_t deadline = pg->deadline_mono_ms;
    pg->deadline_mono_ms = 0;
    const char *values[] = {lit};
    PGresult *res = NULL;
    struct cg_err err;
    cg_status rc =
        cg__pg_run(pg, "notify", NOTIFY_SQL, 1, values, NULL, NULL, RUN_READ, &res, &err);
    pg->deadline_mono_ms = deadline;
    notices_sent(pg, rc == CG_OK, err.msg);
    PQclear(res);
    free(lit);
}

/* The results of commit_notify's pipeline: the COMMIT's (kept in *commit, error results
 * too), then the PREPARE's when `prepare` (counted as prepared by its own result), then
 * the NOTIFY's (*notified when it ran), then the sync. The NOTIFY's may come after the
 * deadline (notify_until: the statement timeout's bound). CG_OK when the COMMIT's result
 * came, whatever became of the rest (a failure after it is logged and drops the
 * connection). */
static cg_status commit_notify_results(struct cg_pg *pg, bool prepare, uint64_t h, int64_t until,
                                       int64_t notify_until, PGresult **commit, bool *notified,
                                       struct cg_err *err)
{
    int commands = prepare ? 3 : 2;
    int done = 0;
    cg_status rc = CG_OK;
    char why[160] = "the connection was lost";
    for (bool synced = false; !synced;) {
        if (!wait_readable(pg, "commit", done == 0 ? until : notify_until, &rc, err))
            break;
        PGresult *res = PQgetResult(pg->conn);
        if (res == NULL) {
            done++;
            continue;
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_PIPELINE_SYNC) {
            synced = true;
        } else if (done == 0 && *commit == NULL) {
            *commit = res;
            continue;
        } else if (prepare && done == 1 && st == PGRES_COMMAND_OK) {
            pg->prepared[pg->nprepared++] = h;
        } else if (done == commands - 1 && st == PGRES_TUPLES_OK) {
            *notified = true;
        } else if (done >= 1 && st == PGRES_FATAL_ERROR) {
            one_line(why, sizeof why, PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY));
            /* The session lost its prepared statements (a pooler's DISCARD ALL). */
            if (result_sqlstate_is(res, "26000"))
                pg->nprepared = 0;
        }
        PQclear(res);
    }
    if (rc == CG_OK && !PQexitPipelineMode(pg->conn))
        rc = conn_lost(pg, "commit", err);
    if (*commit == NULL)
        return rc != CG_OK ? rc : conn_lost(pg, "commit", err);
    if (PQresultStatus(*commit) == PGRES_COMMAND_OK)
        notices_sent(pg, *notified, why);
    return CG_OK;
}

/* COMMIT and the NOTIFY of its events in one round trip: libpq pipeline mode, one sync, so
 * that the server skips the NOTIFY when the COMMIT fails and only a committed transaction
 * is announced. Only for an open transaction not aborted (there COMMIT answers ROLLBACK,
 * no error, and the NOTIFY would run). Checks the deadline, the connection and the
 * statement timeout as cg__pg_run does. CG_OK with *commit set to the COMMIT's result
 * (maybe an error result, for the caller to map); otherwise the COMMIT's outcome is not
 * known (the connection is dropped) or it was not sent. *notified: the NOTIFY ran. */
static cg_status commit_notify(struct cg_pg *pg, const char *lit, PGresult **commit, bool *notified,
                               struct cg_err *err)
{
    *commit = NULL;
    *notified = false;
    pg->sqlstate[0] = '\0';
    pg->constraint[0] = '\0';
    if (time_left(pg) <= 0)
        return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
    if (!idle_conn_alive(pg)) {
        drop_conn(pg);
        cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "connection lost mid-session query=commit");
        return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
    }
    cg_status rc = sync_timeout(pg, err);
    if (rc != CG_OK)
        return rc;
    PGconn *conn = pg->conn;
    int64_t until = response_until(pg);
    /* The NOTIFY may finish past the call's deadline, as send_notices' may. */
    int64_t deadline = pg->deadline_mono_ms;
    pg->deadline_mono_ms = 0;
    int64_t notify_until = response_until(pg);
    pg->deadline_mono_ms = deadline;
    uint64_t h = sql_hash(NOTIFY_SQL);
    bool known = is_prepared(pg, h);
    bool named = known || pg->nprepared < CG_PG_PREPARED_MAX;
    char name[24];
    statement_name(h, name);
    const char *values[] = {lit};
    if (!PQenterPipelineMode(conn))
        return conn_lost(pg, "commit", err);
    bool sent = PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) &&
                (!named || known || PQsendPrepare(conn, name, NOTIFY_SQL, 1, NULL)) &&
                (named ? PQsendQueryPrepared(conn, name, 1, values, NULL, NULL, 0)
                       : PQsendQueryParams(conn, NOTIFY_SQL, 1, NULL, values, NULL, NULL, 0)) &&
                PQpipelineSync(conn);
    if (!sent)
        return conn_lost(pg, "commit", err);
    rc = flush_out(pg, "commit", until, err);
    if (rc != CG_OK)
        return rc;
    return commit_notify_results(pg, named && !known, h, until, notify_until, commit, notified,
                                 err);
}

/* Forgets the notifications of the transaction that ended, keeping those of committed
 * ones that could not be sent. */
static void notices_clear(struct cg_pg *pg)
{
    pg->notices_len = pg->notices_kept_len;
    pg->nnotices = pg->notices_kept;
}

void cg_pg_set_deadline(struct cg_pg *pg, int64_t deadline_mono_ms)
{
    pg->deadline_mono_ms = deadline_mono_ms;
}

void cg_pg_set_request_id(struct cg_pg *pg, const char *rid)
{
    cg__pg_copy_str(pg->rid, sizeof pg->rid, rid ? rid : "");
}

cg_status cg_pg_ping(struct cg_pg *pg, struct cg_err *err)
{
    PGresult *res = NULL;
    /* A probe's answer is due by the deadline itself: a server that does not answer by
     * then (frozen, its socket open) counts as down, and the connection is dropped. */
    pg->strict_deadline = true;
    cg_status rc = cg__pg_run(pg, "ping", "SELECT 1", 0, NULL, NULL, NULL, RUN_READ, &res, err);
    pg->strict_deadline = false;
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ migrations --- */

static bool version_recorded(PGresult *res, int version)
{
    for (int i = 0; i < PQntuples(res); i++) {
        if (cg__pg_parse_i64(PQgetvalue(res, i, 0)) == version)
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

    cg_status rc =
        cg__pg_run(pg, "migrate_begin", "BEGIN", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        return rc;
    rc = cg__pg_run(pg, m->name, m->sql, 0, NULL, NULL, NULL, RUN_PINNED | RUN_SIMPLE, &res, err);
    PQclear(res);
    if (rc == CG_OK) {
        rc = cg__pg_run(pg, "migrate_record",
                        "INSERT INTO schema_migrations (version, name) VALUES ($1::int, $2::text)",
                        2, values, NULL, NULL, RUN_PINNED, &res, err);
        PQclear(res);
    }
    if (rc == CG_OK) {
        rc = cg__pg_run(pg, "migrate_commit", "COMMIT", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
        PQclear(res);
    }
    if (rc != CG_OK && pg->conn != NULL) {
        struct cg_err ignored;
        cg_status rollback = cg__pg_run(pg, "migrate_rollback", "ROLLBACK", 0, NULL, NULL, NULL,
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

    cg_status rc = cg__pg_run(pg, "migrate_lock", "SELECT pg_advisory_lock($1::int8)", 1,
                              lock_values, NULL, NULL, 0, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        goto out;

    rc = cg__pg_run(pg, "migrate_table",
                    "CREATE TABLE IF NOT EXISTS schema_migrations ("
                    " version int PRIMARY KEY,"
                    " name text NOT NULL,"
                    " applied_at timestamptz NOT NULL DEFAULT now())",
                    0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        goto unlock;
    rc =
        cg__pg_run(pg, "migrate_versions", "SELECT version FROM schema_migrations ORDER BY version",
                   0, NULL, NULL, NULL, RUN_PINNED, &versions, err);
    if (rc != CG_OK)
        goto unlock;

    int newest_known = 0;
    for (const struct cg_migration *m = migrations; m->sql != NULL; m++) {
        newest_known = m->version;
        if (version_recorded(versions, m->version))
            continue;
        rc = apply_migration(pg, m, err);
        if (rc != CG_OK) {
            cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "migration %04d_%s failed", m->version,
                   m->name);
            if (rc == CG_INTERNAL)
                cg_err_set(err, CG_INTERNAL, "migration %04d_%s failed", m->version, m->name);
            goto unlock;
        }
        applied_here++;
        cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg), "applied migration %04d_%s", m->version, m->name);
    }
    int rows = PQntuples(versions);
    if (rows > 0 && cg__pg_parse_i64(PQgetvalue(versions, rows - 1, 0)) > newest_known)
        cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg),
               "the database has migrations newer than this binary knows (newest known %04d)",
               newest_known);

unlock:
    if (pg->conn != NULL) {
        struct cg_err unlock_err;
        cg_status unlocked = cg__pg_run(pg, "migrate_unlock", "SELECT pg_advisory_unlock($1::int8)",
                                        1, lock_values, NULL, NULL, RUN_PINNED, &res, &unlock_err);
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

/* The reason of a cg__pg_run_one miss, from the callers' `missing` texts (each names the
 * key it looked up: "reservation_id: no such reservation", ...). */
static cg_error_reason missing_reason(const char *missing)
{
    static const struct {
        const char *key;
        cg_error_reason reason;
    } table[] = {
        {"reservation_id: no such", CG_ERR_RESERVATION_NOT_FOUND},
        {"artifact_id:", CG_ERR_ARTIFACT_NOT_FOUND},
        {"session_id:", CG_ERR_SESSION_NOT_FOUND},
        {"tenant_id:", CG_ERR_TENANT_NOT_FOUND},
        {"scope", CG_ERR_SCOPE_NOT_FOUND},
        {"approval_id:", CG_ERR_APPROVAL_NOT_FOUND},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strncmp(missing, table[i].key, strlen(table[i].key)) == 0)
            return table[i].reason;
    return CG_ERR_NOT_FOUND;
}

/* cg__pg_run() for a statement that names one row by its key: an id PostgreSQL cannot even
 * parse (22P02) and no row at all are both CG_NOT_FOUND with `missing` as the message.
 * On CG_OK, *out holds exactly one row. */
cg_status cg__pg_run_one(struct cg_pg *pg, const char *label, const char *sql, int nparams,
                         const char *const *values, int flags, const char *missing, PGresult **out,
                         struct cg_err *err)
{
    cg_status rc = cg__pg_run(pg, label, sql, nparams, values, NULL, NULL, flags, out, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, missing_reason(missing), "%s", missing);
        return rc;
    }
    if (PQntuples(*out) != 1)
        return cg_err_setr(err, CG_NOT_FOUND, missing_reason(missing), "%s", missing);
    return CG_OK;
}

/* ------------------------------------------------------------------ transactions --- */

cg_status cg__pg_not_in_tx(struct cg_pg *pg, const char *what, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "%s called outside a transaction", what);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

/* Ends the transaction's bookkeeping once the server has ended it (or the connection is
 * gone). A statement_timeout set inside a transaction that did not commit was undone. What
 * it wrote is counted only if it committed (cg__pg_count). */
static void tx_over(struct cg_pg *pg, bool committed)
{
    for (int i = 0; i < CG_PG_COUNTS; i++) {
        if (committed && pg->tx_counts[i] > 0)
            cg_metric_add(pg->count_meters[i], pg->metrics_slot, pg->tx_counts[i]);
        pg->tx_counts[i] = 0;
    }
    if (pg->timeout_set_in_tx && !committed)
        pg->session_timeout_ms = -1;
    pg->in_tx = false;
    pg->begin_pending = false;
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
            cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg),
                   "rollback failed, closing the connection error=\"%s\"", line);
            drop_conn(pg);
        }
        PQclear(res);
    }
    tx_over(pg, false);
    notices_clear(pg);
}

cg_status cg_pg_begin(struct cg_pg *pg, struct cg_err *err)
{
    if (pg->in_tx) {
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg),
               "begin with a transaction still open; rolling that one back");
        cg_pg_rollback(pg);
    }
    /* READ COMMITTED whatever the server's default: a row lock that had to wait then sees
     * the row as the other transaction committed it, which is what the counters need. The
     * BEGIN itself travels with the transaction's first statement (send_with_begin), one
     * round trip fewer; until then nothing was sent, so that statement may still move to a
     * new connection. An unreachable server answers then. */
    if (time_left(pg) <= 0)
        return cg_err_set(err, CG_DEADLINE_EXCEEDED, "deadline exceeded");
    if (pg->conn == NULL) {
        cg_status rc = connect_pg(pg, err);
        if (rc != CG_OK)
            return rc;
    }
    pg->in_tx = true;
    pg->begin_pending = true;
    pg->timeout_set_in_tx = false;
    return CG_OK;
}

cg_status cg_pg_commit(struct cg_pg *pg, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "commit", err);
    if (pg->begin_pending) {
        /* Nothing was sent: there is nothing to commit. */
        tx_over(pg, true);
        notices_clear(pg);
        return CG_OK;
    }
    PGresult *res = NULL;
    cg_status rc;
    char *lit = NULL;
    /* With events to announce, their NOTIFY travels with the COMMIT (commit_notify), but
     * in an aborted transaction, whose COMMIT would answer ROLLBACK. */
    if (pg->nnotices > 0 && pg->conn != NULL && PQtransactionStatus(pg->conn) == PQTRANS_INTRANS)
        lit = notices_literal(pg);
    /* Whether the notifications are dealt with: sent, or kept for the next commit. */
    bool announced = lit != NULL;
    if (lit != NULL) {
        bool notified = false;
        rc = commit_notify(pg, lit, &res, &notified, err);
        free(lit);
        if (rc == CG_OK && PQresultStatus(res) != PGRES_COMMAND_OK) {
            /* Mapped as cg__pg_run maps a failed statement. */
            rc = failure_lost_conn(pg, "commit", res)
                     ? cg_err_set(err, CG_UNAVAILABLE, "storage unavailable")
                     : statement_failed(pg, "commit", res, err);
        }
    } else {
        rc = cg__pg_run(pg, "commit", "COMMIT", 0, NULL, NULL, NULL, RUN_PINNED, &res, err);
    }
    if (rc == CG_OK && strcmp(PQcmdStatus(res), "COMMIT") != 0) {
        /* The server answers COMMIT in an aborted transaction with ROLLBACK, not an error. */
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg),
               "commit of a transaction aborted by an earlier error: rolled back");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
    }
    PQclear(res);
    /* Still in the transaction only when COMMIT was never sent (the deadline had passed):
     * the caller's rollback ends it then. */
    if (pg->conn == NULL || PQtransactionStatus(pg->conn) == PQTRANS_IDLE)
        tx_over(pg, rc == CG_OK);
    if (rc == CG_OK && !announced)
        send_notices(pg);
    if (!pg->in_tx)
        notices_clear(pg);
    return rc;
}

/* pgtest.c - schema-per-test PostgreSQL and database-per-test Redis (see pgtest.h). */
#include "pgtest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "store/store_redis.h"

#define REDIS_DB_COUNT 16 /* Redis' default `databases` */
#define REDIS_CLAIM_TTL_S "900"
#define POLL_INTERVAL_NS 5000000 /* 5 ms between pg_stat_activity polls */

static const char *required_env(const char *name, const char *what)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        cr_assert_fail("%s is not set: integration tests need %s (`make test` starts one and "
                       "exports it; by hand: export %s=...)",
                       name, what, name);
    return v;
}

static bool is_uri(const char *dsn)
{
    return strncmp(dsn, "postgresql://", 13) == 0 || strncmp(dsn, "postgres://", 11) == 0;
}

static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

static PGconn *connect_dsn(const char *dsn, const char *application_name)
{
    /* Entries after dbname override what the DSN says. */
    const char *const keys[] = {"connect_timeout", "dbname", "application_name", NULL};
    const char *const values[] = {"5", dsn, application_name, NULL};
    PGconn *conn = PQconnectdbParams(keys, values, 1);
    if (conn == NULL || PQstatus(conn) != CONNECTION_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", conn ? PQerrorMessage(conn) : "out of memory");
        PQfinish(conn);
        cr_assert_fail("cannot connect to CG_TEST_PG_DSN: %s", msg);
    }
    PQsetNoticeProcessor(conn, quiet_notice, NULL);
    return conn;
}

void cg_pgtest_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", PQresultErrorMessage(res));
        PQclear(res);
        cr_assert_fail("test SQL failed: %s: %s", sql, msg);
    }
    PQclear(res);
}

long long cg_pgtest_query_int(PGconn *conn, const char *sql, const char *param)
{
    const char *values[] = {param};
    PGresult *res =
        PQexecParams(conn, sql, param ? 1 : 0, NULL, param ? values : NULL, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1 || PQgetisnull(res, 0, 0)) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s",
                 PQresultStatus(res) == PGRES_TUPLES_OK ? "no value" : PQresultErrorMessage(res));
        PQclear(res);
        cr_assert_fail("test query failed: %s: %s", sql, msg);
    }
    long long v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

/* ------------------------------------------------------------------ Redis --- */

static redisContext *redis_connect(const struct cg_redis_addr *addr, int db)
{
    struct timeval tv = {.tv_sec = 2};
    redisContext *c = redisConnectWithTimeout(addr->host, addr->port, tv);
    if (c == NULL || c->err) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s", c ? c->errstr : "out of memory");
        if (c)
            redisFree(c);
        cr_assert_fail("cannot reach Redis at CG_TEST_REDIS_URL: %s", msg);
    }
    redisSetTimeout(c, tv);
    redisReply *r = NULL;
    if (addr->password[0] != '\0') {
        r = addr->user[0] ? redisCommand(c, "AUTH %s %s", addr->user, addr->password)
                          : redisCommand(c, "AUTH %s", addr->password);
        bool ok = r != NULL && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            cr_assert_fail("Redis at CG_TEST_REDIS_URL refused AUTH");
        }
    }
    if (db >= 0) {
        r = redisCommand(c, "SELECT %d", db);
        bool ok = r != NULL && r->type != REDIS_REPLY_ERROR;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static void parse_redis_env(struct cg_redis_addr *addr)
{
    const char *url = required_env("CG_TEST_REDIS_URL", "a Redis server");
    struct cg_err err;
    if (cg_redis_url_parse(url, addr, &err) != CG_OK)
        cr_assert_fail("CG_TEST_REDIS_URL: %s", err.msg);
}

/* Writes s percent-encoded (all but unreserved characters) into out (3 * strlen(s) + 1). */
static void percent_encode(const char *s, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~') {
            *out++ = (char)c;
        } else {
            *out++ = '%';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
    }
    *out = '\0';
}

/* Claims a database other than the URL's (claims live in the URL's database, expire if a
 * test dies) so that concurrently running tests do not share one; falls back to the URL's
 * database when all are taken. */
static void claim_redis_db(struct cg_pgtest *t)
{
    struct cg_redis_addr addr;
    parse_redis_env(&addr);
    redisContext *c = redis_connect(&addr, addr.db);
    t->redis_db = addr.db;
    t->redis_db_claimed = false;
    for (int db = 0; db < REDIS_DB_COUNT && !t->redis_db_claimed; db++) {
        if (db == addr.db)
            continue;
        redisReply *r =
            redisCommand(c, "SET cg:test:db-claim:%d %s NX EX " REDIS_CLAIM_TTL_S, db, t->schema);
        bool claimed = r != NULL && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!claimed)
            continue;
        redisContext *probe = redis_connect(&addr, db);
        if (probe == NULL) { /* fewer databases configured than we assumed */
            r = redisCommand(c, "DEL cg:test:db-claim:%d", db);
            if (r)
                freeReplyObject(r);
            break;
        }
        redisFree(probe);
        t->redis_db = db;
        t->redis_db_claimed = true;
    }
    redisFree(c);

    char user[3 * CG_REDIS_SECRET_MAX + 1], password[3 * CG_REDIS_SECRET_MAX + 1];
    percent_encode(addr.user, user);
    percent_encode(addr.password, password);
    bool v6 = strchr(addr.host, ':') != NULL;
    int n = snprintf(t->redis_url, sizeof t->redis_url, "redis://%s%s%s%s%s%s%s:%d/%d", user,
                     addr.password[0] ? ":" : "", password, addr.password[0] ? "@" : "",
                     v6 ? "[" : "", addr.host, v6 ? "]" : "", addr.port, t->redis_db);
    if (n < 0 || (size_t)n >= sizeof t->redis_url)
        cr_assert_fail("CG_TEST_REDIS_URL is too long");
}

/* Deletes the cache entries of the schema's tenants, then releases the claimed database. */
static void clean_redis(struct cg_pgtest *t, PGconn *admin)
{
    struct cg_redis_addr addr;
    struct cg_err err;
    if (t->redis_url[0] == '\0' || cg_redis_url_parse(t->redis_url, &addr, &err) != CG_OK)
        return;
    redisContext *c = redis_connect(&addr, t->redis_db);
    if (c == NULL)
        return;
    char regclass_sql[128];
    snprintf(regclass_sql, sizeof regclass_sql, "SELECT to_regclass('%s.tenants') IS NOT NULL",
             t->schema);
    PGresult *res = PQexec(admin, regclass_sql);
    bool has_tenants =
        PQresultStatus(res) == PGRES_TUPLES_OK && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    if (has_tenants) {
        char list_sql[128];
        snprintf(list_sql, sizeof list_sql, "SELECT tenant_id::text FROM %s.tenants", t->schema);
        res = PQexec(admin, list_sql);
        for (int i = 0; PQresultStatus(res) == PGRES_TUPLES_OK && i < PQntuples(res); i++) {
            char pattern[80];
            snprintf(pattern, sizeof pattern, "cg:{%s}:*", PQgetvalue(res, i, 0));
            /* A {tenant} hash tag keeps a tenant's keys together; SCAN finds them. */
            char cursor[32] = "0";
            do {
                redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
                if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
                    if (r)
                        freeReplyObject(r);
                    break;
                }
                snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
                for (size_t k = 0; k < r->element[1]->elements; k++) {
                    redisReply *d = redisCommand(c, "DEL %b", r->element[1]->element[k]->str,
                                                 r->element[1]->element[k]->len);
                    if (d)
                        freeReplyObject(d);
                }
                freeReplyObject(r);
            } while (strcmp(cursor, "0") != 0);
        }
        PQclear(res);
    }
    redisFree(c);

    if (t->redis_db_claimed) {
        struct cg_redis_addr base;
        parse_redis_env(&base);
        c = redis_connect(&base, base.db);
        if (c != NULL) {
            redisReply *r = redisCommand(c, "DEL cg:test:db-claim:%d", t->redis_db);
            if (r)
                freeReplyObject(r);
            redisFree(c);
        }
        t->redis_db_claimed = false;
    }
}

static redisContext *test_redis(const struct cg_pgtest *t)
{
    struct cg_redis_addr addr;
    struct cg_err err;
    if (cg_redis_url_parse(t->redis_url, &addr, &err) != CG_OK)
        cr_assert_fail("test redis_url: %s", err.msg);
    redisContext *c = redis_connect(&addr, t->redis_db);
    if (c == NULL)
        cr_assert_fail("cannot select Redis database %d", t->redis_db);
    return c;
}

bool cg_pgtest_redis_exists(const struct cg_pgtest *t, const char *key)
{
    redisContext *c = test_redis(t);
    redisReply *r = redisCommand(c, "EXISTS %s", key);
    bool ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    bool exists = ok && r->integer == 1;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    if (!ok)
        cr_assert_fail("Redis EXISTS failed");
    return exists;
}

long long cg_pgtest_redis_ttl(const struct cg_pgtest *t, const char *key)
{
    redisContext *c = test_redis(t);
    redisReply *r = redisCommand(c, "TTL %s", key);
    bool ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    long long ttl = ok ? r->integer : 0;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    if (!ok)
        cr_assert_fail("Redis TTL failed");
    return ttl;
}

int cg_pgtest_redis_kill_clients(const struct cg_pgtest *t)
{
    if (!t->redis_db_claimed)
        cr_assert_fail("no Redis database of its own for this test (all %d taken?)",
                       REDIS_DB_COUNT);
    redisContext *c = test_redis(t);
    redisReply *me = redisCommand(c, "CLIENT ID");
    redisReply *list = redisCommand(c, "CLIENT LIST TYPE normal");
    bool ok = me != NULL && me->type == REDIS_REPLY_INTEGER && list != NULL &&
              list->type == REDIS_REPLY_STRING;
    int killed = 0;
    char db_field[24];
    snprintf(db_field, sizeof db_field, " db=%d ", t->redis_db);
    /* One line per client: "id=7 addr=... db=3 ..." */
    for (char *line = ok ? list->str : NULL; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');
        if (end != NULL)
            *end = '\0';
        long long id = strncmp(line, "id=", 3) == 0 ? strtoll(line + 3, NULL, 10) : -1;
        if (id >= 0 && id != me->integer && strstr(line, db_field) != NULL) {
            redisReply *r = redisCommand(c, "CLIENT KILL ID %lld", id);
            if (r != NULL && r->type == REDIS_REPLY_INTEGER)
                killed += (int)r->integer;
            if (r)
                freeReplyObject(r);
        }
        line = end ? end + 1 : NULL;
    }
    if (me)
        freeReplyObject(me);
    if (list)
        freeReplyObject(list);
    redisFree(c);
    if (!ok)
        cr_assert_fail("Redis CLIENT ID / CLIENT LIST failed");
    return killed;
}

/* ------------------------------------------------------------------ setup --- */

void cg_pgtest_setup(struct cg_pgtest *t)
{
    memset(t, 0, sizeof *t);
    const char *dsn = required_env("CG_TEST_PG_DSN", "a PostgreSQL server");
    (void)required_env("CG_TEST_REDIS_URL", "a Redis server");
    if (strlen(dsn) >= sizeof t->base_dsn)
        cr_assert_fail("CG_TEST_PG_DSN is too long");
    snprintf(t->base_dsn, sizeof t->base_dsn, "%s", dsn);

    uint8_t rnd[8];
    if (cg_random_bytes(rnd, sizeof rnd) != CG_OK)
        cr_assert_fail("no random bytes for the schema name");
    char hex[17];
    cg_hex_encode(rnd, sizeof rnd, hex);
    snprintf(t->schema, sizeof t->schema, "cg_test_%s", hex);

    /* The schema name is [a-z0-9_], so it needs no quoting in options or identifiers. */
    if (is_uri(dsn))
        snprintf(t->dsn, sizeof t->dsn, "%s%coptions=-csearch_path%%3D%s&application_name=%s", dsn,
                 strchr(dsn, '?') ? '&' : '?', t->schema, t->schema);
    else
        snprintf(t->dsn, sizeof t->dsn, "%s options='-csearch_path=%s' application_name='%s'", dsn,
                 t->schema, t->schema);

    PGconn *admin = connect_dsn(t->base_dsn, "cg_test_admin");
    char sql[96];
    snprintf(sql, sizeof sql, "CREATE SCHEMA %s", t->schema);
    cg_pgtest_exec(admin, sql);
    PQfinish(admin);

    claim_redis_db(t);
}

void cg_pgtest_setup_migrated(struct cg_pgtest *t)
{
    cg_pgtest_setup(t);
    struct cg_store_opts opts = cg_pgtest_store_opts(t);
    struct cg_store *store = cg_store_new(&opts);
    cr_assert(store != NULL, "out of memory");
    struct cg_err err;
    int applied = 0;
    cg_status rc = cg_store_migrate(store, &applied, &err);
    cg_store_free(store);
    if (rc != CG_OK)
        cr_assert_fail("migrating the test schema failed: %s", cg_err_text(&err));
}

void cg_pgtest_teardown(struct cg_pgtest *t)
{
    if (t->schema[0] == '\0')
        return;
    PGconn *admin = connect_dsn(t->base_dsn, "cg_test_admin");
    clean_redis(t, admin);
    char sql[96];
    snprintf(sql, sizeof sql, "DROP SCHEMA IF EXISTS %s CASCADE", t->schema);
    cg_pgtest_exec(admin, sql);
    PQfinish(admin);
    t->schema[0] = '\0';
}

struct cg_store_opts cg_pgtest_store_opts(const struct cg_pgtest *t)
{
    struct cg_store_opts opts = {
        .pg_dsn = t->dsn,
        .redis_url = t->redis_url,
        .pg_connect_timeout_ms = 2000,
        .pg_statement_timeout_ms = 5000,
        .redis_timeout_ms = 200,
        .key_cache_ttl_s = 60,
    };
    return opts;
}

PGconn *cg_pgtest_connect(const struct cg_pgtest *t)
{
    char name[64];
    snprintf(name, sizeof name, "%s_admin", t->schema);
    return connect_dsn(t->dsn, name);
}

int cg_pgtest_kill_backends(const struct cg_pgtest *t)
{
    PGconn *admin = cg_pgtest_connect(t);
    /* pg_terminate_backend(pid, timeout) returns once the process has exited. */
    long long n = cg_pgtest_query_int(
        admin,
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        " WHERE application_name = $1 AND pid <> pg_backend_pid()) AS killed",
        t->schema);
    PQfinish(admin);
    return (int)n;
}

int cg_pgtest_wait_lock_waiter(PGconn *admin, const struct cg_pgtest *t, int not_pid,
                               int timeout_ms)
{
    char not_pid_text[16];
    snprintf(not_pid_text, sizeof not_pid_text, "%d", not_pid);
    const char *values[] = {t->schema, not_pid_text};
    int64_t until = cg_mono_ms() + timeout_ms;
    while (cg_mono_ms() < until) {
        PGresult *res = PQexecParams(admin,
                                     "SELECT pid FROM pg_stat_activity WHERE application_name = $1"
                                     " AND wait_event_type = 'Lock' AND pid <> $2::int LIMIT 1",
                                     2, NULL, values, NULL, NULL, 0);
        int pid = 0;
        if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
            pid = (int)strtol(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
        if (pid != 0)
            return pid;
        /* Polling a condition the server reports; nothing here depends on the interval. */
        struct timespec pause = {.tv_nsec = POLL_INTERVAL_NS};
        nanosleep(&pause, NULL);
    }
    return 0;
}

void cg_pgtest_kill_pid(PGconn *admin, int pid)
{
    char pid_text[16];
    snprintf(pid_text, sizeof pid_text, "%d", pid);
    long long ok =
        cg_pgtest_query_int(admin, "SELECT pg_terminate_backend($1::int, 10000)::int", pid_text);
    cr_assert(ok == 1, "backend %d did not terminate", pid);
}

int cg_pgtest_closed_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0, "socket failed");
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "bind failed");
    cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0, "getsockname failed");
    close(fd);
    return ntohs(sa.sin_port);
}

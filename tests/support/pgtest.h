/* pgtest.h - real PostgreSQL and Redis for integration tests, isolated per test.
 *
 * The servers come from the environment: CG_TEST_PG_DSN (libpq URI or keyword string) and
 * CG_TEST_REDIS_URL (redis://host:port[/db]); `make test` starts throwaway ones and exports
 * both. A missing variable or an unreachable server fails the test with a message saying
 * so: integration tests never skip silently.
 *
 * Each test gets a fresh schema named cg_test_<16 hex> (the DSN it gets selects it through
 * search_path and uses the schema name as application_name, so that a test can find its
 * own backends in pg_stat_activity) and, when one is free, a Redis database of its own;
 * cache keys are tenant-scoped and tenant ids are random, so tests never share entries
 * either way. Teardown drops the schema and deletes the cache entries of its tenants.
 *
 * The helpers fail the running Criterion test (cr_assert_fail) on any error. They are
 * meant for the test's main thread, except where a comment says otherwise.
 */
#ifndef CG_TESTS_PGTEST_H
#define CG_TESTS_PGTEST_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "store/store.h"

struct cg_pgtest {
    char schema[32];      /* cg_test_<16 hex> */
    char base_dsn[1024];  /* CG_TEST_PG_DSN as given */
    char dsn[2048];       /* base_dsn selecting the schema, application_name = schema */
    char redis_url[1700]; /* CG_TEST_REDIS_URL with this test's database */
    int redis_db;         /* the database in redis_url */
    bool redis_db_claimed;
};

/* Reads the environment, creates the schema and picks a Redis database. */
void cg_pgtest_setup(struct cg_pgtest *t);

/* Like cg_pgtest_setup, then applies the migrations to the schema with a cg_store. */
void cg_pgtest_setup_migrated(struct cg_pgtest *t);

/* Deletes the cache entries of the schema's tenants, drops the schema and releases the
 * Redis database. Safe after a failed or partial setup, and twice. */
void cg_pgtest_teardown(struct cg_pgtest *t);

/* Store options for this test: its DSN and Redis URL, connect timeout 2 s, statement
 * timeout 5 s, Redis timeout 200 ms, key cache TTL 60 s. The strings are borrowed from t. */
struct cg_store_opts cg_pgtest_store_opts(const struct cg_pgtest *t);

/* An administrative connection to the test's schema, with application_name
 * "<schema>_admin" so that cg_pgtest_kill_backends spares it. The caller PQfinishes it.
 * Thread-safe (each thread its own connection). */
PGconn *cg_pgtest_connect(const struct cg_pgtest *t);

/* Runs sql (no parameters) and fails the test unless it succeeds. */
void cg_pgtest_exec(PGconn *conn, const char *sql);

/* Runs sql with up to one text parameter (param may be NULL for none) and returns the
 * first column of the first row as an integer (a NULL or a missing row fails the test). */
long long cg_pgtest_query_int(PGconn *conn, const char *sql, const char *param);

/* Terminates every backend whose application_name is the test's schema (the stores' own
 * connections) and waits until they have exited. Returns how many there were. */
int cg_pgtest_kill_backends(const struct cg_pgtest *t);

/* Waits up to timeout_ms for a backend of the test's stores, other than not_pid, to be
 * waiting on a lock; returns its pid, 0 on timeout. */
int cg_pgtest_wait_lock_waiter(PGconn *admin, const struct cg_pgtest *t, int not_pid,
                               int timeout_ms);

/* Terminates one backend and waits until it has exited. */
void cg_pgtest_kill_pid(PGconn *admin, int pid);

/* Whether key exists in the test's Redis database / its TTL in seconds (-2: no key). */
bool cg_pgtest_redis_exists(const struct cg_pgtest *t, const char *key);
long long cg_pgtest_redis_ttl(const struct cg_pgtest *t, const char *key);

/* Closes the connections of every other Redis client using the test's database (the
 * stores' cache connections) with CLIENT KILL. Returns how many. Fails the test when the
 * test has no database of its own (other tests' clients would be hit). */
int cg_pgtest_redis_kill_clients(const struct cg_pgtest *t);

/* A TCP port on 127.0.0.1 that nothing listens on (bound, then closed). */
int cg_pgtest_closed_port(void);

#endif

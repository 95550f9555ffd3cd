/* server_proc.h - the real ctxguard binary as a child process, for end-to-end tests.
 *
 * Each server gets its own PostgreSQL schema and Redis database (pgtest.h), listens on an
 * ephemeral loopback port (read back from its "listening" log line) and logs at debug
 * level into a buffer the test can search. The helpers fail the running Criterion test on
 * any error; use them from the test's main thread.
 */
#ifndef CG_TESTS_SERVER_PROC_H
#define CG_TESTS_SERVER_PROC_H

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cg_client.h"
#include "pgtest.h"

#define CG_TEST_ADMIN_KEY "e2e-admin-key-0123456789abcdef"

struct cg_test_server {
    struct cg_pgtest db;
    pid_t pid;
    int port;
    char target[64];
    int log_fd;
    pthread_t reader;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    char *log;
    size_t log_len;
    bool log_eof;
};

/* Starts the server with CTXGUARD_* defaults for tests plus extra_env ("KEY=VALUE" strings,
 * NULL-terminated, may be NULL), waits for its port, then for SERVING (Health.Watch). */
void cg_test_server_start(struct cg_test_server *s, const char *const *extra_env);

/* The same, waiting for SERVING only when wait_serving (a server whose PostgreSQL is
 * unreachable never gets there). */
void cg_test_server_start_ex(struct cg_test_server *s, const char *const *extra_env,
                             bool wait_serving);

/* Sends sig (0: SIGTERM), waits up to timeout_ms for the exit and returns the exit status
 * (128+signal when killed by one); fails the test when it does not exit in time (after
 * SIGKILLing it). Frees the log and drops the schema. */
int cg_test_server_stop(struct cg_test_server *s, int sig, int timeout_ms);

/* Waits up to timeout_ms for needle to appear in the server's log. */
bool cg_test_server_wait_log(struct cg_test_server *s, const char *needle, int timeout_ms);

/* A client for the server with the given bearer key (NULL: none). Caller frees. */
struct cg_client *cg_test_client(const struct cg_test_server *s, const char *key);

/* Creates a tenant and a key through AdminService; fills tenant_id (37 bytes) and
 * key (128 bytes). */
void cg_test_make_tenant(const struct cg_test_server *s, const char *name, char *tenant_id,
                         char *key);

/* Milliseconds of the monotonic clock. */
double cg_test_now_ms(void);

#endif

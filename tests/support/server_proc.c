/* server_proc.c - spawn, watch and stop the server binary for end-to-end tests. */
#include "server_proc.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctxguard/v1/admin.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#define LOG_CAP (64u << 20)

extern char **environ;

double cg_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Drains the server's stderr into s->log so the pipe never fills. */
static void *reader_main(void *arg)
{
    struct cg_test_server *s = arg;
    char buf[8192];
    for (;;) {
        ssize_t n = read(s->log_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        pthread_mutex_lock(&s->lock);
        if (n <= 0) {
            s->log_eof = true;
            pthread_cond_broadcast(&s->changed);
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        if (s->log_len + (size_t)n < LOG_CAP) {
            char *grown = realloc(s->log, s->log_len + (size_t)n + 1);
            if (grown != NULL) {
                s->log = grown;
                memcpy(s->log + s->log_len, buf, (size_t)n);
                s->log_len += (size_t)n;
                s->log[s->log_len] = '\0';
            }
        }
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->lock);
    }
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

bool cg_test_server_wait_log(struct cg_test_server *s, const char *needle, int timeout_ms)
{
    struct timespec until;
    deadline_in(&until, timeout_ms);
    pthread_mutex_lock(&s->lock);
    bool found;
    while (!(found = s->log != NULL && strstr(s->log, needle) != NULL) && !s->log_eof)
        if (pthread_cond_timedwait(&s->changed, &s->lock, &until) == ETIMEDOUT)
            break;
    if (!found)
        found = s->log != NULL && strstr(s->log, needle) != NULL;
    pthread_mutex_unlock(&s->lock);
    return found;
}

static int read_port(struct cg_test_server *s, int timeout_ms)
{
    if (!cg_test_server_wait_log(s, "msg=listening", timeout_ms))
        return 0;
    pthread_mutex_lock(&s->lock);
    const char *p = strstr(strstr(s->log, "msg=listening"), " port=");
    int port = p ? atoi(p + 6) : 0;
    pthread_mutex_unlock(&s->lock);
    return port;
}

struct cg_client *cg_test_client(const struct cg_test_server *s, const char *key)
{
    struct cg_client_opts o;
    cg_client_opts_init(&o);
    o.target = s->target;
    o.bearer_key = key;
    struct cg_err err;
    struct cg_client *c = cg_client_new(&o, &err);
    cr_assert_not_null(c, "client: %s", err.msg);
    return c;
}

static void wait_until_serving(struct cg_test_server *s, int timeout_ms)
{
    struct cg_client *c = cg_test_client(s, NULL);
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    struct cg_client_call_opts co = {.timeout_ms = timeout_ms, .wait_for_ready = true};
    struct cg_client_stream *stream = NULL;
    struct cg_client_status st;
    cr_assert_eq(
        cg_client_stream_open(c, "/grpc.health.v1.Health/Watch", &req.base, &co, &stream, &st),
        CG_OK, "%s", st.message);
    double until = cg_test_now_ms() + timeout_ms;
    bool serving = false;
    while (!serving && cg_test_now_ms() < until) {
        ProtobufCMessage *m = NULL;
        cg_status rc =
            cg_client_stream_read(stream, (int)(until - cg_test_now_ms()) + 1,
                                  &grpc__health__v1__health_check_response__descriptor, &m, &st);
        if (rc != CG_OK)
            break;
        serving = ((Grpc__Health__V1__HealthCheckResponse *)m)->status ==
                  GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        protobuf_c_message_free_unpacked(m, NULL);
    }
    cg_client_stream_free(stream);
    cg_client_free(c);
    cr_assert(serving, "server did not become SERVING within %d ms; log:\n%s", timeout_ms,
              s->log ? s->log : "");
}

void cg_test_server_start(struct cg_test_server *s, const char *const *extra_env)
{
    cg_test_server_start_ex(s, extra_env, true);
}

void cg_test_server_start_ex(struct cg_test_server *s, const char *const *extra_env,
                             bool wait_serving)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    cg_pgtest_setup(&s->db);

    char dsn[2200], redis[2200];
    snprintf(dsn, sizeof dsn, "CTXGUARD_PG_DSN=%s", s->db.dsn);
    snprintf(redis, sizeof redis, "CTXGUARD_REDIS_URL=%s", s->db.redis_url);
    const char *env[64];
    int n = 0;
    /* Keep PATH and the like, drop any CTXGUARD_ the test runner may carry. */
    for (char **e = environ; *e && n < 40; e++)
        if (strncmp(*e, "CTXGUARD_", 9) != 0)
            env[n++] = *e;
    env[n++] = dsn;
    env[n++] = redis;
    env[n++] = "CTXGUARD_LISTEN=127.0.0.1:0";
    env[n++] = "CTXGUARD_ADMIN_KEY=" CG_TEST_ADMIN_KEY;
    env[n++] = "CTXGUARD_LOG_LEVEL=debug";
    env[n++] = "CTXGUARD_WORKERS=2";
    env[n++] = "CTXGUARD_IO_THREADS=4";
    env[n++] = "CTXGUARD_HEALTH_INTERVAL_MS=200";
    for (const char *const *x = extra_env; x && *x && n < 62; x++)
        env[n++] = *x;
    env[n] = NULL;

    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(fds[1], 2);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char *argv[] = {CG_SERVER_BIN, NULL};
        execve(CG_SERVER_BIN, argv, (char *const *)env);
        _exit(127);
    }
    close(fds[1]);
    s->pid = pid;
    s->log_fd = fds[0];
    cr_assert_eq(pthread_create(&s->reader, NULL, reader_main, s), 0);
    s->port = read_port(s, 15000);
    cr_assert_gt(s->port, 0, "no listening line; log:\n%s", s->log ? s->log : "");
    snprintf(s->target, sizeof s->target, "127.0.0.1:%d", s->port);
    if (wait_serving)
        wait_until_serving(s, 15000);
}

int cg_test_server_stop(struct cg_test_server *s, int sig, int timeout_ms)
{
    int status = -1;
    if (s->pid > 0) {
        kill(s->pid, sig ? sig : SIGTERM);
        /* The reader sees EOF when the process (and so its stderr) is gone. */
        struct timespec until;
        deadline_in(&until, timeout_ms);
        pthread_mutex_lock(&s->lock);
        while (!s->log_eof)
            if (pthread_cond_timedwait(&s->changed, &s->lock, &until) == ETIMEDOUT)
                break;
        bool exited = s->log_eof;
        pthread_mutex_unlock(&s->lock);
        if (!exited)
            kill(s->pid, SIGKILL);
        int wstatus = 0;
        waitpid(s->pid, &wstatus, 0);
        status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
        s->pid = 0;
        pthread_join(s->reader, NULL);
        close(s->log_fd);
        cr_assert(exited, "server did not exit within %d ms of signal %d", timeout_ms, sig);
    }
    free(s->log);
    s->log = NULL;
    cg_pgtest_teardown(&s->db);
    return status;
}

void cg_test_make_tenant(const struct cg_test_server *s, const char *name, char *tenant_id,
                         char *key)
{
    struct cg_client *c = cg_test_client(s, CG_TEST_ADMIN_KEY);
    struct cg_client_status st;
    Ctxguard__V1__CreateTenantRequest treq = CTXGUARD__V1__CREATE_TENANT_REQUEST__INIT;
    treq.name = (char *)name;
    ProtobufCMessage *resp = NULL;
    cr_assert_eq(cg_client_unary(c, "/ctxguard.v1.AdminService/CreateTenant", &treq.base,
                                 &ctxguard__v1__create_tenant_response__descriptor, &resp, &st),
                 CG_OK, "CreateTenant: %s", st.message);
    snprintf(tenant_id, 37, "%s", ((Ctxguard__V1__CreateTenantResponse *)resp)->tenant->tenant_id);
    protobuf_c_message_free_unpacked(resp, NULL);

    Ctxguard__V1__CreateApiKeyRequest kreq = CTXGUARD__V1__CREATE_API_KEY_REQUEST__INIT;
    kreq.tenant_id = tenant_id;
    cr_assert_eq(cg_client_unary(c, "/ctxguard.v1.AdminService/CreateApiKey", &kreq.base,
                                 &ctxguard__v1__create_api_key_response__descriptor, &resp, &st),
                 CG_OK, "CreateApiKey: %s", st.message);
    snprintf(key, 128, "%s", ((Ctxguard__V1__CreateApiKeyResponse *)resp)->secret);
    protobuf_c_message_free_unpacked(resp, NULL);
    cg_client_free(c);
}

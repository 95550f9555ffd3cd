/* bench_budget.c - load generator for the budget RPCs whose requests change from call to
 * call (Reserve then Commit of the reservation it got), and the setup of the budgets the
 * benchmarks run against.
 *
 *   bench_budget setup  TARGET KEY SESSION            tenant, session and session/t budgets
 *   bench_budget reserve-commit TARGET KEY SESSION THREADS SECONDS
 *
 * reserve-commit prints one line: `pairs=N seconds=S pairs_per_s=R p50_us=A p99_us=B errors=E
 * client_cpu_ms=C` where a pair is one Reserve and its Commit, both acknowledged (so both
 * committed), and C is this process's own CPU time (user + system).
 * Each thread has its own client (channel); each uses its own task under SESSION, so the
 * figure is the durable write path, not contention on one row. With BENCH_ALLOCATE=1 in the
 * environment each thread's task is allocated from the session (allocate_from_parent), so
 * every write also moves the session's allocated_tokens (migration 0013's trigger).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cg_client.h"
#include "ctxguard/v1/budget.pb-c.h"

static const char *target, *key, *session;
static int seconds;
static atomic_long pairs, errors;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static struct cg_client *client(void)
{
    struct cg_client_opts o;
    cg_client_opts_init(&o);
    o.target = target;
    o.bearer_key = key;
    struct cg_err err;
    struct cg_client *c = cg_client_new(&o, &err);
    if (c == NULL) {
        fprintf(stderr, "bench_budget: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static int set_budget(struct cg_client *c, const char *sess, const char *task, int64_t limit)
{
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = (char *)sess;
    scope.task_id = (char *)task;
    Ctxguard__V1__BudgetSettings settings = CTXGUARD__V1__BUDGET_SETTINGS__INIT;
    settings.limit_tokens = limit;
    const char *alloc = getenv("BENCH_ALLOCATE");
    settings.allocate_from_parent = task[0] != '\0' && alloc != NULL && strcmp(alloc, "1") == 0;
    Ctxguard__V1__SetBudgetRequest req = CTXGUARD__V1__SET_BUDGET_REQUEST__INIT;
    req.scope = &scope;
    req.settings = &settings;
    ProtobufCMessage *resp = NULL;
    struct cg_client_status st;
    if (cg_client_unary(c, "/ctxguard.v1.BudgetService/SetBudget", &req.base,
                        &ctxguard__v1__set_budget_response__descriptor, &resp, &st) != CG_OK) {
        fprintf(stderr, "bench_budget: SetBudget %s/%s: %s %s\n", sess, task, st.name,
                st.message);
        return 1;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

struct worker {
    pthread_t thread;
    int index;
    double *lat; /* pair latencies, µs */
    size_t n, cap;
};

static void *run(void *arg)
{
    struct worker *w = arg;
    struct cg_client *c = client();
    char task[32];
    snprintf(task, sizeof task, "bench-%d", w->index);
    if (set_budget(c, session, task, 1000000000000LL) != 0)
        exit(1);
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = (char *)session;
    scope.task_id = task;
    double until = now_us() + seconds * 1e6;
    while (now_us() < until) {
        double t0 = now_us();
        Ctxguard__V1__ReserveRequest rreq = CTXGUARD__V1__RESERVE_REQUEST__INIT;
        rreq.scope = &scope;
        rreq.tokens = 100;
        rreq.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
        ProtobufCMessage *resp = NULL;
        struct cg_client_status st;
        if (cg_client_unary(c, "/ctxguard.v1.BudgetService/Reserve", &rreq.base,
                            &ctxguard__v1__reserve_response__descriptor, &resp, &st) != CG_OK) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        Ctxguard__V1__ReserveResponse *r = (Ctxguard__V1__ReserveResponse *)resp;
        Ctxguard__V1__TokenUsage usage = CTXGUARD__V1__TOKEN_USAGE__INIT;
        usage.input_tokens = 80;
        usage.output_tokens = 10;
        Ctxguard__V1__CommitRequest creq = CTXGUARD__V1__COMMIT_REQUEST__INIT;
        creq.reservation_id = r->reservation->reservation_id;
        creq.usage = &usage;
        ProtobufCMessage *cresp = NULL;
        cg_status rc = cg_client_unary(c, "/ctxguard.v1.BudgetService/Commit", &creq.base,
                                       &ctxguard__v1__commit_response__descriptor, &cresp, &st);
        protobuf_c_message_free_unpacked(resp, NULL);
        if (rc != CG_OK) {
            atomic_fetch_add(&errors, 1);
            continue;
        }
        protobuf_c_message_free_unpacked(cresp, NULL);
        atomic_fetch_add(&pairs, 1);
        if (w->n == w->cap) {
            w->cap = w->cap ? w->cap * 2 : 4096;
            w->lat = realloc(w->lat, w->cap * sizeof *w->lat);
            if (w->lat == NULL)
                exit(1);
        }
        w->lat[w->n++] = now_us() - t0;
    }
    cg_client_free(c);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "setup") == 0) {
        target = argv[2];
        key = argv[3];
        struct cg_client *c = client();
        int rc = set_budget(c, "", "", 1000000000000000LL) ||
                 set_budget(c, argv[4], "", 100000000000000LL) ||
                 set_budget(c, argv[4], "t", 1000000000000LL);
        cg_client_free(c);
        return rc;
    }
    if (argc < 7 || strcmp(argv[1], "reserve-commit") != 0) {
        fprintf(stderr, "usage: bench_budget setup TARGET KEY SESSION\n"
                        "       bench_budget reserve-commit TARGET KEY SESSION THREADS SECONDS\n");
        return 2;
    }
    target = argv[2];
    key = argv[3];
    session = argv[4];
    int threads = atoi(argv[5]);
    seconds = atoi(argv[6]);
    if (threads < 1 || threads > 512 || seconds < 1 || seconds > 600)
        return 2;
    cg_client_set_grpc_logging(false);
    struct worker *w = calloc((size_t)threads, sizeof *w);
    double t0 = now_us();
    for (int i = 0; i < threads; i++) {
        w[i].index = i;
        pthread_create(&w[i].thread, NULL, run, &w[i]);
    }
    size_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        total += w[i].n;
    }
    double elapsed = (now_us() - t0) / 1e6;
    double *all = malloc((total ? total : 1) * sizeof *all);
    size_t k = 0;
    for (int i = 0; i < threads; i++) {
        memcpy(all + k, w[i].lat, w[i].n * sizeof *all);
        k += w[i].n;
        free(w[i].lat);
    }
    qsort(all, total, sizeof *all, cmp_double);
    double p50 = total ? all[total / 2] : 0, p99 = total ? all[(size_t)(total * 0.99)] : 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu_ms = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
    printf("pairs=%ld seconds=%.1f pairs_per_s=%.0f p50_us=%.0f p99_us=%.0f errors=%ld"
           " client_cpu_ms=%.0f\n",
           atomic_load(&pairs), elapsed, atomic_load(&pairs) / elapsed, p50, p99,
           atomic_load(&errors), cpu_ms);
    free(all);
    free(w);
    return 0;
}

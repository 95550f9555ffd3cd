/* server.c - gRPC C core server: slots, per-call contexts, pool hand-off, timers, streams.
 *
 * Life of a unary call (all on the thread of the queue it arrived on):
 *   slot fires -> call made, slot re-posted -> RECV_CLOSE_ON_SERVER started (tells us when
 *   the caller cancels) -> handler runs inline, or on the pool which then wakes this queue
 *   with an empty batch -> reply sent now or when its timer fires -> freed when no batch,
 *   pool job, timer or wake-up refers to it any more.
 */
#include "transport/server.h"

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "base/arena.h"
#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "base/metrics.h"
#include "base/pool.h"
#include "base/timerheap.h"
#include "core/siphash.h"
#include "llm/llm.h"
#include "rpc/rpc.h"
#include "service/forecast.h"
#include "service/gauges.h"
#include "service/health.h"
#include "service/meters.h"
#include "service/notify.h"
#include "service/sweep.h"
#include "service/watch.h"
#include "store/store.h"
#include "transport/grpc_runtime.h"
#include "transport/http.h"
#include "transport/http_api.h"
#include "transport/http_console.h"
#include "transport/status_details.h"

#define GENERIC_SLOTS 8
#define ARENA_FIRST_BLOCK 8192
#define RID_MAX 64
#define AUTH_MAX 1024
#define POOL_QUEUE_PER_THREAD 256
/* Stream opens waiting per thread of the open lane: beyond that an open is shed at once, so
 * that an accepted one waits for at most this many opens (a few ms each), never for the
 * pool's blocking work. */
#define OPEN_QUEUE_PER_THREAD 64

struct worker;
struct call;

/* Every completion-queue tag points at one of these; fn knows the enclosing struct. */
struct tag {
    void (*fn)(struct worker *w, struct tag *t, bool ok);
};

struct slot {
    struct tag tag;
    const struct cg_rpc_method *method; /* NULL: the generic slot for unknown methods */
    void *handle;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md;
    grpc_byte_buffer *payload;
    grpc_call_details details;
};

struct worker {
    struct cg_server *srv;
    int index;
    uint32_t metrics_slot; /* this thread's own (base/metrics.h "Shards") */
    pthread_t thread;
    grpc_completion_queue *cq;
    struct cg_timer_heap timers;
    struct cg_rpc_env env; /* no store on these threads */
    uint64_t rid_key[2];   /* new_request_id's, drawn once */
    uint64_t rid_count;
};

#define GRPC_CODES 17

#define DECISIONS 5 /* ctxguard.v1.Decision values */

/* One method's handles of the gRPC server families (as the Go and Java interceptors name
 * them) and of the budget decisions: started made at start, the others on the first call
 * that needs them, then kept. */
struct method_metrics {
    struct cg_metric *started;
    _Atomic(struct cg_metric *) seconds;
    _Atomic(struct cg_metric *) handled[GRPC_CODES];
    _Atomic(struct cg_metric *) decisions[DECISIONS]; /* ctxguard_budget_decisions_total */
    _Atomic(struct cg_metric *) delay;                /* ctxguard_backpressure_delay_seconds */
    const char *type; /* grpc_type: "unary", "server_stream", "bidi_stream" */
    const char *name; /* grpc_method: the path's last part */
};

struct cg_server {
    struct cg_app *app;          /* borrowed: what the process consists of (app/app.h) */
    const struct cg_config *cfg; /* app's */
    struct cg_health *health;    /* app's */
    grpc_server *server;
    int port;
    int nworkers;
    struct worker *workers;
    const struct cg_rpc_method *methods;
    size_t nmethods;
    void **handles;
    struct method_metrics *metrics; /* one per method, in the table's order */
    struct cg_metric_family *started_family, *handled_family, *seconds_family;
    struct cg_metric_family *decisions_family, *delay_family;
    atomic_long streams_open; /* server-stream calls from arrival until freed */
    struct cg_http *http;     /* the HTTP listener; NULL when http_listen is empty */
    struct cg_pool *pool;
    /* The open lane: the opens of blocking server streams (WatchUsage), on threads and
     * stores of their own, so that an open never queues behind the pool's blocking work. */
    struct cg_pool *open_pool;
    atomic_bool stopping;

    /* Calls alive anywhere and request slots posted; shutdown waits for both to reach
     * zero: then every call that reached the server has been answered. */
    pthread_mutex_t live_lock;
    pthread_cond_t live_zero;
    long live_calls;
    long live_slots;

    /* Open server streams, woken when the state they watch changes. */
    pthread_mutex_t streams_lock;
    struct call *streams;

    /* WatchUsage's delivery: one LISTEN connection, one thread (service/watch.h cg_events_step). */
    pthread_t events;
    bool events_started;
    atomic_bool events_stop;

    /* The PostgreSQL probe for the health service (health_main, `prober`) and the
     * sweeper (monitor_main): two threads, each with its own store, sharing the stop flag. */
    pthread_t prober;
    bool prober_started;
    pthread_t monitor;
    bool monitor_started;
    /* The JSON API's route on the HTTP listener (transport/http_api.h). */
    struct cg_http_api http_api;
    bool http_api_started; /* not drained yet */
    bool http_api_inited;  /* not freed yet (cg_server_free) */
    /* The JSON API whose event streams wake_streams wakes: set once it is made, read by
     * any thread until cg_server_free. */
    _Atomic(struct cg_http_api *) http_wakes;
    struct cg_rpc_env http_env; /* its streams' polls (no store, like a queue thread) */
    struct cg_http_route http_routes[2];
    /* The notifiers (notify_main, notify_threads of them): webhook deliveries, each on a
     * store of its own; same stop flag. */
    pthread_t notifiers[CG_NOTIFY_THREADS_MAX];
    bool notifier_started[CG_NOTIFY_THREADS_MAX];
    pthread_mutex_t monitor_lock;
    pthread_cond_t monitor_cond;
    bool monitor_stop;
};

enum call_phase { PHASE_NEW, PHASE_POOL, PHASE_TIMER, PHASE_STREAMING, PHASE_DONE };

struct call {
    struct worker *w;
    const struct cg_rpc_method *method;
    grpc_call *gcall;
    int pending; /* grpc batches and pool jobs outstanding */
    enum call_phase phase;
    int cancelled;
    bool closed;
    bool initial_md_sent;
    bool sending;
    bool finish_after_send; /* poll said this message is the stream's last */
    bool replied;           /* the final status went out */
    bool metered;           /* grpc_server_started_total has it: handled_total will too */
    bool counted;           /* grpc_server_handled_total has it */
    bool in_streams_open;   /* counted in srv->streams_open */
    const char *detail;     /* the status message, for the log line (static or in rc.err) */

    struct tag close_tag, status_tag, pool_tag, msg_tag, recv_tag, wake_tag;
    struct cg_timer timer;
    struct cg_job job;

    struct cg_arena *arena;     /* the call's: request, metadata copies, stream request */
    struct cg_arena *msg_arena; /* streams: one message's worth, reset for each */
    struct cg_rpc_call rc;
    char rid[RID_MAX + 1];
    char path[256];
    const uint8_t *req;
    size_t req_len;
    uint8_t *resp;
    size_t resp_len;
    cg_status st;

    grpc_metadata_array md;
    grpc_metadata initial_md[1];
    grpc_byte_buffer *send_bb;
    grpc_byte_buffer *recv_bb;
    grpc_slice status_details;
    bool has_status_details;
    grpc_metadata trailing_md[1]; /* grpc-status-details-bin of an error reply */
    bool has_trailing_md;
    int64_t start_ns;
    int64_t deadline_ns;     /* the call's deadline (max_call_ms or the caller's), now_ns clock */
    bool server_cap_binds;   /* max_call_ms, not the caller, sets deadline_ns */
    bool held_past_deadline; /* the timer fires at the deadline, not at the hold's end */

    /* server streams */
    ProtobufCMessage *stream_request;
    struct cg_rpc_stream stream; /* the method's state between polls (rpc.h) */
    atomic_bool wake_posted;
    bool registered;
    struct call *next_stream, *prev_stream;
};

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* ---------------------------------------------------------------- time ------------ */

static int64_t now_ns(void)
{
    gpr_timespec t = gpr_now(GPR_CLOCK_MONOTONIC);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static gpr_timespec ns_to_timespec(int64_t ns)
{
    gpr_timespec t;
    t.tv_sec = ns / 1000000000;
    t.tv_nsec = (int32_t)(ns % 1000000000);
    t.clock_type = GPR_CLOCK_MONOTONIC;
    return t;
}

/* ---------------------------------------------------------------- live calls ------ */

static void live_count(struct cg_server *srv, long *counter, long n)
{
    pthread_mutex_lock(&srv->live_lock);
    *counter += n;
    if (srv->live_calls == 0 && srv->live_slots == 0)
        pthread_cond_broadcast(&srv->live_zero);
    pthread_mutex_unlock(&srv->live_lock);
}

static void live_add(struct cg_server *srv, long n)
{
    live_count(srv, &srv->live_calls, n);
}

/* Waits until no call is alive and no slot is posted, at most until `until` (CLOCK_MONOTONIC;
 * NULL: no limit). Returns whether that happened. */
static bool wait_idle(struct cg_server *srv, const struct timespec *until)
{
    bool idle;
    pthread_mutex_lock(&srv->live_lock);
    while (!(idle = srv->live_calls == 0 && srv->live_slots == 0)) {
        if (until == NULL)
            pthread_cond_wait(&srv->live_zero, &srv->live_lock);
        else if (pthread_cond_timedwait(&srv->live_zero, &srv->live_lock, until) != 0)
            break;
    }
    idle = srv->live_calls == 0 && srv->live_slots == 0;
    pthread_mutex_unlock(&srv->live_lock);
    return idle;
}

/* ---------------------------------------------------------------- metrics --------- */

static double read_pool_queued(void *ctx)
{
    return ctx != NULL ? (double)cg_pool_queued(ctx) : 0.0;
}

static double read_event_streams(void *ctx)
{
    return (double)cg_http_api_streams(ctx);
}

static double read_streams_open(void *ctx)
{
    struct cg_server *srv = ctx;
    return (double)atomic_load_explicit(&srv->streams_open, memory_order_relaxed);
}

/* Figures read when scraped: the pools' queues and the open streams. */
static cg_status gauge_metrics(struct cg_server *srv, struct cg_err *err)
{
    struct cg_metrics *reg = srv->app->metrics;
    cg_status st = cg_metrics_callback(reg, "ctxguard_pool_queued_jobs",
                                       "Jobs waiting for a thread of the worker pool (blocking "
                                       "work: stores, LLM); past its bound calls are refused.",
                                       CG_METRIC_GAUGE, read_pool_queued, srv->pool, err);
    if (st == CG_OK)
        st = cg_metrics_callback(reg, "ctxguard_open_lane_queued_jobs",
                                 "WatchUsage opens waiting for a thread of the open lane.",
                                 CG_METRIC_GAUGE, read_pool_queued, srv->open_pool, err);
    if (st == CG_OK)
        st = cg_metrics_callback(reg, "ctxguard_watch_streams_open",
                                 "WatchUsage streams open (from their arrival until they end).",
                                 CG_METRIC_GAUGE, read_streams_open, srv, err);
    return st;
}

/* The three gRPC server families and every method's started counter. */
static cg_status make_metrics(struct cg_server *srv, struct cg_err *err)
{
    struct cg_metrics *reg = srv->app->metrics;
    /* Cap: every method with every code, of the method table (unknown methods are not
     * counted: their names come from the caller). */
    uint32_t cap = (uint32_t)srv->nmethods * GRPC_CODES;
    const char *const *labels = CG_LABELS("grpc_type", "grpc_service", "grpc_method");
    srv->started_family =
        cg_metrics_counter_family(reg, "grpc_server_started_total",
                                  "Total number of RPCs started on the server.", labels, cap, err);
    srv->handled_family = cg_metrics_counter_family(
        reg, "grpc_server_handled_total",
        "Total number of RPCs completed on the server, regardless of success or failure.",
        CG_LABELS("grpc_type", "grpc_service", "grpc_method", "grpc_code"), cap, err);
    srv->seconds_family = cg_metrics_histogram_family(
        reg, "grpc_server_handling_seconds",
        "Histogram of response latency (seconds) of gRPC that had been application-level "
        "handled by the server.",
        labels, CG_METRICS_GRPC_BUCKETS, CG_METRICS_GRPC_NBUCKETS, cap, err);
    /* What the budget answers decided (a Reserve refused for its budget is a deny), and
     * the backpressure delay each decision came with (0 included), in the buckets of the
     * default tiers (50 ms ... 1.5 s). */
    srv->decisions_family = cg_metrics_counter_family(
        reg, "ctxguard_budget_decisions_total",
        "Budget decisions answered, by method and decision (a call refused with reason "
        "BUDGET_EXHAUSTED is a deny).",
        CG_LABELS("grpc_method", "decision"), (uint32_t)srv->nmethods * DECISIONS, err);
    srv->delay_family = cg_metrics_histogram_family(
        reg, "ctxguard_backpressure_delay_seconds",
        "The backpressure delay each budget decision came with (held by the server or returned "
        "to the caller), 0 included.",
        CG_LABELS("grpc_method"), (const double[]){0.001, 0.05, 0.1, 0.3, 0.75, 1.5, 3}, 7,
        (uint32_t)srv->nmethods, err);
    if (srv->started_family == NULL || srv->handled_family == NULL || srv->seconds_family == NULL ||
        srv->decisions_family == NULL || srv->delay_family == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    cg_status st = gauge_metrics(srv, err);
    if (st != CG_OK)
        return st;
    srv->metrics = calloc(srv->nmethods, sizeof *srv->metrics);
    if (srv->metrics == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    for (size_t i = 0; i < srv->nmethods; i++) {
        const struct cg_rpc_method *m = &srv->methods[i];
        struct method_metrics *mm = &srv->metrics[i];
        const char *slash = strrchr(m->path, '/');
        mm->name = slash ? slash + 1 : m->path;
        mm->type = m->kind == CG_RPC_UNARY           ? "unary"
                   : m->kind == CG_RPC_SERVER_STREAM ? "server_stream"
                                                     : "bidi_stream";
        mm->started = cg_metric_get(srv->started_family, CG_LABELS(mm->type, m->service, mm->name));
    }
    return CG_OK;
}

/* A lazily made handle: resolved once (two threads racing get the same one). */
static struct cg_metric *lazy_metric(_Atomic(struct cg_metric *) *cached,
                                     struct cg_metric_family *f, const char *const *values)
{
    struct cg_metric *h = atomic_load_explicit(cached, memory_order_acquire);
    if (h == NULL && (h = cg_metric_get(f, values)) != NULL)
        atomic_store_explicit(cached, h, memory_order_release);
    return h;
}

static struct method_metrics *call_metrics(struct call *c)
{
    return c->method != NULL ? &c->w->srv->metrics[c->method - c->w->srv->methods] : NULL;
}

/* The budget decision the call answered (rpc.h cg_rpc_call.decision), if any: a call
 * refused for its budget (RESOURCE_EXHAUSTED, reason BUDGET_EXHAUSTED) is a deny. */
static void count_decision(struct call *c, struct method_metrics *mm, int code)
{
    static const char *const names[DECISIONS] = {"unspecified", "allow", "allow_with_warning",
                                                 "require_approval", "deny"};
    int d = c->rc.decision;
    if (d == 0 && code == 8 /* RESOURCE_EXHAUSTED */ && c->rc.err.reason == CG_ERR_BUDGET_EXHAUSTED)
        d = 4; /* DENY */
    if (d <= 0 || d >= DECISIONS)
        return;
    struct cg_server *srv = c->w->srv;
    struct cg_metric *n =
        lazy_metric(&mm->decisions[d], srv->decisions_family, CG_LABELS(mm->name, names[d]));
    struct cg_metric *delay = lazy_metric(&mm->delay, srv->delay_family, CG_LABELS(mm->name));
    cg_metric_inc(n, c->w->metrics_slot);
    cg_metric_observe(delay, c->w->metrics_slot, (double)c->rc.decision_delay_ms / 1000.0);
}

/* The call ended with grpc code `code`: handled_total and handling_seconds, once. */
static void count_handled(struct call *c, int code)
{
    struct method_metrics *mm = call_metrics(c);
    if (mm == NULL || !c->metered || c->counted)
        return;
    c->counted = true;
    struct cg_server *srv = c->w->srv;
    if (code < 0 || code >= GRPC_CODES)
        code = 2; /* UNKNOWN */
    const char *service = c->method->service;
    struct cg_metric *handled =
        lazy_metric(&mm->handled[code], srv->handled_family,
                    CG_LABELS(mm->type, service, mm->name, cg_grpc_code_name(code)));
    struct cg_metric *seconds =
        lazy_metric(&mm->seconds, srv->seconds_family, CG_LABELS(mm->type, service, mm->name));
    cg_metric_inc(handled, c->w->metrics_slot);
    cg_metric_observe(seconds, c->w->metrics_slot, (double)(now_ns() - c->start_ns) / 1e9);
    count_decision(c, mm, code);
}

/* ---------------------------------------------------------------- call basics ----- */

static void call_free(struct call *c)
{
    struct cg_server *srv = c->w->srv;
    count_handled(c, 1); /* never answered: CANCELLED (a no-op for an answered call) */
    if (c->in_streams_open)
        atomic_fetch_sub_explicit(&srv->streams_open, 1, memory_order_relaxed);
    /* One line per call: debug, or warn when the server itself failed it. */
    bool server_fault = c->st == CG_INTERNAL || c->st == CG_UNKNOWN || c->st == CG_DATA_LOSS ||
                        c->st == CG_NOMEM || c->st == CG_IO;
    cg_log_level lvl = server_fault ? CG_LOG_WARN : CG_LOG_DEBUG;
    if (c->rc.request_id != NULL && cg_log_enabled(lvl)) {
        char dur[32];
        snprintf(dur, sizeof dur, "%.3f", (double)(now_ns() - c->start_ns) / 1e6);
        const char *code = c->cancelled && !c->replied
                               ? "CANCELLED"
                               : cg_grpc_code_name(cg_status_grpc_code(c->st));
        struct cg_kv kv[] = {{"method", c->path},
                             {"status", code},
                             {"duration_ms", dur},
                             {"detail", c->st != CG_OK && c->detail ? c->detail : NULL}};
        cg_log_kv(lvl, "transport", c->rid, "call", kv, 4);
    }
    if (c->gcall != NULL)
        grpc_call_unref(c->gcall);
    grpc_metadata_array_destroy(&c->md);
    if (c->send_bb != NULL)
        grpc_byte_buffer_destroy(c->send_bb);
    if (c->recv_bb != NULL)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->has_status_details)
        grpc_slice_unref(c->status_details);
    if (c->has_trailing_md)
        grpc_slice_unref(c->trailing_md[0].value);
    if (c->stream.state_free != NULL)
        c->stream.state_free(c->stream.state);
    cg_arena_free(c->arena);
    cg_arena_free(c->msg_arena);
    free(c);
    live_add(srv, -1);
}

static void stream_unregister(struct call *c);
static void begin_stream(struct call *c);

/* Frees the call once nothing refers to it any more. */
static void call_maybe_free(struct call *c)
{
    if (c->pending > 0 || cg_timer_is_armed(&c->timer))
        return;
    if (c->registered)
        stream_unregister(c);
    if (atomic_load(&c->wake_posted))
        return; /* the wake-up tag is still on its way to this queue */
    call_free(c);
}

static bool start_batch(struct call *c, const grpc_op *ops, size_t n, struct tag *t)
{
    grpc_call_error e = grpc_call_start_batch(c->gcall, ops, n, t, NULL);
    if (e != GRPC_CALL_OK) {
        cg_log(CG_LOG_ERROR, "transport", c->rid, "grpc_call_start_batch failed: %d", (int)e);
        return false;
    }
    c->pending++;
    return true;
}

static grpc_byte_buffer *make_buffer(const uint8_t *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

static void fill_initial_md(struct call *c, grpc_op *op)
{
    c->initial_md[0].key = grpc_slice_from_static_string("x-request-id");
    c->initial_md[0].value = grpc_slice_from_static_string(c->rid);
    op->op = GRPC_OP_SEND_INITIAL_METADATA;
    op->flags = 0;
    op->reserved = NULL;
    op->data.send_initial_metadata.count = 1;
    op->data.send_initial_metadata.metadata = c->initial_md;
    c->initial_md_sent = true;
}

/* Puts the error's google.rpc.Status (status_details.h) in op's trailing metadata as
 * grpc-status-details-bin (C core base64-encodes -bin values itself). Packed in the call's
 * arena; when that is full, in a small arena of its own (an error must still say why). A
 * reply without it is still a reply: a failure here is logged only. */
static void attach_status_details(struct call *c, grpc_op *op, cg_status st, const char *message)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    struct cg_arena *own = NULL;
    cg_status rc = cg_status_details_pack(&c->rc.err, st, message, c->arena, &bytes, &len);
    if (rc != CG_OK) {
        own = cg_arena_new(ARENA_FIRST_BLOCK, 64 * 1024);
        rc = own == NULL ? CG_NOMEM
                         : cg_status_details_pack(&c->rc.err, st, message, own, &bytes, &len);
    }
    if (rc == CG_OK) {
        c->trailing_md[0].key = grpc_slice_from_static_string("grpc-status-details-bin");
        c->trailing_md[0].value = grpc_slice_from_copied_buffer((const char *)bytes, len);
        c->has_trailing_md = true;
        op->data.send_status_from_server.trailing_metadata_count = 1;
        op->data.send_status_from_server.trailing_metadata = c->trailing_md;
    } else {
        cg_log(CG_LOG_WARN, "transport", c->rid, "cannot pack the error details: %s",
               cg_status_name(rc));
    }
    cg_arena_free(own);
}

/* Sends the final status (with the answer first when st is OK and there is one); an error
 * carries its details (attach_status_details). */
static void send_final(struct call *c, cg_status st, const char *message)
{
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    c->st = st;
    if (!c->initial_md_sent)
        fill_initial_md(c, &ops[n++]);
    if (st == CG_OK && c->resp != NULL) {
        if (c->send_bb != NULL) /* a stream's last message, already sent */
            grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = make_buffer(c->resp, c->resp_len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)cg_status_grpc_code(st);
    if (st != CG_OK) {
        c->detail = message ? message : cg_status_str(st);
        c->status_details = grpc_slice_from_copied_string(c->detail);
        c->has_status_details = true;
        ops[n].data.send_status_from_server.status_details = &c->status_details;
        if (!c->has_trailing_md)
            attach_status_details(c, &ops[n], st, c->detail);
    }
    n++;
    c->phase = PHASE_DONE;
    c->replied = true;
    count_handled(c, cg_status_grpc_code(st));
    if (!start_batch(c, ops, n, &c->status_tag))
        grpc_call_cancel(c->gcall, NULL);
}

static void reply_error(struct call *c)
{
    send_final(c, c->st, cg_err_text(&c->rc.err));
}

static void on_status_sent(struct worker *w, struct tag *t, bool ok)
{
    (void)w;
    (void)ok; /* not ok: the caller went away; RECV_CLOSE tells the rest */
    struct call *c = container_of(t, struct call, status_tag);
    c->pending--;
    call_maybe_free(c);
}

/* ---------------------------------------------------------------- unary ------------ */

static void on_timer(struct worker *w, struct cg_timer *timer)
{
    (void)w;
    struct call *c = timer->data;
    if (c->held_past_deadline) {
        c->st = cg_err_set(&c->rc.err, CG_DEADLINE_EXCEEDED,
                           "reply held %u ms, past the call's deadline (max_call_ms %lld)",
                           c->rc.reply_delay_ms, (long long)c->w->srv->cfg->max_call_ms);
        cg_err_meta_i64(&c->rc.err, "reply_delay_ms", (long long)c->rc.reply_delay_ms);
        cg_err_meta_i64(&c->rc.err, "max_call_ms", (long long)c->w->srv->cfg->max_call_ms);
        reply_error(c);
        return;
    }
    send_final(c, c->st, NULL);
}

/* After a handler or a stream open: ends the call when the caller has gone or the
 * handler failed. Returns true when it did (nothing more to do). */
static bool end_if_cancelled_or_failed(struct call *c)
{
    if (c->cancelled) {
        c->phase = PHASE_DONE;
        call_maybe_free(c);
        return true;
    }
    if (c->st != CG_OK) {
        reply_error(c);
        return true;
    }
    return false;
}

/* The handler is done (inline or on the pool): reply now or after the requested delay. */
static void finish_unary(struct call *c)
{
    if (end_if_cancelled_or_failed(c))
        return;
    if (c->rc.reply_delay_ms > 0) {
        int64_t due = c->start_ns + (int64_t)c->rc.reply_delay_ms * 1000000;
        /* A hold never outlives max_call_ms: past it the answer is DEADLINE_EXCEEDED, given
         * then. A caller whose own deadline comes first gives up by itself, and its held
         * reply is abandoned (on_close). */
        if (c->server_cap_binds && due > c->deadline_ns) {
            due = c->deadline_ns;
            c->held_past_deadline = true;
        }
        if (cg_timer_heap_add(&c->w->timers, &c->timer, due) == CG_OK) {
            c->phase = PHASE_TIMER;
            return;
        }
        cg_log(CG_LOG_WARN, "transport", c->rid, "timer heap full; replying without delay");
    }
    send_final(c, CG_OK, NULL);
}

/* A method that never blocks: its handler always answers here (only try_inline methods may
 * hand a call on or need the pool). */
static void run_inline(struct call *c)
{
    cg_op_fate fate;
    c->st = cg_rpc_invoke(c->method, &c->rc, &c->w->env, c->req, c->req_len, &c->resp, &c->resp_len,
                          &fate);
    finish_unary(c);
}

/* The pool is done with the call: wake its queue (on_pool_done runs there). */
static void wake_after_pool(struct call *c)
{
    grpc_call_error e = grpc_call_start_batch(c->gcall, NULL, 0, &c->pool_tag, NULL);
    if (e != GRPC_CALL_OK)
        cg_log(CG_LOG_ERROR, "transport", c->rid, "cannot wake the call's queue: %d", (int)e);
}

/* cg_rpc_call.resume: a deferred call's answer, from whichever thread has it. */
static void resume_deferred(struct cg_rpc_call *rc, cg_status st, uint8_t *out, size_t out_len)
{
    struct call *c = container_of(rc, struct call, rc);
    c->st = st;
    c->resp = out;
    c->resp_len = out_len;
    wake_after_pool(c);
}

/* A try_inline method (rpc.h) on this completion-queue thread, without a store: true when
 * it answered (from the cache) or handed the call on (a budget write queued for the batch a
 * pool thread is running); false when it needs the pool (CG_OP_NEEDS_STORE), with the
 * outputs it set reset. What the try established stays for the pool (pool_job,
 * cg_rpc_invoke_again): the principal and the decoded request (in the call's arena) when it
 * came as far as the handler; nothing when the key lookup needed the store. */
static bool try_inline(struct call *c)
{
    uint8_t *resp = NULL;
    size_t resp_len = 0;
    cg_op_fate fate;
    cg_status st =
        cg_rpc_invoke(c->method, &c->rc, &c->w->env, c->req, c->req_len, &resp, &resp_len, &fate);
    if (fate == CG_OP_HANDED_ON) {
        /* Answered through resume_deferred (which may already have written st and resp
         * from another thread: touch neither), then on_pool_done on this thread, as for a
         * call the pool deferred. */
        c->phase = PHASE_POOL;
        c->pending++;
        return true;
    }
    if (fate == CG_OP_DONE) {
        c->st = st;
        c->resp = resp;
        c->resp_len = resp_len;
        finish_unary(c);
        return true;
    }
    c->rc.reply_delay_ms = 0;
    c->rc.decision = 0;
    c->rc.decision_delay_ms = 0;
    cg_err_clear(&c->rc.err);
    c->resp = NULL;
    c->resp_len = 0;
    c->st = CG_OK;
    return false;
}

static void pool_job(struct cg_job *job, void *thread_ctx)
{
    struct call *c = container_of(job, struct call, job);
    const struct cg_rpc_env *env = thread_ctx;
    /* Written here, read by the queue thread after the tag below: the queue's own locking
     * orders the two. */
    if (cg_mono_ms() >= c->rc.deadline_ms) {
        c->st = cg_err_set(&c->rc.err, CG_DEADLINE_EXCEEDED,
                           "deadline passed before the call could run");
    } else {
        cg_store_set_deadline(env->svc.store, c->rc.deadline_ms);
        cg_status st;
        cg_op_fate fate = CG_OP_DONE;
        if (c->method->kind == CG_RPC_SERVER_STREAM && !cg_health_is_serving(env->svc.health))
            /* The open lane is small: with PostgreSQL not answering, an open would hold
             * one of its threads until the statement timeout. */
            st = cg_err_set(&c->rc.err, CG_UNAVAILABLE,
                            "not serving (PostgreSQL unreachable, or shutting down): retry "
                            "later, or on another server");
        else if (c->method->kind == CG_RPC_SERVER_STREAM)
            st = cg_rpc_stream_open(c->method, &c->rc, env, c->req, c->req_len, &c->stream_request,
                                    &c->stream);
        else if (c->method->try_inline) /* tried on the queue thread first */
            st = cg_rpc_invoke_again(c->method, &c->rc, env, c->req, c->req_len, &c->resp,
                                     &c->resp_len, &fate);
        else
            st = cg_rpc_invoke(c->method, &c->rc, env, c->req, c->req_len, &c->resp, &c->resp_len,
                               &fate);
        cg_store_set_deadline(env->svc.store, 0);
        /* Handed on: resume_deferred wakes the queue, perhaps already did; c may be gone. */
        if (fate == CG_OP_HANDED_ON)
            return;
        c->st = st;
    }
    wake_after_pool(c);
}

static void on_pool_done(struct worker *w, struct tag *t, bool ok)
{
    (void)w;
    (void)ok;
    struct call *c = container_of(t, struct call, pool_tag);
    c->pending--;
    if (c->method->kind == CG_RPC_SERVER_STREAM)
        begin_stream(c);
    else
        finish_unary(c);
}

/* ---------------------------------------------------------------- close ------------ */

static void on_close(struct worker *w, struct tag *t, bool ok)
{
    (void)ok;
    struct call *c = container_of(t, struct call, close_tag);
    c->pending--;
    c->closed = true;
    if (c->cancelled && cg_timer_is_armed(&c->timer)) {
        /* The caller gave up while its reply was being held: drop it. */
        cg_timer_heap_remove(&w->timers, &c->timer);
        cg_log(CG_LOG_DEBUG, "transport", c->rid, "held reply abandoned: caller cancelled");
    }
    call_maybe_free(c);
}

/* ---------------------------------------------------------------- streams ---------- */

static void stream_register(struct call *c)
{
    struct cg_server *srv = c->w->srv;
    pthread_mutex_lock(&srv->streams_lock);
    c->next_stream = srv->streams;
    c->prev_stream = NULL;
    if (srv->streams)
        srv->streams->prev_stream = c;
    srv->streams = c;
    c->registered = true;
    pthread_mutex_unlock(&srv->streams_lock);
}

static void stream_unregister(struct call *c)
{
    struct cg_server *srv = c->w->srv;
    pthread_mutex_lock(&srv->streams_lock);
    if (c->prev_stream)
        c->prev_stream->next_stream = c->next_stream;
    else
        srv->streams = c->next_stream;
    if (c->next_stream)
        c->next_stream->prev_stream = c->prev_stream;
    c->registered = false;
    pthread_mutex_unlock(&srv->streams_lock);
}

/* Wakes every open stream so it re-reads the state it watches. Any thread. */
static void wake_streams(struct cg_server *srv)
{
    pthread_mutex_lock(&srv->streams_lock);
    for (struct call *c = srv->streams; c != NULL; c = c->next_stream) {
        if (atomic_exchange(&c->wake_posted, true))
            continue; /* one is already on its way */
        if (grpc_call_start_batch(c->gcall, NULL, 0, &c->wake_tag, NULL) != GRPC_CALL_OK)
            atomic_store(&c->wake_posted, false);
    }
    pthread_mutex_unlock(&srv->streams_lock);
    struct cg_http_api *api = atomic_load(&srv->http_wakes);
    if (api != NULL)
        cg_http_api_wake(api); /* the JSON API's event streams */
}

/* The rpc layer's way to wake the streams (cg_rpc_env.wake_streams). */
static void wake_streams_cb(void *ctx)
{
    wake_streams(ctx);
}

/* Points the call's allocations at a fresh per-message arena, so that a long stream
 * holds one message's memory at a time rather than all of them. The previous message was
 * copied into its grpc buffer when it was sent. */
static bool use_message_arena(struct call *c)
{
    if (c->msg_arena == NULL) {
        size_t cap = (size_t)c->w->srv->cfg->max_message_bytes * 8 + (1u << 20);
        c->msg_arena = cg_arena_new(ARENA_FIRST_BLOCK, cap);
        if (c->msg_arena == NULL)
            return false;
    } else {
        cg_arena_reset(c->msg_arena);
    }
    c->rc.arena = c->msg_arena;
    return true;
}

/* Sends the next stream message if the watched state moved, or ends the stream when the
 * server is stopping. Only one SEND_MESSAGE is outstanding at a time. */
static void stream_pump(struct call *c)
{
    if (c->sending || c->phase == PHASE_DONE || c->closed)
        return;
    ProtobufCMessage *msg = NULL;
    bool finished = false;
    if (!use_message_arena(c)) {
        c->st = cg_err_set(&c->rc.err, CG_RESOURCE_EXHAUSTED, "out of memory");
        reply_error(c);
        return;
    }
    cg_status st =
        c->method->poll(&c->rc, &c->w->env, c->stream_request, &c->stream, &msg, &finished);
    if (st != CG_OK) {
        c->st = st;
        reply_error(c);
        return;
    }
    if (msg != NULL) {
        uint8_t *out;
        size_t len;
        st = cg_rpc_encode(&c->rc, msg, &out, &len);
        if (st != CG_OK) {
            c->st = st;
            reply_error(c);
            return;
        }
        grpc_op ops[2];
        size_t n = 0;
        memset(ops, 0, sizeof ops);
        if (!c->initial_md_sent)
            fill_initial_md(c, &ops[n++]);
        if (c->send_bb != NULL)
            grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = make_buffer(out, len);
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = c->send_bb;
        n++;
        if (start_batch(c, ops, n, &c->msg_tag)) {
            c->sending = true;
            c->finish_after_send = finished; /* the last message: end once it is out */
        }
        return;
    }
    if (finished) {
        send_final(c, CG_OK, NULL);
    } else if (atomic_load(&c->w->srv->stopping)) {
        c->st = cg_err_setr(&c->rc.err, CG_UNAVAILABLE, CG_ERR_SERVER_SHUTTING_DOWN,
                            "server is shutting down");
        reply_error(c);
    }
}

static void on_stream_sent(struct worker *w, struct tag *t, bool ok)
{
    (void)w;
    struct call *c = container_of(t, struct call, msg_tag);
    c->pending--;
    c->sending = false;
    if (ok && c->finish_after_send && c->phase != PHASE_DONE && !c->closed)
        send_final(c, CG_OK, NULL);
    else if (ok)
        stream_pump(c);
    call_maybe_free(c);
}

static void on_stream_wake(struct worker *w, struct tag *t, bool ok)
{
    (void)w;
    (void)ok;
    struct call *c = container_of(t, struct call, wake_tag);
    atomic_store(&c->wake_posted, false);
    stream_pump(c);
    call_maybe_free(c);
}

/* The stream was opened (decoded and authenticated, inline or on the pool). */
static void begin_stream(struct call *c)
{
    if (end_if_cancelled_or_failed(c))
        return;
    c->phase = PHASE_STREAMING;
    stream_register(c);
    stream_pump(c);
}

/* ---------------------------------------------------------------- bidi (each) ------ */

static void bidi_recv(struct call *c)
{
    grpc_op op;
    memset(&op, 0, sizeof op);
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    if (!start_batch(c, &op, 1, &c->recv_tag))
        grpc_call_cancel(c->gcall, NULL);
}

static cg_status read_buffer(struct call *c, grpc_byte_buffer *bb, const uint8_t **out,
                             size_t *out_len);

static void on_bidi_recv(struct worker *w, struct tag *t, bool ok)
{
    struct call *c = container_of(t, struct call, recv_tag);
    c->pending--;
    if (!ok || c->recv_bb == NULL) {
        /* The client half-closed: the conversation is over. */
        if (ok && !c->closed && c->phase != PHASE_DONE)
            send_final(c, CG_OK, NULL);
        call_maybe_free(c);
        return;
    }
    /* Each request gets a fresh error slot and a fresh message arena. */
    cg_err_clear(&c->rc.err);
    const uint8_t *req = NULL;
    size_t len = 0;
    if (!use_message_arena(c))
        c->st = cg_err_set(&c->rc.err, CG_RESOURCE_EXHAUSTED, "out of memory");
    else
        c->st = read_buffer(c, c->recv_bb, &req, &len);
    grpc_byte_buffer_destroy(c->recv_bb);
    c->recv_bb = NULL;
    cg_op_fate fate; /* bidi methods are never try_inline: always CG_OP_DONE */
    if (c->st == CG_OK)
        c->st = cg_rpc_invoke(c->method, &c->rc, &w->env, req, len, &c->resp, &c->resp_len, &fate);
    if (c->st != CG_OK) {
        reply_error(c);
        return;
    }
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof ops);
    if (!c->initial_md_sent)
        fill_initial_md(c, &ops[n++]);
    if (c->send_bb != NULL)
        grpc_byte_buffer_destroy(c->send_bb);
    c->send_bb = make_buffer(c->resp, c->resp_len);
    /* The answer is on its way; the final status of the stream carries no message. */
    c->resp = NULL;
    c->resp_len = 0;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->send_bb;
    n++;
    if (!start_batch(c, ops, n, &c->msg_tag))
        grpc_call_cancel(c->gcall, NULL);
}

static void on_bidi_sent(struct worker *w, struct tag *t, bool ok)
{
    (void)w;
    struct call *c = container_of(t, struct call, msg_tag);
    c->pending--;
    if (ok && !c->closed)
        bidi_recv(c);
    call_maybe_free(c);
}

/* ---------------------------------------------------------------- new calls -------- */

static cg_status read_buffer(struct call *c, grpc_byte_buffer *bb, const uint8_t **out,
                             size_t *out_len)
{
    /* The reader decompresses: the length of bb itself may be the compressed one. */
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return cg_err_set(&c->rc.err, CG_INVALID_ARGUMENT, "request could not be decompressed");
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    size_t len = GRPC_SLICE_LENGTH(all);
    cg_status st = CG_OK;
    uint8_t *buf = NULL;
    if (len > c->rc.max_message_bytes)
        st = cg_err_setr(&c->rc.err, CG_RESOURCE_EXHAUSTED, CG_ERR_MESSAGE_TOO_LARGE,
                         "request of %zu bytes is larger than the limit of %zu", len,
                         c->rc.max_message_bytes);
    else if ((buf = cg_arena_alloc(c->rc.arena, len ? len : 1)) == NULL)
        st = cg_err_set(&c->rc.err, CG_RESOURCE_EXHAUSTED, "out of memory for the request");
    else
        memcpy(buf, GRPC_SLICE_START_PTR(all), len);
    grpc_slice_unref(all);
    *out = buf;
    *out_len = len;
    return st;
}

/* Copies a metadata value into the arena, or NULL when absent or over max bytes. */
static const char *md_value(struct call *c, const char *key, size_t max, bool *too_long)
{
    for (size_t i = 0; i < c->md.count; i++) {
        if (grpc_slice_str_cmp(c->md.metadata[i].key, key) != 0)
            continue;
        grpc_slice v = c->md.metadata[i].value;
        size_t n = GRPC_SLICE_LENGTH(v);
        if (n > max) {
            if (too_long)
                *too_long = true;
            return NULL;
        }
        return cg_arena_strndup(c->arena, (const char *)GRPC_SLICE_START_PTR(v), n);
    }
    return NULL;
}

/* A request id for a call that brought none: SipHash of this thread's call count under a
 * key drawn once for the thread, as unguessable across calls and replicas as 8 random
 * bytes, without a getrandom system call per call (base/crypto.h cg_request_id's way,
 * ~2 % of a cached CheckBudget's CPU). */
static void new_request_id(struct worker *w, char out[17])
{
    uint8_t h[16];
    uint64_t n = w->rid_count++;
    cg_siphash128(w->rid_key, &n, sizeof n, h);
    cg_hex_encode(h, 8, out);
}

static void set_request_id(struct worker *w, struct call *c)
{
    bool too_long = false;
    const char *given = md_value(c, "x-request-id", RID_MAX, &too_long);
    bool ok = given != NULL && given[0] != '\0';
    for (const char *p = given; ok && *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              *p == '-' || *p == '_' || *p == '.'))
            ok = false;
    if (ok)
        snprintf(c->rid, sizeof c->rid, "%s", given);
    else
        new_request_id(w, c->rid);
    c->rc.request_id = c->rid;
}

static struct call *call_new(struct worker *w, struct slot *s)
{
    struct cg_server *srv = w->srv;
    struct call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    size_t cap = (size_t)srv->cfg->max_message_bytes * 8 + (1u << 20);
    c->arena = cg_arena_new(ARENA_FIRST_BLOCK, cap);
    if (c->arena == NULL) {
        free(c);
        return NULL;
    }
    c->w = w;
    c->method = s->method;
    c->gcall = s->call;
    c->md = s->md; /* ownership moves to the call */
    grpc_metadata_array_init(&s->md);
    c->start_ns = now_ns();
    c->close_tag.fn = on_close;
    c->status_tag.fn = on_status_sent;
    c->pool_tag.fn = on_pool_done;
    c->wake_tag.fn = on_stream_wake;
    c->job.run = pool_job;
    atomic_init(&c->wake_posted, false);
    cg_timer_init(&c->timer, c);
    c->rc.arena = c->arena;
    c->rc.max_message_bytes = (size_t)srv->cfg->max_message_bytes;
    c->rc.resume = resume_deferred;
    cg_err_clear(&c->rc.err);

    /* The call's deadline: the caller's, cut to max_call_ms. */
    gpr_timespec dl = s->method ? s->deadline : s->details.deadline;
    dl = gpr_convert_clock_type(dl, GPR_CLOCK_MONOTONIC);
    int64_t remaining_ms = srv->cfg->max_call_ms;
    c->server_cap_binds = true;
    if (gpr_time_cmp(dl, gpr_inf_future(GPR_CLOCK_MONOTONIC)) != 0) {
        int64_t left = ((int64_t)dl.tv_sec * 1000000000 + dl.tv_nsec - c->start_ns) / 1000000;
        if (left < remaining_ms) {
            remaining_ms = left;
            c->server_cap_binds = false;
        }
    }
    c->rc.deadline_ms = cg_mono_ms() + remaining_ms;
    c->deadline_ns = c->start_ns + remaining_ms * 1000000;

    if (s->method != NULL) {
        size_t n = strnlen(s->method->path, sizeof c->path - 1);
        memcpy(c->path, s->method->path, n);
        c->path[n] = '\0';
    } else {
        size_t n = GRPC_SLICE_LENGTH(s->details.method);
        if (n >= sizeof c->path)
            n = sizeof c->path - 1;
        memcpy(c->path, GRPC_SLICE_START_PTR(s->details.method), n);
        c->path[n] = '\0';
    }
    live_add(srv, 1);
    return c;
}

static void start_call(struct worker *w, struct call *c, grpc_byte_buffer *payload)
{
    set_request_id(w, c);

    grpc_op close_op;
    memset(&close_op, 0, sizeof close_op);
    close_op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    close_op.data.recv_close_on_server.cancelled = &c->cancelled;
    if (!start_batch(c, &close_op, 1, &c->close_tag)) {
        grpc_call_cancel(c->gcall, NULL);
        call_maybe_free(c);
        return;
    }

    if (c->method == NULL) {
        c->st = cg_err_set(&c->rc.err, CG_UNIMPLEMENTED, "unknown method %s", c->path);
        cg_err_meta(&c->rc.err, "method", c->path);
        reply_error(c);
        return;
    }
    cg_metric_inc(call_metrics(c)->started, w->metrics_slot);
    c->metered = true;
    if (c->method->kind == CG_RPC_SERVER_STREAM) {
        atomic_fetch_add_explicit(&w->srv->streams_open, 1, memory_order_relaxed);
        c->in_streams_open = true;
    }
    if (c->rc.deadline_ms <= cg_mono_ms()) {
        c->st = cg_err_set(&c->rc.err, CG_DEADLINE_EXCEEDED, "deadline passed on arrival");
        reply_error(c);
        return;
    }
    bool too_long = false;
    c->rc.authorization = md_value(c, "authorization", AUTH_MAX, &too_long);
    if (too_long)
        c->rc.authorization = "(too long)";

    if (c->method->kind == CG_RPC_BIDI_EACH) {
        c->recv_tag.fn = on_bidi_recv;
        c->msg_tag.fn = on_bidi_sent;
        c->phase = PHASE_STREAMING;
        bidi_recv(c);
        return;
    }

    if (payload == NULL) {
        c->st = cg_err_set(&c->rc.err, CG_INVALID_ARGUMENT, "request message missing");
        reply_error(c);
        return;
    }
    c->st = read_buffer(c, payload, &c->req, &c->req_len);
    if (c->st != CG_OK) {
        reply_error(c);
        return;
    }

    if (c->method->kind == CG_RPC_SERVER_STREAM)
        c->msg_tag.fn = on_stream_sent;
    if (c->method->blocking && c->method->try_inline && c->method->kind == CG_RPC_UNARY &&
        try_inline(c))
        return;
    if (!c->method->blocking) {
        if (c->method->kind == CG_RPC_SERVER_STREAM) {
            c->st = cg_rpc_stream_open(c->method, &c->rc, &w->env, c->req, c->req_len,
                                       &c->stream_request, &c->stream);
            begin_stream(c);
        } else {
            run_inline(c);
        }
        return;
    }
    c->phase = PHASE_POOL;
    c->pending++; /* the pool's wake-up */
    bool open = c->method->kind == CG_RPC_SERVER_STREAM;
    if (cg_pool_submit(open ? w->srv->open_pool : w->srv->pool, &c->job) != CG_OK) {
        c->pending--;
        c->st = open ? cg_err_setr(&c->rc.err, CG_UNAVAILABLE, CG_ERR_SERVER_OVERLOADED,
                                   "too many streams are opening on this server; retry later")
                     : cg_err_setr(&c->rc.err, CG_UNAVAILABLE, CG_ERR_SERVER_OVERLOADED,
                                   "server overloaded; retry later");
        reply_error(c);
    }
}

static bool post_slot(struct worker *w, struct slot *s)
{
    grpc_call_error e;
    s->call = NULL;
    s->payload = NULL;
    if (s->method != NULL) {
        e = grpc_server_request_registered_call(
            w->srv->server, s->handle, &s->call, &s->deadline, &s->md,
            s->method->kind == CG_RPC_BIDI_EACH ? NULL : &s->payload, w->cq, w->cq, &s->tag);
    } else {
        grpc_call_details_destroy(&s->details);
        grpc_call_details_init(&s->details);
        e = grpc_server_request_call(w->srv->server, &s->call, &s->details, &s->md, w->cq, w->cq,
                                     &s->tag);
    }
    return e == GRPC_CALL_OK;
}

static void slot_free(struct worker *w, struct slot *s)
{
    grpc_metadata_array_destroy(&s->md);
    grpc_call_details_destroy(&s->details);
    if (s->payload != NULL)
        grpc_byte_buffer_destroy(s->payload);
    free(s);
    live_count(w->srv, &w->srv->live_slots, -1);
}

static void on_slot(struct worker *w, struct tag *t, bool ok)
{
    struct slot *s = container_of(t, struct slot, tag);
    if (!ok) {
        /* The server is shutting down: the slot will not be matched any more. */
        slot_free(w, s);
        return;
    }
    grpc_byte_buffer *payload = s->payload;
    s->payload = NULL;
    struct call *c = call_new(w, s);
    if (c == NULL) {
        grpc_call_cancel_with_status(s->call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory",
                                     NULL);
        grpc_call_unref(s->call);
        grpc_metadata_array_destroy(&s->md);
        grpc_metadata_array_init(&s->md);
    } else {
        start_call(w, c, payload);
    }
    if (payload != NULL)
        grpc_byte_buffer_destroy(payload);
    if (atomic_load(&w->srv->stopping) || !post_slot(w, s))
        slot_free(w, s);
}

static bool add_slot(struct worker *w, const struct cg_rpc_method *m, void *handle)
{
    struct slot *s = calloc(1, sizeof *s);
    if (s == NULL)
        return false;
    s->tag.fn = on_slot;
    s->method = m;
    s->handle = handle;
    grpc_metadata_array_init(&s->md);
    grpc_call_details_init(&s->details);
    live_count(w->srv, &w->srv->live_slots, 1);
    if (!post_slot(w, s)) {
        slot_free(w, s);
        return false;
    }
    return true;
}

/* ---------------------------------------------------------------- workers ---------- */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (;;) {
        struct cg_timer *next = cg_timer_heap_peek(&w->timers);
        gpr_timespec deadline =
            next ? ns_to_timespec(next->due) : gpr_inf_future(GPR_CLOCK_MONOTONIC);
        grpc_event ev = grpc_completion_queue_next(w->cq, deadline, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type == GRPC_OP_COMPLETE) {
            struct tag *t = ev.tag;
            t->fn(w, t, ev.success != 0);
        }
        int64_t now = now_ns();
        struct cg_timer *due;
        while ((due = cg_timer_heap_pop_due(&w->timers, now)) != NULL)
            on_timer(w, due);
    }
    return NULL;
}

/* ---------------------------------------------------------------- pool threads ----- */

struct pool_ctx {
    struct cg_rpc_env env;
};

static void *pool_thread_init(void *arg, int index)
{
    struct cg_server *srv = arg;
    struct pool_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return NULL;
    cg_app_env(srv->app, &ctx->env);
    ctx->env.svc.wake_streams = wake_streams_cb;
    ctx->env.svc.wake_ctx = srv;
    ctx->env.svc.metrics_slot = cg_metrics_slot_claim(srv->app->metrics); /* this thread's */
    ctx->env.svc.store = cg_app_store_new(srv->app);
    if (ctx->env.svc.store != NULL)
        cg_store_set_metrics_slot(ctx->env.svc.store, ctx->env.svc.metrics_slot);
    if (ctx->env.svc.store == NULL) {
        free(ctx);
        return NULL;
    }
    /* Pool threads (not the health monitor, index -1) get an LLM client of their own: a
     * curl handle keeps its connection to the endpoint between calls. */
    if (index >= 0) {
        struct cg_err err = {0};
        ctx->env.svc.llm = cg_app_llm_new(srv->app, &err);
        if (ctx->env.svc.llm == NULL) {
            cg_log(CG_LOG_ERROR, "transport", NULL, "cannot make the LLM client: %s", err.msg);
            cg_store_free(ctx->env.svc.store);
            free(ctx);
            return NULL;
        }
    }
    return &ctx->env; /* env is the first member: the job gets a cg_rpc_env */
}

/* A thread of the open lane: a store of its own, no LLM client (no open calls the LLM). Its
 * connection is made now (given health_timeout_ms; a failure is left to the first open), so
 * that the first opens after the start do not pay for it while the pool's threads, warmed by
 * other calls, run the writes they may be waiting for. */
static void *open_thread_init(void *arg, int index)
{
    (void)index;
    struct cg_server *srv = arg;
    struct pool_ctx *ctx = pool_thread_init(arg, -1);
    if (ctx != NULL) {
        struct cg_err err;
        cg_err_clear(&err);
        cg_store_set_deadline(ctx->env.svc.store, cg_mono_ms() + srv->cfg->health_timeout_ms);
        if (cg_store_ping(ctx->env.svc.store, &err) != CG_OK)
            cg_log(CG_LOG_DEBUG, "transport", NULL, "open lane: no connection yet (%s)",
                   cg_err_text(&err));
        cg_store_set_deadline(ctx->env.svc.store, 0);
    }
    return ctx;
}

static void pool_thread_cleanup(void *p)
{
    struct pool_ctx *ctx = p;
    if (ctx == NULL)
        return;
    cg_store_free(ctx->env.svc.store);
    cg_llm_free(ctx->env.svc.llm);
    free(ctx);
}

/* ---------------------------------------------------------------- health monitor --- */

/* Waits on the monitor's condition variable until `until` (cg_mono_ms) or shutdown. Called
 * with monitor_lock held; returns with it held. Returns false once shutdown has begun. */
static bool monitor_wait(struct cg_server *srv, int64_t until_ms)
{
    int64_t wait_ms = until_ms - cg_mono_ms();
    if (wait_ms < 0)
        wait_ms = 0;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    int64_t ns = until.tv_nsec + (wait_ms % 1000) * 1000000;
    until.tv_sec += wait_ms / 1000 + ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    /* Woken early only by shutdown. */
    while (!srv->monitor_stop &&
           pthread_cond_timedwait(&srv->monitor_cond, &srv->monitor_lock, &until) == 0)
        ;
    return !srv->monitor_stop;
}

/* A notifier: every notify_interval_ms, the due webhook deliveries of every tenant
 * (service/notify.h), on a store and an HTTP client of its own. A delivery may wait for a
 * slow receiver up to notify_timeout_ms: nothing else runs on this thread, and the other
 * notify_threads go on claiming (a claim takes one delivery). Deliveries this
 * replica was sending when it stopped are sent again by a replica when their lease runs out. */
static void *notify_main(void *arg)
{
    struct cg_server *srv = arg;
    struct pool_ctx *ctx = pool_thread_init(srv, -1);
    struct cg_webhook_opts wopts = {
        .timeout_ms = srv->cfg->notify_timeout_ms,
        .connect_timeout_ms = srv->cfg->notify_timeout_ms,
        .allow_private = srv->cfg->notify_allow_private_addresses,
        .user_agent = "ctxguard-webhook/" CG_VERSION,
    };
    struct cg_webhook *client = ctx != NULL ? cg_webhook_new(&wopts) : NULL;
    if (client == NULL) {
        cg_log(CG_LOG_ERROR, "notify", NULL, "cannot start the notifier: no webhooks are sent");
        if (ctx != NULL)
            pool_thread_cleanup(ctx);
        return NULL;
    }
    pthread_mutex_lock(&srv->monitor_lock);
    while (!srv->monitor_stop) {
        pthread_mutex_unlock(&srv->monitor_lock);
        int64_t next = cg_mono_ms() + srv->cfg->notify_interval_ms;
        struct cg_notify_pass_result r;
        if (cg_health_is_serving(srv->health)) {
            (void)cg_notify_pass(&ctx->env.svc, client, &r); /* logged; the next pass retries */
            cg_svc_meters_notify(ctx->env.svc.meters, ctx->env.svc.metrics_slot, r.delivered,
                                 r.retried, r.dead);
        }
        pthread_mutex_lock(&srv->monitor_lock);
        if (!monitor_wait(srv, next))
            break;
    }
    pthread_mutex_unlock(&srv->monitor_lock);
    cg_webhook_free(client);
    pool_thread_cleanup(ctx);
    return NULL;
}

/* The sweeper (expired reservations and approvals, due resets) every sweep_interval_ms and
 * retention (old events, history, deliveries, sessions) every retention_interval_ms, on a
 * store of its own, and after a pass, at most every CG_SVC_GAUGES_INTERVAL_MS, the gauges
 * read from PostgreSQL (service/gauges.h). A sweep may block on PostgreSQL: nothing else
 * runs on this thread. */
static void *monitor_main(void *arg)
{
    struct cg_server *srv = arg;
    struct pool_ctx *ctx = pool_thread_init(srv, -1);
    if (ctx == NULL) {
        cg_log(CG_LOG_ERROR, "sweep", NULL, "cannot start the sweeper");
        return NULL;
    }
    const struct cg_svc_env *svc = &ctx->env.svc;
    int64_t next_gauges = 0;   /* cg_mono_ms; the first pass refreshes them */
    int64_t next_forecast = 0; /* cg_mono_ms */
    struct cg_sweep_walk retention = {0};
    pthread_mutex_lock(&srv->monitor_lock);
    while (!srv->monitor_stop) {
        pthread_mutex_unlock(&srv->monitor_lock);
        int64_t next_sweep = cg_mono_ms() + srv->cfg->sweep_interval_ms;
        int expired = 0;
        (void)cg_rpc_sweep(&ctx->env, cg_wall_ms(), &expired);
        /* Each reservation the sweeper settled is counted by the replica that did it. */
        cg_svc_meters_reservations(svc->meters, svc->metrics_slot, CG_SVC_RES_EXPIRED, expired);
        /* Retention in slices of at most half a sweep interval, so passes keep their pace. */
        (void)cg_sweep_retention(svc, &retention, cg_wall_ms(), srv->cfg->retention_interval_ms,
                                 srv->cfg->sweep_interval_ms / 2);
        if (cg_mono_ms() >= next_forecast) {
            int alerted = 0;
            if (cg_health_is_serving(srv->health))
                (void)cg_forecast_pass(svc, cg_wall_ms(), &alerted);
            next_forecast = cg_mono_ms() + srv->cfg->forecast_interval_ms;
        }
        if (cg_mono_ms() >= next_gauges) {
            (void)cg_svc_gauges_refresh(svc, cg_wall_ms());
            next_gauges = cg_mono_ms() + CG_SVC_GAUGES_INTERVAL_MS;
        }
        pthread_mutex_lock(&srv->monitor_lock);
        if (!monitor_wait(srv, next_sweep))
            break;
    }
    pthread_mutex_unlock(&srv->monitor_lock);
    pool_thread_cleanup(ctx);
    return NULL;
}

/* The PostgreSQL probe for the health service: every health_interval_ms one ping on a
 * connection of its own, given health_timeout_ms to answer, so that a frozen PostgreSQL is
 * NOT_SERVING within health_interval_ms + health_timeout_ms whatever the pool and the
 * sweeper are blocked on. The serving state also ages an answer out by itself
 * (cg_health_set_fresh_ms), should this thread ever be stuck. */
static void *health_main(void *arg)
{
    struct cg_server *srv = arg;
    struct pool_ctx *ctx = pool_thread_init(srv, -1);
    if (ctx == NULL) {
        cg_log(CG_LOG_ERROR, "health", NULL, "cannot start the PostgreSQL probe");
        return NULL;
    }
    int64_t interval = srv->cfg->health_interval_ms;
    int timeout = (int)srv->cfg->health_timeout_ms;
    pthread_mutex_lock(&srv->monitor_lock);
    while (!srv->monitor_stop) {
        pthread_mutex_unlock(&srv->monitor_lock);
        int64_t next_probe = cg_mono_ms() + interval;
        if (cg_health_probe(&ctx->env.svc, timeout))
            wake_streams(srv);
        pthread_mutex_lock(&srv->monitor_lock);
        if (!monitor_wait(srv, next_probe))
            break;
    }
    pthread_mutex_unlock(&srv->monitor_lock);
    pool_thread_cleanup(ctx);
    return NULL;
}

/* ---------------------------------------------------------------- events ----------- */

/* How long the delivery thread waits for a notification: also the granularity of the
 * streams' heartbeats, since each step wakes the streams, and of stopping. */
#define EVENTS_TICK_MS 250

static void *events_main(void *arg)
{
    struct cg_server *srv = arg;
    struct cg_store_listener *listener = cg_app_listener_new(srv->app);
    if (listener == NULL) {
        cg_log(CG_LOG_ERROR, "events", NULL, "cannot start the event listener: out of memory");
        return NULL;
    }
    struct cg_rpc_env env;
    cg_app_env(srv->app, &env);
    env.svc.wake_streams = wake_streams_cb;
    env.svc.wake_ctx = srv;
    /* With no events thread the cache is never live: nothing served from it as fresh. */
    while (!atomic_load(&srv->events_stop)) {
        if (cg_events_step(&env.svc, listener, EVENTS_TICK_MS))
            continue;
        /* PostgreSQL away: pause one tick before retrying; shutdown cuts the pause short. */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += EVENTS_TICK_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&srv->monitor_lock);
        if (!atomic_load(&srv->events_stop))
            pthread_cond_timedwait(&srv->monitor_cond, &srv->monitor_lock, &until);
        pthread_mutex_unlock(&srv->monitor_lock);
    }
    cg_store_listener_free(listener);
    return NULL;
}

/* ---------------------------------------------------------------- credentials ------ */

static char *read_file(const char *path, struct cg_err *err, const char *key)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        cg_err_set(err, CG_CONFIG, "config key '%s': cannot read '%.80s'", key, path);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t n;
    while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            if (cap >= (1u << 22))
                break; /* a PEM file of 4 MiB is not a PEM file */
            char *nb = realloc(buf, cap * 2 + 1);
            if (nb == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL) {
        cg_err_set(err, CG_NOMEM, "out of memory reading '%.80s'", path);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

static grpc_server_credentials *make_credentials(const struct cg_config *cfg, struct cg_err *err)
{
    if (cfg->tls_cert[0] == '\0')
        return grpc_insecure_server_credentials_create();
    char *cert = read_file(cfg->tls_cert, err, "tls_cert");
    char *key = cert ? read_file(cfg->tls_key, err, "tls_key") : NULL;
    char *ca = NULL;
    if (key != NULL && cfg->tls_client_ca[0] != '\0')
        ca = read_file(cfg->tls_client_ca, err, "tls_client_ca");
    grpc_server_credentials *creds = NULL;
    /* gRPC only finds a bad pair when it binds, and then blames the address. */
    if (key != NULL && (cfg->tls_client_ca[0] == '\0' || ca != NULL) &&
        cg_tls_check(cert, key, ca, err) == CG_OK) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
               : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
        if (creds == NULL)
            cg_err_set(err, CG_CONFIG,
                       "config keys 'tls_cert'/'tls_key': not usable as TLS credentials");
    }
    free(cert);
    free(key);
    free(ca);
    return creds;
}

/* ---------------------------------------------------------------- start/stop ------- */

/* The server object with its locks and condition variables (on the monotonic clock). */
static struct cg_server *server_new(struct cg_app *app)
{
    struct cg_server *srv = calloc(1, sizeof *srv);
    if (srv == NULL)
        return NULL;
    srv->app = app;
    srv->cfg = app->config;
    srv->health = &app->health;
    atomic_init(&srv->stopping, false);
    pthread_mutex_init(&srv->live_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->live_zero, &ca);
    pthread_cond_init(&srv->monitor_cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&srv->streams_lock, NULL);
    pthread_mutex_init(&srv->monitor_lock, NULL);
    return srv;
}

/* The gRPC server with its message caps, and every method of the table registered. */
static cg_status create_grpc_server(struct cg_server *srv, struct cg_err *err)
{
    const struct cg_config *cfg = srv->cfg;
    grpc_arg args[5];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    /* C core refuses a larger message by itself, with no error details. Up to twice the
     * limit it lets it through so that read_buffer refuses it (MESSAGE_TOO_LARGE, in
     * grpc-status-details-bin); the call's arena is capped at 8x the limit anyway. */
    long long receive_cap = (long long)cfg->max_message_bytes * 2;
    args[0].value.integer = receive_cap > INT_MAX ? INT_MAX : (int)receive_cap;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = (int)cfg->max_message_bytes;
    /* C core sets SO_REUSEPORT by default: a second server on a port already in use would
     * then start too and the kernel would split the connections between the two. Off, the
     * bind fails and the server refuses to start. */
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_ALLOW_REUSEPORT;
    args[2].value.integer = 0;
    /* Channelz (a clock read and counters per stream and message) and census keep figures
     * for services this server does not offer; /metrics has its own. */
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = GRPC_ARG_ENABLE_CHANNELZ;
    args[3].value.integer = 0;
    args[4].type = GRPC_ARG_INTEGER;
    args[4].key = GRPC_ARG_ENABLE_CENSUS;
    args[4].value.integer = 0;
    grpc_channel_args chargs = {5, args};
    srv->server = grpc_server_create(&chargs, NULL);

    srv->methods = cg_rpc_methods(&srv->nmethods);
    srv->handles = calloc(srv->nmethods, sizeof *srv->handles);
    if (srv->handles == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    for (size_t i = 0; i < srv->nmethods; i++) {
        const struct cg_rpc_method *m = &srv->methods[i];
        srv->handles[i] = grpc_server_register_method(
            srv->server, m->path, NULL,
            m->kind == CG_RPC_BIDI_EACH ? GRPC_SRM_PAYLOAD_NONE
                                        : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (srv->handles[i] == NULL)
            return cg_err_set(err, CG_INTERNAL, "cannot register method %s", m->path);
    }
    return CG_OK;
}

/* The completion-queue threads' state (not started yet), each queue registered. */
static cg_status make_workers(struct cg_server *srv, struct cg_err *err)
{
    srv->workers = calloc((size_t)srv->nworkers, sizeof *srv->workers);
    if (srv->workers == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    for (int i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        w->srv = srv;
        w->index = i;
        w->metrics_slot = cg_metrics_slot_claim(srv->app->metrics);
        w->cq = grpc_completion_queue_create_for_next(NULL);
        /* No store here; Reserve and Commit join a running batch from here through the
         * app's batcher (rpc_budget_batch.c). */
        cg_app_env(srv->app, &w->env);
        w->env.svc.wake_streams = wake_streams_cb;
        w->env.svc.wake_ctx = srv;
        w->env.svc.metrics_slot = w->metrics_slot;
        if (cg_random_bytes(w->rid_key, sizeof w->rid_key) != CG_OK) {
            /* No random source: ids stay unique (the clock, the thread), not unguessable. */
            w->rid_key[0] = (uint64_t)cg_wall_ms() * 1000003u;
            w->rid_key[1] = (uint64_t)(uintptr_t)w ^ (uint64_t)i;
        }
        cg_timer_heap_init(&w->timers);
        grpc_server_register_completion_queue(srv->server, w->cq, NULL);
    }
    return CG_OK;
}

/* Binds the listen address (with TLS when configured). */
static cg_status listen_on(struct cg_server *srv, struct cg_err *err)
{
    const struct cg_config *cfg = srv->cfg;
    grpc_server_credentials *creds = make_credentials(cfg, err);
    if (creds == NULL)
        return CG_CONFIG; /* err says why */
    srv->port = grpc_server_add_http2_port(srv->server, cfg->listen, creds);
    grpc_server_credentials_release(creds);
    if (srv->port == 0)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'listen': cannot listen on '%.80s' (is another process "
                          "listening on that port?)",
                          cfg->listen);
    return CG_OK;
}

/* Every queue's request slots: slots_per_method for each method, and the generic ones. */
static cg_status post_slots(struct cg_server *srv, struct cg_err *err)
{
    for (int i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        for (size_t m = 0; m < srv->nmethods; m++)
            for (int k = 0; k < srv->cfg->slots_per_method; k++)
                if (!add_slot(w, &srv->methods[m], srv->handles[m]))
                    return cg_err_set(err, CG_INTERNAL, "cannot post request slots");
        for (int k = 0; k < GENERIC_SLOTS; k++)
            if (!add_slot(w, NULL, NULL))
                return cg_err_set(err, CG_INTERNAL, "cannot post request slots");
    }
    return CG_OK;
}

/* The completion-queue threads, then the monitor and events threads. */
static cg_status start_threads(struct cg_server *srv, struct cg_err *err)
{
    for (int i = 0; i < srv->nworkers; i++) {
        int rc = pthread_create(&srv->workers[i].thread, NULL, worker_main, &srv->workers[i]);
        if (rc != 0) {
            /* Threads already running are stopped by the caller's shutdown. */
            for (int j = i; j < srv->nworkers; j++)
                srv->workers[j].thread = 0;
            return cg_err_set(err, CG_IO, "cannot start completion-queue thread: %s", strerror(rc));
        }
        char name[24]; /* the kernel keeps 15 bytes */
        snprintf(name, sizeof name, "cg-cq-%d", i % 100);
        name[15] = '\0';
        pthread_setname_np(srv->workers[i].thread, name);
    }
    /* An answered probe counts until the next one is overdue by its timeout, and half as
     * much again so that a slow but answered probe does not flap the state: the probe's own
     * deadline gives the verdict first; this bound only matters should the prober hang. */
    cg_health_set_fresh_ms(srv->health,
                           srv->cfg->health_interval_ms + srv->cfg->health_timeout_ms * 3 / 2);
    if (pthread_create(&srv->prober, NULL, health_main, srv) == 0) {
        srv->prober_started = true;
        pthread_setname_np(srv->prober, "cg-health");
    }
    if (pthread_create(&srv->monitor, NULL, monitor_main, srv) == 0) {
        srv->monitor_started = true;
        pthread_setname_np(srv->monitor, "cg-monitor");
    }
    for (int i = 0; i < srv->cfg->notify_threads && i < CG_NOTIFY_THREADS_MAX; i++) {
        srv->notifier_started[i] = pthread_create(&srv->notifiers[i], NULL, notify_main, srv) == 0;
        if (srv->notifier_started[i]) {
            char name[24];
            snprintf(name, sizeof name, "cg-notify-%d", i);
            name[15] = '\0';
            pthread_setname_np(srv->notifiers[i], name);
        }
    }
    atomic_init(&srv->events_stop, false);
    if (pthread_create(&srv->events, NULL, events_main, srv) == 0) {
        srv->events_started = true;
        pthread_setname_np(srv->events, "cg-events");
    }
    return CG_OK;
}

/* The worker pool and the open lane. */
static cg_status make_pools(struct cg_server *srv, struct cg_err *err)
{
    const struct cg_config *cfg = srv->cfg;
    struct cg_pool_opts popts = {
        .threads = (int)cfg->io_threads,
        .max_queue = (size_t)cfg->io_threads * POOL_QUEUE_PER_THREAD,
        .thread_init = pool_thread_init,
        .thread_cleanup = pool_thread_cleanup,
        .arg = srv,
        .name = "cg-pool",
    };
    if ((srv->pool = cg_pool_new(&popts, err)) == NULL)
        return err != NULL ? err->code : CG_NOMEM;
    struct cg_pool_opts oopts = {
        .threads = (int)cfg->stream_open_threads,
        .max_queue = (size_t)cfg->stream_open_threads * OPEN_QUEUE_PER_THREAD,
        .thread_init = open_thread_init,
        .thread_cleanup = pool_thread_cleanup,
        .arg = srv,
        .name = "cg-open",
    };
    if ((srv->open_pool = cg_pool_new(&oopts, err)) == NULL)
        return err != NULL ? err->code : CG_NOMEM;
    return CG_OK;
}

/* The HTTP listener (transport/http.h) when http_listen is set, with its address logged
 * like gRPC's ("http listening", its port: tests find an ephemeral one there). */
static cg_status start_http(struct cg_server *srv, struct cg_err *err)
{
    const struct cg_config *cfg = srv->cfg;
    if (cfg->http_listen[0] == '\0')
        return CG_OK;
    struct cg_http_opts opts = {
        .listen = cfg->http_listen,
        .tls_cert = cfg->http_tls_cert,
        .tls_key = cfg->http_tls_key,
        .max_connections = (unsigned)cfg->http_max_connections,
        .metrics = srv->app->metrics,
        .health = srv->health,
        .routes = srv->http_routes,
        .nroutes = 2,
    };
    if (cfg->http_event_streams_max >= cfg->http_max_connections)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_event_streams_max' (%lld) must be below "
                          "'http_max_connections' (%lld): streams would hold every connection",
                          (long long)cfg->http_event_streams_max,
                          (long long)cfg->http_max_connections);
    cg_app_env(srv->app, &srv->http_env);
    srv->http_env.svc.wake_streams = wake_streams_cb;
    srv->http_env.svc.wake_ctx = srv;
    if (cg_http_api_init(&srv->http_api, srv->pool, (size_t)cfg->max_message_bytes,
                         cfg->max_call_ms, cfg->http_api_rate_per_min, cfg->http_api_burst,
                         &srv->http_env, (int)cfg->http_event_streams_max,
                         (int)cfg->http_event_streams_per_key) != CG_OK)
        return cg_err_set(err, CG_NOMEM, "out of memory for the JSON API");
    srv->http_api_started = true;
    srv->http_api_inited = true;
    atomic_store(&srv->http_wakes, &srv->http_api);
    cg_status st = cg_metrics_callback(srv->app->metrics, "ctxguard_http_event_streams",
                                       "JSON API event streams (Server-Sent Events) open, of "
                                       "http_event_streams_max.",
                                       CG_METRIC_GAUGE, read_event_streams, &srv->http_api, err);
    if (st != CG_OK)
        return st;
    srv->http_routes[0] = (struct cg_http_route){
        .path = "/api/v1/",
        .methods = CG_HTTP_GET | CG_HTTP_POST,
        .handler = cg_http_api_handle,
        .ctx = &srv->http_api,
    };
    /* After the API's: the console takes every other path ("/" is a prefix of all). */
    srv->http_routes[1] = (struct cg_http_route){
        .path = "/",
        .methods = CG_HTTP_GET | CG_HTTP_HEAD,
        .handler = cg_http_console_handle,
        .ctx = NULL,
    };
    if ((srv->http = cg_http_start(&opts, err)) == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    char port[16];
    snprintf(port, sizeof port, "%d", cg_http_port(srv->http));
    struct cg_kv kv[] = {
        {"addr", cfg->http_listen}, {"port", port}, {"tls", cfg->http_tls_cert[0] ? "on" : "off"}};
    cg_log_kv(CG_LOG_INFO, "transport", NULL, "http listening", kv, 3);
    return CG_OK;
}

/* Undoes a start that failed before grpc_server_start: the server, the queues (drained),
 * the pool, the server object; then grpc_shutdown. */
static void free_unstarted(struct cg_server *srv)
{
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    srv->server = NULL;
    if (srv->workers != NULL)
        for (int i = 0; i < srv->nworkers; i++)
            if (srv->workers[i].cq != NULL) {
                grpc_completion_queue_shutdown(srv->workers[i].cq);
                while (grpc_completion_queue_next(srv->workers[i].cq,
                                                  gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                           .type != GRPC_QUEUE_SHUTDOWN)
                    ;
                grpc_completion_queue_destroy(srv->workers[i].cq);
                cg_timer_heap_cleanup(&srv->workers[i].timers);
            }
    free(srv->workers);
    srv->workers = NULL;
    cg_pool_free(srv->pool);
    srv->pool = NULL;
    cg_pool_free(srv->open_pool);
    srv->open_pool = NULL;
    free(srv->handles);
    free(srv->metrics);
    free(srv);
    grpc_shutdown();
}

struct cg_server *cg_server_start(struct cg_app *app, struct cg_err *err)
{
    struct cg_server *srv = server_new(app);
    if (srv == NULL) {
        cg_err_set(err, CG_NOMEM, "out of memory");
        return NULL;
    }
    const struct cg_config *cfg = app->config;

    cg_grpc_runtime_release_mode();
    grpc_init();

    srv->nworkers = (int)cfg->workers;
    if (srv->nworkers == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        srv->nworkers = n > 0 ? (int)(n > 64 ? 64 : n) : 1;
    }

    if (make_pools(srv, err) != CG_OK || create_grpc_server(srv, err) != CG_OK ||
        make_metrics(srv, err) != CG_OK || make_workers(srv, err) != CG_OK ||
        listen_on(srv, err) != CG_OK) {
        free_unstarted(srv);
        return NULL;
    }
    grpc_server_start(srv->server);

    if (post_slots(srv, err) != CG_OK || start_threads(srv, err) != CG_OK ||
        start_http(srv, err) != CG_OK) {
        cg_server_shutdown(srv);
        cg_server_free(srv);
        return NULL;
    }
    return srv;
}

int cg_server_port(const struct cg_server *srv)
{
    return srv->port;
}

void cg_server_shutdown(struct cg_server *srv)
{
    const struct cg_config *cfg = srv->cfg;
    cg_health_set_draining(srv->health, true);
    atomic_store(&srv->stopping, true);
    /* Health watchers hear NOT_SERVING, then their streams end. */
    wake_streams(srv);

    grpc_completion_queue *shutdown_cq = grpc_completion_queue_create_for_pluck(NULL);
    int shutdown_tag; /* its address is the tag, plucked below before it goes */
    grpc_server_shutdown_and_notify(srv->server, shutdown_cq, &shutdown_tag);
    /* Logged once new calls are refused, so that the line means what it says. */
    cg_log(CG_LOG_INFO, "transport", NULL, "draining: NOT_SERVING, finishing in-flight calls");

    /* Posted slots come back unmatched; in-flight calls (held replies too) finish. When both
     * counts are zero every call that reached the server has been answered. gRPC's own
     * notification would also wait for idle client connections to go away, which clients
     * may take seconds to do; nothing is left to serve them, so they are closed below. */
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += cfg->shutdown_grace_ms / 1000;
    until.tv_nsec += (long)(cfg->shutdown_grace_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    if (!wait_idle(srv, &until)) {
        cg_log(CG_LOG_WARN, "transport", NULL,
               "grace period of %lld ms over: cancelling the calls left",
               (long long)cfg->shutdown_grace_ms);
        grpc_server_cancel_all_calls(srv->server);
        wait_idle(srv, NULL);
    } else {
        grpc_server_cancel_all_calls(srv->server); /* no call left: closes idle connections */
    }
    grpc_completion_queue_pluck(shutdown_cq, &shutdown_tag, gpr_inf_future(GPR_CLOCK_REALTIME),
                                NULL);
    grpc_completion_queue_shutdown(shutdown_cq);
    grpc_completion_queue_destroy(shutdown_cq);

    pthread_mutex_lock(&srv->monitor_lock);
    srv->monitor_stop = true;
    pthread_cond_broadcast(&srv->monitor_cond);
    pthread_mutex_unlock(&srv->monitor_lock);
    if (srv->prober_started) {
        pthread_join(srv->prober, NULL);
        srv->prober_started = false;
    }
    if (srv->monitor_started) {
        pthread_join(srv->monitor, NULL);
        srv->monitor_started = false;
    }
    for (int i = 0; i < CG_NOTIFY_THREADS_MAX; i++) {
        if (srv->notifier_started[i]) {
            pthread_join(srv->notifiers[i], NULL);
            srv->notifier_started[i] = false;
        }
    }
    if (srv->events_started) {
        atomic_store(&srv->events_stop, true);
        pthread_mutex_lock(&srv->monitor_lock);
        pthread_cond_broadcast(&srv->monitor_cond); /* a pausing events thread */
        pthread_mutex_unlock(&srv->monitor_lock);
        pthread_join(srv->events, NULL);
        srv->events_started = false;
    }
    /* Up through the drain, so that /readyz says 503 while it lasts; gone before the pools,
     * once every JSON API call on the pool has answered. */
    if (srv->http_api_started) {
        cg_http_api_drain(&srv->http_api);
        srv->http_api_started = false;
    }
    cg_http_stop(srv->http);
    srv->http = NULL;
    cg_pool_stop(srv->pool);
    cg_pool_stop(srv->open_pool);
    for (int i = 0; i < srv->nworkers; i++)
        grpc_completion_queue_shutdown(srv->workers[i].cq);
    for (int i = 0; i < srv->nworkers; i++)
        if (srv->workers[i].thread != 0)
            pthread_join(srv->workers[i].thread, NULL);
    cg_log(CG_LOG_INFO, "transport", NULL, "stopped");
}

void cg_server_free(struct cg_server *srv)
{
    if (srv == NULL)
        return;
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    for (int i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        /* Queues whose thread never ran still hold their shutdown event. */
        if (w->thread == 0)
            while (
                grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
                GRPC_QUEUE_SHUTDOWN)
                ;
        grpc_completion_queue_destroy(w->cq);
        cg_timer_heap_cleanup(&w->timers);
    }
    free(srv->workers);
    cg_pool_free(srv->pool); /* the pool threads' stores and LLM clients */
    cg_pool_free(srv->open_pool);
    free(srv->handles);
    cg_http_stop(srv->http); /* NULL unless the start failed before shutdown */
    if (srv->http_api_inited) {
        atomic_store(&srv->http_wakes, NULL);
        cg_http_api_free(&srv->http_api);
    }
    free(srv->metrics);
    pthread_mutex_destroy(&srv->live_lock);
    pthread_cond_destroy(&srv->live_zero);
    pthread_mutex_destroy(&srv->streams_lock);
    pthread_mutex_destroy(&srv->monitor_lock);
    pthread_cond_destroy(&srv->monitor_cond);
    free(srv);
    grpc_shutdown();
}

/* loadgen.c - an asynchronous gRPC load generator that reads every call's status.
 *
 *   loadgen health      --target T [--conns C --streams M --threads N --seconds S --warmup W]
 *   loadgen check       --target T --key K [--agents N --sessions S --tasks T --prefix P]
 *                       [--dist uniform|zipf|seq --zipf-s 1.0 --seed 1] [common options]
 *   loadgen pairs       --target T --slots FILE [common options]
 *   loadgen setup-check --target T --key K [--agents --sessions --tasks --prefix]
 *                       [--setup-threads N | --sql]
 *   loadgen setup-pairs --target T --layout hot|tenants (--key K | --admin-key A)
 *                       --clients N --slots FILE [--prefix P]
 *
 * The timed modes run C connections (--conns; each its own channel and TCP connection) x M
 * calls in flight on each (--streams) on a completion queue per thread (--threads, default
 * 1; connections are dealt round-robin to threads). Each in-flight slot starts its next call
 * as soon as the last one completes. Calls that complete during the warm-up (--warmup,
 * default 1 s) are not counted; then for --seconds (default 5) every completed call is
 * counted by its gRPC status (OK and each error code separately: a run where calls fail
 * never looks fast), and its latency recorded. Calls still in flight at the end are waited
 * for and dropped.
 *
 * - health: grpc.health.v1.Health/Check (empty request): the transport ceiling.
 * - check: BudgetService/CheckBudget (estimated_tokens 100, delay_mode RETURN_ONLY) on
 *   agent scopes of one tenant. Layout: --agents agents spread evenly over --sessions
 *   sessions x --tasks tasks per session (default 100,000 = 100 x 10 x 100): agent i is
 *   P-a<i> in task P-t<i / per_task % tasks> of session P-s<i / per_session>. Each call
 *   picks an agent uniformly or Zipf-skewed (rank k with probability ~ 1/k^s, precomputed
 *   CDF, seeded xorshift RNG); ranks are scattered over the agents (rank k is agent
 *   k * 7919 mod N when 7919 does not divide N), so the hot agents are not all in one task.
 *   --dist seq takes the agents in order, 0, 1, ... N-1, 0, ... (shared by every slot): a
 *   pass of N calls reads each agent once (a warm-up that fills a cache).
 *   The answer's decision and BudgetSource are counted too (cache / database / policy).
 * - pairs: Reserve (100 tokens, RETURN_ONLY) then Commit (80 in + 10 out) of the
 *   reservation it got, both acknowledged: one op. Slot i (of C x M) uses line i of the
 *   slots file: `KEY SESSION TASK` (its key, so possibly its own tenant, and its task).
 *   A pair whose Reserve fails or holds nothing counts as failed; the Commit is not sent.
 *   Latency is the pair's (Reserve sent to Commit answered).
 * - setup-check: SetBudget on the tenant, every session, task and agent of the layout
 *   (limits 1e15 / 1e13 / 1e12 / 1e11: nothing is ever refused), level by level, from
 *   --setup-threads (default 16) synchronous clients. Every agent thus has a row, so
 *   CheckBudget reads a real four-level path. SetBudget calls of one tenant serialize on
 *   the tenant's row (~300/s here: 100,000 agents take minutes), so with --sql only the
 *   tenant's budget is set through the API and the session, task and agent rows (the same
 *   columns SetBudget fills: level, has_budget, limit_tokens, version 1) are printed as
 *   one SQL transaction for `psql` on the server's database (seconds).
 * - setup-pairs: hot: with --key, budgets on the tenant, session P-pairs and tasks
 *   P-task-0 .. P-task-<clients-1>; every line has the same key (all slots in one tenant
 *   and one session, each its own task: the tenant and session rows are hot). tenants:
 *   with --admin-key, one tenant per client (CreateTenant, an ADMIN key, budgets on its
 *   tenant, session and task): no row is shared. Writes --slots FILE.
 *
 * Output of a timed mode, one line on stdout:
 *   mode=M ops=N calls=N ok=N failed=N statuses=OK:n[,CODE:n...] seconds=S per_s=R
 *   p50_us=A p99_us=B client_cpu_ms=C [decisions=...] [sources=...] [failed_ops=N]
 * ops are calls (health, check) or pairs; per_s counts only the ops that succeeded (every
 * call OK; a pair's Reserve held tokens), per second: a run where calls fail is not fast;
 * p50/p99 are the latencies of those ops; client_cpu_ms is this process's CPU time (user + system,
 * every thread, getrusage) over the measured window only. Exit status 0 when every call was OK, 3
 * when some were not (the line is printed either way), 1/2 on errors/usage.
 */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "base/bigmem.h"
#include "cg_client.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "transport/grpc_runtime.h"

#define NCODES 17         /* gRPC status codes 0..16 */
#define MAX_SLOTS 4096    /* connections x streams */
#define MAX_LAT 50000000u /* latencies kept per thread (200 MB); more are not recorded */
#define ID_MAX 128

enum mode { MODE_HEALTH, MODE_CHECK, MODE_PAIRS, MODE_SETUP_CHECK, MODE_SETUP_PAIRS };

struct opts {
    enum mode mode;
    const char *target, *key, *admin_key, *slots_file, *prefix, *layout;
    long conns, streams, threads, agents, sessions, tasks, clients, setup_threads, timeout_ms;
    double seconds, warmup, zipf_s;
    bool zipf, seq, sql;
    uint64_t seed;
};

/* A pre-encoded request: its bytes stay alive for the whole run (static slices). */
struct body {
    uint8_t *data;
    size_t len;
};

/* Counts of one thread, summed at the end. */
struct tally {
    long calls, ops, ok_ops, failed_ops;
    long codes[NCODES];
    long decisions[5]; /* Decision 0..4 */
    long sources[4];   /* BudgetSource 0..3 */
    uint32_t *lat;     /* op latencies in µs */
    size_t nlat, cap;
    char first_error[256];
};

struct worker;

/* One call in flight at a time; its address is the call's tag. */
struct slot {
    struct worker *w;
    int index; /* global, 0 .. conns*streams-1 */
    grpc_channel *channel;
    grpc_call *call;
    grpc_byte_buffer *send, *recv;
    grpc_metadata_array init_md, trail_md;
    grpc_status_code code;
    grpc_slice details;
    grpc_metadata auth;
    bool has_auth;
    int phase;          /* pairs: 0 Reserve, 1 Commit */
    double op_start;    /* µs, monotonic */
    struct body commit; /* pairs: the Commit of the current reservation (malloc'd) */
    const struct body *reserve;
    uint64_t rng;
};

struct run;

struct worker {
    struct run *run;
    pthread_t thread;
    grpc_completion_queue *cq;
    struct slot **slots;
    int nslots;
    struct tally t;
};

/* Everything a timed run shares; read-only while workers run. */
struct run {
    const struct opts *o;
    double start_us, window_us, end_us;
    grpc_slice method, method2;
    struct body *bodies; /* check: one per agent; pairs: one Reserve per slot */
    long nbodies;
    uint8_t *body_block; /* check: the bodies' bytes, and bodies, in bigmem (pack_bodies) */
    size_t body_block_size;
    double *cdf;       /* zipf */
    atomic_long *next; /* seq: the next agent (shared) */
    struct slot *slots;
    grpc_channel **channels;
    struct worker *workers;
    struct rusage ru_start;
    atomic_int window_started;
};

/* The monotonic clock in µs. */
static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* xorshift64*: the next 64 random bits of state *s (never 0). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* A uniform double in [0, 1) from state *s. */
static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

/* Prints what and exits with status 1. */
static void die(const char *what)
{
    fprintf(stderr, "loadgen: %s\n", what);
    exit(1);
}

/* calloc that exits on failure (n may be 0). */
static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL)
        die("out of memory");
    return p;
}

/* ------------------------------------------------------------------ protobuf --- */

/* Packs msg into a malloc'd body. */
static struct body pack(const ProtobufCMessage *msg)
{
    struct body b;
    b.len = protobuf_c_message_get_packed_size(msg);
    b.data = xcalloc(1, b.len + 1);
    if (protobuf_c_message_pack(msg, b.data) != b.len)
        die("could not encode a request");
    return b;
}

/* Reads a protobuf varint at *p (advanced) into *v; false when it runs past end. */
static bool read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return true;
    }
    return false;
}

/* Finds top-level field `field` of a protobuf message: its varint value (wire type 0) or
 * its bytes (wire type 2). False when absent or malformed. Reads no further than needed. */
static bool pb_field(const uint8_t *p, size_t len, unsigned field, uint64_t *value,
                     const uint8_t **bytes, size_t *blen)
{
    const uint8_t *end = p + len;
    while (p < end) {
        uint64_t tag, v;
        if (!read_varint(&p, end, &tag))
            return false;
        unsigned wt = (unsigned)(tag & 7);
        if (wt == 0) {
            if (!read_varint(&p, end, &v))
                return false;
            if ((tag >> 3) == field) {
                *value = v;
                return true;
            }
        } else if (wt == 2) {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return false;
            if ((tag >> 3) == field && bytes != NULL) {
                *bytes = p;
                *blen = (size_t)v;
                return true;
            }
            p += v;
        } else if (wt == 1) {
            p += 8;
        } else if (wt == 5) {
            p += 4;
        } else {
            return false;
        }
    }
    return false;
}

/* ------------------------------------------------------------------ layout ----- */

/* Agents per task of the check layout (at least 1). */
static long per_agent_task(const struct opts *o)
{
    long n = o->agents / (o->sessions * o->tasks);
    return n > 0 ? n : 1;
}

/* The ids of agent i of the check layout. */
static void agent_ids(const struct opts *o, long i, char *s, char *t, char *a)
{
    long per_task = per_agent_task(o);
    long task_global = i / per_task;
    if (task_global >= o->sessions * o->tasks)
        task_global = o->sessions * o->tasks - 1;
    snprintf(s, ID_MAX, "%s-s%ld", o->prefix, task_global / o->tasks);
    snprintf(t, ID_MAX, "%s-t%ld", o->prefix, task_global % o->tasks);
    snprintf(a, ID_MAX, "%s-a%ld", o->prefix, i);
}

/* Zipf(s) over ranks 1..n: cdf[k-1] = P(rank <= k). */
static double *zipf_cdf(long n, double s)
{
    double *cdf = xcalloc((size_t)n, sizeof *cdf);
    double sum = 0;
    for (long k = 1; k <= n; k++) {
        sum += 1.0 / pow((double)k, s);
        cdf[k - 1] = sum;
    }
    for (long k = 0; k < n; k++)
        cdf[k] /= sum;
    return cdf;
}

/* An agent index drawn by the slot's RNG. */
static long pick_agent(const struct run *r, struct slot *s)
{
    long n = r->o->agents;
    if (r->next != NULL)
        return atomic_fetch_add(r->next, 1) % n;
    double u = rng_unit(&s->rng);
    if (r->cdf == NULL) {
        long i = (long)(u * (double)n);
        return i < n ? i : n - 1;
    }
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (r->cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Scatter ranks over the agents so that the hot ones are in different tasks. */
    return n % 7919 != 0 ? (long)(((uint64_t)lo * 7919u) % (uint64_t)n) : lo;
}

/* The encoded CheckBudgetRequest of agent i. */
static struct body check_body(const struct opts *o, long i)
{
    char s[ID_MAX], t[ID_MAX], a[ID_MAX];
    agent_ids(o, i, s, t, a);
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = s;
    scope.task_id = t;
    scope.agent_id = a;
    Ctxguard__V1__CheckBudgetRequest req = CTXGUARD__V1__CHECK_BUDGET_REQUEST__INIT;
    req.scope = &scope;
    req.estimated_tokens = 100;
    req.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
    return pack(&req.base);
}

/* Moves the check bodies into one block in huge pages (base/bigmem.h), the table of them
 * too: a call picks one of 100,000 at random, and scattered over the heap in 4 KiB pages
 * each pick missed the TLB twice (the load generator's own cost, which shares the machine
 * with the server). */
static void pack_bodies(struct run *r)
{
    size_t total = 0;
    for (long i = 0; i < r->nbodies; i++)
        total += r->bodies[i].len;
    uint8_t *block = cg_bigmem_alloc(total);
    struct body *table = cg_bigmem_alloc((size_t)r->nbodies * sizeof *table);
    if (block == NULL || table == NULL)
        die("out of memory");
    size_t at = 0;
    for (long i = 0; i < r->nbodies; i++) {
        memcpy(block + at, r->bodies[i].data, r->bodies[i].len);
        table[i] = (struct body){block + at, r->bodies[i].len};
        at += r->bodies[i].len;
        free(r->bodies[i].data);
    }
    free(r->bodies);
    r->bodies = table;
    r->body_block = block;
    r->body_block_size = total;
}

/* The encoded ReserveRequest of a pairs slot on session/task. */
static struct body reserve_body(const char *session, const char *task)
{
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = (char *)session;
    scope.task_id = (char *)task;
    Ctxguard__V1__ReserveRequest req = CTXGUARD__V1__RESERVE_REQUEST__INIT;
    req.scope = &scope;
    req.tokens = 100;
    req.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
    return pack(&req.base);
}

/* The encoded CommitRequest of reservation id (id_len bytes, not NUL-terminated). */
static struct body commit_body(const uint8_t *id, size_t id_len)
{
    char rid[ID_MAX];
    if (id_len >= sizeof rid)
        id_len = sizeof rid - 1;
    memcpy(rid, id, id_len);
    rid[id_len] = '\0';
    Ctxguard__V1__TokenUsage usage = CTXGUARD__V1__TOKEN_USAGE__INIT;
    usage.input_tokens = 80;
    usage.output_tokens = 10;
    Ctxguard__V1__CommitRequest req = CTXGUARD__V1__COMMIT_REQUEST__INIT;
    req.reservation_id = rid;
    req.usage = &usage;
    return pack(&req.base);
}

/* ------------------------------------------------------------------ engine ----- */

/* Records one op latency (µs) in t; beyond MAX_LAT latencies they are no longer kept. */
static void tally_latency(struct tally *t, double us)
{
    if (t->nlat == t->cap) {
        if (t->cap >= MAX_LAT)
            return;
        t->cap = t->cap ? t->cap * 2 : 65536;
        t->lat = realloc(t->lat, t->cap * sizeof *t->lat);
        if (t->lat == NULL)
            die("out of memory");
    }
    t->lat[t->nlat++] = us < 0 ? 0 : us > 4e9 ? 4000000000u : (uint32_t)us;
}

/* Starts the slot's next call: the request its mode and phase call for. */
static void slot_start(struct slot *s)
{
    struct run *r = s->w->run;
    const struct body *b;
    grpc_slice method = r->method;
    struct body empty = {(uint8_t *)"", 0};
    switch (r->o->mode) {
    case MODE_CHECK:
        b = &r->bodies[pick_agent(r, s)];
        break;
    case MODE_PAIRS:
        b = s->phase == 0 ? s->reserve : &s->commit;
        method = s->phase == 0 ? r->method : r->method2;
        break;
    default:
        b = &empty;
        break;
    }
    if (s->phase == 0)
        s->op_start = now_us();
    grpc_slice body = grpc_slice_from_static_buffer(b->data, b->len);
    s->send = grpc_raw_byte_buffer_create(&body, 1);
    s->recv = NULL;
    grpc_metadata_array_init(&s->init_md);
    grpc_metadata_array_init(&s->trail_md);
    s->details = grpc_empty_slice();
    gpr_timespec deadline = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                         gpr_time_from_millis(r->o->timeout_ms, GPR_TIMESPAN));
    s->call = grpc_channel_create_call(s->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->w->cq, method,
                                       NULL, deadline, NULL);
    if (s->call == NULL)
        die("could not create a call");
    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = s->has_auth ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = s->has_auth ? &s->auth : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = s->send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &s->recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &s->trail_md;
    ops[5].data.recv_status_on_client.status = &s->code;
    ops[5].data.recv_status_on_client.status_details = &s->details;
    if (grpc_call_start_batch(s->call, ops, 6, s, NULL) != GRPC_CALL_OK)
        die("gRPC refused a call batch");
}

/* The answer's bytes (malloc'd) or NULL. */
static uint8_t *slot_message(struct slot *s, size_t *len)
{
    *len = 0;
    if (s->recv == NULL)
        return NULL;
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, s->recv))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    *len = GRPC_SLICE_LENGTH(all);
    uint8_t *m = xcalloc(1, *len + 1);
    memcpy(m, GRPC_SLICE_START_PTR(all), *len);
    grpc_slice_unref(all);
    return m;
}

/* Frees what the slot's finished call held (the call, buffers, metadata, details). */
static void slot_release(struct slot *s)
{
    grpc_call_unref(s->call);
    s->call = NULL;
    grpc_byte_buffer_destroy(s->send);
    if (s->recv != NULL)
        grpc_byte_buffer_destroy(s->recv);
    grpc_metadata_array_destroy(&s->init_md);
    grpc_metadata_array_destroy(&s->trail_md);
    grpc_slice_unref(s->details);
}

/* Keeps the first failure of t (code and details of s's call) for the report. */
static void note_error(struct tally *t, struct slot *s)
{
    if (t->first_error[0] != '\0')
        return;
    snprintf(t->first_error, sizeof t->first_error, "%s: %.*s", cg_grpc_code_name((int)s->code),
             (int)GRPC_SLICE_LENGTH(s->details), (const char *)GRPC_SLICE_START_PTR(s->details));
}

/* A call of s completed at now; counted when `count`. Returns whether the op is over. */
static bool slot_done(struct slot *s, double now, bool count)
{
    struct tally *t = &s->w->t;
    int code = s->code >= 0 && s->code < NCODES ? (int)s->code : 2;
    size_t len = 0;
    uint8_t *msg = code == 0 ? slot_message(s, &len) : NULL;
    bool op_over = true, op_ok = code == 0;
    if (count) {
        t->calls++;
        t->codes[code]++;
        if (code != 0)
            note_error(t, s);
    }
    if (s->w->run->o->mode == MODE_CHECK && msg != NULL && count) {
        uint64_t v = 0;
        t->decisions[pb_field(msg, len, 1, &v, NULL, NULL) && v < 5 ? v : 0]++;
        v = 0;
        t->sources[pb_field(msg, len, 12, &v, NULL, NULL) && v < 4 ? v : 0]++;
    }
    if (s->w->run->o->mode == MODE_PAIRS) {
        if (s->phase == 0 && op_ok) {
            const uint8_t *resv = NULL, *id = NULL;
            size_t rlen = 0, idlen = 0;
            if (pb_field(msg, len, 1, NULL, &resv, &rlen) &&
                pb_field(resv, rlen, 1, NULL, &id, &idlen) && idlen > 0) {
                free(s->commit.data);
                s->commit = commit_body(id, idlen);
                s->phase = 1;
                op_over = false;
            } else {
                op_ok = false; /* OK without a reservation (e.g. REQUIRE_APPROVAL) */
                if (count && t->first_error[0] == '\0')
                    snprintf(t->first_error, sizeof t->first_error,
                             "Reserve answered OK without a reservation");
            }
        } else {
            s->phase = 0;
        }
    }
    if (op_over && count) {
        t->ops++;
        if (op_ok) {
            t->ok_ops++;
            tally_latency(t, now - s->op_start);
        } else {
            t->failed_ops++;
        }
    }
    free(msg);
    return op_over;
}

/* A worker thread: starts its slots' first calls, then turns completions into the next
 * calls until the end of the window, then waits for the calls in flight. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    int in_flight = 0;
    for (int i = 0; i < w->nslots; i++) {
        slot_start(w->slots[i]);
        in_flight++;
    }
    bool cancelled = false;
    while (in_flight > 0) {
        /* Deadlines end every call; should a call outlive its deadline by a second after
         * the end, cancel what is left (counted as it completes: not in the window). */
        if (!cancelled && now_us() > r->end_us + (double)r->o->timeout_ms * 1e3 + 1e6) {
            for (int i = 0; i < w->nslots; i++)
                if (w->slots[i]->call != NULL)
                    grpc_call_cancel(w->slots[i]->call, NULL);
            cancelled = true;
        }
        grpc_event ev = grpc_completion_queue_next(
            w->cq,
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN)),
            NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT)
            continue;
        if (ev.type != GRPC_OP_COMPLETE)
            die("completion queue failed");
        struct slot *s = ev.tag;
        double now = now_us();
        if (!ev.success)
            s->code = GRPC_STATUS_UNKNOWN;
        if (now >= r->window_us && atomic_exchange(&r->window_started, 1) == 0)
            getrusage(RUSAGE_SELF, &r->ru_start);
        bool counted = now >= r->window_us && now < r->end_us;
        slot_done(s, now, counted);
        slot_release(s);
        if (now < r->end_us)
            slot_start(s);
        else
            in_flight--;
    }
    return NULL;
}

/* qsort order of uint32_t. */
static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* User + system time of ru in ms. */
static double cpu_ms(const struct rusage *ru)
{
    return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e3 +
           (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e3;
}

static const char *const decision_names[5] = {"unspecified", "allow", "warning", "approval",
                                              "deny"};
static const char *const source_names[4] = {"unspecified", "cache", "database", "policy"};

/* Sums the workers' tallies and prints the result line. Returns the exit status. */
static int report(struct run *r, double seconds, double client_ms)
{
    const struct opts *o = r->o;
    struct tally sum = {0};
    for (long i = 0; i < o->threads; i++) {
        struct tally *t = &r->workers[i].t;
        sum.calls += t->calls;
        sum.ops += t->ops;
        sum.ok_ops += t->ok_ops;
        sum.failed_ops += t->failed_ops;
        for (int c = 0; c < NCODES; c++)
            sum.codes[c] += t->codes[c];
        for (int c = 0; c < 5; c++)
            sum.decisions[c] += t->decisions[c];
        for (int c = 0; c < 4; c++)
            sum.sources[c] += t->sources[c];
        if (sum.first_error[0] == '\0')
            memcpy(sum.first_error, t->first_error, sizeof sum.first_error);
        sum.nlat += t->nlat;
    }
    uint32_t *all = xcalloc(sum.nlat, sizeof *all);
    size_t k = 0;
    for (long i = 0; i < o->threads; i++) {
        struct tally *t = &r->workers[i].t;
        if (t->nlat > 0)
            memcpy(all + k, t->lat, t->nlat * sizeof *all);
        k += t->nlat;
    }
    qsort(all, sum.nlat, sizeof *all, cmp_u32);
    uint32_t p50 = sum.nlat ? all[sum.nlat / 2] : 0;
    uint32_t p99 = sum.nlat ? all[(size_t)((double)sum.nlat * 0.99)] : 0;
    free(all);
    static const char *const mode_names[] = {"health", "check", "pairs"};
    long failed = sum.calls - sum.codes[0];
    printf("mode=%s ops=%ld calls=%ld ok=%ld failed=%ld statuses=", mode_names[o->mode], sum.ops,
           sum.calls, sum.codes[0], failed);
    bool first = true;
    for (int c = 0; c < NCODES; c++) {
        if (sum.codes[c] == 0 && !(c == 0 && sum.calls == 0))
            continue;
        printf("%s%s:%ld", first ? "" : ",", cg_grpc_code_name(c), sum.codes[c]);
        first = false;
    }
    printf(" seconds=%.2f per_s=%.0f p50_us=%u p99_us=%u client_cpu_ms=%.0f", seconds,
           seconds > 0 ? (double)sum.ok_ops / seconds : 0.0, p50, p99, client_ms);
    if (o->mode == MODE_CHECK) {
        printf(" decisions=");
        first = true;
        for (int c = 0; c < 5; c++)
            if (sum.decisions[c] > 0) {
                printf("%s%s:%ld", first ? "" : ",", decision_names[c], sum.decisions[c]);
                first = false;
            }
        if (first)
            printf("none");
        printf(" sources=");
        first = true;
        for (int c = 0; c < 4; c++)
            if (sum.sources[c] > 0) {
                printf("%s%s:%ld", first ? "" : ",", source_names[c], sum.sources[c]);
                first = false;
            }
        if (first)
            printf("none");
    }
    if (o->mode == MODE_PAIRS)
        printf(" failed_ops=%ld", sum.failed_ops);
    printf("\n");
    fflush(stdout);
    if (sum.first_error[0] != '\0')
        fprintf(stderr, "loadgen: first failure: %s\n", sum.first_error);
    bool bad = failed > 0 || sum.failed_ops > 0 || sum.calls == 0 ||
               (o->mode == MODE_CHECK && sum.decisions[1] + sum.decisions[2] != sum.codes[0]);
    return bad ? 3 : 0;
}

/* ------------------------------------------------------------------ timed run --- */

/* A plaintext channel to target with the arguments below (exits on failure). */
static grpc_channel *channel_new(const char *target)
{
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    /* Own subchannel pool: each channel is its own TCP connection, as --conns says. No
     * retries (the retry filter copies every message), census or channelz: the client's
     * own CPU per call is what a load generator must keep small. */
    grpc_arg args[7];
    int n = 0;
    args[n++] =
        (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, {.integer = 1}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_ENABLE_RETRIES, {.integer = 0}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_ENABLE_CENSUS, {.integer = 0}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_ENABLE_CHANNELZ, {.integer = 0}};
    args[n++] = (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_MINIMAL_STACK, {.integer = 1}};
    /* The minimal stack would also drop deadline checks: a hung server must still end
     * calls (DEADLINE_EXCEEDED, counted). */
    args[n++] =
        (grpc_arg){GRPC_ARG_INTEGER, (char *)GRPC_ARG_ENABLE_DEADLINE_CHECKS, {.integer = 1}};
    args[n++] = (grpc_arg){GRPC_ARG_STRING,
                           (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING,
                           {.string = (char *)"ctxguard-loadgen"}};
    grpc_channel_args cargs = {.num_args = (size_t)n, .args = args};
    grpc_channel *ch = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (ch == NULL)
        die("gRPC refused the target");
    return ch;
}

/* Reads the slots file: line i is `KEY SESSION TASK`, for slot i. */
static void load_pair_slots(struct run *r, long nslots, char (*keys)[256])
{
    FILE *f = fopen(r->o->slots_file, "r");
    if (f == NULL)
        die("cannot open the slots file (--slots)");
    r->bodies = xcalloc((size_t)nslots, sizeof *r->bodies);
    char line[1024];
    long i = 0;
    while (i < nslots && fgets(line, sizeof line, f) != NULL) {
        char key[256], session[ID_MAX], task[ID_MAX];
        if (sscanf(line, "%255s %127s %127s", key, session, task) != 3)
            continue;
        memcpy(keys[i], key, sizeof key);
        r->bodies[i] = reserve_body(session, task);
        i++;
    }
    fclose(f);
    if (i < nslots) {
        fprintf(stderr, "loadgen: %s has %ld slot lines, the run needs %ld (conns x streams)\n",
                r->o->slots_file, i, nslots);
        exit(1);
    }
    r->nbodies = nslots;
}

/* A timed mode (health, check, pairs): builds the requests, channels, slots and workers,
 * runs the window, prints the line. Returns the exit status (report). */
static int timed_run(const struct opts *o)
{
    struct run r;
    memset(&r, 0, sizeof r);
    r.o = o;
    long nslots = o->conns * o->streams;
    char(*keys)[256] = xcalloc((size_t)nslots, sizeof *keys);
    switch (o->mode) {
    case MODE_HEALTH:
        r.method = grpc_slice_from_static_string("/grpc.health.v1.Health/Check");
        break;
    case MODE_CHECK:
        r.method = grpc_slice_from_static_string("/ctxguard.v1.BudgetService/CheckBudget");
        r.nbodies = o->agents;
        r.bodies = xcalloc((size_t)o->agents, sizeof *r.bodies);
        for (long i = 0; i < o->agents; i++)
            r.bodies[i] = check_body(o, i);
        pack_bodies(&r);
        if (o->zipf)
            r.cdf = zipf_cdf(o->agents, o->zipf_s);
        if (o->seq) {
            r.next = xcalloc(1, sizeof *r.next);
            atomic_init(r.next, 0);
        }
        for (long i = 0; i < nslots; i++)
            snprintf(keys[i], sizeof keys[i], "%s", o->key);
        break;
    default:
        r.method = grpc_slice_from_static_string("/ctxguard.v1.BudgetService/Reserve");
        r.method2 = grpc_slice_from_static_string("/ctxguard.v1.BudgetService/Commit");
        load_pair_slots(&r, nslots, keys);
        break;
    }
    r.channels = xcalloc((size_t)o->conns, sizeof *r.channels);
    for (long c = 0; c < o->conns; c++)
        r.channels[c] = channel_new(o->target);
    r.workers = xcalloc((size_t)o->threads, sizeof *r.workers);
    for (long i = 0; i < o->threads; i++) {
        r.workers[i].run = &r;
        r.workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        r.workers[i].slots = xcalloc((size_t)nslots, sizeof *r.workers[i].slots);
    }
    r.slots = xcalloc((size_t)nslots, sizeof *r.slots);
    for (long i = 0; i < nslots; i++) {
        struct slot *s = &r.slots[i];
        long conn = i % o->conns;
        struct worker *w = &r.workers[conn % o->threads];
        s->w = w;
        s->index = (int)i;
        s->channel = r.channels[conn];
        s->rng = o->seed * 0x9E3779B97F4A7C15ULL + (uint64_t)i * 0xBF58476D1CE4E5B9ULL + 1;
        if (keys[i][0] != '\0') {
            char value[300];
            snprintf(value, sizeof value, "Bearer %s", keys[i]);
            s->auth.key = grpc_slice_from_static_string("authorization");
            s->auth.value = grpc_slice_from_copied_string(value);
            s->has_auth = true;
        }
        if (o->mode == MODE_PAIRS)
            s->reserve = &r.bodies[i];
        w->slots[w->nslots++] = s;
    }
    r.start_us = now_us();
    r.window_us = r.start_us + o->warmup * 1e6;
    r.end_us = r.window_us + o->seconds * 1e6;
    for (long i = 0; i < o->threads; i++)
        if (pthread_create(&r.workers[i].thread, NULL, worker_main, &r.workers[i]) != 0)
            die("cannot start a thread");
    for (long i = 0; i < o->threads; i++)
        pthread_join(r.workers[i].thread, NULL);
    /* The window's CPU: from its first completion to the last worker's end (the drain of
     * calls in flight at the end is a few ms of the run). */
    struct rusage ru_end;
    getrusage(RUSAGE_SELF, &ru_end);
    double client_ms = atomic_load(&r.window_started) ? cpu_ms(&ru_end) - cpu_ms(&r.ru_start) : 0;
    int rc = report(&r, o->seconds, client_ms);
    for (long i = 0; i < nslots; i++) {
        if (r.slots[i].has_auth)
            grpc_slice_unref(r.slots[i].auth.value);
        free(r.slots[i].commit.data);
    }
    for (long c = 0; c < o->conns; c++)
        grpc_channel_destroy(r.channels[c]);
    for (long i = 0; i < o->threads; i++) {
        grpc_completion_queue_shutdown(r.workers[i].cq);
        while (grpc_completion_queue_next(r.workers[i].cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
                   .type != GRPC_QUEUE_SHUTDOWN) {
        }
        grpc_completion_queue_destroy(r.workers[i].cq);
        free(r.workers[i].slots);
        free(r.workers[i].t.lat);
    }
    if (r.body_block != NULL) {
        cg_bigmem_free(r.body_block, r.body_block_size);
        cg_bigmem_free(r.bodies, (size_t)r.nbodies * sizeof *r.bodies);
    } else {
        for (long i = 0; i < r.nbodies; i++)
            free(r.bodies[i].data);
        free(r.bodies);
    }
    free(r.cdf);
    free(r.next);
    free(r.slots);
    free(r.workers);
    free(r.channels);
    free(keys);
    return rc;
}

/* ------------------------------------------------------------------ setup ------ */

/* A synchronous client of the setup modes (exits on failure). */
static struct cg_client *client_new(const char *target, const char *key)
{
    struct cg_client_opts co;
    cg_client_opts_init(&co);
    co.target = target;
    co.bearer_key = key;
    co.timeout_ms = 60000;
    struct cg_err err;
    struct cg_client *c = cg_client_new(&co, &err);
    if (c == NULL) {
        fprintf(stderr, "loadgen: %s\n", err.msg);
        exit(1);
    }
    return c;
}

/* SetBudget limit on the scope s/t/a (all empty: the tenant). 0 or 1 (printed). */
static int set_budget(struct cg_client *c, const char *s, const char *t, const char *a,
                      int64_t limit)
{
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = (char *)s;
    scope.task_id = (char *)t;
    scope.agent_id = (char *)a;
    scope.tenant = s[0] == '\0';
    Ctxguard__V1__BudgetSettings settings = CTXGUARD__V1__BUDGET_SETTINGS__INIT;
    settings.limit_tokens = limit;
    Ctxguard__V1__SetBudgetRequest req = CTXGUARD__V1__SET_BUDGET_REQUEST__INIT;
    req.scope = &scope;
    req.settings = &settings;
    ProtobufCMessage *resp = NULL;
    struct cg_client_status st;
    if (cg_client_unary(c, "/ctxguard.v1.BudgetService/SetBudget", &req.base,
                        &ctxguard__v1__set_budget_response__descriptor, &resp, &st) != CG_OK) {
        fprintf(stderr, "loadgen: SetBudget %s/%s/%s: %s %s\n", s, t, a, st.name, st.message);
        return 1;
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

/* One level of setup-check, shared by its threads: items next .. count-1. */
struct setup_level {
    const struct opts *o;
    int level; /* 2 sessions, 3 tasks, 4 agents */
    long count;
    atomic_long next, errors;
};

/* A setup-check thread: SetBudget on items of its level until none is left or one failed. */
static void *setup_main(void *arg)
{
    struct setup_level *l = arg;
    const struct opts *o = l->o;
    struct cg_client *c = client_new(o->target, o->key);
    for (;;) {
        long i = atomic_fetch_add(&l->next, 1);
        if (i >= l->count || atomic_load(&l->errors) > 0)
            break;
        char s[ID_MAX], t[ID_MAX], a[ID_MAX];
        int rc;
        if (l->level == 2) {
            snprintf(s, sizeof s, "%s-s%ld", o->prefix, i);
            rc = set_budget(c, s, "", "", 10000000000000LL);
        } else if (l->level == 3) {
            snprintf(s, sizeof s, "%s-s%ld", o->prefix, i / o->tasks);
            snprintf(t, sizeof t, "%s-t%ld", o->prefix, i % o->tasks);
            rc = set_budget(c, s, t, "", 1000000000000LL);
        } else {
            agent_ids(o, i, s, t, a);
            rc = set_budget(c, s, t, a, 100000000000LL);
        }
        if (rc != 0)
            atomic_fetch_add(&l->errors, 1);
    }
    cg_client_free(c);
    return NULL;
}

/* The key's tenant id (WhoAmI) into id. */
static int tenant_of_key(struct cg_client *c, char *id, size_t cap)
{
    Ctxguard__V1__WhoAmIRequest req = CTXGUARD__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    struct cg_client_status st;
    if (cg_client_unary(c, "/ctxguard.v1.AdminService/WhoAmI", &req.base,
                        &ctxguard__v1__who_am_iresponse__descriptor, &resp, &st) != CG_OK) {
        fprintf(stderr, "loadgen: WhoAmI: %s %s\n", st.name, st.message);
        return 1;
    }
    snprintf(id, cap, "%s", ((Ctxguard__V1__WhoAmIResponse *)resp)->tenant_id);
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

/* setup-check --sql: the rows below the tenant as SQL on stdout (for psql on the server's
 * database), the same rows and budgets SetBudget would create, in one transaction: seconds
 * instead of minutes, since SetBudget calls of one tenant serialize on its row (~300/s). */
static void print_check_sql(const struct opts *o, const char *tenant)
{
    const char *cols = "INSERT INTO scopes (tenant_id, session_id, task_id, agent_id, level,"
                       " has_budget, limit_tokens, version)";
    printf("BEGIN;\n");
    printf("%s SELECT '%s', '%s-s' || s, '', '', 2, true, 10000000000000, 1"
           " FROM generate_series(0, %ld) s;\n",
           cols, tenant, o->prefix, o->sessions - 1);
    printf("%s SELECT '%s', '%s-s' || s, '%s-t' || t, '', 3, true, 1000000000000, 1"
           " FROM generate_series(0, %ld) s, generate_series(0, %ld) t;\n",
           cols, tenant, o->prefix, o->prefix, o->sessions - 1, o->tasks - 1);
    printf("%s SELECT '%s', '%s-s' || (g / %ld), '%s-t' || (g %% %ld), '%s-a' || i, 4, true,"
           " 100000000000, 1 FROM (SELECT i, least(i / %ld, %ld) AS g"
           " FROM generate_series(0, %ld) i) x;\n",
           cols, tenant, o->prefix, o->tasks, o->prefix, o->tasks, o->prefix, per_agent_task(o),
           o->sessions * o->tasks - 1, o->agents - 1);
    printf("COMMIT;\n");
}

/* setup-check: the tenant's budget, then sessions, tasks and agents level by level through
 * SetBudget, or (--sql) their rows as SQL on stdout. 0 or 1. */
static int setup_check(const struct opts *o)
{
    struct cg_client *c = client_new(o->target, o->key);
    char tenant[ID_MAX];
    int rc = set_budget(c, "", "", "", 1000000000000000LL) ||
             (o->sql && tenant_of_key(c, tenant, sizeof tenant));
    cg_client_free(c);
    if (rc != 0)
        return 1;
    if (o->sql) {
        print_check_sql(o, tenant);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    long counts[3] = {o->sessions, o->sessions * o->tasks, o->agents};
    double t0 = now_us();
    for (int level = 2; level <= 4; level++) {
        struct setup_level l = {.o = o, .level = level, .count = counts[level - 2]};
        atomic_init(&l.next, 0);
        atomic_init(&l.errors, 0);
        long n = o->setup_threads;
        pthread_t *th = xcalloc((size_t)n, sizeof *th);
        for (long i = 0; i < n; i++)
            if (pthread_create(&th[i], NULL, setup_main, &l) != 0)
                die("cannot start a thread");
        for (long i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        free(th);
        if (atomic_load(&l.errors) > 0)
            return 1;
    }
    fprintf(stderr,
            "loadgen: setup-check: %ld sessions x %ld tasks x %ld agents each (%ld agents) in "
            "%.1f s\n",
            o->sessions, o->tasks, per_agent_task(o), o->agents, (now_us() - t0) / 1e6);
    return 0;
}

/* A new tenant and an ADMIN key of it (the secret into key). */
static int tenant_new(struct cg_client *admin, const char *name, char *key, size_t cap)
{
    Ctxguard__V1__CreateTenantRequest treq = CTXGUARD__V1__CREATE_TENANT_REQUEST__INIT;
    treq.name = (char *)name;
    ProtobufCMessage *resp = NULL;
    struct cg_client_status st;
    if (cg_client_unary(admin, "/ctxguard.v1.AdminService/CreateTenant", &treq.base,
                        &ctxguard__v1__create_tenant_response__descriptor, &resp, &st) != CG_OK) {
        fprintf(stderr, "loadgen: CreateTenant %s: %s %s\n", name, st.name, st.message);
        return 1;
    }
    Ctxguard__V1__CreateTenantResponse *tr = (Ctxguard__V1__CreateTenantResponse *)resp;
    Ctxguard__V1__CreateApiKeyRequest kreq = CTXGUARD__V1__CREATE_API_KEY_REQUEST__INIT;
    kreq.tenant_id = tr->tenant->tenant_id;
    kreq.name = (char *)"loadgen";
    kreq.role = CTXGUARD__V1__API_KEY_ROLE__API_KEY_ROLE_ADMIN;
    ProtobufCMessage *kresp = NULL;
    cg_status rc = cg_client_unary(admin, "/ctxguard.v1.AdminService/CreateApiKey", &kreq.base,
                                   &ctxguard__v1__create_api_key_response__descriptor, &kresp, &st);
    protobuf_c_message_free_unpacked(resp, NULL);
    if (rc != CG_OK) {
        fprintf(stderr, "loadgen: CreateApiKey %s: %s %s\n", name, st.name, st.message);
        return 1;
    }
    snprintf(key, cap, "%s", ((Ctxguard__V1__CreateApiKeyResponse *)kresp)->secret);
    protobuf_c_message_free_unpacked(kresp, NULL);
    return 0;
}

/* setup-pairs: the budgets (and tenants) of the layout, and the slots file. 0 or 1. */
static int setup_pairs(const struct opts *o)
{
    bool tenants = strcmp(o->layout, "tenants") == 0;
    if (!tenants && strcmp(o->layout, "hot") != 0)
        die("--layout is hot or tenants");
    if ((tenants ? o->admin_key : o->key) == NULL)
        die(tenants ? "--layout tenants needs --admin-key" : "--layout hot needs --key");
    FILE *f = fopen(o->slots_file, "w");
    if (f == NULL)
        die("cannot write the slots file (--slots)");
    struct cg_client *admin = tenants ? client_new(o->target, o->admin_key) : NULL;
    char session[ID_MAX], task[ID_MAX], key[256];
    snprintf(session, sizeof session, "%s-pairs", o->prefix);
    int rc = 0;
    struct cg_client *c = NULL;
    if (!tenants) {
        c = client_new(o->target, o->key);
        rc = set_budget(c, "", "", "", 1000000000000000LL) ||
             set_budget(c, session, "", "", 100000000000000LL);
        snprintf(key, sizeof key, "%s", o->key);
    }
    for (long i = 0; i < o->clients && rc == 0; i++) {
        snprintf(task, sizeof task, "%s-task-%ld", o->prefix, i);
        if (tenants) {
            char name[ID_MAX];
            snprintf(name, sizeof name, "%s-tenant-%ld", o->prefix, i);
            rc = tenant_new(admin, name, key, sizeof key);
            if (rc != 0)
                break;
            c = client_new(o->target, key);
            rc = set_budget(c, "", "", "", 1000000000000000LL) ||
                 set_budget(c, session, "", "", 100000000000000LL);
        }
        rc = rc || set_budget(c, session, task, "", 1000000000000LL);
        if (tenants) {
            cg_client_free(c);
            c = NULL;
        }
        fprintf(f, "%s %s %s\n", key, session, task);
    }
    cg_client_free(c);
    cg_client_free(admin);
    if (fclose(f) != 0)
        rc = 1;
    return rc;
}

/* ------------------------------------------------------------------ main ------- */

/* Prints the usage and exits with status 2. */
static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen health|check|pairs|setup-check|setup-pairs --target HOST:PORT\n"
            "  [--key K] [--admin-key A] [--conns C] [--streams M] [--threads N]\n"
            "  [--seconds S] [--warmup W] [--agents N] [--sessions S] [--tasks T]\n"
            "  [--dist uniform|zipf|seq] [--zipf-s S] [--seed N] [--prefix P] [--slots FILE]\n"
            "  [--layout hot|tenants] [--clients N] [--setup-threads N] [--timeout-ms MS] [--sql]\n"
            "(see the head of bench/loadgen.c)\n");
    exit(2);
}

/* s as an integer in lo..hi, else exits with status 2. */
static long num(const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "loadgen: %s is not a number in %ld..%ld\n", s, lo, hi);
        exit(2);
    }
    return v;
}

/* s as a number in lo..hi, else exits with status 2. */
static double fnum(const char *s, double lo, double hi)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "loadgen: %s is not a number in %g..%g\n", s, lo, hi);
        exit(2);
    }
    return v;
}

/* The command line into o (defaults filled); exits with status 2 on a bad one. */
static void parse(int argc, char **argv, struct opts *o)
{
    static const char *const modes[] = {"health", "check", "pairs", "setup-check", "setup-pairs"};
    if (argc < 2)
        usage();
    int m = 0;
    while (m < 5 && strcmp(argv[1], modes[m]) != 0)
        m++;
    if (m == 5)
        usage();
    *o = (struct opts){.mode = (enum mode)m,
                       .prefix = "lg",
                       .layout = "hot",
                       .conns = 4,
                       .streams = 16,
                       .threads = 1,
                       .agents = 100000,
                       .sessions = 100,
                       .tasks = 10,
                       .clients = 64,
                       .setup_threads = 16,
                       .timeout_ms = 10000,
                       .seconds = 5,
                       .warmup = 1,
                       .zipf_s = 1.0,
                       .seed = 1};
    static const struct option longs[] = {{"target", 1, 0, 'T'},        {"key", 1, 0, 'k'},
                                          {"admin-key", 1, 0, 'A'},     {"conns", 1, 0, 'c'},
                                          {"streams", 1, 0, 'm'},       {"threads", 1, 0, 'j'},
                                          {"seconds", 1, 0, 'D'},       {"warmup", 1, 0, 'W'},
                                          {"agents", 1, 0, 'n'},        {"sessions", 1, 0, 'S'},
                                          {"tasks", 1, 0, 't'},         {"dist", 1, 0, 'd'},
                                          {"zipf-s", 1, 0, 'z'},        {"seed", 1, 0, 'r'},
                                          {"prefix", 1, 0, 'p'},        {"slots", 1, 0, 'f'},
                                          {"layout", 1, 0, 'L'},        {"clients", 1, 0, 'C'},
                                          {"setup-threads", 1, 0, 'J'}, {"timeout-ms", 1, 0, 'o'},
                                          {"sql", 0, 0, 'Q'},           {0, 0, 0, 0}};
    optind = 2;
    int ch;
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'T':
            o->target = optarg;
            break;
        case 'k':
            o->key = optarg;
            break;
        case 'A':
            o->admin_key = optarg;
            break;
        case 'c':
            o->conns = num(optarg, 1, 1024);
            break;
        case 'm':
            o->streams = num(optarg, 1, 1024);
            break;
        case 'j':
            o->threads = num(optarg, 1, 64);
            break;
        case 'D':
            o->seconds = fnum(optarg, 0.1, 3600);
            break;
        case 'W':
            o->warmup = fnum(optarg, 0, 600);
            break;
        case 'n':
            o->agents = num(optarg, 1, 10000000);
            break;
        case 'S':
            o->sessions = num(optarg, 1, 1000000);
            break;
        case 't':
            o->tasks = num(optarg, 1, 1000000);
            break;
        case 'd':
            if (strcmp(optarg, "zipf") != 0 && strcmp(optarg, "uniform") != 0 &&
                strcmp(optarg, "seq") != 0)
                usage();
            o->zipf = strcmp(optarg, "zipf") == 0;
            o->seq = strcmp(optarg, "seq") == 0;
            break;
        case 'z':
            o->zipf_s = fnum(optarg, 0.01, 10);
            break;
        case 'r':
            o->seed = (uint64_t)num(optarg, 0, 1L << 62);
            break;
        case 'p':
            o->prefix = optarg;
            break;
        case 'f':
            o->slots_file = optarg;
            break;
        case 'L':
            o->layout = optarg;
            break;
        case 'C':
            o->clients = num(optarg, 1, MAX_SLOTS);
            break;
        case 'J':
            o->setup_threads = num(optarg, 1, 256);
            break;
        case 'o':
            o->timeout_ms = num(optarg, 1, 600000);
            break;
        case 'Q':
            o->sql = true;
            break;
        default:
            usage();
        }
    }
    if (optind != argc || o->target == NULL || strlen(o->prefix) > 40)
        usage();
    if (o->conns * o->streams > MAX_SLOTS)
        die("conns x streams is over 4096");
    if (o->threads > o->conns)
        o->threads = o->conns;
    if ((o->mode == MODE_CHECK || o->mode == MODE_SETUP_CHECK) && o->key == NULL)
        die("check needs --key");
    if (o->mode == MODE_CHECK || o->mode == MODE_SETUP_CHECK) {
        if (o->sessions * o->tasks > o->agents)
            die("--sessions x --tasks is over --agents");
    }
    if ((o->mode == MODE_PAIRS || o->mode == MODE_SETUP_PAIRS) && o->slots_file == NULL)
        die("pairs needs --slots FILE");
}

/* Runs the mode of argv[1]; see the head of this file. */
int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    cg_client_set_grpc_logging(false);
    cg_grpc_runtime_release_mode(); /* as the server: Debian's Abseil checks every lock */
    grpc_init();
    int rc;
    switch (o.mode) {
    case MODE_SETUP_CHECK:
        rc = setup_check(&o);
        break;
    case MODE_SETUP_PAIRS:
        rc = setup_pairs(&o);
        break;
    default:
        rc = timed_run(&o);
        break;
    }
    grpc_shutdown();
    return rc;
}

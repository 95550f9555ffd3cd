/* http_api.c - the JSON API on the HTTP listener (http_api.h). */
#include "transport/http_api.h"
#include "transport/http_api_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "rpc/pb_form.h"
#include "rpc/pb_json.h"

#define PREFIX "/api/v1/"
#define ARENA_FIRST_BLOCK (16 * 1024)

/* What the API exposes: the reads a dashboard needs and the operator's actions. */
static const struct exposed {
    const char *service; /* the proto service's short name */
    const char *method;
    unsigned http; /* CG_HTTP_GET: a read (query arguments); CG_HTTP_POST: an action */
} exposed[] = {
    {"BudgetService", "GetUsage", CG_HTTP_GET},
    {"BudgetService", "ListScopes", CG_HTTP_GET},
    {"BudgetService", "GetUsageHistory", CG_HTTP_GET},
    {"BudgetService", "GetBudget", CG_HTTP_GET},
    {"BudgetService", "GetApproval", CG_HTTP_GET},
    {"BudgetService", "ListApprovals", CG_HTTP_GET},
    {"BudgetService", "ListNotificationChannels", CG_HTTP_GET},
    {"BudgetService", "ListNotificationDeliveries", CG_HTTP_GET},
    {"BudgetService", "ResolveApproval", CG_HTTP_POST},
    {"BudgetService", "WatchUsage", CG_HTTP_GET}, /* Server-Sent Events (http_sse.c) */
    {"ContextService", "GetCompressionStats", CG_HTTP_GET},
    {"AdminService", "ListAuditEvents", CG_HTTP_GET},
    {"AdminService", "WhoAmI", CG_HTTP_GET},
};

#define LIMITER_BUCKETS 4096

cg_status cg_http_api_init(struct cg_http_api *api, struct cg_pool *pool, size_t max_message_bytes,
                           int64_t max_call_ms, int64_t rate_per_min, int64_t burst,
                           const struct cg_rpc_env *stream_env, int max_streams,
                           int streams_per_key)
{
    memset(api, 0, sizeof *api);
    atomic_init(&api->streams_closing, false);
    api->pool = pool;
    api->stream_env = stream_env;
    api->max_streams = max_streams;
    api->streams_per_key = streams_per_key;
    api->max_message_bytes = max_message_bytes;
    api->max_call_ms = max_call_ms;
    api->rate_per_min = rate_per_min;
    api->burst = burst;
    if (rate_per_min > 0 &&
        (api->limiter = cg_rate_limiter_new(LIMITER_BUCKETS, rate_per_min, burst)) == NULL)
        return CG_NOMEM;
    pthread_mutex_init(&api->lock, NULL);
    pthread_cond_init(&api->idle, NULL);
    return CG_OK;
}

void cg_http_api_drain(struct cg_http_api *api)
{
    pthread_mutex_lock(&api->lock);
    api->closing = true;
    atomic_store(&api->streams_closing, true);
    while (api->inflight > 0)
        pthread_cond_wait(&api->idle, &api->lock);
    pthread_mutex_unlock(&api->lock);
    cg_http_api_wake(api); /* the event streams see closing and end */
}

void cg_http_api_free(struct cg_http_api *api)
{
    pthread_cond_destroy(&api->idle);
    pthread_mutex_destroy(&api->lock);
    cg_rate_limiter_free(api->limiter);
    api->limiter = NULL;
}

/* The answer of a call that succeeded: the response message as JSON. */
static void respond_message(struct cg_http_api_call *c, const uint8_t *out, size_t out_len)
{
    ProtobufCAllocator alloc;
    cg_rpc_allocator(c->arena, &alloc);
    ProtobufCMessage *msg =
        protobuf_c_message_unpack(c->method->response_desc, &alloc, out_len, out);
    char *text = NULL;
    size_t len = 0;
    FILE *f = msg != NULL ? open_memstream(&text, &len) : NULL;
    bool ok = f != NULL && cg_json_write_message(f, msg) == CG_OK;
    if (f != NULL)
        ok = fclose(f) == 0 && ok;
    if (!ok) {
        free(text);
        struct cg_err err;
        cg_err_set(&err, CG_INTERNAL, "the answer could not be written as JSON");
        cg__http_api_error(c->req, CG_INTERNAL, &err, c->request_id);
        return;
    }
    (void)cg_http_respond(c->req, 200, "application/json; charset=utf-8", text, len);
}

/* ---------------------------------------------------------------- the call -------- */

static void run(struct cg_job *job, void *thread_ctx)
{
    struct cg_http_api_call *c = (struct cg_http_api_call *)job;
    const struct cg_rpc_env *env = thread_ctx; /* the pool's thread context (http_api.h) */
    struct cg_rpc_call call;
    memset(&call, 0, sizeof call);
    call.arena = c->arena;
    call.request_id = c->request_id;
    call.authorization = c->authorization;
    call.deadline_ms = cg_mono_ms() + c->api->max_call_ms;
    call.max_message_bytes = c->api->max_message_bytes;
    uint8_t *req_buf = NULL, *out = NULL;
    size_t req_len = 0, out_len = 0;
    cg_op_fate fate = CG_OP_DONE;
    cg_status st = cg__http_api_build(c, &req_buf, &req_len, &call.err);
    if (st == CG_OK) {
        cg_store_set_deadline(env->svc.store, call.deadline_ms);
        st = cg_rpc_invoke(c->method, &call, env, req_buf, req_len, &out, &out_len, &fate);
        cg_store_set_deadline(env->svc.store, 0);
        if (st == CG_OK && fate != CG_OP_DONE)
            st = cg_err_set(&call.err, CG_INTERNAL, "%s did not finish on the pool",
                            c->method->path);
    }
    if (st == CG_OK)
        respond_message(c, out, out_len);
    else
        cg__http_api_error(c->req, st, &call.err, c->request_id);
    cg__http_api_call_free(c);
}

/* ---------------------------------------------------------------- the route ------- */

static bool take_arg(void *ctx, const char *key, const char *value)
{
    struct cg_http_api_call *c = ctx;
    if (c->nargs == CG_HTTP_API_ARGS_MAX) {
        c->too_many_args = true;
        return false;
    }
    const char *k = cg_arena_strdup(c->arena, key), *v = cg_arena_strdup(c->arena, value);
    if (k == NULL || v == NULL) {
        c->too_many_args = true; /* out of room: refused the same way */
        return false;
    }
    c->arg_keys[c->nargs] = k;
    c->arg_values[c->nargs++] = v;
    return true;
}

/* The exposed method a path names ("/api/v1/BudgetService/GetUsage"), or NULL. */
static const struct exposed *find_exposed(const char *path, const struct cg_rpc_method **m)
{
    const char *rest = path + strlen(PREFIX);
    const char *slash = strchr(rest, '/');
    if (slash == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof exposed / sizeof exposed[0]; i++) {
        size_t n = strlen(exposed[i].service);
        if ((size_t)(slash - rest) == n && strncmp(rest, exposed[i].service, n) == 0 &&
            strcmp(slash + 1, exposed[i].method) == 0) {
            char full[128];
            snprintf(full, sizeof full, "/ctxguard.v1.%s/%s", exposed[i].service,
                     exposed[i].method);
            *m = cg_rpc_find(full);
            return *m != NULL ? &exposed[i] : NULL;
        }
    }
    return NULL;
}

/* The caller's X-Request-Id when it is one we take (letters, digits, -_.; 1..64), else a
 * new one. */
static void request_id_of(struct cg_http_request *req, char out[CG_HTTP_API_REQUEST_ID_MAX + 1])
{
    const char *given = cg_http_request_header(req, "X-Request-Id");
    size_t n = given != NULL ? strlen(given) : 0;
    if (n > 0 && n <= CG_HTTP_API_REQUEST_ID_MAX &&
        strspn(given, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n) {
        memcpy(out, given, n + 1);
        return;
    }
    char id[17];
    cg_request_id(id);
    memcpy(out, id, sizeof id);
}

/* The caller's bucket (core/ratelimit.h), by its hashed Authorization header: refused
 * requests are answered 429 here. */
static bool allowed(struct cg_http_api *api, struct cg_http_request *req,
                    const uint8_t caller[CG_SHA256_LEN], const char *rid)
{
    if (api->limiter == NULL)
        return true;
    int64_t retry_ms = 0;
    if (cg_rate_limiter_take(api->limiter, caller, cg_mono_ms(), &retry_ms))
        return true;
    struct cg_err err;
    cg_err_set(&err, CG_RESOURCE_EXHAUSTED,
               "rate limit: %lld requests a minute after a burst of %lld for this key; retry "
               "in %lld ms",
               (long long)api->rate_per_min, (long long)api->burst, (long long)retry_ms);
    cg_err_meta_i64(&err, "retry_after_ms", (long long)retry_ms);
    cg__http_api_error(req, CG_RESOURCE_EXHAUSTED, &err, rid);
    return false;
}

void cg_http_api_handle(struct cg_http_request *req, void *ctx)
{
    struct cg_http_api *api = ctx;
    char rid[CG_HTTP_API_REQUEST_ID_MAX + 1];
    request_id_of(req, rid);
    struct cg_err err;
    cg_err_clear(&err);
    const struct cg_rpc_method *m = NULL;
    const struct exposed *e = find_exposed(cg_http_request_path(req), &m);
    if (e == NULL) {
        cg_err_set(&err, CG_NOT_FOUND, "%s: no such API method", cg_http_request_path(req));
        cg__http_api_error(req, CG_NOT_FOUND, &err, rid);
        return;
    }
    if (cg_http_request_method(req) != e->http) {
        cg_err_set(&err, CG_INVALID_ARGUMENT, "%s takes %s", e->method,
                   e->http == CG_HTTP_GET ? "GET with query arguments" : "POST with a JSON body");
        cg__http_api_error(req, CG_INVALID_ARGUMENT, &err, rid);
        return;
    }
    const char *auth = cg_http_request_header(req, "Authorization");
    uint8_t caller[CG_SHA256_LEN];
    cg_sha256(auth != NULL ? auth : "", auth != NULL ? strlen(auth) : 0, caller);
    if (!allowed(api, req, caller, rid))
        return;
    if (!cg__http_api_enter(api)) {
        cg_err_set(&err, CG_UNAVAILABLE, "the server is shutting down: retry on another");
        cg__http_api_error(req, CG_UNAVAILABLE, &err, rid);
        return;
    }
    struct cg_http_api_call *c = calloc(1, sizeof *c);
    size_t cap = api->max_message_bytes * 8 + (1u << 20);
    if (c == NULL || (c->arena = cg_arena_new(ARENA_FIRST_BLOCK, cap)) == NULL) {
        free(c);
        (void)cg_http_respond_text(req, 503, "out of memory\n");
        cg__http_api_leave(api);
        return;
    }
    c->job.run = run;
    c->api = api;
    c->req = req;
    c->method = m;
    memcpy(c->request_id, rid, sizeof rid);
    memcpy(c->caller, caller, sizeof caller);
    c->authorization = auth != NULL ? cg_arena_strdup(c->arena, auth) : NULL;
    (void)cg_http_request_args(req, take_arg, c);
    size_t body_len = 0;
    const char *body = cg_http_request_body(req, &body_len);
    if (body != NULL && body_len > 0 && (c->body = cg_arena_strdup(c->arena, body)) != NULL)
        c->body_len = strlen(c->body); /* a NUL inside is no JSON anyway */
    if (m->kind == CG_RPC_SERVER_STREAM) {
        const char *last = cg_http_request_header(req, "Last-Event-ID");
        c->last_event_id = last != NULL ? cg_arena_strdup(c->arena, last) : NULL;
        cg__http_sse_start(c);
        return;
    }
    if (cg_pool_submit(api->pool, &c->job) != CG_OK) {
        cg_err_set(&err, CG_UNAVAILABLE, "the server is busy: retry later");
        cg__http_api_error(req, CG_UNAVAILABLE, &err, rid);
        cg__http_api_call_free(c);
    }
}

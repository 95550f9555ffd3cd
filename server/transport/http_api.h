/* http_api.h - the JSON API on the HTTP listener (/api/v1/): the read RPCs a dashboard needs
 * and the operator's actions, as plain HTTP with JSON, for the console and for scripts.
 *
 *   GET  /api/v1/<Service>/<Method>?field=value&scope.session_id=s1   a read
 *   POST /api/v1/<Service>/<Method>   body: the request as a JSON object      an action
 *
 * <Service> is BudgetService, ContextService or AdminService; the methods are a fixed list
 * (http_api.c: exposed): the reads GetUsage, ListScopes, GetUsageHistory, GetBudget,
 * GetApproval, ListApprovals, ListNotificationChannels, ListNotificationDeliveries,
 * GetCompressionStats, ListAuditEvents, WhoAmI (GET, query arguments named as the request's
 * fields, pb_form.h) and the action ResolveApproval (POST, a JSON body). Anything else: 404.
 *
 * Each request runs as the RPC itself runs (rpc/rpc.h cg_rpc_invoke on a pool thread): the
 * same API key from `Authorization: Bearer <key>`, the same roles, the same checks and
 * errors. The answer is the response message as JSON (rpc/pb_json.h: proto field names,
 * every field). An error is the HTTP status of its gRPC code (400 INVALID_ARGUMENT and
 * FAILED_PRECONDITION, 401, 403, 404, 409 ALREADY_EXISTS and ABORTED, 429
 * RESOURCE_EXHAUSTED, 501, 503, 504, 500 otherwise) with
 *   {"error": {"code": "NOT_FOUND", "reason": "SCOPE_NOT_FOUND", "message": "...",
 *              "field": "scope.session_id", "request_id": "..."}}
 * Each caller (its Authorization header, hashed; no header: one shared caller) may make
 * http_api_burst requests at once and then http_api_rate_per_min a minute: past that, 429
 * RESOURCE_EXHAUSTED saying when to retry, before anything runs (core/ratelimit.h).
 * Answers carry Cache-Control: no-store. The request id is the caller's X-Request-Id (when it
 * is 1..64 letters, digits, '-', '_', '.') or a new one, in the logs and in an error's body.
 *
 * The live feed: GET /api/v1/BudgetService/WatchUsage?<WatchUsageRequest fields> answers
 * text/event-stream (Server-Sent Events, http_sse.c) once the stream is open (errors before
 * that are the JSON errors above). Each event is a frame
 *   id: <occurred_at_unix_ms>            (stored events only: not SNAPSHOT nor HEARTBEAT)
 *   event: <type in lower case, e.g. usage_changed, approval_decided, heartbeat>
 *   data: <the UsageEvent as JSON, one line>
 * A reconnecting client sends its last id as Last-Event-ID: the stream then starts with the
 * events stored since that time less RESUME_MARGIN_MS (WatchUsageRequest.resume_from_unix_ms;
 * repeats are possible, (scope, sequence) identifies an event). Bounded: at most
 * streams_per_key streams per caller (as the rate limit tells callers apart) and
 * max_streams in all (429 beyond); a stream holds no thread while it waits (its connection
 * sleeps until cg_http_api_wake); a client too slow for its feed skips ahead, and the next
 * event's message says how many it lost (service/watch.h). The streams end when the API
 * drains.
 */
#ifndef CG_TRANSPORT_HTTP_API_H
#define CG_TRANSPORT_HTTP_API_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"
#include "core/ratelimit.h"
#include "rpc/rpc.h"
#include "transport/http.h"

struct cg_http_api {
    /* Where the calls run: the worker pool, whose thread context is the thread's
     * struct cg_rpc_env (with its store), as transport/server.c makes it. */
    struct cg_pool *pool;
    size_t max_message_bytes;
    int64_t max_call_ms;
    struct cg_rate_limiter *limiter; /* NULL: no rate limit; the listener's thread only */
    int64_t rate_per_min, burst;
    /* Calls handed to the pool and not answered yet (cg_http_api_drain waits for them). */
    pthread_mutex_t lock;
    pthread_cond_t idle;
    int inflight;
    bool closing;
    /* closing, for the streams' producers without the lock (the listener's thread never
     * waits for a lock that a wake holds while it calls into the listener). */
    atomic_bool streams_closing;
    /* The event streams (http_sse.c), under lock: polled on the listener's thread with
     * stream_env (a completion-queue thread's kind: no store). */
    const struct cg_rpc_env *stream_env;
    int max_streams, streams_per_key;
    struct cg_http_sse *streams; /* a list */
    int nstreams;
};

/* Sets up api for pool, each caller limited to rate_per_min requests a minute after a burst
 * (rate_per_min 0: no limit) and to streams_per_key event streams (max_streams in all),
 * polled with stream_env (borrowed until cg_http_api_free). CG_NOMEM when it cannot. Not
 * thread-safe. */
cg_status cg_http_api_init(struct cg_http_api *api, struct cg_pool *pool, size_t max_message_bytes,
                           int64_t max_call_ms, int64_t rate_per_min, int64_t burst,
                           const struct cg_rpc_env *stream_env, int max_streams,
                           int streams_per_key) CG_MUST_CHECK;

/* Refuses new calls (503), waits until every call handed to the pool is answered and tells
 * the event streams to end: call it before the listener stops (http.h: a request must be
 * answered before cg_http_stop), while the pool still runs. Thread-safe once. */
void cg_http_api_drain(struct cg_http_api *api);

/* Frees what init made, after cg_http_stop (which ends the last streams). */
void cg_http_api_free(struct cg_http_api *api);

/* The event streams open now (or opening). Thread-safe. */
int cg_http_api_streams(struct cg_http_api *api);

/* Wakes every event stream to look for news (the watch hub's wake, service.h
 * wake_streams). Any thread. */
void cg_http_api_wake(struct cg_http_api *api);

/* The route handler of "/api/v1/" (ctx: a struct cg_http_api, borrowed until drained). */
void cg_http_api_handle(struct cg_http_request *req, void *ctx);

/* The HTTP status of a gRPC status code. */
int cg_http_api_status(int grpc_code);

#endif

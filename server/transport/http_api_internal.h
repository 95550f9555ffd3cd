/* http_api_internal.h - what the JSON API's files share (http_api.c: the route, unary calls;
 * http_sse.c: the WatchUsage event stream; http_api_call.c: what both use): one call as it
 * leaves the listener's thread, and the answers both give. Not for other modules. */
#ifndef CG_TRANSPORT_HTTP_API_INTERNAL_H
#define CG_TRANSPORT_HTTP_API_INTERNAL_H

#include "base/arena.h"
#include "base/crypto.h"
#include "transport/http_api.h"

#define CG_HTTP_API_ARGS_MAX 64
#define CG_HTTP_API_REQUEST_ID_MAX 64

/* One call on its way to the pool: everything copied out of the HTTP request. */
struct cg_http_api_call {
    struct cg_job job; /* first: the pool's job is the call */
    struct cg_http_api *api;
    struct cg_http_request *req;
    const struct cg_rpc_method *method;
    struct cg_arena *arena;
    char request_id[CG_HTTP_API_REQUEST_ID_MAX + 1];
    char *authorization;
    uint8_t caller[CG_SHA256_LEN]; /* the Authorization header, hashed: the rate and stream caps */
    const char *arg_keys[CG_HTTP_API_ARGS_MAX];
    const char *arg_values[CG_HTTP_API_ARGS_MAX];
    int nargs;
    bool too_many_args;
    const char *body; /* POST: the JSON body (in arena) */
    size_t body_len;
    const char *last_event_id; /* the Last-Event-ID header (in arena), or NULL */
    struct cg_http_sse *sse;   /* a stream's, on its way to the pool (http_sse.c) */
};

/* The request message of the call, from its query arguments or JSON body, encoded into its
 * arena. Errors name the argument. */
cg_status cg__http_api_build(struct cg_http_api_call *c, uint8_t **buf, size_t *len,
                             struct cg_err *err) CG_MUST_CHECK;

/* The API's error answer of st with err (its field, reason, message) and the request id. */
void cg__http_api_error(struct cg_http_request *req, cg_status st, struct cg_err *err,
                        const char *request_id);

/* Counts a call in (false: the API is closing: answer 503) or out of the API's calls in
 * flight, which cg_http_api_drain waits for. */
bool cg__http_api_enter(struct cg_http_api *api);
void cg__http_api_leave(struct cg_http_api *api);

/* Frees the call (its arena) and counts it out of the API's calls in flight: last. */
void cg__http_api_call_free(struct cg_http_api_call *c);

/* http_sse.c: the route's part for a server-streaming method (WatchUsage): takes a stream
 * slot of the caller (else answers 429) and hands the call to the pool, which opens the
 * stream and answers with text/event-stream. Takes c in every case. */
void cg__http_sse_start(struct cg_http_api_call *c);

#endif

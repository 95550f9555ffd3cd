/* rpc.h - the method table and the one entry point the transport calls.
 *
 * For each method: validate -> core/store -> reply. The transport hands over the request
 * bytes and the raw `authorization` value; this layer decodes (protobuf-c, into the call's
 * arena), checks every string field is UTF-8, authenticates, runs the handler and encodes
 * the answer. No gRPC header is included here: status codes are cg_status values that the
 * transport maps with cg_status_grpc_code().
 */
#ifndef CG_RPC_RPC_H
#define CG_RPC_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/health.h"
#include "base/status.h"
#include "core/keyrole.h"
#include "service/service.h"
#include "service/sweep.h"
#include "store/store.h"

struct cg_reflection;
struct cg_price_table;
struct cg_cache;
struct cg_tok_encoding;

struct cg_llm;

typedef enum {
    CG_RPC_UNARY,
    CG_RPC_SERVER_STREAM, /* one request, a stream of answers (see cg_rpc_method.poll) */
    CG_RPC_BIDI_EACH,     /* a stream of requests, one answer to each, in order */
} cg_rpc_kind;

/* What handlers may use: the thread's service environment (service/service.h) and what
 * only this layer needs. One per thread. */
struct cg_rpc_env {
    struct cg_svc_env svc;
    const struct cg_reflection *reflection;
};

/* One call as this layer sees it. The transport fills the inputs; the handler the outputs. */
struct cg_rpc_call {
    /* inputs */
    struct cg_arena *arena; /* everything decoded and built for the call lives here */
    const char *request_id;
    const char *authorization; /* raw metadata value or NULL */
    int64_t deadline_ms;       /* cg_mono_ms clock */
    size_t max_message_bytes;
    /* outputs */
    struct cg_principal principal;
    uint32_t reply_delay_ms; /* hold the (successful) reply this long on a timer */
    /* The budget decision the answer carries (a ctxguard.v1.Decision; 0: none, e.g. a
     * replayed Reserve) and the backpressure delay decided with it, held or not: the
     * transport counts them (ctxguard_budget_decisions_total, ..._backpressure_delay_...). */
    int decision;
    uint32_t decision_delay_ms;
    struct cg_err err; /* what the client sees when the status is not OK */
    /* The decoded request (in arena), NULL before decoding: its identifiers join err's
     * metadata when the call fails (reservation_id, approval_id, artifact_id, session_id). */
    const ProtobufCMessage *request;
    /* Set by the transport when the call may be answered later from another thread (a
     * try_inline handler handed it on: CG_OP_HANDED_ON): takes the final status and the
     * encoded answer (in the arena), then the call belongs to the transport again. NULL: not
     * deferrable. */
    void (*resume)(struct cg_rpc_call *call, cg_status st, uint8_t *out, size_t out_len);
};

/* The call as one operation of a service (service/service.h): borrows the call's arena,
 * request id, deadline, principal and err for the length of the service call. */
static inline struct cg_op cg_rpc_op(struct cg_rpc_call *call)
{
    return (struct cg_op){call->arena, call->request_id, call->deadline_ms, &call->principal,
                          &call->err};
}

typedef cg_status (*cg_rpc_handler_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                       const ProtobufCMessage *request,
                                       ProtobufCMessage **response);

/* The handler of a try_inline method (cg_rpc_method.try_inline): a cg_rpc_handler_fn that
 * need not finish on the calling thread. *fate (the caller's, never a field of the call)
 * says what became of the call:
 *   CG_OP_DONE: the status returned and *response answer it, as for any handler;
 *   CG_OP_HANDED_ON (only when call->resume is set): it is answered later through
 *     call->resume (cg_rpc_complete), maybe already: neither the handler nor its caller may
 *     touch the call (nor read anything of it) afterwards;
 *   CG_OP_NEEDS_STORE (only without env->svc.store): nothing answered and nothing of the
 *     call changed but its arena's contents: run the handler again on the pool.
 * The status is CG_OK whenever the fate is not CG_OP_DONE. */
typedef cg_status (*cg_rpc_try_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                   const ProtobufCMessage *request, ProtobufCMessage **response,
                                   cg_op_fate *fate);

/* What a server stream keeps between polls, owned by the transport's call. version starts
 * at 0; state is set by the method's open and freed with state_free(state) (when not NULL)
 * once, when the call is freed, on the thread of the call's completion queue. */
struct cg_rpc_stream {
    unsigned version;
    void *state;
    void (*state_free)(void *state);
};

/* For CG_RPC_SERVER_STREAM: the next message to send when something changed since what
 * stream records (which it advances), or *response = NULL when there is nothing new.
 * *finished = true ends the stream after this message with the status returned. Runs on a
 * completion-queue thread: env->svc.store is NULL, nothing may block. call->arena is the
 * message's arena (reset before each poll). */
typedef cg_status (*cg_rpc_poll_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                                    ProtobufCMessage **response, bool *finished);

/* For CG_RPC_SERVER_STREAM (optional): after authentication and decoding, before the first
 * poll; on the pool (with env->svc.store) for blocking methods. call->arena is the call's (it
 * lives as long as the call). May set stream->state and state_free. An error ends the
 * stream with that status (state_free still runs when set). */
typedef cg_status (*cg_rpc_open_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, struct cg_rpc_stream *stream);

struct cg_rpc_method {
    const char *path;    /* "/ctxguard.v1.AdminService/CreateTenant" */
    const char *service; /* "ctxguard.v1.AdminService" */
    cg_rpc_kind kind;
    unsigned allow; /* who may call it: CG_ALLOW_* bits (core/keyrole.h), the one role table */
    bool blocking;  /* uses the store: runs on the worker pool */
    const ProtobufCMessageDescriptor *request_desc;
    const ProtobufCMessageDescriptor *response_desc;
    /* Never NULL for its kind: the table is generated (cmake/gen_methods.py) and names a
     * function for every RPC, or the build fails. */
    cg_rpc_handler_fn handler; /* unary and bidi (but try_inline methods) */
    cg_rpc_try_fn try_handler; /* try_inline methods, instead of handler */
    cg_rpc_poll_fn poll;       /* server streams */
    cg_rpc_open_fn open;       /* server streams, optional */
    /* blocking unary methods only (their function is try_handler): first tried on the
     * completion-queue thread (env->svc.store NULL), where the handler answers from
     * env->svc.cache, hands the call on, or says it needs the store (CG_OP_NEEDS_STORE); the
     * transport then runs the call on the pool, from the step that needed the store (see
     * cg_rpc_invoke). Authentication on that thread uses the key cache only (a miss needs the
     * store too). */
    bool try_inline;
};

/* The method table (borrowed, static), generated from the .proto files (rpc_methods.h). */
const struct cg_rpc_method *cg_rpc_methods(size_t *count);

/* The method with this path, or NULL. */
const struct cg_rpc_method *cg_rpc_find(const char *path);

/* The distinct service names of the table, for reflection and health (borrowed). */
const char *const *cg_rpc_services(size_t *count);

/* A protobuf-c allocator that allocates from arena and never frees (the arena does). */
void cg_rpc_allocator(struct cg_arena *arena, ProtobufCAllocator *out);

/* Decodes len bytes as a message of desc into the call arena and checks that every string
 * field is valid UTF-8 without NUL characters. On error: CG_INVALID_ARGUMENT with call->err
 * naming the field. */
cg_status cg_rpc_decode(struct cg_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                        const uint8_t *data, size_t len, ProtobufCMessage **out) CG_MUST_CHECK;

/* Encodes msg into the call arena. CG_RESOURCE_EXHAUSTED when larger than the cap. */
cg_status cg_rpc_encode(struct cg_rpc_call *call, const ProtobufCMessage *msg, uint8_t **out,
                        size_t *out_len) CG_MUST_CHECK;

/* Checks call->authorization against the method's `allow` and fills call->principal:
 * UNAUTHENTICATED for a missing, malformed, unknown, revoked or expired key;
 * PERMISSION_DENIED (reason ROLE_NOT_ALLOWED) naming the key's role, the method and the
 * roles that may call it. Tenant keys are looked up through env->svc.store unless the
 * process's key cache has them (service/keys.h cg_keys_authenticate); a lookup that needs the
 * store on a thread without one is CG_INTERNAL here (cg_rpc_invoke, which can say so, sends
 * the call to the pool instead). */
cg_status cg_rpc_authenticate(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env) CG_MUST_CHECK;

/* The call's actor for the audit trail (store.h): the principal's key id and role ("" and 0
 * for the server's admin key) and the request id. The strings stay the call's (borrowed for
 * the call). */
void cg_rpc_audit(const struct cg_rpc_call *call, struct cg_audit *out);

/* Whether the principal reaches the scope (session, task): a key bound to a subtree reaches
 * only scopes inside it (core/keyrole.h cg_scope_within); unbound keys reach every scope. */
bool cg_rpc_scope_reachable(const struct cg_principal *p, const char *session_id,
                            const char *task_id);

/* Checks that the principal reaches the scope (session, task), as cg_rpc_scope_reachable.
 * Outside: NOT_FOUND, reason SCOPE_NOT_FOUND, with the store's words for a scope that does
 * not exist ("scope.session_id: no such session", "scope.task_id: no such task"), so that
 * a bound key learns nothing of what exists beside its subtree. */
cg_status cg_rpc_scope_check(struct cg_rpc_call *call, const char *session_id,
                             const char *task_id) CG_MUST_CHECK;

/* Checks that the principal reaches a ContextService session (the scope session_id, at the
 * session level: a task-bound key reaches none). Outside: NOT_FOUND, reason
 * SESSION_NOT_FOUND, "session_id: no such session", as for an unknown session. */
cg_status cg_rpc_session_check(struct cg_rpc_call *call, const char *session_id) CG_MUST_CHECK;

/* The whole unary (and bidi-each) path: authenticate, decode, handle, encode. *fate (the
 * caller's) says what became of the call:
 *   CG_OP_DONE: answered. On success out and out_len hold the encoded answer (in the arena);
 *     on error call->err holds what the client should see and *out is NULL.
 *   CG_OP_HANDED_ON (try_inline methods, only when call->resume is set): answered through
 *     call->resume, maybe already, so neither call nor out may be touched.
 *   CG_OP_NEEDS_STORE (try_inline methods, only without env->svc.store): nothing answered;
 *     run it on the pool with cg_rpc_invoke_again.
 * The status is CG_OK whenever the fate is not CG_OP_DONE. */
cg_status cg_rpc_invoke(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                        const struct cg_rpc_env *env, const uint8_t *req, size_t len, uint8_t **out,
                        size_t *out_len, cg_op_fate *fate) CG_MUST_CHECK;

/* cg_rpc_invoke on the pool for a call whose try on a completion-queue thread needed the
 * store: it resumes at the step that did. When that was the handler (call->request is set:
 * the try authenticated the key, filling call->principal, and decoded the request into the
 * call's arena, which lives as long as the call), it runs the handler on the principal and
 * request of the try; otherwise (the key lookup) it runs the whole path. The transport
 * resets the outputs the try may have set (err, reply_delay_ms) first. */
cg_status cg_rpc_invoke_again(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                              uint8_t **out, size_t *out_len, cg_op_fate *fate) CG_MUST_CHECK;

/* Answers a deferred call (see cg_rpc_call.resume): encodes response when st is CG_OK
 * (or fills call->err with st's text when the handler left it empty) and hands the call
 * back to the transport. Any thread; the call must not be touched afterwards. */
void cg_rpc_complete(struct cg_rpc_call *call, cg_status st, const ProtobufCMessage *response);

/* Start of a server stream: authenticate, decode, then the method's open (with stream);
 * *request gets the decoded request. */
cg_status cg_rpc_stream_open(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                             const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                             ProtobufCMessage **request,
                             struct cg_rpc_stream *stream) CG_MUST_CHECK;

/* One pass of the sweeper: service/sweep.h cg_sweep_pass on the thread's service env (this
 * name stays for the transport's monitor thread and the tests). */
static inline bool cg_rpc_sweep(const struct cg_rpc_env *env, int64_t now_ms, int *expired)
{
    return cg_sweep_pass(&env->svc, now_ms, expired);
}

#endif

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
#include "store/store.h"

struct cg_reflection;
struct cg_price_table;
struct cg_cache;
struct cg_tok_encoding;

/* The exact tokenizers (core/tok.h), built once at start from the `token_data_dir` files
 * and shared read-only by every thread for the life of the server. */
struct cg_rpc_tokenizers {
    struct cg_tok_encoding *cl100k_base;
    struct cg_tok_encoding *o200k_base;
};

/* Loads both encodings from dir (cl100k_base.cgtok, o200k_base.cgtok; base/tokdata.h) into
 * *out. On error returns CG_CONFIG or CG_NOMEM with err naming the file and the problem,
 * and *out is empty. Release with cg_rpc_tokenizers_cleanup. (rpc_context_count.c) */
cg_status cg_rpc_tokenizers_load(const char *dir, struct cg_rpc_tokenizers *out,
                                 struct cg_err *err) CG_MUST_CHECK;

/* Frees what cg_rpc_tokenizers_load built and empties *t (an empty one is a no-op). No
 * call may be using it. */
void cg_rpc_tokenizers_cleanup(struct cg_rpc_tokenizers *t);
struct cg_llm;
struct cg_rpc_pseudonyms;
struct cg_watch_hub;

typedef enum {
    CG_RPC_UNARY,
    CG_RPC_SERVER_STREAM, /* one request, a stream of answers (see cg_rpc_method.poll) */
    CG_RPC_BIDI_EACH,     /* a stream of requests, one answer to each, in order */
} cg_rpc_kind;

/* Who a call is made by, filled by authentication. */
struct cg_principal {
    bool authenticated;
    bool is_admin;    /* the server's admin key: role CG_KEY_ROLE_NONE, no tenant */
    cg_key_role role; /* a tenant key's role */
    char tenant_id[CG_UUID_LEN + 1];
    char tenant_name[CG_NAME_MAX * 4 + 1];
    char key_id[CG_KEY_ID_LEN + 1];
    /* The subtree a scope-bound key reaches ("" = the whole tenant; core/keyrole.h
     * cg_scope_within): requests naming a scope outside it are NOT_FOUND. */
    char scope_session_id[CG_SCOPE_ID_MAX + 1];
    char scope_task_id[CG_SCOPE_ID_MAX + 1];
    int64_t expires_at_ms;   /* unix ms; 0 never */
    int64_t max_call_tokens; /* the tenant's bound on one Commit/RecordUsage */
};

/* What handlers may use. One per thread: store is that thread's own connections and is
 * NULL on completion-queue threads (methods that need it are marked `blocking`); cache is
 * the process's one (rpc_cache.h), shared by every thread (NULL: no cache). */
struct cg_rpc_env {
    const struct cg_config *config;
    struct cg_store *store;
    struct cg_health *health;
    const struct cg_reflection *reflection;
    const struct cg_price_table *prices; /* the `prices` setting, parsed; never NULL */
    struct cg_cache *cache;
    /* Wakes every open server stream of this process so that its poll runs again (set by
     * the transport; any thread; NULL where there are no streams). */
    void (*wake_streams)(void *ctx);
    void *wake_ctx;
    /* Groups concurrent budget writes of a tenant into shared transactions (owned by the
     * transport, shared by its pool threads; NULL: every write runs on its own). */
    struct cg_rpc_batcher *batcher;
    /* The exact tokenizers (owned by main.c; NULL: CountTokens cannot count exactly and
     * answers UNAVAILABLE for what needs them). */
    const struct cg_rpc_tokenizers *tokenizers;
    /* This pool thread's LLM client (llm/llm.h; all share one breaker), for Summarize.
     * NULL on completion-queue threads; not configured when llm_base_url is empty. */
    struct cg_llm *llm;
    /* The redaction pseudonyms of recent sessions, shared by every thread (Summarize:
     * the same value gets the same label across a session's requests). NULL: per request. */
    struct cg_rpc_pseudonyms *pseudonyms;
    /* WatchUsage's fan-out (cg_watch_hub_new), shared by every thread: fed by the events
     * thread, read by the streams. NULL: WatchUsage answers UNAVAILABLE. */
    struct cg_watch_hub *watch_hub;
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
    struct cg_err err;       /* what the client sees when the status is not OK */
    /* The decoded request (in arena), NULL before decoding: its identifiers join err's
     * metadata when the call fails (reservation_id, approval_id, artifact_id, session_id). */
    const ProtobufCMessage *request;
    /* Set by the transport when the call may be answered later from another thread (a
     * handler returned CG_DEFERRED): takes the final status and the encoded answer (in the
     * arena), then the call belongs to the transport again. NULL: not deferrable. */
    void (*resume)(struct cg_rpc_call *call, cg_status st, uint8_t *out, size_t out_len);
};

typedef cg_status (*cg_rpc_handler_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                       const ProtobufCMessage *request,
                                       ProtobufCMessage **response);

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
 * completion-queue thread: env->store is NULL, nothing may block. call->arena is the
 * message's arena (reset before each poll). */
typedef cg_status (*cg_rpc_poll_fn)(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                                    ProtobufCMessage **response, bool *finished);

/* For CG_RPC_SERVER_STREAM (optional): after authentication and decoding, before the first
 * poll; on the pool (with env->store) for blocking methods. call->arena is the call's (it
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
    cg_rpc_handler_fn handler; /* unary and bidi */
    cg_rpc_poll_fn poll;       /* server streams */
    cg_rpc_open_fn open;       /* server streams, optional */
    /* blocking methods only: first tried on the completion-queue thread (env->store NULL),
     * where the handler answers from env->cache or, when it would need the store, returns
     * CG_NEEDS_POOL (a control result, base/status.h: never sent); the transport then runs
     * the call again from the start on the pool, as for any blocking method. Authentication
     * on that thread uses the key cache only (a miss also returns CG_NEEDS_POOL). */
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
 * roles that may call it. Tenant keys are looked up through env->store (so only on pool
 * threads) unless the process's key cache has them. */
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

/* The whole unary (and bidi-each) path: authenticate, decode, handle, encode.
 * On success out and out_len hold the encoded answer (in the arena). On error call->err
 * holds what the client should see and *out is NULL. CG_DEFERRED: the handler handed the
 * call on (only when call->resume is set); it is answered through call->resume, maybe
 * already, so neither call nor out may be touched. CG_NEEDS_POOL (only without env->store,
 * for try_inline methods): nothing was answered; run the call again on the pool. */
cg_status cg_rpc_invoke(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                        const struct cg_rpc_env *env, const uint8_t *req, size_t len, uint8_t **out,
                        size_t *out_len) CG_MUST_CHECK;

/* The pseudonym tables of up to max_sessions recent (tenant, session) pairs, each about
 * 130 KB (core/redact.h); the least recently used idle one is dropped for a new one.
 * Thread-safe; freed after every thread that uses it. NULL when out of memory. */
struct cg_rpc_pseudonyms *cg_rpc_pseudonyms_new(size_t max_sessions);
void cg_rpc_pseudonyms_free(struct cg_rpc_pseudonyms *p);

/* The batcher of rpc_budget_batch.c (env->batcher): thread-safe; freed after every pool
 * thread that may lead a batch has stopped. NULL when out of memory. */
struct cg_rpc_batcher *cg_rpc_batcher_new(void);
void cg_rpc_batcher_free(struct cg_rpc_batcher *batcher);

/* WatchUsage's fan-out (rpc_watch.c; env->watch_hub): per watched tenant a bounded ring of
 * its committed events, fed by one events thread (cg_rpc_events_step) and read by the
 * streams' polls. Thread-safe; freed after the events thread and every stream are gone
 * (feeds still joined are freed with it). NULL when out of memory. */
struct cg_watch_hub *cg_watch_hub_new(void);
void cg_watch_hub_free(struct cg_watch_hub *hub);

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

/* After every successful commit that changed scope rows: rows[0..n) (one tenant, as they
 * are after the commit, row_version included: what cg_store_path_read with lock and
 * cg_store_path_add left in the caller's array) replace the cached ones in env->cache
 * (this process: CheckBudget sees the write at once) and in Redis through env->store (for
 * the other replicas; best effort, one round trip). The newest row_version wins, so calls
 * racing each other or a fill cannot go backwards. Never fails; rows with row_version 0
 * are ignored. Call it on the thread that committed, after the commit (never before: a
 * rolled-back write must not be cached), also from batched paths, once per tenant. */
void cg_rpc_cache_written(const struct cg_rpc_env *env, const char *tenant_id,
                          const struct cg_budget_row *rows, int n);

/* For committed writes that do not have their rows at hand (sweeper, CloseScope,
 * ResolveApproval): drops every cached row of the tenant, here and in Redis. */
void cg_rpc_cache_dropped(const struct cg_rpc_env *env, const char *tenant_id);

/* Probes PostgreSQL through env->store and records the result in env->health.
 * Returns whether the serving state changed. */
bool cg_rpc_health_probe(const struct cg_rpc_env *env);

/* One pass of the sweeper (rpc_sweep.c) through env->store at now_ms (unix ms; cg_wall_ms()
 * in production): for every tenant, applies the budget reset that is due and settles the
 * reservations that expired at or before now_ms as EXPIRED, returning their holds to every
 * level of their paths, in transactions of at most 100 reservations. Safe with several
 * replicas sweeping at once. Clears the store's deadline (each statement is bounded by the
 * statement timeout) and must not be called inside a transaction. *expired gets how many
 * reservations this pass settled. Returns true when every tenant was swept; false when
 * the health state is NOT_SERVING (nothing is tried) or a store error stopped part of the
 * pass (logged). Not thread-safe: env->store is the calling thread's. */
bool cg_rpc_sweep(const struct cg_rpc_env *env, int64_t now_ms, int *expired);

/* One step of WatchUsage's delivery (rpc_watch.c), for the one thread of the process that
 * owns listener and feeds env->watch_hub (never NULL here; one thread per hub): waits up to
 * timeout_ms for notifications of committed events (and of revoked API keys, which it drops from
 * the process's key cache), fetches the new events of the tenants watched in this process into the
 * hub (after a reconnection: catches up from the table) and wakes the streams through
 * env->wake_streams, also when nothing arrived (heartbeats are due by time). Logs store
 * trouble and returns false when PostgreSQL is away, so that the caller pauses (for
 * timeout_ms) before the next step; the caller loops until it stops. */
bool cg_rpc_events_step(const struct cg_rpc_env *env, struct cg_store_listener *listener,
                        int timeout_ms);

#endif

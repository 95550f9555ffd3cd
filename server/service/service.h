/* service.h - what every service of this folder takes: the thread's environment (its store
 * connections, the process's shared objects) and one operation (the caller, its deadline,
 * its arena and where an error goes). Services work in domain types (core/, store/): no
 * protobuf and no gRPC here; rpc/ decodes a request, calls one service function and encodes
 * its answer.
 *
 * Calls go one way: transport -> rpc -> service -> {core, store, llm} -> base.
 */
#ifndef CG_SERVICE_SERVICE_H
#define CG_SERVICE_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/config.h"
#include "base/health.h"
#include "base/status.h"
#include "core/keyrole.h"
#include "store/store.h"

struct cg_price_table;
struct cg_cache;
struct cg_tok_encoding;
struct cg_llm;
struct cg_budget_batcher;
struct cg_pseudonyms;
struct cg_watch_hub;
struct cg_svc_meters;

/* The exact tokenizers (core/tok.h), built once at start from the `token_data_dir` files
 * and shared read-only by every thread for the life of the server. */
struct cg_tokenizers {
    struct cg_tok_encoding *cl100k_base;
    struct cg_tok_encoding *o200k_base;
};

/* Who an operation is made by, filled by authentication (rpc/rpc.c). */
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

/* The environment of one thread. store is that thread's own connections and is NULL on
 * completion-queue threads (a service that needs it says so with CG_OP_NEEDS_STORE or is
 * only called on the pool); everything else is the process's one object, shared by every thread
 * (NULL: the feature is off). */
struct cg_svc_env {
    const struct cg_config *config;
    struct cg_store *store;
    struct cg_health *health;
    const struct cg_price_table *prices; /* the `prices` setting, parsed; never NULL */
    struct cg_cache *cache;              /* the process cache of budget rows and keys */
    /* Wakes every open server stream of this process so that its poll runs again (set by
     * the transport; any thread; NULL where there are no streams). */
    void (*wake_streams)(void *ctx);
    void *wake_ctx;
    /* Groups concurrent budget writes of a tenant into shared transactions (shared by the
     * pool threads; NULL: every write runs on its own). */
    struct cg_budget_batcher *batcher;
    /* The exact tokenizers (NULL: no exact counting; what needs them answers UNAVAILABLE). */
    const struct cg_tokenizers *tokenizers;
    /* This pool thread's LLM client (llm/llm.h; all share one breaker). NULL on
     * completion-queue threads; not configured when llm_base_url is empty. */
    struct cg_llm *llm;
    /* The redaction pseudonyms of recent sessions, shared by every thread (the same value
     * gets the same label across a session's requests). NULL: per request. */
    struct cg_pseudonyms *pseudonyms; /* service/pseudonyms.h */
    /* WatchUsage's fan-out, fed by the events thread, read by the streams. NULL: none. */
    struct cg_watch_hub *watch_hub;
    /* What the services count (service/meters.h), shared; NULL: nothing is counted. Counted
     * into this thread's own slot (base/metrics.h "Shards"; CG_METRICS_SHARED_SLOT for a
     * thread without one). */
    const struct cg_svc_meters *meters;
    uint32_t metrics_slot;
};

/* One operation as a service sees it: borrowed from the caller for the length of the
 * service call. On an error status *err says what the client sees (naming the field). */
struct cg_op {
    struct cg_arena *arena; /* what the service builds for its answer lives here */
    const char *request_id;
    int64_t deadline_ms; /* cg_mono_ms clock */
    const struct cg_principal *principal;
    struct cg_err *err;
};

/* What became of an operation that need not finish on the calling thread: control flow,
 * never an error (errors stay cg_status values, returned, with op->err). A service that may
 * not finish takes a `cg_op_fate *fate` in the caller's frame and returns CG_OK whenever the
 * fate is not CG_OP_DONE. It is an out-parameter, not a field of the op or the call: once an
 * operation is handed on, its call may be answered and freed by another thread at any
 * moment, so nothing of it may be read to learn that it was. */
typedef enum {
    CG_OP_DONE = 0,    /* finished here: the status returned says how */
    CG_OP_HANDED_ON,   /* handed on: a callback answers it later, maybe already; touch nothing
                        * of the op (nor of what it borrows) any more */
    CG_OP_NEEDS_STORE, /* nothing done: it needs env->store, which this thread has not; run it
                        * again on a thread that has one (the pool) */
} cg_op_fate;

#endif

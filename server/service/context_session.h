/* context_session.h - the session of a stateful Compress (a session_id given): the history,
 * boundary and artifacts kept in PostgreSQL (store/store_context.h), in domain types.
 *
 * The flow: LOAD the session row (boundary, revision, history size, version) and what the
 * sync needs of the history in one short transaction; run the caller's work (the cascade,
 * and any LLM summary) with NO transaction and NO row lock open; SAVE the new history rows,
 * artifacts, compaction record and boundary in one short transaction that locks the row and
 * checks that its version is still the one loaded. When another call saved in between, the
 * call loads again and runs again (at most CG_CTX_SESSION_ATTEMPTS times in all), then
 * fails ABORTED naming the session. A dry run loads and runs but saves nothing.
 */
#ifndef CG_SERVICE_CONTEXT_SESSION_H
#define CG_SERVICE_CONTEXT_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compress.h"
#include "core/conv.h"
#include "service/service.h"
#include "store/store_context.h"

#define CG_CTX_SESSION_ID_MAX 128
#define CG_CTX_SESSION_ATTEMPTS 3

/* How a history message is stored (bytes per message) and read back, given by the caller
 * (rpc/: the ctxguard.v1.Message encoding) so that this service holds no wire type. */
struct cg_ctx_history_codec {
    /* The messages [from, n) of conv as bytes: (*data)[i], (*len)[i] (arrays of
     * conv->n_messages, the entries before from unset; all in arena). On error fills err. */
    cg_status (*pack)(void *ctx, struct cg_arena *arena, const struct cg_conv *conv, size_t from,
                      uint8_t ***data, size_t **len, struct cg_err *err);
    /* One stored message decoded into an opaque value in arena; NULL when it does not
     * decode. */
    void *(*unpack)(void *ctx, struct cg_arena *arena, const void *data, size_t len);
    /* The stored messages stored[0..n) (unpack's values) as a conversation with the request's
     * tool definitions, into *out (the caller frees it with cg_conv_free). On error fills err
     * (naming the field) and *out is NULL. */
    cg_status (*decode)(void *ctx, struct cg_arena *arena, void *const *stored, size_t n,
                        struct cg_conv **out, struct cg_err *err);
    void *ctx;
};

/* One stateful call as the session flow sees it. */
struct cg_ctx_session_req {
    const char *session_id;     /* checked by the caller (1..128 printable ASCII) */
    bool append;                /* SESSION_SYNC_APPEND: conv holds only the new messages */
    bool dry_run;               /* nothing is saved */
    const struct cg_conv *conv; /* the request's conversation (borrowed) */
    const struct cg_ctx_history_codec *codec;
    /* How tokens are counted for the history rows (the cascade's own count state). */
    const struct cg_compress_count_state *count_state;
    int strategy;           /* the policy's, for the compaction record */
    int64_t context_window; /* the model's window the call worked in, for that record too */
};

/* What one attempt carries from the load to the save. */
struct cg_ctx_session_state {
    char session_id[CG_CTX_SESSION_ID_MAX + 1];
    char compaction_id[32];
    struct cg_ctx_session stored; /* as loaded (all 0 and found false: a new session) */
    bool found;
    uint32_t revision;        /* after this call */
    int64_t history_messages; /* after this call */
    int64_t added;            /* messages appended by this call */
    bool diverged;            /* FULL: a new revision was started at diverged_at */
    int64_t diverged_at;
    int64_t boundary;        /* the boundary the work starts from */
    unsigned attempts;       /* how many times the work ran (1 unless another call saved) */
    bool artifacts_redacted; /* set by the work when it redacted the artifacts */
    /* The artifacts of the result as stored (or, dry run, as they would be), in the arena;
     * filled after the work. */
    struct cg_ctx_artifact *artifacts;
    size_t n_artifacts;
    /* internal: the conversation the work ran on when APPEND joined one, and what to write */
    struct cg_conv *joined;
    int64_t write_from;
    uint8_t **data;
    size_t *len;
    uint8_t (*digest)[CG_CTX_DIGEST_LEN];
};

/* The work of one attempt, run with no transaction open: the cascade over conv (the whole
 * history for APPEND) from s->boundary, into *res (which the flow frees with
 * cg_compress_result_free before it runs the work again). An error fails the call as it is
 * (op->err says why); res is then not filled. */
typedef cg_status (*cg_ctx_session_work_cb)(void *ctx, struct cg_ctx_session_state *s,
                                            const struct cg_conv *conv,
                                            struct cg_compress_result *res);

/* Runs one stateful call: load, work, save (see the top of this file), through env->store
 * (a pool thread's). On success *res is the last attempt's result (the caller frees it with
 * cg_compress_result_free, then calls cg_ctx_session_cleanup) and *s describes what was
 * saved. On error op->err says why (store errors as the store gave them; ABORTED naming
 * session_id when other calls saved in between every attempt), nothing is saved and *res
 * is not filled (s still needs cg_ctx_session_cleanup). No transaction is open on return. */
cg_status cg_ctx_session_run(const struct cg_svc_env *env, const struct cg_op *op,
                             const struct cg_ctx_session_req *req, cg_ctx_session_work_cb work,
                             void *work_ctx, struct cg_ctx_session_state *s,
                             struct cg_compress_result *res) CG_MUST_CHECK;

/* Frees what the flow kept in s (the joined conversation). s->joined may back the result's
 * strings: call after cg_compress_result_free. */
void cg_ctx_session_cleanup(struct cg_ctx_session_state *s);

/* The messages [from, to) of the session's current revision (to 0: to the end of it), decoded
 * by codec into *out (the caller frees it with cg_conv_free), with plain reads (no
 * transaction). Errors: NOT_FOUND "field 'session_id': no such session"; OUT_OF_RANGE naming
 * from_position or to_position when past the history's end; INVALID_ARGUMENT when the range
 * is empty or spans more than max_messages; the store's errors. */
cg_status cg_ctx_session_history(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *session_id, int64_t from, int64_t to,
                                 int64_t max_messages, const struct cg_ctx_history_codec *codec,
                                 struct cg_conv **out) CG_MUST_CHECK;

/* Names artifacts "art_" + 26 random base32 characters (cg_compress_input.name_artifact). */
void cg_ctx_session_name_artifact(void *ctx, size_t index, char id[64]);

#endif

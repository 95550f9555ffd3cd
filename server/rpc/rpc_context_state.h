/* rpc_context_state.h - stateful Compress (session history, boundary, artifacts in
 * PostgreSQL through store/store_context.h), shared by rpc_context_compress.c and
 * rpc_context_state.c. Internal to rpc/.
 */
#ifndef CG_RPC_CONTEXT_STATE_H
#define CG_RPC_CONTEXT_STATE_H

#include "core/compress.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc.h"
#include "store/store_context.h"

#define CG_RPC_SESSION_ID_MAX 128

/* What a stateful call carries from the history sync to the commit. */
struct cg_rpc_ctx_state {
    bool active; /* a session_id was given: a transaction is open on env->svc.store */
    char session_id[CG_RPC_SESSION_ID_MAX + 1];
    char compaction_id[32];
    struct cg_ctx_session session; /* as stored before this call */
    uint32_t revision;             /* after this call */
    int64_t history_messages;      /* after this call */
    int64_t added;                 /* messages appended by this call */
    bool diverged;                 /* FULL: a new revision was started at diverged_at */
    int64_t diverged_at;
    int64_t boundary; /* the boundary the cascade starts from */
    unsigned artifact_seq;
    bool artifacts_redacted; /* the tenant's redact_artifacts applied to this call's artifacts */
};

/* Checks session_id (1..128 printable ASCII), opens the transaction, locks (or creates) the
 * session and syncs its history with *conv (FULL: appends what is new or starts a new
 * revision at the first differing message; APPEND: *conv holds only the new messages and is
 * replaced by the whole history plus them). On error the transaction is rolled back and
 * call->err says why. counter counts the tokens stored with each message. */
cg_status cg_rpc_ctx_begin(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                           const Ctxguard__V1__CompressRequest *req, struct cg_conv **conv,
                           const struct cg_compress_counter *counter,
                           struct cg_rpc_ctx_state *state) CG_MUST_CHECK;

/* Stores the artifacts of r and the new boundary, then commits (dry_run: rolls back).
 * Fills the report's artifact entries (ids, hashes, sizes). On error rolls back. */
cg_status cg_rpc_ctx_finish(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const Ctxguard__V1__CompressRequest *req,
                            const struct cg_compress_result *r, struct cg_rpc_ctx_state *state,
                            Ctxguard__V1__CompressionReport *report) CG_MUST_CHECK;

/* The tenant setting redact_artifacts: redacts the PII `types` (CG_PII_BIT mask) in each
 * artifact of r before it is stored, with the session's pseudonym table, and in the preview
 * its message keeps in r->conv (rebuilt as the head of the redacted text, at most
 * preview_max bytes, and the marker; a message a later layer changed is redacted whole).
 * The artifact's size and tokens, the output's tokens_after and the message's change follow;
 * the last OFFLOAD layer's detail gets the counts ("; PII redacted: EMAIL 2, PHONE 1").
 * History is not touched. On error call->err says why and r is as it was or partly
 * redacted (the caller fails the call, so nothing is stored). */
cg_status cg_rpc_ctx_redact_artifacts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      struct cg_rpc_ctx_state *state, struct cg_compress_result *r,
                                      const struct cg_compress_counter *counter, unsigned types,
                                      int64_t preview_max) CG_MUST_CHECK;

/* Rolls back an open stateful call (no-op when not active). */
void cg_rpc_ctx_abort(const struct cg_rpc_env *env, struct cg_rpc_ctx_state *state);

/* Names artifacts "art_" + 26 random base32 characters (cg_compress_input.name_artifact). */
void cg_rpc_ctx_name_artifact(void *ctx, size_t index, char id[64]);

#endif

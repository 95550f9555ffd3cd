/* rpc_context_state.h - what stateful Compress needs of rpc/ around the session flow of
 * service/context_session.h: the check of session_id, the history's wire encoding, the
 * report's session entries. Internal to rpc/.
 */
#ifndef CG_RPC_CONTEXT_STATE_H
#define CG_RPC_CONTEXT_STATE_H

#include "core/compress.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc.h"
#include "service/context_session.h"
#include "store/store_context.h"

#define CG_RPC_SESSION_ID_MAX CG_CTX_SESSION_ID_MAX

/* Checks a stateful call's session_id: 1..128 printable ASCII, within a scope-bound key's
 * reach. On error fills call->err (naming session_id). */
cg_status cg_rpc_ctx_check_session_id(struct cg_rpc_call *call,
                                      const char *session_id) CG_MUST_CHECK;

/* What the history codec needs of the call (borrowed for the length of the service call). */
struct cg_rpc_history_codec_ctx {
    struct cg_rpc_call *call;                       /* the arena, and conv_in's limits */
    const Ctxguard__V1__Conversation *request_conv; /* its tools join an APPEND history */
};

/* The session history's encoding for service/context_session.h: one packed
 * ctxguard.v1.Message per stored message (rpc_conv's structured form). */
void cg_rpc_ctx_history_codec(struct cg_rpc_history_codec_ctx *ctx,
                              struct cg_ctx_history_codec *out);

/* Fills the report's session entries from what the session flow saved (dry_run: what it
 * would have; no ids then): the artifacts, the changes' artifact ids, the history revision,
 * the compaction id and the messages added. On error (out of memory) fills call->err. */
cg_status cg_rpc_ctx_report_session(struct cg_rpc_call *call, bool dry_run,
                                    const struct cg_ctx_session_state *s,
                                    const struct cg_compress_result *r,
                                    Ctxguard__V1__CompressionReport *rep) CG_MUST_CHECK;

#endif

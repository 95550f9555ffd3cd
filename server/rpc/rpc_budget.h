/* rpc_budget.h - what the BudgetService handler files share (rpc_budget*.c): the answers,
 * domain rows, decisions, reservations and approvals as proto messages (rpc_budget_out.c,
 * all allocated in the call's arena) and the answers of Reserve and Commit.
 * Internal to rpc/. The request checks are rpc_check.h; the flows service/budget*.h.
 */
#ifndef CG_RPC_BUDGET_H
#define CG_RPC_BUDGET_H

#include "core/budget.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "rpc/rpc_handlers.h"
#include "service/budget_approvals.h"
#include "service/budget_batch.h"
#include "service/budget_events.h"
#include "service/budget_path.h"

/* ---- answers (rpc_budget_out.c) ---- */

/* Messages (NULL when out of memory). */
Ctxguard__V1__Scope *cg_rpc_scope_out(struct cg_rpc_call *call, const struct cg_budget_row *row);
Ctxguard__V1__Budget *cg_rpc_budget_out(struct cg_rpc_call *call, const struct cg_budget_row *row);
Ctxguard__V1__LevelStatus *cg_rpc_level_status(struct cg_rpc_call *call,
                                               const struct cg_budget_row *row,
                                               const struct cg_level_verdict *v);
Ctxguard__V1__TokenUsage *cg_rpc_usage_out(struct cg_rpc_call *call, const struct cg_usage *u);

/* levels[] / reasons[] of a reply from a path and a result. */
cg_status cg_rpc_levels_out(struct cg_rpc_call *call, const struct cg_budget_row *rows, int n,
                            const struct cg_budget_result *r, Ctxguard__V1__LevelStatus ***out,
                            size_t *nout) CG_MUST_CHECK;
cg_status cg_rpc_reasons_out(struct cg_rpc_call *call, const struct cg_budget_row *rows, int n,
                             const struct cg_budget_result *r, Ctxguard__V1__DecisionReason ***out,
                             size_t *nout) CG_MUST_CHECK;

/* A ScopeUsage without children (rpc_budget_scopes.c; NULL when out of memory). */
Ctxguard__V1__ScopeUsage *cg_rpc_scope_usage_out(struct cg_rpc_call *call,
                                                 const struct cg_scope_usage *node);

/* Holds the reply delay_ms on the timer unless RETURN_ONLY; returns what is held. */
uint32_t cg_rpc_hold(struct cg_rpc_call *call, int delay_mode, uint32_t delay_ms);

/* Appends the gate's reason (APPROVAL_REQUESTED, _PENDING or _DENIED) to reasons[] (which
 * cg_rpc_reasons_out sized for it). */
cg_status cg_rpc_approval_reason(struct cg_rpc_call *call,
                                 const struct cg_budget_approval_gate *gate,
                                 Ctxguard__V1__DecisionReason **reasons,
                                 size_t *nreasons) CG_MUST_CHECK;

/* Appends an APPROVED_EXTENSION reason for each level that passes only thanks to its
 * approved extension (room for n of them is in reasons[]). */
cg_status cg_rpc_extension_reasons(struct cg_rpc_call *call, const struct cg_budget_row *rows,
                                   int n, const struct cg_budget_result *r,
                                   Ctxguard__V1__DecisionReason **reasons,
                                   size_t *nreasons) CG_MUST_CHECK;

/* An Approval message (NULL when out of memory). */
Ctxguard__V1__Approval *cg_rpc_approval_out(struct cg_rpc_call *call, const struct cg_approval *a);

/* ---- Reserve answers (rpc_budget_out.c) ---- */

/* The answer of a Reserve that held its tokens: path is the path right after the hold,
 * decided the decision taken before it. */
cg_status cg_rpc_reserve_reply(struct cg_rpc_call *call, int delay_mode,
                               const struct cg_budget_row *path, int n,
                               const struct cg_budget_result *decided,
                               const struct cg_reservation *res,
                               ProtobufCMessage **response) CG_MUST_CHECK;

/* Fills the common part of a Commit answer (reservation, usage, levels of path) and sets
 * *response to resp. */
cg_status cg_rpc_commit_finish(struct cg_rpc_call *call, Ctxguard__V1__CommitResponse *resp,
                               const struct cg_reservation *res, const struct cg_usage *usage,
                               bool price_known, const struct cg_budget_row *path, int n,
                               ProtobufCMessage **response) CG_MUST_CHECK;

Ctxguard__V1__Reservation *cg_rpc_reservation_out(struct cg_rpc_call *call,
                                                  const struct cg_reservation *res);

/* ---- Reserve and Commit answers (rpc_budget_write.c) ---- */

/* The answer of a Reserve (delay_mode: the request's) or a Commit from the service's
 * result. */
cg_status cg_rpc_reserve_answer(struct cg_rpc_call *call, int delay_mode,
                                const struct cg_budget_reserve_result *out,
                                ProtobufCMessage **response) CG_MUST_CHECK;
cg_status cg_rpc_commit_answer(struct cg_rpc_call *call, const struct cg_budget_commit_result *out,
                               ProtobufCMessage **response) CG_MUST_CHECK;

/* cg_budget_batch_done_cb for a deferred Reserve or Commit: ctx is its call, whose request
 * gives the Reserve's delay_mode; encodes the answer and hands the call back to the
 * transport (cg_rpc_complete). */
void cg_rpc_batch_done(void *ctx, cg_status st, const struct cg_budget_batch_answer *answer);

/* Whether this call may be deferred into a batch (the transport can resume it later and
 * the server has a batcher). */
static inline bool cg_rpc_batch_can_defer(const struct cg_rpc_call *call,
                                          const struct cg_rpc_env *env)
{
    return env->svc.batcher != NULL && call->resume != NULL;
}

#endif

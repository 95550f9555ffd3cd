/* rpc_budget_write.c - the answers of Reserve and Commit from the budget service's results
 * (service/budget_reserve.h), whether the handler got them itself or the batcher
 * (service/budget_batch.h) answers the deferred call through cg_rpc_batch_done.
 */
#include "rpc/rpc_budget.h"

#include "ctxguard/v1/budget.pb-c.h"
#include "service/budget_batch.h"
#include "service/budget_reserve.h"

/* The answer of a Reserve that held nothing: a replay of the one that held the tokens, or
 * an approval that answers it. */
static cg_status reserve_unheld_reply(struct cg_rpc_call *call,
                                      const struct cg_budget_reserve_result *out,
                                      ProtobufCMessage **response)
{
    const struct cg_budget_result *r = &out->decision;
    Ctxguard__V1__ReserveResponse *resp =
        NEW(call, Ctxguard__V1__ReserveResponse, ctxguard__v1__reserve_response__init);
    if (resp == NULL)
        return OOM(call);
    cg_status st;
    if (out->outcome == CG_RESERVE_REPLAYED) {
        resp->replayed = true;
        resp->decision = CTXGUARD__V1__DECISION__DECISION_ALLOW;
        if ((resp->reservation = cg_rpc_reservation_out(call, &out->reservation)) == NULL)
            return OOM(call);
    } else {
        const struct cg_budget_approval_gate *gate = &out->gate;
        resp->decision = CTXGUARD__V1__DECISION__DECISION_REQUIRE_APPROVAL;
        call->decision = (int)resp->decision;
        resp->approval_state = (Ctxguard__V1__ApprovalState)gate->approval.state;
        if ((resp->approval_id = cg_arena_strdup(call->arena, gate->approval.approval_id)) == NULL)
            return OOM(call);
        if ((st = cg_rpc_reasons_out(call, out->path, out->n, r, &resp->reasons,
                                     &resp->n_reasons)) != CG_OK ||
            (st = cg_rpc_approval_reason(call, gate, resp->reasons, &resp->n_reasons)) != CG_OK)
            return st;
        if (r->tightest >= 0) {
            resp->tightest_level = (Ctxguard__V1__ScopeLevel)out->path[r->tightest].level;
            resp->tightest_ratio = r->tightest_ratio;
        }
    }
    if ((st = cg_rpc_levels_out(call, out->path, out->n, r, &resp->levels, &resp->n_levels)) !=
        CG_OK)
        return st;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_reserve_answer(struct cg_rpc_call *call, int delay_mode,
                                const struct cg_budget_reserve_result *out,
                                ProtobufCMessage **response)
{
    if (out->outcome == CG_RESERVE_HELD)
        return cg_rpc_reserve_reply(call, delay_mode, out->path, out->n, &out->decision,
                                    &out->reservation, response);
    return reserve_unheld_reply(call, out, response);
}

cg_status cg_rpc_commit_answer(struct cg_rpc_call *call, const struct cg_budget_commit_result *out,
                               ProtobufCMessage **response)
{
    Ctxguard__V1__CommitResponse *resp =
        NEW(call, Ctxguard__V1__CommitResponse, ctxguard__v1__commit_response__init);
    if (resp == NULL ||
        (resp->ledger_entry_id = cg_arena_strdup(call->arena, out->rec.ledger_entry_id)) == NULL)
        return OOM(call);
    resp->replayed = out->replayed;
    resp->released_tokens = out->released_tokens;
    resp->overrun_tokens = out->overrun_tokens;
    resp->reservation_expired = out->reservation_expired;
    resp->calibration_updated = out->rec.calibration_updated;
    resp->calibration_factor = out->rec.calibration_factor;
    return cg_rpc_commit_finish(call, resp, &out->reservation, &out->rec.usage,
                                out->rec.price_known, out->rec.path, out->rec.n, response);
}

void cg_rpc_batch_done(void *ctx, cg_status st, const struct cg_budget_batch_answer *answer)
{
    struct cg_rpc_call *call = ctx;
    ProtobufCMessage *response = NULL;
    if (st == CG_OK && answer->kind == CG_BATCH_RESERVE) {
        const Ctxguard__V1__ReserveRequest *req =
            (const Ctxguard__V1__ReserveRequest *)call->request;
        st = cg_rpc_reserve_answer(call, req->delay_mode, answer->reserve, &response);
    } else if (st == CG_OK) {
        st = cg_rpc_commit_answer(call, answer->commit, &response);
    }
    cg_rpc_complete(call, st, response);
}

/* rpc_budget_history.c - BudgetService: GetUsageHistory.
 *
 * validate the scope -> one service call (service/usage_history.h: the plan of the steps
 * and the rollups summed per step) -> reply with every step of the range.
 */
#include "rpc/rpc_budget.h"
#include "service/usage_history.h"

#include "base/clock.h"
#include "ctxguard/v1/budget.pb-c.h"

cg_status cg_rpc_budget_get_usage_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                          const ProtobufCMessage *request,
                                          ProtobufCMessage **response)
{
    const Ctxguard__V1__GetUsageHistoryRequest *req =
        (const Ctxguard__V1__GetUsageHistoryRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st != CG_OK)
        return st;
    struct cg_history_ask ask = {
        .from_ms = req->from_unix_ms,
        .to_ms = req->to_unix_ms,
        .step_s = req->step_seconds,
    };
    struct cg_op op = cg_rpc_op(call);
    struct cg_usage_history h;
    if ((st = cg_usage_history(&env->svc, &op, &ids, &ask, cg_wall_ms(), &h)) != CG_OK)
        return st;

    Ctxguard__V1__GetUsageHistoryResponse *resp =
        NEW(call, Ctxguard__V1__GetUsageHistoryResponse,
            ctxguard__v1__get_usage_history_response__init);
    size_t n = (size_t)h.plan.points;
    if (resp == NULL ||
        (resp->points = cg_arena_calloc(call->arena, n, sizeof *resp->points)) == NULL ||
        (resp->total = cg_rpc_usage_out(call, &h.total)) == NULL)
        return OOM(call);
    for (size_t i = 0; i < n; i++) {
        Ctxguard__V1__UsagePoint *p =
            NEW(call, Ctxguard__V1__UsagePoint, ctxguard__v1__usage_point__init);
        if (p == NULL || (p->usage = cg_rpc_usage_out(call, &h.points[i].usage)) == NULL)
            return OOM(call);
        p->start_unix_ms = h.points[i].start_ms;
        p->entries = h.points[i].entries;
        resp->points[i] = p;
    }
    resp->n_points = n;
    resp->from_unix_ms = h.plan.from_ms;
    resp->to_unix_ms = h.plan.to_ms;
    resp->step_seconds = (uint32_t)(h.plan.step_ms / 1000);
    resp->resolution = (Ctxguard__V1__UsageResolution)h.plan.resolution;
    resp->retained_from_unix_ms = h.retained_from_ms;
    resp->total_entries = h.total_entries;
    *response = &resp->base;
    return CG_OK;
}

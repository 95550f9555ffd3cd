/* budget_approvals.c - the approval gate of the budget service: what a CheckBudget or a
 * Reserve whose decision is REQUIRE_APPROVAL does (service/budget_approvals.h).
 *
 * The state machine lives in the store (store.h, "approvals"): PENDING -> APPROVED |
 * DENIED | EXPIRED, with who and when. Approving extends the level's limit by the granted
 * tokens until the next SetBudget or reset; the waiting caller just retries. Every time
 * here is cg_wall_ms(), passed down so that tests of the store can move the clock.
 */
#include "service/budget_approvals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "service/budget_path.h"
#include "service/cache.h"

/* The APPROVAL level that asks for the approval: the one with the highest projected ratio
 * among those answering REQUIRE_APPROVAL; -1 when none does. */
static int approval_level(const struct cg_budget_result *r, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (r->levels[i].decision != CG_DECISION_REQUIRE_APPROVAL)
            continue;
        if (best < 0 || r->levels[i].projected_ratio > r->levels[best].projected_ratio)
            best = i;
    }
    return best;
}

cg_status cg_budget_approval_gate(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_scope_ids *ids, int64_t tokens, const char *model,
                                  struct cg_budget_row *path, int *n, struct cg_budget_result *r,
                                  struct cg_budget_approval_gate *gate)
{
    memset(gate, 0, sizeof *gate);
    const char *tenant = op->principal->tenant_id;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_budget_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    int64_t now = cg_wall_ms();
    /* Locked, so that concurrent requests of the scope find each other's approval. */
    st = cg_store_path_read(env->store, tenant, ids, true, false, now, path, n, &serr);
    if (st != CG_OK)
        return cg_budget_store_fail(env, op, &serr);
    cg_budget_path_decide(path, *n, tokens, 0, r);
    int at = r->decision == CG_DECISION_REQUIRE_APPROVAL ? approval_level(r, *n) : -1;
    if (at < 0) { /* the budget moved meanwhile: the new decision stands */
        if ((st = cg_budget_commit(env, op, &serr)) == CG_OK)
            cg_cache_written(env, tenant, path, *n);
        return st;
    }

    const struct cg_budget_row *level = &path[at];
    int64_t effective = level->limit_tokens + level->approved_extra_tokens;
    /* What the level judged: its allocated children's shares are held, and the share of
     * its allocated child on the path covers part of the request (core/budget.h). */
    int64_t projected = level->used_tokens + level->reserved_tokens + level->allocated_tokens +
                        r->levels[at].requested_tokens;
    struct cg_approval *request = calloc(1, sizeof *request);
    if (request == NULL) {
        cg_store_rollback(env->store);
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    request->requested_tokens = tokens;
    request->overage_tokens = projected > effective ? projected - effective : 0;
    snprintf(request->model, sizeof request->model, "%s", model ? model : "");
    snprintf(request->requested_by_key_id, sizeof request->requested_by_key_id, "%s",
             op->principal->key_id);
    snprintf(request->reason, sizeof request->reason,
             "%s: %lld used and reserved + %lld requested > %lld tokens (APPROVAL)",
             cg_level_name((cg_level)level->level),
             (long long)(level->used_tokens + level->reserved_tokens), (long long)tokens,
             (long long)effective);
    uint32_t ttl = level->approval_ttl_ms ? level->approval_ttl_ms : CG_APPROVAL_TTL_DEFAULT_MS;
    st = cg_store_approval_request(env->store, tenant, ids, path, *n, at, request, ttl, now,
                                   &gate->approval, &gate->outcome, &serr);
    free(request);
    if (st != CG_OK)
        return cg_budget_store_fail(env, op, &serr);
    if ((st = cg_budget_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, path, *n);
    gate->involved = true;
    return CG_OK;
}

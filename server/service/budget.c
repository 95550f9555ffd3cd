/* budget.c - the budget service's reads (service/budget.h): GetBudget, and CheckBudget's
 * path through the process cache, Redis and PostgreSQL, the on_store_failure policy while
 * PostgreSQL is out of reach, the decision and the approval gate.
 *
 * The cache hit is the hot path (a completion-queue thread answers it without the pool):
 * nothing is allocated or locked beyond the cache's own lookup, and the rows are copied
 * once, by the cache, into the caller's result.
 */
#include "service/budget.h"

#include <stdatomic.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/price.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/meters.h"

int64_t cg_budget_price_estimate(const struct cg_svc_env *env, const char *model, int64_t tokens,
                                 int64_t output)
{
    const struct cg_price *p = env->prices ? cg_price_lookup(env->prices, model) : NULL;
    return p ? cg_price_cost(p, tokens - output, output, 0, 0) : 0;
}

cg_status cg_budget_get(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_scope_ids *ids, int level, struct cg_budget_row *path,
                        int *n, struct cg_budget_result *r)
{
    cg_status st = cg_budget_read_path(env, op, ids, path, n);
    if (st != CG_OK)
        return st;
    if (!path[*n - 1].has_budget)
        return cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_BUDGET_NOT_FOUND, "the %s has no budget",
                           cg_level_name((cg_level)level));
    cg_budget_path_decide(path, *n, 0, 0, r);
    return CG_OK;
}

/* Whether the tenant row of a path has a reset due at now_ms: the answer must then come
 * from a read that applies it (cg_budget_read_path), not from a cache. */
static bool reset_due(const struct cg_budget_row *path, int n, int64_t now_ms)
{
    return n > 0 && path[0].next_reset_ms != 0 && path[0].next_reset_ms <= now_ms;
}

/* Whether the health probe's last answer was that PostgreSQL is unreachable. */
static bool store_known_down(const struct cg_svc_env *env)
{
    return env->health != NULL && atomic_load(&env->health->store_ok) == 0;
}

/* CheckBudget's read of the path: the process's cache (fresh rows only), then Redis, then
 * PostgreSQL; what Redis or PostgreSQL gave fills the caches above it. *source says which
 * answered. CG_UNAVAILABLE (op->err set) when PostgreSQL is unreachable or known to be.
 * *fate (CG_OP_DONE on entry) becomes CG_OP_NEEDS_STORE, with CG_OK, when the cache did not
 * answer and this thread has no store. */
static cg_status check_path(const struct cg_svc_env *env, const struct cg_op *op,
                            const struct cg_scope_ids *ids, struct cg_budget_row *path, int *n,
                            cg_budget_source *source, cg_op_fate *fate)
{
    const char *tenant = op->principal->tenant_id;
    int64_t wall = cg_wall_ms();
    if (cg_cache_path_get(env->cache, tenant, ids, cg_mono_ms(), false, path, n, NULL) &&
        !reset_due(path, *n, wall)) {
        cg_svc_meters_lookup(env->meters, env->metrics_slot, CG_SVC_CACHE_PROCESS,
                             CG_SVC_LOOKUP_HIT);
        *source = CG_BUDGET_SOURCE_CACHE;
        return CG_OK;
    }
    if (env->store == NULL && !store_known_down(env)) {
        *fate = CG_OP_NEEDS_STORE; /* the miss is counted where the call runs again */
        return CG_OK;
    }
    cg_svc_meters_lookup(env->meters, env->metrics_slot, CG_SVC_CACHE_PROCESS, CG_SVC_LOOKUP_MISS);
    if (store_known_down(env))
        return cg_err_set(op->err, CG_UNAVAILABLE, "storage unavailable");
    /* Taken before the reads: a write announced meanwhile refuses what they read. */
    uint64_t ticket = cg_cache_ticket(env->cache);
    int64_t gen = -1;
    /* Redis answers only when every row it gave is at least as new as what this process
     * knows (the process cache refuses older ones) and no write was announced meanwhile;
     * without a process cache, Redis alone answers. */
    bool redis = cg_store_cache_path_get(env->store, tenant, ids, path, n, &gen) &&
                 !reset_due(path, *n, wall) &&
                 (env->cache == NULL ||
                  cg_cache_rows_put(env->cache, tenant, path, *n, ticket, cg_mono_ms()) == *n);
    cg_svc_meters_lookup(env->meters, env->metrics_slot, CG_SVC_CACHE_REDIS,
                         redis ? CG_SVC_LOOKUP_HIT : CG_SVC_LOOKUP_MISS);
    if (redis) {
        *source = CG_BUDGET_SOURCE_CACHE;
        return CG_OK;
    }
    cg_status st = cg_budget_read_path(env, op, ids, path, n);
    cg_svc_meters_lookup(env->meters, env->metrics_slot, CG_SVC_CACHE_POSTGRESQL,
                         st == CG_OK ? CG_SVC_LOOKUP_HIT : CG_SVC_LOOKUP_ERROR);
    if (st == CG_UNAVAILABLE)
        cg_cache_store_state(env->cache, false);
    if (st != CG_OK)
        return st;
    cg_cache_store_state(env->cache, true);
    (void)cg_cache_rows_put(env->cache, tenant, path, *n, ticket, cg_mono_ms());
    if (gen >= 0)
        cg_store_cache_rows_put(env->store, tenant, path, *n, gen);
    *source = CG_BUDGET_SOURCE_DATABASE;
    return CG_OK;
}

/* How strict an on_store_failure is: FAIL_CLOSED (and unset) > LOCAL_ALLOWANCE > FAIL_OPEN. */
static int policy_strictness(int policy)
{
    switch (policy) {
    case CG_STORE_FAILURE_FAIL_OPEN:
        return 1;
    case CG_STORE_FAILURE_LOCAL_ALLOWANCE:
        return 2;
    default:
        return 3;
    }
}

/* Whether row's budget fails over to this replica's local allowance. */
static bool local_allowance(const struct cg_budget_row *row)
{
    return row->has_budget && row->on_store_failure == CG_STORE_FAILURE_LOCAL_ALLOWANCE;
}

/* LOCAL_ALLOWANCE: takes tokens from this process's allowance of every such level of path,
 * all or nothing; false (and *refused_level) when one of them is spent. */
static bool take_allowance(const struct cg_svc_env *env, const char *tenant,
                           const struct cg_budget_row *path, int n, int64_t tokens,
                           int *refused_level)
{
    bool allow = true;
    int taken = 0;
    for (int i = 0; i < n && allow; i++, taken++) {
        if (!local_allowance(&path[i]))
            continue;
        if (!cg_cache_allowance_take(env->cache, tenant, &path[i].ids, tokens,
                                     path[i].local_allowance_tokens)) {
            allow = false;
            *refused_level = path[i].level;
        }
    }
    for (int i = 0; !allow && i < taken - 1; i++) /* all or nothing: give back */
        if (local_allowance(&path[i]))
            (void)cg_cache_allowance_take(env->cache, tenant, &path[i].ids, -tokens, INT64_MAX);
    return allow;
}

/* PostgreSQL is unreachable: the strictest on_store_failure of the budgets of the cached
 * path decides (service/cache.h keeps rows for this, however old). FAIL_CLOSED, no budget or
 * no cached path: the UNAVAILABLE already in op->err. FAIL_OPEN: the policy answers (the
 * caller allows with a warning). LOCAL_ALLOWANCE: allowed while this process's allowance of
 * every such level covers the estimate (counted since the outage began), refused after. The
 * levels show the cached rows; the usage they show may be as old as the outage. */
static cg_status store_failure_answer(const struct cg_svc_env *env, const struct cg_op *op,
                                      const struct cg_budget_check_request *req,
                                      struct cg_budget_check_result *out)
{
    const char *tenant = op->principal->tenant_id;
    out->n = 0;
    if (!cg_cache_path_get(env->cache, tenant, &req->ids, cg_mono_ms(), true, out->path, &out->n,
                           NULL))
        return CG_UNAVAILABLE;
    int strictest = 0, policy = 0;
    for (int i = 0; i < out->n; i++) {
        if (!out->path[i].has_budget)
            continue;
        int k = policy_strictness(out->path[i].on_store_failure);
        if (k > strictest) {
            strictest = k;
            policy = out->path[i].on_store_failure;
        }
    }
    if (strictest == 0 || strictest == 3) {
        cg_log(CG_LOG_DEBUG, "budget", op->request_id,
               "storage unavailable: CheckBudget fails closed");
        return CG_UNAVAILABLE;
    }
    out->policy = (cg_store_failure_policy)policy;
    out->local_allowed = true;
    out->refused_level = 0;
    if (policy == CG_STORE_FAILURE_LOCAL_ALLOWANCE)
        out->local_allowed = take_allowance(env, tenant, out->path, out->n, req->estimated_tokens,
                                            &out->refused_level);
    cg_budget_path_decide(out->path, out->n, req->estimated_tokens, out->estimated_cost_micros,
                          &out->decision);
    out->source = CG_BUDGET_SOURCE_STORE_FAILURE_POLICY;
    cg_err_clear(op->err);
    return CG_OK;
}

cg_status cg_budget_check(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_budget_check_request *req,
                          struct cg_budget_check_result *out, cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    out->estimated_cost_micros = cg_budget_price_estimate(env, req->model, req->estimated_tokens,
                                                          req->estimated_output_tokens);
    out->n = 0;
    out->source = CG_BUDGET_SOURCE_DATABASE;
    out->gate.involved = false;
    cg_status st = check_path(env, op, &req->ids, out->path, &out->n, &out->source, fate);
    if (st == CG_UNAVAILABLE)
        return store_failure_answer(env, op, req, out);
    if (st != CG_OK || *fate != CG_OP_DONE)
        return st;
    cg_budget_path_decide(out->path, out->n, req->estimated_tokens, out->estimated_cost_micros,
                          &out->decision);
    /* APPROVAL mode over the limit: open (or find) the approval, unless only asking. */
    if (out->decision.decision == CG_DECISION_REQUIRE_APPROVAL && !req->dry_run) {
        if (env->store == NULL) {
            *fate = CG_OP_NEEDS_STORE;
            return CG_OK;
        }
        if ((st = cg_budget_approval_gate(env, op, &req->ids, req->estimated_tokens, req->model,
                                          out->path, &out->n, &out->decision, &out->gate)) != CG_OK)
            return st;
        out->source = CG_BUDGET_SOURCE_DATABASE;
    }
    return CG_OK;
}

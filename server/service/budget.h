/* budget.h - the budget service's reads: GetBudget, CheckBudget (the path through the process
 * cache, Redis and PostgreSQL, the on_store_failure policy when PostgreSQL is out of reach, the
 * decision and the approval gate) and the pricing of an estimate. Domain types only.
 */
#ifndef CG_SERVICE_BUDGET_H
#define CG_SERVICE_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "core/budget.h"
#include "service/budget_approvals.h"
#include "service/service.h"
#include "store/store.h"

/* Where the rows of an answer came from (the numbers of the API's BudgetSource). */
typedef enum {
    CG_BUDGET_SOURCE_CACHE = 1,                /* the process cache or Redis */
    CG_BUDGET_SOURCE_DATABASE = 2,             /* PostgreSQL */
    CG_BUDGET_SOURCE_STORE_FAILURE_POLICY = 3, /* cached rows, PostgreSQL out of reach */
} cg_budget_source;

/* A budget row's on_store_failure (store.h; the numbers of the API's OnStoreFailure, 0 and
 * FAIL_CLOSED the same). */
typedef enum {
    CG_STORE_FAILURE_FAIL_CLOSED = 1,
    CG_STORE_FAILURE_FAIL_OPEN = 2,
    CG_STORE_FAILURE_LOCAL_ALLOWANCE = 3,
} cg_store_failure_policy;

/* One CheckBudget, checked by the caller (ids reachable by op's principal). */
struct cg_budget_check_request {
    struct cg_scope_ids ids;
    int64_t estimated_tokens;
    int64_t estimated_output_tokens; /* <= estimated_tokens */
    const char *model;               /* "" none */
    bool dry_run;                    /* only ask: never opens an approval */
};

/* What a CheckBudget found. Filled by cg_budget_check (only the fields its source says). */
struct cg_budget_check_result {
    cg_budget_source source;
    int64_t estimated_cost_micros; /* the estimate priced; 0 when unpriced */
    /* The path of rows decided over (tenant first) and the core decision. */
    struct cg_budget_row path[CG_PATH_MAX];
    int n;
    struct cg_budget_result decision;
    /* CACHE / DATABASE: the approval step (involved: an approval answers the request). */
    struct cg_budget_approval_gate gate;
    /* STORE_FAILURE_POLICY: the strictest policy of the cached path's budgets (FAIL_OPEN or
     * LOCAL_ALLOWANCE), whether this replica's allowance covered the estimate, and else the
     * level whose allowance was spent. */
    cg_store_failure_policy policy;
    bool local_allowed;
    int refused_level;
};

/* The cost of an estimate of tokens, output of them output, from the price table (env->
 * prices); 0 when the model is unpriced. */
int64_t cg_budget_price_estimate(const struct cg_svc_env *env, const char *model, int64_t tokens,
                                 int64_t output);

/* GetBudget: the path of ids (op's tenant, at level) read from PostgreSQL
 * (cg_budget_read_path) into path[0..*n) and decided for 0 tokens into *r. NOT_FOUND
 * (BUDGET_NOT_FOUND) when the scope has no budget. On error op->err is set. */
cg_status cg_budget_get(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_scope_ids *ids, int level, struct cg_budget_row *path,
                        int *n, struct cg_budget_result *r) CG_MUST_CHECK;

/* CheckBudget: reads the path of req->ids (op's tenant) from the process cache (fresh rows
 * only), then Redis, then PostgreSQL (what Redis or PostgreSQL gave fills the caches above
 * it), decides on the estimate, and when that is REQUIRE_APPROVAL and not a dry run runs the
 * approval gate (cg_budget_approval_gate; source becomes DATABASE). When PostgreSQL is
 * unreachable or known to be, the on_store_failure policy of the cached path answers
 * (source STORE_FAILURE_POLICY), or CG_UNAVAILABLE when it fails closed.
 * On a thread without a store (env->store NULL) a cache hit answers; anything that needs
 * the store sets *fate to CG_OP_NEEDS_STORE and returns CG_OK (nothing done: run it again on
 * the pool); otherwise *fate is CG_OP_DONE. The cache-hit path allocates nothing and copies
 * the rows once, into out->path.
 * On error op->err says what the client sees; out is then undefined. */
cg_status cg_budget_check(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_budget_check_request *req,
                          struct cg_budget_check_result *out, cg_op_fate *fate) CG_MUST_CHECK;

#endif

/* budget_approvals.h - the approvals of the budget service (service/budget_approvals.c):
 * the gate (a request over an APPROVAL level's limit opens or finds an approval instead of
 * spending), and reading, listing and resolving them as a key may. On the calling thread's store
 * (env->store, never NULL here).
 */
#ifndef CG_SERVICE_BUDGET_APPROVALS_H
#define CG_SERVICE_BUDGET_APPROVALS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/budget.h"
#include "service/service.h"
#include "store/store.h"

#define CG_APPROVAL_TTL_MIN_MS 60000u
#define CG_APPROVAL_TTL_MAX_MS 604800000u
#define CG_APPROVAL_TTL_DEFAULT_MS 3600000u

/* What the approval step of a request found or did. */
struct cg_budget_approval_gate {
    bool involved; /* an approval answers the request (approval and outcome are set) */
    struct cg_approval approval;
    cg_approval_outcome outcome;
};

/* The approval step of a CheckBudget (not a dry run) or Reserve whose decision over path[]
 * was REQUIRE_APPROVAL, in a transaction of its own: locks the path of ids (op's tenant),
 * decides again on tokens (path, *n and *r are replaced by what the transaction read), and
 * when the decision is still REQUIRE_APPROVAL opens or finds the approval of the tightest
 * APPROVAL level (cg_store_approval_request, requested by op's key) and commits; the rows
 * it wrote go to the caches (cg_cache_written). gate->involved tells whether it did. On
 * error op->err is set and nothing is written. */
cg_status cg_budget_approval_gate(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_scope_ids *ids, int64_t tokens, const char *model,
                                  struct cg_budget_row *path, int *n, struct cg_budget_result *r,
                                  struct cg_budget_approval_gate *gate) CG_MUST_CHECK;

/* The approval approval_id of op's tenant into *a, as op's principal may see it: one outside
 * a scope-bound key's subtree is NOT_FOUND in the words of an unknown id
 * (store_approvals.c). On error op->err is set. */
cg_status cg_budget_approval_get(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *approval_id, struct cg_approval *a) CG_MUST_CHECK;

/* A ResolveApproval, checked by the caller. decision: APPROVED or DENIED (the approval
 * states of store.h); the strings and audit are borrowed for the call. */
struct cg_budget_approval_decision {
    const char *approval_id;
    int decision;
    int64_t granted_tokens; /* 0 with DENIED */
    const char *decided_by;
    const char *note;
    const struct cg_audit *audit;
};

/* ResolveApproval: reads the approval as cg_budget_approval_get, refuses the key that opened
 * it (PERMISSION_DENIED, reason SELF_APPROVAL), resolves it (cg_store_approval_resolve, by
 * op's key) and, unless it was already resolved so (*replayed), drops the tenant's cached
 * rows (an approval moves approved_extra_tokens). *a is the approval after. On error
 * op->err is set. */
cg_status cg_budget_approval_resolve(const struct cg_svc_env *env, const struct cg_op *op,
                                     const struct cg_budget_approval_decision *d,
                                     struct cg_approval *a, bool *replayed) CG_MUST_CHECK;

/* One page of ListApprovals. */
struct cg_budget_approval_page {
    struct cg_approval *rows; /* count rows (malloc'd): cg_budget_approval_page_cleanup */
    int count;
    bool more; /* another page follows, from next */
    struct cg_approval_cursor next;
};

/* ListApprovals, checked by the caller: one page of the approvals of op's tenant under ids
 * as cg_store_approval_list reads them now (cg_wall_ms; after NULL: the first page; limit
 * 1..CG_STORE_PAGE_MAX). On error op->err is set. out needs
 * cg_budget_approval_page_cleanup after success and after failure alike. */
cg_status cg_budget_approval_list(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_scope_ids *ids, bool include_descendants,
                                  unsigned states_mask, const struct cg_approval_cursor *after,
                                  int limit, struct cg_budget_approval_page *out) CG_MUST_CHECK;

/* Frees the rows of a page (a zeroed page too). */
void cg_budget_approval_page_cleanup(struct cg_budget_approval_page *page);

#endif

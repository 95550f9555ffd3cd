/* budget_set.h - SetBudget in the budget service (service/budget_set.c). */
#ifndef CG_SERVICE_BUDGET_SET_H
#define CG_SERVICE_BUDGET_SET_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store.h"

/* One SetBudget, checked by the caller: row holds the scope's ids and settings (its
 * counters are ignored), level the scope's level; expected_version 0 for any version; audit
 * borrowed for the call. */
struct cg_budget_set_request {
    const struct cg_budget_row *row;
    int level;
    int64_t expected_version;
    const struct cg_audit *audit;
};

/* SetBudget in one transaction that locks the scope's path: the budget nests under the
 * nearest budgeted ancestor and over every budget below it (INVALID_ARGUMENT), a share
 * allocated from the parent fits in what the parent has free (FAILED_PRECONDITION /
 * RESOURCE_EXHAUSTED naming settings.allocate_from_parent), then the write
 * (cg_store_budget_put, by op's key) with its events (BUDGET_CHANGED, crossings, the
 * parent's share), COMMIT, and the rows it changed to the caches. *stored is the row as
 * written, *created whether it is new. On error op->err is set and nothing is written. */
cg_status cg_budget_set(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_budget_set_request *req, struct cg_budget_row *stored,
                        bool *created) CG_MUST_CHECK;

#endif

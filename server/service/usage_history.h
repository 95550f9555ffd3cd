/* usage_history.h - GetUsageHistory in the budget service: the plan of the steps
 * (core/history.h), the rollups summed per step (store.h "spend history"), every step
 * filled. On the calling thread's store (env->store).
 */
#ifndef CG_SERVICE_USAGE_HISTORY_H
#define CG_SERVICE_USAGE_HISTORY_H

#include <stdint.h>

#include "core/history.h"
#include "service/service.h"
#include "store/store.h"

/* What GetUsageHistory answers: plan.points steps in points[] (in op->arena), oldest first,
 * empty ones included; retained_from_ms: the resolution's buckets before it may have been
 * deleted by retention (0: kept forever). */
struct cg_usage_history {
    struct cg_history_plan plan;
    struct cg_usage_point *points;
    int64_t retained_from_ms;
    struct cg_usage total;
    int64_t total_entries;
};

/* The spend of scope ids of op's tenant (checked by the caller) over what ask names, at
 * now_ms. On error op->err is set (the fields of ask named as the request names them). */
cg_status cg_usage_history(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_scope_ids *ids, const struct cg_history_ask *ask,
                           int64_t now_ms, struct cg_usage_history *out) CG_MUST_CHECK;

#endif

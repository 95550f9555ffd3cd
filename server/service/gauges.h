/* gauges.h - the metrics read from PostgreSQL instead of counted (service/meters.h): the
 * approvals pending with the oldest one's age, and the budgets nearest their limit. The
 * server's monitor thread refreshes them every CG_SVC_GAUGES_INTERVAL_MS with one read-only
 * statement (store/store_gauges.h); never a scrape, never a pool thread. Every replica
 * reads the same figures, so alerts take their max().
 */
#ifndef CG_SERVICE_GAUGES_H
#define CG_SERVICE_GAUGES_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"

/* How often the monitor thread refreshes the gauges (at most; it refreshes on its sweeper's
 * passes, so with a longer sweep_interval_ms at that pace). */
#define CG_SVC_GAUGES_INTERVAL_MS 10000

/* One refresh through env->store at now_ms (unix ms; cg_wall_ms() in production): sets
 * ctxguard_approvals_pending, ctxguard_approval_oldest_pending_seconds (now_ms less the
 * oldest pending request, 0 when none) and ctxguard_budget_used_ratio{tenant_id,level} to
 * the top env->config->metrics_budget_top_n pairs, replacing its whole set (0: emptied,
 * nothing ranked). Returns false, the gauges left as they were, when the health state is
 * NOT_SERVING (nothing is tried) or the read failed (logged). env->meters NULL: nothing to
 * set, true. Clears the store's deadline (the statement timeout bounds the read). Not
 * thread-safe: env->store is the calling thread's. */
bool cg_svc_gauges_refresh(const struct cg_svc_env *env, int64_t now_ms);

#endif

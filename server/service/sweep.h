/* sweep.h - the sweeper of the budget service (service/sweep.c): what is due without a
 * request (budget resets, expired reservations and approvals, old events), settled in small
 * transactions. The server's monitor thread runs a pass every sweep_interval_ms.
 */
#ifndef CG_SERVICE_SWEEP_H
#define CG_SERVICE_SWEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"

/* One pass of the sweeper through env->store at now_ms (unix ms; cg_wall_ms()
 * in production): for every tenant, applies the budget reset that is due and settles the
 * reservations that expired at or before now_ms as EXPIRED, returning their holds to every
 * level of their paths, in transactions of at most 100 reservations. Safe with several
 * replicas sweeping at once. Clears the store's deadline (each statement is bounded by the
 * statement timeout) and must not be called inside a transaction. *expired gets how many
 * reservations this pass settled. Returns true when every tenant was swept; false when
 * the health state is NOT_SERVING (nothing is tried) or a store error stopped part of the
 * pass (logged). Not thread-safe: env->store is the calling thread's. */
bool cg_sweep_pass(const struct cg_svc_env *env, int64_t now_ms, int *expired);

#endif

/* sweep.h - the sweeper of the budget service (service/sweep.c): what is due without a
 * request (budget resets, expired reservations and approvals), settled in small
 * transactions, and retention (old events, spend history, deliveries, idle sessions). The
 * server's monitor thread runs a pass every sweep_interval_ms and retention every
 * retention_interval_ms.
 */
#ifndef CG_SERVICE_SWEEP_H
#define CG_SERVICE_SWEEP_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"

/* One pass of the sweeper through env->store at now_ms (unix ms; cg_wall_ms()
 * in production): for every tenant with work due (one read: cg_store_sweep_due), applies
 * the budget reset that is due, settles the reservations that expired at or before now_ms
 * as EXPIRED, returning their holds to every level of their paths, in transactions of at
 * most 100 reservations, and stores pending approvals past their expiry as EXPIRED. Safe
 * with several replicas sweeping at once. Clears the store's deadline (each statement is
 * bounded by the statement timeout) and must not be called inside a transaction.
 * *expired gets how many reservations this pass settled. Returns true when everything
 * found due was settled; false when the health state is NOT_SERVING (nothing is tried) or
 * a store error stopped part of the pass (logged). Not thread-safe: env->store is the
 * calling thread's. */
bool cg_sweep_pass(const struct cg_svc_env *env, int64_t now_ms, int *expired);

/* Where the retention walk stands; its caller keeps it between calls (zeroed at first). */
struct cg_sweep_walk {
    bool running;                /* a walk is under way */
    char after[CG_UUID_LEN + 1]; /* the last tenant of the pages done ("" at the start) */
    int64_t next_ms;             /* unix ms: when the next walk starts */
};

/* Retention through env->store at now_ms: once every interval_ms a walk over every tenant,
 * a page of tenants per statement of each kind, deletes the events older than an hour,
 * the sessions past their tenant's history_retention_days, the spend-history buckets past
 * rollup_*_days and the settled webhook deliveries past notify_keep_days. A call works for
 * about budget_ms (real time) at most and leaves the walk where it stopped, so that the
 * caller's other work (the sweeper's passes) is never held up for long; a page from which
 * a statement deleted its limit is done again. Returns false when the health state is
 * NOT_SERVING or a store error stopped it (logged; the walk goes on at the same page next
 * time). Not thread-safe: env->store and walk are the caller's. */
bool cg_sweep_retention(const struct cg_svc_env *env, struct cg_sweep_walk *walk, int64_t now_ms,
                        int64_t interval_ms, int64_t budget_ms);

#endif

/* budget_events.h - WatchUsage's events of the budget writes (service/budget_events.c): what
 * a change of a path's counters or of a budget is worth (core/budget_events.c), appended in
 * the transaction of the change (store.h, "events") so that they commit or roll back with
 * it. On the calling thread's store (env->store, never NULL here).
 */
#ifndef CG_SERVICE_BUDGET_EVENTS_H
#define CG_SERVICE_BUDGET_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store.h"

/* Inside the open transaction of the change, after it was applied, for tenant_id:
 * emit_path after cg_store_path_add / cg_store_path_spend (path as updated; used_delta the
 * tokens spent, of which cache_read_delta were cache reads, which a level with
 * exclude_cache_read_tokens did not count); emit_budget after cg_store_budget_put (before:
 * the scope's row before, NULL when new); emit_share after it too, for the parent (its row
 * as locked before the put, NULL for a tenant) when the scope's share of it moved
 * (allocate_from_parent: the trigger moved the parent's allocated_tokens). (CloseScope's
 * events are appended by cg_store_scope_close_events, in its transaction.) Store errors in
 * serr (the caller rolls back). */
cg_status cg_budget_emit_path(const struct cg_svc_env *env, const char *tenant_id,
                              const struct cg_budget_row *path, int n, int64_t used_delta,
                              int64_t cache_read_delta, int64_t reserved_delta,
                              struct cg_err *serr) CG_MUST_CHECK;
cg_status cg_budget_emit_budget(const struct cg_svc_env *env, const char *tenant_id,
                                const struct cg_budget_row *before,
                                const struct cg_budget_row *after,
                                struct cg_err *serr) CG_MUST_CHECK;
cg_status cg_budget_emit_share(const struct cg_svc_env *env, const char *tenant_id,
                               const struct cg_budget_row *parent,
                               const struct cg_budget_row *before,
                               const struct cg_budget_row *after,
                               struct cg_err *serr) CG_MUST_CHECK;

/* The events of each level from before to after (tenant first), appended to out (cap
 * entries; *count advanced). Returns false when they do not fit. Pure; any thread. */
bool cg_budget_events_collect(const struct cg_budget_row *before, const struct cg_budget_row *after,
                              int n, struct cg_event_in *out, int cap, int *count);

/* cg_path_events_fn (store.h) over cg_budget_events_collect: the events of a path's change
 * for the store's own transactions (CloseScope, the sweeper); ctx is unused. */
int cg_budget_events_of_path(void *ctx, const struct cg_budget_row *before,
                             const struct cg_budget_row *after, int n, struct cg_event_in *out,
                             int cap);

#endif

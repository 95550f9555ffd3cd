/* store_gauges.h - figures of the whole database for the metrics (service/gauges.c reads them
 * every so often on the monitor thread): the approvals pending with the oldest one's age, and
 * the budgets nearest their limit. One statement over every tenant, served by partial
 * indexes (approvals_one_pending; scopes_budgeted_upper, migration 0024), read only.
 * Not thread-safe (a store belongs to one thread).
 */
#ifndef CG_STORE_GAUGES_H
#define CG_STORE_GAUGES_H

#include <stdint.h>

#include "store/store.h"

#define CG_STORE_GAUGES_TOP_MAX 500 /* the most budgets one read ranks */

/* A budget near its limit: a tenant's own (level 1), or the highest of its open sessions
 * (level 2), by used_tokens / (limit_tokens + approved_extra_tokens). */
struct cg_budget_ratio {
    char tenant_id[CG_UUID_LEN + 1];
    int level; /* 1 tenant, 2 session */
    double ratio;
};

/* The approvals still PENDING at now_ms (not past their expiry), of every tenant. */
struct cg_store_gauges {
    int64_t approvals_pending;
    int64_t oldest_pending_ms; /* requested_at of the oldest of them, unix ms; 0: none */
};

/* One statement at now_ms (unix ms): *out, and the top_n (0..CG_STORE_GAUGES_TOP_MAX, else
 * CG_INVALID_ARGUMENT naming `top_n`; 0 ranks none) tenant/level pairs with the highest
 * ratio into top[0..*count) (caller-allocated, top_n entries), highest first (ties by tenant
 * id, then level). Only budgets with a token limit count (has_budget, limit_tokens > 0), of
 * scopes that are open, at the tenant and session levels. The store's errors otherwise. */
cg_status cg_store_gauges_read(struct cg_store *store, int64_t now_ms, int top_n,
                               struct cg_budget_ratio *top, int *count, struct cg_store_gauges *out,
                               struct cg_err *err) CG_MUST_CHECK;

#endif

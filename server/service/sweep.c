/* sweep.c - one pass of the sweeper (service/sweep.h): for every tenant, the budget reset that is
 * due and the reservations and pending approvals that expired are settled, in small transactions
 * (store.h, "sweeper and resets"). The server's background thread calls it every
 * sweep_interval_ms; several replicas may run it at once, the store makes that safe.
 */
#include "service/sweep.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "service/budget_events.h"
#include "service/cache.h"

#define MOD "sweep"
#define SWEEP_PAGE 500  /* tenants read per statement */
#define SWEEP_BATCH 100 /* reservations settled per transaction */
/* Batches per tenant and pass: a tenant with a flood of expired holds gets them back over a
 * few passes and does not hold up the tenants after it. */
#define SWEEP_BATCHES_PER_TENANT 20
#define CG_EVENTS_KEEP_MS (3600 * 1000) /* how long events are kept */

/* Whether an error means that PostgreSQL is out of reach, so that the rest of the pass
 * would only fail the same way. */
static bool store_down(cg_status st)
{
    return st == CG_UNAVAILABLE || st == CG_DEADLINE_EXCEEDED;
}

/* Settles what is due for one tenant; adds to *expired and *resets. Returns the first
 * error (logged here). */
static cg_status sweep_tenant(struct cg_store *store, const char *tenant_id, int64_t now_ms,
                              int *expired, int *resets)
{
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_sweep_due due;
    cg_status st = cg_store_sweep_due(store, tenant_id, now_ms, &due, &err);
    if (st == CG_OK && due.reset) {
        bool reset = false;
        st = cg_store_reset_apply(store, tenant_id, now_ms, &reset, &err);
        *resets += reset;
    }
    for (int batch = 0; st == CG_OK && due.expired && batch < SWEEP_BATCHES_PER_TENANT; batch++) {
        int n = 0;
        /* The holds given back are worth the events of any write: crossings as the usage
         * falls (service/budget_events.c). */
        st = cg_store_reservations_expire_events(store, tenant_id, now_ms, SWEEP_BATCH,
                                                 cg_budget_events_of_path, NULL, &n, &err);
        *expired += n;
        if (n < SWEEP_BATCH)
            break;
    }
    if (st == CG_OK) {
        /* WatchUsage's event log keeps an hour (store.h, "events"). */
        int deleted = 0;
        st = cg_store_events_expire(store, tenant_id, now_ms - CG_EVENTS_KEEP_MS, 10000, &deleted,
                                    &err);
    }
    /* Approvals past their expiry: one indexed update (approvals_expiry_due) per tenant. */
    if (st == CG_OK) {
        int n = 0;
        st = cg_store_approvals_expire(store, tenant_id, now_ms, SWEEP_BATCH, &n, &err);
        if (n > 0)
            cg_log(CG_LOG_INFO, MOD, NULL, "sweep: %d approvals of tenant %s expired", n,
                   tenant_id);
    }
    if (st != CG_OK)
        cg_log(CG_LOG_WARN, MOD, NULL, "sweep of tenant %s failed: %s", tenant_id,
               cg_err_text(&err));
    return st;
}

bool cg_sweep_pass(const struct cg_svc_env *env, int64_t now_ms, int *expired)
{
    *expired = 0;
    /* While PostgreSQL is known to be down (the probe logs that once) or the server
     * drains, a pass would only fail. */
    if (env->health != NULL && !cg_health_is_serving(env->health))
        return false;
    struct cg_store *store = env->store;
    /* No call deadline: each statement is bounded by the statement timeout. */
    cg_store_set_deadline(store, 0);
    cg_store_set_request_id(store, "sweeper");
    char ids[SWEEP_PAGE][CG_UUID_LEN + 1];
    char after[CG_UUID_LEN + 1] = "";
    int resets = 0;
    bool ok = true;
    for (;;) {
        int count = 0;
        struct cg_err err;
        cg_err_clear(&err);
        cg_status st = cg_store_sweep_tenants(store, after, SWEEP_PAGE, ids, &count, &err);
        if (st != CG_OK) {
            cg_log(CG_LOG_WARN, MOD, NULL, "sweep: listing tenants failed: %s", cg_err_text(&err));
            ok = false;
            break;
        }
        for (int i = 0; i < count; i++) {
            int expired_before = *expired, resets_before = resets;
            st = sweep_tenant(store, ids[i], now_ms, expired, &resets);
            /* Rows this pass changed are not at hand: the tenant's cached rows go. */
            if (*expired != expired_before || resets != resets_before)
                cg_cache_dropped(env, ids[i]);
            if (st != CG_OK)
                ok = false;
            if (store_down(st))
                goto done;
        }
        if (count < SWEEP_PAGE)
            break;
        snprintf(after, sizeof after, "%s", ids[count - 1]);
    }
done:
    if (*expired > 0 || resets > 0)
        cg_log(CG_LOG_INFO, MOD, NULL, "sweep: %d reservations expired, %d budgets reset", *expired,
               resets);
    cg_store_set_request_id(store, NULL);
    return ok;
}

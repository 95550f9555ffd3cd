/* sweep.c - the sweeper (service/sweep.h). A pass settles what is due without a request:
 * the tenants with a budget reset, expired reservations or expired pending approvals are
 * found by one read of indexes keyed by the due time (cg_store_sweep_due), so a pass costs
 * the work due, not the number of tenants; each such tenant's work then runs in small
 * transactions of its own (store.h, "sweeper and resets"). Retention (events past an hour,
 * spend history, webhook deliveries, sessions past history_retention_days) walks the
 * tenants a page per statement, every retention_interval_ms, in slices of bounded time.
 * The server's monitor thread runs both; several replicas may run them at once, the store
 * makes that safe.
 */
#include "service/sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "service/budget_events.h"
#include "service/cache.h"
#include "store/store_context.h"
#include "store/store_notify.h"

#define MOD "sweep"
#define SWEEP_PAGE 500        /* tenants read per statement (due work, retention) */
#define SWEEP_BATCH 100       /* reservations settled per transaction */
#define SWEEP_DUE_ROUNDS 4    /* reads of due work per pass, while more is due than one takes */
#define RETENTION_LIMIT 10000 /* rows one retention statement deletes at most */
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

/* The paths one expiry batch changed, as its transaction left them (tenant first), each
 * once: what the sweeper puts in the caches after the COMMIT, as any write does. */
struct expired_paths {
    struct cg_budget_row rows[SWEEP_BATCH][CG_PATH_ROWS_MAX];
    int depth[SWEEP_BATCH];
    int n;
    bool overflow; /* a path did not fit: the tenant's rows are dropped instead */
};

/* Whether two paths name the same scope (their last rows). */
static bool same_path(const struct cg_budget_row *a, int na, const struct cg_budget_row *b, int nb)
{
    const struct cg_scope_ids *x = &a[na - 1].ids, *y = &b[nb - 1].ids;
    return na == nb && strcmp(x->session_id, y->session_id) == 0 &&
           strcmp(x->task_id, y->task_id) == 0 && strcmp(x->agent_id, y->agent_id) == 0;
}

/* A cg_path_events_fn: the events of cg_budget_events_of_path, after keeping the path's
 * rows as the change left them in ctx (struct expired_paths; a later change of the same
 * path, made later in the transaction, replaces an earlier one). */
static int expired_path_kept(void *ctx, const struct cg_budget_row *before,
                             const struct cg_budget_row *after, int n, struct cg_event_in *out,
                             int cap)
{
    struct expired_paths *kept = ctx;
    if (n < 1 || n > CG_PATH_ROWS_MAX) {
        kept->overflow = true;
    } else {
        int i = 0;
        while (i < kept->n && !same_path(kept->rows[i], kept->depth[i], after, n))
            i++;
        if (i == SWEEP_BATCH) {
            kept->overflow = true;
        } else {
            memcpy(kept->rows[i], after, (size_t)n * sizeof *after);
            kept->depth[i] = n;
            kept->n += i == kept->n;
        }
    }
    return cg_budget_events_of_path(NULL, before, after, n, out, cap);
}

/* Gives back the holds of up to SWEEP_BATCHES_PER_TENANT batches of the tenant's expired
 * reservations; adds to *expired. Each committed batch's paths go to the caches (this
 * process's and Redis, cg_cache_written); the other replicas drop their older copies when
 * the NOTIFY after the COMMIT names the rows (every row whose counters moved has an event,
 * USAGE_CHANGED at least: cg_budget_events_of_path). *drop_tenant is set when a batch's
 * paths could not all be kept. */
static cg_status expire_batches(const struct cg_svc_env *env, const char *tenant_id, int64_t now_ms,
                                int *expired, bool *drop_tenant, struct cg_err *err)
{
    struct expired_paths *kept = malloc(sizeof *kept);
    if (kept == NULL) {
        *drop_tenant = true;
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    cg_status st = CG_OK;
    for (int batch = 0; st == CG_OK && batch < SWEEP_BATCHES_PER_TENANT; batch++) {
        int n = 0;
        kept->n = 0;
        kept->overflow = false;
        /* The holds given back are worth the events of any write: crossings as the usage
         * falls (service/budget_events.c). */
        st = cg_store_reservations_expire_events(env->store, tenant_id, now_ms, SWEEP_BATCH,
                                                 expired_path_kept, kept, &n, err);
        *expired += n;
        if (st == CG_OK) {
            for (int i = 0; i < kept->n; i++)
                cg_cache_written(env, tenant_id, kept->rows[i], kept->depth[i]);
            *drop_tenant = *drop_tenant || kept->overflow;
        }
        if (n < SWEEP_BATCH)
            break;
    }
    free(kept);
    return st;
}

/* Settles what is due for one tenant (what cg_store_sweep_due found); adds to *expired and
 * *resets. Returns the first error (logged here). */
static cg_status sweep_tenant(const struct cg_svc_env *env, const struct cg_sweep_due *due,
                              int64_t now_ms, int *expired, int *resets, bool *drop_tenant)
{
    struct cg_store *store = env->store;
    const char *tenant_id = due->tenant_id;
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = CG_OK;
    if (due->reset) {
        bool reset = false;
        st = cg_store_reset_apply(store, tenant_id, now_ms, &reset, &err);
        *resets += reset;
    }
    if (st == CG_OK && due->expired)
        st = expire_batches(env, tenant_id, now_ms, expired, drop_tenant, &err);
    /* Approvals past their expiry: one indexed update (approvals_expiry_due). */
    if (st == CG_OK && due->approvals) {
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
    struct cg_sweep_due *due = calloc(SWEEP_PAGE, sizeof *due);
    if (due == NULL) {
        cg_log(CG_LOG_WARN, MOD, NULL, "sweep: out of memory");
        return false;
    }
    /* No call deadline: each statement is bounded by the statement timeout. */
    cg_store_set_deadline(store, 0);
    cg_store_set_request_id(store, "sweeper");
    int resets = 0;
    bool ok = true;
    /* A round settles what one read found due; more rounds only while a kind had more rows
     * due than a read takes (a flood of expired holds), a few a pass. */
    for (int round = 0; round < SWEEP_DUE_ROUNDS; round++) {
        int count = 0;
        bool more = false;
        struct cg_err err;
        cg_err_clear(&err);
        cg_status st = cg_store_sweep_due(store, now_ms, SWEEP_PAGE, due, &count, &more, &err);
        if (st != CG_OK) {
            cg_log(CG_LOG_WARN, MOD, NULL, "sweep: finding due work failed: %s", cg_err_text(&err));
            ok = false;
            break;
        }
        for (int i = 0; i < count; i++) {
            int resets_before = resets;
            bool drop_tenant = false;
            st = sweep_tenant(env, &due[i], now_ms, expired, &resets, &drop_tenant);
            /* Expired holds name their rows (expire_batches); a reset, or paths that could
             * not be kept, drop the tenant's cached rows. */
            if (drop_tenant || resets != resets_before)
                cg_cache_dropped(env, due[i].tenant_id);
            if (st != CG_OK)
                ok = false;
            if (store_down(st))
                goto done;
        }
        if (!more)
            break;
    }
done:
    if (*expired > 0 || resets > 0)
        cg_log(CG_LOG_INFO, MOD, NULL, "sweep: %d reservations expired, %d budgets reset", *expired,
               resets);
    cg_store_set_request_id(store, NULL);
    free(due);
    return ok;
}

/* ------------------------------------------------------------------ retention --- */

/* Runs one statement of each kind of retention on a page of tenants; *whole is cleared
 * when a statement deleted as much as it may (more may be left: the page is done again). */
static cg_status retention_page(const struct cg_svc_env *env, const char (*ids)[CG_UUID_LEN + 1],
                                int n, int64_t now_ms, bool *whole, struct cg_err *err)
{
    struct cg_store *store = env->store;
    int deleted = 0;
    /* WatchUsage's event log keeps an hour (store.h, "events"). */
    cg_status st = cg_store_events_expire(store, ids, n, now_ms - CG_EVENTS_KEEP_MS,
                                          RETENTION_LIMIT, &deleted, err);
    *whole = *whole && deleted < RETENTION_LIMIT;
    /* Sessions idle past their tenant's history_retention_days, whole. */
    if (st == CG_OK) {
        deleted = 0;
        st = cg_store_ctx_retention(store, ids, n, now_ms, SWEEP_BATCH, &deleted, err);
        *whole = *whole && deleted < SWEEP_BATCH;
        if (deleted > 0)
            cg_log(CG_LOG_INFO, MOD, NULL,
                   "sweep: %d sessions deleted (history_retention_days of their tenants)", deleted);
    }
    /* Spend history past each resolution's retention (rollup_*_days; 0 keeps it). */
    if (st == CG_OK && env->config != NULL) {
        const int64_t day_ms = 86400 * 1000LL;
        const int64_t keep_days[CG_ROLLUP_RESOLUTIONS] = {env->config->rollup_minute_days,
                                                          env->config->rollup_hour_days,
                                                          env->config->rollup_day_days};
        int64_t before[CG_ROLLUP_RESOLUTIONS];
        for (int r = 0; r < CG_ROLLUP_RESOLUTIONS; r++)
            before[r] = keep_days[r] > 0 ? now_ms - keep_days[r] * day_ms : 0;
        deleted = 0;
        st = cg_store_rollups_expire(store, ids, n, before, RETENTION_LIMIT, &deleted, err);
        *whole = *whole && deleted < RETENTION_LIMIT;
    }
    /* Delivered and dead webhook deliveries past notify_keep_days. */
    if (st == CG_OK && env->config != NULL) {
        deleted = 0;
        st = cg_store_outbox_expire(store, ids, n,
                                    now_ms - env->config->notify_keep_days * 86400 * 1000LL,
                                    RETENTION_LIMIT, &deleted, err);
        *whole = *whole && deleted < RETENTION_LIMIT;
    }
    return st;
}

bool cg_sweep_retention(const struct cg_svc_env *env, struct cg_sweep_walk *walk, int64_t now_ms,
                        int64_t interval_ms, int64_t budget_ms)
{
    if (walk->next_ms - now_ms > interval_ms)
        walk->next_ms = now_ms; /* the wall clock went back: do not wait for it */
    if (!walk->running && now_ms < walk->next_ms)
        return true;
    if (env->health != NULL && !cg_health_is_serving(env->health))
        return false;
    if (!walk->running) {
        walk->running = true;
        walk->after[0] = '\0';
        walk->next_ms = now_ms + interval_ms; /* from the start: a long walk is not delayed */
    }
    struct cg_store *store = env->store;
    char(*ids)[CG_UUID_LEN + 1] = calloc(SWEEP_PAGE, sizeof *ids);
    if (ids == NULL) {
        cg_log(CG_LOG_WARN, MOD, NULL, "retention: out of memory");
        return false;
    }
    cg_store_set_deadline(store, 0);
    cg_store_set_request_id(store, "sweeper");
    bool ok = true;
    int64_t until = cg_mono_ms() + budget_ms;
    while (walk->running && cg_mono_ms() < until) {
        int count = 0;
        struct cg_err err;
        cg_err_clear(&err);
        cg_status st = cg_store_sweep_tenants(store, walk->after, SWEEP_PAGE, ids, &count, &err);
        bool whole = true;
        if (st == CG_OK && count > 0)
            st = retention_page(env, ids, count, now_ms, &whole, &err);
        if (st != CG_OK) {
            /* The walk stays where it is: the next call does this page again. */
            cg_log(CG_LOG_WARN, MOD, NULL, "retention failed: %s", cg_err_text(&err));
            ok = false;
            break;
        }
        if (!whole)
            continue; /* more of this page is due: again, within the budget */
        if (count < SWEEP_PAGE)
            walk->running = false; /* the last page: the walk is over */
        else
            snprintf(walk->after, sizeof walk->after, "%s", ids[count - 1]);
    }
    cg_store_set_request_id(store, NULL);
    free(ids);
    return ok;
}

/* gauges.c - the metrics read from PostgreSQL (service/gauges.h). */
#include "service/gauges.h"

#include <stdlib.h>

#include "base/log.h"
#include "base/metrics.h"
#include "core/scope.h"
#include "service/meters.h"
#include "store/store_gauges.h"

#define MOD "gauges"

/* Replaces ctxguard_budget_used_ratio's samples with the n ranked budgets. */
static void set_ratios(const struct cg_svc_meters *m, const struct cg_budget_ratio *top, int n)
{
    struct cg_metric_sample *samples = calloc(n > 0 ? (size_t)n : 1, sizeof *samples);
    if (samples == NULL) {
        cg_log(CG_LOG_WARN, MOD, NULL, "budget ratios not refreshed: out of memory");
        return;
    }
    for (int i = 0; i < n; i++) {
        samples[i].values[0] = top[i].tenant_id;
        samples[i].values[1] = cg_level_name((cg_level)top[i].level);
        samples[i].value = top[i].ratio;
    }
    struct cg_err err;
    cg_err_clear(&err);
    if (cg_metric_family_replace(m->budget_used_ratio, samples, (size_t)n, &err) != CG_OK)
        cg_log(CG_LOG_WARN, MOD, NULL, "budget ratios not refreshed: %s", cg_err_text(&err));
    free(samples);
}

bool cg_svc_gauges_refresh(const struct cg_svc_env *env, int64_t now_ms)
{
    const struct cg_svc_meters *m = env->meters;
    if (m == NULL)
        return true;
    /* While PostgreSQL is known to be down (the probe logs that once) or the server drains,
     * a read would only fail: the gauges keep their last figures. */
    if (env->health != NULL && !cg_health_is_serving(env->health))
        return false;
    int top_n = env->config != NULL ? (int)env->config->metrics_budget_top_n : 0;
    if (top_n > CG_STORE_GAUGES_TOP_MAX)
        top_n = CG_STORE_GAUGES_TOP_MAX; /* the config table's bound; kept in step */
    struct cg_budget_ratio *top = NULL;
    if (top_n > 0 && (top = calloc((size_t)top_n, sizeof *top)) == NULL) {
        cg_log(CG_LOG_WARN, MOD, NULL, "gauges not refreshed: out of memory");
        return false;
    }
    struct cg_store *store = env->store;
    cg_store_set_deadline(store, 0);
    cg_store_set_request_id(store, "gauges");
    struct cg_store_gauges g;
    int count = 0;
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = cg_store_gauges_read(store, now_ms, top_n, top, &count, &g, &err);
    cg_store_set_request_id(store, NULL);
    if (st != CG_OK) {
        cg_log(CG_LOG_WARN, MOD, NULL, "gauges not refreshed: %s", cg_err_text(&err));
        free(top);
        return false;
    }
    cg_metric_set(m->approvals_pending, (double)g.approvals_pending);
    int64_t age_ms = g.oldest_pending_ms > 0 ? now_ms - g.oldest_pending_ms : 0;
    cg_metric_set(m->approval_oldest_pending_seconds, age_ms > 0 ? (double)age_ms / 1000.0 : 0.0);
    set_ratios(m, top, count);
    free(top);
    return true;
}

/* forecast.c - spend forecasts (forecast.h). */
#include "service/forecast.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/budget_events.h"
#include "core/scope.h"
#include "service/budget_path.h"
#include "service/meters.h"

#define MOD "forecast"
#define TENANT_PAGE 500

static int64_t window_ms(const struct cg_svc_env *env)
{
    return env->config->forecast_window_minutes * 60 * 1000LL;
}

cg_status cg_forecast_nodes(const struct cg_svc_env *env, const char *tenant_id,
                            const struct cg_scope_usage *nodes, int n, int64_t now_ms,
                            struct cg_forecast *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out * (size_t)n);
    struct cg_scope_ids *ids = calloc((size_t)n + 1, sizeof *ids);
    bool *exclude = calloc((size_t)n + 1, sizeof *exclude);
    int64_t *spent = calloc((size_t)n + 1, sizeof *spent);
    int *at = calloc((size_t)n + 1, sizeof *at);
    cg_status st = CG_OK;
    if (ids == NULL || exclude == NULL || spent == NULL || at == NULL) {
        st = cg_err_set(err, CG_NOMEM, "out of memory");
        goto out;
    }
    int k = 0; /* the nodes with a budget */
    for (int i = 0; i < n; i++) {
        if (!nodes[i].row.has_budget)
            continue;
        ids[k] = nodes[i].row.ids;
        exclude[k] = nodes[i].row.exclude_cache_read_tokens;
        at[k++] = i;
    }
    if (k > 0)
        st = cg_store_spend_in_window(env->store, tenant_id, ids, exclude, k, window_ms(env), spent,
                                      err);
    for (int j = 0; st == CG_OK && j < k; j++) {
        struct cg_budget_result r;
        cg_budget_path_decide(&nodes[at[j]].row, 1, 0, 0, &r);
        cg_history_forecast(r.levels[0].remaining_tokens, spent[j], window_ms(env), now_ms,
                            &out[at[j]]);
    }
out:
    free(ids);
    free(exclude);
    free(spent);
    free(at);
    return st;
}

/* The soonest exhaustion of a tenant's budgets at one level, for the metric. */
struct soonest {
    char tenant_id[CG_UUID_LEN + 1];
    int level;
    double seconds;
};

struct soonest_list {
    struct soonest *items;
    size_t n, cap;
};

/* Adds the soonest forecast of each level among a tenant's candidates (forecasts f). */
static void soonest_add(struct soonest_list *l, const char *tenant_id,
                        const struct cg_forecast_candidate *cands, const struct cg_forecast *f,
                        int n)
{
    double best[5] = {-1, -1, -1, -1, -1};
    for (int i = 0; i < n; i++) {
        int level = cg_scope_level(&cands[i].ids);
        if (f[i].exhaustion_ms != 0 && level >= 1 && level <= 4 &&
            (best[level] < 0 || f[i].seconds < best[level]))
            best[level] = f[i].seconds;
    }
    for (int level = 1; level <= 4; level++) {
        if (best[level] < 0)
            continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 64;
            struct soonest *items = realloc(l->items, cap * sizeof *items);
            if (items == NULL)
                return; /* the metric shows fewer */
            l->items = items;
            l->cap = cap;
        }
        struct soonest *s = &l->items[l->n++];
        snprintf(s->tenant_id, sizeof s->tenant_id, "%s", tenant_id);
        s->level = level;
        s->seconds = best[level];
    }
}

static int by_seconds(const void *a, const void *b)
{
    double x = ((const struct soonest *)a)->seconds, y = ((const struct soonest *)b)->seconds;
    return x < y ? -1 : x > y;
}

/* ctxguard_budget_exhaustion_seconds: the top_n soonest, replacing the last pass's. */
static void soonest_publish(const struct cg_svc_env *env, struct soonest_list *l)
{
    if (env->meters == NULL || env->meters->budget_exhaustion == NULL)
        return;
    size_t n = l->n;
    int64_t top = env->config->metrics_budget_top_n;
    if (n > (size_t)top)
        n = (size_t)top;
    if (l->n > 0)
        qsort(l->items, l->n, sizeof *l->items, by_seconds);
    struct cg_metric_sample *samples = calloc(n + 1, sizeof *samples);
    if (samples == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        samples[i].values[0] = l->items[i].tenant_id;
        samples[i].values[1] = cg_level_name((cg_level)l->items[i].level);
        samples[i].value = l->items[i].seconds;
    }
    struct cg_err err;
    cg_err_clear(&err);
    if (cg_metric_family_replace(env->meters->budget_exhaustion, samples, n, &err) != CG_OK)
        cg_log(CG_LOG_WARN, MOD, NULL, "exhaustion forecasts not published: %s", cg_err_text(&err));
    free(samples);
}

/* The forecasts of one tenant's budgets: alerts and re-arms; the soonest per level into l. */
static cg_status pass_tenant(const struct cg_svc_env *env, const char *tenant_id, int64_t now_ms,
                             struct cg_forecast_candidate *cands, struct cg_forecast *fc,
                             struct cg_scope_ids *under, struct soonest_list *l, int *alerted,
                             struct cg_err *err)
{
    int n = 0;
    cg_status st = cg_store_forecast_candidates(env->store, tenant_id, window_ms(env), cands,
                                                CG_FORECAST_SCOPES_MAX, &n, err);
    if (st != CG_OK)
        return st;
    for (int i = 0; i < n; i++)
        cg_history_forecast(cands[i].remaining, cands[i].spent, window_ms(env), now_ms, &fc[i]);
    soonest_add(l, tenant_id, cands, fc, n);
    double horizon_s = (double)env->config->forecast_horizon_minutes * 60.0;
    int nunder = 0;
    for (int i = 0; i < n && st == CG_OK; i++) {
        const struct cg_forecast f = fc[i];
        if (f.exhaustion_ms == 0 || f.seconds >= horizon_s)
            continue;
        under[nunder++] = cands[i].ids;
        if (cands[i].alerted)
            continue;
        struct cg_event_fields fields;
        memset(&fields, 0, sizeof fields);
        fields.ref_tokens = (int64_t)(f.tokens_per_minute + 0.5);
        fields.period_start_ms = f.exhaustion_ms;
        snprintf(fields.message, sizeof fields.message,
                 "at %.0f tokens/min the budget runs out in %.0f min", f.tokens_per_minute,
                 f.seconds / 60.0);
        bool made = false;
        st = cg_store_forecast_alert(env->store, tenant_id, &cands[i].ids, &fields, now_ms, &made,
                                     err);
        *alerted += made;
    }
    /* Every scope not under the horizon now may be alerted again (the candidates' list is
     * whole unless it hit the cap: then keep the marks as they are). */
    if (st == CG_OK && n < CG_FORECAST_SCOPES_MAX) {
        int rearmed = 0;
        st = cg_store_forecast_rearm(env->store, tenant_id, under, nunder, &rearmed, err);
    }
    return st;
}

bool cg_forecast_pass(const struct cg_svc_env *env, int64_t now_ms, int *alerted)
{
    *alerted = 0;
    if (env->config->forecast_horizon_minutes <= 0)
        return true;
    struct cg_forecast_candidate *cands = calloc(CG_FORECAST_SCOPES_MAX, sizeof *cands);
    struct cg_forecast *fc = calloc(CG_FORECAST_SCOPES_MAX, sizeof *fc);
    struct cg_scope_ids *under = calloc(CG_FORECAST_SCOPES_MAX, sizeof *under);
    char(*ids)[CG_UUID_LEN + 1] = calloc(TENANT_PAGE, sizeof *ids);
    struct soonest_list soonest = {0};
    bool ok = cands != NULL && fc != NULL && under != NULL && ids != NULL;
    bool whole = ok; /* every tenant looked at: the metric may be replaced */
    char after[CG_UUID_LEN + 1] = "";
    while (ok) {
        int count = 0;
        struct cg_err err;
        cg_err_clear(&err);
        if (cg_store_forecast_tenants(env->store, window_ms(env), after, TENANT_PAGE, ids, &count,
                                      &err) != CG_OK) {
            cg_log(CG_LOG_WARN, MOD, NULL, "forecast: listing tenants failed: %s",
                   cg_err_text(&err));
            ok = whole = false;
            break;
        }
        for (int i = 0; i < count; i++) {
            cg_err_clear(&err);
            if (pass_tenant(env, ids[i], now_ms, cands, fc, under, &soonest, alerted, &err) !=
                CG_OK) {
                cg_log(CG_LOG_WARN, MOD, NULL, "forecast of tenant %s failed: %s", ids[i],
                       cg_err_text(&err));
                ok = false;
            }
        }
        if (count < TENANT_PAGE)
            break;
        snprintf(after, sizeof after, "%s", ids[count - 1]);
    }
    if (whole)
        soonest_publish(env, &soonest);
    if (*alerted > 0)
        cg_log(CG_LOG_INFO, MOD, NULL, "forecast: %d budgets run out within %" PRId64 " min",
               *alerted, env->config->forecast_horizon_minutes);
    free(soonest.items);
    free(cands);
    free(fc);
    free(under);
    free(ids);
    return ok;
}

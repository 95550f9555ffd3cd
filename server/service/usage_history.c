/* usage_history.c - GetUsageHistory (usage_history.h). */
#include "service/usage_history.h"

#include <string.h>

#include "base/arena.h"
#include "service/op_err.h"

static void add_usage(struct cg_usage *to, const struct cg_usage *u)
{
    to->input_tokens += u->input_tokens;
    to->output_tokens += u->output_tokens;
    to->cache_read_tokens += u->cache_read_tokens;
    to->cache_write_tokens += u->cache_write_tokens;
    to->cost_micros += u->cost_micros;
}

/* The oldest time whose buckets of resolution are still kept (0: all are). */
static int64_t retained_from(const struct cg_config *cfg, int resolution, int64_t now_ms)
{
    if (cfg == NULL)
        return 0;
    int64_t days = resolution == CG_ROLLUP_MINUTE ? cfg->rollup_minute_days
                   : resolution == CG_ROLLUP_HOUR ? cfg->rollup_hour_days
                                                  : cfg->rollup_day_days;
    return days > 0 ? now_ms - days * 86400 * 1000LL : 0;
}

cg_status cg_usage_history(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_scope_ids *ids, const struct cg_history_ask *ask,
                           int64_t now_ms, struct cg_usage_history *out)
{
    memset(out, 0, sizeof *out);
    cg_status st = cg_history_plan(ask, now_ms, &out->plan, op->err);
    if (st != CG_OK)
        return st;
    const struct cg_history_plan *plan = &out->plan;
    size_t n = (size_t)plan->points;
    struct cg_usage_point *held = cg_arena_calloc(op->arena, n, sizeof *held);
    out->points = cg_arena_calloc(op->arena, n, sizeof *out->points);
    if (held == NULL || out->points == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    int count = 0;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_usage_history(env->store, op->principal->tenant_id, ids,
                                (cg_rollup_resolution)plan->resolution, plan->from_ms, plan->to_ms,
                                plan->step_ms, held, (int)n, &count, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    for (size_t i = 0; i < n; i++)
        out->points[i].start_ms = plan->from_ms + (int64_t)i * plan->step_ms;
    for (int i = 0; i < count; i++) {
        int64_t at = (held[i].start_ms - plan->from_ms) / plan->step_ms;
        if (at < 0 || at >= (int64_t)n || held[i].start_ms != out->points[at].start_ms)
            continue; /* cannot happen: the store sums within [from, to) on the same grid */
        out->points[at] = held[i];
        add_usage(&out->total, &held[i].usage);
        out->total_entries += held[i].entries;
    }
    out->retained_from_ms = retained_from(env->config, plan->resolution, now_ms);
    return CG_OK;
}

/* budget_events.c - the events of a change of one scope (see budget_events.h). */
#include "core/budget_events.h"

/* The tiers that apply to a level: its own, the defaults, or none. */
static int level_tiers(const struct cg_budget_level *l, struct cg_tier tiers[CG_TIERS_MAX])
{
    if (!l->has_budget || l->backpressure_disabled)
        return 0;
    if (l->ntiers <= 0) {
        int n;
        cg_budget_default_tiers(tiers, &n);
        return n;
    }
    int n = l->ntiers > CG_TIERS_MAX ? CG_TIERS_MAX : l->ntiers;
    for (int i = 0; i < n; i++)
        tiers[i] = l->tiers[i];
    return n;
}

/* used + reserved + allocated (the shares of allocated children), saturating. */
static int64_t held(const struct cg_budget_level *l)
{
    int64_t used = l->used_tokens > 0 ? l->used_tokens : 0;
    int64_t reserved = l->reserved_tokens > 0 ? l->reserved_tokens : 0;
    int64_t allocated = l->allocated_tokens > 0 ? l->allocated_tokens : 0;
    int64_t sum = used > INT64_MAX - reserved ? INT64_MAX : used + reserved;
    return sum > INT64_MAX - allocated ? INT64_MAX : sum + allocated;
}

static double ratio(const struct cg_budget_level *l)
{
    if (!l->has_budget || l->limit_tokens <= 0)
        return 0;
    return (double)held(l) / (double)l->limit_tokens;
}

uint32_t cg_budget_level_delay(const struct cg_budget_level *level)
{
    struct cg_tier tiers[CG_TIERS_MAX];
    int n = level_tiers(level, tiers);
    double r = ratio(level);
    uint32_t delay = 0;
    for (int i = 0; i < n; i++)
        if (r >= tiers[i].ratio)
            delay = tiers[i].delay_ms;
    return delay;
}

bool cg_event_type_filterable(int t)
{
    return (t >= CG_EVENT_USAGE_CHANGED && t <= CG_EVENT_RESERVATION_EXPIRED) ||
           t == CG_EVENT_OVERRUN || t == CG_EVENT_FORECAST_EXHAUSTION;
}

int cg_budget_level_events(const struct cg_budget_level *before,
                           const struct cg_budget_level *after,
                           struct cg_level_event out[CG_LEVEL_EVENTS_MAX])
{
    int n = 0;
    uint32_t delay = cg_budget_level_delay(after);
    if (before->used_tokens != after->used_tokens ||
        before->reserved_tokens != after->reserved_tokens ||
        before->used_cost_micros != after->used_cost_micros ||
        before->reserved_cost_micros != after->reserved_cost_micros ||
        before->allocated_tokens != after->allocated_tokens)
        out[n++] = (struct cg_level_event){CG_EVENT_USAGE_CHANGED, 0, false, delay};
    if (!after->has_budget || after->limit_tokens <= 0)
        return n;
    /* Before the change the scope may have had no budget (SetBudget creates it): its ratio
     * was then 0 and any threshold now reached was crossed upwards. */
    double r0 = before->has_budget ? ratio(before) : 0;
    double r1 = ratio(after);
    struct cg_tier tiers[CG_TIERS_MAX];
    int nt = level_tiers(after, tiers);
    if (r1 > r0) {
        for (int i = 0; i < nt; i++)
            if (r0 < tiers[i].ratio && tiers[i].ratio <= r1)
                out[n++] = (struct cg_level_event){CG_EVENT_THRESHOLD_CROSSED, tiers[i].ratio,
                                                   false, delay};
        double w = after->warning_ratio;
        if (w > 0 && r0 < w && w <= r1)
            out[n++] = (struct cg_level_event){CG_EVENT_WARNING, w, false, delay};
        int64_t before_held = before->has_budget ? held(before) : 0;
        int64_t before_limit = before->has_budget ? before->limit_tokens : after->limit_tokens;
        bool was_exhausted = before->has_budget && before_held >= before_limit;
        if (!was_exhausted && held(after) >= after->limit_tokens)
            out[n++] = (struct cg_level_event){CG_EVENT_EXHAUSTED, 1.0, false, delay};
    } else if (r1 < r0) {
        for (int i = nt - 1; i >= 0; i--)
            if (r1 < tiers[i].ratio && tiers[i].ratio <= r0)
                out[n++] = (struct cg_level_event){CG_EVENT_THRESHOLD_CROSSED, tiers[i].ratio, true,
                                                   delay};
    }
    return n;
}

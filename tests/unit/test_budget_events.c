/* test_budget_events.c - which WatchUsage events a change of one scope makes. */
#include <criterion/criterion.h>
#include <math.h>

#include "core/budget_events.h"

static struct cg_budget_level lvl(int64_t limit, int64_t used, int64_t reserved)
{
    return (struct cg_budget_level){.level = CG_LEVEL_TASK,
                                    .has_budget = true,
                                    .mode = CG_MODE_HARD,
                                    .limit_tokens = limit,
                                    .warning_ratio = 0.8,
                                    .used_tokens = used,
                                    .reserved_tokens = reserved};
}

static int events(struct cg_budget_level b, struct cg_budget_level a, struct cg_level_event *out)
{
    return cg_budget_level_events(&b, &a, out);
}

Test(budget_events, nothing_changed_makes_nothing)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    cr_assert_eq(events(lvl(1000, 500, 0), lvl(1000, 500, 0), e), 0);
}

Test(budget_events, rising_across_tiers_and_warning_in_order)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    int n = events(lvl(1000, 700, 0), lvl(1000, 700, 210), e); /* 70 % -> 91 % */
    cr_assert_eq(n, 5);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
    double want[] = {0.80, 0.85, 0.90};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(e[1 + i].type, CG_EVENT_THRESHOLD_CROSSED);
        cr_assert(fabs(e[1 + i].threshold_ratio - want[i]) < 1e-9);
        cr_assert(!e[1 + i].falling);
    }
    cr_assert_eq(e[4].type, CG_EVENT_WARNING);
    for (int i = 0; i < n; i++)
        cr_assert_eq(e[i].delay_ms, 750, "the delay in force after: the 90 %% tier");
}

Test(budget_events, reaching_the_limit_is_exhausted_once)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    int n = events(lvl(1000, 960, 0), lvl(1000, 1000, 0), e);
    cr_assert_eq(n, 2);
    cr_assert_eq(e[1].type, CG_EVENT_EXHAUSTED);
    n = events(lvl(1000, 1000, 0), lvl(1000, 1100, 0), e); /* already exhausted */
    cr_assert_eq(n, 1);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
}

Test(budget_events, falling_crossings_descend_and_make_no_warning)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    int n = events(lvl(1000, 860, 100), lvl(1000, 860, 0), e); /* 96 % -> 86 % */
    cr_assert_eq(n, 3);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
    double want[] = {0.95, 0.90};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(e[1 + i].type, CG_EVENT_THRESHOLD_CROSSED);
        cr_assert(e[1 + i].falling);
        cr_assert(fabs(e[1 + i].threshold_ratio - want[i]) < 1e-9);
        cr_assert_eq(e[1 + i].delay_ms, 300, "the 85 %% tier is in force after");
    }
}

Test(budget_events, a_raised_limit_falls_without_usage_changed)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    int n = events(lvl(1000, 900, 0), lvl(2000, 900, 0), e); /* 90 % -> 45 % */
    cr_assert_eq(n, 3);
    for (int i = 0; i < n; i++)
        cr_assert(e[i].type == CG_EVENT_THRESHOLD_CROSSED && e[i].falling);
}

Test(budget_events, a_new_budget_counts_from_zero)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    struct cg_budget_level before = lvl(0, 850, 0);
    before.has_budget = false;
    int n = events(before, lvl(1000, 850, 0), e);
    cr_assert_eq(n, 3, "80 %%, warning... got %d", n);
    cr_assert_eq(e[0].type, CG_EVENT_THRESHOLD_CROSSED);
    cr_assert_eq(e[1].type, CG_EVENT_THRESHOLD_CROSSED);
    cr_assert_eq(e[2].type, CG_EVENT_WARNING);
}

Test(budget_events, no_budget_or_no_backpressure)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    struct cg_budget_level b = lvl(1000, 0, 0), a = lvl(1000, 990, 0);
    b.has_budget = a.has_budget = false;
    cr_assert_eq(events(b, a, e), 1);
    b = lvl(1000, 0, 0);
    a = lvl(1000, 990, 0);
    b.backpressure_disabled = a.backpressure_disabled = true;
    cr_assert_eq(events(b, a, e), 2, "usage and warning, no tiers");
    cr_assert_eq(e[1].type, CG_EVENT_WARNING);
    cr_assert_eq(e[1].delay_ms, 0);
}

Test(budget_events, custom_tiers)
{
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    struct cg_budget_level b = lvl(100, 0, 0), a = lvl(100, 60, 0);
    b.ntiers = a.ntiers = 1;
    b.tiers[0] = a.tiers[0] = (struct cg_tier){0.5, 20};
    cr_assert_eq(events(b, a, e), 2);
    cr_assert(fabs(e[1].threshold_ratio - 0.5) < 1e-9 && e[1].delay_ms == 20);
}

Test(budget_events, filterable_types)
{
    cr_assert(!cg_event_type_filterable(0));
    cr_assert(!cg_event_type_filterable(CG_EVENT_SNAPSHOT));
    cr_assert(!cg_event_type_filterable(CG_EVENT_HEARTBEAT));
    cr_assert(cg_event_type_filterable(CG_EVENT_USAGE_CHANGED));
    cr_assert(cg_event_type_filterable(CG_EVENT_RESERVATION_EXPIRED));
    cr_assert(cg_event_type_filterable(CG_EVENT_OVERRUN));
    cr_assert(cg_event_type_filterable(CG_EVENT_FORECAST_EXHAUSTION));
    cr_assert(!cg_event_type_filterable(15));
}

Test(budget_events, an_allocation_alone_is_a_usage_change_and_crosses)
{
    /* A child's SetBudget with allocate_from_parent moves only the parent's allocated
     * tokens: 50 % -> 85 % of the parent. */
    struct cg_level_event e[CG_LEVEL_EVENTS_MAX];
    struct cg_budget_level b = lvl(1000, 500, 0), a = lvl(1000, 500, 0);
    a.allocated_tokens = 350;
    int n = events(b, a, e);
    cr_assert_eq(n, 4);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
    cr_assert_eq(e[1].type, CG_EVENT_THRESHOLD_CROSSED);
    cr_assert(fabs(e[1].threshold_ratio - 0.80) < 1e-9 && !e[1].falling);
    cr_assert_eq(e[2].type, CG_EVENT_THRESHOLD_CROSSED);
    cr_assert(fabs(e[2].threshold_ratio - 0.85) < 1e-9);
    cr_assert_eq(e[3].type, CG_EVENT_WARNING);
    /* The share returned (CloseScope of the child): falling crossings, descending. */
    n = events(a, b, e);
    cr_assert_eq(n, 3);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
    cr_assert(e[1].falling && fabs(e[1].threshold_ratio - 0.85) < 1e-9);
    cr_assert(e[2].falling && fabs(e[2].threshold_ratio - 0.80) < 1e-9);
    /* A small move of the allocation crossing nothing is still a usage change. */
    struct cg_budget_level c = a, d = a;
    c.allocated_tokens = 100; /* 60 % -> 59 % */
    d.allocated_tokens = 90;
    n = events(c, d, e);
    cr_assert_eq(n, 1);
    cr_assert_eq(e[0].type, CG_EVENT_USAGE_CHANGED);
}

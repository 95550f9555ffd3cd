/* test_budget_alloc.c - allocation from the parent (allocate_from_parent) in the budget
 * decision engine: shares, what each level judges, saturation and overrun. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "core/budget.h"
#include "core/budget_events.h"

#define EPS 1e-12

static struct cg_budget_level level_of(cg_level level, int64_t limit, int64_t used,
                                       int64_t reserved, int64_t allocated, bool allocated_flag)
{
    return (struct cg_budget_level){
        .level = level,
        .has_budget = true,
        .mode = CG_MODE_HARD,
        .limit_tokens = limit,
        .warning_ratio = 0.8,
        .backpressure_disabled = true,
        .used_tokens = used,
        .reserved_tokens = reserved,
        .allocated_tokens = allocated,
        .allocated = allocated_flag,
    };
}

Test(budget_alloc, share_is_limit_less_used_and_reserved, .timeout = 10)
{
    struct cg_budget_level l = level_of(CG_LEVEL_TASK, 400, 100, 50, 0, true);
    cr_assert_eq(cg_budget_share(&l), 250);
    l.allocated = false;
    cr_assert_eq(cg_budget_share(&l), 0, "not allocated: no share");
    l.allocated = true;
    l.closed = true;
    cr_assert_eq(cg_budget_share(&l), 0, "a closed scope gave its share back");
    l.closed = false;
    l.has_budget = false;
    cr_assert_eq(cg_budget_share(&l), 0);
    cr_assert_eq(cg_budget_share(NULL), 0);
}

Test(budget_alloc, overrun_and_saturation_leave_no_share, .timeout = 10)
{
    struct cg_budget_level l = level_of(CG_LEVEL_TASK, 400, 500, 0, 0, true);
    cr_assert_eq(cg_budget_share(&l), 0, "over its limit: share 0, not negative");
    l = level_of(CG_LEVEL_TASK, 400, INT64_MAX, INT64_MAX, 0, true);
    cr_assert_eq(cg_budget_share(&l), 0, "used + reserved saturates instead of wrapping");
    l = level_of(CG_LEVEL_TASK, 400, -5, -7, 0, true);
    cr_assert_eq(cg_budget_share(&l), 400, "negative counters count as 0");
    /* The share counts from the limit without approved extensions when one is given. */
    l = level_of(CG_LEVEL_TASK, 900, 100, 0, 0, true);
    l.share_limit_tokens = 400;
    cr_assert_eq(cg_budget_share(&l), 300);
}

Test(budget_alloc, parent_counts_allocated_and_judges_only_what_the_share_does_not_cover,
     .timeout = 10)
{
    /* Session 1000: 100 used, 0 reserved, 700 allocated (the task's share 300 + a sibling's
     * 400). The task (allocated, limit 400, used 100) has share 300. */
    struct cg_budget_level path[2] = {
        level_of(CG_LEVEL_SESSION, 1000, 100, 0, 700, false),
        level_of(CG_LEVEL_TASK, 400, 100, 0, 0, true),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 300, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING, "the whole share: allowed (task at 100%%)");
    cr_assert_eq(r.levels[0].requested_tokens, 0, "covered by the share");
    cr_assert_eq(r.levels[1].requested_tokens, 300);
    cr_assert_float_eq(r.levels[0].usage_ratio, 0.8, EPS);
    cr_assert_float_eq(r.levels[0].projected_ratio, 0.8, EPS);
    cr_assert_eq(r.levels[0].remaining_tokens, 200);
    cr_assert_eq(r.available_tokens, 300, "the task's 300, the session's 200 + 300");

    cg_budget_decide(path, 2, 301, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert(r.levels[1].reasons & CG_REASON_TOKEN_LIMIT);
    cr_assert_eq(r.levels[0].requested_tokens, 1);
    cr_assert_eq(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT, 0u, "the session has 200 free");

    /* A task whose limit exceeds what it has left at the session (siblings took it): the
     * session refuses past the share plus its free part. */
    path[1].limit_tokens = 1000;
    path[1].share_limit_tokens = 400;
    cg_budget_decide(path, 2, 501, 0, &r);
    cr_assert_eq(r.levels[0].requested_tokens, 201);
    cr_assert(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.available_tokens, 500);
}

Test(budget_alloc, unallocated_sibling_sees_only_the_free_part, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        level_of(CG_LEVEL_SESSION, 1000, 0, 0, 700, false),
        level_of(CG_LEVEL_TASK, 1000, 0, 0, 0, false),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 300, 0, &r);
    cr_assert_neq(r.decision, CG_DECISION_DENY);
    cg_budget_decide(path, 2, 301, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].requested_tokens, 301);
    cr_assert(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT);
    cr_assert_eq(r.available_tokens, 300);
}

Test(budget_alloc, only_the_direct_childs_share_counts, .timeout = 10)
{
    /* tenant <- session (allocated, share 500) <- task (allocated, share 100) <- agent. */
    struct cg_budget_level path[4] = {
        level_of(CG_LEVEL_TENANT, 10000, 0, 0, 500, false),
        level_of(CG_LEVEL_SESSION, 500, 0, 0, 100, true),
        level_of(CG_LEVEL_TASK, 100, 0, 0, 0, true),
        (struct cg_budget_level){.level = CG_LEVEL_AGENT}, /* counts usage only */
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 4, 150, 0, &r);
    cr_assert_eq(r.levels[3].requested_tokens, 150);
    cr_assert_eq(r.levels[2].requested_tokens, 150, "the agent is not allocated");
    cr_assert_eq(r.levels[1].requested_tokens, 50, "the task's share covers 100");
    cr_assert_eq(r.levels[0].requested_tokens, 0, "the session's share covers all 150");
    cr_assert_eq(r.decision, CG_DECISION_DENY, "the task's own limit is 100");
    cr_assert_eq(r.available_tokens, 100);
}

Test(budget_alloc, a_closed_or_over_child_covers_nothing, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        level_of(CG_LEVEL_SESSION, 1000, 500, 0, 0, false),
        level_of(CG_LEVEL_TASK, 400, 500, 0, 0, true), /* overrun: share 0 */
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 10, 0, &r);
    cr_assert_eq(r.levels[0].requested_tokens, 10);
    path[1] = level_of(CG_LEVEL_TASK, 400, 0, 0, 0, true);
    path[1].closed = true;
    cg_budget_decide(path, 2, 10, 0, &r);
    cr_assert_eq(r.levels[0].requested_tokens, 10);
    cr_assert_eq(r.decision, CG_DECISION_DENY, "closed");
}

Test(budget_alloc, huge_values_saturate, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        level_of(CG_LEVEL_SESSION, CG_LIMIT_MAX, INT64_MAX, INT64_MAX, INT64_MAX, false),
        level_of(CG_LEVEL_TASK, CG_LIMIT_MAX, 0, 0, 0, true),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, INT64_MAX, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY, "nothing wraps into an ALLOW");
    cr_assert_eq(r.levels[0].requested_tokens, INT64_MAX - CG_LIMIT_MAX);
    cr_assert_eq(r.available_tokens, 0);
}

Test(budget_alloc, events_count_the_allocation_in_the_ratio, .timeout = 10)
{
    struct cg_budget_level before = level_of(CG_LEVEL_SESSION, 1000, 0, 0, 0, false);
    before.backpressure_disabled = false;
    struct cg_budget_level after = before;
    after.allocated_tokens = 850; /* a child was given 850 */
    after.reserved_tokens = 150;
    struct cg_level_event ev[CG_LEVEL_EVENTS_MAX];
    int n = cg_budget_level_events(&before, &after, ev);
    int tiers = 0, warnings = 0, exhausted = 0;
    for (int i = 0; i < n; i++) {
        tiers += ev[i].type == CG_EVENT_THRESHOLD_CROSSED;
        warnings += ev[i].type == CG_EVENT_WARNING;
        exhausted += ev[i].type == CG_EVENT_EXHAUSTED;
    }
    cr_assert_eq(tiers, 4, "0.80, 0.85, 0.90 and 0.95 crossed");
    cr_assert_eq(warnings, 1);
    cr_assert_eq(exhausted, 1, "used + reserved + allocated reached the limit");
    cr_assert_eq(cg_budget_level_delay(&after), 1500);
}

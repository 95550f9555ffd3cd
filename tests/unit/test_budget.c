/* test_budget.c - the budget decision engine: verdicts, backpressure, settings, nesting. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/budget.h"

#define EPS 1e-12

/* A level with a budget: warning at 0.8, the default tiers, no cost limit. */
static struct cg_budget_level budget(cg_level level, cg_budget_mode mode, int64_t limit,
                                     int64_t used, int64_t reserved)
{
    return (struct cg_budget_level){
        .level = level,
        .has_budget = true,
        .mode = mode,
        .limit_tokens = limit,
        .warning_ratio = 0.8,
        .used_tokens = used,
        .reserved_tokens = reserved,
    };
}

static struct cg_budget_level hard(int64_t limit, int64_t used, int64_t reserved)
{
    return budget(CG_LEVEL_AGENT, CG_MODE_HARD, limit, used, reserved);
}

/* A level that only counts usage. */
static struct cg_budget_level unbudgeted(cg_level level, int64_t used)
{
    return (struct cg_budget_level){.level = level, .used_tokens = used};
}

static struct cg_budget_result decide1(struct cg_budget_level l, int64_t tokens)
{
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, tokens, 0, &r);
    return r;
}

/* ------------------------------------------------------------- token limits ---------- */

Test(budget, hard_limit_allows_exactly_at_the_limit, .timeout = 10)
{
    struct cg_budget_result r = decide1(hard(1000, 600, 200), 200);
    cr_assert_neq(r.decision, CG_DECISION_DENY, "projected == limit is within the limit");
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT, 0u);
    cr_assert(r.levels[0].reasons & CG_REASON_WARNING);
    cr_assert_float_eq(r.levels[0].projected_ratio, 1.0, EPS);
    cr_assert_float_eq(r.levels[0].usage_ratio, 0.8, EPS);
    cr_assert_eq(r.levels[0].remaining_tokens, 200);
    cr_assert_eq(r.available_tokens, 200);
    cr_assert_eq(r.delay_ms, 1500);
}

Test(budget, hard_limit_refuses_one_token_over, .timeout = 10)
{
    struct cg_budget_result r = decide1(hard(1000, 600, 200), 201);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_DENY);
    cr_assert(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT);
    cr_assert_eq(r.levels[0].reasons & CG_REASON_WARNING, 0u, "the limit bit says more");
    cr_assert_eq(r.levels[0].reasons & CG_REASON_COST_LIMIT, 0u);
    cr_assert_eq(r.delay_ms, 0, "nothing to slow down when denied");
    cr_assert_eq(r.available_tokens, 200);
    cr_assert_float_eq(r.levels[0].projected_ratio, 1.001, EPS);
}

Test(budget, reserved_tokens_count_like_used_ones, .timeout = 10)
{
    cr_assert_eq(decide1(hard(1000, 0, 1000), 1).decision, CG_DECISION_DENY);
    cr_assert_eq(decide1(hard(1000, 1000, 0), 1).decision, CG_DECISION_DENY);
    cr_assert_eq(decide1(hard(1000, 500, 500), 0).decision, CG_DECISION_WARNING);
    cr_assert_eq(decide1(hard(1000, 0, 0), 1000).decision, CG_DECISION_WARNING);
    cr_assert_eq(decide1(hard(1000, 0, 0), 1001).decision, CG_DECISION_DENY);
}

Test(budget, below_the_warning_ratio_allows_without_reasons, .timeout = 10)
{
    struct cg_budget_result r = decide1(hard(1000, 700, 0), 99);
    cr_assert_eq(r.decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.levels[0].reasons, 0u);
    cr_assert_eq(r.delay_ms, 0);
    cr_assert_eq(r.levels[0].delay_ms, 0);
    cr_assert_float_eq(r.levels[0].usage_ratio, 0.7, EPS);
    cr_assert_float_eq(r.levels[0].projected_ratio, 0.799, EPS);
    cr_assert_eq(r.tightest, 0);
    cr_assert_float_eq(r.tightest_ratio, 0.799, EPS);
    cr_assert_eq(r.available_tokens, 300);
}

Test(budget, warns_at_exactly_the_warning_ratio, .timeout = 10)
{
    struct cg_budget_result r = decide1(hard(1000, 700, 0), 100);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_WARNING | CG_REASON_BACKPRESSURE);

    struct cg_budget_level l = hard(1000, 0, 0);
    l.warning_ratio = 0.5;
    l.backpressure_disabled = true;
    cr_assert_eq(decide1(l, 499).decision, CG_DECISION_ALLOW);
    r = decide1(l, 500);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_WARNING);

    l.warning_ratio = 1.0;
    cr_assert_eq(decide1(l, 999).decision, CG_DECISION_ALLOW);
    cr_assert_eq(decide1(l, 1000).decision, CG_DECISION_WARNING, "w = 1 warns at the limit");
}

Test(budget, warning_ratio_boundary_holds_for_large_limits, .timeout = 10)
{
    struct cg_budget_level l = hard(CG_LIMIT_MAX, 0, 0);
    l.backpressure_disabled = true;
    cr_assert_eq(decide1(l, CG_LIMIT_MAX / 10 * 8 - 1).decision, CG_DECISION_ALLOW);
    cr_assert_eq(decide1(l, CG_LIMIT_MAX / 10 * 8).decision, CG_DECISION_WARNING);
    cr_assert_eq(decide1(l, CG_LIMIT_MAX).decision, CG_DECISION_WARNING);
    cr_assert_eq(decide1(l, CG_LIMIT_MAX + 1).decision, CG_DECISION_DENY);
}

Test(budget, remaining_tokens_go_negative_when_already_over, .timeout = 10)
{
    struct cg_budget_level l = budget(CG_LEVEL_TASK, CG_MODE_SOFT, 1000, 1100, 100);
    struct cg_budget_result r = decide1(l, 0);
    cr_assert_eq(r.levels[0].remaining_tokens, -200);
    cr_assert_float_eq(r.levels[0].usage_ratio, 1.2, EPS);
    cr_assert_eq(r.available_tokens, INT64_MAX, "SOFT levels do not bound what is available");

    l.mode = CG_MODE_HARD;
    r = decide1(l, 0);
    cr_assert_eq(r.decision, CG_DECISION_DENY, "already over: even 0 tokens are refused");
    cr_assert_eq(r.levels[0].remaining_tokens, -200);
    cr_assert_eq(r.available_tokens, 0);
}

/* ------------------------------------------------------------------- modes ---------- */

Test(budget, soft_mode_over_the_limit_warns, .timeout = 10)
{
    struct cg_budget_level l = budget(CG_LEVEL_SESSION, CG_MODE_SOFT, 1000, 900, 0);
    struct cg_budget_result r = decide1(l, 600);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_TOKEN_LIMIT | CG_REASON_BACKPRESSURE);
    cr_assert_float_eq(r.levels[0].projected_ratio, 1.5, EPS);
    cr_assert_eq(r.delay_ms, 1500, "a SOFT overspend is slowed down, not refused");
    cr_assert_eq(r.available_tokens, INT64_MAX);
}

Test(budget, approval_mode_over_the_limit_requires_approval, .timeout = 10)
{
    struct cg_budget_level l = budget(CG_LEVEL_TASK, CG_MODE_APPROVAL, 1000, 900, 0);
    struct cg_budget_result r = decide1(l, 101);
    cr_assert_eq(r.decision, CG_DECISION_REQUIRE_APPROVAL);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_TOKEN_LIMIT);
    cr_assert_eq(r.levels[0].delay_ms, 0, "a level waiting for approval slows nothing down");
    cr_assert_eq(r.delay_ms, 0, "nothing to slow down while waiting for approval");

    r = decide1(l, 100);
    cr_assert_eq(r.decision, CG_DECISION_WARNING, "at the limit: no approval needed");
    cr_assert_eq(r.delay_ms, 1500);
}

Test(budget, unknown_mode_over_the_limit_fails_closed, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 0, 0);
    l.mode = (cg_budget_mode)0;
    cr_assert_eq(decide1(l, 1001).decision, CG_DECISION_DENY);
    l.mode = (cg_budget_mode)42;
    cr_assert_eq(decide1(l, 1001).decision, CG_DECISION_DENY);
    cr_assert_eq(decide1(l, 10).decision, CG_DECISION_ALLOW);
}

/* ------------------------------------------------------------- backpressure ---------- */

Test(budget, default_tiers_apply_from_each_threshold, .timeout = 10)
{
    struct {
        int64_t projected;
        uint32_t delay;
    } cases[] = {
        {0, 0},     {799, 0},   {800, 50},  {849, 50},   {850, 300},
        {899, 300}, {900, 750}, {949, 750}, {950, 1500}, {1000, 1500},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cg_budget_result r = decide1(hard(1000, 0, 0), cases[i].projected);
        cr_expect_eq(r.levels[0].delay_ms, cases[i].delay, "projected %lld: delay %u",
                     (long long)cases[i].projected, r.levels[0].delay_ms);
        cr_expect_eq(r.delay_ms, cases[i].delay, "projected %lld", (long long)cases[i].projected);
        cr_expect_eq(!!(r.levels[0].reasons & CG_REASON_BACKPRESSURE), cases[i].delay > 0,
                     "projected %lld", (long long)cases[i].projected);
    }
}

Test(budget, default_tier_boundaries_hold_for_other_limits, .timeout = 10)
{
    /* 0.85 * 20 = 17 and 0.95 * 1e15 are exact; the ratio must land on the tier. */
    cr_assert_eq(decide1(hard(20, 0, 0), 17).delay_ms, 300);
    cr_assert_eq(decide1(hard(20, 0, 0), 16).delay_ms, 50);
    cr_assert_eq(decide1(hard(20, 0, 0), 19).delay_ms, 1500);
    cr_assert_eq(decide1(hard(CG_LIMIT_MAX, 0, 0), CG_LIMIT_MAX / 100 * 95).delay_ms, 1500);
    cr_assert_eq(decide1(hard(CG_LIMIT_MAX, 0, 0), CG_LIMIT_MAX / 100 * 95 - 1).delay_ms, 750);
    cr_assert_eq(decide1(hard(CG_LIMIT_MAX, 0, 0), CG_LIMIT_MAX / 100 * 90).delay_ms, 750);
}

Test(budget, default_tiers_are_the_documented_ones, .timeout = 10)
{
    struct cg_tier tiers[CG_TIERS_MAX];
    int n = -1;
    cg_budget_default_tiers(tiers, &n);
    cr_assert_eq(n, 4);
    double ratios[] = {0.80, 0.85, 0.90, 0.95};
    uint32_t delays[] = {50, 300, 750, 1500};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(tiers[i].ratio, ratios[i]);
        cr_expect_eq(tiers[i].delay_ms, delays[i]);
    }
    struct cg_budget_level l = hard(100, 0, 0);
    cr_assert_eq(cg_budget_check_settings(
                     &(struct cg_budget_level){.limit_tokens = 1,
                                               .mode = CG_MODE_HARD,
                                               .warning_ratio = 0.8,
                                               .tiers = {tiers[0], tiers[1], tiers[2], tiers[3]},
                                               .ntiers = n},
                     NULL),
                 CG_OK, "the defaults are valid settings");
    /* Explicit default tiers answer like ntiers == 0. */
    memcpy(l.tiers, tiers, sizeof tiers);
    l.ntiers = n;
    for (int64_t t = 0; t <= 120; t++)
        cr_expect_eq(decide1(l, t).delay_ms, decide1(hard(100, 0, 0), t).delay_ms, "t %lld",
                     (long long)t);
}

Test(budget, custom_tiers_replace_the_defaults, .timeout = 10)
{
    struct cg_budget_level l = budget(CG_LEVEL_TASK, CG_MODE_SOFT, 1000, 0, 0);
    l.tiers[0] = (struct cg_tier){0.5, 10};
    l.tiers[1] = (struct cg_tier){0.7, 20};
    l.tiers[2] = (struct cg_tier){2.0, 5000};
    l.ntiers = 3;
    struct {
        int64_t projected;
        uint32_t delay;
    } cases[] = {
        {499, 0},  {500, 10},  {699, 10},    {700, 20},
        {950, 20}, {1999, 20}, {2000, 5000}, {9000, 5000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cg_budget_result r = decide1(l, cases[i].projected);
        cr_expect_eq(r.delay_ms, cases[i].delay, "projected %lld: delay %u",
                     (long long)cases[i].projected, r.delay_ms);
    }
    /* One tier only. */
    l.tiers[0] = (struct cg_tier){0.9, 7};
    l.ntiers = 1;
    cr_assert_eq(decide1(l, 899).delay_ms, 0);
    cr_assert_eq(decide1(l, 900).delay_ms, 7);
    cr_assert_eq(decide1(l, 5000).delay_ms, 7);
}

Test(budget, a_zero_delay_tier_gives_no_backpressure_reason, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 0, 0);
    l.tiers[0] = (struct cg_tier){0.5, 0};
    l.tiers[1] = (struct cg_tier){0.9, 100};
    l.ntiers = 2;
    struct cg_budget_result r = decide1(l, 600);
    cr_assert_eq(r.delay_ms, 0);
    cr_assert_eq(r.levels[0].reasons, 0u);
    r = decide1(l, 900);
    cr_assert_eq(r.delay_ms, 100);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_WARNING | CG_REASON_BACKPRESSURE);
}

Test(budget, disabled_backpressure_never_delays, .timeout = 10)
{
    struct cg_budget_level l = budget(CG_LEVEL_AGENT, CG_MODE_SOFT, 1000, 0, 0);
    l.backpressure_disabled = true;
    for (int64_t t = 0; t <= 3000; t += 50) {
        struct cg_budget_result r = decide1(l, t);
        cr_expect_eq(r.delay_ms, 0, "t %lld", (long long)t);
        cr_expect_eq(r.levels[0].delay_ms, 0);
        cr_expect_eq(r.levels[0].reasons & CG_REASON_BACKPRESSURE, 0u);
    }
    /* Even with tiers set. */
    l.tiers[0] = (struct cg_tier){0.1, 999};
    l.ntiers = 1;
    cr_assert_eq(decide1(l, 990).delay_ms, 0);
    cr_assert_eq(decide1(l, 990).decision, CG_DECISION_WARNING);
}

Test(budget, deny_elsewhere_on_the_path_suppresses_the_delay, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 100000, 99990, 0),
        budget(CG_LEVEL_AGENT, CG_MODE_SOFT, 1000, 880, 0),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 20, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[1].decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[1].delay_ms, 750, "levels keep their tier delays");
    cr_assert_eq(r.delay_ms, 0);

    /* The same with an APPROVAL tenant. */
    path[0].mode = CG_MODE_APPROVAL;
    cg_budget_decide(path, 2, 20, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_REQUIRE_APPROVAL);
    cr_assert_eq(r.delay_ms, 0);

    /* And allowed when the tenant has room. */
    path[0].used_tokens = 0;
    cg_budget_decide(path, 2, 20, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.tightest, 1);
    cr_assert_eq(r.delay_ms, 750);
}

/* ------------------------------------------------------------------ the path ---------- */

Test(budget, the_path_answers_with_its_strictest_level, .timeout = 10)
{
    struct cg_budget_level path[4] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 1000000, 0, 0),   /* ALLOW */
        budget(CG_LEVEL_SESSION, CG_MODE_SOFT, 10000, 9000, 0), /* WARNING */
        budget(CG_LEVEL_TASK, CG_MODE_APPROVAL, 5000, 4950, 0), /* APPROVAL */
        budget(CG_LEVEL_AGENT, CG_MODE_HARD, 1000, 100, 0),     /* ALLOW */
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 4, 100, 0, &r);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.levels[1].decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[2].decision, CG_DECISION_REQUIRE_APPROVAL);
    cr_assert_eq(r.levels[3].decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.decision, CG_DECISION_REQUIRE_APPROVAL);

    path[3].used_tokens = 950;
    cg_budget_decide(path, 4, 100, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY, "DENY beats REQUIRE_APPROVAL");

    path[2].used_tokens = 0;
    path[3].used_tokens = 0;
    cg_budget_decide(path, 4, 100, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING, "WARNING beats ALLOW");
}

Test(budget, levels_past_n_are_left_zeroed, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 1000, 500, 0),
        budget(CG_LEVEL_SESSION, CG_MODE_HARD, 1000, 900, 0),
    };
    struct cg_budget_result r;
    memset(&r, 0xab, sizeof r);
    cg_budget_decide(path, 2, 10, 0, &r);
    struct cg_level_verdict zero;
    memset(&zero, 0, sizeof zero);
    for (int i = 2; i < CG_PATH_MAX; i++)
        cr_assert_eq(memcmp(&r.levels[i], &zero, sizeof zero), 0, "level %d", i);
}

Test(budget, tightest_is_the_highest_projected_ratio, .timeout = 10)
{
    struct cg_budget_level path[3] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 100000, 85000, 0), /* 0.851 */
        budget(CG_LEVEL_SESSION, CG_MODE_HARD, 10000, 9400, 0),  /* 0.95 */
        budget(CG_LEVEL_TASK, CG_MODE_HARD, 5000, 100, 0),       /* 0.04 */
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 3, 100, 0, &r);
    cr_assert_eq(r.tightest, 1);
    cr_assert_float_eq(r.tightest_ratio, 0.95, EPS);
    cr_assert_eq(r.delay_ms, 1500);
    cr_assert_eq(r.levels[0].delay_ms, 300);
    cr_assert_eq(r.levels[2].delay_ms, 0);
    cr_assert_eq(r.available_tokens, 600);
}

Test(budget, tightest_tie_goes_to_the_deeper_level, .timeout = 10)
{
    struct cg_budget_level path[3] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 10000, 8400, 0),
        unbudgeted(CG_LEVEL_SESSION, 777),
        budget(CG_LEVEL_TASK, CG_MODE_HARD, 1000, 750, 0),
    };
    /* Same ratio 0.85; the task has its own tier there, the tenant the default 300 ms. */
    path[2].tiers[0] = (struct cg_tier){0.85, 9};
    path[2].ntiers = 1;
    struct cg_budget_result r;
    cg_budget_decide(path, 3, 100, 0, &r);
    cr_assert_float_eq(r.levels[0].projected_ratio, r.levels[2].projected_ratio, 0.0);
    cr_assert_eq(r.tightest, 2);
    cr_assert_eq(r.delay_ms, 9, "the tightest level's delay, not the largest one");
    cr_assert_eq(r.levels[0].delay_ms, 300);
}

Test(budget, the_tightest_levels_delay_wins_even_when_smaller, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 1000, 891, 0), /* 0.9 -> 750 */
        budget(CG_LEVEL_AGENT, CG_MODE_HARD, 100, 90, 0),    /* 0.99 -> custom 1 ms */
    };
    path[1].tiers[0] = (struct cg_tier){0.99, 1};
    path[1].ntiers = 1;
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 9, 0, &r);
    cr_assert_eq(r.tightest, 1);
    cr_assert_eq(r.delay_ms, 1);
    /* A tightest level with backpressure disabled means no delay at all. */
    path[1].backpressure_disabled = true;
    cg_budget_decide(path, 2, 9, 0, &r);
    cr_assert_eq(r.tightest, 1);
    cr_assert_eq(r.delay_ms, 0);
    cr_assert_eq(r.levels[0].delay_ms, 750);
}

Test(budget, levels_without_a_budget_only_count, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        unbudgeted(CG_LEVEL_TENANT, INT64_MAX),
        unbudgeted(CG_LEVEL_SESSION, 5),
    };
    path[0].limit_cost_micros = 1; /* ignored without a budget */
    path[0].used_cost_micros = 99;
    struct cg_budget_result r;
    cg_budget_decide(path, 2, INT64_MAX, INT64_MAX, &r);
    cr_assert_eq(r.decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.delay_ms, 0);
    cr_assert_eq(r.tightest, -1);
    cr_assert_float_eq(r.tightest_ratio, 0.0, 0.0);
    cr_assert_eq(r.available_tokens, INT64_MAX);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(r.levels[i].decision, CG_DECISION_ALLOW);
        cr_assert_eq(r.levels[i].reasons, 0u);
        cr_assert_float_eq(r.levels[i].usage_ratio, 0.0, 0.0);
        cr_assert_float_eq(r.levels[i].projected_ratio, 0.0, 0.0);
        cr_assert_eq(r.levels[i].remaining_tokens, 0);
        cr_assert_eq(r.levels[i].delay_ms, 0);
    }
}

Test(budget, an_unbudgeted_level_does_not_hide_a_budgeted_one, .timeout = 10)
{
    struct cg_budget_level path[3] = {
        unbudgeted(CG_LEVEL_TENANT, 0),
        budget(CG_LEVEL_SESSION, CG_MODE_HARD, 1000, 900, 0),
        unbudgeted(CG_LEVEL_TASK, 0),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 3, 101, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.tightest, 1);
    cr_assert_eq(r.available_tokens, 100);
    cg_budget_decide(path, 3, 60, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.delay_ms, 1500);
}

/* --------------------------------------------------------------- closed scopes ---------- */

Test(budget, a_closed_scope_denies_whatever_its_budget, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 0, 0);
    l.closed = true;
    struct cg_budget_result r = decide1(l, 1);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_CLOSED);
    cr_assert_eq(r.delay_ms, 0);
    cr_assert_eq(r.available_tokens, INT64_MAX, "a closed level does not bound availability");
    cr_assert_eq(r.levels[0].remaining_tokens, 1000, "the facts are still reported");

    l.mode = CG_MODE_SOFT;
    cr_assert_eq(decide1(l, 0).decision, CG_DECISION_DENY);
    l.mode = CG_MODE_APPROVAL;
    cr_assert_eq(decide1(l, 0).decision, CG_DECISION_DENY);

    /* Over the limit too: both reasons. */
    l.used_tokens = 2000;
    r = decide1(l, 0);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_DENY);
    cr_assert(r.levels[0].reasons & CG_REASON_CLOSED);
    cr_assert(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT);

    struct cg_budget_level u = unbudgeted(CG_LEVEL_TASK, 3);
    u.closed = true;
    r = decide1(u, 0);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_CLOSED);
    cr_assert_eq(r.tightest, -1);
    cr_assert_float_eq(r.levels[0].projected_ratio, 0.0, 0.0);
}

Test(budget, a_closed_ancestor_denies_the_path, .timeout = 10)
{
    struct cg_budget_level path[3] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 1000000, 0, 0),
        budget(CG_LEVEL_TASK, CG_MODE_SOFT, 10000, 0, 0),
        budget(CG_LEVEL_AGENT, CG_MODE_HARD, 1000, 0, 0),
    };
    path[1].closed = true;
    struct cg_budget_result r;
    cg_budget_decide(path, 3, 1, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.levels[1].decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[2].decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.available_tokens, 1000);
}

/* ----------------------------------------------------------------- cost limits ---------- */

Test(budget, cost_limit_refuses_alone, .timeout = 10)
{
    struct cg_budget_level l = hard(1000000, 0, 0);
    l.limit_cost_micros = 5000;
    l.used_cost_micros = 3000;
    l.reserved_cost_micros = 1000;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, 10, 1000, &r);
    cr_assert_eq(r.decision, CG_DECISION_ALLOW, "exactly at the cost limit is allowed");
    cr_assert_eq(r.levels[0].reasons, 0u);

    cg_budget_decide(&l, 1, 10, 1001, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_COST_LIMIT);
    cr_assert_float_eq(r.levels[0].projected_ratio, 10.0 / 1000000.0, EPS,
                       "ratios stay token ratios");
    cr_assert_eq(r.available_tokens, 1000000, "available tokens count tokens only");

    l.mode = CG_MODE_SOFT;
    cg_budget_decide(&l, 1, 10, 1001, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_COST_LIMIT);

    l.mode = CG_MODE_APPROVAL;
    cg_budget_decide(&l, 1, 10, 1001, &r);
    cr_assert_eq(r.decision, CG_DECISION_REQUIRE_APPROVAL);
}

Test(budget, cost_and_token_limits_both_report, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 990, 0);
    l.limit_cost_micros = 100;
    l.used_cost_micros = 100;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, 11, 1, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons & (CG_REASON_TOKEN_LIMIT | CG_REASON_COST_LIMIT),
                 CG_REASON_TOKEN_LIMIT | CG_REASON_COST_LIMIT);
    /* Already at the cost limit: an unpriced request still fits. */
    cg_budget_decide(&l, 1, 10, 0, &r);
    cr_assert_eq(r.levels[0].reasons & CG_REASON_COST_LIMIT, 0u);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
}

Test(budget, zero_cost_limit_means_no_cost_limit, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 0, 0);
    l.used_cost_micros = INT64_MAX;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, 10, INT64_MAX, &r);
    cr_assert_eq(r.decision, CG_DECISION_ALLOW);
    cr_assert_eq(r.levels[0].reasons, 0u);
}

/* ------------------------------------------------------------ available tokens ---------- */

Test(budget, available_tokens_is_the_least_hard_remaining, .timeout = 10)
{
    struct cg_budget_level path[4] = {
        budget(CG_LEVEL_TENANT, CG_MODE_SOFT, 1000, 990, 0),    /* 10, SOFT */
        budget(CG_LEVEL_SESSION, CG_MODE_HARD, 1000, 300, 200), /* 500 */
        budget(CG_LEVEL_TASK, CG_MODE_APPROVAL, 1000, 995, 0),  /* 5, APPROVAL */
        budget(CG_LEVEL_AGENT, CG_MODE_HARD, 1000, 600, 100),   /* 300 */
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 4, 0, 0, &r);
    cr_assert_eq(r.available_tokens, 300);
    cr_assert_eq(r.levels[0].remaining_tokens, 10);
    cr_assert_eq(r.levels[1].remaining_tokens, 500);
    cr_assert_eq(r.levels[2].remaining_tokens, 5);
    cr_assert_eq(r.levels[3].remaining_tokens, 300);

    /* The request does not change what is available. */
    cg_budget_decide(path, 4, 250, 0, &r);
    cr_assert_eq(r.available_tokens, 300);

    /* A closed HARD level no longer bounds it; another HARD level does. */
    path[3].closed = true;
    cg_budget_decide(path, 4, 0, 0, &r);
    cr_assert_eq(r.available_tokens, 500);

    /* Without open HARD levels there is no bound. */
    path[1].mode = CG_MODE_SOFT;
    cg_budget_decide(path, 4, 0, 0, &r);
    cr_assert_eq(r.available_tokens, INT64_MAX);

    /* A HARD level over its limit gives 0, never a negative number. */
    path[1].mode = CG_MODE_HARD;
    path[1].used_tokens = 5000;
    cg_budget_decide(path, 4, 0, 0, &r);
    cr_assert_eq(r.available_tokens, 0);
    cr_assert_eq(r.levels[1].remaining_tokens, -4200);
}

/* ------------------------------------------------------ overflow and bad input ---------- */

Test(budget, a_huge_request_cannot_wrap_into_allow, .timeout = 10)
{
    int64_t huge[] = {INT64_MAX, INT64_MAX - 1, INT64_MAX / 2 + 1, CG_LIMIT_MAX + 1};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        struct cg_budget_level l = hard(CG_LIMIT_MAX, CG_LIMIT_MAX / 2, CG_LIMIT_MAX / 2 - 1);
        struct cg_budget_result r = decide1(l, huge[i]);
        cr_expect_eq(r.decision, CG_DECISION_DENY, "tokens %lld", (long long)huge[i]);
        cr_expect(r.levels[0].reasons & CG_REASON_TOKEN_LIMIT);
        cr_expect(isfinite(r.levels[0].projected_ratio) && r.levels[0].projected_ratio > 1);
        cr_expect_eq(r.available_tokens, 1);

        l = hard(1000, 0, 0);
        l.limit_cost_micros = 1000;
        cg_budget_decide(&l, 1, 1, huge[i], &r);
        cr_expect_eq(r.decision, CG_DECISION_DENY);
        cr_expect_eq(r.levels[0].reasons, CG_REASON_COST_LIMIT);
    }
}

Test(budget, huge_counters_saturate_instead_of_wrapping, .timeout = 10)
{
    struct cg_budget_level l = hard(CG_LIMIT_MAX, INT64_MAX, INT64_MAX);
    l.limit_cost_micros = CG_LIMIT_MAX;
    l.used_cost_micros = INT64_MAX;
    l.reserved_cost_micros = INT64_MAX;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, INT64_MAX, INT64_MAX, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons & (CG_REASON_TOKEN_LIMIT | CG_REASON_COST_LIMIT),
                 CG_REASON_TOKEN_LIMIT | CG_REASON_COST_LIMIT);
    cr_assert(r.levels[0].remaining_tokens < 0);
    cr_assert_eq(r.available_tokens, 0);
    cr_assert(isfinite(r.levels[0].usage_ratio) && r.levels[0].usage_ratio > 1);
    cr_assert(isfinite(r.tightest_ratio));

    l.mode = CG_MODE_SOFT;
    cg_budget_decide(&l, 1, INT64_MAX, INT64_MAX, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.delay_ms, 1500);
}

Test(budget, the_largest_limit_is_exact, .timeout = 10)
{
    struct cg_budget_level l = hard(CG_LIMIT_MAX, CG_LIMIT_MAX - 2, 0);
    cr_assert_eq(decide1(l, 2).decision, CG_DECISION_WARNING);
    cr_assert_eq(decide1(l, 3).decision, CG_DECISION_DENY);
    l.limit_cost_micros = CG_LIMIT_MAX;
    l.used_cost_micros = CG_LIMIT_MAX;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, 1, 0, &r);
    cr_assert_eq(r.levels[0].reasons & CG_REASON_COST_LIMIT, 0u);
    cg_budget_decide(&l, 1, 1, 1, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
}

Test(budget, negative_requests_count_as_zero, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, 1000, 0);
    l.limit_cost_micros = 10;
    l.used_cost_micros = 10;
    struct cg_budget_result r, zero;
    cg_budget_decide(&l, 1, 0, 0, &zero);
    int64_t negatives[] = {-1, -1000, INT64_MIN};
    for (size_t i = 0; i < sizeof negatives / sizeof negatives[0]; i++) {
        cg_budget_decide(&l, 1, negatives[i], negatives[i], &r);
        cr_expect_eq(r.decision, zero.decision);
        cr_expect_eq(r.decision, CG_DECISION_WARNING, "at the limit, not under it");
        cr_expect_eq(r.levels[0].projected_ratio, zero.levels[0].projected_ratio);
        cr_expect_eq(r.levels[0].reasons, zero.levels[0].reasons);
    }
    /* A negative request cannot buy room on a level that is already over. */
    l.used_tokens = 1001;
    cg_budget_decide(&l, 1, -500, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
}

Test(budget, negative_counters_count_as_zero, .timeout = 10)
{
    struct cg_budget_level l = hard(1000, -5000, INT64_MIN);
    l.limit_cost_micros = 10;
    l.used_cost_micros = INT64_MIN;
    l.reserved_cost_micros = -1;
    struct cg_budget_result r;
    cg_budget_decide(&l, 1, 1001, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY, "negative usage cannot make room");
    cg_budget_decide(&l, 1, 1000, 11, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.levels[0].reasons, CG_REASON_COST_LIMIT, "a refusing level has no delay");
    cg_budget_decide(&l, 1, 1000, 10, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(r.levels[0].remaining_tokens, 1000);
    cr_assert_float_eq(r.levels[0].usage_ratio, 0.0, 0.0);
}

Test(budget, a_malformed_path_is_refused_without_crashing, .timeout = 10)
{
    struct cg_budget_level path[CG_PATH_MAX + 1];
    for (int i = 0; i <= CG_PATH_MAX; i++)
        path[i] = hard(1000, 0, 0);
    struct cg_budget_result r;
    int bad_n[] = {0, -1, CG_PATH_MAX + 1, INT32_MIN};
    for (size_t i = 0; i < sizeof bad_n / sizeof bad_n[0]; i++) {
        cg_budget_decide(path, bad_n[i], 1, 0, &r);
        cr_expect_eq(r.decision, CG_DECISION_DENY, "n %d", bad_n[i]);
        cr_expect_eq(r.delay_ms, 0);
        cr_expect_eq(r.tightest, -1);
        cr_expect_eq(r.available_tokens, 0);
    }
    cg_budget_decide(NULL, 1, 1, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cg_budget_decide(path, 1, 1, 0, NULL); /* nothing to fill: must simply return */
    cg_budget_decide(path, CG_PATH_MAX, 1, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_ALLOW, "a full path is fine");
}

Test(budget, odd_levels_from_a_buggy_caller_do_not_crash, .timeout = 10)
{
    struct cg_budget_level l = hard(0, 0, 0); /* limit 0: nothing fits */
    struct cg_budget_result r = decide1(l, 1);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert(isfinite(r.levels[0].projected_ratio));
    r = decide1(l, 0);
    cr_assert_neq(r.decision, CG_DECISION_DENY);

    l = hard(1000, 0, 0);
    l.ntiers = 1000; /* only the first CG_TIERS_MAX are read */
    for (int i = 0; i < CG_TIERS_MAX; i++)
        l.tiers[i] = (struct cg_tier){0.1 * (i + 1), (uint32_t)(i + 1)};
    cr_assert_eq(decide1(l, 950).delay_ms, 8);
    l.ntiers = -3; /* means the defaults */
    cr_assert_eq(decide1(l, 950).delay_ms, 1500);
    l.ntiers = 2; /* descending: still the highest threshold reached */
    l.tiers[0] = (struct cg_tier){0.9, 90};
    l.tiers[1] = (struct cg_tier){0.5, 50};
    cr_assert_eq(decide1(l, 950).delay_ms, 90);
    cr_assert_eq(decide1(l, 600).delay_ms, 50);
    l.tiers[0].ratio = NAN;
    cr_assert_eq(decide1(l, 950).delay_ms, 50);
}

/* ------------------------------------------------------------------ level names ---------- */

Test(budget, level_names, .timeout = 10)
{
    cr_assert_str_eq(cg_level_name(CG_LEVEL_TENANT), "tenant");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_SESSION), "session");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_TASK), "task");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_AGENT), "agent");
    cr_assert_str_eq(cg_level_name((cg_level)0), "unknown level");
    cr_assert_str_eq(cg_level_name((cg_level)9), "unknown level");
}

/* ------------------------------------------------------------ settings checks ---------- */

static struct cg_budget_level good_settings(void)
{
    return (struct cg_budget_level){
        .level = CG_LEVEL_TASK,
        .has_budget = true,
        .mode = CG_MODE_HARD,
        .limit_tokens = 10000,
        .warning_ratio = 0.8,
    };
}

/* Expects settings to be refused with a message that starts with `prefix`. */
static void expect_refused(const struct cg_budget_level *s, const char *prefix, const char *what)
{
    struct cg_err err = {.code = CG_OK, .msg = "untouched"};
    cg_status st = cg_budget_check_settings(s, &err);
    cr_expect_eq(st, CG_INVALID_ARGUMENT, "%s: status %d", what, st);
    cr_expect_eq(err.code, CG_INVALID_ARGUMENT, "%s", what);
    cr_expect_eq(strncmp(err.msg, prefix, strlen(prefix)), 0, "%s: message \"%s\"", what, err.msg);
    cr_expect_eq(cg_budget_check_settings(s, NULL), CG_INVALID_ARGUMENT, "%s, err NULL", what);
}

static void expect_accepted(const struct cg_budget_level *s, const char *what)
{
    struct cg_err err = {.code = CG_OK, .msg = "untouched"};
    cr_expect_eq(cg_budget_check_settings(s, &err), CG_OK, "%s: \"%s\"", what, err.msg);
    cr_expect_str_eq(err.msg, "untouched", "%s: err left alone on success", what);
}

Test(budget, settings_accept_valid_budgets, .timeout = 10)
{
    struct cg_budget_level s = good_settings();
    expect_accepted(&s, "defaults");
    s.limit_tokens = 1;
    expect_accepted(&s, "limit 1");
    s.limit_tokens = CG_LIMIT_MAX;
    s.limit_cost_micros = CG_LIMIT_MAX;
    expect_accepted(&s, "largest limits");
    s.mode = CG_MODE_SOFT;
    s.warning_ratio = 1.0;
    expect_accepted(&s, "soft, w 1");
    s.mode = CG_MODE_APPROVAL;
    s.warning_ratio = 0.0001;
    expect_accepted(&s, "approval, small w");
    s.ntiers = CG_TIERS_MAX;
    for (int i = 0; i < CG_TIERS_MAX; i++)
        s.tiers[i] = (struct cg_tier){0.5 + i, (uint32_t)(60000 - i)}; /* up to 7.5 */
    expect_accepted(&s, "8 tiers, decreasing delays");
    s.ntiers = 1;
    s.tiers[0] = (struct cg_tier){10.0, 60000};
    expect_accepted(&s, "ratio 10, delay 60000");
    s.tiers[0] = (struct cg_tier){1e-9, 0};
    expect_accepted(&s, "tiny ratio, zero delay");
    s.backpressure_disabled = true;
    expect_accepted(&s, "disabled");
    s = good_settings();
    s.closed = true;
    s.used_tokens = -7;
    s.has_budget = false;
    expect_accepted(&s, "fields settings do not use are not checked");
}

Test(budget, settings_refuse_bad_token_limits, .timeout = 10)
{
    int64_t bad[] = {0, -1, INT64_MIN, CG_LIMIT_MAX + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_budget_level s = good_settings();
        s.limit_tokens = bad[i];
        struct cg_err err;
        cr_expect_eq(cg_budget_check_settings(&s, &err), CG_INVALID_ARGUMENT);
        cr_expect_str_eq(err.msg, "limit_tokens must be between 1 and 1000000000000000");
    }
}

Test(budget, settings_refuse_bad_cost_limits, .timeout = 10)
{
    int64_t bad[] = {-1, INT64_MIN, CG_LIMIT_MAX + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_budget_level s = good_settings();
        s.limit_cost_micros = bad[i];
        struct cg_err err;
        cr_expect_eq(cg_budget_check_settings(&s, &err), CG_INVALID_ARGUMENT);
        cr_expect_str_eq(err.msg, "limit_cost_micros must be between 0 and 1000000000000000");
    }
}

Test(budget, settings_refuse_unknown_modes, .timeout = 10)
{
    struct cg_budget_level s = good_settings();
    struct cg_err err;
    s.mode = (cg_budget_mode)0;
    cr_assert_eq(cg_budget_check_settings(&s, &err), CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "mode: unknown value 0");
    s.mode = (cg_budget_mode)4;
    cr_assert_eq(cg_budget_check_settings(&s, &err), CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "mode: unknown value 4");
    s.mode = (cg_budget_mode)-2;
    cr_assert_eq(cg_budget_check_settings(&s, &err), CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "mode: unknown value -2");
}

Test(budget, settings_refuse_bad_warning_ratios, .timeout = 10)
{
    double bad[] = {0.0, -0.0, -0.5, 1.0000001, 2.0, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_budget_level s = good_settings();
        s.warning_ratio = bad[i];
        expect_refused(&s, "warning_ratio ", "warning_ratio");
    }
}

Test(budget, settings_refuse_too_many_tiers, .timeout = 10)
{
    struct cg_budget_level s = good_settings();
    s.ntiers = CG_TIERS_MAX + 1;
    expect_refused(&s, "backpressure_tiers: at most 8 tiers", "9 tiers");
    s.ntiers = -1;
    expect_refused(&s, "backpressure_tiers: at most 8 tiers", "-1 tiers");
}

Test(budget, settings_name_the_bad_tier_field, .timeout = 10)
{
    struct cg_budget_level s = good_settings();
    s.ntiers = 3;
    s.tiers[0] = (struct cg_tier){0.5, 10};
    s.tiers[1] = (struct cg_tier){0.6, 20};
    s.tiers[2] = (struct cg_tier){0.7, 30};
    expect_accepted(&s, "three ascending tiers");

    double bad_ratios[] = {0.0, -1.0, 10.0000001, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_ratios / sizeof bad_ratios[0]; i++) {
        struct cg_budget_level t = s;
        t.tiers[2].ratio = bad_ratios[i];
        expect_refused(&t, "backpressure_tiers[2].threshold_ratio ", "bad ratio");
        t = s;
        t.tiers[0].ratio = bad_ratios[i];
        expect_refused(&t, "backpressure_tiers[0].threshold_ratio ", "bad first ratio");
    }

    struct cg_budget_level t = s;
    t.tiers[2].ratio = 0.6; /* equal to the previous: not strictly ascending */
    expect_refused(&t, "backpressure_tiers[2].threshold_ratio ", "equal");
    t.tiers[2].ratio = 0.55;
    expect_refused(&t, "backpressure_tiers[2].threshold_ratio ", "descending");
    t = s;
    t.tiers[1].ratio = 0.4;
    expect_refused(&t, "backpressure_tiers[1].threshold_ratio ", "second below first");

    t = s;
    t.tiers[1].delay_ms = 60001;
    expect_refused(&t, "backpressure_tiers[1].delay_ms ", "delay");
    t.tiers[1].delay_ms = UINT32_MAX;
    expect_refused(&t, "backpressure_tiers[1].delay_ms ", "huge delay");

    /* Tiers past ntiers are not looked at. */
    t = s;
    t.ntiers = 2;
    t.tiers[2] = (struct cg_tier){-5, 999999};
    expect_accepted(&t, "garbage past ntiers");
}

Test(budget, settings_report_the_first_bad_field, .timeout = 10)
{
    struct cg_budget_level s = good_settings();
    s.limit_tokens = 0;
    s.mode = (cg_budget_mode)9;
    s.warning_ratio = 3;
    expect_refused(&s, "limit_tokens ", "limit first");
    s.limit_tokens = 5;
    expect_refused(&s, "mode: ", "then mode");
    s.mode = CG_MODE_SOFT;
    expect_refused(&s, "warning_ratio ", "then warning_ratio");
    cr_assert_eq(cg_budget_check_settings(NULL, NULL), CG_INVALID_ARGUMENT);
}

/* --------------------------------------------------------------------- nesting ---------- */

static struct cg_budget_level with_limits(cg_level level, int64_t tokens, int64_t cost)
{
    struct cg_budget_level l = budget(level, CG_MODE_HARD, tokens, 0, 0);
    l.limit_cost_micros = cost;
    return l;
}

Test(budget, a_child_may_not_exceed_its_parents_token_limit, .timeout = 10)
{
    struct cg_budget_level session = with_limits(CG_LEVEL_SESSION, 4000, 0);
    struct cg_budget_level task = with_limits(CG_LEVEL_TASK, 5000, 0);
    struct cg_err err;
    cr_assert_eq(cg_budget_check_nesting(&session, &task, &err), CG_INVALID_ARGUMENT);
    cr_assert_eq(err.code, CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "limit_tokens 5000 of the task exceeds the session's "
                              "limit_tokens 4000");
    cr_assert_eq(cg_budget_check_nesting(&session, &task, NULL), CG_INVALID_ARGUMENT);

    struct cg_budget_level tenant = with_limits(CG_LEVEL_TENANT, CG_LIMIT_MAX - 1, 0);
    struct cg_budget_level big = with_limits(CG_LEVEL_SESSION, CG_LIMIT_MAX, 0);
    cr_assert_eq(cg_budget_check_nesting(&tenant, &big, &err), CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "limit_tokens 1000000000000000 of the session exceeds the "
                              "tenant's limit_tokens 999999999999999");

    struct err_holder {
        struct cg_err err;
    } h = {.err = {.code = CG_OK, .msg = "untouched"}};
    task.limit_tokens = 4000;
    cr_assert_eq(cg_budget_check_nesting(&session, &task, &h.err), CG_OK, "equal is fine");
    task.limit_tokens = 1;
    cr_assert_eq(cg_budget_check_nesting(&session, &task, &h.err), CG_OK);
    cr_assert_str_eq(h.err.msg, "untouched");
}

Test(budget, a_child_may_not_exceed_its_parents_cost_limit, .timeout = 10)
{
    struct cg_budget_level task = with_limits(CG_LEVEL_TASK, 1000, 500);
    struct cg_budget_level agent = with_limits(CG_LEVEL_AGENT, 1000, 501);
    struct cg_err err;
    cr_assert_eq(cg_budget_check_nesting(&task, &agent, &err), CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg,
                     "limit_cost_micros 501 of the agent exceeds the task's limit_cost_micros 500");
    agent.limit_cost_micros = 500;
    cr_assert_eq(cg_budget_check_nesting(&task, &agent, &err), CG_OK);

    /* Only compared when both are set. */
    agent.limit_cost_micros = 0;
    cr_assert_eq(cg_budget_check_nesting(&task, &agent, &err), CG_OK);
    agent.limit_cost_micros = 900;
    task.limit_cost_micros = 0;
    cr_assert_eq(cg_budget_check_nesting(&task, &agent, &err), CG_OK);

    /* The token limit is reported first. */
    task.limit_cost_micros = 1;
    agent.limit_tokens = 2000;
    cr_assert_eq(cg_budget_check_nesting(&task, &agent, &err), CG_INVALID_ARGUMENT);
    cr_assert_eq(strncmp(err.msg, "limit_tokens ", 13), 0, "%s", err.msg);
}

Test(budget, nesting_needs_two_budgets, .timeout = 10)
{
    struct cg_budget_level tenant = unbudgeted(CG_LEVEL_TENANT, 0);
    struct cg_budget_level session = with_limits(CG_LEVEL_SESSION, 5000, 10);
    struct cg_budget_level task = with_limits(CG_LEVEL_TASK, 9000, 20);
    cr_assert_eq(cg_budget_check_nesting(&tenant, &session, NULL), CG_OK);
    task.has_budget = false;
    cr_assert_eq(cg_budget_check_nesting(&session, &task, NULL), CG_OK);
    cr_assert_eq(cg_budget_check_nesting(NULL, &task, NULL), CG_OK);
    cr_assert_eq(cg_budget_check_nesting(&session, NULL, NULL), CG_OK);
}

/* ------------------------------------------------------------ random property ---------- */

static uint64_t next_random(uint64_t *state)
{
    /* splitmix64: a fixed seed gives the same paths on every run and platform. */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t random_below(uint64_t *state, int64_t bound)
{
    return bound <= 0 ? 0 : (int64_t)(next_random(state) % (uint64_t)bound);
}

static bool chance(uint64_t *state, int percent)
{
    return random_below(state, 100) < percent;
}

static int64_t random_limit(uint64_t *state)
{
    switch (random_below(state, 4)) {
    case 0:
        return 1 + random_below(state, 10);
    case 1:
        return 1 + random_below(state, 100000);
    case 2:
        return CG_LIMIT_MAX - random_below(state, 1000);
    default:
        return 1 + random_below(state, CG_LIMIT_MAX);
    }
}

static struct cg_budget_level random_level(uint64_t *state, int depth)
{
    struct cg_budget_level l = {.level = (cg_level)(depth + 1)};
    l.closed = chance(state, 4);
    l.has_budget = chance(state, 85);
    l.mode = (cg_budget_mode)(1 + random_below(state, 3));
    l.limit_tokens = random_limit(state);
    l.used_tokens = random_below(state, l.limit_tokens + l.limit_tokens / 5 + 1);
    l.reserved_tokens = chance(state, 50) ? random_below(state, l.limit_tokens / 4 + 1) : 0;
    if (chance(state, 40)) {
        l.limit_cost_micros = random_limit(state);
        l.used_cost_micros = random_below(state, l.limit_cost_micros + 1);
        l.reserved_cost_micros = random_below(state, l.limit_cost_micros / 4 + 1);
    }
    double ratios[] = {0.5, 0.8, 0.9, 1.0};
    l.warning_ratio = chance(state, 70) ? ratios[random_below(state, 4)]
                                        : (double)(1 + random_below(state, 1000)) / 1000.0;
    switch (random_below(state, 4)) {
    case 0:
        l.backpressure_disabled = true;
        break;
    case 1: { /* custom ascending tiers, some past 1 */
        l.ntiers = 1 + (int)random_below(state, CG_TIERS_MAX);
        double r = 0;
        for (int i = 0; i < l.ntiers; i++) {
            r += (double)(1 + random_below(state, 300)) / 1000.0;
            l.tiers[i] = (struct cg_tier){r, (uint32_t)random_below(state, 60001)};
        }
        break;
    }
    default: /* the defaults */
        break;
    }
    return l;
}

/* The reference model: exact 128-bit sums, written without the engine's shortcuts. */
struct model {
    cg_decision decision[CG_PATH_MAX];
    double ratio[CG_PATH_MAX]; /* of the projected sum capped at INT64_MAX, as documented */
    __int128 remaining[CG_PATH_MAX];
};

static __int128 clamp0(int64_t v)
{
    return v < 0 ? 0 : v;
}

static uint32_t model_delay(const struct cg_budget_level *l, double ratio)
{
    if (l->backpressure_disabled)
        return 0;
    struct cg_tier tiers[CG_TIERS_MAX];
    int n = l->ntiers;
    if (n == 0)
        cg_budget_default_tiers(tiers, &n);
    else
        memcpy(tiers, l->tiers, sizeof tiers);
    uint32_t delay = 0;
    for (int i = 0; i < n; i++)
        if (ratio >= tiers[i].ratio)
            delay = tiers[i].delay_ms;
    return delay;
}

static void model_level(const struct cg_budget_level *l, int64_t tokens, int64_t cost,
                        struct model *m, int i)
{
    m->decision[i] = CG_DECISION_ALLOW;
    m->ratio[i] = 0;
    m->remaining[i] = 0;
    if (l->has_budget) {
        __int128 held = clamp0(l->used_tokens) + clamp0(l->reserved_tokens);
        __int128 projected = held + clamp0(tokens);
        __int128 projected_cost =
            clamp0(l->used_cost_micros) + clamp0(l->reserved_cost_micros) + clamp0(cost);
        bool over = projected > l->limit_tokens ||
                    (l->limit_cost_micros > 0 && projected_cost > l->limit_cost_micros);
        m->ratio[i] = (double)(int64_t)(projected <= INT64_MAX ? projected : INT64_MAX) /
                      (double)l->limit_tokens;
        m->remaining[i] = (__int128)l->limit_tokens - held;
        if (over)
            m->decision[i] = l->mode == CG_MODE_HARD   ? CG_DECISION_DENY
                             : l->mode == CG_MODE_SOFT ? CG_DECISION_WARNING
                                                       : CG_DECISION_REQUIRE_APPROVAL;
        else if (m->ratio[i] >= l->warning_ratio)
            m->decision[i] = CG_DECISION_WARNING;
    }
    if (l->closed)
        m->decision[i] = CG_DECISION_DENY;
}

static int64_t random_tokens(uint64_t *state, const struct cg_budget_level *path, int n)
{
    const struct cg_budget_level *l = &path[random_below(state, n)];
    int64_t room = l->limit_tokens - l->used_tokens - l->reserved_tokens;
    switch (random_below(state, 8)) {
    case 0:
        return INT64_MAX;
    case 1:
        return -random_below(state, 1000);
    case 2:
        return room; /* exactly at this level's limit */
    case 3:
        return room + 1; /* one over */
    case 4:
        return 0;
    default:
        return random_below(state, l->limit_tokens / 2 + 2);
    }
}

Test(budget, random_paths_obey_the_rules, .timeout = 30)
{
    uint64_t state = 20240611;
    int denied = 0, approvals = 0, warnings = 0, allowed = 0, delayed = 0;
    for (int iter = 0; iter < 50000; iter++) {
        int n = 1 + (int)random_below(&state, CG_PATH_MAX);
        struct cg_budget_level path[CG_PATH_MAX];
        for (int i = 0; i < n; i++)
            path[i] = random_level(&state, i);
        int64_t tokens = random_tokens(&state, path, n);
        int64_t cost = chance(&state, 50)  ? 0
                       : chance(&state, 5) ? INT64_MAX
                                           : random_below(&state, CG_LIMIT_MAX / 1000);
        struct cg_budget_result r;
        cg_budget_decide(path, n, tokens, cost, &r);

        struct model m;
        bool hard_over = false, closed = false;
        cg_decision strictest = CG_DECISION_ALLOW;
        double max_ratio = -1;
        int max_at = -1;
        __int128 least = INT64_MAX;
        for (int i = 0; i < n; i++) {
            model_level(&path[i], tokens, cost, &m, i);
            closed |= path[i].closed;
            hard_over |= path[i].has_budget && !path[i].closed && path[i].mode == CG_MODE_HARD &&
                         m.decision[i] == CG_DECISION_DENY;
            if (m.decision[i] > strictest)
                strictest = m.decision[i];
            if (path[i].has_budget && r.levels[i].projected_ratio >= max_ratio) {
                max_ratio = r.levels[i].projected_ratio;
                max_at = i;
            }
            if (path[i].has_budget && path[i].mode == CG_MODE_HARD && !path[i].closed &&
                m.remaining[i] < least)
                least = m.remaining[i];

            cr_assert_eq(r.levels[i].decision, m.decision[i], "iter %d level %d", iter, i);
            cr_assert_eq(r.levels[i].projected_ratio, m.ratio[i], "iter %d level %d", iter, i);
            if (path[i].has_budget) {
                cr_assert_eq(r.levels[i].remaining_tokens, (int64_t)m.remaining[i]);
                bool stops = m.decision[i] == CG_DECISION_DENY ||
                             m.decision[i] == CG_DECISION_REQUIRE_APPROVAL;
                cr_assert_eq(r.levels[i].delay_ms,
                             stops ? 0 : model_delay(&path[i], r.levels[i].projected_ratio),
                             "iter %d", iter);
            } else {
                cr_assert_eq(r.levels[i].delay_ms, 0);
                cr_assert_eq(r.levels[i].projected_ratio, 0.0);
            }
            cr_assert_eq(!!(r.levels[i].reasons & CG_REASON_BACKPRESSURE),
                         r.levels[i].delay_ms > 0);
            cr_assert_eq(!!(r.levels[i].reasons & CG_REASON_CLOSED), path[i].closed);
        }

        /* The property the brief states, then the exact model. */
        if (hard_over)
            cr_assert_eq(r.decision, CG_DECISION_DENY, "iter %d: an open HARD level is over", iter);
        if (r.decision == CG_DECISION_DENY)
            cr_assert(hard_over || closed, "iter %d: DENY without cause", iter);
        cr_assert_eq(r.decision, strictest, "iter %d", iter);

        if (r.decision != CG_DECISION_ALLOW && r.decision != CG_DECISION_WARNING)
            cr_assert_eq(r.delay_ms, 0, "iter %d: delay %u with decision %d", iter, r.delay_ms,
                         r.decision);
        else if (max_at >= 0)
            cr_assert_eq(r.delay_ms, r.levels[max_at].delay_ms, "iter %d", iter);
        else
            cr_assert_eq(r.delay_ms, 0);

        cr_assert_eq(r.tightest, max_at, "iter %d", iter);
        cr_assert_eq(r.tightest_ratio, max_at >= 0 ? max_ratio : 0.0, "iter %d", iter);
        if (max_at >= 0) {
            double model_max = -1;
            for (int i = 0; i < n; i++)
                if (path[i].has_budget && m.ratio[i] > model_max)
                    model_max = m.ratio[i];
            cr_assert_eq(r.tightest_ratio, model_max, "iter %d", iter);
        }

        cr_assert_eq(r.available_tokens, least < 0 ? 0 : (int64_t)least, "iter %d", iter);

        denied += r.decision == CG_DECISION_DENY;
        approvals += r.decision == CG_DECISION_REQUIRE_APPROVAL;
        warnings += r.decision == CG_DECISION_WARNING;
        allowed += r.decision == CG_DECISION_ALLOW;
        delayed += r.delay_ms > 0;
    }
    /* The generator must reach every outcome, or the checks above prove little. */
    cr_assert_gt(denied, 1000);
    cr_assert_gt(approvals, 1000);
    cr_assert_gt(warnings, 1000);
    cr_assert_gt(allowed, 1000);
    cr_assert_gt(delayed, 1000);
}

/* ------------------------------------------------------------- the compression hint --- */

/* Issue 16, item 6: a request a HARD token limit refuses gets the prompt size that would fit
 * (available tokens less its expected output); a cost limit, a closed scope, an allowed
 * request or no room get none. */
Test(budget, a_refused_request_learns_the_prompt_that_would_fit, .timeout = 10)
{
    struct cg_budget_level path[2] = {
        budget(CG_LEVEL_TENANT, CG_MODE_HARD, 100000, 1000, 0),
        budget(CG_LEVEL_SESSION, CG_MODE_HARD, 1000, 700, 100),
    };
    struct cg_budget_result r;
    cg_budget_decide(path, 2, 500, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(r.available_tokens, 200);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 500, 50), 150);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 500, 0), 200);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 500, 200), 0, "no room for the prompt");
    cg_budget_decide(path, 2, 150, 0, &r);
    cr_assert_eq(r.decision, CG_DECISION_WARNING);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 150, 50), 0, "allowed: no hint");
    /* A closed scope or a cost limit refuses whatever the size. */
    path[1].closed = true;
    cg_budget_decide(path, 2, 500, 0, &r);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 500, 50), 0);
    path[1].closed = false;
    path[1].limit_cost_micros = 10;
    path[1].used_cost_micros = 10;
    cg_budget_decide(path, 2, 100, 5, &r);
    cr_assert_eq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 100, 0), 0);
    /* A SOFT level over its limit does not refuse: no hint. */
    path[1] = budget(CG_LEVEL_SESSION, CG_MODE_SOFT, 1000, 900, 0);
    cg_budget_decide(path, 2, 500, 0, &r);
    cr_assert_neq(r.decision, CG_DECISION_DENY);
    cr_assert_eq(cg_budget_compress_to(&r, 2, 500, 0), 0);
}

/* test_history.c - the steps of a usage history: defaults, alignment, the chosen step and
 * resolution, and the bounds named by field. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/history.h"

#define MIN_MS 60000LL
#define HOUR_MS 3600000LL
#define DAY_MS 86400000LL
/* 2026-11-27 16:50:12.345 UTC */
#define NOW 1795798212345LL

static struct cg_history_plan plan_ok(int64_t from, int64_t to, int64_t step_s)
{
    struct cg_history_ask ask = {.from_ms = from, .to_ms = to, .step_s = step_s};
    struct cg_history_plan p;
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = cg_history_plan(&ask, NOW, &p, &err);
    cr_assert_eq(st, CG_OK, "%s", err.msg);
    cr_assert_eq(p.from_ms % p.step_ms, 0);
    cr_assert_eq(p.to_ms % p.step_ms, 0);
    cr_assert_eq(p.points, (p.to_ms - p.from_ms) / p.step_ms);
    cr_assert(p.points >= 1 && p.points <= CG_HISTORY_POINTS_MAX);
    return p;
}

static void plan_bad(int64_t from, int64_t to, int64_t step_s, const char *field)
{
    struct cg_history_ask ask = {.from_ms = from, .to_ms = to, .step_s = step_s};
    struct cg_history_plan p;
    struct cg_err err;
    cg_err_clear(&err);
    cr_assert_eq(cg_history_plan(&ask, NOW, &p, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, field) != NULL, "'%s' does not name %s", err.msg, field);
}

Test(history, nothing_asked_is_the_last_hour_by_minute, .timeout = 10)
{
    struct cg_history_plan p = plan_ok(0, 0, 0);
    cr_assert_eq(p.step_ms, MIN_MS);
    cr_assert_eq(p.resolution, 1);
    cr_assert_eq(p.to_ms, NOW - NOW % MIN_MS + MIN_MS); /* the current minute included */
    cr_assert_eq(p.from_ms, NOW - 60 * MIN_MS - (NOW - 60 * MIN_MS) % MIN_MS);
    cr_assert_eq(p.points, 61);
}

Test(history, the_range_is_rounded_out_to_the_step, .timeout = 10)
{
    struct cg_history_plan p = plan_ok(NOW - 3 * HOUR_MS, NOW, 3600);
    cr_assert_eq(p.from_ms, (NOW - 3 * HOUR_MS) / HOUR_MS * HOUR_MS);
    cr_assert_eq(p.to_ms, NOW / HOUR_MS * HOUR_MS + HOUR_MS);
    cr_assert_eq(p.points, 4);
    cr_assert_eq(p.resolution, 2);
    /* Already aligned: unchanged; an empty range is the step that holds it. */
    p = plan_ok(10 * HOUR_MS, 12 * HOUR_MS, 3600);
    cr_assert_eq(p.points, 2);
    p = plan_ok(10 * HOUR_MS, 10 * HOUR_MS, 3600);
    cr_assert_eq(p.points, 1);
    cr_assert_eq(p.from_ms, 10 * HOUR_MS);
}

Test(history, the_step_picks_the_coarsest_bucket_that_divides_it, .timeout = 10)
{
    cr_assert_eq(plan_ok(NOW - DAY_MS, NOW, 60).resolution, 1);
    cr_assert_eq(plan_ok(NOW - DAY_MS, NOW, 300).resolution, 1);
    cr_assert_eq(plan_ok(NOW - DAY_MS, NOW, 5400).resolution, 1); /* 90 min: not whole hours */
    cr_assert_eq(plan_ok(NOW - DAY_MS, NOW, 7200).resolution, 2);
    cr_assert_eq(plan_ok(NOW - 30 * DAY_MS, NOW, 86400).resolution, 3);
    cr_assert_eq(plan_ok(NOW - 300 * DAY_MS, NOW, 7 * 86400).resolution, 3);
    cr_assert_eq(plan_ok(NOW - 300 * DAY_MS, NOW, 36 * 3600).resolution, 2);
}

Test(history, no_step_takes_the_first_that_fits_in_400, .timeout = 10)
{
    const struct {
        int64_t span_ms, step_s;
    } cases[] = {
        {30 * MIN_MS, 60},       {400 * MIN_MS, 60},
        {401 * MIN_MS, 300},     {DAY_MS, 300},
        {3 * DAY_MS, 900},       {7 * DAY_MS, 3600},
        {90 * DAY_MS, 21600},    {300 * DAY_MS, 86400},
        {3000 * DAY_MS, 604800}, {20000 * DAY_MS, 604800}, /* past every choice: the largest */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cg_history_ask ask = {.from_ms = NOW - cases[i].span_ms, .to_ms = NOW};
        struct cg_history_plan p;
        struct cg_err err;
        cg_err_clear(&err);
        cr_assert_eq(cg_history_plan(&ask, NOW, &p, &err), CG_OK, "%s", err.msg);
        cr_assert_eq(p.step_ms, cases[i].step_s * 1000, "span %lld: step %lld",
                     (long long)cases[i].span_ms, (long long)p.step_ms);
    }
}

Test(history, bounds_are_named, .timeout = 10)
{
    plan_bad(0, 0, 61, "step_seconds");
    plan_bad(0, 0, -60, "step_seconds");
    plan_bad(0, 0, 367 * 86400, "step_seconds");
    plan_bad(NOW - 30 * DAY_MS, NOW, 60, "step_seconds"); /* 43,200 steps */
    plan_bad(NOW, NOW - 1, 60, "from_unix_ms");
    plan_bad(-1, 0, 60, "from_unix_ms");
    plan_bad(INT64_MAX, 0, 60, "from_unix_ms");
    plan_bad(0, -1, 60, "to_unix_ms");
    plan_bad(0, INT64_MAX, 60, "to_unix_ms");
    /* The largest step and the most steps are answered. */
    struct cg_history_plan p = plan_ok(0, 0, 366 * 86400);
    cr_assert_eq(p.resolution, 3);
    p = plan_ok(NOW - 9999 * MIN_MS, NOW, 60);
    cr_assert_eq(p.points, 10000);
}

Test(history, a_range_from_the_epoch_does_not_go_negative, .timeout = 10)
{
    struct cg_history_ask ask = {.from_ms = 0, .to_ms = 5 * MIN_MS, .step_s = 60};
    struct cg_history_plan p;
    struct cg_err err;
    cg_err_clear(&err);
    cr_assert_eq(cg_history_plan(&ask, NOW, &p, &err), CG_OK);
    cr_assert_eq(p.from_ms, 0);
    cr_assert_eq(p.points, 5);
}

Test(history, the_forecast_runs_the_remaining_tokens_out_at_the_recent_rate, .timeout = 10)
{
    struct cg_forecast f;
    /* 20,000 tokens in 2 minutes: 10,000 a minute; 80,000 left: 8 minutes. */
    cg_history_forecast(80000, 20000, 2 * MIN_MS, NOW, &f);
    cr_assert_float_eq(f.tokens_per_minute, 10000.0, 1e-9);
    cr_assert_float_eq(f.seconds, 480.0, 1e-9);
    cr_assert_eq(f.exhaustion_ms, NOW + 480000);
    /* Nothing spent, or nothing left: no forecast (the rate still says what was spent). */
    cg_history_forecast(80000, 0, 2 * MIN_MS, NOW, &f);
    cr_assert(f.tokens_per_minute == 0 && f.seconds == 0 && f.exhaustion_ms == 0);
    cg_history_forecast(0, 500, MIN_MS, NOW, &f);
    cr_assert_float_eq(f.tokens_per_minute, 500.0, 1e-9);
    cr_assert(f.seconds == 0 && f.exhaustion_ms == 0);
    cg_history_forecast(-10, 500, MIN_MS, NOW, &f);
    cr_assert_eq(f.exhaustion_ms, 0);
    /* A trickle against a huge budget: seconds, no date past the far future. */
    cg_history_forecast(INT64_MAX, 1, 1440 * MIN_MS, NOW, &f);
    cr_assert(f.seconds > 1e18);
    cr_assert_eq(f.exhaustion_ms, 0);
    /* No window: nothing. */
    cg_history_forecast(100, 100, 0, NOW, &f);
    cr_assert(f.tokens_per_minute == 0);
}

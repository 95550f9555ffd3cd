/* test_backoff.c - retry delays: full jitter, Retry-After, the deadline, header parsing. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/backoff.h"

static const struct cg_backoff_policy policy = {
    .max_retries = 3, .base_ms = 100, .max_ms = 1000, .max_retry_after_ms = 5000};

/* splitmix64: a fixed, seeded sequence so that statistical checks cannot flake. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

Test(backoff, ceiling_doubles_per_retry_up_to_the_cap, .timeout = 10)
{
    const int64_t ceilings[] = {100, 200, 400, 800, 1000, 1000, 1000};
    for (int retry = 1; retry <= 7; retry++) {
        int64_t c = ceilings[retry - 1];
        /* random % (c + 1): c itself is the largest delay, c + 1 wraps to 0. */
        cr_assert_eq(cg_backoff_delay(&policy, retry, (uint64_t)c), c, "retry %d", retry);
        cr_assert_eq(cg_backoff_delay(&policy, retry, (uint64_t)c + 1), 0, "retry %d", retry);
        cr_assert_eq(cg_backoff_delay(&policy, retry, UINT64_MAX - (UINT64_MAX % (c + 1)) - 1), c,
                     "retry %d", retry);
    }
}

Test(backoff, huge_retry_numbers_and_policies_never_overflow, .timeout = 10)
{
    struct cg_backoff_policy p = {.max_retries = 1000, .base_ms = INT64_MAX, .max_ms = INT64_MAX};
    for (uint64_t r = 0; r < 64; r++) {
        int64_t d = cg_backoff_delay(&p, INT_MAX, UINT64_MAX - r);
        cr_assert(d >= 0 && d <= CG_BACKOFF_DELAY_MAX_MS);
        d = cg_backoff_delay(&policy, INT_MAX, UINT64_MAX - r);
        cr_assert(d >= 0 && d <= 1000);
    }
    struct cg_backoff_policy odd = {.base_ms = 0, .max_ms = -5};
    cr_assert_eq(cg_backoff_delay(&odd, 1, 1), 1, "base clamps to 1, cap to base");
    cr_assert_eq(cg_backoff_delay(&odd, 9, 2), 0);
    cr_assert_eq(cg_backoff_delay(&policy, 0, 100), 100, "retry 0 counts as the first");
    cr_assert_eq(cg_backoff_delay(&policy, -3, 101), 0);
}

Test(backoff, full_jitter_covers_the_whole_range_evenly, .timeout = 10)
{
    uint64_t seed = 42;
    int buckets[10] = {0};
    const int n = 100000;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        int64_t d = cg_backoff_delay(&policy, 4, next_random(&seed)); /* ceiling 800 */
        cr_assert(d >= 0 && d <= 800);
        buckets[d * 10 / 801]++;
        sum += (double)d;
    }
    cr_assert(sum / n > 390 && sum / n < 410, "mean %.1f, expected ~400", sum / n);
    for (int b = 0; b < 10; b++)
        cr_assert(buckets[b] > n / 10 * 9 / 10 && buckets[b] < n / 10 * 11 / 10,
                  "bucket %d holds %d of %d", b, buckets[b], n);
}

Test(backoff, retries_stop_after_max_retries, .timeout = 10)
{
    int64_t delay = -1;
    for (int attempts = 1; attempts <= 3; attempts++)
        cr_assert_eq(cg_backoff_next(&policy, attempts, -1, 0, 100000, 10, 7, &delay),
                     CG_BACKOFF_RETRY, "attempts %d", attempts);
    cr_assert_eq(cg_backoff_next(&policy, 4, -1, 0, 100000, 10, 7, &delay),
                 CG_BACKOFF_NO_RETRIES_LEFT);
    cr_assert_eq(delay, 0);
    struct cg_backoff_policy none = policy;
    none.max_retries = 0;
    cr_assert_eq(cg_backoff_next(&none, 1, -1, 0, 100000, 10, 7, &delay),
                 CG_BACKOFF_NO_RETRIES_LEFT);
    none.max_retries = -4;
    cr_assert_eq(cg_backoff_next(&none, 1, 0, 0, 100000, 10, 7, &delay),
                 CG_BACKOFF_NO_RETRIES_LEFT);
}

Test(backoff, retry_after_is_waited_in_full_or_not_at_all, .timeout = 10)
{
    int64_t delay = -1;
    cr_assert_eq(cg_backoff_next(&policy, 1, 3000, 1000, 10000, 100, 0, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 3000, "the server's delay, not the jittered one");
    cr_assert_eq(cg_backoff_next(&policy, 1, 0, 1000, 10000, 100, 5, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 0, "Retry-After: 0 means now");
    /* 1000 + 3950 + 100 > 5000: honouring it would leave no time for the attempt. */
    cr_assert_eq(cg_backoff_next(&policy, 1, 3950, 1000, 5000, 100, 0, &delay),
                 CG_BACKOFF_NO_TIME_LEFT);
    cr_assert_eq(cg_backoff_next(&policy, 1, 3900, 1000, 5000, 100, 0, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 3900);
    cr_assert_eq(cg_backoff_next(&policy, 1, 5001, 0, INT64_MAX, 100, 0, &delay),
                 CG_BACKOFF_RETRY_AFTER_LONG);
    cr_assert_eq(delay, 0);
}

Test(backoff, jittered_delay_is_shortened_to_fit_the_deadline, .timeout = 10)
{
    int64_t delay = -1;
    /* ceiling 100, random 100 -> 100; room = 1050 - 1000 - 20 = 30. */
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, 1000, 1050, 20, 100, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 30);
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, 1000, 1020, 20, 100, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 0, "exactly enough time for an attempt: retry at once");
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, 1000, 1019, 20, 100, &delay),
                 CG_BACKOFF_NO_TIME_LEFT);
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, 1000, 900, 0, 100, &delay),
                 CG_BACKOFF_NO_TIME_LEFT, "deadline already past");
    /* Extreme times do not overflow. */
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, INT64_MIN, INT64_MAX, INT64_MAX, 100, &delay),
                 CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 100);
    cr_assert_eq(cg_backoff_next(&policy, 1, 7, INT64_MAX - 5, INT64_MAX, 10, 1, &delay),
                 CG_BACKOFF_NO_TIME_LEFT);
    cr_assert_eq(cg_backoff_next(&policy, 1, 5, INT64_MAX - 5, INT64_MAX, 0, 1, &delay),
                 CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 5);
    cr_assert_eq(cg_backoff_next(&policy, 1, -1, 0, 1000, -50, 100, &delay), CG_BACKOFF_RETRY);
    cr_assert_eq(delay, 100, "a negative min_attempt_ms counts as 0");
}

/* Every combination: a retry always fits before the deadline, honours Retry-After exactly and
 * never goes past max_retries; a refusal always has its stated reason. */
Test(backoff, every_combination_keeps_the_rules, .timeout = 30)
{
    const int64_t retry_afters[] = {-1, 0, 1, 99, 100, 2500, 5000, 5001, 100000};
    const int64_t mins[] = {0, 1, 50, 500};
    uint64_t seed = 7;
    for (int attempts = 0; attempts <= 5; attempts++)
        for (size_t ra = 0; ra < sizeof retry_afters / sizeof retry_afters[0]; ra++)
            for (int64_t left = -10; left <= 6000; left += 37)
                for (size_t m = 0; m < sizeof mins / sizeof mins[0]; m++) {
                    int64_t now = 123456, deadline = now + left, delay = -1;
                    int64_t rafter = retry_afters[ra], min = mins[m];
                    cg_backoff_verdict v = cg_backoff_next(&policy, attempts, rafter, now, deadline,
                                                           min, next_random(&seed), &delay);
                    int effective = attempts < 1 ? 1 : attempts;
                    if (effective > policy.max_retries) {
                        cr_assert_eq(v, CG_BACKOFF_NO_RETRIES_LEFT);
                    } else if (left < min) {
                        cr_assert_eq(v, CG_BACKOFF_NO_TIME_LEFT);
                    } else if (rafter > policy.max_retry_after_ms) {
                        cr_assert_eq(v, CG_BACKOFF_RETRY_AFTER_LONG);
                    } else if (rafter >= 0 && now + rafter + min > deadline) {
                        cr_assert_eq(v, CG_BACKOFF_NO_TIME_LEFT);
                    } else {
                        cr_assert_eq(v, CG_BACKOFF_RETRY);
                        cr_assert(now + delay + min <= deadline);
                        cr_assert(delay >= 0);
                        if (rafter >= 0)
                            cr_assert_eq(delay, rafter);
                        else
                            cr_assert(delay <= 100LL << (effective - 1));
                    }
                    if (v != CG_BACKOFF_RETRY)
                        cr_assert_eq(delay, 0);
                }
}

static bool parse_ra(const char *s, int64_t now_wall_ms, int64_t *out)
{
    return cg_backoff_parse_retry_after(s, strlen(s), now_wall_ms, out);
}

Test(backoff, retry_after_seconds, .timeout = 10)
{
    int64_t d = -1;
    cr_assert(parse_ra("120", 0, &d));
    cr_assert_eq(d, 120000);
    cr_assert(parse_ra(" \t3 ", 0, &d));
    cr_assert_eq(d, 3000);
    cr_assert(parse_ra("0", 0, &d));
    cr_assert_eq(d, 0);
    cr_assert(parse_ra("99999999999999999999999999", 0, &d));
    cr_assert_eq(d, CG_BACKOFF_DELAY_MAX_MS, "saturates");
    d = 77;
    const char *bad[] = {"", "   ", "-1", "1.5", "1e3", "abc", "12abc", "+5", "1 2", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_not(parse_ra(bad[i], 0, &d), "'%s'", bad[i]);
        cr_assert_eq(d, 77, "unchanged on failure");
    }
    cr_assert_not(cg_backoff_parse_retry_after(NULL, 0, 0, &d));
    /* Not NUL-terminated: only len bytes count. */
    cr_assert(cg_backoff_parse_retry_after("42junk", 2, 0, &d));
    cr_assert_eq(d, 42000);
}

Test(backoff, retry_after_dates, .timeout = 10)
{
    int64_t d = -1;
    const int64_t at = 1445412480LL * 1000; /* Wed, 21 Oct 2015 07:28:00 GMT */
    cr_assert(parse_ra("Wed, 21 Oct 2015 07:28:00 GMT", at - 2500, &d));
    cr_assert_eq(d, 2500);
    cr_assert(parse_ra("Wed, 21 Oct 2015 07:28:00 GMT", at + 60000, &d));
    cr_assert_eq(d, 0, "a date in the past means now");
    cr_assert(parse_ra("Wed, 21 Oct 2015 07:28:00 GMT", 0, &d));
    cr_assert_eq(d, CG_BACKOFF_DELAY_MAX_MS, "far future saturates");
    cr_assert(parse_ra("Mon, 29 Feb 2016 00:00:00 GMT", 1456704000LL * 1000 - 1, &d));
    cr_assert_eq(d, 1);
    const char *bad[] = {
        "Tue, 29 Feb 2100 00:00:00 GMT",     /* not a leap year */
        "Wed, 31 Apr 2015 00:00:00 GMT",     /* April has 30 days */
        "Wed, 21 Oct 2015 24:00:00 GMT",     /* hour */
        "Wed, 21 Oct 2015 07:60:00 GMT",     /* minute */
        "Wed, 21 Foo 2015 07:28:00 GMT",     /* month */
        "Xyz, 21 Oct 2015 07:28:00 GMT",     /* day name */
        "Wed, 21 Oct 2015 07:28:00 UTC",     /* zone */
        "Wed, 21 Oct 1969 07:28:00 GMT",     /* before the epoch */
        "Wednesday, 21-Oct-15 07:28:00 GMT", /* RFC 850 */
        "Wed Oct 21 07:28:00 2015",          /* asctime */
        "Wed, 21 Oct 2015 07:28:00 GMT x",   /* trailing junk */
        "Wed, 2a Oct 2015 07:28:00 GMT",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_not(parse_ra(bad[i], 0, &d), "'%s'", bad[i]);
}

/* Every day from 1970 to 2200 at a varying time of day, formatted by libc and checked
 * against timegm. */
Test(backoff, retry_after_dates_agree_with_timegm_for_every_day, .timeout = 30)
{
    for (int64_t day = 0; day < 84000; day++) {
        time_t t = (time_t)(day * 86400 + (day * 7919) % 86400);
        struct tm tm;
        cr_assert_not_null(gmtime_r(&t, &tm));
        char buf[64];
        /* Names are written by hand: strftime's %a/%b follow the locale. */
        static const char *const wd[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
        static const char *const mo[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
        snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", wd[tm.tm_wday], tm.tm_mday,
                 mo[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        /* Measured from one second before the date, the delay is exactly 1000 ms. */
        int64_t d = -1;
        cr_assert(parse_ra(buf, (int64_t)t * 1000 - 1000, &d), "'%s'", buf);
        cr_assert_eq(d, 1000, "'%s' parsed %lld ms off", buf, (long long)(d - 1000));
    }
}

Test(backoff, retry_after_ms_values, .timeout = 10)
{
    struct {
        const char *text;
        bool ok;
        int64_t ms;
    } cases[] = {
        {"250", true, 250},
        {"0", true, 0},
        {"1.5", true, 2},
        {"1.0", true, 1},
        {"1.000", true, 1},
        {" 20 ", true, 20},
        {"0.001", true, 1},
        {"", false, 0},
        {"1.", false, 0},
        {".5", false, 0},
        {"-5", false, 0},
        {"1e3", false, 0},
        {"2.5.1", false, 0},
        {"12 ms", false, 0},
        {"nan", false, 0},
        {"1,5", false, 0},
        {"99999999999999999999999", true, CG_BACKOFF_DELAY_MAX_MS},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t d = -7;
        bool ok = cg_backoff_parse_retry_after_ms(cases[i].text, strlen(cases[i].text), &d);
        cr_assert_eq(ok, cases[i].ok, "'%s'", cases[i].text);
        cr_assert_eq(d, ok ? cases[i].ms : -7, "'%s' -> %lld", cases[i].text, (long long)d);
    }
    int64_t d;
    cr_assert_not(cg_backoff_parse_retry_after_ms(NULL, 3, &d));
}

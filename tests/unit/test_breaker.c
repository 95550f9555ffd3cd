/* test_breaker.c - the circuit breaker's state machine, driven by an injected clock. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>

#include "core/breaker.h"

static const struct cg_breaker_policy consecutive3 = {
    .failure_threshold = 3, .ratio_window = 0, .failure_ratio = 0, .cooldown_ms = 1000};

/* One whole call: acquire, then record the outcome when allowed. Returns whether it went. */
static bool call(struct cg_breaker *b, const struct cg_breaker_policy *p, bool success, int64_t now)
{
    struct cg_breaker_ticket t = cg_breaker_acquire(b, p, now);
    if (t.allowed)
        cg_breaker_record(b, p, t, success, now);
    return t.allowed;
}

static void open_breaker(struct cg_breaker *b, const struct cg_breaker_policy *p, int64_t now)
{
    for (int i = 0; i < p->failure_threshold; i++)
        cr_assert(call(b, p, false, now));
    cr_assert_eq(b->state, CG_BREAKER_OPEN);
}

Test(breaker, starts_closed_and_allows_calls, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, 0), 0);
    for (int i = 0; i < 100; i++)
        cr_assert(call(&b, &consecutive3, true, i));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert_eq(b.times_opened, 0);
}

Test(breaker, opens_after_n_consecutive_failures_not_before, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    cr_assert(call(&b, &consecutive3, false, 10));
    cr_assert(call(&b, &consecutive3, false, 11));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED, "two failures of three");
    cr_assert(call(&b, &consecutive3, true, 12));
    cr_assert(call(&b, &consecutive3, false, 13));
    cr_assert(call(&b, &consecutive3, false, 14));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED, "a success in between starts the count again");
    cr_assert(call(&b, &consecutive3, false, 15));
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
    cr_assert_eq(b.opened_at_ms, 15);
    cr_assert_eq(b.times_opened, 1);
    cr_assert_not(call(&b, &consecutive3, true, 16), "open: refused");
}

Test(breaker, open_refuses_until_the_cooldown_then_lets_one_probe, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 5000);
    /* Every millisecond of the cool-down refuses; the state and the wait agree. */
    for (int64_t t = 5000; t < 6000; t++) {
        cr_assert_eq(cg_breaker_state_at(&b, &consecutive3, t), CG_BREAKER_OPEN);
        cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, t), 6000 - t);
        struct cg_breaker_ticket tk = cg_breaker_acquire(&b, &consecutive3, t);
        cr_assert_not(tk.allowed, "t=%lld", (long long)t);
    }
    cr_assert_eq(cg_breaker_state_at(&b, &consecutive3, 6000), CG_BREAKER_HALF_OPEN);
    cr_assert_eq(b.state, CG_BREAKER_OPEN, "state_at does not change the breaker");
    struct cg_breaker_ticket probe = cg_breaker_acquire(&b, &consecutive3, 6000);
    cr_assert(probe.allowed);
    cr_assert(probe.probe);
    cr_assert_eq(b.state, CG_BREAKER_HALF_OPEN);
    for (int64_t t = 6000; t < 6999; t += 7) {
        struct cg_breaker_ticket other = cg_breaker_acquire(&b, &consecutive3, t);
        cr_assert_not(other.allowed, "only the probe is out");
    }
    cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, 6500), 500);
}

Test(breaker, probe_success_closes_with_a_clean_history, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 0);
    struct cg_breaker_ticket probe = cg_breaker_acquire(&b, &consecutive3, 1000);
    cg_breaker_record(&b, &consecutive3, probe, true, 1200);
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert(call(&b, &consecutive3, false, 1300));
    cr_assert(call(&b, &consecutive3, false, 1301));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED, "the failures before the opening are forgotten");
    cr_assert(call(&b, &consecutive3, false, 1302));
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
    cr_assert_eq(b.times_opened, 2);
}

Test(breaker, probe_failure_reopens_for_a_new_cooldown, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 0);
    struct cg_breaker_ticket probe = cg_breaker_acquire(&b, &consecutive3, 1500);
    cr_assert(probe.probe);
    cg_breaker_record(&b, &consecutive3, probe, false, 1700);
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
    cr_assert_eq(b.opened_at_ms, 1700, "the cool-down starts from the probe's failure");
    cr_assert_not(call(&b, &consecutive3, true, 2699));
    cr_assert(call(&b, &consecutive3, true, 2700), "a new probe after the new cool-down");
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
}

Test(breaker, stale_tickets_cannot_move_the_state, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    /* Five calls start while closed; three fail and open the breaker. */
    struct cg_breaker_ticket early[5];
    for (int i = 0; i < 5; i++)
        early[i] = cg_breaker_acquire(&b, &consecutive3, 0);
    for (int i = 0; i < 3; i++)
        cg_breaker_record(&b, &consecutive3, early[i], false, 10);
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
    /* A late failure does not extend the cool-down. */
    cg_breaker_record(&b, &consecutive3, early[3], false, 500);
    cr_assert_eq(b.opened_at_ms, 10);
    struct cg_breaker_ticket probe = cg_breaker_acquire(&b, &consecutive3, 1010);
    cr_assert(probe.probe);
    /* A late success of a closed-era call does not close it: only the probe decides. */
    cg_breaker_record(&b, &consecutive3, early[4], true, 1020);
    cr_assert_eq(b.state, CG_BREAKER_HALF_OPEN);
    /* Releasing a stale ticket does not free the probe slot either. */
    cg_breaker_release(&b, early[4]);
    cr_assert_not(cg_breaker_acquire(&b, &consecutive3, 1030).allowed);
    cg_breaker_record(&b, &consecutive3, probe, true, 1040);
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    /* And a refused ticket records nothing. */
    struct cg_breaker_ticket refused = {.allowed = false, .generation = b.generation};
    for (int i = 0; i < 10; i++)
        cg_breaker_record(&b, &consecutive3, refused, false, 1050);
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert_eq(b.consecutive_failures, 0);
}

Test(breaker, a_released_probe_lets_the_next_call_probe, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 0);
    struct cg_breaker_ticket probe = cg_breaker_acquire(&b, &consecutive3, 1000);
    cr_assert(probe.probe);
    cg_breaker_release(&b, probe);
    cr_assert_eq(b.state, CG_BREAKER_HALF_OPEN);
    cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, 1001), 0);
    struct cg_breaker_ticket next = cg_breaker_acquire(&b, &consecutive3, 1001);
    cr_assert(next.allowed && next.probe);
    /* Releasing an ordinary (closed) ticket changes nothing. */
    cg_breaker_record(&b, &consecutive3, next, true, 1002);
    struct cg_breaker_ticket ordinary = cg_breaker_acquire(&b, &consecutive3, 1003);
    cg_breaker_release(&b, ordinary);
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
}

Test(breaker, a_silent_probe_stops_blocking_after_a_cooldown, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 0);
    struct cg_breaker_ticket lost = cg_breaker_acquire(&b, &consecutive3, 1000);
    cr_assert(lost.probe);
    cr_assert_not(cg_breaker_acquire(&b, &consecutive3, 1999).allowed);
    struct cg_breaker_ticket second = cg_breaker_acquire(&b, &consecutive3, 2000);
    cr_assert(second.allowed && second.probe);
    /* The lost probe turns up late with a success: stale, ignored. */
    cg_breaker_record(&b, &consecutive3, lost, true, 2001);
    cr_assert_eq(b.state, CG_BREAKER_HALF_OPEN);
    cg_breaker_record(&b, &consecutive3, second, false, 2002);
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
}

Test(breaker, failure_ratio_opens_a_flapping_dependency, .timeout = 10)
{
    const struct cg_breaker_policy p = {.failure_threshold = 100,
                                        .ratio_window = 10,
                                        .ratio_min_calls = 10,
                                        .failure_ratio = 0.5,
                                        .cooldown_ms = 1000};
    struct cg_breaker b;
    cg_breaker_init(&b);
    /* Alternating: no two failures in a row, but half of the calls fail. */
    for (int i = 0; i < 9; i++)
        cr_assert(call(&b, &p, i % 2 == 0, i)); /* s f s f s f s f s: 4 failures */
    cr_assert_eq(b.state, CG_BREAKER_CLOSED, "fewer outcomes than ratio_min_calls");
    cr_assert(call(&b, &p, true, 9)); /* 10 outcomes, 4 failures */
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert(call(&b, &p, false, 10)); /* the window slides: 5 of the last 10 */
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
}

Test(breaker, old_failures_slide_out_of_the_window, .timeout = 10)
{
    const struct cg_breaker_policy p = {.failure_threshold = 100,
                                        .ratio_window = 4,
                                        .ratio_min_calls = 4,
                                        .failure_ratio = 0.75,
                                        .cooldown_ms = 1000};
    struct cg_breaker b;
    cg_breaker_init(&b);
    /* f f s s s f s f f (true = success): the last four outcomes hold 2, 1, 1, 1, 2 failures,
     * then 3 of 4 with the last one. */
    const bool outcomes[] = {false, false, true, true, true, false, true, false, false};
    for (size_t i = 0; i < 8; i++) {
        cr_assert(call(&b, &p, outcomes[i], (int64_t)i));
        cr_assert_eq(b.state, CG_BREAKER_CLOSED, "after outcome %zu", i);
    }
    cr_assert(call(&b, &p, outcomes[8], 8));
    cr_assert_eq(b.state, CG_BREAKER_OPEN);
}

Test(breaker, odd_policies_are_clamped, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    const struct cg_breaker_policy zero = {.failure_threshold = 0, .cooldown_ms = -5};
    cr_assert(call(&b, &zero, false, 0));
    cr_assert_eq(b.state, CG_BREAKER_OPEN, "threshold 0 counts as 1");
    cr_assert(call(&b, &zero, true, 0), "negative cool-down counts as 0");
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);

    const struct cg_breaker_policy nan_ratio = {.failure_threshold = 1000,
                                                .ratio_window = 8,
                                                .ratio_min_calls = 1,
                                                .failure_ratio = NAN,
                                                .cooldown_ms = 10};
    cg_breaker_init(&b);
    for (int i = 0; i < 50; i++)
        cr_assert(call(&b, &nan_ratio, false, i));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED, "a NaN ratio turns the rule off");

    const struct cg_breaker_policy wide = {.failure_threshold = 1000,
                                           .ratio_window = 500,
                                           .ratio_min_calls = 1000,
                                           .failure_ratio = 1.0,
                                           .cooldown_ms = 10};
    cg_breaker_init(&b);
    for (int i = 0; i < CG_BREAKER_WINDOW_MAX - 1; i++)
        cr_assert(call(&b, &wide, false, i));
    cr_assert_eq(b.state, CG_BREAKER_CLOSED);
    cr_assert(call(&b, &wide, false, 64));
    cr_assert_eq(b.state, CG_BREAKER_OPEN, "window and min_calls clamp to 64");
}

Test(breaker, a_clock_that_goes_back_keeps_it_open, .timeout = 10)
{
    struct cg_breaker b;
    cg_breaker_init(&b);
    open_breaker(&b, &consecutive3, 10000);
    cr_assert_not(cg_breaker_acquire(&b, &consecutive3, 0).allowed);
    cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, 0), 1000);
    cr_assert_not(cg_breaker_acquire(&b, &consecutive3, INT64_MIN).allowed);
    cr_assert(cg_breaker_acquire(&b, &consecutive3, INT64_MAX).allowed, "no overflow");
}

Test(breaker, state_names, .timeout = 10)
{
    cr_assert_str_eq(cg_breaker_state_name(CG_BREAKER_CLOSED), "closed");
    cr_assert_str_eq(cg_breaker_state_name(CG_BREAKER_OPEN), "open");
    cr_assert_str_eq(cg_breaker_state_name(CG_BREAKER_HALF_OPEN), "half_open");
    cr_assert_str_eq(cg_breaker_state_name((cg_breaker_state)9), "unknown");
}

/* Every sequence of up to 12 outcomes, against the rules stated directly: the breaker opens
 * at the first outcome after which the last 3 were failures, or the last min(n, 6) outcomes
 * (at least 4 of them) are at least half failures; until then it stays closed. */
Test(breaker, every_outcome_sequence_opens_exactly_when_the_rules_say, .timeout = 30)
{
    const struct cg_breaker_policy p = {.failure_threshold = 3,
                                        .ratio_window = 6,
                                        .ratio_min_calls = 4,
                                        .failure_ratio = 0.5,
                                        .cooldown_ms = 100};
    for (int len = 1; len <= 12; len++) {
        for (uint32_t bits = 0; bits < (1u << len); bits++) {
            struct cg_breaker b;
            cg_breaker_init(&b);
            int expected_open_at = -1;
            for (int i = 0; i < len && expected_open_at < 0; i++) {
                int run = 0;
                for (int j = i; j >= 0 && ((bits >> j) & 1); j--)
                    run++;
                int n = i + 1 < 6 ? i + 1 : 6, fails = 0;
                for (int j = i - n + 1; j <= i; j++)
                    fails += (bits >> j) & 1;
                if (run >= 3 || (n >= 4 && 2 * fails >= n))
                    expected_open_at = i;
            }
            for (int i = 0; i < len; i++) {
                bool allowed = call(&b, &p, !((bits >> i) & 1), i);
                bool should_go = expected_open_at < 0 || i <= expected_open_at;
                cr_assert_eq(allowed, should_go, "len %d bits %x outcome %d", len, bits, i);
                bool open = b.state == CG_BREAKER_OPEN;
                cr_assert_eq(open, expected_open_at >= 0 && i >= expected_open_at,
                             "len %d bits %x outcome %d", len, bits, i);
            }
        }
    }
}

/* From OPEN, every (probe start, probe outcome) pair over a range of times. */
Test(breaker, every_probe_time_and_outcome, .timeout = 30)
{
    for (int64_t start = 900; start <= 1100; start++) {
        for (int success = 0; success <= 1; success++) {
            struct cg_breaker b;
            cg_breaker_init(&b);
            open_breaker(&b, &consecutive3, 0);
            struct cg_breaker_ticket t = cg_breaker_acquire(&b, &consecutive3, start);
            cr_assert_eq(t.allowed, start >= 1000, "start %lld", (long long)start);
            if (!t.allowed) {
                cr_assert_eq(b.state, CG_BREAKER_OPEN);
                continue;
            }
            cg_breaker_record(&b, &consecutive3, t, success, start + 50);
            cr_assert_eq(b.state, success ? CG_BREAKER_CLOSED : CG_BREAKER_OPEN);
            cr_assert_eq(cg_breaker_wait_ms(&b, &consecutive3, start + 50), success ? 0 : 1000);
        }
    }
}

/* history.c - the steps of a usage history (history.h). */
#include "core/history.h"

#include <string.h>

#define MINUTE_MS (60 * 1000LL)
#define HOUR_MS (3600 * 1000LL)
#define DAY_MS (86400 * 1000LL)
/* Far enough for any chart, small enough that no sum below overflows. */
#define TIME_MAX_MS (1LL << 50)

static const int64_t auto_steps_s[] = {60, 300, 900, 3600, 21600, 86400, 604800};

static int64_t floor_to(int64_t v, int64_t m)
{
    return v - v % m; /* v >= 0 */
}

static int64_t ceil_to(int64_t v, int64_t m)
{
    return v % m == 0 ? v : v - v % m + m;
}

void cg_history_forecast(int64_t remaining, int64_t spent, int64_t window_ms, int64_t now_ms,
                         struct cg_forecast *out)
{
    memset(out, 0, sizeof *out);
    if (window_ms <= 0 || spent <= 0)
        return;
    out->tokens_per_minute = (double)spent * (double)MINUTE_MS / (double)window_ms;
    if (remaining <= 0)
        return;
    out->seconds = (double)remaining / out->tokens_per_minute * 60.0;
    /* A forecast past the far future (a trickle against a huge budget) stays a number of
     * seconds, without a date that would overflow. */
    if (out->seconds < (double)TIME_MAX_MS / 1000.0)
        out->exhaustion_ms = now_ms + (int64_t)(out->seconds * 1000.0);
}

cg_status cg_history_plan(const struct cg_history_ask *ask, int64_t now_ms,
                          struct cg_history_plan *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    if (ask->from_ms < 0 || ask->from_ms > TIME_MAX_MS)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field 'from_unix_ms' must be 0..%lld (unix ms), not %lld",
                          (long long)TIME_MAX_MS, (long long)ask->from_ms);
    if (ask->to_ms < 0 || ask->to_ms > TIME_MAX_MS)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field 'to_unix_ms' must be 0..%lld (unix ms), not %lld",
                          (long long)TIME_MAX_MS, (long long)ask->to_ms);
    if (ask->step_s < 0 || ask->step_s % 60 != 0 || ask->step_s > CG_HISTORY_STEP_MAX_S)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field 'step_seconds' must be a multiple of 60 up to %d (or 0), not %lld",
                          CG_HISTORY_STEP_MAX_S, (long long)ask->step_s);
    int64_t to = ask->to_ms ? ask->to_ms : now_ms;
    if (to < 0)
        to = 0;
    if (ask->from_ms != 0 && ask->from_ms > to)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field 'from_unix_ms' (%lld) is after to_unix_ms (%lld)",
                          (long long)ask->from_ms, (long long)to);
    int64_t step_ms = ask->step_s * 1000;
    if (step_ms == 0) {
        int64_t span = ask->from_ms ? to - ask->from_ms : CG_HISTORY_DEFAULT_STEPS * MINUTE_MS;
        size_t n = sizeof auto_steps_s / sizeof auto_steps_s[0];
        step_ms = auto_steps_s[n - 1] * 1000;
        for (size_t i = 0; i < n; i++)
            if (span <= auto_steps_s[i] * 1000 * CG_HISTORY_AUTO_STEPS) {
                step_ms = auto_steps_s[i] * 1000;
                break;
            }
    }
    int64_t from = ask->from_ms ? ask->from_ms : to - CG_HISTORY_DEFAULT_STEPS * step_ms;
    if (from < 0)
        from = 0;
    out->step_ms = step_ms;
    out->from_ms = floor_to(from, step_ms);
    out->to_ms = ceil_to(to, step_ms);
    if (out->to_ms == out->from_ms)
        out->to_ms += step_ms; /* an empty range is the step that holds it */
    int64_t points = (out->to_ms - out->from_ms) / step_ms;
    if (points > CG_HISTORY_POINTS_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field 'step_seconds': %lld steps of %llds cover the range; at most %d "
                          "(ask for a longer step or a shorter range)",
                          (long long)points, (long long)(step_ms / 1000), CG_HISTORY_POINTS_MAX);
    out->points = (int)points;
    out->resolution = step_ms % DAY_MS == 0 ? 3 : step_ms % HOUR_MS == 0 ? 2 : 1;
    return CG_OK;
}

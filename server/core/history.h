/* history.h - the steps of a usage history: which range, which step and which stored
 * resolution answer a GetUsageHistory request (proto: GetUsageHistoryRequest).
 *
 * Pure: the clock comes in as an argument. No I/O, no globals; thread-safe.
 *
 * Rules:
 * - A step is a multiple of 60 s, at most CG_HISTORY_STEP_MAX_S. A multiple of a day is
 *   summed from daily buckets, of an hour from hourly ones, else from minutes.
 * - to 0 means now; from 0 means 60 steps before to. from is rounded down and to up to a
 *   multiple of the step from the epoch, so steps line up across calls.
 * - Step 0: the first of 60, 300, 900, 3600, 21600, 86400, 604800 s that covers [from, to)
 *   in at most CG_HISTORY_AUTO_STEPS steps (the largest if none does); with from 0, a
 *   minute (so the last hour by default).
 * - At most CG_HISTORY_POINTS_MAX steps.
 */
#ifndef CG_CORE_HISTORY_H
#define CG_CORE_HISTORY_H

#include <stdint.h>

#include "base/status.h"

#define CG_HISTORY_STEP_MAX_S (366 * 86400)
#define CG_HISTORY_POINTS_MAX 10000
#define CG_HISTORY_AUTO_STEPS 400
#define CG_HISTORY_DEFAULT_STEPS 60

/* What a request asked for: unix ms and seconds, as sent (0s meaning "choose"). */
struct cg_history_ask {
    int64_t from_ms;
    int64_t to_ms;
    int64_t step_s;
};

/* What answers it. resolution: 1 minute, 2 hour, 3 day (store.h cg_rollup_resolution). */
struct cg_history_plan {
    int64_t from_ms; /* a multiple of step_ms */
    int64_t to_ms;   /* a multiple of step_ms, > from_ms */
    int64_t step_ms;
    int resolution;
    int points; /* (to_ms - from_ms) / step_ms, 1..CG_HISTORY_POINTS_MAX */
};

/* When a budget runs out at its recent spend rate. */
struct cg_forecast {
    double tokens_per_minute;
    double seconds;        /* to exhaustion; 0 when nothing is spent or nothing remains */
    int64_t exhaustion_ms; /* unix ms; 0 likewise */
};

/* The forecast at now_ms of a budget with remaining tokens left that counted spent tokens in
 * the last window_ms (> 0). */
void cg_history_forecast(int64_t remaining, int64_t spent, int64_t window_ms, int64_t now_ms,
                         struct cg_forecast *out);

/* Plans ask at now_ms. CG_INVALID_ARGUMENT naming the field (from_unix_ms, to_unix_ms,
 * step_seconds) when it cannot be answered. */
cg_status cg_history_plan(const struct cg_history_ask *ask, int64_t now_ms,
                          struct cg_history_plan *out, struct cg_err *err) CG_MUST_CHECK;

#endif

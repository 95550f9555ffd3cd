/* backoff.h - when to retry a failed request: exponential backoff with full jitter, the
 * server's Retry-After, and the caller's deadline.
 *
 * Pure: the clock and the random numbers come in as arguments. No I/O, no globals;
 * thread-safe.
 *
 * Rules:
 * - Retry number k (k = 1 for the first retry) waits a uniformly drawn delay in
 *   [0, min(max_ms, base_ms * 2^(k-1))] ("full jitter"), unless the server named a delay.
 * - A delay the server names (Retry-After, retry-after-ms) is waited for in full, never
 *   shortened: when it is longer than max_retry_after_ms or would leave less than
 *   min_attempt_ms before the deadline, there is no retry.
 * - A jittered delay is shortened to fit before the deadline (leaving min_attempt_ms for the
 *   attempt); when even a retry right away would not leave that, there is no retry.
 * - At most max_retries retries, so at most max_retries + 1 attempts.
 */
#ifndef CG_CORE_BACKOFF_H
#define CG_CORE_BACKOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_BACKOFF_RETRIES_MAX 100
#define CG_BACKOFF_DELAY_MAX_MS (24LL * 3600 * 1000) /* a day: anything longer is absurd */

struct cg_backoff_policy {
    int max_retries;            /* retries after the first attempt, 0..CG_BACKOFF_RETRIES_MAX */
    int64_t base_ms;            /* ceiling of the first retry's delay, >= 1 */
    int64_t max_ms;             /* cap of the ceiling, >= base_ms */
    int64_t max_retry_after_ms; /* a server-named delay longer than this ends the retries */
};

/* Why cg_backoff_next said no (or CG_BACKOFF_RETRY when it said yes). */
typedef enum {
    CG_BACKOFF_RETRY = 0,
    CG_BACKOFF_NO_RETRIES_LEFT,  /* max_retries reached */
    CG_BACKOFF_NO_TIME_LEFT,     /* the delay and an attempt do not fit before the deadline */
    CG_BACKOFF_RETRY_AFTER_LONG, /* the server asked for more than max_retry_after_ms */
} cg_backoff_verdict;

/* The jittered delay before retry number `retry` (1-based): `random` (any 64-bit value,
 * uniformly drawn by the caller) reduced to [0, min(max_ms, base_ms * 2^(retry-1))].
 * Out-of-range policy fields are clamped (base_ms to >= 1, max_ms to >= base_ms and
 * <= CG_BACKOFF_DELAY_MAX_MS); retry < 1 counts as 1. Never negative, never overflows. */
int64_t cg_backoff_delay(const struct cg_backoff_policy *policy, int retry, uint64_t random);

/* Decides whether to retry after `attempts` (>= 1) attempts have failed, at now_ms, for a
 * call that must end by deadline_ms (same clock). retry_after_ms is the delay the server
 * named for the last failure, or < 0 when it named none. min_attempt_ms is the least time
 * an attempt needs to be worth starting. On CG_BACKOFF_RETRY, *delay_ms (not NULL) is how
 * long to wait before the next attempt; otherwise it is set to 0. */
cg_backoff_verdict cg_backoff_next(const struct cg_backoff_policy *policy, int attempts,
                                   int64_t retry_after_ms, int64_t now_ms, int64_t deadline_ms,
                                   int64_t min_attempt_ms, uint64_t random, int64_t *delay_ms);

/* Parses the value of a Retry-After header (RFC 9110 §10.2.3): delta-seconds ("120") or an
 * IMF-fixdate ("Wed, 21 Oct 2015 07:28:00 GMT"), with optional surrounding spaces or tabs.
 * value has len bytes (need not be NUL-terminated). A date is turned into a delay from
 * now_wall_ms (milliseconds since the Unix epoch); a date in the past gives 0. Delays are
 * capped at CG_BACKOFF_DELAY_MAX_MS. Returns false (and leaves *delay_ms alone) for anything
 * else, including negative numbers, fractions and the obsolete date formats. */
bool cg_backoff_parse_retry_after(const char *value, size_t len, int64_t now_wall_ms,
                                  int64_t *delay_ms);

/* Parses the value of a retry-after-ms header (sent by OpenAI's API): a non-negative decimal
 * number of milliseconds, fraction allowed ("250", "1.5"); rounded up to whole milliseconds
 * and capped at CG_BACKOFF_DELAY_MAX_MS. Returns false for anything else. */
bool cg_backoff_parse_retry_after_ms(const char *value, size_t len, int64_t *delay_ms);

#endif

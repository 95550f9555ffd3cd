/* ratelimit.h - token buckets per caller: each key (16 bytes, e.g. a hash of a bearer token)
 * may make `burst` requests at once and then `rate_per_min` a minute. A bounded table: when
 * full, the least recently used bucket among those a key probes is reused (its key starts
 * again with a full bucket: a bound on memory, not on abuse by someone with many keys).
 *
 * Pure: the clock comes in as an argument. Not thread-safe (one owner: the HTTP listener's
 * thread).
 */
#ifndef CG_CORE_RATELIMIT_H
#define CG_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_RATE_KEY_BYTES 16

struct cg_rate_limiter;

/* capacity (rounded up to a power of two, at least 16) buckets; rate_per_min > 0, burst >= 1.
 * NULL when out of memory. */
struct cg_rate_limiter *cg_rate_limiter_new(size_t capacity, int64_t rate_per_min, int64_t burst);
void cg_rate_limiter_free(struct cg_rate_limiter *l);

/* Takes one request of key at now_ms (a monotonic clock): true when allowed; false when the
 * bucket is empty, with *retry_ms the wait until it holds one again. */
bool cg_rate_limiter_take(struct cg_rate_limiter *l, const uint8_t key[CG_RATE_KEY_BYTES],
                          int64_t now_ms, int64_t *retry_ms);

#endif

/* test_ratelimit.c - token buckets per caller: the burst, the refill, the wait, keys apart,
 * and a full table. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/ratelimit.h"

static void key_of(int n, uint8_t key[CG_RATE_KEY_BYTES])
{
    memset(key, 0, CG_RATE_KEY_BYTES);
    /* Spread like a hash would be (the table takes the first bytes as one). */
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ULL;
    memcpy(key, &h, sizeof h);
    key[15] = (uint8_t)n;
}

Test(ratelimit, a_burst_then_the_rate, .timeout = 10)
{
    struct cg_rate_limiter *l = cg_rate_limiter_new(64, 60, 3); /* 1 a second, 3 at once */
    uint8_t k[CG_RATE_KEY_BYTES];
    key_of(1, k);
    int64_t wait;
    for (int i = 0; i < 3; i++)
        cr_assert(cg_rate_limiter_take(l, k, 1000, &wait), "request %d of the burst", i);
    cr_assert(!cg_rate_limiter_take(l, k, 1000, &wait));
    cr_assert(wait >= 1000 && wait <= 1001, "%lld", (long long)wait);
    cr_assert(!cg_rate_limiter_take(l, k, 1999, &wait));
    cr_assert(wait >= 1 && wait <= 2, "%lld", (long long)wait);
    cr_assert(cg_rate_limiter_take(l, k, 2000, &wait), "one back after a second");
    cr_assert(!cg_rate_limiter_take(l, k, 2000, &wait));
    /* A long rest fills the bucket to the burst, not beyond. */
    for (int i = 0; i < 3; i++)
        cr_assert(cg_rate_limiter_take(l, k, 600000, &wait));
    cr_assert(!cg_rate_limiter_take(l, k, 600000, &wait));
    /* A clock that steps back takes nothing away and gives nothing. */
    cr_assert(!cg_rate_limiter_take(l, k, 500000, &wait));
    cg_rate_limiter_free(l);
}

Test(ratelimit, keys_have_buckets_of_their_own, .timeout = 10)
{
    struct cg_rate_limiter *l = cg_rate_limiter_new(64, 1, 2);
    uint8_t a[CG_RATE_KEY_BYTES], b[CG_RATE_KEY_BYTES];
    key_of(1, a);
    key_of(2, b);
    int64_t wait;
    cr_assert(cg_rate_limiter_take(l, a, 0, &wait));
    cr_assert(cg_rate_limiter_take(l, a, 0, &wait));
    cr_assert(!cg_rate_limiter_take(l, a, 0, &wait));
    cr_assert_eq(wait, 60001);
    cr_assert(cg_rate_limiter_take(l, b, 0, &wait), "b is not a's");
    cg_rate_limiter_free(l);
}

Test(ratelimit, a_full_table_reuses_the_least_recently_used, .timeout = 10)
{
    struct cg_rate_limiter *l = cg_rate_limiter_new(16, 1, 1);
    int64_t wait;
    uint8_t k[CG_RATE_KEY_BYTES];
    /* 1,000 keys through 16 buckets: every new key is served (a reused bucket starts full),
     * and the table never grows. */
    for (int n = 0; n < 1000; n++) {
        key_of(n, k);
        cr_assert(cg_rate_limiter_take(l, k, n, &wait), "key %d", n);
    }
    /* The most recent key is still limited. */
    key_of(999, k);
    cr_assert(!cg_rate_limiter_take(l, k, 1000, &wait));
    cr_assert_null(cg_rate_limiter_new(16, 0, 1));
    cr_assert_null(cg_rate_limiter_new(16, 1, 0));
    cg_rate_limiter_free(l);
    cg_rate_limiter_free(NULL);
}

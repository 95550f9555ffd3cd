/* test_hash64.c - the table hash (core/hash64.h): the same bytes and seed give the same
 * value, and every byte, the length and the seed move it. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "core/hash64.h"

Test(hash64, every_byte_the_length_and_the_seed_count, .timeout = 10)
{
    char buf[41];
    for (int i = 0; i < 40; i++)
        buf[i] = (char)('a' + i % 26);
    buf[40] = '\0';
    for (size_t n = 0; n <= 40; n++) {
        uint64_t h = cg_hash64(7, buf, n);
        cr_assert_eq(h, cg_hash64(7, buf, n), "deterministic");
        cr_assert_neq(h, cg_hash64(8, buf, n), "the seed counts (n %zu)", n);
        if (n > 0)
            cr_assert_neq(h, cg_hash64(7, buf, n - 1), "the length counts (n %zu)", n);
        for (size_t i = 0; i < n; i++) {
            char copy[41];
            memcpy(copy, buf, sizeof copy);
            copy[i] ^= 1;
            cr_assert_neq(h, cg_hash64(7, copy, n), "byte %zu of %zu counts", i, n);
        }
    }
    /* A zero tail is not the same as a shorter string. */
    char zeros[16] = {0};
    cr_assert_neq(cg_hash64(0, zeros, 3), cg_hash64(0, zeros, 4));
}

Test(hash64, mix_moves_every_bit, .timeout = 10)
{
    for (int bit = 0; bit < 64; bit++) {
        uint64_t a = cg_mix64(0x0123456789abcdefULL),
                 b = cg_mix64(0x0123456789abcdefULL ^ (1ULL << bit));
        int changed = __builtin_popcountll(a ^ b);
        cr_assert(changed > 10 && changed < 54, "bit %d moved %d bits", bit, changed);
    }
}

/* hash64.c - see hash64.h. */
#include "core/hash64.h"

#include <string.h>

uint64_t cg_mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

uint64_t cg_hash64(uint64_t seed, const void *data, size_t n)
{
    const char *p = data;
    uint64_t h = seed ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x87c37b91114253d5ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    return cg_mix64(h ^ w);
}

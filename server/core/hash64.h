/* hash64.h - a fast seeded 64-bit hash of a byte string, eight bytes a step, for hash
 * tables and names (the process cache's entry names, the prepared statements' names). Not
 * keyed against attackers beyond its seed: SipHash (core/siphash.h) is for that.
 */
#ifndef CG_CORE_HASH64_H
#define CG_CORE_HASH64_H

#include <stddef.h>
#include <stdint.h>

/* The final mix of MurmurHash3 (fmix64): every bit of x moves every bit of the result. */
uint64_t cg_mix64(uint64_t x);

/* The hash of the n bytes at p under seed. */
uint64_t cg_hash64(uint64_t seed, const void *p, size_t n);

#endif

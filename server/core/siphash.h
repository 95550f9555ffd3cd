/* siphash.h - SipHash-2-4 (Aumasson and Bernstein): a keyed hash, 64 or 128 bits out.
 *
 * A streamed form (cg_sip_init, cg_sip_byte, cg_sip_final64) for input read a byte at a
 * time, and one call over a buffer (cg_siphash128). Keys are two 64-bit words, the 16 key
 * bytes read little-endian. Outputs match the reference implementation's vectors
 * (tests/unit/test_siphash.c).
 */
#ifndef CG_CORE_SIPHASH_H
#define CG_CORE_SIPHASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct cg_sip {
    uint64_t v0, v1, v2, v3;
    uint64_t m; /* the bytes of the word being filled */
    size_t len; /* bytes taken so far */
};

static inline uint64_t cg_sip_rotl(uint64_t x, int b)
{
    return (x << b) | (x >> (64 - b));
}

static inline void cg_sip_round(struct cg_sip *h)
{
    h->v0 += h->v1;
    h->v1 = cg_sip_rotl(h->v1, 13);
    h->v1 ^= h->v0;
    h->v0 = cg_sip_rotl(h->v0, 32);
    h->v2 += h->v3;
    h->v3 = cg_sip_rotl(h->v3, 16);
    h->v3 ^= h->v2;
    h->v0 += h->v3;
    h->v3 = cg_sip_rotl(h->v3, 21);
    h->v3 ^= h->v0;
    h->v2 += h->v1;
    h->v1 = cg_sip_rotl(h->v1, 17);
    h->v1 ^= h->v2;
    h->v2 = cg_sip_rotl(h->v2, 32);
}

/* Starts a hash under key; wide for the 128-bit output (cg_sip_final128). */
void cg_sip_init(struct cg_sip *h, const uint64_t key[2], bool wide);

/* Takes the 8-byte word w (its bytes little-endian) into the state. */
static inline void cg_sip_word(struct cg_sip *h, uint64_t w)
{
    h->v3 ^= w;
    cg_sip_round(h);
    cg_sip_round(h);
    h->v0 ^= w;
}

/* Takes one byte. */
static inline void cg_sip_byte(struct cg_sip *h, unsigned char c)
{
    h->m |= (uint64_t)c << (8 * (h->len & 7));
    h->len++;
    if ((h->len & 7) == 0) {
        cg_sip_word(h, h->m);
        h->m = 0;
    }
}

/* The 64-bit hash of what was taken (a state started with wide = false). */
uint64_t cg_sip_final64(struct cg_sip *h);

/* The 128-bit hash of what was taken (a state started with wide = true), as the reference
 * implementation writes it: two little-endian words. */
void cg_sip_final128(struct cg_sip *h, uint8_t out[16]);

/* SipHash-2-4-128 of n bytes at p under key. */
void cg_siphash128(const uint64_t key[2], const void *p, size_t n, uint8_t out[16]);

#endif

/* siphash.c - SipHash-2-4, the parts that are not inline (see siphash.h). */
#include "core/siphash.h"

#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "siphash.c reads words in the host's byte order: little-endian only"
#endif

void cg_sip_init(struct cg_sip *h, const uint64_t key[2], bool wide)
{
    h->v0 = key[0] ^ 0x736f6d6570736575ULL;
    h->v1 = key[1] ^ 0x646f72616e646f6dULL;
    h->v2 = key[0] ^ 0x6c7967656e657261ULL;
    h->v3 = key[1] ^ 0x7465646279746573ULL;
    if (wide)
        h->v1 ^= 0xee;
    h->m = 0;
    h->len = 0;
}

/* The last word (what is left, and the length's low byte on top), then the first
 * finalization's constant: xff for 64 bits, xee for 128. */
static void finish(struct cg_sip *h, uint64_t constant)
{
    cg_sip_word(h, h->m | ((uint64_t)(h->len & 0xff) << 56));
    h->v2 ^= constant;
    for (int r = 0; r < 4; r++)
        cg_sip_round(h);
}

uint64_t cg_sip_final64(struct cg_sip *h)
{
    finish(h, 0xff);
    return h->v0 ^ h->v1 ^ h->v2 ^ h->v3;
}

void cg_sip_final128(struct cg_sip *h, uint8_t out[16])
{
    finish(h, 0xee);
    uint64_t a = h->v0 ^ h->v1 ^ h->v2 ^ h->v3;
    h->v1 ^= 0xdd;
    for (int r = 0; r < 4; r++)
        cg_sip_round(h);
    uint64_t b = h->v0 ^ h->v1 ^ h->v2 ^ h->v3;
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

void cg_siphash128(const uint64_t key[2], const void *p, size_t n, uint8_t out[16])
{
    struct cg_sip h;
    cg_sip_init(&h, key, true);
    const unsigned char *s = p;
    size_t whole = n & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        cg_sip_word(&h, w);
    }
    h.len = whole;
    for (size_t i = whole; i < n; i++)
        cg_sip_byte(&h, s[i]);
    cg_sip_final128(&h, out);
}

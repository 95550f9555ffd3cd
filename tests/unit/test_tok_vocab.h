/* test_tok_vocab.h - rank data the token tests make themselves: every byte value (ranks
 * 0..255, so that any text can be counted) plus the merges a test lists, in the compact
 * form of core/tok.h. The SHA-256 field is filled by the caller when it matters
 * (base/tokdata checks it, the core does not). */
#ifndef TEST_TOK_VOCAB_H
#define TEST_TOK_VOCAB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/tok.h"

struct vocab {
    unsigned char *data;
    size_t len;
};

static void put_u32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* merges[k] gets rank 256 + k; NULL-terminated. */
static struct vocab vocab_make(const char *name, const char *const *merges)
{
    size_t n_merges = 0, blob = 256;
    while (merges != NULL && merges[n_merges] != NULL)
        blob += strlen(merges[n_merges++]);
    size_t n = 256 + n_merges;
    struct vocab v;
    v.len = CG_TOK_HEADER_SIZE + n * 5 + blob;
    v.data = calloc(1, v.len);
    memcpy(v.data, CG_TOK_MAGIC, 8);
    memcpy(v.data + 8, name, strlen(name));
    put_u32(v.data + 24, (uint32_t)n);
    put_u32(v.data + 28, (uint32_t)blob);
    unsigned char *rec = v.data + CG_TOK_HEADER_SIZE, *bytes = rec + n * 5;
    for (size_t r = 0; r < n; r++) {
        const unsigned char *tok;
        unsigned char one;
        size_t tlen;
        if (r < 256) {
            one = (unsigned char)r;
            tok = &one;
            tlen = 1;
        } else {
            tok = (const unsigned char *)merges[r - 256];
            tlen = strlen(merges[r - 256]);
        }
        put_u32(rec + r * 5, (uint32_t)r);
        rec[r * 5 + 4] = (unsigned char)tlen;
        memcpy(bytes, tok, tlen);
        bytes += tlen;
    }
    return v;
}

#endif

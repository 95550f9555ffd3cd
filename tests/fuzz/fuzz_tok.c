/* fuzz_tok.c - the exact token counter on arbitrary bytes, both encodings.
 *
 * Uses the real rank data from the build's share/ctxguard when it is there (CG_TOKDATA=ON),
 * otherwise generated vocabularies (every byte plus a few merges) under both patterns. The
 * first input byte picks the options; the rest is the text. Invariants checked:
 *  - a non-empty text counts at least 1 token and at most as many as its bytes after the
 *    replacement of ill-formed sequences (3 per input byte at worst);
 *  - the pieces of valid UTF-8 partition it, and their merge counts add up to the count;
 *  - count-until-limit is exact at the limit and stops above it;
 *  - counting twice gives the same result. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../unit/test_tok_vocab.h"
#include "base/tokdata.h"
#include "core/tok.h"
#include "core/utf8.h"

static struct cg_tok_encoding *encs[2];

static struct cg_tok_encoding *load(const char *name)
{
    struct cg_tokdata data;
    struct cg_err err;
    struct cg_tok_encoding *enc = NULL;
    if (cg_tokdata_load(NULL, name, &data, &err) == CG_OK) {
        if (cg_tok_encoding_new(data.data, data.len, &enc, &err) != CG_OK)
            abort();
        cg_tokdata_cleanup(&data);
        return enc;
    }
    const char *merges[] = {"ab", "abc", "  ",       "\n\n",         "th", "the", " the",
                            "12", "123", "\xE4\xB8", "\xE4\xB8\xAD", "<|", "|>",  NULL};
    struct vocab v = vocab_make(name, merges);
    if (cg_tok_encoding_new(v.data, v.len, &enc, &err) != CG_OK)
        abort();
    free(v.data);
    return enc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (encs[0] == NULL) {
        encs[0] = load("cl100k_base");
        encs[1] = load("o200k_base");
    }
    if (size == 0)
        return 0;
    unsigned opts = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const struct cg_tok_encoding *enc = encs[opts & 1];
    bool special = (opts & 2) != 0;
    int64_t c = cg_tok_count(enc, text, len, special);
    if (c < 0 || (len > 0 && c < 1) || c > (int64_t)len * 3)
        abort();
    if (cg_tok_count(enc, text, len, special) != c)
        abort();
    if (cg_tok_count_limit(enc, text, len, special, c) != c)
        abort();
    if (c > 0 && cg_tok_count_limit(enc, text, len, special, c - 1) <= c - 1)
        abort();
    if (!special && cg_utf8_valid(text, len, NULL)) {
        if (c > (int64_t)len)
            abort();
        cg_tok_pattern pattern = (opts & 1) ? CG_TOK_PATTERN_O200K : CG_TOK_PATTERN_CL100K;
        int64_t sum = 0;
        for (size_t i = 0; i < len;) {
            size_t e = cg_tok_piece_end(pattern, text, len, i);
            if (e <= i || e > len)
                abort();
            sum += cg_tok_piece_count(enc, text + i, e - i);
            i = e;
        }
        if (sum != c)
            abort();
    } else {
        /* the pre-tokenizer is memory-safe on any bytes */
        for (size_t i = 0; i < len;) {
            size_t e = cg_tok_piece_end((opts & 4) ? CG_TOK_PATTERN_O200K : CG_TOK_PATTERN_CL100K,
                                        text, len, i);
            if (e <= i || e > len)
                abort();
            i = e;
        }
    }
    return 0;
}

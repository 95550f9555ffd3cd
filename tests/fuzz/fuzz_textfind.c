/* fuzz_textfind.c - SearchHistory's matcher on hostile queries and texts. Byte 0: bit 0 regex,
 * bit 1 ignore case; byte 1: the query's length; then the query, then the text. Properties:
 * a query is accepted or refused with INVALID_ARGUMENT naming the field (never another
 * status); every match lies inside the text, is non-empty and starts at or after where the
 * search began (so a walk over the text always ends); a plain match equals the query (up to
 * ASCII case); snippets contain their match and stay inside the text. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/textfind.h"

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    bool regex = data[0] & 1, icase = data[0] & 2;
    size_t qlen = data[1];
    if (qlen > size - 2)
        qlen = size - 2;
    const char *query = (const char *)data + 2;
    size_t tlen = size - 2 - qlen;
    char *text = malloc(tlen + 1); /* NUL-terminated, as protobuf-c's strings are */
    if (text == NULL)
        return 0;
    memcpy(text, query + qlen, tlen);
    text[tlen] = '\0';
    struct cg_textfind *f = NULL;
    struct cg_err err = {0};
    cg_status st = cg_textfind_new(query, qlen, regex, icase, "query", &f, &err);
    if (st != CG_OK) {
        if (st != CG_INVALID_ARGUMENT || strstr(err.msg, "'query'") == NULL || f != NULL)
            abort();
        free(text);
        return 0;
    }
    size_t from = 0, start, mlen, n = 0;
    while (cg_textfind_next(f, text, tlen, from, &start, &mlen)) {
        if (mlen == 0 || start < from || start + mlen > tlen || ++n > tlen + 1)
            abort();
        if (!regex)
            for (size_t i = 0; i < mlen; i++)
                if ((icase ? lower((unsigned char)text[start + i])
                           : (unsigned char)text[start + i]) !=
                    (icase ? lower((unsigned char)query[i]) : (unsigned char)query[i]))
                    abort();
        size_t a, b;
        cg_textfind_snippet(text, tlen, start, mlen, data[0] >> 2, &a, &b);
        if (a > start || b < start + mlen || b > tlen)
            abort();
        from = start + mlen;
    }
    cg_textfind_free(f);
    free(text);
    return 0;
}

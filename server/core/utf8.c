/* utf8.c - a validator following the well-formed table of Unicode §3.9 (ASCII runs 8 bytes
 * at a time). */
#include "core/utf8.h"

#include <stdint.h>
#include <string.h>

bool cg_utf8_valid(const char *str, size_t len, size_t *bad_offset)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        if (c < 0x80) {
            /* ASCII runs 8 bytes at a time. */
            uint64_t w;
            i++;
            while (len - i >= 8 && (memcpy(&w, s + i, 8), (w & 0x8080808080808080ULL) == 0))
                i += 8;
            continue;
        }
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0; /* no overlongs */
            if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F; /* <= U+10FFFF */
        } else {
            goto bad;
        }
        if (need >= len - i) /* truncated sequence */
            goto bad;
        if (s[i + 1] < lo || s[i + 1] > hi)
            goto bad;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                goto bad;
        i += need + 1;
        continue;
    bad:
        if (bad_offset != NULL)
            *bad_offset = i;
        return false;
    }
    return true;
}

size_t cg_utf8_length(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if ((s[i] & 0xC0) != 0x80)
            n++;
    return n;
}

/* keyslot.c - Redis Cluster key slots (CRC16 with the hash tag rule) and the parsing of
 * MOVED/ASK redirections. */
#include "core/keyslot.h"

#include <string.h>

uint16_t cg_keyslot_crc16(const char *buf, size_t len)
{
    /* Bit by bit: the keys hashed here are a few dozen bytes (the hash tag only), so a
     * table would buy nothing measurable. */
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int cg_keyslot_of(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open != NULL) {
        size_t after = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - after);
        if (close != NULL && close > open + 1)
            return cg_keyslot_crc16(open + 1, (size_t)(close - open - 1)) % CG_KEYSLOT_COUNT;
    }
    return cg_keyslot_crc16(key, len) % CG_KEYSLOT_COUNT;
}

/* A decimal number of 1..9 digits in [s, s+n), at most max. -1 when it is not one. */
static long parse_decimal(const char *s, size_t n, long max)
{
    if (n == 0 || n > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= max ? v : -1;
}

cg_keyslot_redirect_kind cg_keyslot_redirect_parse(const char *text, size_t len,
                                                   struct cg_keyslot_redirect *out)
{
    cg_keyslot_redirect_kind kind;
    size_t skip;
    if (len > 6 && memcmp(text, "MOVED ", 6) == 0) {
        kind = CG_KEYSLOT_MOVED;
        skip = 6;
    } else if (len > 4 && memcmp(text, "ASK ", 4) == 0) {
        kind = CG_KEYSLOT_ASK;
        skip = 4;
    } else {
        return CG_KEYSLOT_NOT_REDIRECT;
    }
    const char *p = text + skip, *end = text + len;
    const char *space = memchr(p, ' ', (size_t)(end - p));
    if (space == NULL)
        return CG_KEYSLOT_NOT_REDIRECT;
    long slot = parse_decimal(p, (size_t)(space - p), CG_KEYSLOT_COUNT - 1);
    const char *endpoint = space + 1;
    const char *colon = NULL;
    for (const char *q = endpoint; q < end; q++) {
        if (*q == ':')
            colon = q;
        else if (*q == ' ' || (unsigned char)*q < 0x21 || (unsigned char)*q > 0x7e)
            return CG_KEYSLOT_NOT_REDIRECT;
    }
    if (slot < 0 || colon == NULL)
        return CG_KEYSLOT_NOT_REDIRECT;
    long port = parse_decimal(colon + 1, (size_t)(end - colon - 1), 65535);
    size_t host_len = (size_t)(colon - endpoint);
    if (port < 1 || host_len > CG_KEYSLOT_HOST_MAX)
        return CG_KEYSLOT_NOT_REDIRECT;
    out->slot = (int)slot;
    out->port = (int)port;
    memcpy(out->host, endpoint, host_len);
    out->host[host_len] = '\0';
    return kind;
}

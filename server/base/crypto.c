/* crypto.c - getrandom(2) for randomness, OpenSSL's libcrypto for SHA-256. */
#include "base/crypto.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdatomic.h>
#include <sys/random.h>

cg_status cg_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return CG_IO;
        }
        p += got;
        n -= (size_t)got;
    }
    return CG_OK;
}

void cg_sha256(const void *data, size_t len, uint8_t out[CG_SHA256_LEN])
{
    SHA256(data, len, out);
}

bool cg_equal_ct(const void *a, const void *b, size_t len)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= x[i] ^ y[i];
    return diff == 0;
}

void cg_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void cg_base64url_encode(const uint8_t *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
    }
    out[o] = '\0';
}

void cg_request_id(char out[17])
{
    /* Request ids need to be unique, not secret: a per-process random prefix and a
     * counter would do, but 8 random bytes keep ids unguessable across replicas too. */
    uint8_t raw[8];
    if (cg_random_bytes(raw, sizeof raw) != CG_OK) {
        static atomic_ulong counter;
        unsigned long c = atomic_fetch_add(&counter, 1);
        for (int i = 0; i < 8; i++)
            raw[i] = (uint8_t)(c >> (8 * i));
    }
    cg_hex_encode(raw, sizeof raw, out);
}

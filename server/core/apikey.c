/* apikey.c - parsing and formatting of API key text. */
#include "core/apikey.h"

#include <string.h>
#include <strings.h>

/* What each byte may be in a key: a hex digit (HEX) and/or a base64url character (B64). A
 * key is parsed on every call: a table read per byte, no branches per character class. */
enum { HEX = 1, B64 = 2 };
static const unsigned char char_class[256] = {
    ['0' ... '9'] = HEX | B64,
    ['a' ... 'f'] = HEX | B64,
    ['A' ... 'F'] = HEX | B64,
    ['g' ... 'z'] = B64,
    ['G' ... 'Z'] = B64,
    ['-'] = B64,
    ['_'] = B64,
};

static bool is_hex(char c)
{
    return char_class[(unsigned char)c] & HEX;
}

/* Whether all n bytes at s have the class bit: every byte read (no early exit). */
static bool all_of(const char *s, int n, unsigned char bit)
{
    unsigned char ok = bit;
    for (int i = 0; i < n; i++)
        ok &= char_class[(unsigned char)s[i]];
    return ok == bit;
}

static char lower(char c)
{
    return (c >= 'A' && c <= 'F') ? (char)(c - 'A' + 'a') : c;
}

bool cg_uuid_valid(const char *s)
{
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !is_hex(s[i]))
            return false;
    }
    return s[36] == '\0';
}

bool cg_apikey_bearer(const char *header, const char **token, size_t *len)
{
    if (header == NULL || strncasecmp(header, "bearer ", 7) != 0)
        return false;
    const char *p = header + 7;
    while (*p == ' ')
        p++;
    size_t n = strlen(p);
    while (n > 0 && p[n - 1] == ' ')
        n--;
    if (n == 0)
        return false;
    *token = p;
    *len = n;
    return true;
}

bool cg_apikey_parse(const char *t, size_t len, struct cg_apikey_parts *out)
{
    if (len != CG_APIKEY_LEN || strncmp(t, CG_APIKEY_PREFIX, 4) != 0)
        return false;
    const char *tenant = t + 4;
    const char *key = tenant + 33;
    const char *secret = key + CG_APIKEY_KEY_ID_CHARS + 1;
    if (tenant[32] != '_' || key[CG_APIKEY_KEY_ID_CHARS] != '_')
        return false;
    if (!all_of(tenant, 32, HEX) || !all_of(key, CG_APIKEY_KEY_ID_CHARS, HEX) ||
        !all_of(secret, CG_APIKEY_SECRET_CHARS, B64))
        return false;
    /* 32 hex digits -> 8-4-4-4-12 */
    int o = 0;
    for (int i = 0; i < 32; i++) {
        if (i == 8 || i == 12 || i == 16 || i == 20)
            out->tenant_id[o++] = '-';
        out->tenant_id[o++] = lower(tenant[i]);
    }
    out->tenant_id[o] = '\0';
    for (int i = 0; i < CG_APIKEY_KEY_ID_CHARS; i++)
        out->key_id[i] = lower(key[i]);
    out->key_id[CG_APIKEY_KEY_ID_CHARS] = '\0';
    return true;
}

bool cg_apikey_format(const char *tenant_id, const char *key_id, const char *secret_b64, char *out,
                      size_t cap)
{
    if (cap < CG_APIKEY_LEN + 1 || !cg_uuid_valid(tenant_id))
        return false;
    if (strlen(key_id) != CG_APIKEY_KEY_ID_CHARS || strlen(secret_b64) != CG_APIKEY_SECRET_CHARS)
        return false;
    if (!all_of(key_id, CG_APIKEY_KEY_ID_CHARS, HEX) ||
        !all_of(secret_b64, CG_APIKEY_SECRET_CHARS, B64))
        return false;
    size_t o = 0;
    memcpy(out, CG_APIKEY_PREFIX, 4);
    o = 4;
    for (int i = 0; i < 36; i++)
        if (tenant_id[i] != '-')
            out[o++] = lower(tenant_id[i]);
    out[o++] = '_';
    for (int i = 0; i < CG_APIKEY_KEY_ID_CHARS; i++)
        out[o++] = lower(key_id[i]);
    out[o++] = '_';
    memcpy(out + o, secret_b64, CG_APIKEY_SECRET_CHARS);
    o += CG_APIKEY_SECRET_CHARS;
    out[o] = '\0';
    return true;
}

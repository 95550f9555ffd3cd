/* notify.c - the pure parts of notification channels (notify.h). */
#include "core/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crypto.h"

bool cg_notify_event_type_ok(int t)
{
    /* UsageEventType: 3..11, 13 (OVERRUN) and 14 (FORECAST_EXHAUSTION); 1 SNAPSHOT,
     * 2 USAGE_CHANGED, 12 HEARTBEAT are stream bookkeeping, not news. */
    return (t >= 3 && t <= 11) || t == 13 || t == 14;
}

cg_status cg_notify_url_check(const char *url, const char *field, char *hint, size_t hint_len,
                              struct cg_err *err)
{
    if (hint_len > 0)
        hint[0] = '\0';
    size_t len = strlen(url);
    if (len == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
    if (len > CG_NOTIFY_URL_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' must be at most %d bytes", field,
                          CG_NOTIFY_URL_MAX);
    for (const unsigned char *p = (const unsigned char *)url; *p; p++)
        if (*p <= ' ' || *p == 0x7f)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "field '%s' must not hold spaces or control characters", field);
    size_t scheme;
    if (strncmp(url, "https://", 8) == 0)
        scheme = 8;
    else if (strncmp(url, "http://", 7) == 0)
        scheme = 7;
    else
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s' must start with https:// or http://", field);
    const char *host = url + scheme;
    size_t host_len = strcspn(host, "/?#");
    if (memchr(host, '@', host_len) != NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s' must not carry credentials (user@host)", field);
    if (host_len == 0 || host[0] == ':')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' has no host", field);
    if (scheme + host_len + 1 > hint_len || scheme + host_len + 1 > CG_NOTIFY_URL_HINT_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s': the host is too long", field);
    memcpy(hint, url, scheme + host_len);
    hint[scheme + host_len] = '\0';
    return CG_OK;
}

cg_status cg_notify_signature(const char *secret, int64_t t, const char *body, size_t len,
                              char out[CG_NOTIFY_SIGNATURE_MAX])
{
    char ts[24];
    int n = snprintf(ts, sizeof ts, "%" PRId64 ".", t);
    /* HMAC over "<t>." then the body: one buffer, as the receiver hashes it. */
    size_t total = (size_t)n + len;
    char *msg = malloc(total + 1);
    if (msg == NULL)
        return CG_NOMEM;
    memcpy(msg, ts, (size_t)n);
    memcpy(msg + n, body, len);
    uint8_t mac[CG_SHA256_LEN];
    cg_status st = cg_hmac_sha256(secret, strlen(secret), msg, total, mac);
    free(msg);
    if (st != CG_OK)
        return st;
    char hex[2 * CG_SHA256_LEN + 1];
    cg_hex_encode(mac, sizeof mac, hex);
    snprintf(out, CG_NOTIFY_SIGNATURE_MAX, "t=%" PRId64 ",v1=%s", t, hex);
    return CG_OK;
}

int64_t cg_notify_retry_ms(int n, int64_t base_ms, int64_t max_ms, uint64_t random)
{
    if (base_ms < 1)
        base_ms = 1;
    if (max_ms < base_ms)
        max_ms = base_ms;
    int64_t ceiling = base_ms;
    for (int i = 1; i < n && ceiling < max_ms; i++)
        ceiling = ceiling > max_ms / 2 ? max_ms : ceiling * 2;
    if (ceiling > max_ms)
        ceiling = max_ms;
    int64_t half = ceiling / 2;
    return half + (int64_t)(random % (uint64_t)(ceiling - half + 1));
}

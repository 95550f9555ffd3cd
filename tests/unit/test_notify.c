/* test_notify.c - the pure parts of notification channels: which URLs and event types a
 * channel may have, the webhook signature, the retry waits. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/crypto.h"
#include "core/notify.h"

static void url_ok(const char *url, const char *hint)
{
    char got[CG_NOTIFY_URL_HINT_MAX];
    struct cg_err err;
    cg_err_clear(&err);
    cr_assert_eq(cg_notify_url_check(url, "url", got, sizeof got, &err), CG_OK, "%s: %s", url,
                 err.msg);
    cr_assert_str_eq(got, hint);
}

static void url_bad(const char *url, const char *why)
{
    char got[CG_NOTIFY_URL_HINT_MAX];
    struct cg_err err;
    cg_err_clear(&err);
    cr_assert_eq(cg_notify_url_check(url, "url", got, sizeof got, &err), CG_INVALID_ARGUMENT, "%s",
                 url);
    cr_assert(strstr(err.msg, "'url'") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, why) != NULL, "'%s' does not say '%s'", err.msg, why);
}

Test(notify, urls_and_their_hints, .timeout = 10)
{
    url_ok("https://hooks.slack.com/services/T0/B0/XyZ", "https://hooks.slack.com");
    url_ok("http://10.0.0.5:8080/hook?x=1", "http://10.0.0.5:8080");
    url_ok("https://[::1]:9000", "https://[::1]:9000");
    url_ok("https://example.com#frag", "https://example.com");
    url_bad("", "required");
    url_bad("ftp://example.com/", "https://");
    url_bad("example.com/hook", "https://");
    url_bad("https:///hook", "no host");
    url_bad("https://:443/hook", "no host");
    url_bad("https://user:pw@example.com/", "credentials");
    url_bad("https://exa mple.com/", "spaces");
    url_bad("https://example.com/\n", "control");
    char long_url[CG_NOTIFY_URL_MAX + 16];
    memset(long_url, 'a', sizeof long_url - 1);
    long_url[sizeof long_url - 1] = '\0';
    memcpy(long_url, "https://x.io/", 13);
    url_bad(long_url, "at most");
}

Test(notify, only_news_is_sent_to_channels, .timeout = 10)
{
    const int ok[] = {3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14};
    const int no[] = {-1, 0, 1, 2, 12, 15, 99};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert(cg_notify_event_type_ok(ok[i]), "%d", ok[i]);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        cr_assert(!cg_notify_event_type_ok(no[i]), "%d", no[i]);
}

Test(notify, the_signature_is_hmac_over_timestamp_dot_body, .timeout = 10)
{
    const char *secret = "whsec_test";
    const char *body = "{\"type\":\"WARNING\"}";
    char sig[CG_NOTIFY_SIGNATURE_MAX];
    cr_assert_eq(cg_notify_signature(secret, 1700000000, body, strlen(body), sig), CG_OK);
    /* What a receiver computes, independently: HMAC(secret, "1700000000." + body). */
    char msg[128];
    int n = snprintf(msg, sizeof msg, "1700000000.%s", body);
    uint8_t mac[CG_SHA256_LEN];
    char hex[2 * CG_SHA256_LEN + 1], want[CG_NOTIFY_SIGNATURE_MAX];
    cr_assert_eq(cg_hmac_sha256(secret, strlen(secret), msg, (size_t)n, mac), CG_OK);
    cg_hex_encode(mac, sizeof mac, hex);
    snprintf(want, sizeof want, "t=1700000000,v1=%s", hex);
    cr_assert_str_eq(sig, want);
    /* Another time, body or secret: another signature. */
    char other[CG_NOTIFY_SIGNATURE_MAX];
    cr_assert_eq(cg_notify_signature(secret, 1700000001, body, strlen(body), other), CG_OK);
    cr_assert_str_neq(strchr(other, ','), strchr(sig, ','));
    cr_assert_eq(cg_notify_signature("whsec_other", 1700000000, body, strlen(body), other), CG_OK);
    cr_assert_str_neq(other, sig);
    cr_assert_eq(cg_notify_signature(secret, 1700000000, body, strlen(body) - 1, other), CG_OK);
    cr_assert_str_neq(other, sig);
}

Test(notify, retries_back_off_exponentially_with_jitter_and_a_cap, .timeout = 10)
{
    /* Ceilings 100, 200, 400, 800, then the cap 1000; the wait is in [ceiling/2, ceiling]. */
    const int64_t ceilings[] = {100, 200, 400, 800, 1000, 1000};
    for (int n = 1; n <= 6; n++) {
        int64_t c = ceilings[n - 1];
        cr_assert_eq(cg_notify_retry_ms(n, 100, 1000, 0), c / 2, "n %d", n);
        cr_assert_eq(cg_notify_retry_ms(n, 100, 1000, (uint64_t)(c - c / 2)), c, "n %d", n);
        for (uint64_t r = 0; r < 5000; r += 37) {
            int64_t w = cg_notify_retry_ms(n, 100, 1000, r * 2654435761u);
            cr_assert(w >= c / 2 && w <= c, "n %d: %lld", n, (long long)w);
        }
    }
    /* Huge attempt numbers and odd policies never overflow or go below a millisecond. */
    cr_assert_eq(cg_notify_retry_ms(1000000, 1000, INT64_MAX / 2, 0), INT64_MAX / 4);
    cr_assert(cg_notify_retry_ms(1, 0, 0, UINT64_MAX) >= 0);
    cr_assert_eq(cg_notify_retry_ms(3, 500, 100, 0), 250); /* max below base: base */
}

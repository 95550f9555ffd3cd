/* notify.h - the pure parts of notification channels: which URLs and event types a channel
 * may have, the signature of a webhook delivery, and when a failed delivery is tried again.
 *
 * Pure: the clock and random numbers come in as arguments. No I/O, no globals; thread-safe.
 *
 * Signature. A webhook delivery carries `Ctxguard-Signature: t=<unix seconds>,v1=<hex>`,
 * hex = HMAC-SHA256(secret, "<t>.<body>"): a receiver recomputes it over the raw body with
 * its copy of the secret, compares in constant time and refuses old timestamps (replays).
 *
 * Retries. Attempt n (n = 1 after the first failure) waits a uniformly drawn time in
 * [c/2, c], c = min(max_ms, base_ms * 2^(n-1)): exponential backoff with jitter that never
 * retries at once.
 */
#ifndef CG_CORE_NOTIFY_H
#define CG_CORE_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CG_NOTIFY_URL_MAX 2048       /* bytes of a channel's URL */
#define CG_NOTIFY_URL_HINT_MAX 300   /* bytes of "scheme://host" shown back */
#define CG_NOTIFY_SIGNATURE_MAX 96   /* "t=<20 digits>,v1=<64 hex>" and NUL */
#define CG_NOTIFY_EVENT_TYPES_MAX 32 /* event types one channel names */
#define CG_NOTIFY_SECRET_BYTES 32    /* random bytes of a signing secret */
#define CG_NOTIFY_SECRET_MAX 64      /* "whsec_" + base64url of the bytes, NUL */

/* Whether a channel may subscribe to UsageEventType t: the events that tell a person
 * something (not SNAPSHOT, USAGE_CHANGED, HEARTBEAT, unknown values). */
bool cg_notify_event_type_ok(int t);

/* Checks a channel's URL: http:// or https://, a host, at most CG_NOTIFY_URL_MAX bytes, no
 * spaces or control characters. hint (hint_len >= CG_NOTIFY_URL_HINT_MAX) gets
 * "scheme://host[:port]". CG_INVALID_ARGUMENT naming `field` when it is not such a URL. */
cg_status cg_notify_url_check(const char *url, const char *field, char *hint, size_t hint_len,
                              struct cg_err *err) CG_MUST_CHECK;

/* The Ctxguard-Signature header value of body sent at unix second t, into out. */
cg_status cg_notify_signature(const char *secret, int64_t t, const char *body, size_t len,
                              char out[CG_NOTIFY_SIGNATURE_MAX]) CG_MUST_CHECK;

/* The wait before retry n (>= 1) with base_ms <= max_ms, drawn with random. */
int64_t cg_notify_retry_ms(int n, int64_t base_ms, int64_t max_ms, uint64_t random);

#endif

/* webhook.h - the notifier's HTTP client (curl): one POST of a JSON body with headers, no
 * redirects, http and https only, a timeout, the answer's body read up to a bound and
 * dropped, and (unless allowed) no connection to the server's own networks: loopback,
 * private (RFC 1918, RFC 4193), link-local, CGNAT and unspecified addresses are refused
 * when the connection is opened, after name resolution, so a name cannot smuggle them in.
 * One client per thread.
 */
#ifndef CG_LLM_WEBHOOK_H
#define CG_LLM_WEBHOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct cg_webhook;

struct cg_webhook_opts {
    int64_t timeout_ms; /* the whole request, connection included */
    int64_t connect_timeout_ms;
    bool allow_private; /* allow the server's own networks (tests, on-premises) */
    const char *user_agent;
};

/* What one POST got: the HTTP status (0 when no answer came) and, when it failed, why. */
struct cg_webhook_result {
    int status;
    char error[256];
};

/* NULL when curl cannot be set up. */
struct cg_webhook *cg_webhook_new(const struct cg_webhook_opts *opts);
void cg_webhook_free(struct cg_webhook *w);

/* POSTs body (application/json) to url with the extra headers ("Name: value", n of them).
 * Returns true on a 2xx answer; otherwise false with out saying why. */
bool cg_webhook_post(struct cg_webhook *w, const char *url, const char *body, size_t len,
                     const char *const *headers, int n, struct cg_webhook_result *out);

#endif

/* http_console.h - the operators' console on the HTTP listener: its static files
 * (server/console/, embedded at build time by cmake/console.cmake) served at "/", with a
 * Content-Security-Policy that allows scripts, styles and requests from the same origin only
 * (no inline script, no CDN: the machines may be offline), no framing, no referrer. The
 * console signs in with an API key typed by the user (kept in the tab's sessionStorage, sent
 * as Authorization: Bearer to the JSON API, never in a URL or cookie) and reads everything
 * through the JSON API (http_api.h). No cookies are set anywhere, so there is no CSRF surface.
 */
#ifndef CG_TRANSPORT_HTTP_CONSOLE_H
#define CG_TRANSPORT_HTTP_CONSOLE_H

#include <stddef.h>

#include "transport/http.h"

struct cg_console_asset {
    const char *path; /* "/index.html" */
    const char *content_type;
    const unsigned char *bytes;
    size_t len;
};

/* The embedded files, sorted by path (generated). */
extern const struct cg_console_asset cg_console_assets[];
extern const size_t cg_console_assets_count;

/* The Content-Security-Policy of every console answer. */
#define CG_CONSOLE_CSP                                                                             \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "             \
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "                  \
    "frame-ancestors 'none'"

/* The route handler of "/" (GET, HEAD): "/" is index.html, other paths their file, else
 * 404. ctx unused. */
void cg_http_console_handle(struct cg_http_request *req, void *ctx);

#endif

/* http_console.c - the console's static files (http_console.h). */
#include "transport/http_console.h"

#include <string.h>

static const struct cg_console_asset *find(const char *path)
{
    if (strcmp(path, "/") == 0)
        path = "/index.html";
    for (size_t i = 0; i < cg_console_assets_count; i++)
        if (strcmp(cg_console_assets[i].path, path) == 0)
            return &cg_console_assets[i];
    return NULL;
}

void cg_http_console_handle(struct cg_http_request *req, void *ctx)
{
    (void)ctx;
    const struct cg_console_asset *a = find(cg_http_request_path(req));
    static const char *const headers[] = {
        "Content-Security-Policy", CG_CONSOLE_CSP,  "X-Frame-Options", "DENY",
        "Referrer-Policy",         "no-referrer",   "Cross-Origin-Opener-Policy", "same-origin",
        NULL};
    if (a == NULL) {
        (void)cg_http_respond_static(req, 404, "text/plain; charset=utf-8", "not found\n", 10,
                                     headers);
        return;
    }
    (void)cg_http_respond_static(req, 200, a->content_type, a->bytes, a->len, headers);
}

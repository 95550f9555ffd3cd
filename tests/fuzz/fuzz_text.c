/* fuzz_text.c - the text decoders of core/ and base/: UTF-8, API keys, bearer headers,
 * DSN redaction and config values. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "core/apikey.h"
#include "core/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';

    size_t bad;
    (void)cg_utf8_valid(s, size, &bad);
    struct cg_apikey_parts parts;
    if (cg_apikey_parse(s, size, &parts) && !cg_uuid_valid(parts.tenant_id))
        __builtin_trap();
    const char *tok;
    size_t len;
    if (cg_apikey_bearer(s, &tok, &len) && (tok < s || tok + len > s + strlen(s)))
        __builtin_trap();
    char out[256];
    cg_config_redact_dsn(s, out, sizeof out);

    struct cg_config cfg;
    if (cg_config_init(&cfg) == CG_OK) {
        struct cg_err err;
        (void)cg_config_set(&cfg, "workers", s, "fuzz", &err);
        (void)cg_config_set(&cfg, "pg_dsn", s, "fuzz", &err);
        (void)cg_config_set(&cfg, "log_format", s, "fuzz", &err);
        cg_config_cleanup(&cfg);
    }
    free(s);
    return 0;
}

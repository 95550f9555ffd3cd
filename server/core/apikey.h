/* apikey.h - the text form of API keys and of the `authorization` metadata value.
 *
 * A tenant key reads `cgk_<tenant>_<key id>_<secret>`: the tenant's UUID as 32 hex digits,
 * the key id as 16 hex digits, and 32 random bytes in base64url (43 characters). Carrying
 * the tenant lets the server find the key with a tenant-keyed lookup (the schema is keyed
 * by tenant first). The server stores only SHA-256 of the whole text.
 * Pure: no I/O, no allocation; thread-safe.
 */
#ifndef CG_CORE_APIKEY_H
#define CG_CORE_APIKEY_H

#include <stdbool.h>
#include <stddef.h>

#define CG_APIKEY_PREFIX "cgk_"
#define CG_APIKEY_SECRET_BYTES 32
#define CG_APIKEY_SECRET_CHARS 43
#define CG_APIKEY_KEY_ID_CHARS 16
#define CG_APIKEY_LEN (4 + 32 + 1 + CG_APIKEY_KEY_ID_CHARS + 1 + CG_APIKEY_SECRET_CHARS)

struct cg_apikey_parts {
    char tenant_id[37]; /* canonical UUID with dashes, lower case */
    char key_id[CG_APIKEY_KEY_ID_CHARS + 1];
};

/* Splits "Bearer TOKEN" (scheme case-insensitive, one or more spaces). On success
 * token and len then point into header. False for anything else. */
bool cg_apikey_bearer(const char *header, const char **token, size_t *len);

/* Parses a tenant key. False (out untouched) unless token[0..len) has exactly the
 * shape above. */
bool cg_apikey_parse(const char *token, size_t len, struct cg_apikey_parts *out);

/* Writes the key text for tenant_id (canonical UUID), key_id (16 hex) and the base64url
 * secret into out (at least CG_APIKEY_LEN + 1 bytes). False when an input has the wrong
 * shape. */
bool cg_apikey_format(const char *tenant_id, const char *key_id, const char *secret_b64, char *out,
                      size_t cap);

/* Whether s is a canonical UUID (8-4-4-4-12 hex digits, either case). */
bool cg_uuid_valid(const char *s);

#endif

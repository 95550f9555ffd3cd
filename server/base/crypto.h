/* crypto.h - the few primitives API keys need: random bytes, SHA-256, constant-time
 * comparison and text encodings. Thread-safe.
 */
#ifndef CG_BASE_CRYPTO_H
#define CG_BASE_CRYPTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CG_SHA256_LEN 32

/* Fills buf with n bytes from the kernel's CSPRNG. CG_IO when it cannot. */
cg_status cg_random_bytes(void *buf, size_t n) CG_MUST_CHECK;

/* SHA-256 of data into out. */
void cg_sha256(const void *data, size_t len, uint8_t out[CG_SHA256_LEN]);

/* SHA-1 of data as 40 lower-case hex digits: the name Redis gives a script (EVALSHA). */
void cg_sha1_hex(const void *data, size_t len, char out[41]);

/* HMAC-SHA256 (RFC 2104) of data under key into out. CG_NOMEM when it cannot. */
cg_status cg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                         uint8_t out[CG_SHA256_LEN]) CG_MUST_CHECK;

/* Compares two buffers of the same length in time independent of their contents. */
bool cg_equal_ct(const void *a, const void *b, size_t len);

/* Lower-case hex of n bytes into out (2n+1 bytes). */
void cg_hex_encode(const uint8_t *in, size_t n, char *out);

/* Base64url without padding of n bytes into out (4*ceil(n/3)+1 bytes suffice). */
void cg_base64url_encode(const uint8_t *in, size_t n, char *out);

/* Checks PEM text before it is handed to TLS: cert_pem holds at least one certificate and
 * key_pem a private key that matches the first one. When ca_pem is not NULL it must hold at
 * least one certificate. On error err names the config key at fault (tls_cert, tls_key or
 * tls_client_ca). Thread-safe. */
cg_status cg_tls_check(const char *cert_pem, const char *key_pem, const char *ca_pem,
                       struct cg_err *err) CG_MUST_CHECK;

/* A random request id: 16 hex characters + NUL. */
void cg_request_id(char out[17]);

#endif

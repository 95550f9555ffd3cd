/* crypto.c - getrandom(2) for randomness, OpenSSL's libcrypto for SHA-256. */
#include "base/crypto.h"

#include <errno.h>
#include <pthread.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/random.h>
#include <time.h>

cg_status cg_random_bytes(void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t got = getrandom(p, n, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return CG_IO;
        }
        p += got;
        n -= (size_t)got;
    }
    return CG_OK;
}

/* OpenSSL 3's SHA256() looks the algorithm up (EVP_MD_fetch, under a lock) on every call,
 * which cost more than the hash of an API key itself: fetched once here, for the process. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void cg_sha256(const void *data, size_t len, uint8_t out[CG_SHA256_LEN])
{
    pthread_once(&sha256_once, sha256_fetch);
    unsigned int n = 0;
    if (sha256_md == NULL || EVP_Digest(data, len, out, &n, sha256_md, NULL) != 1 ||
        n != CG_SHA256_LEN)
        SHA256(data, len, out);
}

void cg_sha1_hex(const void *data, size_t len, char out[41])
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data, len, md, &n, EVP_sha1(), NULL) != 1 || n != 20)
        SHA1(data, len, md);
    cg_hex_encode(md, 20, out);
}

cg_status cg_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len,
                         uint8_t out[CG_SHA256_LEN])
{
    /* RFC 2104 over cg_sha256: H((K ^ opad) || H((K ^ ipad) || data)), K hashed first when
     * longer than the block. The message is hashed through one buffer per call. */
    enum { BLOCK = 64 };
    uint8_t k[BLOCK] = {0};
    if (key_len > BLOCK)
        cg_sha256(key, key_len, k);
    else if (key_len > 0)
        memcpy(k, key, key_len);
    uint8_t *inner = malloc(BLOCK + len);
    uint8_t outer[BLOCK + CG_SHA256_LEN];
    if (inner == NULL)
        return CG_NOMEM;
    for (int i = 0; i < BLOCK; i++) {
        inner[i] = k[i] ^ 0x36;
        outer[i] = k[i] ^ 0x5c;
    }
    if (len > 0)
        memcpy(inner + BLOCK, data, len);
    cg_sha256(inner, BLOCK + len, outer + BLOCK);
    free(inner);
    cg_sha256(outer, sizeof outer, out);
    return CG_OK;
}

bool cg_equal_ct(const void *a, const void *b, size_t len)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char diff = 0;
    for (size_t i = 0; i < len; i++)
        diff |= x[i] ^ y[i];
    return diff == 0;
}

void cg_hex_encode(const uint8_t *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void cg_base64url_encode(const uint8_t *in, size_t n, char *out)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
        out[o++] = tab[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = tab[v >> 18 & 63];
        out[o++] = tab[v >> 12 & 63];
        out[o++] = tab[v >> 6 & 63];
    }
    out[o] = '\0';
}

static X509 *first_cert(const char *pem)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)strlen(pem));
    if (bio == NULL)
        return NULL;
    X509 *cert = PEM_read_bio_X509(bio, NULL, NULL, NULL);
    BIO_free(bio);
    return cert;
}

cg_status cg_tls_check(const char *cert_pem, const char *key_pem, const char *ca_pem,
                       struct cg_err *err)
{
    cg_status rc = CG_OK;
    EVP_PKEY *key = NULL;
    X509 *cert = first_cert(cert_pem);
    if (cert == NULL) {
        rc = cg_err_set(err, CG_CONFIG, "config key 'tls_cert': no PEM certificate in the file");
        goto out;
    }
    BIO *bio = BIO_new_mem_buf(key_pem, (int)strlen(key_pem));
    key = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    if (key == NULL) {
        rc = cg_err_set(err, CG_CONFIG, "config key 'tls_key': no PEM private key in the file");
        goto out;
    }
    if (X509_check_private_key(cert, key) != 1) {
        rc = cg_err_set(
            err, CG_CONFIG,
            "config keys 'tls_cert' and 'tls_key': the key does not match the certificate");
        goto out;
    }
    if (ca_pem != NULL) {
        X509 *ca = first_cert(ca_pem);
        if (ca == NULL)
            rc = cg_err_set(err, CG_CONFIG,
                            "config key 'tls_client_ca': no PEM certificate in the file");
        X509_free(ca);
    }
out:
    /* Failed PEM reads leave entries on this thread's OpenSSL error queue; they are ours. */
    ERR_clear_error();
    EVP_PKEY_free(key);
    X509_free(cert);
    return rc;
}

void cg_request_id(char out[17])
{
    /* Request ids need to be unique, not secret: a per-process random prefix and a
     * counter would do, but 8 random bytes keep ids unguessable across replicas too. Should
     * the random source ever fail, the clock's nanoseconds and this thread's stack address
     * stand in (no process-wide counter: no mutable file-level state). */
    uint8_t raw[8];
    if (cg_random_bytes(raw, sizeof raw) != CG_OK) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t c = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
                     ((uint64_t)(uintptr_t)raw << 20);
        for (int i = 0; i < 8; i++)
            raw[i] = (uint8_t)(c >> (8 * i));
    }
    cg_hex_encode(raw, sizeof raw, out);
}

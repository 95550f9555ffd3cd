/* redact.h - PII and secret redaction: typed, session-stable pseudonyms (`<EMAIL_1>`).
 *
 * Applied before text leaves for a summarizer and before a summary or artifact is stored
 * (DESIGN.md §5). Each value found is replaced by `<TYPE_N>`: TYPE is the PiiType name of
 * proto/ctxguard/v1/common.proto without its prefix (EMAIL, PHONE, CARD_NUMBER, SSN, IPV4,
 * IPV6, API_KEY, SECRET) and N numbers the distinct values of that type in the session, so
 * the same value always gets the same label and a summary stays coherent.
 *
 * What is found (hand-written scanners, one pass, no regex library):
 * - EMAIL: local@domain.tld (ASCII; the TLD alphabetic; not `name@2x.png`-style file names,
 *   not scp-style remotes `git@host:path`).
 * - PHONE: `+CC ...` / `(+CC) ...` with 10-15 digits; NANP `(415) 555-0100`, `415-555-0100`,
 *   `415.555.0100`, `1-800-555-0199` (area code 2-9); national numbers with one trunk 0
 *   (`020 7946 0958`, `06 12 34 56 78`, `03-1234-5678`, `030/1234567`): 10-11 digits, one
 *   kind of separator. Unseparated national numbers and numbers inside paths or identifiers
 *   (`/proc/4155550100`, `run_415-555-0100.log`) are left alone.
 * - CARD_NUMBER: 13-19 digits, unseparated or in groups of 4 (Amex 4-6-5, Diners 4-6-4)
 *   with one kind of separator (space or dash), a known IIN for the length, and Luhn.
 * - SSN: AAA-GG-SSSS with dashes, excluding area 000, 666 and 900-999, group 00, serial 0000.
 * - IPV4: four decimal octets 0-255 without leading zeros, not part of a longer dotted number,
 *   not a version (`v1.2.3.4`, `pkg-1.2.3.4`, `1.2.5.1-2`, after the word "version"). A bare
 *   four-part version after any other word (`Pandoc 2.14.0.3`) cannot be told from an address
 *   and is redacted.
 * - IPV6: full, `::`-compressed, with an embedded IPv4; must hold a decimal digit, so C++
 *   scopes (`B::C`), `dead::beef`, times (`12:30:45`) and MAC addresses are not addresses.
 * - API_KEY: known prefixes (sk-, sk-ant-, sk_live_, ghp_/gho_/ghu_/ghs_/ghr_, github_pat_,
 *   xoxb-/xoxp-/xoxa-/xoxs-/xoxr-, AKIA/ASIA, AIza, glpat-, npm_, hf_, SG.), JWTs (three
 *   base64url parts, the first `eyJ`), `Bearer TOKEN` (that spelling), and high-entropy
 *   tokens: at least entropy_min_len characters of [A-Za-z0-9+/_-], upper case, lower case
 *   and digits all present, Shannon entropy >= entropy_min_bits per character, and a change
 *   of character class on at least 36 % of the characters (random text: ~60 %;
 *   CamelCaseIdentifiers2: ~30 %).
 *   Decision: hex digests (git SHAs, SHA-256) and UUIDs are NOT secrets (one letter case and
 *   digits only); they are redacted only as the value of a secret pair.
 * - SECRET: the value of `password=`, `secret:`, `token=`, `api_key:`, `"passwd": "..."`
 *   pairs (the key is any identifier ending in password, passwd, passphrase, secret, token,
 *   api_key, apikey, api-key, access_key, secret_key, private_key; the key is kept, the value
 *   redacted, as API_KEY when the value is a known key; placeholders such as `${X}`, `<X>`,
 *   null/true/false and short numbers after a *token key are left); the user:password of a
 *   URL (`https://<SECRET_1>@host`); `Authorization: Basic CREDENTIALS`; the body of a PEM
 *   private key block (BEGIN and END lines kept; without END, the rest of the text).
 *   PEM certificates and public keys are public and left whole.
 *
 * Bytes are ASCII to the scanners: other bytes (UTF-8 or not) and NULs are separators and
 * are copied unchanged. A label is never matched itself, so a second pass leaves labels
 * whole (it may still find a neighbour whose context the label changed).
 * Pure: no I/O, no globals; thread-safe as long as a session is used by one call at a time.
 */
#ifndef CG_CORE_REDACT_H
#define CG_CORE_REDACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Same numbers as PiiType in proto/ctxguard/v1/common.proto. */
typedef enum {
    CG_PII_UNSPECIFIED = 0,
    CG_PII_EMAIL = 1,
    CG_PII_PHONE = 2,
    CG_PII_CARD_NUMBER = 3,
    CG_PII_SSN = 4,
    CG_PII_IPV4 = 5,
    CG_PII_IPV6 = 6,
    CG_PII_API_KEY = 7,
    CG_PII_SECRET = 8,
} cg_pii_type;

#define CG_PII_TYPE_COUNT 9
#define CG_PII_ALL 0x1feu /* the enable bits of every type */
#define CG_PII_BIT(type) (1u << (type))

/* Distinct values a session remembers; beyond, see cg_redact_session. */
#define CG_REDACT_SESSION_VALUES 4096
/* Longest label: "<CARD_NUMBER_4294967295>". */
#define CG_REDACT_LABEL_MAX 24

struct cg_redact_options {
    unsigned enabled;         /* CG_PII_BIT(type) per type to redact; CG_PII_ALL by default */
    unsigned entropy_min_len; /* shortest high-entropy token; default 24 */
    double entropy_min_bits;  /* Shannon entropy per character; default 3.5 */
};

/* The pseudonym table of one session: a keyed 64-bit hash of (type, normalized value) to
 * the number in its label. Raw values are never stored. Caller-owned (about 130 KB: put it
 * on the heap or in a session object), initialized with cg_redact_session_init; it needs no
 * cleanup. Emails are normalized to lower case, phone, card and SSN values to their digits.
 * When CG_REDACT_SESSION_VALUES distinct values are remembered, a new value still gets a
 * new label (nothing leaks) but is not remembered, so it is numbered anew each time it is
 * met; counts.session_full says when that happened. Not thread-safe: one call at a time. */
struct cg_redact_session {
    uint64_t key[2];
    uint32_t used;
    uint32_t last_number[CG_PII_TYPE_COUNT];
    struct {
        uint64_t hash;
        uint32_t number; /* 0: free slot */
        uint32_t type;
    } slots[2 * CG_REDACT_SESSION_VALUES];
};

/* Growable output buffer: data[0..len) is the redacted text, NUL-terminated after len.
 * Grows up to max bytes of text; owned by the caller, freed by cg_redact_buf_cleanup. */
struct cg_redact_buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max;
};

/* Occurrences redacted per type (indexed by cg_pii_type), added to by each call. */
struct cg_redact_counts {
    int64_t by_type[CG_PII_TYPE_COUNT];
    bool session_full; /* a value was labelled without being remembered */
};

/* Where one value was found: input bytes [start, start + len) became <TYPE_number>. */
struct cg_redact_span {
    size_t start, len;
    cg_pii_type type;
    uint32_t number;
};

/* Caller-owned room for the spans of one call: items[0..cap) is filled in input order,
 * len says how many; dropped counts the spans beyond cap (they are redacted all the same). */
struct cg_redact_spans {
    struct cg_redact_span *items;
    size_t cap;
    size_t len;
    size_t dropped;
};

/* Defaults: every type enabled, entropy tokens of 24+ characters at 3.5 bits. */
void cg_redact_options_init(struct cg_redact_options *options);

/* An empty session. seed keys the value hash: pass random bytes so that the hashes held in
 * memory do not reveal low-entropy values such as SSNs; any value works for correctness. */
void cg_redact_session_init(struct cg_redact_session *session, uint64_t seed0, uint64_t seed1);

/* An empty buffer that will hold at most max bytes of text (no allocation yet). */
void cg_redact_buf_init(struct cg_redact_buf *buf, size_t max);

/* Frees the buffer's memory; buf is empty afterwards and can be reused. */
void cg_redact_buf_cleanup(struct cg_redact_buf *buf);

/* Redacts in[0..len) into out (out->len is reset first). options may be NULL (defaults).
 * On success counts (when not NULL) is added to and the session holds the new values.
 * Errors: CG_INVALID_ARGUMENT (in NULL with len > 0, session or out NULL),
 * CG_RESOURCE_EXHAUSTED (the redacted text would exceed out->max), CG_NOMEM; then out->len
 * is 0, counts is unchanged, and the session may hold numbers for values met before the
 * error (harmless: a retry gives the same labels). Thread-safe for distinct sessions/bufs. */
cg_status cg_redact(const struct cg_redact_options *options, struct cg_redact_session *session,
                    const char *in, size_t len, struct cg_redact_buf *out,
                    struct cg_redact_counts *counts, struct cg_err *err) CG_MUST_CHECK;

/* cg_redact that also reports where each value was (spans may be NULL; its len and dropped
 * are reset first). On error spans->len is 0. */
cg_status cg_redact_with_spans(const struct cg_redact_options *options,
                               struct cg_redact_session *session, const char *in, size_t len,
                               struct cg_redact_buf *out, struct cg_redact_counts *counts,
                               struct cg_redact_spans *spans, struct cg_err *err) CG_MUST_CHECK;

/* The label name of a type ("EMAIL", "CARD_NUMBER"), or NULL outside 1..8. */
const char *cg_pii_type_name(cg_pii_type type);

#endif

/* redact.c - the PII scanners, the session's pseudonym table and the output buffer.
 *
 * One pass over the input. The loop stops only at the start of a word (a run of
 * [A-Za-z0-9_]) and at the few punctuation characters that can start or anchor a value
 * ('@', '+', '(', '-', ':'); everything else is skipped with one table lookup. Unchanged
 * text is not copied byte by byte: `copied` marks how far the input has been written out,
 * and the span up to a match is copied in one memcpy when the match is labelled.
 * Every scanner either looks at a bounded window or runs only at the start of the token it
 * measures, so the whole pass stays linear even on hostile input.
 */
#include "core/redact.h"

#include "core/siphash.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_LOWER 0x01u
#define K_UPPER 0x02u
#define K_DIGIT 0x04u
#define K_UNDER 0x08u
#define K_HEX 0x10u
#define K_B64X 0x20u /* + / - */
#define K_DOT 0x40u
#define K_TRIG 0x80u /* @ + ( - : */
#define K_ALPHA (K_LOWER | K_UPPER)
#define K_ALNUM (K_ALPHA | K_DIGIT)
#define K_WORD (K_ALNUM | K_UNDER)
#define K_B64 (K_WORD | K_B64X)

/* Character classes of ASCII; every other byte is 0 (a separator). Read-only. */
static const unsigned char kind[256] = {
    ['0' ... '9'] = K_DIGIT | K_HEX,
    ['A' ... 'F'] = K_UPPER | K_HEX,
    ['G' ... 'Z'] = K_UPPER,
    ['a' ... 'f'] = K_LOWER | K_HEX,
    ['g' ... 'z'] = K_LOWER,
    ['_'] = K_UNDER,
    ['+'] = K_B64X | K_TRIG,
    ['/'] = K_B64X,
    ['-'] = K_B64X | K_TRIG,
    ['.'] = K_DOT,
    ['@'] = K_TRIG,
    ['('] = K_TRIG,
    [':'] = K_TRIG,
};

static const char *const type_names[CG_PII_TYPE_COUNT] = {
    NULL, "EMAIL", "PHONE", "CARD_NUMBER", "SSN", "IPV4", "IPV6", "API_KEY", "SECRET",
};

/* How a value is reduced before hashing, so that one value written two ways is one value. */
enum norm { NORM_RAW, NORM_LOWER, NORM_DIGITS };

struct scan {
    const struct cg_redact_options *opt;
    struct cg_redact_session *ses;
    const unsigned char *s;
    size_t n;
    struct cg_redact_buf *out;
    size_t copied; /* s[0..copied) is in out */
    int64_t counts[CG_PII_TYPE_COUNT];
    bool session_full;
    struct cg_redact_spans *spans; /* NULL: not wanted */
    cg_status st;
    /* The first "-----END " at or after pem_from is at pem_at (n: none): searched once. */
    size_t pem_from, pem_at;
};

static inline unsigned k_at(const struct scan *sc, size_t i)
{
    return i < sc->n ? kind[sc->s[i]] : 0;
}

static inline bool is_digit_at(const struct scan *sc, size_t i)
{
    return i < sc->n && sc->s[i] >= '0' && sc->s[i] <= '9';
}

static inline bool ch_at(const struct scan *sc, size_t i, char c)
{
    return i < sc->n && sc->s[i] == (unsigned char)c;
}

static inline unsigned prev_kind(const struct scan *sc, size_t i)
{
    return i > 0 ? kind[sc->s[i - 1]] : 0;
}

static inline unsigned char prev_ch(const struct scan *sc, size_t i)
{
    return i > 0 ? sc->s[i - 1] : 0;
}

static inline bool enabled(const struct scan *sc, cg_pii_type type)
{
    return (sc->opt->enabled & CG_PII_BIT(type)) != 0;
}

static inline unsigned char lower(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

/* s[i..) starts with the literal lit (exact case). */
static bool starts(const struct scan *sc, size_t i, const char *lit)
{
    size_t len = strlen(lit);
    return i <= sc->n && sc->n - i >= len && memcmp(sc->s + i, lit, len) == 0;
}

/* ---- session ---- */

#define SLOT_COUNT (2 * CG_REDACT_SESSION_VALUES)

static uint32_t next_number(struct cg_redact_session *ses, cg_pii_type type)
{
    if (ses->last_number[type] < UINT32_MAX)
        ses->last_number[type]++;
    return ses->last_number[type];
}

/* The label number of the value s[a..b) of type, assigned on first sight. */
static uint32_t session_number(struct scan *sc, cg_pii_type type, size_t a, size_t b,
                               enum norm norm)
{
    struct cg_redact_session *ses = sc->ses;
    struct cg_sip h;
    cg_sip_init(&h, ses->key, false);
    cg_sip_byte(&h, (unsigned char)type);
    for (size_t i = a; i < b; i++) {
        unsigned char c = sc->s[i];
        if (norm == NORM_DIGITS && !(c >= '0' && c <= '9') && c != '+')
            continue;
        cg_sip_byte(&h, norm == NORM_LOWER ? lower(c) : c);
    }
    uint64_t hash = cg_sip_final64(&h);
    size_t slot = (size_t)(hash & (SLOT_COUNT - 1));
    for (;;) {
        if (ses->slots[slot].number == 0)
            break;
        if (ses->slots[slot].hash == hash && ses->slots[slot].type == (uint32_t)type)
            return ses->slots[slot].number;
        slot = (slot + 1) & (SLOT_COUNT - 1);
    }
    uint32_t number = next_number(ses, type);
    if (ses->used >= CG_REDACT_SESSION_VALUES) {
        sc->session_full = true;
        return number;
    }
    ses->slots[slot].hash = hash;
    ses->slots[slot].number = number;
    ses->slots[slot].type = (uint32_t)type;
    ses->used++;
    return number;
}

/* ---- output ---- */

static bool out_reserve(struct scan *sc, size_t extra)
{
    struct cg_redact_buf *b = sc->out;
    if (sc->st != CG_OK)
        return false;
    if (extra > b->max || b->len > b->max - extra) {
        sc->st = CG_RESOURCE_EXHAUSTED;
        return false;
    }
    size_t need = b->len + extra + 1; /* the NUL */
    if (need <= b->cap)
        return true;
    size_t cap = b->cap < 256 ? 256 : b->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (b->max < SIZE_MAX && cap > b->max + 1)
        cap = b->max + 1;
    char *p = realloc(b->data, cap);
    if (p == NULL) {
        sc->st = CG_NOMEM;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

static void out_put(struct scan *sc, const void *p, size_t len)
{
    if (len == 0 || !out_reserve(sc, len))
        return;
    memcpy(sc->out->data + sc->out->len, p, len);
    sc->out->len += len;
}

/* Copies the input up to pos (not yet written) to the output. */
static void flush_to(struct scan *sc, size_t pos)
{
    if (pos > sc->copied) {
        out_put(sc, sc->s + sc->copied, pos - sc->copied);
        sc->copied = pos;
    }
}

/* Replaces s[a..b) by the label of its value; returns b (where scanning resumes). */
static size_t label(struct scan *sc, cg_pii_type type, size_t a, size_t b, enum norm norm)
{
    char text[CG_REDACT_LABEL_MAX + 1];
    char digits[12];
    flush_to(sc, a);
    uint32_t number = session_number(sc, type, a, b, norm);
    if (sc->spans != NULL) {
        struct cg_redact_spans *sp = sc->spans;
        if (sp->len < sp->cap && sp->items != NULL)
            sp->items[sp->len++] = (struct cg_redact_span){a, b - a, type, number};
        else
            sp->dropped++;
    }
    int nd = 0;
    do {
        digits[nd++] = (char)('0' + number % 10);
        number /= 10;
    } while (number > 0);
    const char *name = type_names[type];
    size_t name_len = strlen(name), len = 0;
    text[len++] = '<';
    memcpy(text + len, name, name_len);
    len += name_len;
    text[len++] = '_';
    while (nd > 0)
        text[len++] = digits[--nd];
    text[len++] = '>';
    out_put(sc, text, len);
    sc->copied = b;
    sc->counts[type]++;
    return b;
}

/* ---- numbers: IPv4, IPv6, SSN, cards, phones ---- */

/* Length of a dotted quad at i (octets 0-255, no leading zeros), or 0. No context checks. */
static size_t ipv4_len(const struct scan *sc, size_t i)
{
    size_t p = i;
    for (int part = 0; part < 4; part++) {
        if (part > 0) {
            if (!ch_at(sc, p, '.'))
                return 0;
            p++;
        }
        size_t d = 0;
        unsigned v = 0;
        while (d < 4 && is_digit_at(sc, p + d)) {
            v = v * 10 + (unsigned)(sc->s[p + d] - '0');
            d++;
        }
        if (d == 0 || d > 3 || v > 255 || (d > 1 && sc->s[p] == '0'))
            return 0;
        p += d;
    }
    return p - i;
}

/* Whether the word before i (skipping spaces, ':', '=') is a version marker. */
static bool after_version_word(const struct scan *sc, size_t i)
{
    static const char *const words[] = {"version", "ver", "release", "v"};
    size_t p = i, skipped = 0;
    while (p > 0 && skipped < 3 &&
           (sc->s[p - 1] == ' ' || sc->s[p - 1] == ':' || sc->s[p - 1] == '=' ||
            sc->s[p - 1] == '\t')) {
        p--;
        skipped++;
    }
    size_t end = p;
    while (p > 0 && end - p < 8 && (kind[sc->s[p - 1]] & K_ALPHA))
        p--;
    if (p > 0 && (kind[sc->s[p - 1]] & K_ALPHA))
        return false;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        size_t len = strlen(words[w]);
        if (end - p != len)
            continue;
        size_t k = 0;
        while (k < len && lower(sc->s[p + k]) == (unsigned char)words[w][k])
            k++;
        if (k == len)
            return true;
    }
    return false;
}

static size_t find_ipv4(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_IPV4))
        return 0;
    unsigned char pc = prev_ch(sc, i);
    if ((prev_kind(sc, i) & (K_WORD | K_DOT)) || pc == '.')
        return 0;
    if ((pc == '-' || pc == '_') && i >= 2 && (kind[sc->s[i - 2]] & K_ALPHA))
        return 0; /* pkg-1.2.3.4 */
    size_t len = ipv4_len(sc, i);
    if (len == 0)
        return 0;
    size_t e = i + len;
    if (k_at(sc, e) & K_WORD)
        return 0;
    if (ch_at(sc, e, '.') && (k_at(sc, e + 1) & K_ALNUM))
        return 0; /* 1.2.3.4.5, 1.2.3.4.gz */
    if ((ch_at(sc, e, '-') || ch_at(sc, e, '+') || ch_at(sc, e, '~')) &&
        (k_at(sc, e + 1) & K_ALNUM)) {
        size_t q = e + 1;
        while (is_digit_at(sc, q))
            q++;
        if (q == e + 1 || !ch_at(sc, q, '.'))
            return 0; /* a version suffix (1.2.5.1-2, 1.2.3.4-beta), not a range's end */
    }
    if (after_version_word(sc, i))
        return 0;
    return label(sc, CG_PII_IPV4, i, e, NORM_RAW);
}

/* IPv6 at i (a hex digit or "::"); returns the end or 0. */
static size_t ipv6_len(const struct scan *sc, size_t i)
{
    size_t p = i, end = i;
    int groups = 0;
    bool compressed = false, digit = false;
    if (ch_at(sc, p, ':')) {
        if (!ch_at(sc, p + 1, ':'))
            return 0;
        compressed = true;
        p += 2;
        end = p;
    }
    for (;;) {
        size_t g = 0;
        bool gdigit = false;
        while (g < 5 && (k_at(sc, p + g) & K_HEX)) {
            gdigit |= (k_at(sc, p + g) & K_DIGIT) != 0;
            g++;
        }
        if (g == 0)
            break;
        if (g > 4)
            return 0;
        size_t v4 = ch_at(sc, p + g, '.') ? ipv4_len(sc, p) : 0;
        if (v4 != 0) { /* ::ffff:192.0.2.1; otherwise the '.' ends the address */
            groups += 2;
            digit = true;
            end = p + v4;
            break;
        }
        groups++;
        digit |= gdigit;
        p += g;
        end = p;
        if (groups > 8)
            return 0;
        if (!ch_at(sc, p, ':'))
            break;
        if (ch_at(sc, p + 1, ':')) {
            if (compressed)
                return 0; /* a::b::c is C++, not an address */
            compressed = true;
            p += 2;
            end = p;
            continue;
        }
        p++;
    }
    if (!digit || (compressed ? groups > 7 : groups != 8))
        return 0;
    return end;
}

static size_t find_ipv6(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_IPV6))
        return 0;
    if ((prev_kind(sc, i) & (K_WORD | K_DOT)) || prev_ch(sc, i) == ':')
        return 0;
    size_t e = ipv6_len(sc, i);
    if (e == 0)
        return 0;
    if ((k_at(sc, e) & K_WORD) || (ch_at(sc, e, ':') && (k_at(sc, e + 1) & K_HEX)) ||
        (ch_at(sc, e, '.') && is_digit_at(sc, e + 1)))
        return 0;
    /* The groups' letters are normalized to lower case; "::1" and "0::1" stay distinct. */
    return label(sc, CG_PII_IPV6, i, e, NORM_LOWER);
}

/* A number is not PII when it continues a path, an identifier or a longer number. */
static bool number_prev_ok(const struct scan *sc, size_t i)
{
    unsigned char pc = prev_ch(sc, i);
    if ((prev_kind(sc, i) & K_WORD) || pc == '.' || pc == '/' || pc == '\\' || pc == '#')
        return false;
    if ((pc == '-' || pc == '+') && i >= 2 && (kind[sc->s[i - 2]] & K_WORD))
        return false;
    return true;
}

static bool number_next_ok(const struct scan *sc, size_t e)
{
    if (k_at(sc, e) & K_WORD)
        return false;
    if ((ch_at(sc, e, '.') || ch_at(sc, e, '-') || ch_at(sc, e, '/')) && is_digit_at(sc, e + 1))
        return false;
    return true;
}

static unsigned digits_value(const struct scan *sc, size_t i, size_t len)
{
    unsigned v = 0;
    for (size_t k = 0; k < len; k++)
        v = v * 10 + (unsigned)(sc->s[i + k] - '0');
    return v;
}

static size_t run_of_digits(const struct scan *sc, size_t i, size_t max)
{
    size_t d = 0;
    while (d <= max && is_digit_at(sc, i + d))
        d++;
    return d;
}

static size_t find_ssn(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_SSN))
        return 0;
    if (run_of_digits(sc, i, 3) != 3 || !ch_at(sc, i + 3, '-') ||
        run_of_digits(sc, i + 4, 2) != 2 || !ch_at(sc, i + 6, '-') ||
        run_of_digits(sc, i + 7, 4) != 4)
        return 0;
    unsigned area = digits_value(sc, i, 3), group = digits_value(sc, i + 4, 2),
             serial = digits_value(sc, i + 7, 4);
    if (area == 0 || area == 666 || area >= 900 || group == 0 || serial == 0)
        return 0;
    if (!number_prev_ok(sc, i) || !number_next_ok(sc, i + 11))
        return 0;
    return label(sc, CG_PII_SSN, i, i + 11, NORM_DIGITS);
}

static bool luhn_ok(const unsigned char *d, int len)
{
    int sum = 0;
    for (int k = 0; k < len; k++) {
        int v = d[len - 1 - k];
        if (k % 2 == 1) {
            v *= 2;
            if (v > 9)
                v -= 9;
        }
        sum += v;
    }
    return sum % 10 == 0;
}

/* Whether the issuer prefix of d fits a card network that issues numbers of length len. */
static bool iin_ok(const unsigned char *d, int len)
{
    int p2 = d[0] * 10 + d[1], p3 = p2 * 10 + d[2], p4 = p3 * 10 + d[3];
    if (d[0] == 4)
        return len == 13 || len == 16 || len == 19; /* Visa */
    if (p2 == 34 || p2 == 37)
        return len == 15; /* American Express */
    if ((p3 >= 300 && p3 <= 305) || p2 == 36 || p2 == 38 || p2 == 39)
        return len >= 14 && len <= 19; /* Diners */
    if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720))
        return len == 16; /* Mastercard */
    if (p4 == 6011 || p2 == 65 || (p3 >= 644 && p3 <= 649) || p2 == 62)
        return len >= 16 && len <= 19; /* Discover, UnionPay */
    if (p4 >= 3528 && p4 <= 3589)
        return len >= 16 && len <= 19; /* JCB */
    return false;
}

static size_t find_card(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_CARD_NUMBER))
        return 0;
    unsigned char digits[19];
    int groups[8], ng = 0, total = 0;
    unsigned char sep = 0;
    size_t p = i;
    for (;;) {
        int g = 0;
        while (is_digit_at(sc, p)) {
            if (total == 19)
                return 0;
            digits[total++] = (unsigned char)(sc->s[p] - '0');
            g++;
            p++;
        }
        groups[ng++] = g;
        /* A following group joins only while the total stays a card's length, so that
         * "4111 1111 1111 1111 2025" is a card and a year. */
        if (ng < 8 && (ch_at(sc, p, ' ') || ch_at(sc, p, '-')) && is_digit_at(sc, p + 1) &&
            (sep == 0 || sc->s[p] == sep) && total + (int)run_of_digits(sc, p + 1, 19) <= 19) {
            sep = sc->s[p];
            p++;
            continue;
        }
        break;
    }
    if (total < 13)
        return 0;
    bool shape = ng == 1;
    if (ng >= 4) {
        shape = groups[ng - 1] >= 1 && groups[ng - 1] <= 4;
        for (int k = 0; k < ng - 1; k++)
            shape = shape && groups[k] == 4;
    }
    if (ng == 3 && groups[0] == 4 && groups[1] == 6 && (groups[2] == 5 || groups[2] == 4))
        shape = true;
    if (!shape || !iin_ok(digits, total) || !luhn_ok(digits, total))
        return 0;
    if (!number_prev_ok(sc, i) || !number_next_ok(sc, p))
        return 0;
    return label(sc, CG_PII_CARD_NUMBER, i, p, NORM_DIGITS);
}

static bool is_phone_sep(unsigned char c)
{
    return c == ' ' || c == '-' || c == '.';
}

/* NANP at i: [1 sep] (AAA)[ ]EEE sep SSSS or [1 sep] AAA sep EEE sep SSSS (one sep). */
static size_t nanp_len(const struct scan *sc, size_t i)
{
    size_t p = i;
    unsigned char sep = 0;
    if (ch_at(sc, p, '1') && p + 1 < sc->n && is_phone_sep(sc->s[p + 1])) {
        sep = sc->s[p + 1];
        p += 2;
    }
    bool paren = ch_at(sc, p, '(');
    if (paren) {
        if (run_of_digits(sc, p + 1, 3) != 3 || !ch_at(sc, p + 4, ')'))
            return 0;
        if (sc->s[p + 1] < '2')
            return 0;
        p += 5;
        if (ch_at(sc, p, ' '))
            p++;
    } else {
        if (run_of_digits(sc, p, 3) != 3 || sc->s[p] < '2' || p + 3 >= sc->n ||
            !is_phone_sep(sc->s[p + 3]))
            return 0;
        if (sep != 0 && sc->s[p + 3] != sep)
            return 0;
        sep = sc->s[p + 3];
        p += 4;
    }
    /* the exchange may start with any digit: 555-123-4567 is how people write examples */
    if (run_of_digits(sc, p, 3) != 3 || p + 3 >= sc->n || !is_phone_sep(sc->s[p + 3]))
        return 0;
    if (!paren && sc->s[p + 3] != sep)
        return 0;
    p += 4;
    if (run_of_digits(sc, p, 4) != 4)
        return 0;
    return p + 4 - i;
}

/* National numbers with a trunk 0: 0N.. groups of 2+ digits, one separator, 10-11 digits. */
static size_t trunk_len(const struct scan *sc, size_t i)
{
    if (!ch_at(sc, i, '0') || !is_digit_at(sc, i + 1) || sc->s[i + 1] == '0')
        return 0;
    size_t p = i;
    int ng = 0, total = 0;
    unsigned char sep = 0;
    for (;;) {
        size_t g = run_of_digits(sc, p, 9);
        if (g < 2 || g > 8 || (ng == 0 && g > 5))
            return 0;
        total += (int)g;
        ng++;
        p += g;
        if (ng < 6 && p + 1 < sc->n && (is_phone_sep(sc->s[p]) || sc->s[p] == '/') &&
            is_digit_at(sc, p + 1) && (sep == 0 || sc->s[p] == sep)) {
            sep = sc->s[p];
            p++;
            continue;
        }
        break;
    }
    if (ng < 2 || total < 10 || total > 11)
        return 0;
    return p - i;
}

/* A national phone number at i (a digit or '('). */
static size_t find_national_phone(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_PHONE) || !number_prev_ok(sc, i))
        return 0;
    size_t len = nanp_len(sc, i);
    if (len == 0)
        len = trunk_len(sc, i);
    if (len == 0 || !number_next_ok(sc, i + len))
        return 0;
    return label(sc, CG_PII_PHONE, i, i + len, NORM_DIGITS);
}

/* +CC and groups (spaces, dashes, dots, one "(..)" group); 10-15 digits in all. */
static size_t find_intl_phone(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_PHONE))
        return 0;
    unsigned char pc = prev_ch(sc, i);
    if ((prev_kind(sc, i) & K_WORD) || pc == '+' || pc == '.' || pc == '/')
        return 0;
    if (!is_digit_at(sc, i + 1) || sc->s[i + 1] == '0')
        return 0;
    size_t p = i + 1, start = i;
    int total = 0, ng = 0, singles = 0;
    bool paren_seen = false;
    if (pc == '(' && i - 1 >= sc->copied) { /* (+44) 20 7946 0958: the parentheses too */
        size_t cc = run_of_digits(sc, p, 4);
        if (cc >= 1 && cc <= 3 && ch_at(sc, p + cc, ')') && ch_at(sc, p + cc + 1, ' ') &&
            is_digit_at(sc, p + cc + 2)) {
            total = (int)cc;
            ng = 1;
            paren_seen = true;
            p += cc + 2;
            start = i - 1;
        }
    }
    for (;;) {
        bool paren = ch_at(sc, p, '(') && !paren_seen;
        size_t g;
        if (paren) {
            g = run_of_digits(sc, p + 1, 4);
            if (g == 0 || g > 4 || !ch_at(sc, p + 1 + g, ')'))
                return 0;
            paren_seen = true;
            p += g + 2;
        } else {
            g = run_of_digits(sc, p, 15);
            if (g == 0)
                return 0;
            p += g;
        }
        total += (int)g;
        if (total > 15)
            return 0;
        if (ng > 0 && g == 1 && ++singles > 1)
            return 0;
        ng++;
        if ((ch_at(sc, p, '(') && !paren_seen) || (paren && is_digit_at(sc, p)))
            continue;
        if (p + 1 < sc->n && is_phone_sep(sc->s[p]) &&
            (is_digit_at(sc, p + 1) || (sc->s[p + 1] == '(' && !paren_seen))) {
            p++;
            continue;
        }
        break;
    }
    if (total < 10 || !number_next_ok(sc, p))
        return 0;
    return label(sc, CG_PII_PHONE, start, p, NORM_DIGITS);
}

/* ---- words: keys, tokens, secret pairs ---- */

/* The class changes between lower case, upper case, digits over s[a..b): random text
 * changes class on about 60 % of its characters (under 38 % for 1 in 100 tokens of 24
 * characters), identifiers such as getHTTPResponseCode2ForRequest on 30 % or less. */
static size_t class_changes(const struct scan *sc, size_t a, size_t b)
{
    size_t changes = 0;
    unsigned last = 0;
    for (size_t k = a; k < b; k++) {
        unsigned c = kind[sc->s[k]] & K_ALNUM;
        if (c == 0)
            continue;
        if (last != 0 && c != last)
            changes++;
        last = c;
    }
    return changes;
}

static unsigned classes_of(const struct scan *sc, size_t a, size_t b)
{
    unsigned c = 0;
    for (size_t k = a; k < b; k++)
        c |= kind[sc->s[k]];
    return c & K_ALNUM;
}

static int popcount3(unsigned c)
{
    return ((c & K_LOWER) != 0) + ((c & K_UPPER) != 0) + ((c & K_DIGIT) != 0);
}

static double shannon_bits(const struct scan *sc, size_t a, size_t b)
{
    unsigned hist[256] = {0};
    for (size_t k = a; k < b; k++)
        hist[sc->s[k]]++;
    double len = (double)(b - a), sum = 0;
    for (int c = 0; c < 256; c++)
        if (hist[c] != 0)
            sum += hist[c] * log2(hist[c]);
    return log2(len) - sum / len;
}

/* Known key prefixes, their least body length and the body's characters. */
struct key_prefix {
    const char *prefix;
    unsigned char min_body;
    unsigned char body_kinds; /* K_ALNUM, K_WORD or K_WORD|K_B64X ('-' then allowed) */
};

static const struct key_prefix key_prefixes[] = {
    {"sk-", 20, K_WORD | K_B64X},   {"sk_live_", 16, K_ALNUM},       {"sk_test_", 16, K_ALNUM},
    {"rk_live_", 16, K_ALNUM},      {"rk_test_", 16, K_ALNUM},       {"ghp_", 30, K_ALNUM},
    {"gho_", 30, K_ALNUM},          {"ghu_", 30, K_ALNUM},           {"ghs_", 30, K_ALNUM},
    {"ghr_", 30, K_ALNUM},          {"github_pat_", 20, K_WORD},     {"xoxb-", 10, K_WORD | K_B64X},
    {"xoxp-", 10, K_WORD | K_B64X}, {"xoxa-", 10, K_WORD | K_B64X},  {"xoxs-", 10, K_WORD | K_B64X},
    {"xoxr-", 10, K_WORD | K_B64X}, {"glpat-", 20, K_WORD | K_B64X}, {"npm_", 30, K_ALNUM},
    {"hf_", 30, K_ALNUM},           {"AIza", 30, K_WORD | K_B64X},
};

#define KEY_SCAN_MAX 512

/* Length of a body of kinds at p (only '-' of K_B64X counts), capped at KEY_SCAN_MAX unless
 * `whole`. */
static size_t body_len(const struct scan *sc, size_t p, unsigned kinds, bool whole)
{
    size_t e = p;
    while (whole || e - p < KEY_SCAN_MAX) {
        unsigned k = k_at(sc, e);
        if (!(k & kinds) || ((k & K_B64X) && sc->s[e] != '-'))
            break;
        e++;
    }
    return e - p;
}

/* A key with a known prefix at i; returns its end or 0 (nothing is emitted). */
static size_t prefixed_key_end(const struct scan *sc, size_t i)
{
    unsigned char c = sc->s[i];
    if (c == 'A' && (starts(sc, i, "AKIA") || starts(sc, i, "ASIA"))) {
        size_t k = 0;
        while (k < 17 && (k_at(sc, i + 4 + k) & (K_UPPER | K_DIGIT)))
            k++;
        if (k == 16 && !(k_at(sc, i + 20) & K_WORD))
            return i + 20;
    }
    if (c == 'e' && starts(sc, i, "eyJ")) { /* JWT: header.payload.signature */
        size_t a = body_len(sc, i, K_WORD | K_B64X, true);
        if (a >= 10 && ch_at(sc, i + a, '.')) {
            size_t b = body_len(sc, i + a + 1, K_WORD | K_B64X, true);
            if (b >= 10 && ch_at(sc, i + a + 1 + b, '.')) {
                size_t s3 = body_len(sc, i + a + b + 2, K_WORD | K_B64X, true);
                if (s3 >= 8)
                    return i + a + b + 2 + s3;
            }
        }
        return 0;
    }
    if (c == 'S' && starts(sc, i, "SG.")) { /* SendGrid: SG.<22>.<43> */
        size_t a = body_len(sc, i + 3, K_WORD | K_B64X, false);
        if (a >= 16 && ch_at(sc, i + 3 + a, '.')) {
            size_t b = body_len(sc, i + 4 + a, K_WORD | K_B64X, false);
            if (b >= 30)
                return i + 4 + a + b;
        }
        return 0;
    }
    if (c != 's' && c != 'r' && c != 'g' && c != 'x' && c != 'n' && c != 'h' && c != 'A')
        return 0;
    for (size_t k = 0; k < sizeof key_prefixes / sizeof key_prefixes[0]; k++) {
        const struct key_prefix *kp = &key_prefixes[k];
        if (kp->prefix[0] != (char)c || !starts(sc, i, kp->prefix))
            continue;
        size_t p = i + strlen(kp->prefix);
        size_t len = body_len(sc, p, kp->body_kinds, false);
        if (len < kp->min_body || popcount3(classes_of(sc, p, p + len)) < 2)
            return 0;
        if (len == KEY_SCAN_MAX)
            len = body_len(sc, p, kp->body_kinds, true);
        return p + len;
    }
    return 0;
}

static size_t find_prefixed_key(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_API_KEY) || (prev_kind(sc, i) & (K_WORD | K_B64X)))
        return 0;
    size_t e = prefixed_key_end(sc, i);
    return e ? label(sc, CG_PII_API_KEY, i, e, NORM_RAW) : 0;
}

static bool ends_with_ci(const struct scan *sc, size_t a, size_t b, const char *suffix)
{
    size_t len = strlen(suffix);
    if (b - a < len)
        return false;
    for (size_t k = 0; k < len; k++)
        if (lower(sc->s[b - len + k]) != (unsigned char)suffix[k])
            return false;
    return true;
}

static bool equals_ci(const struct scan *sc, size_t a, size_t b, const char *word)
{
    return b - a == strlen(word) && ends_with_ci(sc, a, b, word);
}

/* Whether "Authorization:" (any case, spaces after) ends just before i. */
static bool after_authorization(const struct scan *sc, size_t i)
{
    size_t p = i;
    while (p > 0 && i - p < 8 && sc->s[p - 1] == ' ')
        p--;
    return p >= 14 && equals_ci(sc, p - 14, p, "authorization:");
}

/* `Bearer TOKEN` (an API key) and `Authorization: Basic CREDENTIALS` (a secret). */
static size_t find_bearer(struct scan *sc, size_t i)
{
    bool basic = starts(sc, i, "Basic ");
    cg_pii_type type = basic ? CG_PII_SECRET : CG_PII_API_KEY;
    if (!enabled(sc, type) || !(basic ? after_authorization(sc, i) : starts(sc, i, "Bearer")))
        return 0;
    size_t p = i + (basic ? 5 : 6), sp = 0;
    while (sp < 4 && ch_at(sc, p, ' ')) {
        p++;
        sp++;
    }
    if (sp == 0)
        return 0;
    size_t e = p;
    while ((k_at(sc, e) & (K_WORD | K_B64X | K_DOT)) || ch_at(sc, e, '~'))
        e++;
    while (e > p && sc->s[e - 1] == '.')
        e--; /* a sentence's full stop */
    size_t pad = 0;
    while (pad < 2 && ch_at(sc, e, '=')) {
        e++;
        pad++;
    }
    if (e - p < (basic ? 4 : 12) || popcount3(classes_of(sc, p, e)) < 2)
        return 0;
    return label(sc, type, p, e, NORM_RAW);
}

static size_t find_entropy_token(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_API_KEY) || (prev_kind(sc, i) & K_B64))
        return 0;
    size_t e = i;
    while (k_at(sc, e) & K_B64)
        e++;
    size_t len = e - i;
    if (len < sc->opt->entropy_min_len || len > 1024)
        return 0;
    if (popcount3(classes_of(sc, i, e)) < 3)
        return 0;
    if (class_changes(sc, i, e) * 100 < len * 36)
        return 0; /* words and identifiers: CamelCaseName2 changes class on ~30 % */
    if (shannon_bits(sc, i, e) < sc->opt->entropy_min_bits)
        return 0;
    size_t pad = 0;
    while (pad < 2 && ch_at(sc, e + pad, '='))
        pad++;
    return label(sc, CG_PII_API_KEY, i, e + pad, NORM_RAW);
}

static const char *const secret_keys[] = {
    "password", "passwd",  "passphrase", "secret",     "token",       "api_key",
    "apikey",   "api-key", "access_key", "secret_key", "private_key",
};

/* Values that say there is no secret: references, placeholders, labels, literals. */
static bool placeholder(const struct scan *sc, size_t a, size_t b, bool token_like)
{
    static const char *const words[] = {"null", "none", "nil", "true", "false", "undefined"};
    unsigned char c = sc->s[a];
    if (c == '$' || c == '<' || c == '{' || c == '%' || c == '*')
        return true;
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (equals_ci(sc, a, b, words[k]))
            return true;
    if (token_like && b - a < 8) {
        size_t k = a;
        while (k < b && sc->s[k] >= '0' && sc->s[k] <= '9')
            k++;
        if (k == b)
            return true; /* max_token: 400 */
    }
    return false;
}

static bool value_stop(unsigned char c)
{
    return c <= ' ' || c == '"' || c == '\'' || c == ',' || c == ';' || c == '&' || c == ')' ||
           c == ']' || c == '}' || c == '>' || c == '`' || c == 0x7f;
}

/* `key=value`, `key: value`, `"key": "value"` where key ends in a secret word. */
static size_t find_secret_pair(struct scan *sc, size_t i)
{
    if (!enabled(sc, CG_PII_SECRET) || (prev_kind(sc, i) & K_WORD) || prev_ch(sc, i) == '.' ||
        prev_ch(sc, i) == '-')
        return 0;
    size_t e = i;
    while (e - i <= 64 && ((k_at(sc, e) & (K_WORD | K_DOT)) || ch_at(sc, e, '-')))
        e++;
    if (e - i > 64)
        return 0;
    size_t p = e;
    unsigned char q = prev_ch(sc, i);
    if ((q == '"' || q == '\'') && ch_at(sc, p, (char)q))
        p++;
    while (p - e < 4 && (ch_at(sc, p, ' ') || ch_at(sc, p, '\t')))
        p++;
    if (ch_at(sc, p, '=')) {
        if (ch_at(sc, p + 1, '='))
            return 0;
        p++;
        if (ch_at(sc, p, '>'))
            p++;
    } else if (ch_at(sc, p, ':')) {
        if (ch_at(sc, p + 1, ':'))
            return 0;
        p++;
        if (ch_at(sc, p, '='))
            p++;
    } else {
        return 0;
    }
    unsigned char last = lower(sc->s[e - 1]);
    if (last != 'd' && last != 'e' && last != 't' && last != 'n' && last != 'y')
        return 0; /* no secret word ends so: the usual `name: value` */
    int which = -1;
    for (size_t k = 0; k < sizeof secret_keys / sizeof secret_keys[0] && which < 0; k++)
        if (ends_with_ci(sc, i, e, secret_keys[k]))
            which = (int)k;
    if (which < 0)
        return 0;
    size_t sp = 0;
    while (sp < 8 && (ch_at(sc, p, ' ') || ch_at(sc, p, '\t'))) {
        p++;
        sp++;
    }
    size_t a = p, b;
    if (ch_at(sc, p, '"') || ch_at(sc, p, '\'')) {
        unsigned char quote = sc->s[p];
        a = p + 1;
        b = a;
        while (b < sc->n && b - a < 1024 && sc->s[b] != quote && sc->s[b] != '\n')
            b++;
        if (!ch_at(sc, b, (char)quote)) {
            b = a;
            while (b < sc->n && !value_stop(sc->s[b]))
                b++;
        }
    } else {
        b = a;
        while (b < sc->n && !value_stop(sc->s[b]))
            b++;
    }
    if (b == a || placeholder(sc, a, b, which == 4))
        return 0;
    size_t key_end = prefixed_key_end(sc, a);
    if (key_end == b && enabled(sc, CG_PII_API_KEY))
        return label(sc, CG_PII_API_KEY, a, b, NORM_RAW);
    return label(sc, CG_PII_SECRET, a, b, NORM_RAW);
}

/* ---- '@': URL credentials and emails ---- */

static bool userinfo_char(unsigned char c)
{
    return c > ' ' && c < 0x7f && c != '/' && c != '@' && c != '"' && c != '\'' && c != '<' &&
           c != '>' && c != '`' && c != '\\';
}

/* scheme://user:password@host: the user:password becomes a SECRET. */
static size_t find_url_credentials(struct scan *sc, size_t at)
{
    if (!enabled(sc, CG_PII_SECRET))
        return 0;
    size_t a = at;
    while (a > 0 && at - a < 256 && userinfo_char(sc->s[a - 1]))
        a--;
    if (a < 3 || memcmp(sc->s + a - 3, "://", 3) != 0)
        return 0;
    const unsigned char *colon = memchr(sc->s + a, ':', at - a);
    if (colon == NULL || (size_t)(colon - sc->s) + 1 == at)
        return 0;
    /* The authority ends at the last '@' before the path: passwords may hold '@'. */
    size_t last = at;
    for (size_t p = at + 1; p < sc->n && p - at < 256; p++) {
        unsigned char c = sc->s[p];
        if (c == '@')
            last = p;
        else if (!userinfo_char(c) || c == '?' || c == '#')
            break;
    }
    if (a < sc->copied)
        a = sc->copied;
    if (a >= last)
        return 0;
    label(sc, CG_PII_SECRET, a, last, NORM_RAW);
    return last + 1;
}

static bool local_char(unsigned char c)
{
    return (kind[c] & K_WORD) || c == '.' || c == '%' || c == '+' || c == '-';
}

static size_t find_email(struct scan *sc, size_t at)
{
    static const char *const file_tlds[] = {"png", "jpg", "jpeg", "gif", "svg", "webp", "ico"};
    if (!enabled(sc, CG_PII_EMAIL))
        return 0;
    size_t a = at;
    while (a > sc->copied && at - a <= 64 && local_char(sc->s[a - 1]))
        a--;
    if (at - a > 64)
        return 0;
    while (a < at && !(kind[sc->s[a]] & K_ALNUM))
        a++; /* a local part starts with a letter or digit here */
    if (a == at || sc->s[at - 1] == '.')
        return 0;
    if (a >= 3 && memcmp(sc->s + a - 3, "://", 3) == 0)
        return 0; /* ssh://git@host: a user name in a URL, no credential */
    size_t p = at + 1, last_label = p, labels = 0;
    for (size_t l = p;; l = ++p) {
        while (l - p < 64 && ((k_at(sc, l) & K_ALNUM) || ch_at(sc, l, '-')))
            l++;
        if (l == p || l - p > 63 || sc->s[p] == '-' || sc->s[l - 1] == '-') {
            p = labels > 0 ? p - 1 : p; /* back to the end of the last good label */
            break;
        }
        labels++;
        last_label = p;
        p = l;
        if (p - at > 254 || !ch_at(sc, p, '.') || !(k_at(sc, p + 1) & K_ALNUM))
            break;
    }
    if (labels < 2 || p - at > 254)
        return 0;
    for (size_t k = last_label; k < p; k++)
        if (!(kind[sc->s[k]] & K_ALPHA))
            return 0;
    if (p - last_label < 2)
        return 0;
    for (size_t k = 0; k < sizeof file_tlds / sizeof file_tlds[0]; k++)
        if (equals_ci(sc, last_label, p, file_tlds[k]))
            return 0;
    if (ch_at(sc, p, ':') && p + 1 < sc->n && sc->s[p + 1] > ' ' && !is_digit_at(sc, p + 1))
        return 0; /* git@github.com:org/repo */
    if (k_at(sc, p) & K_WORD)
        return 0;
    return label(sc, CG_PII_EMAIL, a, p, NORM_LOWER);
}

/* ---- '-': PEM blocks ---- */

static size_t pem_end(struct scan *sc, size_t from)
{
    if (from >= sc->pem_from && from <= sc->pem_at)
        return sc->pem_at;
    const unsigned char *hit = NULL;
    if (from < sc->n)
        hit = memmem(sc->s + from, sc->n - from, "-----END ", 9);
    sc->pem_from = from;
    sc->pem_at = hit ? (size_t)(hit - sc->s) : sc->n;
    return sc->pem_at;
}

static size_t find_pem(struct scan *sc, size_t i)
{
    if (!starts(sc, i, "-----BEGIN ") || (prev_kind(sc, i) & K_WORD))
        return 0;
    size_t p = i + 11;
    while (p - i < 64 && ((k_at(sc, p) & (K_UPPER | K_DIGIT)) || ch_at(sc, p, ' ')))
        p++;
    if (!starts(sc, p, "-----"))
        return 0;
    bool private_key = p - i >= 22 && memcmp(sc->s + p - 11, "PRIVATE KEY", 11) == 0;
    size_t body = p + 5;
    if (ch_at(sc, body, '\r'))
        body++;
    if (ch_at(sc, body, '\n'))
        body++;
    size_t end = pem_end(sc, body);
    if (!private_key) {
        if (end == sc->n)
            return body; /* skip the header line only */
        size_t q = end + 9;
        while (q < sc->n && q - end < 80 && !starts(sc, q, "-----"))
            q++;
        return starts(sc, q, "-----") ? q + 5 : end + 9; /* public: left whole */
    }
    if (!enabled(sc, CG_PII_SECRET))
        return 0;
    size_t stop = end;
    if (stop > body && sc->s[stop - 1] == '\n')
        stop--;
    if (stop > body && sc->s[stop - 1] == '\r')
        stop--;
    if (stop <= body)
        return body;
    return label(sc, CG_PII_SECRET, body, stop, NORM_RAW);
}

/* ---- dispatch ---- */

/* The detectors are gated by what the first characters and the word's end allow, so that
 * an ordinary word costs a few comparisons beyond the scan that finds its end. */
static size_t at_digit(struct scan *sc, size_t i, size_t w)
{
    size_t d = run_of_digits(sc, i, 20);
    unsigned next = k_at(sc, i + d);
    unsigned char nc = i + d < sc->n ? sc->s[i + d] : 0;
    size_t r;
    if (d <= 4 && (nc == ':' || (next & K_HEX)) && (r = find_ipv6(sc, i)))
        return r;
    if (d <= 3 && nc == '.' && (r = find_ipv4(sc, i)))
        return r;
    if (d == 3 && nc == '-' && (r = find_ssn(sc, i)))
        return r;
    if (((d == 4 && (nc == ' ' || nc == '-')) || d >= 13) && (r = find_card(sc, i)))
        return r;
    bool sep = is_phone_sep(nc) || nc == '/';
    if (((d == 3 && sep) || (d == 1 && sc->s[i] == '1' && sep) ||
         (sc->s[i] == '0' && d >= 2 && d <= 5 && sep)) &&
        (r = find_national_phone(sc, i)))
        return r;
    if ((next & (K_ALPHA | K_B64X | K_UNDER)) || w - i >= sc->opt->entropy_min_len)
        return find_entropy_token(sc, i);
    return 0;
}

/* Whether the two first characters can start a key with a known prefix (or a JWT). */
static bool key_prefix_gate(unsigned char c0, unsigned char c1)
{
    switch (c0) {
    case 's':
    case 'r':
        return c1 == 'k';
    case 'g':
        return c1 == 'h' || c1 == 'i' || c1 == 'l';
    case 'x':
        return c1 == 'o';
    case 'n':
        return c1 == 'p';
    case 'h':
        return c1 == 'f';
    case 'A':
        return c1 == 'K' || c1 == 'S' || c1 == 'I';
    case 'e':
        return c1 == 'y';
    case 'S':
        return c1 == 'G';
    default:
        return false;
    }
}

static size_t at_letter(struct scan *sc, size_t i, size_t w)
{
    const unsigned char *s = sc->s;
    size_t n = sc->n, r;
    unsigned char c0 = s[i], c1 = i + 1 < n ? s[i + 1] : 0;
    if (key_prefix_gate(c0, c1) && (r = find_prefixed_key(sc, i)))
        return r;
    if (c0 == 'B' && (w - i == 6 || w - i == 5) && (r = find_bearer(sc, i)))
        return r;
    /* a secret pair needs '=' or ':' after the key (past a quote and a few spaces) */
    size_t p = w;
    bool longer_key = w + 1 < n && (s[w] == '.' || s[w] == '-') && (kind[s[w + 1]] & K_WORD);
    if (p < n && (s[p] == '"' || s[p] == '\''))
        p++;
    while (p < n && p - w < 5 && (s[p] == ' ' || s[p] == '\t'))
        p++;
    if ((longer_key || (p < n && (s[p] == '=' || s[p] == ':'))) && (r = find_secret_pair(sc, i)))
        return r;
    if (w - i <= 4 && w < n && s[w] == ':' && (kind[c0] & K_HEX)) {
        size_t h = i;
        while (h < w && (kind[s[h]] & K_HEX))
            h++;
        if (h == w && (r = find_ipv6(sc, i)))
            return r;
    }
    if (w - i >= sc->opt->entropy_min_len || (w < n && (kind[s[w]] & K_B64X)))
        return find_entropy_token(sc, i);
    return 0;
}

static size_t at_trigger(struct scan *sc, size_t i)
{
    size_t r;
    switch (sc->s[i]) {
    case '@':
        if ((r = find_url_credentials(sc, i)))
            return r;
        return find_email(sc, i);
    case '+':
        return is_digit_at(sc, i + 1) ? find_intl_phone(sc, i) : 0;
    case '(':
        return is_digit_at(sc, i + 1) ? find_national_phone(sc, i) : 0;
    case '-':
        return ch_at(sc, i + 1, '-') ? find_pem(sc, i) : 0;
    case ':':
        return ch_at(sc, i + 1, ':') ? find_ipv6(sc, i) : 0;
    default:
        return 0;
    }
}

/* Characters after a word that may make it worth a look (see at_letter's gates): '-' '.' '+'
 * '/' ':' '=' and quotes always; spaces when a '=' or ':' follows them. */
#define F_ALWAYS 1u
#define F_SPACE 2u
static const unsigned char follow[256] = {
    ['-'] = F_ALWAYS, ['.'] = F_ALWAYS, ['+'] = F_ALWAYS,  ['/'] = F_ALWAYS, [':'] = F_ALWAYS,
    ['='] = F_ALWAYS, ['"'] = F_ALWAYS, ['\''] = F_ALWAYS, [' '] = F_SPACE,  ['\t'] = F_SPACE,
};

/* Whether the letter word s[i..w) can start anything: most words are answered here. */
static inline bool letter_word_worth_a_look(const unsigned char *s, size_t n, size_t i, size_t w,
                                            size_t long_word)
{
    if (w - i >= long_word || w >= n)
        return w - i >= long_word;
    unsigned f = follow[s[w]];
    if (f & F_ALWAYS)
        return true;
    if ((w - i == 6 || w - i == 5) && s[i] == 'B')
        return true; /* Bearer, Basic */
    if (!(f & F_SPACE) || w + 1 >= n)
        return false;
    unsigned char c = s[w + 1];
    if (c == '=' || c == ':')
        return true;
    if (c != ' ' && c != '\t')
        return false; /* the usual case: a word, a space, a word */
    size_t p = w + 2;
    while (p < n && p - w < 5 && (s[p] == ' ' || s[p] == '\t'))
        p++;
    return p < n && (s[p] == '=' || s[p] == ':');
}

/* The end of the word that goes on at w. */
static inline size_t word_end(const unsigned char *s, size_t n, size_t w)
{
    while (w < n && (kind[s[w]] & K_WORD))
        w++;
    return w;
}

/* The first byte at or after i that is a word character or a trigger (n when none). */
static inline size_t next_candidate(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && !(kind[s[i]] & (K_WORD | K_TRIG)))
        i++;
    return i;
}

static void scan_all(struct scan *sc)
{
    const unsigned char *s = sc->s;
    const size_t n = sc->n;
    /* the shortest word that may be a key by its length alone (prefixed keys: 18) */
    const size_t long_word = sc->opt->entropy_min_len < 18 ? sc->opt->entropy_min_len : 18;
    size_t i = next_candidate(s, n, 0);
    while (i < n) {
        unsigned k = kind[s[i]];
        size_t next = 0;
        if (k & K_WORD) {
            size_t w = word_end(s, n, i + 1);
            if (i == 0 || !(kind[s[i - 1]] & K_WORD)) {
                if (k & K_DIGIT)
                    next = at_digit(sc, i, w);
                else if (letter_word_worth_a_look(s, n, i, w, long_word))
                    next = at_letter(sc, i, w);
            }
            if (next <= i)
                next = w;
        } else {
            next = at_trigger(sc, i); /* next_candidate stops only at words and triggers */
            if (next <= i)
                next = i + 1;
        }
        if (sc->st != CG_OK)
            return;
        i = next_candidate(s, n, next);
    }
    flush_to(sc, n);
}

/* ---- public ---- */

static cg_status fail(struct cg_err *err, cg_status code, const char *what, size_t n)
{
    if (err != NULL) {
        err->code = code;
        snprintf(err->msg, sizeof err->msg, what, n);
    }
    return code;
}

void cg_redact_options_init(struct cg_redact_options *options)
{
    options->enabled = CG_PII_ALL;
    options->entropy_min_len = 24;
    options->entropy_min_bits = 3.5;
}

void cg_redact_session_init(struct cg_redact_session *session, uint64_t seed0, uint64_t seed1)
{
    memset(session, 0, sizeof *session);
    session->key[0] = seed0;
    session->key[1] = seed1;
}

void cg_redact_buf_init(struct cg_redact_buf *buf, size_t max)
{
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
    buf->max = max;
}

void cg_redact_buf_cleanup(struct cg_redact_buf *buf)
{
    free(buf->data);
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

const char *cg_pii_type_name(cg_pii_type type)
{
    return (type > CG_PII_UNSPECIFIED && type < CG_PII_TYPE_COUNT) ? type_names[type] : NULL;
}

cg_status cg_redact(const struct cg_redact_options *options, struct cg_redact_session *session,
                    const char *in, size_t len, struct cg_redact_buf *out,
                    struct cg_redact_counts *counts, struct cg_err *err)
{
    return cg_redact_with_spans(options, session, in, len, out, counts, NULL, err);
}

cg_status cg_redact_with_spans(const struct cg_redact_options *options,
                               struct cg_redact_session *session, const char *in, size_t len,
                               struct cg_redact_buf *out, struct cg_redact_counts *counts,
                               struct cg_redact_spans *spans, struct cg_err *err)
{
    struct cg_redact_options defaults;
    if (spans != NULL) {
        spans->len = 0;
        spans->dropped = 0;
    }
    if (session == NULL || out == NULL || (in == NULL && len > 0)) {
        if (out != NULL)
            out->len = 0;
        return fail(err, CG_INVALID_ARGUMENT,
                    session == NULL ? "redact: no session (%zu)"
                    : out == NULL   ? "redact: no output buffer (%zu)"
                                    : "redact: no input text for %zu bytes",
                    len);
    }
    if (options == NULL) {
        cg_redact_options_init(&defaults);
        options = &defaults;
    }
    struct scan sc = {
        .opt = options,
        .ses = session,
        .s = (const unsigned char *)(in != NULL ? in : ""),
        .n = len,
        .out = out,
        .st = CG_OK,
        .pem_from = 1,
        .pem_at = 0, /* empty cache */
        .spans = spans,
    };
    out->len = 0;
    /* Labels can be longer than what they replace, but rarely: reserve the input's size. */
    if (out_reserve(&sc, len < out->max ? len : out->max))
        scan_all(&sc);
    if (sc.st == CG_OK && !out_reserve(&sc, 0))
        sc.st = CG_NOMEM;
    if (sc.st != CG_OK) {
        if (spans != NULL)
            spans->len = 0;
        out->len = 0;
        if (out->data != NULL)
            out->data[0] = '\0';
        if (sc.st == CG_RESOURCE_EXHAUSTED)
            return fail(err, sc.st, "redact: the redacted text exceeds %zu bytes", out->max);
        return fail(err, sc.st, "redact: out of memory for %zu bytes of text", len);
    }
    out->data[out->len] = '\0';
    if (err != NULL) {
        err->code = CG_OK;
        err->msg[0] = '\0';
    }
    if (counts != NULL) {
        for (int t = 0; t < CG_PII_TYPE_COUNT; t++)
            counts->by_type[t] += sc.counts[t];
        counts->session_full |= sc.session_full;
    }
    return CG_OK;
}

/* json_fast.c - the fast path of json_fast.h: a recursive reader over the bytes, strict (it
 * gives up on anything jansson might read differently) and building jansson values in input
 * order. Grammar and checks follow jansson 2.14's load.c: whitespace is space, tab, CR, LF;
 * strings hold no byte below 0x20 and only well-formed UTF-8; escapes are jansson's eight
 * plus \uXXXX with surrogate pairs; numbers are -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?,
 * integers when there is no fraction or exponent.
 */
#include "core/json_fast.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX 512 /* jansson allows 2048; deeper input goes to jansson */
#define NUMBER_MAX 64 /* longer numbers go to jansson */

struct reader {
    const unsigned char *p, *end;
    bool allow_nul, build;
    int max_depth; /* containers nested deeper: give up */
    char *scratch; /* decoded strings with escapes */
    size_t cap;
};

/* A value in check mode, where nothing is built. */
#define CHECKED ((json_t *)&checked_marker)
static const int checked_marker;

static void skip_ws(struct reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

/* Length of the well-formed UTF-8 sequence at p (p[0] >= 0x80), 0 when ill-formed. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    if ((size_t)(end - p) <= need || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k <= need; k++)
        if (p[k] < 0x80 || p[k] > 0xBF)
            return 0;
    return need + 1;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = p[k];
        int d = c >= '0' && c <= '9'   ? (int)(c - '0')
                : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
                : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10)
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

static bool scratch_room(struct reader *r, size_t need)
{
    if (need <= r->cap)
        return true;
    size_t cap = r->cap ? r->cap : 256;
    while (cap < need)
        cap *= 2;
    char *n = realloc(r->scratch, cap);
    if (n == NULL)
        return false;
    r->scratch = n;
    r->cap = cap;
    return true;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Whether any of the 8 bytes of w is below 0x20, a quote, a backslash or 0x80 and above
 * (exact as a yes/no: a borrow only ever follows a byte that is itself a hit). */
static inline bool word_special(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), b = w ^ (ONES * '\\');
    uint64_t hit = ((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) | ((b - ONES) & ~b) | w;
    return (hit & HIGHS) != 0;
}

/* The string whose opening quote is at r->p: its bytes in *s / *len (into the input when it
 * has no escape, else into the scratch buffer). false: give up. */
static bool read_string(struct reader *r, const char **s, size_t *len, bool *has_nul)
{
    const unsigned char *p = ++r->p, *end = r->end;
    *has_nul = false;
    /* The usual case: a run of plain bytes up to the closing quote. */
    for (;;) {
        uint64_t w;
        while (end - p >= 8 && (memcpy(&w, p, 8), !word_special(w)))
            p += 8;
        while (p < end && *p >= 0x20 && *p != '"' && *p != '\\' && *p < 0x80)
            p++;
        if (p >= end || *p < 0x20)
            return false;
        if (*p == '"') {
            *s = (const char *)r->p;
            *len = (size_t)(p - r->p);
            r->p = p + 1;
            return true;
        }
        if (*p == '\\')
            break;
        size_t n = utf8_seq(p, end);
        if (n == 0)
            return false;
        p += n;
    }
    /* Escapes: decode into the scratch buffer (never longer than the input). */
    size_t head = (size_t)(p - r->p);
    if (!scratch_room(r, (size_t)(end - r->p)))
        return false;
    memcpy(r->scratch, r->p, head);
    size_t w = head;
    while (p < end) {
        unsigned c = *p;
        if (c == '"') {
            *s = r->scratch;
            *len = w;
            r->p = p + 1;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c >= 0x80) {
            size_t n = utf8_seq(p, end);
            if (n == 0)
                return false;
            memcpy(r->scratch + w, p, n);
            w += n;
            p += n;
            continue;
        }
        if (c != '\\') {
            r->scratch[w++] = (char)c;
            p++;
            continue;
        }
        if (end - p < 2)
            return false;
        c = p[1];
        p += 2;
        char out;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            out = (char)c;
            break;
        case 'b':
            out = '\b';
            break;
        case 'f':
            out = '\f';
            break;
        case 'n':
            out = '\n';
            break;
        case 'r':
            out = '\r';
            break;
        case 't':
            out = '\t';
            break;
        case 'u': {
            if (end - p < 4)
                return false;
            int32_t v = hex4(p);
            if (v < 0)
                return false;
            p += 4;
            if (v >= 0xDC00 && v <= 0xDFFF)
                return false;
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u')
                    return false;
                int32_t lo = hex4(p + 2);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return false;
                p += 6;
                v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            }
            /* \uXXXX is 6 input bytes for at most 3 output bytes, a pair 12 for 4. */
            char *o = r->scratch + w;
            if (v == 0)
                *has_nul = true;
            if (v < 0x80) {
                o[0] = (char)v;
                w += 1;
            } else if (v < 0x800) {
                o[0] = (char)(0xC0 | (v >> 6));
                o[1] = (char)(0x80 | (v & 0x3F));
                w += 2;
            } else if (v < 0x10000) {
                o[0] = (char)(0xE0 | (v >> 12));
                o[1] = (char)(0x80 | ((v >> 6) & 0x3F));
                o[2] = (char)(0x80 | (v & 0x3F));
                w += 3;
            } else {
                o[0] = (char)(0xF0 | (v >> 18));
                o[1] = (char)(0x80 | ((v >> 12) & 0x3F));
                o[2] = (char)(0x80 | ((v >> 6) & 0x3F));
                o[3] = (char)(0x80 | (v & 0x3F));
                w += 4;
            }
            continue;
        }
        default:
            return false;
        }
        r->scratch[w++] = out;
    }
    return false;
}

static bool is_digit(const unsigned char *p, const unsigned char *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

static json_t *read_number(struct reader *r)
{
    const unsigned char *p = r->p, *end = r->end, *start = p;
    bool neg = false, real = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    if (!is_digit(p, end))
        return NULL;
    const unsigned char *digits = p;
    if (*p == '0') {
        p++;
        if (is_digit(p, end))
            return NULL;
    } else {
        while (is_digit(p, end))
            p++;
    }
    size_t n_digits = (size_t)(p - digits);
    if (p < end && *p == '.') {
        real = true;
        p++;
        if (!is_digit(p, end))
            return NULL;
        while (is_digit(p, end))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        real = true;
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (!is_digit(p, end))
            return NULL;
        while (is_digit(p, end))
            p++;
    }
    r->p = p;
    if (!real) {
        if (n_digits > 18) /* may not fit json_int_t: jansson's strtoll decides */
            return NULL;
        if (!r->build)
            return CHECKED;
        json_int_t v = 0;
        for (const unsigned char *d = digits; d < p; d++)
            v = v * 10 + (*d - '0');
        return json_integer(neg ? -v : v);
    }
    size_t len = (size_t)(p - start);
    if (len >= NUMBER_MAX)
        return NULL;
    /* jansson swaps '.' for the locale's decimal point before strtod; here only the C one. */
    const char *dp = localeconv()->decimal_point;
    if (dp == NULL || dp[0] != '.' || dp[1] != '\0')
        return NULL;
    char buf[NUMBER_MAX];
    memcpy(buf, start, len);
    buf[len] = '\0';
    errno = 0;
    char *stop;
    double v = strtod(buf, &stop);
    if (stop != buf + len || ((v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE))
        return NULL;
    return r->build ? json_real(v) : CHECKED;
}

static bool literal(struct reader *r, const char *word, size_t n)
{
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return false;
    r->p += n;
    /* jansson reads a whole run of letters as one word: "truex" is not "true". */
    if (r->p < r->end && ((*r->p | 0x20) >= 'a' && (*r->p | 0x20) <= 'z'))
        return false;
    return true;
}

static json_t *read_value(struct reader *r, int depth);

static void drop(struct reader *r, json_t *v)
{
    if (r->build)
        json_decref(v);
}

static json_t *read_object(struct reader *r, int depth)
{
    json_t *obj = r->build ? json_object() : CHECKED;
    if (obj == NULL)
        return NULL;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        return obj;
    }
    for (;;) {
        skip_ws(r);
        if (r->p >= r->end || *r->p != '"')
            break;
        const char *key;
        size_t klen;
        bool nul;
        if (!read_string(r, &key, &klen, &nul) || nul)
            break;
        /* The key may sit in the scratch buffer, which the value may reuse. */
        char small[64], *kcopy = NULL;
        if (r->build && key == r->scratch) {
            kcopy = klen < sizeof small ? small : malloc(klen + 1);
            if (kcopy == NULL)
                break;
            memcpy(kcopy, key, klen);
            key = kcopy;
        }
        skip_ws(r);
        json_t *v = NULL;
        if (r->p < r->end && *r->p == ':') {
            r->p++;
            v = read_value(r, depth + 1);
        }
        int bad = v == NULL || (r->build && json_object_setn_new_nocheck(obj, key, klen, v) != 0);
        if (kcopy != NULL && kcopy != small)
            free(kcopy);
        if (bad)
            break;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == '}') {
            r->p++;
            return obj;
        }
        break;
    }
    drop(r, obj);
    return NULL;
}

static json_t *read_array(struct reader *r, int depth)
{
    json_t *arr = r->build ? json_array() : CHECKED;
    if (arr == NULL)
        return NULL;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        return arr;
    }
    for (;;) {
        json_t *v = read_value(r, depth + 1);
        if (v == NULL || (r->build && json_array_append_new(arr, v) != 0))
            break;
        skip_ws(r);
        if (r->p < r->end && *r->p == ',') {
            r->p++;
            continue;
        }
        if (r->p < r->end && *r->p == ']') {
            r->p++;
            return arr;
        }
        break;
    }
    drop(r, arr);
    return NULL;
}

static json_t *read_value(struct reader *r, int depth)
{
    skip_ws(r);
    if (r->p >= r->end)
        return NULL;
    switch (*r->p) {
    case '{':
        return depth <= r->max_depth ? read_object(r, depth) : NULL;
    case '[':
        return depth <= r->max_depth ? read_array(r, depth) : NULL;
    case '"': {
        const char *s;
        size_t len;
        bool nul;
        if (!read_string(r, &s, &len, &nul) || (nul && !r->allow_nul))
            return NULL;
        return r->build ? json_stringn_nocheck(s, len) : CHECKED;
    }
    case 't':
        return literal(r, "true", 4) ? (r->build ? json_true() : CHECKED) : NULL;
    case 'f':
        return literal(r, "false", 5) ? (r->build ? json_false() : CHECKED) : NULL;
    case 'n':
        return literal(r, "null", 4) ? (r->build ? json_null() : CHECKED) : NULL;
    default:
        if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
            return read_number(r);
        return NULL;
    }
}

/* The whole text as one value (checked: the top-level rule and nothing after it). */
static json_t *read_all(struct reader *r, size_t flags, bool *is_object)
{
    if (flags & ~(size_t)(JSON_DECODE_ANY | JSON_ALLOW_NUL))
        return NULL;
    skip_ws(r);
    if (r->p >= r->end)
        return NULL;
    *is_object = *r->p == '{';
    if (!(flags & JSON_DECODE_ANY) && *r->p != '{' && *r->p != '[')
        return NULL;
    json_t *v = read_value(r, 1);
    if (v == NULL)
        return NULL;
    skip_ws(r);
    if (r->p != r->end) {
        drop(r, v);
        return NULL;
    }
    return v;
}

json_t *cg_json_fast_load(const char *text, size_t len, size_t flags, int max_depth)
{
    if (text == NULL)
        return NULL;
    struct reader r = {.p = (const unsigned char *)text,
                       .end = (const unsigned char *)text + len,
                       .allow_nul = (flags & JSON_ALLOW_NUL) != 0,
                       .build = true,
                       .max_depth = max_depth > 0 && max_depth < DEPTH_MAX ? max_depth : DEPTH_MAX};
    bool is_object;
    json_t *v = read_all(&r, flags, &is_object);
    free(r.scratch);
    return v;
}

/* Whether jansson's lexer refuses the first token of text for sure: only white space, a
 * byte no token starts with, or a word that is not true, false or null (it reads a whole
 * run of ASCII letters as one word); without JSON_DECODE_ANY anything but { or [. */
static bool first_token_refused(const unsigned char *p, const unsigned char *end, size_t flags)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    if (p == end)
        return true;
    unsigned c = *p;
    if (c == '{' || c == '[')
        return false;
    if (!(flags & JSON_DECODE_ANY))
        return true;
    if (c == '"' || c == '-' || (c >= '0' && c <= '9'))
        return false;
    const unsigned char *w = p;
    while (p < end && (*p | 0x20) >= 'a' && (*p | 0x20) <= 'z')
        p++;
    size_t n = (size_t)(p - w);
    return !((n == 4 && memcmp(w, "true", 4) == 0) || (n == 5 && memcmp(w, "false", 5) == 0) ||
             (n == 4 && memcmp(w, "null", 4) == 0));
}

int cg_json_fast_check(const char *text, size_t len, size_t flags, bool need_object, int max_depth)
{
    if (text == NULL)
        return 0;
    if (len > 0 &&
        first_token_refused((const unsigned char *)text, (const unsigned char *)text + len, flags))
        return -1;
    struct reader r = {.p = (const unsigned char *)text,
                       .end = (const unsigned char *)text + len,
                       .allow_nul = (flags & JSON_ALLOW_NUL) != 0,
                       .max_depth = max_depth > 0 && max_depth < DEPTH_MAX ? max_depth : DEPTH_MAX};
    bool is_object = false;
    json_t *v = read_all(&r, flags, &is_object);
    free(r.scratch);
    return v != NULL && (!need_object || is_object);
}

json_t *cg_json_load(const char *text, size_t len, size_t flags, json_error_t *error)
{
    json_t *v = cg_json_fast_load(text, len, flags, 0);
    return v != NULL ? v : json_loadb(text, len, flags, error);
}

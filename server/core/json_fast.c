/* json_fast.c - the fast path of json_fast.h: yajl (Debian libyajl-dev 2.1) tokenizes and
 * unescapes, its callbacks build the jansson values in input order. yajl is laxer than jansson
 * in a few places, each closed here by giving up (NULL: the caller asks json_loadb):
 * - UTF-8: yajl only checks the shape of a sequence (it takes overlongs, surrogates and code
 *   points above U+10FFFF), so its check is off (yajl_dont_validate_strings: ~25 % faster)
 *   and every string is checked strictly here (cg_utf8_valid: ASCII 8 bytes at a time).
 * - \uXXXX: yajl writes '?' for a lone high surrogate, joins one with any \uXXXX that
 *   follows and lets a lone low one through; strings with escapes are re-checked here.
 * - white space: yajl also takes \v and \f between tokens (jansson does not; no valid JSON
 *   text holds either byte anywhere, since strings refuse raw control bytes).
 * - numbers: yajl hands over the raw text (yajl_number); it is converted as jansson does
 *   (strtoll for integers, strtod for reals) and given up on when jansson would refuse it.
 * - NUL: a \u0000 in a key, or in a value without JSON_ALLOW_NUL.
 * - depth: yajl has no limit, the callbacks count.
 * - the end: yajl takes a value followed by an unfinished token; only white space may follow.
 */
#include "core/json_fast.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "core/utf8.h"

#define DEPTH_MAX 512 /* jansson allows 2048; deeper input goes to jansson */
#define NUMBER_MAX 64 /* longer numbers go to jansson */

/* The values being built: the open containers, the key waiting for its value. */
struct builder {
    yajl_handle h;
    const char *text;
    size_t len;
    size_t last;    /* input offset just after the token of the previous callback */
    bool finishing; /* in yajl_complete_parse, whose offsets are not into the input */
    bool build, allow_nul;
    bool utf8_checked; /* CG_JSON_FAST_UTF8_CHECKED */
    int depth, max_depth;
    json_t *root;
    bool root_is_object;
    json_t *open[DEPTH_MAX + 1]; /* open[1..depth]: the containers not yet closed */
    const char *key;             /* the key of an object member waiting for its value */
    size_t key_len;
    char *key_copy; /* escaped keys: yajl reuses its buffer for the value */
    size_t key_cap;
};

/* A value in check mode, where nothing is built. */
#define CHECKED ((json_t *)&checked_marker)
static const int checked_marker;

/* v joins the container it is in (or becomes the root); false: give up. */
static bool place(struct builder *b, json_t *v)
{
    /* Only a number at the very end of the input waits for yajl_complete_parse. */
    b->last = b->finishing ? b->len : yajl_get_bytes_consumed(b->h);
    if (!b->build)
        return true;
    if (v == NULL)
        return false;
    if (b->depth == 0) {
        b->root = v;
        return true;
    }
    json_t *c = b->open[b->depth];
    if (json_is_array(c))
        return json_array_append_new(c, v) == 0;
    return json_object_setn_new_nocheck(c, b->key, b->key_len, v) == 0;
}

static int on_null(void *ctx)
{
    struct builder *b = ctx;
    return place(b, b->build ? json_null() : CHECKED);
}

static int on_boolean(void *ctx, int value)
{
    struct builder *b = ctx;
    return place(b, b->build ? json_boolean(value) : CHECKED);
}

/* The number text s[0..len) as jansson converts it: NULL when jansson refuses it (out of
 * range) or might read it otherwise. yajl checked the grammar. */
static json_t *number(const struct builder *b, const char *s, size_t len)
{
    if (len >= NUMBER_MAX)
        return NULL;
    char buf[NUMBER_MAX];
    memcpy(buf, s, len);
    buf[len] = '\0';
    bool real = memchr(buf, '.', len) || memchr(buf, 'e', len) || memchr(buf, 'E', len);
    char *stop;
    errno = 0;
    if (!real) {
        json_int_t v = strtoll(buf, &stop, 10);
        if (stop != buf + len || errno == ERANGE)
            return NULL;
        return b->build ? json_integer(v) : CHECKED;
    }
    /* jansson swaps '.' for the locale's decimal point before strtod; here only the C one. */
    const char *dp = localeconv()->decimal_point;
    if (dp == NULL || dp[0] != '.' || dp[1] != '\0')
        return NULL;
    double v = strtod(buf, &stop);
    if (stop != buf + len || ((v == HUGE_VAL || v == -HUGE_VAL) && errno == ERANGE))
        return NULL;
    return b->build ? json_real(v) : CHECKED;
}

static int on_number(void *ctx, const char *s, size_t len)
{
    struct builder *b = ctx;
    json_t *v = number(b, s, len);
    if (v == NULL)
        return 0;
    return place(b, v);
}

static int hex4(const char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = (unsigned char)p[k];
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

/* Whether the \u escapes of the raw string token just read (from the first quote after
 * b->last to the quote before yajl's offset) are ones jansson takes: surrogates only in
 * high-low pairs. yajl checked the rest of the escape grammar. */
static bool escapes_ok(const struct builder *b)
{
    size_t end = yajl_get_bytes_consumed(b->h);
    const char *p = memchr(b->text + b->last, '"', end - b->last);
    if (p == NULL || end < 1)
        return false;
    const char *stop = b->text + end - 1;
    for (p++; p < stop; p++) {
        p = memchr(p, '\\', (size_t)(stop - p)); /* from escape to escape */
        if (p == NULL)
            break;
        p++;
        if (*p != 'u')
            continue;
        if (stop - p < 5)
            return false;
        int v = hex4(p + 1);
        p += 4;
        if (v < 0 || (v >= 0xDC00 && v <= 0xDFFF))
            return false;
        if (v >= 0xD800 && v <= 0xDBFF) {
            if (stop - p < 7 || p[1] != '\\' || p[2] != 'u')
                return false;
            int lo = hex4(p + 3);
            if (lo < 0xDC00 || lo > 0xDFFF)
                return false;
            p += 6;
        }
    }
    return true;
}

/* Whether the string yajl hands over (s[0..len), unescaped) is what jansson reads: strict
 * UTF-8, checked escapes; *nul: it holds a NUL (only a \u0000 can put one there). */
static bool string_ok(const struct builder *b, const unsigned char *s, size_t len, bool *nul)
{
    const char *cs = (const char *)s;
    bool raw = cs >= b->text && cs + len <= b->text + b->len; /* no escape: yajl's pointer
                                                                 is into the input */
    *nul = !raw && memchr(s, '\0', len) != NULL;
    /* Input known to be UTF-8: a raw string is a piece of it cut at ASCII quotes, and an
     * unescaped one is too but for what its escapes stand for, which is UTF-8 once
     * escapes_ok has refused lone surrogates (yajl writes the others as UTF-8). */
    if (b->utf8_checked)
        return raw || escapes_ok(b);
    if (!cg_utf8_valid(cs, len, NULL))
        return false;
    return raw || escapes_ok(b);
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    struct builder *b = ctx;
    bool nul;
    if (!string_ok(b, s, len, &nul) || (nul && !b->allow_nul))
        return 0;
    return place(b, b->build ? json_stringn_nocheck((const char *)s, len) : CHECKED);
}

static int on_key(void *ctx, const unsigned char *s, size_t len)
{
    struct builder *b = ctx;
    bool nul;
    if (!string_ok(b, s, len, &nul) || nul)
        return 0;
    b->last = yajl_get_bytes_consumed(b->h);
    const char *cs = (const char *)s;
    if (b->build && !(cs >= b->text && cs + len <= b->text + b->len)) {
        if (len > b->key_cap) {
            size_t cap = len < 64 ? 64 : len;
            char *n = realloc(b->key_copy, cap);
            if (n == NULL)
                return 0;
            b->key_copy = n;
            b->key_cap = cap;
        }
        memcpy(b->key_copy, s, len);
        cs = b->key_copy;
    }
    b->key = cs;
    b->key_len = len;
    return 1;
}

static int open_container(struct builder *b, bool object)
{
    if (b->depth >= b->max_depth)
        return 0;
    if (b->depth == 0)
        b->root_is_object = object;
    json_t *c = b->build ? (object ? json_object() : json_array()) : CHECKED;
    if (c == NULL)
        return 0;
    if (!place(b, c))
        return 0;
    b->open[++b->depth] = c;
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_container(ctx, true);
}

static int on_start_array(void *ctx)
{
    return open_container(ctx, false);
}

static int on_end(void *ctx)
{
    struct builder *b = ctx;
    b->depth--;
    b->last = yajl_get_bytes_consumed(b->h);
    return 1;
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_number = on_number, /* raw text: integer/double callbacks are not used */
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_key,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

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

/* The whole text through yajl: true when it was taken (b->root holds the value when
 * building, and must be dropped by the caller on false too). */
static bool run(struct builder *b, const char *text, size_t len, size_t flags, int max_depth)
{
    if (text == NULL ||
        (flags & ~(size_t)(JSON_DECODE_ANY | JSON_ALLOW_NUL | CG_JSON_FAST_UTF8_CHECKED)))
        return false;
    const unsigned char *u = (const unsigned char *)text;
    if (first_token_refused(u, u + len, flags))
        return false;
    if (memchr(text, '\v', len) != NULL || memchr(text, '\f', len) != NULL)
        return false; /* yajl's extra white space (see the top) */
    b->text = text;
    b->len = len;
    b->allow_nul = (flags & JSON_ALLOW_NUL) != 0;
    b->utf8_checked = (flags & CG_JSON_FAST_UTF8_CHECKED) != 0;
    b->max_depth = max_depth > 0 && max_depth < DEPTH_MAX ? max_depth : DEPTH_MAX;
    b->h = yajl_alloc(&callbacks, NULL, b);
    if (b->h == NULL)
        return false;
    /* yajl's defaults, spelled out (no comments, one value, nothing after), but its UTF-8
     * check, which string_ok does strictly. */
    yajl_config(b->h, yajl_allow_comments, 0);
    yajl_config(b->h, yajl_dont_validate_strings, 1);
    yajl_config(b->h, yajl_allow_trailing_garbage, 0);
    yajl_config(b->h, yajl_allow_multiple_values, 0);
    yajl_config(b->h, yajl_allow_partial_values, 0);
    bool ok = yajl_parse(b->h, u, len) == yajl_status_ok;
    b->finishing = true;
    ok = ok && yajl_complete_parse(b->h) == yajl_status_ok && b->depth == 0;
    /* yajl takes a top-level value followed by an unfinished token ("1\"x", "[]\"x"): only
     * white space may follow the value's last token. */
    for (size_t i = b->last; ok && i < len; i++)
        ok = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    yajl_free(b->h);
    free(b->key_copy);
    return ok;
}

json_t *cg_json_fast_load(const char *text, size_t len, size_t flags, int max_depth)
{
    struct builder *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    b->build = true;
    json_t *v = NULL;
    if (run(b, text, len, flags, max_depth))
        v = b->root;
    else
        json_decref(b->root);
    free(b);
    return v;
}

int cg_json_fast_check(const char *text, size_t len, size_t flags, bool need_object, int max_depth)
{
    if (text == NULL)
        return 0;
    if (len > 0 &&
        first_token_refused((const unsigned char *)text, (const unsigned char *)text + len, flags))
        return -1;
    struct builder *b = calloc(1, sizeof *b);
    if (b == NULL)
        return 0;
    bool ok = run(b, text, len, flags, max_depth) && (!need_object || b->root_is_object);
    free(b);
    return ok;
}

json_t *cg_json_load(const char *text, size_t len, size_t flags, json_error_t *error)
{
    json_t *v = cg_json_fast_load(text, len, flags, 0);
    return v != NULL ? v : json_loadb(text, len, flags & ~CG_JSON_FAST_UTF8_CHECKED, error);
}

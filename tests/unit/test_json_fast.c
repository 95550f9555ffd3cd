/* test_json_fast.c - the fast JSON reader against jansson's json_loadb: the same value (same
 * dump, keys in the same order) for every text it takes, and it gives up on every text jansson
 * refuses; the generator below also covers texts it takes that jansson's own test suite
 * favours (escapes, surrogates, numbers at the edges). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_fast.h"
#include "core/utf8.h"

/* Both readers on text: fast must equal jansson when it answers, give up when jansson fails,
 * and the check must agree. Returns whether the fast reader answered. */
static bool same(const char *text, size_t len, size_t flags)
{
    json_error_t jerr;
    json_t *slow = json_loadb(text, len, flags, &jerr);
    json_t *fast = cg_json_fast_load(text, len, flags, 0);
    int checked = cg_json_fast_check(text, len, flags, false, 0);
    cr_assert_eq(checked == 1, fast != NULL, "check and load disagree on %.*s", (int)len, text);
    if (cg_utf8_valid(text, len, NULL)) {
        /* Told the text is UTF-8, the reader skips its check of raw strings, nothing else. */
        json_t *told = cg_json_fast_load(text, len, flags | CG_JSON_FAST_UTF8_CHECKED, 0);
        cr_assert_eq(told != NULL, fast != NULL, "CG_JSON_FAST_UTF8_CHECKED changes %.*s", (int)len,
                     text);
        cr_assert(told == NULL || json_equal(told, fast));
        json_decref(told);
    }
    if (checked == -1)
        cr_assert_null(slow, "a sure no for what jansson reads: %.*s", (int)len, text);
    if (fast != NULL) {
        cr_assert_not_null(slow, "fast took what jansson refuses (%s): %.*s", jerr.text, (int)len,
                           text);
        char *a = json_dumps(slow, JSON_COMPACT | JSON_ENCODE_ANY);
        char *b = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
        cr_assert_str_eq(b, a, "for %.*s", (int)len, text);
        cr_assert(json_equal(slow, fast));
        free(a);
        free(b);
    }
    json_decref(slow);
    json_decref(fast);
    return fast != NULL;
}

#define TAKES(s, flags) cr_assert(same(s, sizeof s - 1, flags), "gave up on %s", s)
#define REFUSES(s, flags) cr_assert(!same(s, sizeof s - 1, flags), "took %s", s)

static const size_t ANY = JSON_DECODE_ANY | JSON_ALLOW_NUL;

Test(json_fast, takes_what_jansson_takes)
{
    TAKES("{}", 0);
    TAKES("[]", 0);
    TAKES(" \t\r\n{ \"a\" : [1, -2, 3.5, -0.25e+3, 1E-2, true, false, null, \"x\"] }\n", 0);
    TAKES("{\"b\":1,\"a\":2,\"b\":3}", 0); /* a duplicate key keeps its place, last value */
    TAKES("\"plain\"", ANY);
    TAKES("-0", ANY);
    TAKES("0", ANY);
    TAKES("999999999999999999", ANY);
    TAKES("-999999999999999999", ANY);
    TAKES("1e-400", ANY); /* underflow is not an error for jansson */
    TAKES("123456789.123456789e-5", ANY);
    TAKES("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"", ANY);
    TAKES("\"\\u00e9\\u4e2d\\ud83d\\ude00 \\u0041\"", ANY);
    TAKES("\"a\\u0000b\"", ANY);
    TAKES("[\"caf\xc3\xa9\", \"\xe4\xb8\xad\", \"\xf0\x9f\x98\x80\", \"\x7f\"]", 0);
    TAKES("{\"k\\u00e9y\":\"v\\n\",\"k2\":{\"deep\":[[[]]]}}", 0);
    TAKES("{\"k\\nlong key with an escape that is longer than sixty-four bytes........\":1}", 0);
}

Test(json_fast, gives_up_on_what_jansson_refuses)
{
    REFUSES("", ANY);
    REFUSES("   ", ANY);
    REFUSES("1", 0); /* a scalar needs JSON_DECODE_ANY */
    REFUSES("{", 0);
    REFUSES("{\"a\"}", 0);
    REFUSES("{\"a\":1,}", 0);
    REFUSES("[1,]", 0);
    REFUSES("[1 2]", 0);
    REFUSES("{} x", 0);
    REFUSES("01", ANY);
    REFUSES("1.", ANY);
    REFUSES(".5", ANY);
    REFUSES("-", ANY);
    REFUSES("1e", ANY);
    REFUSES("1e400", ANY);
    REFUSES("truex", ANY);
    REFUSES("nul", ANY);
    REFUSES("\"a\\u0000b\"", JSON_DECODE_ANY); /* NUL only with JSON_ALLOW_NUL */
    REFUSES("{\"a\\u0000\":1}", 0);            /* never in a key */
    REFUSES("\"\\ud83d\"", ANY);
    REFUSES("\"\\ude00\"", ANY);
    REFUSES("\"\\ud83d\\u0041\"", ANY);
    REFUSES("\"\\x\"", ANY);
    REFUSES("\"\\u12g4\"", ANY);
    REFUSES("\"tab\there\"", ANY);
    REFUSES("\"\xc0\xaf\"", ANY);     /* overlong */
    REFUSES("\"\xed\xa0\x80\"", ANY); /* a surrogate in UTF-8 */
    REFUSES("\"\xf4\x90\x80\x80\"", ANY);
    REFUSES("\"\xe4\xb8\"", ANY);
    REFUSES("\"unterminated", ANY);
    REFUSES("\xef\xbb\xbf{}", 0); /* a BOM */
}

/* Where yajl (under the fast path) is laxer than jansson: each must still be given up on. */
Test(json_fast, gives_up_where_yajl_is_lax)
{
    REFUSES("\v[]", 0); /* yajl's white space also has \v and \f */
    REFUSES("[1,\f2]", 0);
    REFUSES("{\"a\":1}\v", 0);
    REFUSES("1\"x", ANY); /* yajl: a value, then an unfinished token at the end */
    REFUSES("[]\"x", 0);
    REFUSES("{} \"", 0);
    REFUSES("1 \"open", ANY);
    REFUSES("\"\\ud83dx\"", ANY);         /* yajl: '?' for a lone high surrogate */
    REFUSES("[\"a\\ud83d\\u0041b\"]", 0); /* yajl: joined with any \\u that follows */
    REFUSES("{\"\\ude00\":1}", 0);        /* a lone low one, in a key */
    REFUSES("\"\\\\\\ud800\"", ANY);      /* an escaped backslash, then a lone one */
    REFUSES("\"\xf0\x80\x80\x80\"", ANY); /* 4-byte overlong */
    REFUSES("\"\xf5\x80\x80\x80\"", ANY); /* above U+10FFFF */
    REFUSES("\"\xed\xb0\x80\"", ANY);     /* a low surrogate in UTF-8 */
    REFUSES("{\"\xe0\x80\x80\":1}", 0);   /* overlong, in a key */
    REFUSES("\"\x7f\x01\"", ANY);
    REFUSES("-9223372036854775809", ANY); /* jansson: too big negative integer */
    REFUSES("[9223372036854775808]", 0);
    REFUSES("[/* c */1]", 0);    /* no comments */
    REFUSES("[1][2]", 0);        /* one value */
    TAKES("\"\\\\ud800\"", ANY); /* an escaped backslash, then plain text */
    TAKES("[-9223372036854775808, 9223372036854775807]", 0);
    TAKES("{\"k\\t\":\"v\\t\",\"k\\t\":\"w\\u00e9\"}", 0); /* escaped key, then escaped value */
    TAKES("{\"\\ud83d\\ude00\":\"\xf4\x8f\xbf\xbf\"}", 0);
    TAKES("1.5 \r\n", ANY);
    TAKES("12", ANY);
}

/* A few MB: the same value as jansson, keys in order. */
Test(json_fast, big_input)
{
    size_t cap = 6u << 20, n = 0;
    char *buf = malloc(cap);
    cr_assert_not_null(buf);
    n += (size_t)snprintf(buf + n, cap - n, "{\"messages\":[");
    for (int i = 0; n + 4096 < cap - 16; i++) {
        n += (size_t)snprintf(buf + n, cap - n,
                              "%s{\"role\":\"user\",\"n\":%d,\"x\":%d.5,\"content\":\"",
                              i ? "," : "", i, -i);
        for (int k = 0; k < 40 + i % 50; k++)
            n += (size_t)snprintf(buf + n, cap - n, "%s", k % 7 ? "w\xc3\xa9rd " : "\\n\\u4e2d ");
        n += (size_t)snprintf(buf + n, cap - n, "\"}");
    }
    n += (size_t)snprintf(buf + n, cap - n, "]}");
    cr_assert(same(buf, n, 0), "gave up on %zu bytes", n);
    free(buf);
}

Test(json_fast, plain_text_is_a_sure_no)
{
    static const char *const no[] = {"hello", "  note: x", "nullx", "True", "#", "<html>", ""};
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        int expect = no[i][0] != '\0' ? -1 : 0;
        cr_expect_eq(cg_json_fast_check(no[i], strlen(no[i]), ANY, false, 0), expect, "%s", no[i]);
        cr_expect_not(same(no[i], strlen(no[i]), ANY));
    }
    /* Starts that may still be JSON are never a sure no. */
    static const char *const maybe[] = {"[1,", "{\"a\"", "-x", "0x1", "\"open", "null x", "true"};
    for (size_t i = 0; i < sizeof maybe / sizeof maybe[0]; i++)
        cr_expect_geq(cg_json_fast_check(maybe[i], strlen(maybe[i]), ANY, false, 0), 0, "%s",
                      maybe[i]);
    cr_expect_eq(cg_json_fast_check("\"s\"", 3, 0, false, 0), -1, "a scalar without DECODE_ANY");
}

Test(json_fast, depth_cap)
{
    char deep[64];
    memset(deep, '[', 30);
    memset(deep + 30, ']', 30);
    json_t *v = cg_json_fast_load(deep, 60, 0, 30);
    cr_assert_not_null(v);
    json_decref(v);
    cr_assert_null(cg_json_fast_load(deep, 60, 0, 29));
    cr_assert_eq(cg_json_fast_check(deep, 60, 0, false, 29), 0);
    cr_assert_eq(cg_json_fast_check(deep, 60, 0, true, 30), 0); /* an array, not an object */
}

/* Random texts from a small grammar with random damage: fast and jansson agree on all. */
static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static void gen(uint64_t *s, char *buf, size_t *n, size_t cap, int depth)
{
    static const char *const atoms[] = {"0",
                                        "-1",
                                        "12345678901234567890",
                                        "3.25",
                                        "-1e5",
                                        "2E+3",
                                        "true",
                                        "false",
                                        "null",
                                        "\"\"",
                                        "\"a b\"",
                                        "\"\\u00e9\\n\"",
                                        "\"\xc3\xa9\"",
                                        "1e999",
                                        "\"\\ud83d\\ude00\"",
                                        "\"x\\u0000y\""};
    if (*n + 64 >= cap)
        return;
    int k = (int)(rnd(s) % (depth > 4 ? 1 : 4));
    if (k == 0) {
        const char *a = atoms[rnd(s) % (sizeof atoms / sizeof atoms[0])];
        *n += (size_t)snprintf(buf + *n, cap - *n, "%s", a);
    } else if (k == 1 || k == 2) {
        bool obj = k == 1;
        buf[(*n)++] = obj ? '{' : '[';
        int items = (int)(rnd(s) % 4);
        for (int i = 0; i < items && *n + 64 < cap; i++) {
            if (i)
                buf[(*n)++] = ',';
            if (rnd(s) % 3 == 0)
                buf[(*n)++] = ' ';
            if (obj)
                *n += (size_t)snprintf(buf + *n, cap - *n, "\"k%d\":", (int)(rnd(s) % 3));
            gen(s, buf, n, cap, depth + 1);
        }
        buf[(*n)++] = obj ? '}' : ']';
    } else {
        *n += (size_t)snprintf(buf + *n, cap - *n, " \"%c\\t\" ", (char)('a' + rnd(s) % 26));
    }
}

Test(json_fast, random_texts_agree, .timeout = 60)
{
    uint64_t s = 42;
    char buf[2048];
    int taken = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = 0;
        gen(&s, buf, &n, sizeof buf, 0);
        if (rnd(&s) % 4 == 0 && n > 0) /* damage one byte */
            buf[rnd(&s) % n] = "{}[],:\"\\x0\x80 \v\f"[rnd(&s) % 15];
        if (rnd(&s) % 8 == 0 && n > 1)
            n = rnd(&s) % n;
        taken += same(buf, n, rnd(&s) % 2 ? ANY : JSON_DECODE_ANY);
    }
    cr_assert_gt(taken, 5000, "the fast path took only %d of 20000", taken);
}

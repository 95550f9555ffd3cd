/* core/textfind: substrings and regular expressions, either case, the refusals that name the
 * field, empty matches, texts with NUL bytes inside, snippets on whole characters. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/textfind.h"

static struct cg_textfind *make(const char *q, bool regex, bool icase)
{
    struct cg_textfind *f = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_textfind_new(q, strlen(q), regex, icase, "query", &f, &err), CG_OK, "%s",
                 err.msg);
    return f;
}

/* Every match of f in text, as "start:len" pairs joined by spaces. */
static void all(const struct cg_textfind *f, const char *text, size_t len, char *out, size_t cap)
{
    size_t from = 0, start, mlen, n = 0;
    out[0] = '\0';
    while (cg_textfind_next(f, text, len, from, &start, &mlen)) {
        n += (size_t)snprintf(out + n, cap - n, "%s%zu:%zu", n ? " " : "", start, mlen);
        from = start + mlen;
    }
}

/* Every match of query in text[0..len) is want ("start:len" pairs). */
static void expect(const char *query, bool regex, bool icase, const char *text, size_t len,
                   const char *want)
{
    char got[256];
    struct cg_textfind *f = make(query, regex, icase);
    all(f, text, len, got, sizeof got);
    cr_assert_str_eq(got, want, "%s in %.*s", query, (int)len, text);
    cg_textfind_free(f);
}

Test(textfind, substrings_either_case)
{
    expect("cache", false, false, "Cache cache CACHE cachecache", 28, "6:5 18:5 23:5");
    expect("CaChE", false, true, "Cache cache CACHE cachecache", 28, "0:5 6:5 12:5 18:5 23:5");
}

Test(textfind, regular_expressions_and_empty_matches)
{
    expect("node-[0-9]+", true, false, "on node-3 and node-12, not node-x", 33, "3:6 14:7");
    /* a* matches the empty string everywhere: only the non-empty matches count. */
    expect("a*", true, false, "baab a", 6, "1:2 5:1");
    /* ^ only at the start of the text, not of a later search. */
    expect("^ab", true, true, "AB ab", 5, "0:2");
}

Test(textfind, texts_with_nul_bytes_inside)
{
    const char text[] = "x\0keykey";
    expect("key", false, false, text, sizeof text - 1, "2:3 5:3");
    expect("k.y$", true, false, text, sizeof text - 1, "5:3");
}

Test(textfind, bad_queries_name_the_field)
{
    struct cg_textfind *f = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_textfind_new("", 0, false, false, "query", &f, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "'query'"), "%s", err.msg);
    cr_assert_eq(cg_textfind_new("(a)\\1", 5, true, false, "query", &f, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "back-references"), "%s", err.msg);
    cr_assert_eq(cg_textfind_new("a(b", 3, true, false, "query", &f, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "not a valid pattern"), "%s", err.msg);
    cr_assert_eq(cg_textfind_new("\xff", 1, false, false, "query", &f, &err), CG_INVALID_ARGUMENT);
    char *big = malloc(CG_TEXTFIND_QUERY_MAX + 1);
    memset(big, 'a', CG_TEXTFIND_QUERY_MAX + 1);
    cr_assert_eq(cg_textfind_new(big, CG_TEXTFIND_QUERY_MAX + 1, false, false, "query", &f, &err),
                 CG_INVALID_ARGUMENT);
    free(big);
    cr_assert_null(f);
    /* Patterns regcomp would expand into gigabytes (it copies a subexpression per
     * repetition) are refused before it sees them; a modest repetition is fine. */
    char stacked[130] = "a";
    memset(stacked + 1, '+', 120);
    stacked[121] = '\0';
    const char *huge[] = {stacked, "(a{1,200}){1,200}",
                          "((((((((((((((((x+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+",
                          "(((((((((((((((((((((((((((((((((a)))))))))))))))))))))))))))))))))"};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        cr_assert_eq(cg_textfind_new(huge[i], strlen(huge[i]), true, false, "query", &f, &err),
                     CG_INVALID_ARGUMENT, "%s", huge[i]);
        cr_assert_not_null(strstr(err.msg, "'query'"), "%s", err.msg);
    }
    f = make("(ab|cd){2,50}x+[[:digit:]]{1,9}((a|b)*c)+", true, false);
    cg_textfind_free(f);
    /* A \1 inside a bracket expression is two literal characters, not a back-reference. */
    f = make("[\\1]x", true, false);
    cg_textfind_free(f);
}

Test(textfind, snippets_end_on_whole_characters)
{
    const char *t = "\xc3\xa9t\xc3\xa9 cache \xc3\xa9t\xc3\xa9"; /* "été cache été" */
    size_t a, b;
    cg_textfind_snippet(t, strlen(t), 6, 5, 2, &a, &b);
    /* 2 bytes before lands inside "é": widened back to its first byte; after likewise. */
    cr_assert_eq(a, 3);
    cr_assert_eq(b, 14);
    cg_textfind_snippet(t, strlen(t), 6, 5, 1000, &a, &b);
    cr_assert_eq(a, 0);
    cr_assert_eq(b, strlen(t));
}

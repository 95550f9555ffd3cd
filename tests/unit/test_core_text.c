/* test_core_text.c - UTF-8 validation and the API key text format. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/apikey.h"
#include "core/utf8.h"

static bool valid(const char *s, size_t len)
{
    return cg_utf8_valid(s, len, NULL);
}

Test(utf8, accepts_well_formed_text, .timeout = 10)
{
    cr_assert(valid("", 0));
    cr_assert(valid("plain ascii", 11));
    cr_assert(valid("Gr\xc3\xbc\xc3\x9f"
                    "e",
                    6));                             /* Grüße */
    cr_assert(valid("\xe6\x97\xa5\xe6\x9c\xac", 6)); /* 日本 */
    cr_assert(valid("\xf0\x9f\x98\x80", 4));         /* emoji */
    cr_assert(valid("\xf4\x8f\xbf\xbf", 4));         /* U+10FFFF */
    cr_assert(valid("\xef\xbb\xbf", 3));             /* BOM */
    cr_assert(valid("a\0b", 3), "NUL is a valid code point");
    cr_assert_eq(cg_utf8_length("\xe6\x97\xa5\xe6\x9c\xac", 6), 2);
}

Test(utf8, rejects_malformed_sequences_at_their_offset, .timeout = 10)
{
    struct {
        const char *s;
        size_t len;
        size_t bad;
    } cases[] = {
        {"ab\x80", 3, 2},           /* lone continuation */
        {"\xc0\xaf", 2, 0},         /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},     /* overlong 3-byte */
        {"\xed\xa0\x80", 3, 0},     /* surrogate U+D800 */
        {"\xf4\x90\x80\x80", 4, 0}, /* > U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0},
        {"ok\xe6\x97", 4, 2},   /* truncated at the end */
        {"\xe6\x41\xa5", 3, 0}, /* bad continuation */
        {"\xff", 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t bad = 999;
        cr_expect(!cg_utf8_valid(cases[i].s, cases[i].len, &bad), "case %zu accepted", i);
        cr_expect_eq(bad, cases[i].bad, "case %zu: offset %zu", i, bad);
    }
}

#define TENANT "0b9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
#define KEYID "00112233aabbccdd"
#define SECRET "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_x"

Test(apikey, format_then_parse_round_trips, .timeout = 10)
{
    char text[CG_APIKEY_LEN + 1];
    cr_assert(cg_apikey_format(TENANT, KEYID, SECRET, text, sizeof text));
    cr_assert_eq(strlen(text), CG_APIKEY_LEN);
    cr_assert_str_eq(text, "cgk_0b9e6f2a1c3d4e5f8a9b0c1d2e3f4a5b_00112233aabbccdd_" SECRET);
    struct cg_apikey_parts p;
    cr_assert(cg_apikey_parse(text, strlen(text), &p));
    cr_assert_str_eq(p.tenant_id, TENANT);
    cr_assert_str_eq(p.key_id, KEYID);
}

Test(apikey, parse_rejects_anything_else, .timeout = 10)
{
    char text[CG_APIKEY_LEN + 1];
    cr_assert(cg_apikey_format(TENANT, KEYID, SECRET, text, sizeof text));
    struct cg_apikey_parts p;
    cr_assert(!cg_apikey_parse(text, strlen(text) - 1, &p), "short");
    char bad[CG_APIKEY_LEN + 1];
    const size_t positions[] = {0, 5, 36, 40, 53, 60};
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        memcpy(bad, text, sizeof bad);
        bad[positions[i]] = '!';
        cr_expect(!cg_apikey_parse(bad, strlen(bad), &p), "position %zu", positions[i]);
    }
    cr_assert(!cg_apikey_parse("", 0, &p));
    cr_assert(!cg_apikey_format("not-a-uuid", KEYID, SECRET, text, sizeof text));
    cr_assert(!cg_apikey_format(TENANT, "xyz", SECRET, text, sizeof text));
    cr_assert(!cg_apikey_format(TENANT, KEYID, SECRET, text, 10));
}

Test(apikey, bearer_header_forms, .timeout = 10)
{
    const char *tok;
    size_t len;
    cr_assert(cg_apikey_bearer("Bearer abc", &tok, &len));
    cr_assert_eq(len, 3);
    cr_assert(strncmp(tok, "abc", 3) == 0);
    cr_assert(cg_apikey_bearer("bearer   abc  ", &tok, &len));
    cr_assert_eq(len, 3);
    cr_assert(!cg_apikey_bearer("Basic abc", &tok, &len));
    cr_assert(!cg_apikey_bearer("Bearer ", &tok, &len));
    cr_assert(!cg_apikey_bearer("Bearer", &tok, &len));
    cr_assert(!cg_apikey_bearer(NULL, &tok, &len));
}

Test(uuid, canonical_form_only, .timeout = 10)
{
    cr_assert(cg_uuid_valid(TENANT));
    cr_assert(cg_uuid_valid("0B9E6F2A-1C3D-4E5F-8A9B-0C1D2E3F4A5B"));
    cr_assert(!cg_uuid_valid("0b9e6f2a1c3d4e5f8a9b0c1d2e3f4a5b"));
    cr_assert(!cg_uuid_valid("0b9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5"));
    cr_assert(!cg_uuid_valid("0b9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5bb"));
    cr_assert(!cg_uuid_valid("gb9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"));
}

/* test_keyslot.c - Redis Cluster key slots (checked against what CLUSTER KEYSLOT of
 * redis-server 7.0 answers for the same keys) and the parsing of MOVED/ASK redirections. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/keyslot.h"

static int slot_of(const char *key)
{
    return cg_keyslot_of(key, strlen(key));
}

Test(keyslot, crc16_matches_the_cluster_specification, .timeout = 10)
{
    cr_assert_eq(cg_keyslot_crc16("123456789", 9), 0x31C3);
    cr_assert_eq(cg_keyslot_crc16(NULL, 0), 0);
}

Test(keyslot, slots_match_cluster_keyslot_of_redis, .timeout = 10)
{
    /* Each value is CLUSTER KEYSLOT's answer on redis-server 7.0.15. */
    static const struct {
        const char *key;
        int slot;
    } cases[] = {
        {"123456789", 12739},
        {"foo", 12182},
        {"bar", 5061},
        {"hello", 866},
        {"", 0},
        {"{user1000}.following", 3443},
        {"{user1000}.followers", 3443},
        {"foo{}{bar}", 8363},    /* empty tag: the whole key */
        {"foo{{bar}}zap", 4015}, /* the tag is "{bar" */
        {"foo{bar}{zap}", 5061}, /* the first tag only: "bar" */
        {"{}", 15257},
        {"x{", 3596}, /* no closing brace: the whole key */
        {"a{b}", 3300},
        {"cg:{0f8fad5b-d9cb-469f-a165-70867728950e}:gen", 13976},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(slot_of(cases[i].key), cases[i].slot, "key \"%s\"", cases[i].key);
}

Test(keyslot, keys_of_one_tenant_share_a_slot, .timeout = 10)
{
    const char *tenant = "0f8fad5b-d9cb-469f-a165-70867728950e";
    int gen = slot_of("cg:{0f8fad5b-d9cb-469f-a165-70867728950e}:gen");
    cr_assert_eq(gen, cg_keyslot_crc16(tenant, strlen(tenant)) % CG_KEYSLOT_COUNT);
    cr_assert_eq(slot_of("cg:{0f8fad5b-d9cb-469f-a165-70867728950e}:row2:s t a"), gen);
    cr_assert_eq(slot_of("cg:{0f8fad5b-d9cb-469f-a165-70867728950e}:key:k1"), gen);
    /* A NUL inside the key counts as a byte. */
    cr_assert_neq(cg_keyslot_of("a\0b", 3), cg_keyslot_of("a", 1));
}

Test(keyslot, redirections_parse, .timeout = 10)
{
    struct cg_keyslot_redirect r;
    const char *moved = "MOVED 3999 127.0.0.1:6381";
    cr_assert_eq(cg_keyslot_redirect_parse(moved, strlen(moved), &r), CG_KEYSLOT_MOVED);
    cr_assert_eq(r.slot, 3999);
    cr_assert_str_eq(r.host, "127.0.0.1");
    cr_assert_eq(r.port, 6381);

    const char *ask = "ASK 16383 ::1:7002";
    cr_assert_eq(cg_keyslot_redirect_parse(ask, strlen(ask), &r), CG_KEYSLOT_ASK);
    cr_assert_eq(r.slot, 16383);
    cr_assert_str_eq(r.host, "::1");
    cr_assert_eq(r.port, 7002);

    const char *unknown_host = "MOVED 1 :7000";
    cr_assert_eq(cg_keyslot_redirect_parse(unknown_host, strlen(unknown_host), &r),
                 CG_KEYSLOT_MOVED);
    cr_assert_str_eq(r.host, "");
}

Test(keyslot, malformed_redirections_are_not_followed, .timeout = 10)
{
    static const char *const bad[] = {
        "MOVED",
        "MOVED ",
        "MOVED 3999",
        "MOVED 3999 ",
        "MOVED 16384 127.0.0.1:6381", /* no such slot */
        "MOVED -1 127.0.0.1:6381",
        "MOVED 12 127.0.0.1",       /* no port */
        "MOVED 12 127.0.0.1:0",     /* port 0 */
        "MOVED 12 127.0.0.1:65536", /* port too large */
        "MOVED 12 127.0.0.1:12x",
        "MOVED 12 127.0.0.1:12 extra",
        "MOVED 12 host\twith\ttabs:1",
        "ERR unknown command",
        "NOSCRIPT No matching script",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "ASKING",
        "moved 12 127.0.0.1:1",
    };
    struct cg_keyslot_redirect r;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(cg_keyslot_redirect_parse(bad[i], strlen(bad[i]), &r), CG_KEYSLOT_NOT_REDIRECT,
                     "\"%s\"", bad[i]);

    /* A host longer than the cap, and the text not NUL-terminated at its length. */
    char longer[400];
    memset(longer, 'h', sizeof longer);
    memcpy(longer, "MOVED 5 ", 8);
    memcpy(longer + sizeof longer - 5, ":6379", 5);
    cr_assert_eq(cg_keyslot_redirect_parse(longer, sizeof longer, &r), CG_KEYSLOT_NOT_REDIRECT);
    const char *prefix = "ASK 7 10.0.0.1:6380 and more";
    cr_assert_eq(cg_keyslot_redirect_parse(prefix, 19, &r), CG_KEYSLOT_ASK);
    cr_assert_eq(r.port, 6380);
}

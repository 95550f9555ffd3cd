/* test_keys.c - service/keys.c on a thread without a store: what the process's key cache
 * decides alone, and that a key it has not got needs the store (the pool). */
#include <criterion/criterion.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "core/apikey.h"
#include "service/cache.h"
#include "service/keys.h"

#define TENANT "0b9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
#define KEYID "00112233aabbccdd"
#define SECRET "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_x"

static struct cg_cache *cache;
static char token[CG_APIKEY_LEN + 1];

static void setup(void)
{
    struct cg_cache_opts opts = {.key_ttl_ms = 60000};
    cache = cg_cache_new(&opts);
    cr_assert_not_null(cache);
    cr_assert(cg_apikey_format(TENANT, KEYID, SECRET, token, sizeof token));
}

static void teardown(void)
{
    cg_cache_free(cache);
}

TestSuite(keys, .init = setup, .fini = teardown, .timeout = 10);

/* Caches rec for the key, its secret_hash set to the token's when right_secret. */
static void cache_key(struct cg_key_auth rec, bool right_secret)
{
    cg_sha256(right_secret ? token : "another", right_secret ? strlen(token) : 7, rec.secret_hash);
    cg_cache_key_put(cache, TENANT, KEYID, &rec, cg_cache_ticket(cache), cg_mono_ms());
}

/* cg_keys_authenticate of tok on a completion-queue thread (no store). */
static cg_status authenticate_token(const char *tok, struct cg_principal *p, struct cg_err *err,
                                    cg_op_fate *fate)
{
    struct cg_svc_env env = {.cache = cache};
    memset(p, 0, sizeof *p);
    cg_err_clear(err);
    return cg_keys_authenticate(&env, tok, strlen(tok), p, err, fate);
}

static cg_status authenticate(struct cg_principal *p, struct cg_err *err, cg_op_fate *fate)
{
    return authenticate_token(token, p, err, fate);
}

Test(keys, a_cached_key_gives_its_principal_without_the_store)
{
    struct cg_key_auth rec = {.role = CG_KEY_ROLE_VIEWER, .max_call_tokens = 0};
    strcpy(rec.tenant_name, "acme");
    strcpy(rec.scope_session_id, "s1");
    cache_key(rec, true);
    struct cg_principal p;
    struct cg_err err;
    cg_op_fate fate;
    cr_assert_eq(authenticate(&p, &err, &fate), CG_OK, "%s", err.msg);
    cr_assert_eq(fate, CG_OP_DONE);
    cr_assert(p.authenticated);
    cr_assert_not(p.is_admin);
    cr_assert_eq(p.role, CG_KEY_ROLE_VIEWER);
    cr_assert_str_eq(p.tenant_id, TENANT);
    cr_assert_str_eq(p.key_id, KEYID);
    cr_assert_str_eq(p.tenant_name, "acme");
    cr_assert_str_eq(p.scope_session_id, "s1");
    cr_assert_eq(p.max_call_tokens, CG_CALL_TOKENS_DEFAULT);
}

Test(keys, a_key_the_cache_has_not_got_needs_the_store)
{
    struct cg_principal p;
    struct cg_err err;
    cg_op_fate fate;
    cr_assert_eq(authenticate(&p, &err, &fate), CG_OK, "%s", err.msg);
    cr_assert_eq(fate, CG_OP_NEEDS_STORE);
    cr_assert_not(p.authenticated, "nothing filled");
}

Test(keys, the_cache_refuses_a_wrong_secret_a_revoked_and_an_expired_key)
{
    struct cg_principal p;
    struct cg_err err;
    cg_op_fate fate;
    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT}, false);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_str_eq(err.msg, "invalid API key in 'authorization' metadata");

    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT, .revoked = true}, true);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_str_eq(err.msg, "API key " KEYID " has been revoked");

    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT, .expires_at_ms = 1}, true);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_eq(cg_err_reason(&err, CG_UNAUTHENTICATED), CG_ERR_API_KEY_EXPIRED, "%s", err.msg);
    cr_assert_eq(fate, CG_OP_DONE);
    cr_assert_not(p.authenticated);
}

Test(keys, a_malformed_key_is_refused_before_any_lookup)
{
    struct cg_svc_env env = {.cache = cache};
    struct cg_principal p = {0};
    struct cg_err err;
    cg_op_fate fate;
    cr_assert_eq(cg_keys_authenticate(&env, "cgk_nope", 8, &p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_eq(fate, CG_OP_DONE);
}

/* The cached entry's vouch (the tag of a token that matched), or unset. */
static struct cg_key_vouch vouch_of_entry(void)
{
    struct cg_key_auth rec;
    struct cg_key_vouch v = {.set = false};
    cr_assert(cg_cache_key_get_vouched(cache, TENANT, KEYID, cg_mono_ms(), &rec, &v));
    return v;
}

Test(keys, a_token_that_matched_is_vouched_and_a_wrong_one_is_still_refused)
{
    struct cg_principal p;
    struct cg_err err;
    cg_op_fate fate;
    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT}, true);
    cr_assert_not(vouch_of_entry().set, "nothing vouched before a call");
    cr_assert_eq(authenticate(&p, &err, &fate), CG_OK, "%s", err.msg);
    struct cg_key_vouch v = vouch_of_entry();
    uint8_t tag[CG_CACHE_TAG_LEN];
    cg_cache_token_tag(cache, token, strlen(token), tag);
    cr_assert(v.set && memcmp(v.tag, tag, sizeof tag) == 0, "the matching token's tag kept");

    /* Another secret under the same key id, the entry vouched: still hashed and refused. */
    char other[CG_APIKEY_LEN + 1];
    cr_assert(cg_apikey_format(TENANT, KEYID, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123-_x", other,
                               sizeof other));
    cr_assert_eq(authenticate_token(other, &p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_not(p.authenticated);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_OK, "%s", err.msg);
    cr_assert(p.authenticated);
}

Test(keys, a_refilled_entry_forgets_its_vouch)
{
    struct cg_principal p;
    struct cg_err err;
    cg_op_fate fate;
    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT}, true);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_OK, "%s", err.msg);
    cr_assert(vouch_of_entry().set);
    /* The entry filled again, now with another secret's hash: the old vouch must not let
     * the token in. */
    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT}, false);
    cr_assert_not(vouch_of_entry().set);
    cr_assert_eq(authenticate(&p, &err, &fate), CG_UNAUTHENTICATED);
    cr_assert_not(vouch_of_entry().set, "a refused token is never vouched");
}

Test(keys, a_vouch_for_another_secret_hash_is_not_kept)
{
    cache_key((struct cg_key_auth){.role = CG_KEY_ROLE_AGENT}, true);
    uint8_t tag[CG_CACHE_TAG_LEN] = {1, 2, 3}, other_hash[32];
    cg_sha256("another", 7, other_hash);
    cg_cache_key_vouch(cache, TENANT, KEYID, other_hash, tag);
    cr_assert_not(vouch_of_entry().set);
    cg_cache_key_vouch(NULL, TENANT, KEYID, other_hash, tag); /* no cache: nothing */
}

/* keys.c - a tenant API key to a principal: the process's key cache, the store, the checks. */
#include "service/keys.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "core/apikey.h"
#include "service/cache.h"

/* Fills the principal from a key record that authenticated (secret matched). */
static void principal_from_key(struct cg_principal *p, const struct cg_apikey_parts *parts,
                               const struct cg_key_auth *rec)
{
    p->authenticated = true;
    p->is_admin = false;
    p->role = (cg_key_role)rec->role;
    memcpy(p->tenant_id, parts->tenant_id, sizeof p->tenant_id);
    memcpy(p->key_id, parts->key_id, sizeof p->key_id);
    /* Arrays of the same sizes, each terminated: copied whole (no printf on every call). */
    _Static_assert(sizeof p->tenant_name == sizeof rec->tenant_name &&
                       sizeof p->scope_session_id == sizeof rec->scope_session_id &&
                       sizeof p->scope_task_id == sizeof rec->scope_task_id,
                   "struct cg_principal and struct cg_key_auth hold the same strings");
    memcpy(p->tenant_name, rec->tenant_name, sizeof p->tenant_name);
    memcpy(p->scope_session_id, rec->scope_session_id, sizeof p->scope_session_id);
    memcpy(p->scope_task_id, rec->scope_task_id, sizeof p->scope_task_id);
    p->expires_at_ms = rec->expires_at_ms;
    p->max_call_tokens = rec->max_call_tokens > 0 ? rec->max_call_tokens : CG_CALL_TOKENS_DEFAULT;
}

/* The key's record: the process's key cache first (a hit needs no I/O, so a try_inline
 * method can authenticate on a completion-queue thread), then the store, whose answer is
 * cached. *from_store says which answered; *fate as cg_keys_authenticate. */
static cg_status key_record(const struct cg_svc_env *env, const struct cg_apikey_parts *parts,
                            struct cg_key_auth *rec, struct cg_key_vouch *vouch, bool *from_store,
                            struct cg_err *err, cg_op_fate *fate)
{
    *from_store = false;
    vouch->set = false;
    /* The ticket makes a revocation that races the lookup below win over what it read. */
    uint64_t ticket = cg_cache_ticket(env->cache);
    if (cg_cache_key_get_vouched(env->cache, parts->tenant_id, parts->key_id, cg_mono_ms(), rec,
                                 vouch))
        return CG_OK;
    if (env->store == NULL) {
        *fate = CG_OP_NEEDS_STORE; /* a try_inline method: looked up on the pool */
        return CG_OK;
    }
    struct cg_err serr;
    cg_err_clear(&serr);
    /* A key dropped by a revocation (here, or announced on cg_keys) is read from
     * PostgreSQL: Redis may not have heard of the revocation yet. */
    cg_status st =
        cg_cache_key_dropped(env->cache, parts->tenant_id, parts->key_id)
            ? cg_store_key_lookup_fresh(env->store, parts->tenant_id, parts->key_id, rec, &serr)
            : cg_store_key_lookup(env->store, parts->tenant_id, parts->key_id, rec, &serr);
    if (st == CG_NOT_FOUND)
        return cg_err_set(err, CG_UNAUTHENTICATED, "invalid API key in 'authorization' metadata");
    if (st != CG_OK) {
        if (err != NULL)
            *err = serr;
        return st;
    }
    cg_cache_key_put(env->cache, parts->tenant_id, parts->key_id, rec, ticket, cg_mono_ms());
    *from_store = true;
    return CG_OK;
}

/* Whether token is the record's secret: its SHA-256 is secret_hash. The key cache keeps the
 * tag of a token that matched (cg_key_vouch), so a key's later calls compare tags instead
 * of hashing again. */
static bool secret_matches(const struct cg_svc_env *env, const char *token, size_t len,
                           const struct cg_apikey_parts *parts, const struct cg_key_auth *rec,
                           const struct cg_key_vouch *vouch)
{
    uint8_t tag[CG_CACHE_TAG_LEN];
    if (env->cache != NULL) {
        cg_cache_token_tag(env->cache, token, len, tag);
        if (vouch->set && cg_equal_ct(tag, vouch->tag, sizeof tag))
            return true;
    }
    uint8_t hash[CG_SHA256_LEN];
    cg_sha256(token, len, hash);
    if (!cg_equal_ct(hash, rec->secret_hash, sizeof hash))
        return false;
    if (env->cache != NULL)
        cg_cache_key_vouch(env->cache, parts->tenant_id, parts->key_id, rec->secret_hash, tag);
    return true;
}

/* Whether the record lets token in: its secret, not revoked, not expired, a valid role. */
static cg_status key_check(const struct cg_svc_env *env, const char *token, size_t len,
                           const struct cg_apikey_parts *parts, const struct cg_key_auth *rec,
                           const struct cg_key_vouch *vouch, struct cg_err *err)
{
    if (!secret_matches(env, token, len, parts, rec, vouch))
        return cg_err_set(err, CG_UNAUTHENTICATED, "invalid API key in 'authorization' metadata");
    if (rec->revoked) {
        cg_err_set(err, CG_UNAUTHENTICATED, "API key %s has been revoked", parts->key_id);
        cg_err_meta(err, "key_id", parts->key_id);
        return CG_UNAUTHENTICATED;
    }
    if (rec->expires_at_ms > 0 && cg_wall_ms() >= rec->expires_at_ms) {
        cg_err_setr(err, CG_UNAUTHENTICATED, CG_ERR_API_KEY_EXPIRED,
                    "API key %s expired at %lld (unix ms)", parts->key_id,
                    (long long)rec->expires_at_ms);
        cg_err_meta(err, "key_id", parts->key_id);
        cg_err_metaf(err, "expired_at_unix_ms", "%lld", (long long)rec->expires_at_ms);
        return CG_UNAUTHENTICATED;
    }
    if (!cg_key_role_valid(rec->role)) {
        cg_err_set(err, CG_UNAUTHENTICATED, "API key %s has no valid role", parts->key_id);
        cg_err_meta(err, "key_id", parts->key_id);
        return CG_UNAUTHENTICATED;
    }
    return CG_OK;
}

cg_status cg_keys_authenticate(const struct cg_svc_env *env, const char *token, size_t len,
                               struct cg_principal *out, struct cg_err *err, cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    struct cg_apikey_parts parts;
    if (!cg_apikey_parse(token, len, &parts))
        return cg_err_set(err, CG_UNAUTHENTICATED, "invalid API key in 'authorization' metadata");
    struct cg_key_auth rec;
    struct cg_key_vouch vouch;
    bool from_store;
    cg_status st = key_record(env, &parts, &rec, &vouch, &from_store, err, fate);
    if (st != CG_OK || *fate != CG_OP_DONE)
        return st;
    if ((st = key_check(env, token, len, &parts, &rec, &vouch, err)) != CG_OK)
        return st;
    principal_from_key(out, &parts, &rec);
    if (from_store) {
        /* Last use, to the minute (at most one write a minute per key); never fails a call. */
        struct cg_err terr;
        cg_err_clear(&terr);
        cg_store_key_touch(env->store, parts.tenant_id, parts.key_id, &terr);
    }
    return CG_OK;
}

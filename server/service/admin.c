/* admin.c - the AdminService flows (service/admin.h): tenants, API keys and the audit
 * trail, each one store call with its audit row, and the process cache where a key is
 * revoked.
 *
 * Keys are made here: 8 random bytes of key id, 32 of secret; the store keeps SHA-256 of
 * the whole key text. The secret leaves the server once, in CreateApiKey's answer.
 */
#include "service/admin.h"

#include <stdlib.h>
#include <string.h>

#include "base/crypto.h"
#include "core/apikey.h"
#include "core/keyrole.h"
#include "service/cache.h"
#include "service/op_err.h"

#define KEYS_MAX 1000

/* ---------------------------------------------------------------- tenants --------- */

cg_status cg_admin_tenant_create(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *name, const char *time_zone,
                                 const struct cg_tenant_settings *settings,
                                 const struct cg_audit *audit, struct cg_tenant *out)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_tenant_create_with(env->store, name, time_zone, settings, audit, out, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_admin_tenant_get(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, struct cg_tenant *out)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_tenant_get(env->store, tenant_id, out, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_admin_tenant_settings_put(const struct cg_svc_env *env, const struct cg_op *op,
                                       const char *tenant_id,
                                       const struct cg_tenant_settings *settings,
                                       const struct cg_audit *audit, struct cg_tenant *out)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_tenant_settings_put(env->store, tenant_id, settings, audit, out, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_admin_tenant_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *after_id, int limit, struct cg_tenant **rows, int *count,
                               bool *more)
{
    *count = 0;
    *more = false;
    if ((*rows = cg_arena_calloc(op->arena, (size_t)limit, sizeof **rows)) == NULL)
        return cg_op_oom(op);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_tenant_list(env->store, after_id, limit, *rows, count, more, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

/* ---------------------------------------------------------------- keys ------------ */

/* What the creator may mint: a role of at most its own, a scope inside its own, an expiry
 * no later than its own. spec is the request's, completed here. */
static cg_status creator_rules(const struct cg_op *op, struct cg_api_key_spec *spec)
{
    const struct cg_principal *p = op->principal;
    if (!p->is_admin && spec->role > (int)p->role) {
        cg_err_setr(op->err, CG_PERMISSION_DENIED, CG_ERR_ROLE_NOT_ALLOWED,
                    "a key with role '%s' may not create a key with role '%s' (at most its own)",
                    cg_key_role_name(p->role), cg_key_role_name((cg_key_role)spec->role));
        cg_err_meta(op->err, "role", cg_key_role_name(p->role));
        cg_err_meta(op->err, "requested_role", cg_key_role_name((cg_key_role)spec->role));
        return CG_PERMISSION_DENIED;
    }
    /* The tenant level (no session) is outside every bound creator's subtree. */
    if (!p->is_admin && p->scope_session_id[0] != '\0' &&
        !cg_scope_within(p->scope_session_id, p->scope_task_id, spec->scope_session_id,
                         spec->scope_task_id)) {
        cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND,
                    "scope: no such scope (a key bound to a scope creates keys inside it)");
        return CG_NOT_FOUND;
    }
    if (!p->is_admin && p->expires_at_ms > 0 &&
        (spec->expires_at_ms == 0 || spec->expires_at_ms > p->expires_at_ms))
        spec->expires_at_ms = p->expires_at_ms;
    spec->created_by_key_id = p->is_admin ? "" : p->key_id;
    return CG_OK;
}

/* A new key's id (hex) and whole text (op's arena), and the hash the store keeps. */
static cg_status mint_key(const struct cg_op *op, const char *tenant_id,
                          char key_id[CG_APIKEY_KEY_ID_CHARS + 1], char **text,
                          uint8_t hash[CG_SHA256_LEN])
{
    uint8_t raw_id[CG_APIKEY_KEY_ID_CHARS / 2], raw_secret[CG_APIKEY_SECRET_BYTES];
    if (cg_random_bytes(raw_id, sizeof raw_id) != CG_OK ||
        cg_random_bytes(raw_secret, sizeof raw_secret) != CG_OK)
        return cg_err_set(op->err, CG_INTERNAL, "no randomness available for a new key");
    char secret[CG_APIKEY_SECRET_CHARS + 1];
    cg_hex_encode(raw_id, sizeof raw_id, key_id);
    cg_base64url_encode(raw_secret, sizeof raw_secret, secret);

    if ((*text = cg_arena_alloc(op->arena, CG_APIKEY_LEN + 1)) == NULL)
        return cg_op_oom(op);
    if (!cg_apikey_format(tenant_id, key_id, secret, *text, CG_APIKEY_LEN + 1))
        return cg_err_set(op->err, CG_INTERNAL, "could not format the key");
    cg_sha256(*text, CG_APIKEY_LEN, hash);
    return CG_OK;
}

cg_status cg_admin_key_create(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const struct cg_api_key_spec *want,
                              const struct cg_audit *audit, struct cg_api_key *out, char **secret)
{
    struct cg_api_key_spec spec = *want;
    cg_status st = creator_rules(op, &spec);
    if (st != CG_OK)
        return st;
    char key_id[CG_APIKEY_KEY_ID_CHARS + 1];
    uint8_t hash[CG_SHA256_LEN];
    if ((st = mint_key(op, tenant_id, key_id, secret, hash)) != CG_OK)
        return st;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_key_create(env->store, tenant_id, key_id, hash, &spec, audit, out, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_admin_key_list(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *tenant_id, struct cg_api_key **rows, int *count)
{
    *count = 0;
    if ((*rows = cg_arena_calloc(op->arena, KEYS_MAX, sizeof **rows)) == NULL)
        return cg_op_oom(op);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_key_list(env->store, tenant_id, KEYS_MAX, *rows, count, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_admin_key_revoke(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const char *key_id,
                              const struct cg_audit *audit, struct cg_api_key *out)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_key_revoke(env->store, tenant_id, key_id, audit, out, &serr);
    /* This process stops accepting the key at once (also when the outcome is unknown);
     * other replicas when the commit's cg_keys notification reaches them (migrations/0017),
     * or within key_cache_ttl_s while their LISTEN connection is down. */
    cg_cache_key_drop(env->cache, tenant_id, key_id);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

/* ---------------------------------------------------------------- audit trail ----- */

/* The rows' JSON is the store's (malloc): copied into op's arena, and every row's freed
 * once (also after a failed copy; the rows then hold NULL). */
static cg_status json_to_arena(const struct cg_op *op, struct cg_audit_event *rows, int count)
{
    bool ok = true;
    for (int i = 0; i < count; i++) {
        char *before = rows[i].before_json, *after = rows[i].after_json;
        rows[i].before_json = ok ? cg_arena_strdup(op->arena, before ? before : "") : NULL;
        rows[i].after_json = ok ? cg_arena_strdup(op->arena, after ? after : "") : NULL;
        free(before);
        free(after);
        ok = ok && rows[i].before_json != NULL && rows[i].after_json != NULL;
    }
    return ok ? CG_OK : cg_op_oom(op);
}

cg_status cg_admin_audit_list(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const struct cg_audit_filter *filter,
                              int64_t before_id, int limit, struct cg_audit_event **rows,
                              int *count, bool *more)
{
    *count = 0;
    *more = false;
    if ((*rows = cg_arena_calloc(op->arena, (size_t)limit, sizeof **rows)) == NULL)
        return cg_op_oom(op);
    /* A scope-bound key sees the rows inside its subtree only (the SQL leaves out the rest). */
    struct cg_audit_filter f = *filter;
    const struct cg_principal *p = op->principal;
    if (!p->is_admin) {
        f.bound_session_id = p->scope_session_id;
        f.bound_task_id = p->scope_task_id;
    }
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_audit_list(env->store, tenant_id, &f, before_id, limit, *rows, count, more, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    return json_to_arena(op, *rows, *count);
}

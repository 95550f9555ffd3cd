/* rpc_admin.c - AdminService: tenants, API keys, WhoAmI and Ping.
 *
 * Keys are made here: 8 random bytes of key id, 32 of secret; the store keeps SHA-256 of
 * the whole key text. The secret leaves the server once, in CreateApiKey's answer.
 */
#include "rpc/rpc_handlers.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "core/apikey.h"
#include "core/utf8.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "rpc/rpc_cache.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000
#define KEYS_MAX 1000
#define PING_DELAY_MAX_MS 60000
#define PING_PAYLOAD_MAX (64 * 1024)

/* ---------------------------------------------------------------- shared checks ---- */

cg_status cg_rpc_check_name(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_chars, bool required)
{
    size_t len = strlen(value);
    if (len == 0) {
        if (required)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
        return CG_OK;
    }
    if (cg_utf8_length(value, len) > max_chars)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' is longer than %zu characters", field, max_chars);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c == 0x7f)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s' contains a control character", field);
    }
    return CG_OK;
}

cg_status cg_rpc_check_uuid(struct cg_rpc_call *call, const char *field, const char *value)
{
    if (value[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
    if (!cg_uuid_valid(value))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' is not a UUID (8-4-4-4-12 hex digits)", field);
    return CG_OK;
}

cg_status cg_rpc_store_error(struct cg_rpc_call *call, const struct cg_err *serr)
{
    call->err = *serr;
    if (call->err.msg[0] == '\0')
        cg_err_set(&call->err, serr->code, "%s", cg_status_str(serr->code));
    return serr->code;
}

static char *dup(struct cg_rpc_call *call, const char *s)
{
    return cg_arena_strdup(call->arena, s);
}

static Ctxguard__V1__Tenant *tenant_msg(struct cg_rpc_call *call, const struct cg_tenant *t)
{
    Ctxguard__V1__Tenant *m = NEW(call, Ctxguard__V1__Tenant, ctxguard__v1__tenant__init);
    if (m == NULL)
        return NULL;
    m->tenant_id = dup(call, t->tenant_id);
    m->name = dup(call, t->name);
    m->time_zone = dup(call, t->time_zone);
    m->created_at_unix_ms = t->created_at_ms;
    if (m->tenant_id == NULL || m->name == NULL || m->time_zone == NULL)
        return NULL;
    Ctxguard__V1__TenantSettings *s =
        NEW(call, Ctxguard__V1__TenantSettings, ctxguard__v1__tenant_settings__init);
    if (s == NULL)
        return NULL;
    s->redact_types = cg_arena_calloc(call->arena, 9, sizeof *s->redact_types);
    if (s->redact_types == NULL)
        return NULL;
    for (int type = 1; type <= 8; type++)
        if (t->settings.redact_types & (1u << type))
            s->redact_types[s->n_redact_types++] = (Ctxguard__V1__PiiType)type;
    s->redact_artifacts = t->settings.redact_artifacts;
    m->settings = s;
    return m;
}

/* The request's settings (NULL: the defaults) as the store's. Unknown and UNSPECIFIED types
 * are refused naming the entry; duplicates are harmless. */
static cg_status settings_in(struct cg_rpc_call *call, const Ctxguard__V1__TenantSettings *in,
                             struct cg_tenant_settings *out)
{
    memset(out, 0, sizeof *out);
    if (in == NULL)
        return CG_OK;
    for (size_t i = 0; i < in->n_redact_types; i++) {
        int type = (int)in->redact_types[i];
        if (type < 1 || type > 8)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'settings.redact_types[%zu]' is not a PiiType (1..8): %d", i,
                              type);
        out->redact_types |= 1u << type;
    }
    out->redact_artifacts = in->redact_artifacts;
    return CG_OK;
}

static Ctxguard__V1__ApiKey *key_msg(struct cg_rpc_call *call, const struct cg_api_key *k)
{
    Ctxguard__V1__ApiKey *m = NEW(call, Ctxguard__V1__ApiKey, ctxguard__v1__api_key__init);
    if (m == NULL)
        return NULL;
    m->key_id = dup(call, k->key_id);
    m->tenant_id = dup(call, k->tenant_id);
    m->name = dup(call, k->name);
    m->created_at_unix_ms = k->created_at_ms;
    m->revoked_at_unix_ms = k->revoked_at_ms;
    if (m->key_id == NULL || m->tenant_id == NULL || m->name == NULL)
        return NULL;
    return m;
}

static cg_status check_time_zone(struct cg_rpc_call *call, const char *tz)
{
    size_t len = strlen(tz);
    if (len > CG_TZ_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'time_zone' is longer than %d characters", CG_TZ_MAX);
    for (size_t i = 0; i < len; i++) {
        char c = tz[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '/' || c == '_' || c == '-' || c == '+';
        if (!ok)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'time_zone' is not an IANA time zone name: '%.64s'", tz);
    }
    return CG_OK;
}

/* ---------------------------------------------------------------- tenants --------- */

CG_HANDLER(cg_rpc_admin_create_tenant)
{
    const Ctxguard__V1__CreateTenantRequest *req =
        (const Ctxguard__V1__CreateTenantRequest *)request;
    cg_status st = cg_rpc_check_name(call, "name", req->name, CG_NAME_MAX, true);
    if (st != CG_OK)
        return st;
    const char *tz = req->time_zone[0] ? req->time_zone : "UTC";
    st = check_time_zone(call, tz);
    if (st != CG_OK)
        return st;

    struct cg_tenant_settings settings;
    st = settings_in(call, req->settings, &settings);
    if (st != CG_OK)
        return st;

    struct cg_tenant t;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_tenant_create_with(env->store, req->name, tz, &settings, &t, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);

    Ctxguard__V1__CreateTenantResponse *resp =
        NEW(call, Ctxguard__V1__CreateTenantResponse, ctxguard__v1__create_tenant_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_get_tenant)
{
    const Ctxguard__V1__GetTenantRequest *req = (const Ctxguard__V1__GetTenantRequest *)request;
    cg_status st = cg_rpc_check_uuid(call, "tenant_id", req->tenant_id);
    if (st != CG_OK)
        return st;
    struct cg_tenant t;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_tenant_get(env->store, req->tenant_id, &t, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    Ctxguard__V1__GetTenantResponse *resp =
        NEW(call, Ctxguard__V1__GetTenantResponse, ctxguard__v1__get_tenant_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_update_tenant_settings)
{
    const Ctxguard__V1__UpdateTenantSettingsRequest *req =
        (const Ctxguard__V1__UpdateTenantSettingsRequest *)request;
    cg_status st = cg_rpc_check_uuid(call, "tenant_id", req->tenant_id);
    if (st != CG_OK)
        return st;
    /* Required: an absent message would silently reset everything to the defaults. */
    if (req->settings == NULL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'settings' is required");
    struct cg_tenant_settings settings;
    if ((st = settings_in(call, req->settings, &settings)) != CG_OK)
        return st;
    struct cg_tenant t;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_tenant_settings_put(env->store, req->tenant_id, &settings, &t, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    Ctxguard__V1__UpdateTenantSettingsResponse *resp =
        NEW(call, Ctxguard__V1__UpdateTenantSettingsResponse,
            ctxguard__v1__update_tenant_settings_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_list_tenants)
{
    const Ctxguard__V1__ListTenantsRequest *req = (const Ctxguard__V1__ListTenantsRequest *)request;
    uint32_t size = req->page_size ? req->page_size : LIST_DEFAULT;
    if (size > LIST_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_size' must be at most %d",
                          LIST_MAX);
    /* The page token is the last tenant id of the previous page. */
    if (req->page_token[0] != '\0' && !cg_uuid_valid(req->page_token))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' is not a token this server gave");

    struct cg_tenant *rows = cg_arena_calloc(call->arena, size, sizeof *rows);
    if (rows == NULL)
        return OOM(call);
    int count = 0;
    bool more = false;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_tenant_list(env->store, req->page_token, (int)size, rows, &count, &more, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);

    Ctxguard__V1__ListTenantsResponse *resp =
        NEW(call, Ctxguard__V1__ListTenantsResponse, ctxguard__v1__list_tenants_response__init);
    if (resp == NULL)
        return OOM(call);
    resp->tenants = cg_arena_calloc(call->arena, (size_t)count + 1, sizeof *resp->tenants);
    if (resp->tenants == NULL)
        return OOM(call);
    for (int i = 0; i < count; i++)
        if ((resp->tenants[i] = tenant_msg(call, &rows[i])) == NULL)
            return OOM(call);
    resp->n_tenants = (size_t)count;
    if (more && count > 0 && (resp->next_page_token = dup(call, rows[count - 1].tenant_id)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- keys ------------ */

CG_HANDLER(cg_rpc_admin_create_api_key)
{
    const Ctxguard__V1__CreateApiKeyRequest *req =
        (const Ctxguard__V1__CreateApiKeyRequest *)request;
    cg_status st = cg_rpc_check_uuid(call, "tenant_id", req->tenant_id);
    if (st == CG_OK)
        st = cg_rpc_check_name(call, "name", req->name, CG_NAME_MAX, false);
    if (st != CG_OK)
        return st;

    uint8_t raw_id[CG_APIKEY_KEY_ID_CHARS / 2], raw_secret[CG_APIKEY_SECRET_BYTES];
    if (cg_random_bytes(raw_id, sizeof raw_id) != CG_OK ||
        cg_random_bytes(raw_secret, sizeof raw_secret) != CG_OK)
        return cg_err_set(&call->err, CG_INTERNAL, "no randomness available for a new key");
    char key_id[CG_APIKEY_KEY_ID_CHARS + 1], secret[CG_APIKEY_SECRET_CHARS + 1];
    cg_hex_encode(raw_id, sizeof raw_id, key_id);
    cg_base64url_encode(raw_secret, sizeof raw_secret, secret);

    char *text = cg_arena_alloc(call->arena, CG_APIKEY_LEN + 1);
    if (text == NULL)
        return OOM(call);
    /* tenant_id was checked above; lower-case it so the stored key matches the text. */
    char tenant[CG_UUID_LEN + 1];
    for (int i = 0; i <= CG_UUID_LEN; i++)
        tenant[i] = (req->tenant_id[i] >= 'A' && req->tenant_id[i] <= 'F')
                        ? (char)(req->tenant_id[i] - 'A' + 'a')
                        : req->tenant_id[i];
    if (!cg_apikey_format(tenant, key_id, secret, text, CG_APIKEY_LEN + 1))
        return cg_err_set(&call->err, CG_INTERNAL, "could not format the key");
    uint8_t hash[CG_SHA256_LEN];
    cg_sha256(text, CG_APIKEY_LEN, hash);

    struct cg_api_key k;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_key_create(env->store, tenant, key_id, hash, req->name, &k, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);

    Ctxguard__V1__CreateApiKeyResponse *resp =
        NEW(call, Ctxguard__V1__CreateApiKeyResponse, ctxguard__v1__create_api_key_response__init);
    if (resp == NULL || (resp->key = key_msg(call, &k)) == NULL)
        return OOM(call);
    resp->secret = text;
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_list_api_keys)
{
    const Ctxguard__V1__ListApiKeysRequest *req = (const Ctxguard__V1__ListApiKeysRequest *)request;
    cg_status st = cg_rpc_check_uuid(call, "tenant_id", req->tenant_id);
    if (st != CG_OK)
        return st;
    struct cg_api_key *rows = cg_arena_calloc(call->arena, KEYS_MAX, sizeof *rows);
    if (rows == NULL)
        return OOM(call);
    int count = 0;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_key_list(env->store, req->tenant_id, KEYS_MAX, rows, &count, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    Ctxguard__V1__ListApiKeysResponse *resp =
        NEW(call, Ctxguard__V1__ListApiKeysResponse, ctxguard__v1__list_api_keys_response__init);
    if (resp == NULL)
        return OOM(call);
    resp->keys = cg_arena_calloc(call->arena, (size_t)count + 1, sizeof *resp->keys);
    if (resp->keys == NULL)
        return OOM(call);
    for (int i = 0; i < count; i++)
        if ((resp->keys[i] = key_msg(call, &rows[i])) == NULL)
            return OOM(call);
    resp->n_keys = (size_t)count;
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_revoke_api_key)
{
    const Ctxguard__V1__RevokeApiKeyRequest *req =
        (const Ctxguard__V1__RevokeApiKeyRequest *)request;
    cg_status st = cg_rpc_check_uuid(call, "tenant_id", req->tenant_id);
    if (st != CG_OK)
        return st;
    size_t klen = strlen(req->key_id);
    if (klen == 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'key_id' is required");
    if (klen != CG_APIKEY_KEY_ID_CHARS || strspn(req->key_id, "0123456789abcdef") != klen)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'key_id' must be %d lower-case hex digits",
                          CG_APIKEY_KEY_ID_CHARS);
    struct cg_api_key k;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_key_revoke(env->store, req->tenant_id, req->key_id, &k, &serr);
    /* This process stops accepting the key at once (also when the outcome is unknown);
     * other replicas when the commit's cg_keys notification reaches them (migrations/0017),
     * or within key_cache_ttl_s while their LISTEN connection is down. */
    char tenant[CG_UUID_LEN + 1];
    snprintf(tenant, sizeof tenant, "%s", req->tenant_id);
    for (char *c = tenant; *c != '\0'; c++) /* keys name their tenant in lower case */
        if (*c >= 'A' && *c <= 'F')
            *c = (char)(*c - 'A' + 'a');
    cg_cache_key_drop(env->cache, tenant, req->key_id);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    Ctxguard__V1__RevokeApiKeyResponse *resp =
        NEW(call, Ctxguard__V1__RevokeApiKeyResponse, ctxguard__v1__revoke_api_key_response__init);
    if (resp == NULL || (resp->key = key_msg(call, &k)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- diagnostics ----- */

CG_HANDLER(cg_rpc_admin_who_am_i)
{
    (void)env;
    (void)request;
    Ctxguard__V1__WhoAmIResponse *resp =
        NEW(call, Ctxguard__V1__WhoAmIResponse, ctxguard__v1__who_am_iresponse__init);
    if (resp == NULL)
        return OOM(call);
    const struct cg_principal *p = &call->principal;
    if (p->is_admin) {
        resp->kind = CTXGUARD__V1__WHO_AM_IRESPONSE__KIND__KIND_ADMIN;
    } else {
        resp->kind = CTXGUARD__V1__WHO_AM_IRESPONSE__KIND__KIND_TENANT;
        resp->tenant_id = dup(call, p->tenant_id);
        resp->tenant_name = dup(call, p->tenant_name);
        resp->key_id = dup(call, p->key_id);
        if (resp->tenant_id == NULL || resp->tenant_name == NULL || resp->key_id == NULL)
            return OOM(call);
    }
    *response = &resp->base;
    return CG_OK;
}

CG_HANDLER(cg_rpc_admin_ping)
{
    (void)env;
    const Ctxguard__V1__PingRequest *req = (const Ctxguard__V1__PingRequest *)request;
    if (req->delay_ms > PING_DELAY_MAX_MS)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'delay_ms' must be at most %d",
                          PING_DELAY_MAX_MS);
    if (req->payload.len > PING_PAYLOAD_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'payload' must be at most %d bytes", PING_PAYLOAD_MAX);
    Ctxguard__V1__PingResponse *resp =
        NEW(call, Ctxguard__V1__PingResponse, ctxguard__v1__ping_response__init);
    if (resp == NULL)
        return OOM(call);
    resp->payload = req->payload; /* both live in the call's arena */
    resp->delay_ms = req->delay_ms;
    /* The time the reply is meant to leave: now plus the hold. */
    resp->server_time_unix_ms = cg_wall_ms() + req->delay_ms;
    call->reply_delay_ms = req->delay_ms;
    *response = &resp->base;
    return CG_OK;
}

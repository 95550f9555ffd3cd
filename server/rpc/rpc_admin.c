/* rpc_admin.c - AdminService: tenants, API keys, the audit trail, WhoAmI and Ping. Each
 * handler checks its request's fields, names the tenant (a tenant key acts for its own),
 * calls one flow of service/admin.c and encodes its answer.
 */
#include "rpc/rpc_handlers.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "core/apikey.h"
#include "core/keyrole.h"
#include "core/utf8.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "service/admin.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000
#define PING_DELAY_MAX_MS 60000
#define PING_PAYLOAD_MAX (64 * 1024)
#define KEY_TTL_MAX_MS 31536000000LL /* one year */
#define CALL_TOKENS_MAX 100000000LL

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
    s->max_call_tokens = t->settings.max_call_tokens;
    s->history_retention_days = (uint32_t)t->settings.history_retention_days;
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
    if (in->max_call_tokens < 0 || in->max_call_tokens > CALL_TOKENS_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.max_call_tokens' must be 0..%lld (0: %lld)",
                          CALL_TOKENS_MAX, CG_CALL_TOKENS_DEFAULT);
    out->max_call_tokens = in->max_call_tokens;
    if (in->history_retention_days > 36500)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.history_retention_days' must be 0..36500 (0: kept)");
    out->history_retention_days = (int)in->history_retention_days;
    return CG_OK;
}

/* The tenant a request names in `field`, lower case, into out: the admin key must name
 * one; a tenant key acts for its own, named or left empty (another tenant's id is
 * NOT_FOUND, as if it did not exist). */
static cg_status request_tenant(struct cg_rpc_call *call, const char *field, const char *value,
                                char out[CG_UUID_LEN + 1])
{
    const struct cg_principal *p = &call->principal;
    if (p->is_admin || value[0] != '\0') {
        cg_status st = cg_rpc_check_uuid(call, field, value);
        if (st != CG_OK)
            return st;
    }
    const char *id = value[0] != '\0' ? value : p->tenant_id;
    for (int i = 0; i <= CG_UUID_LEN; i++)
        out[i] = (id[i] >= 'A' && id[i] <= 'F') ? (char)(id[i] - 'A' + 'a') : id[i];
    if (!p->is_admin && strcmp(out, p->tenant_id) != 0)
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "%s: no such tenant",
                           field);
    return CG_OK;
}

/* A Scope message for a key's bound subtree; NULL (no error) when unbound. */
static cg_status bound_scope_msg(struct cg_rpc_call *call, const char *session, const char *task,
                                 Ctxguard__V1__Scope **out)
{
    *out = NULL;
    if (session[0] == '\0')
        return CG_OK;
    Ctxguard__V1__Scope *m = NEW(call, Ctxguard__V1__Scope, ctxguard__v1__scope__init);
    if (m == NULL || (m->session_id = dup(call, session)) == NULL ||
        (m->task_id = dup(call, task)) == NULL)
        return OOM(call);
    *out = m;
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
    m->role = (Ctxguard__V1__ApiKeyRole)k->role;
    m->expires_at_unix_ms = k->expires_at_ms;
    m->last_used_at_unix_ms = k->last_used_at_ms;
    m->created_by_key_id = dup(call, k->created_by_key_id);
    if (m->key_id == NULL || m->tenant_id == NULL || m->name == NULL ||
        m->created_by_key_id == NULL ||
        bound_scope_msg(call, k->scope_session_id, k->scope_task_id, &m->scope) != CG_OK)
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

cg_status cg_rpc_admin_create_tenant(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response)
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

    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_tenant t;
    st = cg_admin_tenant_create(&env->svc, &op, req->name, tz, &settings, &audit, &t);
    if (st != CG_OK)
        return st;

    Ctxguard__V1__CreateTenantResponse *resp =
        NEW(call, Ctxguard__V1__CreateTenantResponse, ctxguard__v1__create_tenant_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_admin_get_tenant(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetTenantRequest *req = (const Ctxguard__V1__GetTenantRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st != CG_OK)
        return st;
    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_tenant t;
    if ((st = cg_admin_tenant_get(&env->svc, &op, tenant, &t)) != CG_OK)
        return st;
    Ctxguard__V1__GetTenantResponse *resp =
        NEW(call, Ctxguard__V1__GetTenantResponse, ctxguard__v1__get_tenant_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_admin_update_tenant_settings(struct cg_rpc_call *call,
                                              const struct cg_rpc_env *env,
                                              const ProtobufCMessage *request,
                                              ProtobufCMessage **response)
{
    const Ctxguard__V1__UpdateTenantSettingsRequest *req =
        (const Ctxguard__V1__UpdateTenantSettingsRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st != CG_OK)
        return st;
    /* Required: an absent message would silently reset everything to the defaults. */
    if (req->settings == NULL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'settings' is required");
    struct cg_tenant_settings settings;
    if ((st = settings_in(call, req->settings, &settings)) != CG_OK)
        return st;
    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_tenant t;
    st = cg_admin_tenant_settings_put(&env->svc, &op, tenant, &settings, &audit, &t);
    if (st != CG_OK)
        return st;
    Ctxguard__V1__UpdateTenantSettingsResponse *resp =
        NEW(call, Ctxguard__V1__UpdateTenantSettingsResponse,
            ctxguard__v1__update_tenant_settings_response__init);
    if (resp == NULL || (resp->tenant = tenant_msg(call, &t)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_admin_list_tenants(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response)
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

    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_tenant *rows;
    int count;
    bool more;
    cg_status st =
        cg_admin_tenant_list(&env->svc, &op, req->page_token, (int)size, &rows, &count, &more);
    if (st != CG_OK)
        return st;

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

/* What CreateApiKey asks for, its fields checked; what the creator may mint is the
 * service's (cg_admin_key_create). */
static cg_status key_spec_in(struct cg_rpc_call *call, const Ctxguard__V1__CreateApiKeyRequest *req,
                             struct cg_api_key_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->name = req->name;
    int role = req->role == CTXGUARD__V1__API_KEY_ROLE__API_KEY_ROLE_UNSPECIFIED ? CG_KEY_ROLE_AGENT
                                                                                 : (int)req->role;
    if (!cg_key_role_valid(role))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'role' is not an ApiKeyRole (1..4): %d", (int)req->role);
    spec->role = role;

    spec->scope_session_id = "";
    spec->scope_task_id = "";
    const Ctxguard__V1__Scope *sc = req->scope;
    if (sc != NULL) {
        cg_status st = cg_rpc_check_key(call, "scope.session_id", sc->session_id, false);
        if (st == CG_OK)
            st = cg_rpc_check_key(call, "scope.task_id", sc->task_id, false);
        if (st != CG_OK)
            return st;
        if (sc->agent_id[0] != '\0')
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'scope.agent_id' must be empty: a key binds to a session or "
                              "a task");
        if (sc->task_id[0] != '\0' && sc->session_id[0] == '\0')
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'scope.session_id' is required with scope.task_id");
        if (sc->tenant && sc->session_id[0] != '\0')
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'scope.tenant' cannot be set together with ids");
        spec->scope_session_id = sc->session_id;
        spec->scope_task_id = sc->task_id;
    }
    if (role == CG_KEY_ROLE_ADMIN && spec->scope_session_id[0] != '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'scope': an admin key acts for the whole tenant; bind agent, "
                          "viewer or operator keys");
    if (req->ttl_ms < 0 || req->ttl_ms > KEY_TTL_MAX_MS)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'ttl_ms' must be 0..%lld (0: never expires)", KEY_TTL_MAX_MS);
    spec->expires_at_ms = req->ttl_ms > 0 ? cg_wall_ms() + req->ttl_ms : 0;
    spec->created_by_key_id = "";
    return CG_OK;
}

cg_status cg_rpc_admin_create_api_key(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__CreateApiKeyRequest *req =
        (const Ctxguard__V1__CreateApiKeyRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st == CG_OK)
        st = cg_rpc_check_name(call, "name", req->name, CG_NAME_MAX, false);
    struct cg_api_key_spec spec;
    if (st == CG_OK)
        st = key_spec_in(call, req, &spec);
    if (st != CG_OK)
        return st;

    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_api_key k;
    char *text;
    if ((st = cg_admin_key_create(&env->svc, &op, tenant, &spec, &audit, &k, &text)) != CG_OK)
        return st;

    Ctxguard__V1__CreateApiKeyResponse *resp =
        NEW(call, Ctxguard__V1__CreateApiKeyResponse, ctxguard__v1__create_api_key_response__init);
    if (resp == NULL || (resp->key = key_msg(call, &k)) == NULL)
        return OOM(call);
    resp->secret = text;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_admin_list_api_keys(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__ListApiKeysRequest *req = (const Ctxguard__V1__ListApiKeysRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st != CG_OK)
        return st;
    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_api_key *rows;
    int count;
    if ((st = cg_admin_key_list(&env->svc, &op, tenant, &rows, &count)) != CG_OK)
        return st;
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

cg_status cg_rpc_admin_revoke_api_key(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__RevokeApiKeyRequest *req =
        (const Ctxguard__V1__RevokeApiKeyRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st != CG_OK)
        return st;
    size_t klen = strlen(req->key_id);
    if (klen == 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'key_id' is required");
    if (klen != CG_APIKEY_KEY_ID_CHARS || strspn(req->key_id, "0123456789abcdef") != klen)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'key_id' must be %d lower-case hex digits",
                          CG_APIKEY_KEY_ID_CHARS);
    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_api_key k;
    if ((st = cg_admin_key_revoke(&env->svc, &op, tenant, req->key_id, &audit, &k)) != CG_OK)
        return st;
    Ctxguard__V1__RevokeApiKeyResponse *resp =
        NEW(call, Ctxguard__V1__RevokeApiKeyResponse, ctxguard__v1__revoke_api_key_response__init);
    if (resp == NULL || (resp->key = key_msg(call, &k)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- audit trail ----- */

#define AUDIT_TOKEN_MAX_DIGITS 19

/* The page token: the last audit_id of the previous page, in decimal. */
static bool audit_token_in(const char *token, int64_t *before_id)
{
    size_t len = strlen(token);
    if (len == 0 || len > AUDIT_TOKEN_MAX_DIGITS || strspn(token, "0123456789") != len ||
        token[0] == '0')
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (v > (INT64_MAX - (token[i] - '0')) / 10)
            return false;
        v = v * 10 + (token[i] - '0');
    }
    *before_id = v;
    return true;
}

/* ListAuditEventsRequest's filters into the store's; errors name the field. */
static cg_status audit_filter_in(struct cg_rpc_call *call,
                                 const Ctxguard__V1__ListAuditEventsRequest *req,
                                 struct cg_audit_filter *f)
{
    memset(f, 0, sizeof *f);
    if (req->scope != NULL) {
        int level;
        cg_status st = cg_rpc_scope_in(call, req->scope, &f->scope, &level);
        if (st != CG_OK)
            return st;
        f->has_scope = true;
    }
    /* A scope-bound key's subtree is the service's (cg_admin_audit_list). */
    const char *actor = req->actor_key_id;
    if (actor[0] != '\0') {
        size_t len = strlen(actor);
        bool admin = strcmp(actor, "admin") == 0;
        if (!admin && (len > CG_KEY_ID_LEN ||
                       strspn(actor, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "0123456789_-") != len))
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'actor_key_id' must be a key id (1..%d of A-Z a-z 0-9 _ -) "
                              "or \"admin\"",
                              CG_KEY_ID_LEN);
        f->has_actor = true;
        f->actor_key_id = admin ? "" : actor;
    }
    size_t klen = strlen(req->kind);
    if (klen > 0 &&
        (klen > CG_AUDIT_KIND_MAX || strspn(req->kind, "abcdefghijklmnopqrstuvwxyz_") != klen))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'kind' must be 1..%d of a-z and _ (e.g. budget_set)",
                          CG_AUDIT_KIND_MAX);
    f->kind = req->kind;
    if (req->since_unix_ms < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'since_unix_ms' must not be negative");
    if (req->until_unix_ms < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'until_unix_ms' must not be negative");
    if (req->since_unix_ms > 0 && req->until_unix_ms > 0 &&
        req->until_unix_ms <= req->since_unix_ms)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'until_unix_ms' must be after since_unix_ms");
    f->since_ms = req->since_unix_ms;
    f->until_ms = req->until_unix_ms;
    return CG_OK;
}

static Ctxguard__V1__AuditEvent *audit_event_msg(struct cg_rpc_call *call, const char *tenant,
                                                 const struct cg_audit_event *e)
{
    Ctxguard__V1__AuditEvent *m =
        NEW(call, Ctxguard__V1__AuditEvent, ctxguard__v1__audit_event__init);
    if (m == NULL)
        return NULL;
    m->audit_id = e->audit_id;
    m->at_unix_ms = e->at_ms;
    m->actor_role = (char *)cg_key_role_name((cg_key_role)e->actor_role);
    if ((m->tenant_id = dup(call, tenant)) == NULL ||
        (m->actor_key_id = dup(call, e->actor_key_id)) == NULL ||
        (m->kind = dup(call, e->kind)) == NULL ||
        (m->request_id = dup(call, e->request_id)) == NULL ||
        (m->target = dup(call, e->target)) == NULL)
        return NULL;
    /* The JSON is in the call's arena already (cg_admin_audit_list). */
    m->before_json = e->before_json;
    m->after_json = e->after_json;
    if (e->ids.session_id[0] != '\0') {
        Ctxguard__V1__Scope *sc = NEW(call, Ctxguard__V1__Scope, ctxguard__v1__scope__init);
        if (sc == NULL || (sc->session_id = dup(call, e->ids.session_id)) == NULL ||
            (sc->task_id = dup(call, e->ids.task_id)) == NULL ||
            (sc->agent_id = dup(call, e->ids.agent_id)) == NULL)
            return NULL;
        m->scope = sc;
    }
    return m;
}

cg_status cg_rpc_admin_list_audit_events(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                         const ProtobufCMessage *request,
                                         ProtobufCMessage **response)
{
    const Ctxguard__V1__ListAuditEventsRequest *req =
        (const Ctxguard__V1__ListAuditEventsRequest *)request;
    char tenant[CG_UUID_LEN + 1];
    cg_status st = request_tenant(call, "tenant_id", req->tenant_id, tenant);
    if (st != CG_OK)
        return st;
    uint32_t size = req->page_size ? req->page_size : LIST_DEFAULT;
    if (size > LIST_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_size' must be at most %d",
                          LIST_MAX);
    int64_t before_id = 0;
    if (req->page_token[0] != '\0' && !audit_token_in(req->page_token, &before_id))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' is not a token this server gave");
    struct cg_audit_filter filter;
    if ((st = audit_filter_in(call, req, &filter)) != CG_OK)
        return st;

    struct cg_op op = {call->arena, call->request_id, call->deadline_ms, &call->principal,
                       &call->err};
    struct cg_audit_event *rows;
    int count;
    bool more;
    st = cg_admin_audit_list(&env->svc, &op, tenant, &filter, before_id, (int)size, &rows, &count,
                             &more);
    if (st != CG_OK)
        return st;

    Ctxguard__V1__ListAuditEventsResponse *resp =
        NEW(call, Ctxguard__V1__ListAuditEventsResponse,
            ctxguard__v1__list_audit_events_response__init);
    if (resp == NULL || (resp->events = cg_arena_calloc(call->arena, (size_t)count + 1,
                                                        sizeof *resp->events)) == NULL)
        return OOM(call);
    for (int i = 0; i < count; i++)
        if ((resp->events[i] = audit_event_msg(call, tenant, &rows[i])) == NULL)
            return OOM(call);
    resp->n_events = (size_t)count;
    if (more && count > 0) {
        char token[24];
        snprintf(token, sizeof token, "%lld", (long long)rows[count - 1].audit_id);
        if ((resp->next_page_token = dup(call, token)) == NULL)
            return OOM(call);
    }
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- diagnostics ----- */

cg_status cg_rpc_admin_who_am_i(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response)
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
        resp->role = (Ctxguard__V1__ApiKeyRole)p->role;
        resp->expires_at_unix_ms = p->expires_at_ms;
        cg_status st = bound_scope_msg(call, p->scope_session_id, p->scope_task_id, &resp->scope);
        if (st != CG_OK)
            return st;
    }
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_admin_ping(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response)
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

/* rpc.c - decode, validate, authenticate, handle, encode: the path every call takes. */
#include "rpc/rpc.h"

#include <stdio.h>
#include <string.h>

#include "base/crypto.h"
#include "base/log.h"
#include "core/apikey.h"
#include "core/utf8.h"

#define AUTH_HEADER_MAX 512
#define FIELD_PATH_MAX 96

/* ---------------------------------------------------------------- allocator ------- */

static void *arena_alloc(void *data, size_t size)
{
    return cg_arena_alloc(data, size);
}

static void arena_nofree(void *data, void *ptr)
{
    (void)data;
    (void)ptr;
}

void cg_rpc_allocator(struct cg_arena *arena, ProtobufCAllocator *out)
{
    out->alloc = arena_alloc;
    out->free = arena_nofree;
    out->allocator_data = arena;
}

/* ---------------------------------------------------------------- UTF-8 walk ------ */

/* protobuf-c does not check that proto3 `string` fields are UTF-8; the protocol says they
 * must be, and everything downstream (PostgreSQL text, JSON, the tokenizer) relies on it.
 * Walk the decoded message by its descriptor. Nesting is bounded by the schema, and the
 * path buffer bounds what we print. */
static cg_status check_strings(const ProtobufCMessage *msg, char *path, size_t path_len,
                               struct cg_err *err, int depth);

static void path_push(char *path, size_t base, const char *name, long index)
{
    if (index >= 0)
        snprintf(path + base, FIELD_PATH_MAX - base, "%s%s[%ld]", base ? "." : "", name, index);
    else
        snprintf(path + base, FIELD_PATH_MAX - base, "%s%s", base ? "." : "", name);
}

static cg_status check_one_string(const char *s, char *path, struct cg_err *err)
{
    size_t bad;
    if (s != NULL && !cg_utf8_valid(s, strlen(s), &bad))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is not valid UTF-8 (byte %zu)",
                          path, bad);
    return CG_OK;
}

static cg_status check_strings(const ProtobufCMessage *msg, char *path, size_t path_len,
                               struct cg_err *err, int depth)
{
    if (depth > 64)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "message nested too deeply at '%s'", path);
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which = *(const uint32_t *)(base + f->quantifier_offset);
            if (which != f->id)
                continue;
        }
        size_t plen = strlen(path);
        (void)path_len;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            void *const *items = *(void *const *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++) {
                path_push(path, plen, f->name, (long)k);
                cg_status st = f->type == PROTOBUF_C_TYPE_STRING
                                   ? check_one_string(items[k], path, err)
                                   : check_strings(items[k], path, plen, err, depth + 1);
                path[plen] = '\0';
                if (st != CG_OK)
                    return st;
            }
        } else {
            const void *value = *(const void *const *)(base + f->offset);
            if (value == NULL)
                continue;
            path_push(path, plen, f->name, -1);
            cg_status st = f->type == PROTOBUF_C_TYPE_STRING
                               ? check_one_string(value, path, err)
                               : check_strings(value, path, plen, err, depth + 1);
            path[plen] = '\0';
            if (st != CG_OK)
                return st;
        }
    }
    return CG_OK;
}

cg_status cg_rpc_decode(struct cg_rpc_call *call, const ProtobufCMessageDescriptor *desc,
                        const uint8_t *data, size_t len, ProtobufCMessage **out)
{
    ProtobufCAllocator alloc;
    cg_rpc_allocator(call->arena, &alloc);
    *out = protobuf_c_message_unpack(desc, &alloc, len, data);
    if (*out == NULL) {
        /* protobuf-c does not say why; the arena cap is the one cause we can tell apart. */
        if (len > call->max_message_bytes)
            return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED,
                              "request of %zu bytes is larger than the limit of %zu", len,
                              call->max_message_bytes);
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "request is not a valid %s message", desc->name);
    }
    char path[FIELD_PATH_MAX] = "";
    return check_strings(*out, path, 0, &call->err, 0);
}

cg_status cg_rpc_encode(struct cg_rpc_call *call, const ProtobufCMessage *msg, uint8_t **out,
                        size_t *out_len)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    if (n > call->max_message_bytes)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED,
                          "response of %zu bytes is larger than the limit of %zu", n,
                          call->max_message_bytes);
    uint8_t *buf = cg_arena_alloc(call->arena, n);
    if (buf == NULL)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "out of memory for the response");
    protobuf_c_message_pack(msg, buf);
    *out = buf;
    *out_len = n;
    return CG_OK;
}

/* ---------------------------------------------------------------- auth ------------ */

static bool is_admin_key(const struct cg_config *cfg, const char *token, size_t len)
{
    size_t alen = strlen(cfg->admin_key);
    if (alen == 0 || alen != len)
        return false;
    return cg_equal_ct(cfg->admin_key, token, len);
}

static cg_status auth_tenant(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const char *token, size_t len)
{
    struct cg_apikey_parts parts;
    if (!cg_apikey_parse(token, len, &parts))
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "invalid API key in 'authorization' metadata");
    if (env->store == NULL)
        return cg_err_set(&call->err, CG_INTERNAL, "tenant authentication without a store");

    struct cg_key_auth rec;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_key_lookup(env->store, parts.tenant_id, parts.key_id, &rec, &serr);
    if (st == CG_NOT_FOUND)
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "invalid API key in 'authorization' metadata");
    if (st != CG_OK) {
        call->err = serr;
        return st;
    }
    uint8_t hash[CG_SHA256_LEN];
    cg_sha256(token, len, hash);
    if (!cg_equal_ct(hash, rec.secret_hash, sizeof hash))
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "invalid API key in 'authorization' metadata");
    if (rec.revoked)
        return cg_err_set(&call->err, CG_UNAUTHENTICATED, "API key %s has been revoked",
                          parts.key_id);
    struct cg_principal *p = &call->principal;
    p->authenticated = true;
    p->is_admin = false;
    memcpy(p->tenant_id, parts.tenant_id, sizeof p->tenant_id);
    memcpy(p->key_id, parts.key_id, sizeof p->key_id);
    snprintf(p->tenant_name, sizeof p->tenant_name, "%s", rec.tenant_name);
    return CG_OK;
}

cg_status cg_rpc_authenticate(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env)
{
    memset(&call->principal, 0, sizeof call->principal);
    if (m->auth == CG_AUTH_NONE)
        return CG_OK;
    if (m->auth == CG_AUTH_ADMIN && env->config->admin_key[0] == '\0')
        return cg_err_set(&call->err, CG_PERMISSION_DENIED,
                          "AdminService is disabled: the server has no admin_key configured");

    const char *header = call->authorization;
    if (header == NULL || header[0] == '\0')
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "missing 'authorization' metadata: expected 'Bearer <key>'");
    const char *token;
    size_t len;
    if (strlen(header) > AUTH_HEADER_MAX || !cg_apikey_bearer(header, &token, &len))
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "malformed 'authorization' metadata: expected 'Bearer <key>'");

    if (is_admin_key(env->config, token, len)) {
        if (m->auth == CG_AUTH_TENANT)
            return cg_err_set(&call->err, CG_PERMISSION_DENIED,
                              "this method needs a tenant API key; the admin key acts for no tenant");
        call->principal.authenticated = true;
        call->principal.is_admin = true;
        return CG_OK;
    }
    if (m->auth == CG_AUTH_ADMIN) {
        struct cg_apikey_parts parts;
        if (cg_apikey_parse(token, len, &parts))
            return cg_err_set(&call->err, CG_PERMISSION_DENIED,
                              "this method needs the admin key, not a tenant API key");
        return cg_err_set(&call->err, CG_UNAUTHENTICATED, "invalid admin key");
    }
    return auth_tenant(call, env, token, len);
}

/* ---------------------------------------------------------------- invoke ---------- */

cg_status cg_rpc_invoke(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                        const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                        uint8_t **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    ProtobufCMessage *request = NULL;
    cg_status st = cg_rpc_decode(call, m->request_desc, req, len, &request);
    if (st != CG_OK)
        return st;
    st = cg_rpc_authenticate(m, call, env);
    if (st != CG_OK)
        return st;
    if (m->handler == NULL)
        return cg_err_set(&call->err, CG_UNIMPLEMENTED,
                          "%s is not implemented in this version of ctxguard (planned: %s)",
                          m->path + 1, m->pending ? m->pending : "later");

    ProtobufCMessage *response = NULL;
    st = m->handler(call, env, request, &response);
    if (st != CG_OK) {
        if (call->err.code != st)
            cg_err_set(&call->err, st, "%s", cg_status_str(st));
        return st;
    }
    if (response == NULL)
        return cg_err_set(&call->err, CG_INTERNAL, "handler of %s gave no response", m->path);
    return cg_rpc_encode(call, response, out, out_len);
}

cg_status cg_rpc_stream_open(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                             const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                             ProtobufCMessage **request)
{
    cg_status st = cg_rpc_decode(call, m->request_desc, req, len, request);
    if (st != CG_OK)
        return st;
    st = cg_rpc_authenticate(m, call, env);
    if (st != CG_OK)
        return st;
    if (m->poll == NULL)
        return cg_err_set(&call->err, CG_UNIMPLEMENTED,
                          "%s is not implemented in this version of ctxguard (planned: %s)",
                          m->path + 1, m->pending ? m->pending : "later");
    return CG_OK;
}

bool cg_rpc_health_probe(const struct cg_rpc_env *env)
{
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = cg_store_ping(env->store, &err);
    bool changed = cg_health_set_store_ok(env->health, st == CG_OK);
    if (changed) {
        if (st == CG_OK)
            cg_log(CG_LOG_INFO, "health", NULL, "PostgreSQL reachable: SERVING");
        else
            cg_log(CG_LOG_WARN, "health", NULL, "PostgreSQL unreachable: NOT_SERVING (%s)",
                   cg_err_text(&err));
    }
    return changed;
}

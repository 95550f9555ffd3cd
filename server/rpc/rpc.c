/* rpc.c - decode, validate, authenticate, handle, encode: the path every call takes. */
#include "rpc/rpc.h"

#include <stdio.h>
#include <string.h>

#include "base/crypto.h"
#include "core/apikey.h"
#include "core/utf8.h"
#include "rpc/pb_pack.h"
#include "service/keys.h"

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

/* ---------------------------------------------------------------- string check ---- */

/* protobuf-c checks neither that proto3 `string` fields are UTF-8 (the protocol says they
 * must be, and PostgreSQL text, JSON and the tokenizer rely on it) nor that they hold no
 * NUL (its C strings would silently end there: "acme\0junk" would become "acme"). The
 * decoded strings have lost their lengths, so the check walks the wire bytes, guided by
 * the descriptor, after protobuf-c has accepted them as well-formed. Nesting is bounded
 * by the schema and by MAX_DEPTH; the path buffer bounds what the message can name. */

#define MAX_DEPTH 64

struct wire {
    const uint8_t *p;
    const uint8_t *end;
};

static bool read_varint(struct wire *w, uint64_t *out)
{
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && w->p < w->end; shift += 7) {
        uint8_t b = *w->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return true;
        }
    }
    return false;
}

static bool skip(struct wire *w, uint64_t n)
{
    if ((uint64_t)(w->end - w->p) < n)
        return false;
    w->p += n;
    return true;
}

/* Where the walk is: the field being checked and the one that holds it, a chain on the
 * stack. It is written out as a path ("messages[3].content") only for an error, so a valid
 * request costs no string work. */
struct field_at {
    const struct field_at *up; /* NULL at the top */
    const char *name;
    long index; /* of a repeated field's element; -1 otherwise */
};

/* Writes at's path into path (FIELD_PATH_MAX bytes, cut to fit); returns its length. */
static size_t path_of(const struct field_at *at, char *path)
{
    size_t n = at->up != NULL ? path_of(at->up, path) : 0;
    char num[24] = "";
    if (at->index >= 0) {
        char rev[20];
        size_t k = 0, m = 0;
        unsigned long v = (unsigned long)at->index;
        do {
            rev[k++] = (char)('0' + v % 10);
            v /= 10;
        } while (v != 0);
        num[m++] = '[';
        while (k > 0)
            num[m++] = rev[--k];
        num[m++] = ']';
        num[m] = '\0';
    }
    const char *pieces[] = {n > 0 ? "." : "", at->name, num};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(pieces[i]);
        if (n + len > FIELD_PATH_MAX - 1)
            len = FIELD_PATH_MAX - 1 - n;
        memcpy(path + n, pieces[i], len);
        n += len;
    }
    path[n] = '\0';
    return n;
}

static cg_status check_text(const uint8_t *s, size_t len, const struct field_at *at,
                            struct cg_err *err)
{
    char path[FIELD_PATH_MAX];
    size_t bad;
    if (!cg_utf8_valid((const char *)s, len, &bad)) {
        path_of(at, path);
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is not valid UTF-8 (byte %zu)",
                          path, bad);
    }
    const uint8_t *nul = memchr(s, 0, len);
    if (nul != NULL) {
        path_of(at, path);
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s' contains a NUL character (byte %zu)", path,
                          (size_t)(nul - s));
    }
    return CG_OK;
}

/* Skips the value of a field whose wire type is not 2 (length-delimited); false when the
 * bytes end first or the wire type is not one protobuf has. */
static bool skip_scalar(struct wire *w, uint64_t tag)
{
    uint64_t v;
    switch (tag & 7) {
    case 0:
        return read_varint(w, &v);
    case 1:
        return skip(w, 8);
    case 5:
        return skip(w, 4);
    default:
        return false;
    }
}

static cg_status check_wire(struct cg_arena *arena, const ProtobufCMessageDescriptor *d,
                            struct wire w, const struct field_at *at, struct cg_err *err, int depth)
{
    if (depth > MAX_DEPTH) {
        char path[FIELD_PATH_MAX] = "";
        if (at != NULL)
            path_of(at, path);
        return cg_err_set(err, CG_INVALID_ARGUMENT, "message nested too deeply at '%s'", path);
    }
    uint32_t *seen = NULL; /* occurrences per field, to name repeated elements by index */
    while (w.p < w.end) {
        uint64_t tag, len;
        if (!read_varint(&w, &tag))
            goto malformed;
        if ((tag & 7) != 2) {
            if (!skip_scalar(&w, tag))
                goto malformed;
            continue;
        }
        if (!read_varint(&w, &len) || (uint64_t)(w.end - w.p) < len)
            goto malformed;
        struct wire inner = {w.p, w.p + len};
        w.p += len;
        const ProtobufCFieldDescriptor *f =
            tag >> 3 <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                : NULL;
        if (f == NULL || (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE))
            continue;
        struct field_at here = {at, f->name, -1};
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (seen == NULL &&
                (seen = cg_arena_calloc(arena, d->n_fields + 1, sizeof *seen)) == NULL)
                return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory checking the request");
            here.index = (long)seen[f - d->fields]++;
        }
        cg_status st = f->type == PROTOBUF_C_TYPE_STRING
                           ? check_text(inner.p, len, &here, err)
                           : check_wire(arena, f->descriptor, inner, &here, err, depth + 1);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
malformed:
    /* protobuf-c accepted these bytes, so this is not expected; refuse rather than guess. */
    return cg_err_set(err, CG_INVALID_ARGUMENT, "request is not a valid %s message", d->name);
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
            return cg_err_setr(&call->err, CG_RESOURCE_EXHAUSTED, CG_ERR_MESSAGE_TOO_LARGE,
                               "request of %zu bytes is larger than the limit of %zu", len,
                               call->max_message_bytes);
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "request is not a valid %s message",
                          desc->name);
    }
    struct wire w = {data, data + len};
    return check_wire(call->arena, desc, w, NULL, &call->err, 0);
}

/* The limit on an answer's size, as an error naming both. */
static cg_status too_large(struct cg_rpc_call *call, size_t n)
{
    return cg_err_setr(&call->err, CG_RESOURCE_EXHAUSTED, CG_ERR_MESSAGE_TOO_LARGE,
                       "response of %zu bytes is larger than the limit of %zu", n,
                       call->max_message_bytes);
}

cg_status cg_rpc_encode(struct cg_rpc_call *call, const ProtobufCMessage *msg, uint8_t **out,
                        size_t *out_len)
{
    /* A small answer in one walk, written down from the end of a buffer; a larger one sized
     * once, then written (pb_pack.h); what neither takes, protobuf-c. */
    enum { SMALL_ANSWER = 2048 };
    struct cg_pb_sizes sizes;
    size_t n;
    uint8_t *buf = cg_arena_alloc(call->arena, SMALL_ANSWER);
    if (buf != NULL && (buf = cg_pb_write_back(msg, buf, SMALL_ANSWER, &n)) != NULL) {
        if (n > call->max_message_bytes)
            return too_large(call, n);
        *out = buf;
        *out_len = n;
        return CG_OK;
    }
    if (cg_pb_size(msg, &sizes, &n)) {
        if (n > call->max_message_bytes)
            return too_large(call, n);
        if ((buf = cg_arena_alloc(call->arena, n)) != NULL && cg_pb_write(msg, &sizes, buf) != n)
            buf = NULL; /* cannot happen (the tests compare both packers): protobuf-c then */
    }
    if (buf == NULL) {
        if ((n = protobuf_c_message_get_packed_size(msg)) > call->max_message_bytes)
            return too_large(call, n);
        if ((buf = cg_arena_alloc(call->arena, n)) == NULL)
            return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "out of memory for the response");
        protobuf_c_message_pack(msg, buf);
    }
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

/* PERMISSION_DENIED naming the role, the method and who may call it. */
static cg_status role_denied(struct cg_rpc_call *call, const struct cg_rpc_method *m,
                             cg_key_role role)
{
    char allowed[128];
    cg_key_role_mask_text(m->allow, allowed, sizeof allowed);
    const char *method = strrchr(m->path, '/') + 1;
    cg_err_setr(&call->err, CG_PERMISSION_DENIED, CG_ERR_ROLE_NOT_ALLOWED,
                "a key with role '%s' may not call %s (allowed: %s)", cg_key_role_name(role),
                method, allowed);
    cg_err_meta(&call->err, "role", cg_key_role_name(role));
    cg_err_meta(&call->err, "method", m->path);
    cg_err_meta(&call->err, "allowed_roles", allowed);
    return CG_PERMISSION_DENIED;
}

/* cg_rpc_authenticate; *fate (CG_OP_DONE on entry) becomes CG_OP_NEEDS_STORE, with CG_OK
 * and call->principal cleared, when the key needs a lookup in the store on a thread without
 * one. */
static cg_status authenticate(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env, cg_op_fate *fate)
{
    memset(&call->principal, 0, sizeof call->principal);
    if (m->allow & CG_ALLOW_ANYONE)
        return CG_OK;
    bool tenant_keys = (m->allow & CG_ALLOW_TENANT_KEYS) != 0;
    if (!tenant_keys && env->svc.config->admin_key[0] == '\0') {
        cg_err_set(&call->err, CG_PERMISSION_DENIED,
                   "AdminService is disabled: the server has no admin_key configured");
        cg_err_meta(&call->err, "required_key", "admin");
        cg_err_meta(&call->err, "admin_key_configured", "false");
        return CG_PERMISSION_DENIED;
    }

    const char *header = call->authorization;
    if (header == NULL || header[0] == '\0')
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "missing 'authorization' metadata: expected 'Bearer <key>'");
    const char *token;
    size_t len;
    if (strlen(header) > AUTH_HEADER_MAX || !cg_apikey_bearer(header, &token, &len))
        return cg_err_set(&call->err, CG_UNAUTHENTICATED,
                          "malformed 'authorization' metadata: expected 'Bearer <key>'");

    if (is_admin_key(env->svc.config, token, len)) {
        if (!(m->allow & CG_ALLOW_SERVER_ADMIN)) {
            cg_err_set(&call->err, CG_PERMISSION_DENIED,
                       "this method needs a tenant API key; the admin key acts for no tenant");
            cg_err_meta(&call->err, "required_key", "tenant");
            return CG_PERMISSION_DENIED;
        }
        call->principal.authenticated = true;
        call->principal.is_admin = true;
        call->principal.role = CG_KEY_ROLE_NONE;
        return CG_OK;
    }
    if (!tenant_keys) {
        struct cg_apikey_parts parts;
        if (cg_apikey_parse(token, len, &parts)) {
            cg_err_set(&call->err, CG_PERMISSION_DENIED,
                       "this method needs the admin key, not a tenant API key");
            cg_err_meta(&call->err, "required_key", "admin");
            return CG_PERMISSION_DENIED;
        }
        return cg_err_set(&call->err, CG_UNAUTHENTICATED, "invalid admin key");
    }
    cg_status st = cg_keys_authenticate(&env->svc, token, len, &call->principal, &call->err, fate);
    if (st != CG_OK || *fate != CG_OP_DONE)
        return st;
    if (!cg_key_role_allowed(m->allow, call->principal.role)) {
        cg_key_role role = call->principal.role;
        memset(&call->principal, 0, sizeof call->principal);
        return role_denied(call, m, role);
    }
    return CG_OK;
}

cg_status cg_rpc_authenticate(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env)
{
    cg_op_fate fate = CG_OP_DONE;
    cg_status st = authenticate(m, call, env, &fate);
    if (st == CG_OK && fate != CG_OP_DONE)
        return cg_err_set(&call->err, CG_INTERNAL,
                          "%s: the API key must be looked up in the store, which this thread has "
                          "not",
                          m->path);
    return st;
}

void cg_rpc_audit(const struct cg_rpc_call *call, struct cg_audit *out)
{
    const struct cg_principal *p = &call->principal;
    out->actor_key_id = p->is_admin ? "" : p->key_id;
    out->actor_role = p->is_admin ? (int)CG_KEY_ROLE_NONE : (int)p->role;
    out->request_id = call->request_id;
}

bool cg_rpc_scope_reachable(const struct cg_principal *p, const char *session_id,
                            const char *task_id)
{
    return cg_scope_within(p->scope_session_id, p->scope_task_id, session_id, task_id);
}

cg_status cg_rpc_scope_check(struct cg_rpc_call *call, const char *session_id, const char *task_id)
{
    const struct cg_principal *p = &call->principal;
    if (cg_rpc_scope_reachable(p, session_id, task_id))
        return CG_OK;
    /* Another task of the bound session is a "missing" task; anything else (another
     * session, the tenant, the bound task's own session) a missing session. No word of the
     * binding, of other scopes or of whether this one exists. */
    bool other_task = strcmp(p->scope_session_id, session_id) == 0 && task_id[0] != '\0';
    return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND, "%s",
                       other_task ? "scope.task_id: no such task"
                                  : "scope.session_id: no such session");
}

cg_status cg_rpc_session_check(struct cg_rpc_call *call, const char *session_id)
{
    if (cg_rpc_scope_reachable(&call->principal, session_id, ""))
        return CG_OK;
    return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_SESSION_NOT_FOUND,
                       "session_id: no such session");
}

/* ---------------------------------------------------------------- invoke ---------- */

/* Identifiers a request names at its top level that a program needs next to an error about
 * them (ErrorInfo metadata), added unless the site already set them. */
static const char *const request_id_fields[] = {"reservation_id", "approval_id", "artifact_id",
                                                "session_id"};

/* Adds call->request's request_id_fields (non-empty strings only) to call->err's metadata. */
static void err_request_ids(struct cg_rpc_call *call)
{
    const ProtobufCMessage *req = call->request;
    if (req == NULL)
        return;
    for (size_t i = 0; i < sizeof request_id_fields / sizeof request_id_fields[0]; i++) {
        const char *name = request_id_fields[i];
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(req->descriptor, name);
        if (f == NULL || f->type != PROTOBUF_C_TYPE_STRING || f->label == PROTOBUF_C_LABEL_REPEATED)
            continue;
        /* A member of a oneof shares its storage with the others: only when it is the one set. */
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)((const char *)req + f->quantifier_offset) != f->id)
            continue;
        const char *value = *(const char *const *)((const char *)req + f->offset);
        if (value != NULL && value[0] != '\0' && cg_err_meta_get(&call->err, name) == NULL)
            cg_err_meta(&call->err, name, value);
    }
}

/* The handler, then the encoding of its answer: the part of cg_rpc_invoke after decoding. */
static cg_status handle(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                        const struct cg_rpc_env *env, uint8_t **out, size_t *out_len,
                        cg_op_fate *fate)
{
    ProtobufCMessage *response = NULL;
    cg_status st;
    if (m->try_handler != NULL) {
        st = m->try_handler(call, env, call->request, &response, fate);
        if (st == CG_OK && *fate != CG_OP_DONE)
            return st; /* handed on (the call may already be answered and gone) or needs the
                        * pool (nothing answered): either way nothing more here */
    } else {
        st = m->handler(call, env, call->request, &response);
    }
    if (st != CG_OK) {
        if (call->err.code != st)
            cg_err_set(&call->err, st, "%s", cg_status_str(st));
        err_request_ids(call);
        return st;
    }
    if (response == NULL)
        return cg_err_set(&call->err, CG_INTERNAL, "handler of %s gave no response", m->path);
    return cg_rpc_encode(call, response, out, out_len);
}

cg_status cg_rpc_invoke(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                        const struct cg_rpc_env *env, const uint8_t *req, size_t len, uint8_t **out,
                        size_t *out_len, cg_op_fate *fate)
{
    *out = NULL;
    *out_len = 0;
    *fate = CG_OP_DONE;
    /* Set once decoded: cg_rpc_invoke_again reads it to know how far a try came. */
    call->request = NULL;
    /* Authenticate first: a caller without a key learns nothing about the schema. */
    cg_status st = authenticate(m, call, env, fate);
    if (st != CG_OK || *fate != CG_OP_DONE)
        return st;
    ProtobufCMessage *request = NULL;
    st = cg_rpc_decode(call, m->request_desc, req, len, &request);
    if (st != CG_OK)
        return st;
    call->request = request;
    return handle(m, call, env, out, out_len, fate);
}

cg_status cg_rpc_invoke_again(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                              const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                              uint8_t **out, size_t *out_len, cg_op_fate *fate)
{
    if (call->request == NULL || !call->principal.authenticated)
        return cg_rpc_invoke(m, call, env, req, len, out, out_len, fate);
    *out = NULL;
    *out_len = 0;
    *fate = CG_OP_DONE;
    return handle(m, call, env, out, out_len, fate);
}

void cg_rpc_complete(struct cg_rpc_call *call, cg_status st, const ProtobufCMessage *response)
{
    uint8_t *out = NULL;
    size_t out_len = 0;
    if (st == CG_OK && response == NULL)
        st = cg_err_set(&call->err, CG_INTERNAL, "a deferred handler gave no response");
    if (st == CG_OK)
        st = cg_rpc_encode(call, response, &out, &out_len);
    else if (call->err.code != st)
        cg_err_set(&call->err, st, "%s", cg_status_str(st));
    if (st != CG_OK) {
        err_request_ids(call);
        out = NULL;
        out_len = 0;
    }
    call->resume(call, st, out, out_len);
}

cg_status cg_rpc_stream_open(const struct cg_rpc_method *m, struct cg_rpc_call *call,
                             const struct cg_rpc_env *env, const uint8_t *req, size_t len,
                             ProtobufCMessage **request, struct cg_rpc_stream *stream)
{
    cg_status st = cg_rpc_authenticate(m, call, env);
    if (st != CG_OK)
        return st;
    call->request = NULL;
    st = cg_rpc_decode(call, m->request_desc, req, len, request);
    if (st != CG_OK)
        return st;
    call->request = *request;
    if (m->open != NULL) {
        st = m->open(call, env, *request, stream);
        if (st != CG_OK)
            err_request_ids(call);
    }
    return st;
}

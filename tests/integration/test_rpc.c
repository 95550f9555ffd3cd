/* test_rpc.c - the rpc layer without a network: decoding and string checks on nested
 * fields, authentication rules, the method table generated from the protos' rules, and
 * where a try_inline call that needs the pool resumes there.
 * Needs no database. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/config.h"
#include "base/crypto.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "ctxguard/v1/context.pb-c.h"
#include "core/apikey.h"
#include "rpc/rpc.h"
#include "service/cache.h"

#define ADMIN_KEY "unit-admin-key-0123456789"

static struct cg_config cfg;
static struct cg_arena *arena;
static struct cg_rpc_call call;

static void setup(void)
{
    cr_assert_eq(cg_config_init(&cfg), CG_OK);
    struct cg_err err;
    cr_assert_eq(cg_config_set(&cfg, "admin_key", ADMIN_KEY, "test", &err), CG_OK);
    arena = cg_arena_new(4096, 1 << 24);
    memset(&call, 0, sizeof call);
    call.arena = arena;
    call.max_message_bytes = 1 << 20;
}

static void teardown(void)
{
    cg_arena_free(arena);
    cg_config_cleanup(&cfg);
}

TestSuite(rpc, .init = setup, .fini = teardown, .timeout = 10);

/* A MessageList of two messages whose second message's second part has `text`. */
static size_t pack_messages(const char *text, uint8_t *out)
{
    Ctxguard__V1__MessagePart p0 = CTXGUARD__V1__MESSAGE_PART__INIT, p1 = p0, p2 = p0;
    p0.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TEXT;
    p0.text = "hello";
    p1 = p0;
    p2.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TEXT;
    p2.text = (char *)text;
    Ctxguard__V1__MessagePart *first[] = {&p0}, *second[] = {&p1, &p2};
    Ctxguard__V1__Message m0 = CTXGUARD__V1__MESSAGE__INIT, m1 = CTXGUARD__V1__MESSAGE__INIT;
    m0.n_parts = 1;
    m0.parts = first;
    m1.n_parts = 2;
    m1.parts = second;
    Ctxguard__V1__Message *msgs[] = {&m0, &m1};
    Ctxguard__V1__MessageList list = CTXGUARD__V1__MESSAGE_LIST__INIT;
    list.n_messages = 2;
    list.messages = msgs;
    return protobuf_c_message_pack(&list.base, out);
}

Test(rpc, nested_strings_decode_when_valid)
{
    uint8_t buf[256];
    size_t n = pack_messages("gr\xc3\xbc\xc3\x9f"
                             "e",
                             buf);
    ProtobufCMessage *out = NULL;
    cr_assert_eq(cg_rpc_decode(&call, &ctxguard__v1__message_list__descriptor, buf, n, &out), CG_OK,
                 "%s", call.err.msg);
    Ctxguard__V1__MessageList *list = (Ctxguard__V1__MessageList *)out;
    cr_assert_str_eq(list->messages[1]->parts[1]->text, "gr\xc3\xbc\xc3\x9f"
                                                        "e");
}

Test(rpc, invalid_utf8_is_named_by_its_path)
{
    uint8_t buf[256];
    size_t n = pack_messages("ok\xff", buf);
    ProtobufCMessage *out = NULL;
    cr_assert_eq(cg_rpc_decode(&call, &ctxguard__v1__message_list__descriptor, buf, n, &out),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(call.err.msg, "'messages[1].parts[1].text'") != NULL, "%s", call.err.msg);
    cr_assert(strstr(call.err.msg, "byte 2") != NULL, "%s", call.err.msg);
}

Test(rpc, embedded_nul_is_refused_not_truncated)
{
    uint8_t buf[256];
    size_t n = pack_messages("abcXYZ", buf);
    uint8_t *mark = memmem(buf, n, "XYZ", 3);
    cr_assert_not_null(mark);
    mark[0] = '\0'; /* "abc\0YZ" on the wire */
    ProtobufCMessage *out = NULL;
    cr_assert_eq(cg_rpc_decode(&call, &ctxguard__v1__message_list__descriptor, buf, n, &out),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(call.err.msg, "NUL") != NULL, "%s", call.err.msg);
    cr_assert(strstr(call.err.msg, "messages[1].parts[1].text") != NULL, "%s", call.err.msg);
}

Test(rpc, truncated_bytes_name_the_message_type)
{
    const uint8_t bad[] = {0x0a, 0x10, 0x01};
    ProtobufCMessage *out = NULL;
    cr_assert_eq(
        cg_rpc_decode(&call, &ctxguard__v1__message_list__descriptor, bad, sizeof bad, &out),
        CG_INVALID_ARGUMENT);
    cr_assert(strstr(call.err.msg, "ctxguard.v1.MessageList") != NULL, "%s", call.err.msg);
}

Test(rpc, unknown_fields_are_skipped_not_checked)
{
    /* field 15, length-delimited, with bytes that are not UTF-8: not ours to judge. */
    const uint8_t unknown[] = {0x7a, 0x02, 0xff, 0xfe};
    ProtobufCMessage *out = NULL;
    cr_assert_eq(cg_rpc_decode(&call, &ctxguard__v1__message_list__descriptor, unknown,
                               sizeof unknown, &out),
                 CG_OK, "%s", call.err.msg);
}

static cg_status auth(const char *path, const char *header)
{
    struct cg_rpc_env env = {.svc = {.config = &cfg}};
    call.authorization = header;
    cg_err_clear(&call.err);
    return cg_rpc_authenticate(cg_rpc_find(path), &call, &env);
}

#define PING "/ctxguard.v1.AdminService/Ping"
#define WHOAMI "/ctxguard.v1.AdminService/WhoAmI"
#define SETBUDGET "/ctxguard.v1.BudgetService/SetBudget"
#define TENANT_KEY                                                                                 \
    "cgk_0b9e6f2a1c3d4e5f8a9b0c1d2e3f4a5b_00112233aabbccdd_"                                       \
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_x"

Test(rpc, authentication_rules)
{
    cr_assert_eq(auth(PING, "Bearer " ADMIN_KEY), CG_OK);
    cr_assert(call.principal.is_admin);
    cr_assert_eq(auth(WHOAMI, "Bearer " ADMIN_KEY), CG_OK, "WhoAmI takes the admin key");
    cr_assert_eq(auth(PING, NULL), CG_UNAUTHENTICATED);
    cr_assert(strstr(call.err.msg, "missing 'authorization'") != NULL, "%s", call.err.msg);
    cr_assert_eq(auth(PING, "Basic abc"), CG_UNAUTHENTICATED);
    cr_assert(strstr(call.err.msg, "malformed") != NULL, "%s", call.err.msg);
    cr_assert_eq(auth(PING, "Bearer " ADMIN_KEY "x"), CG_UNAUTHENTICATED, "a longer key");
    cr_assert_eq(auth(PING, "Bearer " TENANT_KEY), CG_PERMISSION_DENIED,
                 "a tenant key on an admin method");
    cr_assert_eq(auth(SETBUDGET, "Bearer " ADMIN_KEY), CG_PERMISSION_DENIED,
                 "the admin key on a tenant method");
    cr_assert_eq(auth(SETBUDGET, "Bearer not-a-key"), CG_UNAUTHENTICATED);
    cr_assert_eq(auth("/grpc.health.v1.Health/Check", NULL), CG_OK, "health needs no key");

    struct cg_err err;
    cr_assert_eq(cg_config_set(&cfg, "admin_key", "", "test", &err), CG_OK);
    cr_assert_eq(auth(PING, "Bearer " ADMIN_KEY), CG_PERMISSION_DENIED);
    cr_assert(strstr(call.err.msg, "admin_key") != NULL, "%s", call.err.msg);
}

Test(rpc, every_method_is_in_the_table_once_with_descriptors)
{
    size_t n;
    const struct cg_rpc_method *m = cg_rpc_methods(&n);
    cr_assert_geq(n, 4 + 8 + 14 + 8, "health, reflection, admin, budget, context");
    for (size_t i = 0; i < n; i++) {
        cr_assert_not_null(m[i].request_desc, "%s", m[i].path);
        cr_assert_not_null(m[i].response_desc, "%s", m[i].path);
        cr_assert_eq(cg_rpc_find(m[i].path), &m[i], "%s twice", m[i].path);
        cr_assert(strncmp(m[i].path + 1, m[i].service, strlen(m[i].service)) == 0, "%s", m[i].path);
        bool implemented = m[i].handler != NULL || m[i].try_handler != NULL || m[i].poll != NULL;
        cr_assert(implemented, "%s: no handler", m[i].path);
        /* A method that authenticates tenants must run where a store is. */
        if (m[i].allow & CG_ALLOW_TENANT_KEYS)
            cr_assert(m[i].blocking, "%s needs the pool", m[i].path);
    }
}

/* ------------------------------------------------------------------ the role table --- */

static const ProtobufCServiceDescriptor *const ctxguard_services[] = {
    &ctxguard__v1__admin_service__descriptor,
    &ctxguard__v1__budget_service__descriptor,
    &ctxguard__v1__context_service__descriptor,
};

static unsigned allow_of(const char *service, const char *method)
{
    char path[160];
    snprintf(path, sizeof path, "/%s/%s", service, method);
    const struct cg_rpc_method *m = cg_rpc_find(path);
    cr_assert_not_null(m, "%s is in the proto but has no rule in the method table", path);
    return m->allow;
}

/* Every RPC the protos declare has a rule, and every rule of the table belongs to an RPC the
 * protos declare: a new RPC without a rule fails here. */
Test(rpc, the_role_table_covers_exactly_the_protos_methods)
{
    size_t declared = 0;
    for (size_t s = 0; s < sizeof ctxguard_services / sizeof ctxguard_services[0]; s++) {
        const ProtobufCServiceDescriptor *d = ctxguard_services[s];
        for (unsigned i = 0; i < d->n_methods; i++) {
            unsigned allow = allow_of(d->name, d->methods[i].name);
            cr_assert_neq(allow, 0u, "%s/%s allows nobody", d->name, d->methods[i].name);
            cr_assert_eq(allow & CG_ALLOW_ANYONE, 0u, "%s/%s needs no key", d->name,
                         d->methods[i].name);
            declared++;
        }
    }
    size_t n, ours = 0;
    const struct cg_rpc_method *m = cg_rpc_methods(&n);
    for (size_t i = 0; i < n; i++) {
        if (strncmp(m[i].service, "ctxguard.v1.", 12) != 0) {
            cr_assert_eq(m[i].allow, CG_ALLOW_ANYONE, "%s: health and reflection are open",
                         m[i].path);
            continue;
        }
        ours++;
        bool found = false;
        for (size_t s = 0; s < sizeof ctxguard_services / sizeof ctxguard_services[0]; s++) {
            const ProtobufCServiceDescriptor *d = ctxguard_services[s];
            if (strcmp(d->name, m[i].service) != 0)
                continue;
            for (unsigned j = 0; j < d->n_methods; j++)
                found |= strcmp(strrchr(m[i].path, '/') + 1, d->methods[j].name) == 0;
        }
        cr_assert(found, "%s has a rule but no RPC in the protos", m[i].path);
    }
    cr_assert_eq(ours, declared);
}

/* What the roles mean (README "Roles and keys"), checked over the whole table. */
Test(rpc, roles_hold_their_promises_over_the_whole_table)
{
    /* The RPCs that change budgets, approvals, keys or settings. */
    static const char *const privileged[] = {
        "BudgetService/SetBudget",       "BudgetService/CloseScope",
        "BudgetService/ResolveApproval", "AdminService/CreateApiKey",
        "AdminService/RevokeApiKey",     "AdminService/UpdateTenantSettings",
        "AdminService/CreateTenant",
        "BudgetService/CreateNotificationChannel",
        "BudgetService/DeleteNotificationChannel",
        "BudgetService/RedriveNotificationDeliveries",
    };
    /* What a viewer may call: reads only. */
    static const char *const reads[] = {
        "BudgetService/GetBudget",
        "BudgetService/GetUsage",
        "BudgetService/ListScopes",
        "BudgetService/GetUsageHistory",
        "BudgetService/WatchUsage",
        "BudgetService/GetApproval",
        "BudgetService/ListApprovals",
        "ContextService/GetCompressionStats",
        "AdminService/WhoAmI",
    };
    size_t n;
    const struct cg_rpc_method *m = cg_rpc_methods(&n);
    for (size_t i = 0; i < n; i++) {
        if (m[i].allow & CG_ALLOW_ANYONE)
            continue;
        const char *name = strchr(m[i].path + 1, '.') ? strrchr(m[i].service, '.') + 1 : "";
        char short_path[96];
        snprintf(short_path, sizeof short_path, "%s/%s", name, strrchr(m[i].path, '/') + 1);
        bool is_privileged = false, is_read = false;
        for (size_t k = 0; k < sizeof privileged / sizeof privileged[0]; k++)
            is_privileged |= strcmp(short_path, privileged[k]) == 0;
        for (size_t k = 0; k < sizeof reads / sizeof reads[0]; k++)
            is_read |= strcmp(short_path, reads[k]) == 0;
        unsigned a = m[i].allow;
        if (is_privileged) {
            cr_assert_eq(a & CG_ALLOW_AGENT, 0u, "an agent key may call %s", m[i].path);
            cr_assert_eq(a & CG_ALLOW_VIEWER, 0u, "a viewer key may call %s", m[i].path);
        }
        cr_assert(!(a & CG_ALLOW_VIEWER) || is_read, "a viewer may call %s, not a read", m[i].path);
        /* A tenant admin may do whatever another tenant role may (what every key could do
         * before roles: migration 0016 makes existing keys admins). */
        if (a & CG_ALLOW_TENANT_KEYS)
            cr_assert(a & CG_ALLOW_TENANT_ADMIN, "%s: a tenant role may but not admin", m[i].path);
        /* Operators reach what viewers do. */
        if (a & CG_ALLOW_VIEWER)
            cr_assert(a & CG_ALLOW_OPERATOR, "%s: viewer may but not operator", m[i].path);
    }
    /* Spending is for agents (and tenant admins), never for viewers or operators. */
    static const char *const spend[] = {"CheckBudget", "Reserve", "Commit", "Release",
                                        "RecordUsage"};
    for (size_t k = 0; k < sizeof spend / sizeof spend[0]; k++) {
        unsigned a = allow_of("ctxguard.v1.BudgetService", spend[k]);
        cr_assert(a & CG_ALLOW_AGENT, "%s", spend[k]);
        cr_assert_eq(a & (CG_ALLOW_VIEWER | CG_ALLOW_OPERATOR | CG_ALLOW_SERVER_ADMIN), 0u, "%s",
                     spend[k]);
    }
}

Test(rpc, role_names_and_masks)
{
    cg_key_role r;
    cr_assert(cg_key_role_parse("operator", &r) && r == CG_KEY_ROLE_OPERATOR);
    cr_assert(!cg_key_role_parse("Operator", &r));
    cr_assert(!cg_key_role_parse("server_admin", &r), "not a tenant role");
    cr_assert_str_eq(cg_key_role_name(CG_KEY_ROLE_VIEWER), "viewer");
    cr_assert(cg_key_role_allowed(CG_ALLOW_OPERATOR, CG_KEY_ROLE_OPERATOR));
    cr_assert(!cg_key_role_allowed(CG_ALLOW_OPERATOR, CG_KEY_ROLE_AGENT));
    cr_assert(!cg_key_role_allowed(CG_ALLOW_TENANT_KEYS, CG_KEY_ROLE_NONE));
    cr_assert(!cg_key_role_allowed(CG_ALLOW_TENANT_KEYS, (cg_key_role)9));
    char text[128];
    cg_key_role_mask_text(CG_ALLOW_OPERATOR | CG_ALLOW_TENANT_ADMIN | CG_ALLOW_SERVER_ADMIN, text,
                          sizeof text);
    cr_assert_str_eq(text, "operator, admin, the server's admin key");
    cg_key_role_mask_text(CG_ALLOW_TENANT_KEYS, text, 12);
    cr_assert_eq(strlen(text), 11, "cut: %s", text);
    /* The subtree of a scope-bound key. */
    cr_assert(cg_scope_within("", "", "", ""), "unbound reaches the tenant level");
    cr_assert(cg_scope_within("s1", "", "s1", "t9"));
    cr_assert(!cg_scope_within("s1", "", "s2", ""));
    cr_assert(!cg_scope_within("s1", "", "", ""), "bound keys never reach the tenant level");
    cr_assert(cg_scope_within("s1", "t1", "s1", "t1"));
    cr_assert(!cg_scope_within("s1", "t1", "s1", ""), "a task key does not reach its session");
    cr_assert(!cg_scope_within("s1", "t1", "s1", "t2"));
}

/* ---- a try_inline call that needs the pool resumes there where it stopped ---- */

#define TENANT "0b9e6f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
#define KEYID "00112233aabbccdd"
#define SECRET "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123-_x"
#define COUNT_TOKENS "/ctxguard.v1.ContextService/CountTokens"
#define BIG_TEXT (70 * 1024) /* above what a completion-queue thread counts */

struct resume_fixture {
    struct cg_cache *cache;
    struct cg_store *store; /* connects lazily: never used by what these tests run */
    char header[CG_APIKEY_LEN + 16];
    uint8_t *req;
    size_t len;
};

/* An agent key (in the process's key cache when cached), and an exact count of a text too
 * large to count on a completion-queue thread: the try needs the pool at the handler. */
static void resume_fixture(struct resume_fixture *f, bool cached)
{
    struct cg_cache_opts copts = {.key_ttl_ms = 60000};
    struct cg_store_opts sopts = {.pg_dsn = "postgresql://nowhere.invalid/none"};
    f->cache = cg_cache_new(&copts);
    f->store = cg_store_new(&sopts);
    cr_assert(f->cache != NULL && f->store != NULL);
    char token[CG_APIKEY_LEN + 1];
    cr_assert(cg_apikey_format(TENANT, KEYID, SECRET, token, sizeof token));
    snprintf(f->header, sizeof f->header, "Bearer %s", token);
    if (cached) {
        struct cg_key_auth rec = {.role = CG_KEY_ROLE_AGENT};
        cg_sha256(token, strlen(token), rec.secret_hash);
        cg_cache_key_put(f->cache, TENANT, KEYID, &rec, cg_cache_ticket(f->cache), cg_mono_ms());
    }
    char *text = cg_arena_alloc(arena, BIG_TEXT + 1);
    memset(text, 'a', BIG_TEXT);
    text[BIG_TEXT] = '\0';
    Ctxguard__V1__CountTokensRequest req = CTXGUARD__V1__COUNT_TOKENS_REQUEST__INIT;
    req.text = text;
    req.encoding = CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_CL100K_BASE;
    f->len = protobuf_c_message_get_packed_size(&req.base);
    f->req = cg_arena_alloc(arena, f->len);
    protobuf_c_message_pack(&req.base, f->req);
}

static void resume_fixture_free(struct resume_fixture *f)
{
    cg_store_free(f->store);
    cg_cache_free(f->cache);
}

/* The try on a completion-queue thread (no store): it needs the pool. */
static const struct cg_rpc_method *try_on_queue(struct resume_fixture *f)
{
    const struct cg_rpc_method *m = cg_rpc_find(COUNT_TOKENS);
    cr_assert(m != NULL && m->try_inline);
    struct cg_rpc_env queue = {.svc = {.config = &cfg, .cache = f->cache}};
    call.authorization = f->header;
    uint8_t *out;
    size_t out_len;
    cg_op_fate fate;
    cr_assert_eq(cg_rpc_invoke(m, &call, &queue, f->req, f->len, &out, &out_len, &fate), CG_OK,
                 "%s", call.err.msg);
    cr_assert_eq(fate, CG_OP_NEEDS_STORE);
    return m;
}

/* The pool's run with a header that would now be refused (so a second authentication shows). */
static cg_status again_on_pool(struct resume_fixture *f, const struct cg_rpc_method *m)
{
    call.authorization = "Bearer nope";
    cg_err_clear(&call.err);
    struct cg_rpc_env pool = {.svc = {.config = &cfg, .cache = f->cache, .store = f->store}};
    uint8_t *out;
    size_t out_len;
    cg_op_fate fate;
    cg_status st = cg_rpc_invoke_again(m, &call, &pool, f->req, f->len, &out, &out_len, &fate);
    cr_assert_eq(fate, CG_OP_DONE);
    return st;
}

Test(rpc, a_try_that_needs_the_pool_at_the_handler_resumes_at_the_handler)
{
    struct resume_fixture f;
    resume_fixture(&f, true);
    const struct cg_rpc_method *m = try_on_queue(&f);
    cr_assert(call.principal.authenticated);
    cr_assert_not_null(call.request, "decoded in the call's arena");
    /* The key is not looked up again; the handler answers (no tokenizer here: UNAVAILABLE). */
    cg_status st = again_on_pool(&f, m);
    cr_assert_eq(st, CG_UNAVAILABLE, "%s: %s", cg_status_name(st), call.err.msg);
    cr_assert_eq(cg_err_reason(&call.err, st), CG_ERR_TOKENIZER_NOT_LOADED, "%s", call.err.msg);
    resume_fixture_free(&f);
}

Test(rpc, a_try_that_needs_the_pool_for_the_key_runs_the_whole_path_there)
{
    struct resume_fixture f;
    resume_fixture(&f, false);
    const struct cg_rpc_method *m = try_on_queue(&f);
    cr_assert_not(call.principal.authenticated);
    cr_assert_null(call.request, "stopped before decoding");
    cg_status st = again_on_pool(&f, m);
    cr_assert_eq(st, CG_UNAUTHENTICATED, "authenticated on the pool: %s", call.err.msg);
    resume_fixture_free(&f);
}

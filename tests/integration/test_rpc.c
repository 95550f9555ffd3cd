/* test_rpc.c - the rpc layer without a network: decoding and string checks on nested
 * fields, authentication rules, and the planned-method answer. Needs no database. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/arena.h"
#include "base/config.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc.h"

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
    struct cg_rpc_env env = {.config = &cfg};
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
        bool implemented = m[i].handler != NULL || m[i].poll != NULL;
        cr_assert(implemented || m[i].pending != NULL, "%s: unimplemented without a plan",
                  m[i].path);
        /* A method that authenticates tenants must run where a store is. */
        if (m[i].auth == CG_AUTH_TENANT || m[i].auth == CG_AUTH_ANY)
            cr_assert(m[i].blocking, "%s needs the pool", m[i].path);
    }
}

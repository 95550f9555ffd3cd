/* test_reflection.c - the reflection service answering from the real embedded descriptor set.
 *
 * Lives in integration/ only because that kind links cg_rpc; it needs no database. Each
 * request goes through the wire format both ways (packed, decoded, answered, the answer
 * packed and decoded again), so the tests see what a client such as grpcurl would see.
 * Only admin.proto and health.proto are named: other ctxguard protos change as they are
 * written. A small synthetic set covers imports, nesting and extensions, which the real
 * set does not have.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "rpc/reflection.h"

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"

#define ADMIN_PROTO "ctxguard/v1/admin.proto"
#define HEALTH_PROTO "grpc/health/v1/health.proto"

/* The generated oneof case names are too long to read; these spell them by their tail. */
#define REQUEST_CASE(name) GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##name
#define RESPONSE_CASE(name)                                                                        \
    GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##name

static const char *const SERVICES[] = {"ctxguard.v1.AdminService", "grpc.health.v1.Health"};

typedef Grpc__Reflection__V1__ServerReflectionRequest request_t;
typedef Grpc__Reflection__V1__ServerReflectionResponse response_t;

/* One reflection object and one call, as the transport would set them up. */
struct session {
    struct cg_reflection *reflection;
    struct cg_arena *arena;
    ProtobufCAllocator allocator;
    struct cg_rpc_call call;
    struct cg_rpc_env env;
};

static void *arena_alloc(void *arena, size_t size)
{
    return cg_arena_alloc(arena, size);
}

static void arena_free(void *arena, void *pointer)
{
    (void)arena;
    (void)pointer;
}

static void session_init_with(struct session *s, struct cg_reflection *reflection)
{
    memset(s, 0, sizeof *s);
    s->reflection = reflection;
    s->arena = cg_arena_new(64 * 1024, 64u * 1024 * 1024);
    cr_assert_not_null(s->arena);
    s->allocator =
        (ProtobufCAllocator){.alloc = arena_alloc, .free = arena_free, .allocator_data = s->arena};
    s->call.arena = s->arena;
    s->call.request_id = "test";
    s->call.max_message_bytes = 4u * 1024 * 1024;
    s->env.reflection = reflection;
}

static void session_init(struct session *s)
{
    struct cg_err err = {0};
    struct cg_reflection *r =
        cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len, SERVICES, 2, &err);
    cr_assert_not_null(r, "cg_reflection_new on the embedded set: %s", err.msg);
    session_init_with(s, r);
}

static void session_cleanup(struct session *s)
{
    cg_reflection_free(s->reflection);
    cg_arena_free(s->arena);
}

/* Sends req through the wire format to the handler and returns its answer as a client
 * decodes it (in the session's arena). Fails the test unless the handler returns CG_OK. */
static response_t *ask(struct session *s, const request_t *req)
{
    size_t len = protobuf_c_message_get_packed_size(&req->base);
    uint8_t *bytes = cg_arena_alloc(s->arena, len + 1);
    cr_assert_not_null(bytes);
    protobuf_c_message_pack(&req->base, bytes);
    ProtobufCMessage *decoded = protobuf_c_message_unpack(
        &grpc__reflection__v1__server_reflection_request__descriptor, &s->allocator, len, bytes);
    cr_assert_not_null(decoded);

    ProtobufCMessage *answer = NULL;
    cg_status rc = cg_rpc_reflection_info(&s->call, &s->env, decoded, &answer);
    cr_assert_eq(rc, CG_OK, "handler: %s: %s", cg_status_name(rc), s->call.err.msg);
    cr_assert_not_null(answer);
    cr_assert_eq(answer->descriptor, &grpc__reflection__v1__server_reflection_response__descriptor);

    len = protobuf_c_message_get_packed_size(answer);
    bytes = cg_arena_alloc(s->arena, len + 1);
    cr_assert_not_null(bytes);
    protobuf_c_message_pack(answer, bytes);
    response_t *resp =
        grpc__reflection__v1__server_reflection_response__unpack(&s->allocator, len, bytes);
    cr_assert_not_null(resp, "the answer does not decode");
    return resp;
}

static response_t *ask_symbol(struct session *s, const char *symbol)
{
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.host = "localhost:50051";
    req.message_request_case = REQUEST_CASE(FILE_CONTAINING_SYMBOL);
    req.file_containing_symbol = (char *)symbol;
    return ask(s, &req);
}

static response_t *ask_file(struct session *s, const char *file)
{
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.message_request_case = REQUEST_CASE(FILE_BY_FILENAME);
    req.file_by_filename = (char *)file;
    return ask(s, &req);
}

/* The files of a file_descriptor_response, each decoded, in order. */
struct files {
    size_t n;
    Google__Protobuf__FileDescriptorProto *file[64];
};

static void decode_files(struct session *s, const response_t *resp, struct files *out)
{
    cr_assert_eq(resp->message_response_case, RESPONSE_CASE(FILE_DESCRIPTOR_RESPONSE),
                 "expected a file_descriptor_response, got case %d%s%s",
                 (int)resp->message_response_case,
                 resp->message_response_case == RESPONSE_CASE(ERROR_RESPONSE) ? ": " : "",
                 resp->message_response_case == RESPONSE_CASE(ERROR_RESPONSE)
                     ? resp->error_response->error_message
                     : "");
    const Grpc__Reflection__V1__FileDescriptorResponse *fr = resp->file_descriptor_response;
    cr_assert_gt(fr->n_file_descriptor_proto, 0);
    cr_assert_leq(fr->n_file_descriptor_proto, 64);
    out->n = fr->n_file_descriptor_proto;
    for (size_t i = 0; i < out->n; i++) {
        const ProtobufCBinaryData *b = &fr->file_descriptor_proto[i];
        out->file[i] =
            google__protobuf__file_descriptor_proto__unpack(&s->allocator, b->len, b->data);
        cr_assert_not_null(out->file[i], "file_descriptor_proto[%zu] does not parse", i);
        cr_assert_not_null(out->file[i]->name);
    }
}

static long index_of(const struct files *f, const char *name)
{
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->file[i]->name, name) == 0)
            return (long)i;
    return -1;
}

/* The answer starts with `first`, names each file once, and holds every import of every
 * file it holds (so a client can build a descriptor pool from it alone). */
static void assert_closed_answer(struct session *s, const response_t *resp, const char *first,
                                 struct files *out)
{
    decode_files(s, resp, out);
    cr_assert_str_eq(out->file[0]->name, first);
    for (size_t i = 0; i < out->n; i++) {
        cr_assert_eq(index_of(out, out->file[i]->name), (long)i, "%s is sent twice",
                     out->file[i]->name);
        for (size_t d = 0; d < out->file[i]->n_dependency; d++)
            cr_assert_geq(index_of(out, out->file[i]->dependency[d]), 0,
                          "%s imports %s, which is missing from the answer", out->file[i]->name,
                          out->file[i]->dependency[d]);
    }
}

static void assert_not_found(const response_t *resp, const char *needle)
{
    cr_assert_eq(resp->message_response_case, RESPONSE_CASE(ERROR_RESPONSE));
    cr_assert_eq(resp->error_response->error_code, 5);
    cr_assert_not_null(strstr(resp->error_response->error_message, "not found"), "message: %s",
                       resp->error_response->error_message);
    cr_assert_not_null(strstr(resp->error_response->error_message, needle), "message: %s",
                       resp->error_response->error_message);
}

static bool has_service(const Grpc__Reflection__V1__ListServiceResponse *list, const char *name,
                        size_t *count)
{
    *count = 0;
    for (size_t i = 0; i < list->n_service; i++)
        if (strcmp(list->service[i]->name, name) == 0)
            (*count)++;
    return *count > 0;
}

Test(reflection, lists_services, .timeout = 10)
{
    struct session s;
    session_init(&s);
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.message_request_case = REQUEST_CASE(LIST_SERVICES);
    req.list_services = "*";
    response_t *resp = ask(&s, &req);
    cr_assert_eq(resp->message_response_case, RESPONSE_CASE(LIST_SERVICES_RESPONSE));
    const Grpc__Reflection__V1__ListServiceResponse *list = resp->list_services_response;
    const char *expected[] = {"ctxguard.v1.AdminService", "grpc.health.v1.Health",
                              "grpc.reflection.v1.ServerReflection",
                              "grpc.reflection.v1alpha.ServerReflection"};
    for (size_t i = 0; i < 4; i++) {
        size_t count;
        cr_expect(has_service(list, expected[i], &count), "%s is not listed", expected[i]);
        cr_expect_eq(count, 1, "%s is listed %zu times", expected[i], count);
    }
    cr_expect_eq(list->n_service, 4);
    session_cleanup(&s);
}

Test(reflection, reflection_services_listed_once_when_given, .timeout = 10)
{
    const char *const services[] = {"grpc.reflection.v1.ServerReflection",
                                    "ctxguard.v1.AdminService", "ctxguard.v1.AdminService"};
    struct cg_err err = {0};
    struct cg_reflection *r =
        cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len, services, 3, &err);
    cr_assert_not_null(r, "%s", err.msg);
    struct session s;
    session_init_with(&s, r);
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.message_request_case = REQUEST_CASE(LIST_SERVICES);
    req.list_services = "";
    response_t *resp = ask(&s, &req);
    const Grpc__Reflection__V1__ListServiceResponse *list = resp->list_services_response;
    cr_assert_eq(list->n_service, 3);
    cr_expect_str_eq(list->service[0]->name, "grpc.reflection.v1.ServerReflection");
    cr_expect_str_eq(list->service[1]->name, "ctxguard.v1.AdminService");
    cr_expect_str_eq(list->service[2]->name, "grpc.reflection.v1alpha.ServerReflection");
    session_cleanup(&s);
}

Test(reflection, file_by_filename_returns_file_and_imports, .timeout = 10)
{
    struct session s;
    session_init(&s);
    struct files files;
    assert_closed_answer(&s, ask_file(&s, ADMIN_PROTO), ADMIN_PROTO, &files);
    cr_expect_str_eq(files.file[0]->package, "ctxguard.v1");
    bool has_admin_service = false;
    for (size_t i = 0; i < files.file[0]->n_service; i++)
        has_admin_service |= strcmp(files.file[0]->service[i]->name, "AdminService") == 0;
    cr_expect(has_admin_service, "admin.proto as served does not define AdminService");
    session_cleanup(&s);
}

Test(reflection, echoes_host_and_request, .timeout = 10)
{
    struct session s;
    session_init(&s);
    response_t *resp = ask_symbol(&s, "ctxguard.v1.AdminService");
    cr_expect_str_eq(resp->valid_host, "localhost:50051");
    cr_assert_not_null(resp->original_request);
    cr_expect_str_eq(resp->original_request->host, "localhost:50051");
    cr_assert_eq(resp->original_request->message_request_case,
                 REQUEST_CASE(FILE_CONTAINING_SYMBOL));
    cr_expect_str_eq(resp->original_request->file_containing_symbol, "ctxguard.v1.AdminService");
    session_cleanup(&s);
}

Test(reflection, symbol_service, .timeout = 10)
{
    struct session s;
    session_init(&s);
    struct files files;
    assert_closed_answer(&s, ask_symbol(&s, "ctxguard.v1.AdminService"), ADMIN_PROTO, &files);
    session_cleanup(&s);
}

Test(reflection, symbol_method, .timeout = 10)
{
    struct session s;
    session_init(&s);
    struct files files;
    assert_closed_answer(&s, ask_symbol(&s, "ctxguard.v1.AdminService.CreateTenant"), ADMIN_PROTO,
                         &files);
    session_cleanup(&s);
}

Test(reflection, symbol_message_with_or_without_leading_dot, .timeout = 10)
{
    struct session s;
    session_init(&s);
    struct files files;
    assert_closed_answer(&s, ask_symbol(&s, "ctxguard.v1.CreateTenantRequest"), ADMIN_PROTO,
                         &files);
    assert_closed_answer(&s, ask_symbol(&s, ".ctxguard.v1.Tenant"), ADMIN_PROTO, &files);
    session_cleanup(&s);
}

Test(reflection, symbol_health_service_and_nested_enum, .timeout = 10)
{
    struct session s;
    session_init(&s);
    struct files files;
    assert_closed_answer(&s, ask_symbol(&s, "grpc.health.v1.Health"), HEALTH_PROTO, &files);
    assert_closed_answer(&s, ask_symbol(&s, "grpc.health.v1.Health.Watch"), HEALTH_PROTO, &files);
    assert_closed_answer(&s, ask_symbol(&s, "grpc.health.v1.HealthCheckResponse.ServingStatus"),
                         HEALTH_PROTO, &files);
    session_cleanup(&s);
}

Test(reflection, unknown_symbol_and_file_are_not_found, .timeout = 10)
{
    struct session s;
    session_init(&s);
    assert_not_found(ask_symbol(&s, "ctxguard.v1.NoSuchThing"), "ctxguard.v1.NoSuchThing");
    assert_not_found(ask_symbol(&s, "ctxguard.v1"), "ctxguard.v1");
    assert_not_found(ask_symbol(&s, ""), "symbol");
    assert_not_found(ask_file(&s, "ctxguard/v1/nope.proto"), "ctxguard/v1/nope.proto");
    session_cleanup(&s);
}

Test(reflection, long_unknown_name_is_cut_in_the_message, .timeout = 10)
{
    struct session s;
    session_init(&s);
    char name[4001];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    response_t *resp = ask_symbol(&s, name);
    assert_not_found(resp, "xxx...");
    cr_expect_lt(strlen(resp->error_response->error_message), 400);
    session_cleanup(&s);
}

Test(reflection, extensions_of_a_real_message, .timeout = 10)
{
    struct session s;
    session_init(&s);
    Grpc__Reflection__V1__ExtensionRequest ext = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
    ext.containing_type = "ctxguard.v1.Tenant";
    ext.extension_number = 100;
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.message_request_case = REQUEST_CASE(FILE_CONTAINING_EXTENSION);
    req.file_containing_extension = &ext;
    assert_not_found(ask(&s, &req), "extension 100");

    request_t numbers = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    numbers.message_request_case = REQUEST_CASE(ALL_EXTENSION_NUMBERS_OF_TYPE);
    numbers.all_extension_numbers_of_type = ".ctxguard.v1.Tenant";
    response_t *resp = ask(&s, &numbers);
    cr_assert_eq(resp->message_response_case, RESPONSE_CASE(ALL_EXTENSION_NUMBERS_RESPONSE));
    cr_expect_str_eq(resp->all_extension_numbers_response->base_type_name, "ctxguard.v1.Tenant");
    cr_expect_eq(resp->all_extension_numbers_response->n_extension_number, 0);

    numbers.all_extension_numbers_of_type = "ctxguard.v1.NoSuchType";
    assert_not_found(ask(&s, &numbers), "ctxguard.v1.NoSuchType");
    /* A service is a symbol but not a message type. */
    numbers.all_extension_numbers_of_type = "ctxguard.v1.AdminService";
    assert_not_found(ask(&s, &numbers), "ctxguard.v1.AdminService");
    session_cleanup(&s);
}

Test(reflection, request_without_message_is_invalid_argument, .timeout = 10)
{
    struct session s;
    session_init(&s);
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    ProtobufCMessage *answer = (ProtobufCMessage *)&req; /* must be overwritten */
    cg_status rc = cg_rpc_reflection_info(&s.call, &s.env, &req.base, &answer);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT);
    cr_expect_null(answer);
    cr_expect_not_null(strstr(s.call.err.msg, "message_request"), "err: %s", s.call.err.msg);
    session_cleanup(&s);
}

/* ------------------------------------------------ a synthetic set with imports ----- */

/* c.proto: package t; message C { message Inner {} } (and extension range 100..199)
 * b.proto: import "c.proto"; message B {}
 * a.proto: import "b.proto"; import "c.proto"; extend t.C { int32 ext = 100; } */
static uint8_t *synthetic_set(size_t *len, bool omit_c, bool duplicate_b)
{
    Google__Protobuf__DescriptorProto inner = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
    inner.name = "Inner";
    Google__Protobuf__DescriptorProto *nested[] = {&inner};
    Google__Protobuf__DescriptorProto msg_c = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
    msg_c.name = "C";
    msg_c.n_nested_type = 1;
    msg_c.nested_type = nested;
    Google__Protobuf__DescriptorProto *c_types[] = {&msg_c};
    Google__Protobuf__FileDescriptorProto c = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
    c.name = "c.proto";
    c.package = "t";
    c.n_message_type = 1;
    c.message_type = c_types;

    Google__Protobuf__DescriptorProto msg_b = GOOGLE__PROTOBUF__DESCRIPTOR_PROTO__INIT;
    msg_b.name = duplicate_b ? "C" : "B";
    Google__Protobuf__DescriptorProto *b_types[] = {&msg_b};
    char *b_deps[] = {"c.proto"};
    Google__Protobuf__FileDescriptorProto b = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
    b.name = "b.proto";
    b.package = "t";
    b.n_dependency = 1;
    b.dependency = b_deps;
    b.n_message_type = 1;
    b.message_type = b_types;

    Google__Protobuf__FieldDescriptorProto ext = GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__INIT;
    ext.name = "ext";
    ext.has_number = 1;
    ext.number = 100;
    ext.extendee = ".t.C";
    Google__Protobuf__FieldDescriptorProto *a_ext[] = {&ext};
    char *a_deps[] = {"b.proto", "c.proto"};
    Google__Protobuf__FileDescriptorProto a = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_PROTO__INIT;
    a.name = "a.proto";
    a.package = "t";
    a.n_dependency = 2;
    a.dependency = a_deps;
    a.n_extension = 1;
    a.extension = a_ext;

    Google__Protobuf__FileDescriptorProto *files[] = {&c, &b, &a};
    Google__Protobuf__FileDescriptorSet set = GOOGLE__PROTOBUF__FILE_DESCRIPTOR_SET__INIT;
    set.n_file = omit_c ? 2 : 3;
    set.file = omit_c ? files + 1 : files;
    *len = google__protobuf__file_descriptor_set__get_packed_size(&set);
    uint8_t *bytes = malloc(*len);
    cr_assert_not_null(bytes);
    google__protobuf__file_descriptor_set__pack(&set, bytes);
    return bytes;
}

static struct cg_reflection *synthetic_reflection(void)
{
    size_t len;
    uint8_t *bytes = synthetic_set(&len, false, false);
    struct cg_err err = {0};
    struct cg_reflection *r = cg_reflection_new(bytes, len, NULL, 0, &err);
    free(bytes); /* the object keeps its own copy */
    cr_assert_not_null(r, "%s", err.msg);
    return r;
}

Test(reflection, transitive_imports_each_once, .timeout = 10)
{
    struct session s;
    session_init_with(&s, synthetic_reflection());
    struct files files;
    assert_closed_answer(&s, ask_file(&s, "a.proto"), "a.proto", &files);
    cr_expect_eq(files.n, 3);
    assert_closed_answer(&s, ask_file(&s, "b.proto"), "b.proto", &files);
    cr_expect_eq(files.n, 2);
    assert_closed_answer(&s, ask_file(&s, "c.proto"), "c.proto", &files);
    cr_expect_eq(files.n, 1);
    session_cleanup(&s);
}

Test(reflection, nested_message_and_extension_symbols, .timeout = 10)
{
    struct session s;
    session_init_with(&s, synthetic_reflection());
    struct files files;
    assert_closed_answer(&s, ask_symbol(&s, "t.C.Inner"), "c.proto", &files);
    assert_closed_answer(&s, ask_symbol(&s, "t.ext"), "a.proto", &files);
    cr_expect_eq(files.n, 3);
    assert_not_found(ask_symbol(&s, "t.Inner"), "t.Inner");

    Grpc__Reflection__V1__ExtensionRequest ext = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
    ext.containing_type = "t.C";
    ext.extension_number = 100;
    request_t req = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    req.message_request_case = REQUEST_CASE(FILE_CONTAINING_EXTENSION);
    req.file_containing_extension = &ext;
    assert_closed_answer(&s, ask(&s, &req), "a.proto", &files);
    ext.extension_number = 101;
    assert_not_found(ask(&s, &req), "extension 101");

    request_t numbers = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    numbers.message_request_case = REQUEST_CASE(ALL_EXTENSION_NUMBERS_OF_TYPE);
    numbers.all_extension_numbers_of_type = "t.C";
    response_t *resp = ask(&s, &numbers);
    cr_assert_eq(resp->all_extension_numbers_response->n_extension_number, 1);
    cr_expect_eq(resp->all_extension_numbers_response->extension_number[0], 100);
    session_cleanup(&s);
}

Test(reflection, missing_import_is_refused, .timeout = 10)
{
    size_t len;
    uint8_t *bytes = synthetic_set(&len, true, false);
    struct cg_err err = {0};
    struct cg_reflection *r = cg_reflection_new(bytes, len, NULL, 0, &err);
    free(bytes);
    cr_assert_null(r);
    cr_expect_neq(err.code, CG_OK);
    cr_expect_not_null(strstr(err.msg, "c.proto"), "err: %s", err.msg);
}

Test(reflection, symbol_defined_twice_is_refused, .timeout = 10)
{
    size_t len;
    uint8_t *bytes = synthetic_set(&len, false, true);
    struct cg_err err = {0};
    struct cg_reflection *r = cg_reflection_new(bytes, len, NULL, 0, &err);
    free(bytes);
    cr_assert_null(r);
    cr_expect_not_null(strstr(err.msg, "t.C"), "err: %s", err.msg);
}

/* ------------------------------------------------ malformed sets ------------------- */

static uint64_t next_random(uint64_t *state)
{
    /* xorshift64: deterministic, so a failure can be replayed */
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

Test(reflection, random_bytes_are_refused, .timeout = 10)
{
    for (uint64_t seed = 1; seed <= 200; seed++) {
        uint64_t state = seed * 0x9E3779B97F4A7C15ull;
        uint8_t bytes[512];
        size_t len = 16 + next_random(&state) % (sizeof bytes - 16);
        for (size_t i = 0; i < len; i++)
            bytes[i] = (uint8_t)next_random(&state);
        struct cg_err err = {0};
        struct cg_reflection *r = cg_reflection_new(bytes, len, SERVICES, 2, &err);
        cr_assert_null(r, "seed %llu: random bytes accepted", (unsigned long long)seed);
        cr_assert_neq(err.code, CG_OK, "seed %llu", (unsigned long long)seed);
        cr_assert_gt(strlen(err.msg), 0, "seed %llu", (unsigned long long)seed);
    }
}

Test(reflection, truncated_set_is_refused, .timeout = 10)
{
    struct cg_err err = {0};
    struct cg_reflection *r =
        cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len - 1, SERVICES, 2, &err);
    cr_assert_null(r);
    cr_expect_eq(err.code, CG_INVALID_ARGUMENT);
    cr_expect_not_null(strstr(err.msg, "descriptor set"), "err: %s", err.msg);
}

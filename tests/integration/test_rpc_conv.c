/* test_rpc_conv.c - Conversation messages to the core model and back (rpc/rpc_conv.h): every
 * check names the field as the client wrote it, JSON errors carry their JSON path, and what
 * goes out encodes and comes back in unchanged.
 *
 * Lives in integration/ only because that kind links cg_rpc; it needs no database.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "rpc/rpc_conv.h"

static struct cg_arena *arena;
static struct cg_rpc_call call;

static void setup(void)
{
    arena = cg_arena_new(4096, 64u << 20);
    call = (struct cg_rpc_call){.arena = arena, .max_message_bytes = 4u << 20};
}

static void teardown(void)
{
    cg_arena_free(arena);
}

TestSuite(rpc_conv, .init = setup, .fini = teardown, .timeout = 10);

/* A one-message structured conversation whose only part the caller fills. */
struct one {
    Ctxguard__V1__Conversation conv;
    Ctxguard__V1__MessageList list;
    Ctxguard__V1__Message msg, *msgs[1];
    Ctxguard__V1__MessagePart part, *parts[1];
    Ctxguard__V1__ToolCall call;
    Ctxguard__V1__ImageContent image;
};

static void one_init(struct one *o, Ctxguard__V1__Role role)
{
    ctxguard__v1__conversation__init(&o->conv);
    ctxguard__v1__message_list__init(&o->list);
    ctxguard__v1__message__init(&o->msg);
    ctxguard__v1__message_part__init(&o->part);
    ctxguard__v1__tool_call__init(&o->call);
    ctxguard__v1__image_content__init(&o->image);
    o->msgs[0] = &o->msg;
    o->parts[0] = &o->part;
    o->msg.role = role;
    o->msg.n_parts = 1;
    o->msg.parts = o->parts;
    o->list.n_messages = 1;
    o->list.messages = o->msgs;
    o->conv.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
    o->conv.messages = &o->list;
    o->part.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TEXT;
    o->part.text = "hello";
}

static void expect_error(const Ctxguard__V1__Conversation *in, const char *want)
{
    struct cg_conv *conv = (struct cg_conv *)1;
    cr_assert_eq(cg_rpc_conv_in(&call, "conversation", in, &conv), CG_INVALID_ARGUMENT,
                 "expected an error containing %s", want);
    cr_assert_null(conv);
    cr_assert(strstr(call.err.msg, want) != NULL, "'%s' should contain '%s'", call.err.msg, want);
}

Test(rpc_conv, structured_errors_name_the_field)
{
    struct one o;
    one_init(&o, CTXGUARD__V1__ROLE__ROLE_UNSPECIFIED);
    expect_error(&o.conv, "conversation.messages[0].role: required");
    o.msg.role = 9;
    expect_error(&o.conv, "conversation.messages[0].role: unknown value");
    o.msg.role = CTXGUARD__V1__ROLE__ROLE_ASSISTANT;
    o.part.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND__NOT_SET;
    expect_error(&o.conv, "conversation.messages[0].parts[0]: exactly one of");
    o.part.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_CALL;
    o.part.tool_call = &o.call;
    o.call.name = "f";
    expect_error(&o.conv, "conversation.messages[0].parts[0].tool_call.id: required");
    char long_id[300];
    memset(long_id, 'x', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    o.call.id = long_id;
    expect_error(&o.conv, "conversation.messages[0].parts[0].tool_call.id: longer than 256");
    o.part.kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_IMAGE;
    o.part.image = &o.image;
    o.image.detail = "ultra";
    expect_error(&o.conv, "conversation.messages[0].parts[0].image.detail");
    o.image.detail = "low";
    o.image.width = 200000;
    expect_error(&o.conv, "conversation.messages[0].parts[0].image.width");
    ctxguard__v1__conversation__init(&o.conv);
    expect_error(&o.conv, "conversation: exactly one of messages, openai_json, anthropic_json");
    expect_error(NULL, "conversation: required");
}

Test(rpc_conv, tools_are_checked_and_not_given_twice)
{
    struct one o;
    one_init(&o, CTXGUARD__V1__ROLE__ROLE_USER);
    Ctxguard__V1__ToolDefinition tool, *tools[1] = {&tool};
    ctxguard__v1__tool_definition__init(&tool);
    tool.name = "search";
    tool.parameters_json = "{\"type\":";
    o.conv.n_tools = 1;
    o.conv.tools = tools;
    expect_error(&o.conv, "conversation.tools[0].parameters_json: not a JSON object");
    tool.parameters_json = "{\"type\":\"object\"}";
    struct cg_conv *conv;
    cr_assert_eq(cg_rpc_conv_in(&call, "conversation", &o.conv, &conv), CG_OK, "%s", call.err.msg);
    cr_assert_eq(conv->n_tools, 1);
    cr_assert(conv->tools_external);
    cg_conv_free(conv);
    o.conv.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
    o.conv.openai_json = "{\"messages\":[],\"tools\":[{\"type\":\"function\",\"function\":{"
                         "\"name\":\"x\"}}]}";
    expect_error(&o.conv, "conversation.tools: given both in the JSON and as tool definitions");
}

Test(rpc_conv, json_errors_carry_the_json_path)
{
    Ctxguard__V1__Conversation in;
    ctxguard__v1__conversation__init(&in);
    in.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
    in.openai_json = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\"}]}";
    expect_error(&in, "conversation.openai_json: $.messages[1].role: unknown role \"bot\"");
    in.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_ANTHROPIC_JSON;
    in.anthropic_json = "[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]";
    expect_error(&in, "conversation.anthropic_json: $[0].content[0].tool_use_id: required");
}

Test(rpc_conv, json_in_structured_out_and_back_is_the_same_json)
{
    const char *json =
        "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":"
        "\"user\",\"name\":\"ann\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},{\"type\":"
        "\"image_url\",\"image_url\":{\"url\":\"https://x/"
        "y.png\",\"detail\":\"high\"}}]},{\"role\":"
        "\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"c1\",\"content\":\"ok\"}]}";
    Ctxguard__V1__Conversation in;
    ctxguard__v1__conversation__init(&in);
    in.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
    in.openai_json = (char *)json;
    struct cg_conv *conv;
    cr_assert_eq(cg_rpc_conv_in(&call, "conversation", &in, &conv), CG_OK, "%s", call.err.msg);
    Ctxguard__V1__Conversation *structured;
    cr_assert_eq(cg_rpc_conv_out(&call, conv,
                                 CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED,
                                 &structured),
                 CG_OK);
    cr_assert_eq(structured->messages->n_messages, 4);
    Ctxguard__V1__Message *m = structured->messages->messages[2];
    cr_assert_eq(m->role, CTXGUARD__V1__ROLE__ROLE_ASSISTANT);
    cr_assert_str_eq(m->parts[0]->tool_call->arguments_json, "{\"a\": 1}");
    cr_assert_str_eq(structured->messages->messages[1]->parts[1]->image->detail, "high");
    /* Over the wire and back. */
    size_t n = ctxguard__v1__conversation__get_packed_size(structured);
    uint8_t *buf = malloc(n);
    ctxguard__v1__conversation__pack(structured, buf);
    Ctxguard__V1__Conversation *decoded = ctxguard__v1__conversation__unpack(NULL, n, buf);
    cr_assert_not_null(decoded);
    struct cg_conv *again;
    cr_assert_eq(cg_rpc_conv_in(&call, "conversation", decoded, &again), CG_OK, "%s", call.err.msg);
    again->origin = CG_CONV_ORIGIN_STRUCTURED;
    Ctxguard__V1__Conversation *as_json;
    cr_assert_eq(cg_rpc_conv_out(&call, again,
                                 CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_OPENAI_CHAT,
                                 &as_json),
                 CG_OK, "%s", call.err.msg);
    json_t *a = json_loads(json, 0, NULL), *b = json_loads(as_json->openai_json, 0, NULL);
    json_object_del(a, "model"); /* the model key belongs to the JSON, not the messages */
    cr_assert(json_equal(json_object_get(a, "messages"), b), "%s", as_json->openai_json);
    json_decref(a);
    json_decref(b);
    /* In the format it came in, the JSON comes back whole. */
    Ctxguard__V1__Conversation *same;
    cr_assert_eq(cg_rpc_conv_out(&call, conv, 0, &same), CG_OK);
    cr_assert_eq(same->content_case, CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON);
    a = json_loads(json, 0, NULL);
    b = json_loads(same->openai_json, 0, NULL);
    cr_assert(json_equal(a, b));
    json_decref(a);
    json_decref(b);
    ctxguard__v1__conversation__free_unpacked(decoded, NULL);
    free(buf);
    cg_conv_free(again);
    cg_conv_free(conv);
}

Test(rpc_conv, oversized_json_is_resource_exhausted)
{
    call.max_message_bytes = 64;
    Ctxguard__V1__Conversation in;
    ctxguard__v1__conversation__init(&in);
    in.content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
    in.openai_json = "[{\"role\":\"user\",\"content\":\"this text makes the JSON longer than "
                     "sixty-four bytes\"}]";
    struct cg_conv *conv;
    cr_assert_eq(cg_rpc_conv_in(&call, "conversation", &in, &conv), CG_RESOURCE_EXHAUSTED);
    cr_assert(strstr(call.err.msg, "conversation.openai_json") != NULL, "%s", call.err.msg);
}

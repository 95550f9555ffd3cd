/* test_conv_json.c - OpenAI and Anthropic JSON to the model and back: round trips on the
 * fixtures and on the conversations generated at build time (tests/support/gen_conversations.py,
 * plus $CG_EXTRA_CONVERSATIONS when it names a directory), cross-format conversions, errors that
 * name the JSON path, and hostile input. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "conv_json_fixtures.h"

Test(conv_json, openai_fixture_round_trips_unchanged, .timeout = 10)
{
    size_t len;
    char *json = fixture("openai_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    cr_assert_eq(conv->n_messages, 8);
    cr_assert_eq(conv->messages[1].role, CG_ROLE_DEVELOPER);
    cr_assert_str_eq(conv->messages[2].name.ptr, "dana");
    const struct cg_image *im = &conv->messages[2].parts[1].u.image;
    cr_assert_eq(im->width, 3, "dimensions read from the PNG inside the data: URL");
    cr_assert_eq(im->height, 2);
    cr_assert_str_eq(im->media_type.ptr, "image/png");
    cr_assert_str_eq(im->detail.ptr, "low");
    cr_assert_eq(conv->messages[3].n_parts, 2, "content null + two tool calls");
    cr_assert_eq(conv->messages[3].form, CG_FORM_NULL);
    cr_assert_str_eq(conv->messages[3].parts[1].u.tool_call.arguments.ptr,
                     "{\"command\": \"make -n\"}", "arguments kept byte for byte");
    cr_assert_eq(conv->messages[5].parts[0].u.tool_result.form, CG_FORM_PARTS);
    cr_assert_eq(conv->messages[7].parts[0].u.text.len, 15, "a NUL inside text is kept");
    cr_assert_eq(conv->n_tools, 2);
    json_t *orig = json_loadb(json, len, JSON_ALLOW_NUL, NULL);
    json_t *back = write_json(conv, CG_CONV_JSON_OPENAI);
    cr_assert(json_equal(orig, back), "OpenAI -> model -> OpenAI is the same JSON");
    json_decref(orig);
    json_decref(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json, anthropic_fixture_round_trips_unchanged, .timeout = 10)
{
    size_t len;
    char *json = fixture("anthropic_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_ANTHROPIC, json, len);
    cr_assert_eq(conv->n_messages, 5, "system + 4");
    cr_assert_eq(conv->messages[0].role, CG_ROLE_SYSTEM);
    cr_assert(conv->messages[0].parts[0].cache_breakpoint);
    const struct cg_message *a = &conv->messages[2];
    cr_assert_eq(a->parts[0].kind, CG_PART_REASONING);
    cr_assert_str_eq(a->parts[0].u.reasoning.signature.ptr, "c2lnbmF0dXJl");
    cr_assert(a->parts[1].u.reasoning.redacted);
    cr_assert_eq(a->parts[3].kind, CG_PART_TOOL_CALL);
    const struct cg_tool_result *r = &conv->messages[3].parts[0].u.tool_result;
    cr_assert(r->is_error);
    cr_assert_str_eq(r->content.ptr, "ENOENT");
    cr_assert_eq(r->n_images, 1);
    const struct cg_image *im = &conv->messages[1].parts[1].u.image;
    cr_assert_eq(im->source, CG_IMAGE_SOURCE_DATA);
    cr_assert_eq(im->width, 3);
    cr_assert_eq(conv->n_tools, 2);
    cr_assert_str_eq(conv->tools[1].type.ptr, "web_search_20250305");
    json_t *orig = json_loadb(json, len, 0, NULL);
    json_t *back = write_json(conv, CG_CONV_JSON_ANTHROPIC);
    cr_assert(json_equal(orig, back), "Anthropic -> model -> Anthropic is the same JSON");
    json_decref(orig);
    json_decref(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json, anthropic_to_openai_and_back_keeps_the_structure, .timeout = 10)
{
    size_t len;
    char *json = fixture("anthropic_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_ANTHROPIC, json, len);
    json_t *o = write_json(conv, CG_CONV_JSON_OPENAI);
    json_t *msgs = json_object_get(o, "messages");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 0), "role")), "system");
    /* The user message of results becomes a tool message, then the rest of it. */
    json_t *tool = json_array_get(msgs, 3);
    cr_assert_str_eq(json_string_value(json_object_get(tool, "role")), "tool");
    cr_assert_str_eq(json_string_value(json_object_get(tool, "tool_call_id")), "toolu_01");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(msgs, 4), "role")), "user");
    json_t *asst = json_array_get(msgs, 2);
    cr_assert_str_eq(json_string_value(json_object_get(asst, "reasoning_content")),
                     "The user wants the file first.");
    cr_assert_null(json_object_get(o, "max_tokens"), "unknown keys stay with their format");
    char *text = json_dumps(o, JSON_COMPACT);
    struct cg_conv *again = read_ok(CG_CONV_JSON_OPENAI, text, strlen(text));
    json_t *a2 = write_json(again, CG_CONV_JSON_ANTHROPIC);
    json_t *m2 = json_object_get(a2, "messages");
    cr_assert_eq(json_array_size(m2), 4);
    json_t *results = json_object_get(json_array_get(m2, 2), "content");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(results, 0), "type")),
                     "tool_result");
    cr_assert_str_eq(json_string_value(json_object_get(a2, "system")),
                     "You are a careful build engineer.");
    free(text);
    json_decref(o);
    json_decref(a2);
    cg_conv_free(again);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json, a_bare_array_stays_an_array, .timeout = 10)
{
    size_t len;
    char *json = fixture("openai_array.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    cr_assert_not(conv->top_is_object);
    json_t *back = write_json(conv, CG_CONV_JSON_OPENAI);
    cr_assert(json_is_array(back));
    json_decref(back);
    /* As Anthropic JSON the system prompt needs the object form. */
    json_t *a = write_json(conv, CG_CONV_JSON_ANTHROPIC);
    cr_assert(json_is_object(a));
    json_t *sys = json_object_get(a, "system");
    cr_assert(json_is_array(sys), "two system messages become two text blocks");
    cr_assert_eq(json_array_size(sys), 2);
    json_decref(a);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json, errors_name_the_json_path, .timeout = 10)
{
    const char *bad_role =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"bot\","
        "\"content\":\"x\"}]}";
    expect_read_error(CG_CONV_JSON_OPENAI, bad_role, strlen(bad_role), CG_INVALID_ARGUMENT,
                      "$.messages[1].role: unknown role \"bot\"");
    const char *bad_args = "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"tool_"
                           "calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":"
                           "\"f\",\"arguments\":42}}]}]";
    expect_read_error(CG_CONV_JSON_OPENAI, bad_args, strlen(bad_args), CG_INVALID_ARGUMENT,
                      "$[1].tool_calls[0].function.arguments: expected a string, got a number");
    const char *no_id = "[{\"role\":\"tool\",\"content\":\"x\"}]";
    expect_read_error(CG_CONV_JSON_OPENAI, no_id, strlen(no_id), CG_INVALID_ARGUMENT,
                      "$[0].tool_call_id: required");
    const char *block = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                        "\"text\":\"a\"},{\"type\":\"audio\"}]}]}";
    expect_read_error(CG_CONV_JSON_ANTHROPIC, block, strlen(block), CG_INVALID_ARGUMENT,
                      "$.messages[0].content[1].type: unknown block type \"audio\"");
    const char *sys_role = "[{\"role\":\"system\",\"content\":\"a\"}]";
    expect_read_error(CG_CONV_JSON_ANTHROPIC, sys_role, strlen(sys_role), CG_INVALID_ARGUMENT,
                      "$[0].role: unknown role \"system\"");
    const char *input = "[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\","
                        "\"name\":\"f\",\"input\":[1]}]}]";
    expect_read_error(CG_CONV_JSON_ANTHROPIC, input, strlen(input), CG_INVALID_ARGUMENT,
                      "$[0].content[0].input: expected an object, got an array");
    expect_read_error(CG_CONV_JSON_OPENAI, "{\"model\":\"x\"}", 13, CG_INVALID_ARGUMENT,
                      "needs a \"messages\" array");
    expect_read_error(CG_CONV_JSON_OPENAI, "\"just a string\"", 15, CG_INVALID_ARGUMENT,
                      "expected an array of messages");
}

Test(conv_json, malformed_json_says_where, .timeout = 10)
{
    const char *trunc = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":";
    expect_read_error(CG_CONV_JSON_OPENAI, trunc, strlen(trunc), CG_INVALID_ARGUMENT,
                      "$.messages[1].role: malformed JSON");
    expect_read_error(CG_CONV_JSON_OPENAI, "", 0, CG_INVALID_ARGUMENT, "malformed JSON");
    expect_read_error(CG_CONV_JSON_OPENAI, "[1,]", 4, CG_INVALID_ARGUMENT, "malformed JSON");
}

Test(conv_json, invalid_utf8_is_rejected_with_its_path, .timeout = 10)
{
    const char bad[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"ok\"},{\"role\":\"user\","
                       "\"content\":\"caf\xc3\x28\"}]}";
    expect_read_error(CG_CONV_JSON_OPENAI, bad, sizeof bad - 1, CG_INVALID_ARGUMENT,
                      "$.messages[1].content: invalid UTF-8");
}

Test(conv_json, deep_nesting_is_refused_before_parsing, .timeout = 10)
{
    size_t depth = 100000;
    char *s = malloc(2 * depth + 64);
    size_t n =
        (size_t)snprintf(s, 64, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"k\":");
    for (size_t i = 0; i < depth; i++)
        s[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        s[n++] = ']';
    n += (size_t)snprintf(s + n, 8, "}]}");
    expect_read_error(CG_CONV_JSON_OPENAI, s, n, CG_INVALID_ARGUMENT, "nested deeper than 100");
    expect_read_error(CG_CONV_JSON_OPENAI, s, n, CG_INVALID_ARGUMENT, "$.messages[0].k");
    cr_assert_not(cg_conv_json_is_valid(s + 40, 2 * depth, false));
    free(s);
}

Test(conv_json, sizes_over_the_caps_are_resource_exhausted, .timeout = 30)
{
    size_t big = 8u << 20;
    char *s = malloc(big + 64);
    size_t n = (size_t)snprintf(s, 64, "[{\"role\":\"user\",\"content\":\"");
    memset(s + n, 'a', big);
    n += big;
    n += (size_t)snprintf(s + n, 8, "\"}]");
    struct cg_conv_limits small = {.max_bytes = 1u << 20};
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, s, n, &small, &conv, &err),
                 CG_RESOURCE_EXHAUSTED, "%s", err.msg);
    cr_assert_null(conv);
    /* Within the default caps the same huge string is fine and kept whole. */
    conv = read_ok(CG_CONV_JSON_OPENAI, s, n);
    cr_assert_eq(conv->messages[0].parts[0].u.text.len, big);
    cg_conv_free(conv);
    struct cg_conv_limits few = {.max_messages = 2};
    const char *three =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":"
        "\"b\"},{\"role\":\"user\",\"content\":\"c\"}]";
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, three, strlen(three), &few, &conv, &err),
                 CG_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err.msg, "$[2]") != NULL, "%s", err.msg);
    free(s);
}

Test(conv_json, a_conversation_openai_cannot_carry_is_an_error, .timeout = 10)
{
    const char *late_system = "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\","
                              "\"content\":\"b\"}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, late_system, strlen(late_system));
    char *out = (char *)1;
    size_t len;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, CG_CONV_JSON_ANTHROPIC, &out, &len, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, "messages[1]") != NULL, "%s", err.msg);
    cg_conv_free(conv);
    const char *bad_args = "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":"
                           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]";
    conv = read_ok(CG_CONV_JSON_OPENAI, bad_args, strlen(bad_args));
    cr_assert_eq(cg_conv_json_write(conv, CG_CONV_JSON_ANTHROPIC, &out, &len, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "messages[0].parts[0].tool_call.arguments") != NULL, "%s", err.msg);
    cg_conv_free(conv);
}

/* Messages with arguments parsed, so that "{\"a\": 1}" and "{\"a\":1}" compare equal. */
static json_t *normalized_messages(json_t *root)
{
    json_t *msgs = json_deep_copy(json_object_get(root, "messages"));
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(m, "tool_calls"), k, tc)
        {
            json_t *fn = json_object_get(tc, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            json_object_set_new(fn, "arguments", json_loads(args, 0, NULL));
        }
    }
    return msgs;
}

/* One conversation file: OpenAI and Anthropic round trips, and OpenAI -> Anthropic -> OpenAI. */
static void round_trip_one(const char *path)
{
    size_t len;
    char *json = slurp(path, &len);
    cr_assert_not_null(json, "%s", path);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    json_t *orig = json_loadb(json, len, 0, NULL);
    json_t *o = write_json(conv, CG_CONV_JSON_OPENAI);
    cr_assert(json_equal(orig, o), "%s: OpenAI round trip", path);
    /* OpenAI -> Anthropic -> OpenAI: the same messages and tools. */
    json_t *a = write_json(conv, CG_CONV_JSON_ANTHROPIC);
    char *atext = json_dumps(a, JSON_COMPACT);
    struct cg_conv *from_a = read_ok(CG_CONV_JSON_ANTHROPIC, atext, strlen(atext));
    json_t *o2 = write_json(from_a, CG_CONV_JSON_OPENAI);
    json_t *m1 = normalized_messages(orig), *m2 = normalized_messages(o2);
    cr_assert(json_equal(m1, m2), "%s: OpenAI -> Anthropic -> OpenAI", path);
    cr_assert(json_equal(json_object_get(orig, "tools"), json_object_get(o2, "tools")));
    json_t *a2 = write_json(from_a, CG_CONV_JSON_ANTHROPIC);
    cr_assert(json_equal(a, a2), "%s: Anthropic round trip", path);
    json_decref(m1);
    json_decref(m2);
    json_decref(a2);
    json_decref(o2);
    cg_conv_free(from_a);
    free(atext);
    json_decref(a);
    json_decref(o);
    json_decref(orig);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json, sample_conversations_round_trip_in_both_formats, .timeout = 120)
{
    /* Written at build time (cmake/testdata.cmake): 24 conversations, 3 to ~280 messages. */
    cr_assert_geq(each_conversation(CG_TESTDATA_CONVERSATIONS, round_trip_one), 20, "%s",
                  CG_TESTDATA_CONVERSATIONS);
    const char *extra = getenv("CG_EXTRA_CONVERSATIONS");
    if (extra != NULL && extra[0] != '\0')
        cr_assert_gt(each_conversation(extra, round_trip_one), 0, "CG_EXTRA_CONVERSATIONS=%s",
                     extra);
}

Test(conv_json, garbage_never_crashes, .timeout = 30)
{
    unsigned seed = 12345;
    char buf[512];
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof buf);
        static const char alphabet[] = "{}[]\":,0123456789aeiou\\ntrue false null role content "
                                       "messages tool_calls \xff\xc3";
        for (size_t i = 0; i < n; i++)
            buf[i] = alphabet[rand_r(&seed) % (int)(sizeof alphabet - 1)];
        for (int f = CG_CONV_JSON_OPENAI; f <= CG_CONV_JSON_ANTHROPIC; f++) {
            struct cg_conv *conv = NULL;
            struct cg_err err = {0};
            cg_status st = cg_conv_json_read((cg_conv_json_format)f, buf, n, NULL, &conv, &err);
            cr_assert(st == CG_OK || err.msg[0] == '$', "errors start with a path: %s", err.msg);
            cg_conv_free(conv);
        }
    }
}

Test(conv_json, a_data_url_that_is_not_base64_is_not_written_as_bytes, .timeout = 10)
{
    /* Found by fuzz_conv_json: such a URL became an Anthropic base64 source that the reader
     * then refused. Now the writers that carry bytes keep it a URL (Anthropic url source,
     * Gemini fileData), which their readers take. */
    const char *chat = "[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                       "{\"url\":\"data:image/png;base64,iVBO`Rw0K\"}}]}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, chat, strlen(chat));
    json_t *a = write_json(conv, CG_CONV_JSON_ANTHROPIC);
    json_t *block = json_array_get(json_object_get(json_array_get(a, 0), "content"), 0);
    json_t *source = json_object_get(block, "source");
    cr_assert_str_eq(json_string_value(json_object_get(source, "type")), "url");
    char *text = json_dumps(a, JSON_COMPACT);
    cg_conv_free(read_ok(CG_CONV_JSON_ANTHROPIC, text, strlen(text)));
    free(text);
    json_decref(a);
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    json_t *part = json_array_get(json_object_get(json_array_get(g, 0), "parts"), 0);
    cr_assert_not_null(json_object_get(part, "fileData"), "kept as a URL, not as bytes");
    json_decref(g);
    cg_conv_free(conv);
}

Test(conv_json, an_unnamed_tool_is_not_written_as_anthropic, .timeout = 10)
{
    /* Found by fuzz_conv_json: an OpenAI tool of an unknown type and no name became an
     * Anthropic tool named "", which Anthropic's reader refuses. */
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"tools\":[{\"type\":\"fwnction\"}]}";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, chat, strlen(chat));
    expect_write_error(CG_CONV_JSON_ANTHROPIC, conv, "tools[0].name");
    cg_conv_free(conv);
}

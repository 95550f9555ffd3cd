/* test_conv_json_responses.c - OpenAI Responses API input JSON to the model and back: round
 * trips on the fixtures (tests/data/conv/responses_*.json), the mapping of each item to the
 * model, errors that name the JSON path, conversations of the other formats written as
 * Responses, conversations changed the way Compress changes them, hostile input, and the
 * conversations generated at build time taken through Responses and back to chat. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "conv_json_fixtures.h"

#define RESP CG_CONV_JSON_RESPONSES

/* Writes conv as Responses JSON and reads that back as Responses JSON. */
static struct cg_conv *through_responses(const struct cg_conv *conv, json_t **written)
{
    json_t *v = write_json(conv, RESP);
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    struct cg_conv *back = read_ok(RESP, text, strlen(text));
    free(text);
    if (written != NULL)
        *written = v;
    else
        json_decref(v);
    return back;
}

static void expect_error(const char *json, cg_status code, const char *want)
{
    expect_read_error(RESP, json, strlen(json), code, want);
}

static void assert_round_trip(const char *json, size_t len)
{
    struct cg_conv *conv = read_ok(RESP, json, len);
    json_t *orig = json_loadb(json, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL);
    json_t *back = write_json(conv, RESP);
    char *a = json_dumps(orig, JSON_ENCODE_ANY), *b = json_dumps(back, JSON_ENCODE_ANY);
    cr_assert(json_equal(orig, back), "Responses round trip:\n%s\n%s", a, b);
    free(a);
    free(b);
    json_decref(orig);
    json_decref(back);
    cg_conv_free(conv);
}

static const char *str_at(json_t *v, const char *key)
{
    return json_string_value(json_object_get(v, key));
}

Test(conv_json_responses, fixture_round_trips_unchanged, .timeout = 10)
{
    size_t len;
    char *json = fixture("responses_small.json", &len);
    assert_round_trip(json, len);
    free(json);
    json = fixture("responses_array.json", &len);
    assert_round_trip(json, len);
    free(json);
}

Test(conv_json_responses, fixture_maps_onto_the_model, .timeout = 10)
{
    size_t len;
    char *json = fixture("responses_small.json", &len);
    struct cg_conv *conv = read_ok(RESP, json, len);
    cr_assert_eq(conv->origin, CG_CONV_ORIGIN_RESPONSES);
    cr_assert(conv->top_is_object);
    cr_assert(conv->has_tools_key);
    cr_assert_str_eq(conv->model.ptr, "gpt-5");
    cr_assert_eq(conv->n_messages, 10);
    cr_assert_eq(conv->system_form, CG_FORM_STRING, "instructions");
    const struct cg_message *m = conv->messages;
    cr_assert_eq(m[0].role, CG_ROLE_SYSTEM);
    cr_assert_str_eq(m[0].parts[0].u.text.ptr, "You are a careful build engineer. Answer briefly.");
    cr_assert_eq(m[1].role, CG_ROLE_DEVELOPER);
    cr_assert_eq(m[1].form, CG_FORM_STRING);
    cr_assert_eq(m[2].form, CG_FORM_PARTS);
    cr_assert_eq(m[2].n_parts, 4);
    const struct cg_image *im = &m[2].parts[1].u.image;
    cr_assert_eq(im->source, CG_IMAGE_SOURCE_URL);
    cr_assert_eq(im->width, 3, "dimensions read from the PNG inside the data: URL");
    cr_assert_str_eq(im->media_type.ptr, "image/png");
    cr_assert_str_eq(im->detail.ptr, "low");
    cr_assert_eq(m[2].parts[2].u.image.source, CG_IMAGE_SOURCE_NONE, "file_id only");
    cr_assert(strstr(m[2].parts[2].extra.ptr, "file-abc123") != NULL);
    cr_assert(strstr(m[2].extra.ptr, "\"message\"") != NULL, "the item's type is kept");
    /* reasoning + two calls: one assistant message with no message item */
    cr_assert_eq(m[3].role, CG_ROLE_ASSISTANT);
    cr_assert_eq(m[3].form, CG_FORM_ABSENT);
    cr_assert_eq(m[3].n_parts, 3);
    cr_assert_eq(m[3].parts[0].kind, CG_PART_REASONING);
    cr_assert_str_eq(m[3].parts[0].u.reasoning.text.ptr,
                     "**Reading the Makefile**\n\nThen the compiler output.");
    cr_assert_str_eq(m[3].parts[0].u.reasoning.signature.ptr, "gAAAAABoZW5jcnlwdGVk");
    cr_assert(strstr(m[3].parts[0].extra.ptr, "rs_01") != NULL);
    cr_assert_eq(m[3].parts[1].kind, CG_PART_TOOL_CALL);
    cr_assert_str_eq(m[3].parts[1].u.tool_call.id.ptr, "call_a1");
    cr_assert_str_eq(m[3].parts[1].u.tool_call.arguments.ptr, "{\"path\": \"Makefile\"}");
    cr_assert(strstr(m[3].parts[1].extra.ptr, "fc_01") != NULL);
    cr_assert_eq(m[3].parts[2].extra.len, 0);
    /* the outputs: TOOL messages */
    cr_assert_eq(m[4].role, CG_ROLE_TOOL);
    cr_assert_str_eq(m[4].parts[0].u.tool_result.tool_call_id.ptr, "call_a1");
    cr_assert_eq(m[4].parts[0].u.tool_result.form, CG_FORM_STRING);
    const struct cg_tool_result *r = &m[5].parts[0].u.tool_result;
    cr_assert_eq(r->form, CG_FORM_PARTS);
    cr_assert_str_eq(r->content.ptr, "cc -O2 -Wall -o ledger ledger.c\n");
    cr_assert_eq(r->n_images, 1);
    cr_assert_str_eq(r->images[0].url.ptr, "https://example.com/log.png");
    cr_assert(strstr(m[5].extra.ptr, "fco_02") != NULL);
    /* reasoning then the message item: one assistant message */
    cr_assert_eq(m[6].role, CG_ROLE_ASSISTANT);
    cr_assert_eq(m[6].form, CG_FORM_PARTS);
    cr_assert_eq(m[6].n_parts, 3);
    cr_assert_eq(m[6].parts[0].u.reasoning.text.len, 0);
    cr_assert_eq(m[6].parts[2].kind, CG_PART_TEXT);
    cr_assert_str_eq(m[6].parts[2].u.text.ptr, "I will not delete the ledger.");
    cr_assert(strstr(m[6].parts[2].extra.ptr, "refusal") != NULL);
    cr_assert(strstr(m[6].extra.ptr, "msg_01") != NULL);
    cr_assert_eq(m[7].parts[0].u.text.len, 15, "a NUL inside text is kept");
    cr_assert_eq(m[9].role, CG_ROLE_SYSTEM, "a late system message stays a message");
    cr_assert_eq(conv->n_tools, 4);
    cr_assert_str_eq(conv->tools[0].type.ptr, "function");
    cr_assert_str_eq(conv->tools[0].description.ptr, "Read a file");
    cr_assert(strstr(conv->tools[0].extra.ptr, "strict") != NULL);
    cr_assert_str_eq(conv->tools[2].name.ptr, "web_search", "a built-in tool is named by type");
    cr_assert_str_eq(conv->tools[3].type.ptr, "file_search");
    cr_assert(strstr(conv->tools[3].extra.ptr, "vs_1") != NULL);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_responses, strings_stay_strings_and_arrays_stay_arrays, .timeout = 10)
{
    const char *docs[] = {
        "\"What is the capital of France?\"",
        "[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}]",
        "{\"model\":\"gpt-5\",\"input\":\"Hi\"}",
        "{\"input\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"tools\":[],\"instructions\":\"Be "
        "brief.\"}",
        "[]",
        "{\"input\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[]},{\"type\":"
        "\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
        "[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\",\"x\":null}]}]",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++)
        assert_round_trip(docs[i], strlen(docs[i]));
    struct cg_conv *conv = read_ok(RESP, docs[0], strlen(docs[0]));
    cr_assert_not(conv->top_is_object);
    cr_assert_eq(conv->n_messages, 1);
    cr_assert_eq(conv->messages[0].role, CG_ROLE_USER);
    cr_assert_eq(conv->messages[0].form, CG_FORM_STRING);
    /* Another turn: the string can no longer carry it. */
    struct cg_message *m;
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_ASSISTANT, &m, NULL), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, NULL), CG_OK);
    json_t *v = write_json(conv, RESP);
    cr_assert(json_is_array(v));
    cr_assert_eq(json_array_size(v), 2);
    json_decref(v);
    cg_conv_free(conv);
}

Test(conv_json_responses, errors_name_the_json_path, .timeout = 10)
{
    expect_error("{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"type\":\"function_call\","
                 "\"name\":\"f\",\"arguments\":\"{}\"}]}",
                 CG_INVALID_ARGUMENT, "$.input[1].call_id: required");
    expect_error("[{\"type\":\"function_call_output\",\"call_id\":\"\",\"output\":\"x\"}]",
                 CG_INVALID_ARGUMENT, "$[0].call_id: must be 1..256 bytes");
    /* Found by fuzz_compress: a tool of type "" was read, and could not be written back. */
    expect_error("{\"input\":\"hi\",\"tools\":[{\"type\":\"\",\"max_num_results\":5}]}",
                 CG_INVALID_ARGUMENT, "$.tools[0].type: must be 1..256 bytes");
    expect_error("[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":"
                 "{\"a\":1}}]",
                 CG_INVALID_ARGUMENT, "$[0].arguments: expected a string, got an object");
    expect_error("{\"input\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\","
                 "\"content\":\"b\"},{\"role\":\"user\",\"content\":\"c\"},{\"role\":\"user\","
                 "\"content\":\"d\"},{\"type\":\"web_search_call\",\"id\":\"ws\"}]}",
                 CG_INVALID_ARGUMENT,
                 "$.input[4].type: item type \"web_search_call\" is not supported (message, "
                 "function_call, function_call_output, reasoning)");
    expect_error("[{\"role\":\"bot\",\"content\":\"x\"}]", CG_INVALID_ARGUMENT,
                 "$[0].role: unknown role \"bot\"");
    expect_error("[{\"role\":\"tool\",\"content\":\"x\"}]", CG_INVALID_ARGUMENT,
                 "$[0].role: unknown role \"tool\"");
    expect_error("{\"instructions\":42,\"input\":\"hi\"}", CG_INVALID_ARGUMENT,
                 "$.instructions: expected a string, got a number");
    expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
                 "{\"type\":\"input_file\",\"file_id\":\"f\"}]}]",
                 CG_INVALID_ARGUMENT,
                 "$[0].content[1].type: content part type \"input_file\" is not supported "
                 "(input_text, output_text, refusal, input_image)");
    expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].content[0].text: required");
    expect_error("[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].content[0]: an input_image needs");
    expect_error("[{\"role\":\"user\"}]", CG_INVALID_ARGUMENT, "$[0].content: required");
    expect_error("[{\"content\":\"x\"}]", CG_INVALID_ARGUMENT, "$[0].type: required");
    expect_error("[{\"type\":\"reasoning\",\"id\":\"r\"}]", CG_INVALID_ARGUMENT,
                 "$[0].summary: required");
    expect_error("[{\"type\":\"reasoning\",\"summary\":[{\"type\":\"x\",\"text\":\"a\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].summary[0].type: summary part type \"x\"");
    expect_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":"
                 "\"input_file\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].output[0].type: output part type \"input_file\"");
    expect_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":"
                 "\"input_image\",\"file_id\":\"f\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].output[0]: an image here needs \"image_url\"");
    expect_error("[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]", CG_INVALID_ARGUMENT,
                 "$[0].output: required");
    expect_error("[{\"role\":\"assistant\",\"content\":[{\"type\":\"input_image\",\"image_url\":"
                 "\"https://x/a.png\"}]}]",
                 CG_INVALID_ARGUMENT, "$[0].content[0]: an assistant message holds");
    expect_error("{\"model\":\"x\"}", CG_INVALID_ARGUMENT, "$: an object needs \"input\"");
    expect_error("42", CG_INVALID_ARGUMENT, "$: expected an array of items, a string or");
    expect_error("{\"input\":[],\"tools\":[{\"name\":\"f\"}]}", CG_INVALID_ARGUMENT,
                 "$.tools[0].type: required");
    expect_error("{\"input\":[],\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":"
                 "[]}]}",
                 CG_INVALID_ARGUMENT, "$.tools[0].parameters: expected an object");
    expect_error("[{\"role\":\"user\",\"content\":\"caf\xc3\x28\"}]", CG_INVALID_ARGUMENT,
                 "invalid UTF-8");
    expect_error("[1]", CG_INVALID_ARGUMENT, "$[0]: expected an object, got a number");
}

Test(conv_json_responses, caps_are_resource_exhausted, .timeout = 10)
{
    struct cg_conv_limits few = {.max_messages = 2};
    const char *three = "[{\"role\":\"user\",\"content\":\"a\"},{\"type\":\"function_call\","
                        "\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},{\"type\":"
                        "\"function_call_output\",\"call_id\":\"c\",\"output\":\"x\"}]";
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(RESP, three, strlen(three), &few, &conv, &err),
                 CG_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err.msg, "$[2]") != NULL, "%s", err.msg);
    cr_assert_null(conv);
}

Test(conv_json_responses, chat_fixture_written_as_responses, .timeout = 10)
{
    size_t len;
    char *json = fixture("openai_small.json", &len);
    struct cg_conv *chat = read_ok(CG_CONV_JSON_OPENAI, json, len);
    json_t *v;
    struct cg_conv *back = through_responses(chat, &v);
    cr_assert(json_is_object(v));
    cr_assert_null(json_object_get(v, "instructions"), "a chat system message stays a message");
    cr_assert_null(json_object_get(v, "temperature"), "unknown keys stay with their format");
    json_t *input = json_object_get(v, "input");
    json_t *user = json_array_get(input, 2);
    cr_assert_null(json_object_get(user, "name"), "names have no place in Responses");
    json_t *img = json_array_get(json_object_get(user, "content"), 1);
    cr_assert_str_eq(str_at(img, "type"), "input_image");
    cr_assert_str_eq(str_at(img, "detail"), "low");
    json_t *call = json_array_get(input, 3);
    cr_assert_str_eq(str_at(call, "type"), "function_call");
    cr_assert_str_eq(str_at(call, "call_id"), "call_a1");
    json_t *tool = json_array_get(json_object_get(v, "tools"), 1);
    cr_assert_str_eq(str_at(tool, "name"), "run_command");
    cr_assert(json_is_true(json_object_get(tool, "strict")), "chat's strict is carried");
    cr_assert(
        json_is_false(json_object_get(json_array_get(json_object_get(v, "tools"), 0), "strict")),
        "non-strict stays non-strict");
    json_t *answer = json_array_get(input, 7);
    cr_assert_str_eq(str_at(answer, "role"), "assistant");
    cr_assert(json_is_string(json_object_get(answer, "content")));
    /* read back: same roles, calls, results and texts */
    cr_assert_eq(back->n_messages, 8);
    for (size_t i = 0; i < 8; i++)
        cr_assert_eq(back->messages[i].role, chat->messages[i].role, "message %zu", i);
    cr_assert_eq(back->messages[3].n_parts, 2);
    cr_assert_str_eq(back->messages[3].parts[1].u.tool_call.id.ptr, "call_a2");
    cr_assert_str_eq(back->messages[3].parts[1].u.tool_call.arguments.ptr,
                     "{\"command\": \"make -n\"}");
    cr_assert_str_eq(back->messages[5].parts[0].u.tool_result.tool_call_id.ptr, "call_a2");
    cr_assert_str_eq(back->messages[5].parts[0].u.tool_result.content.ptr,
                     "cc -O2 -Wall -o ledger ledger.c\n");
    cr_assert_eq(back->messages[7].parts[0].u.text.len, 15);
    cr_assert_eq(back->messages[2].parts[1].u.image.width, 3);
    json_decref(v);
    cg_conv_free(back);
    cg_conv_free(chat);
    free(json);
}

Test(conv_json_responses, anthropic_fixture_written_as_responses, .timeout = 10)
{
    size_t len;
    char *json = fixture("anthropic_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_ANTHROPIC, json, len);
    /* Anthropic's server-side web search has no Responses form. */
    expect_write_error(RESP, conv, "tools[1]: a built-in tool of another format");
    conv->n_tools = 1;
    json_t *v;
    struct cg_conv *back = through_responses(conv, &v);
    json_t *input = json_object_get(v, "input");
    cr_assert_null(json_object_get(v, "instructions"));
    cr_assert_str_eq(str_at(json_array_get(input, 0), "role"), "system");
    json_t *img = json_array_get(json_object_get(json_array_get(input, 1), "content"), 1);
    cr_assert(strncmp(str_at(img, "image_url"), "data:image/png;base64,iVBOR", 27) == 0,
              "image bytes become a data: URL");
    cr_assert_str_eq(str_at(img, "detail"), "auto");
    /* thinking (Anthropic signature) and redacted thinking have no Responses item: dropped */
    json_t *text = json_array_get(input, 2);
    cr_assert_str_eq(str_at(text, "role"), "assistant");
    cr_assert_str_eq(str_at(text, "content"), "Let me look.");
    cr_assert_str_eq(str_at(json_array_get(input, 3), "type"), "function_call");
    cr_assert_str_eq(str_at(json_array_get(input, 3), "arguments"),
                     "{\"path\":\"logo.txt\",\"lines\":[1,2.5]}");
    /* the tool_result inside the user message: an output item first, then the text */
    json_t *out = json_array_get(input, 4);
    cr_assert_str_eq(str_at(out, "type"), "function_call_output");
    cr_assert_str_eq(str_at(out, "call_id"), "toolu_01");
    json_t *parts = json_object_get(out, "output");
    cr_assert_eq(json_array_size(parts), 2, "text and image");
    cr_assert_str_eq(str_at(json_array_get(parts, 0), "text"), "ENOENT");
    cr_assert_str_eq(str_at(json_array_get(parts, 1), "image_url"), "https://example.com/a.png");
    cr_assert_null(json_object_get(out, "is_error"));
    cr_assert_str_eq(str_at(json_array_get(input, 5), "role"), "user");
    cr_assert_str_eq(str_at(json_array_get(input, 5), "content"), "It should exist.");
    cr_assert_eq(json_array_size(input), 7);
    json_t *tool = json_array_get(json_object_get(v, "tools"), 0);
    cr_assert_str_eq(str_at(tool, "type"), "function");
    cr_assert_not_null(json_object_get(tool, "parameters"));
    /* read back */
    cr_assert_eq(back->n_messages, 6);
    cr_assert_eq(back->messages[2].n_parts, 2, "text + tool call");
    cr_assert_eq(back->messages[3].role, CG_ROLE_TOOL);
    cr_assert_str_eq(back->messages[3].parts[0].u.tool_result.content.ptr, "ENOENT");
    cr_assert_eq(back->messages[3].parts[0].u.tool_result.n_images, 1);
    cr_assert_eq(back->messages[4].role, CG_ROLE_USER);
    cr_assert_str_eq(back->messages[5].parts[0].u.text.ptr, "Then it was deleted.");
    json_decref(v);
    cg_conv_free(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_responses, what_responses_cannot_carry_is_an_error, .timeout = 10)
{
    const char *calls_in_user = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, calls_in_user, strlen(calls_in_user));
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_part(conv, &conv->messages[0], CG_PART_TOOL_CALL, &p, NULL), CG_OK);
    expect_write_error(RESP, conv, "messages[0].parts[1]: only assistant messages carry");
    conv->messages[0].parts[1].kind = CG_PART_IMAGE; /* no source at all */
    expect_write_error(RESP, conv, "messages[0].parts[1].image: Responses JSON needs");
    conv->messages[0].role = CG_ROLE_ASSISTANT;
    expect_write_error(RESP, conv,
                       "messages[0].parts[1]: a Responses assistant message cannot hold");
    conv->messages[0].role = CG_ROLE_SYSTEM;
    conv->messages[0].parts[1].kind = CG_PART_TOOL_RESULT;
    expect_write_error(RESP, conv,
                       "messages[0].parts[1]: a system message cannot hold tool results");
    cg_conv_free(conv);
}

static void set_text(struct cg_conv *conv, struct cg_str *s, const char *text)
{
    cr_assert_eq(cg_conv_str(conv, text, strlen(text), s, NULL), CG_OK);
}

Test(conv_json_responses, conversations_changed_like_compress_writes_valid_output, .timeout = 10)
{
    size_t len;
    char *json = fixture("responses_small.json", &len);
    struct cg_conv *conv = read_ok(RESP, json, len);
    /* replace texts: reasoning, an annotated output_text, a refusal, a tool output */
    struct cg_message *m = conv->messages;
    set_text(conv, &m[3].parts[0].u.reasoning.text, "Short.");
    set_text(conv, &m[6].parts[1].u.text, "Fine.");
    set_text(conv, &m[6].parts[2].u.text, "No.");
    set_text(conv, &m[4].parts[0].u.tool_result.content, "[cut]");
    /* drop the developer message, then insert a summary before the user's question */
    memmove(&m[1], &m[2], (conv->n_messages - 2) * sizeof m[0]);
    conv->n_messages--;
    insert_user_text(conv, 1, "[summary of earlier turns]");
    json_t *v;
    struct cg_conv *back = through_responses(conv, &v);
    json_t *input = json_object_get(v, "input");
    cr_assert_str_eq(str_at(v, "instructions"),
                     "You are a careful build engineer. Answer briefly.");
    cr_assert_str_eq(str_at(json_array_get(input, 0), "content"), "[summary of earlier turns]");
    json_t *rs = json_array_get(input, 2);
    cr_assert_str_eq(str_at(rs, "id"), "rs_01");
    json_t *summary = json_object_get(rs, "summary");
    cr_assert_eq(json_array_size(summary), 1, "a changed reasoning text: one summary_text");
    cr_assert_str_eq(str_at(json_array_get(summary, 0), "text"), "Short.");
    cr_assert_str_eq(str_at(rs, "encrypted_content"), "gAAAAABoZW5jcnlwdGVk");
    cr_assert_str_eq(str_at(json_array_get(input, 5), "output"), "[cut]");
    json_t *msg = json_array_get(input, 8);
    cr_assert_str_eq(str_at(msg, "id"), "msg_01");
    json_t *content = json_object_get(msg, "content");
    json_t *ot = json_array_get(content, 0);
    cr_assert_str_eq(str_at(ot, "text"), "Fine.");
    cr_assert_eq(json_array_size(json_object_get(ot, "annotations")), 0,
                 "annotations past the new text are dropped");
    cr_assert_str_eq(str_at(json_array_get(content, 1), "refusal"), "No.",
                     "a changed refusal stays a refusal");
    cr_assert_null(json_object_get(json_array_get(content, 1), "text"));
    cr_assert_eq(back->n_messages, 10);
    cr_assert_str_eq(back->messages[3].parts[0].u.reasoning.text.ptr, "Short.");
    json_decref(v);
    cg_conv_free(back);
    /* Compress merges consecutive assistant messages and resets the form. */
    struct cg_message *a = &conv->messages[3];
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_part(conv, a, CG_PART_TEXT, &p, NULL), CG_OK);
    set_text(conv, &p->u.text, "Merged text.");
    a->form = CG_FORM_DEFAULT;
    v = write_json(conv, RESP);
    input = json_object_get(v, "input");
    json_t *merged = json_array_get(input, 5);
    cr_assert_str_eq(str_at(merged, "role"), "assistant");
    cr_assert_str_eq(str_at(merged, "content"), "Merged text.");
    cr_assert_null(json_object_get(merged, "id"));
    json_decref(v);
    cg_conv_free(conv);
    free(json);
}

/* Random bytes from an alphabet of the format's own words, and random mutations of the
 * fixture: every read either works (and the result can be written) or fails with a path. */
static void hostile_read(const char *buf, size_t n)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cg_status st = cg_conv_json_read(RESP, buf, n, NULL, &conv, &err);
    cr_assert(st == CG_OK || st == CG_INVALID_ARGUMENT || st == CG_RESOURCE_EXHAUSTED, "%d", st);
    cr_assert(st == CG_OK || err.msg[0] == '$', "errors start with a path: %s", err.msg);
    if (st != CG_OK)
        return;
    /* What it reads, it writes; that reads again and writes the same bytes. */
    char *out = NULL, *out2 = NULL;
    size_t len, len2;
    cr_assert_eq(cg_conv_json_write(conv, RESP, &out, &len, &err), CG_OK, "%s", err.msg);
    struct cg_conv *again = read_ok(RESP, out, len);
    cr_assert_eq(cg_conv_json_write(again, RESP, &out2, &len2, &err), CG_OK, "%s", err.msg);
    cr_assert(len == len2 && memcmp(out, out2, len) == 0, "a fixed point:\n%s\n%s", out, out2);
    free(out);
    free(out2);
    cg_conv_free(again);
    /* Other formats either refuse or write what they read. */
    for (int f = CG_CONV_JSON_OPENAI; f <= CG_CONV_JSON_ANTHROPIC; f++) {
        if (cg_conv_json_write(conv, (cg_conv_json_format)f, &out, &len, &err) != CG_OK)
            continue;
        cg_conv_free(read_ok((cg_conv_json_format)f, out, len));
        free(out);
    }
    cg_conv_free(conv);
}

Test(conv_json_responses, hostile_input_never_crashes, .timeout = 60)
{
    unsigned seed = 4242;
    char buf[512];
    static const char alphabet[] = "{}[]\":,0123456789\\ true null input role content type "
                                   "message function_call function_call_output reasoning "
                                   "summary call_id output \xff\xc3";
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)(rand_r(&seed) % (int)sizeof buf);
        for (size_t i = 0; i < n; i++)
            buf[i] = alphabet[rand_r(&seed) % (int)(sizeof alphabet - 1)];
        hostile_read(buf, n);
    }
    size_t len;
    char *json = fixture("responses_small.json", &len);
    char *mut = malloc(len);
    static const char bytes[] = "{}[]\",:0\\\xff";
    for (int round = 0; round < 3000; round++) {
        memcpy(mut, json, len);
        int edits = 1 + rand_r(&seed) % 4;
        for (int e = 0; e < edits; e++)
            mut[(size_t)rand_r(&seed) % len] = bytes[rand_r(&seed) % (int)(sizeof bytes - 1)];
        hostile_read(mut, len - (size_t)(rand_r(&seed) % 3 == 0 ? rand_r(&seed) % 50 : 0));
    }
    free(mut);
    free(json);
}

/* The chat messages as compared after a trip through Responses: role, content (null when
 * absent; an array of text parts only as its one string), tool_calls (arguments parsed),
 * tool_call_id. What Responses does not carry (names, unknown keys, the shape of a chat
 * content array of one text) is left out; see the file comment of conv_json_responses.c. */
static json_t *comparable_messages(json_t *root)
{
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(root, "messages"), i, m)
    {
        json_t *o = json_object();
        json_object_set(o, "role", json_object_get(m, "role"));
        json_t *content = json_object_get(m, "content");
        if (json_is_array(content) && json_array_size(content) == 1 &&
            json_object_get(json_array_get(content, 0), "text") != NULL)
            content = json_object_get(json_array_get(content, 0), "text");
        json_object_set_new(o, "content", content != NULL ? json_incref(content) : json_null());
        if (json_object_get(m, "tool_call_id") != NULL)
            json_object_set(o, "tool_call_id", json_object_get(m, "tool_call_id"));
        json_t *calls = json_deep_copy(json_object_get(m, "tool_calls"));
        size_t k;
        json_t *tc;
        json_array_foreach(calls, k, tc)
        {
            json_t *fn = json_object_get(tc, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            json_object_set_new(fn, "arguments", json_loads(args, 0, NULL));
        }
        if (calls != NULL)
            json_object_set_new(o, "tool_calls", calls);
        json_array_append_new(out, o);
    }
    return out;
}

/* Tools without the keys Responses does not carry back to chat (strict and other extras). */
static json_t *comparable_tools(json_t *root)
{
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(root, "tools"), i, t)
    {
        json_t *fn = json_deep_copy(json_object_get(t, "function"));
        json_object_del(fn, "strict");
        json_array_append_new(out, fn);
    }
    return out;
}

/* chat -> model -> Responses -> model -> chat against chat -> model -> chat. */
static void through_responses_to_chat(const char *path)
{
    size_t len;
    char *json = slurp(path, &len);
    cr_assert_not_null(json, "%s", path);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    json_t *direct = write_json(conv, CG_CONV_JSON_OPENAI);
    struct cg_conv *back = through_responses(conv, NULL);
    json_t *again = write_json(back, RESP);
    char *text = json_dumps(again, JSON_COMPACT | JSON_ENCODE_ANY);
    assert_round_trip(text, strlen(text));
    json_t *chat = write_json(back, CG_CONV_JSON_OPENAI);
    json_t *m1 = comparable_messages(direct), *m2 = comparable_messages(chat);
    cr_assert(json_equal(m1, m2), "%s: chat -> Responses -> chat", path);
    json_t *t1 = comparable_tools(direct), *t2 = comparable_tools(chat);
    cr_assert(json_equal(t1, t2), "%s: tools", path);
    json_decref(t1);
    json_decref(t2);
    json_decref(m1);
    json_decref(m2);
    json_decref(chat);
    free(text);
    json_decref(again);
    json_decref(direct);
    cg_conv_free(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_responses, generated_conversations_survive_responses, .timeout = 120)
{
    cr_assert_geq(each_conversation(CG_TESTDATA_CONVERSATIONS, through_responses_to_chat), 20, "%s",
                  CG_TESTDATA_CONVERSATIONS);
    /* and the chat fixture, whose images, names and content arrays are all there */
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof path, "%.*s/../data/conv/openai_small.json", (int)(slash - __FILE__),
             __FILE__);
    through_responses_to_chat(path);
}

Test(conv_json_responses, messages_without_parts_write, .timeout = 10)
{
    /* Found by fuzz_conv_json: a message with no parts (its parts array NULL) written from
     * another format. */
    const char *chat =
        "[{\"role\":\"user\",\"content\":[]},{\"role\":\"assistant\",\"content\":null},"
        "{\"role\":\"user\",\"content\":\"\"}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, chat, strlen(chat));
    cr_assert_eq(conv->messages[1].n_parts, 0);
    json_t *out = write_json(conv, RESP);
    /* The assistant message with nothing in it has no item to be; the user ones stay. */
    cr_assert_eq(json_array_size(out), 2);
    char *text = json_dumps(out, JSON_COMPACT);
    cr_assert_str_eq(text,
                     "[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"\"}]");
    struct cg_conv *back = read_ok(RESP, text, strlen(text));
    cr_assert_eq(back->n_messages, 2);
    free(text);
    json_decref(out);
    cg_conv_free(back);
    cg_conv_free(conv);
}

/* test_conv_json_gemini.c - Gemini `contents` JSON to the model and back: the fixtures round
 * trip (camelCase and snake_case), each mapping checked on the model, errors that name the JSON
 * path, conversions from OpenAI chat and Anthropic JSON, a conversation changed the way
 * Compress changes one, the generated conversations through Gemini and back, hostile input. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "conv_json_fixtures.h"

static char *write_text(const struct cg_conv *conv, cg_conv_json_format f, size_t *len)
{
    char *out;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, f, &out, len, &err), CG_OK, "write: %s", err.msg);
    cr_assert_eq(strlen(out), *len);
    return out;
}

/* conv written as Gemini and read back. */
static struct cg_conv *through_gemini(const struct cg_conv *conv)
{
    size_t len;
    char *text = write_text(conv, CG_CONV_JSON_GEMINI, &len);
    struct cg_conv *back = read_ok(CG_CONV_JSON_GEMINI, text, len);
    free(text);
    return back;
}

static void expect_error(const char *json, cg_status code, const char *want)
{
    expect_read_error(CG_CONV_JSON_GEMINI, json, strlen(json), code, want);
}

static void str_is(const struct cg_str *s, const char *want)
{
    cr_assert_eq(s->len, strlen(want), "'%s' vs '%s'", s->ptr, want);
    cr_assert_str_eq(s->ptr, want);
}

static void round_trips(const char *name, bool snake)
{
    size_t len;
    char *json = fixture(name, &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, json, len);
    cr_assert_eq(conv->origin, CG_CONV_ORIGIN_GEMINI);
    cr_assert_eq(conv->snake_keys, snake);
    json_t *orig = json_loadb(json, len, JSON_ALLOW_NUL, NULL);
    json_t *back = write_json(conv, CG_CONV_JSON_GEMINI);
    char *shown = json_dumps(back, JSON_COMPACT);
    cr_assert(json_equal(orig, back), "%s: Gemini -> model -> Gemini is the same JSON: %s", name,
              shown);
    free(shown);
    json_decref(orig);
    json_decref(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, fixture_round_trips_unchanged, .timeout = 10)
{
    round_trips("gemini_small.json", false);
}

Test(conv_json_gemini, snake_case_fixture_round_trips_in_snake_case, .timeout = 10)
{
    round_trips("gemini_snake.json", true);
    size_t len;
    char *json = fixture("gemini_snake.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, json, len);
    const struct cg_message *model = &conv->messages[2];
    str_is(&model->parts[0].u.reasoning.signature, "AAAA");
    str_is(&model->parts[1].extra, "{\"thought_signature\":\"BBBB\"}");
    str_is(&conv->messages[3].parts[0].u.tool_result.tool_call_id, "ctxguard-gemini-2-1");
    str_is(&conv->messages[3].parts[0].u.tool_result.content, "{\"result\":\"PNG, 3x2\"}");
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, each_shape_maps_onto_the_model, .timeout = 10)
{
    size_t len;
    char *json = fixture("gemini_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, json, len);
    cr_assert(conv->top_is_object);
    cr_assert(conv->has_tools_key);
    cr_assert_eq(conv->system_form, CG_FORM_PARTS);
    str_is(&conv->model, "gemini-2.5-flash");
    cr_assert_eq(conv->n_messages, 7, "system instruction + 6 contents");
    const struct cg_message *sys = &conv->messages[0], *user = &conv->messages[1];
    cr_assert_eq(sys->role, CG_ROLE_SYSTEM);
    cr_assert_eq(sys->n_parts, 2);
    str_is(&sys->extra, "{\"role\":\"system\"}");
    cr_assert_eq(user->role, CG_ROLE_USER);
    const struct cg_image *png = &user->parts[1].u.image, *pdf = &user->parts[2].u.image;
    cr_assert_eq(png->source, CG_IMAGE_SOURCE_DATA);
    cr_assert_eq(png->width, 3, "dimensions read from the PNG header");
    cr_assert_eq(png->height, 2);
    str_is(&png->media_type, "image/png");
    cr_assert_eq(pdf->source, CG_IMAGE_SOURCE_URL, "fileData is an image by URL");
    str_is(&pdf->media_type, "application/pdf");
    str_is(&pdf->url, "gs://ledger-bucket/spec.pdf");
    str_is(&user->parts[2].extra, "{\"videoMetadata\":null}");
    const struct cg_message *model = &conv->messages[2];
    cr_assert_eq(model->role, CG_ROLE_ASSISTANT);
    cr_assert_eq(model->parts[0].kind, CG_PART_REASONING);
    str_is(&model->parts[0].u.reasoning.signature, "c2lnLXRob3VnaHQ=");
    cr_assert_eq(model->parts[1].kind, CG_PART_TEXT);
    str_is(&model->parts[1].extra, "{\"thoughtSignature\":\"c2lnLXRleHQ=\"}");
    str_is(&model->parts[2].extra, "{\"thoughtSignature\":\"c2lnLWNhbGw=\"}");
    str_is(&model->parts[2].u.tool_call.arguments, "{\"path\":\"logo.txt\",\"lines\":[1,2.5]}");
    str_is(&model->parts[6].u.tool_call.arguments, "{}");
    const struct cg_message *four = &conv->messages[4], *five = &conv->messages[5];
    str_is(&four->extra, "{\"note\":\"kept\"}");
    cr_assert_eq(five->role, CG_ROLE_USER, "no role is user");
    cr_assert_eq(five->parts[0].u.text.len, 15, "a NUL inside text is kept");
    cr_assert_eq(conv->messages[6].role, CG_ROLE_USER, "the legacy function role is user");
    cr_assert_eq(conv->n_tools, 6, "four functions, googleSearch, codeExecution");
    str_is(&conv->tools[1].type, "function");
    str_is(&conv->tools[1].parameters, "{\"type\":\"object\",\"properties\":{\"command\":{\"type\":"
                                       "\"string\"}},\"additionalProperties\":false}");
    str_is(&conv->tools[4].type, "googleSearch");
    str_is(&conv->tools[4].name, "googleSearch");
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, responses_find_their_calls_by_id_or_fifo_per_name, .timeout = 10)
{
    size_t len;
    char *json = fixture("gemini_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, json, len);
    const struct cg_message *model = &conv->messages[2], *results = &conv->messages[3];
    str_is(&model->parts[2].u.tool_call.id, "ctxguard-gemini-2-2");
    str_is(&model->parts[3].u.tool_call.id, "ctxguard-gemini-2-3");
    str_is(&model->parts[4].u.tool_call.id, "call-7");
    const struct cg_tool_result *r = &results->parts[0].u.tool_result;
    str_is(&r->tool_call_id, "ctxguard-gemini-2-2");
    str_is(&r->tool_name, "read_file");
    str_is(&r->content, "ENOENT: logo.txt");
    cr_assert_not(r->is_error);
    r = &results->parts[1].u.tool_result;
    str_is(&r->tool_call_id, "ctxguard-gemini-2-3"); /* the second read_file answers the second */
    str_is(&r->content, "{\"content\":\"spec v2\",\"lines\":2}");
    r = &results->parts[2].u.tool_result;
    str_is(&r->tool_call_id, "call-7");
    str_is(&r->content, "make: *** No rule to make target");
    cr_assert(r->is_error);
    str_is(&results->parts[3].u.tool_result.tool_call_id, "grep-1"); /* matched by name */
    str_is(&results->parts[3].extra,
           "{\"functionResponse\":{\"willContinue\":false,\"id\":false}}");
    str_is(&results->parts[4].u.tool_result.content,
           "{\"output\":\"{\\\"a.txt\\\": 1}\"}"); /* a result that is object text stays wrapped */
    str_is(&results->parts[5].u.text, "It should exist.");
    str_is(&conv->messages[6].parts[0].u.tool_result.tool_call_id,
           "ctxguard-gemini-6-0"); /* an orphan gets an id of its own */
    /* Generated ids are not written back. */
    size_t n;
    char *out = write_text(conv, CG_CONV_JSON_GEMINI, &n);
    cr_assert_null(strstr(out, "ctxguard-gemini-"), "%s", out);
    free(out);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, errors_name_the_json_path, .timeout = 10)
{
    expect_error("{\"contents\":[{\"role\":\"user\",\"parts\":[{\"text\":\"a\"},"
                 "{\"executableCode\":{\"code\":\"1\"}}]}]}",
                 CG_INVALID_ARGUMENT,
                 "$.contents[0].parts[1]: unsupported part kind \"executableCode\" (supported: "
                 "text, inlineData");
    expect_error("[{\"parts\":[{\"videoMetadata\":{}}]}]", CG_INVALID_ARGUMENT,
                 "$[0].parts[0]: unsupported part kind \"videoMetadata\"");
    expect_error("[{\"role\":\"bot\",\"parts\":[]}]", CG_INVALID_ARGUMENT,
                 "$[0].role: unknown role \"bot\"");
    expect_error("[{\"role\":\"system\",\"parts\":[]}]", CG_INVALID_ARGUMENT, "systemInstruction");
    expect_error(
        "[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\",\"args\":[1]}}]}]",
        CG_INVALID_ARGUMENT,
        "$[0].parts[0].functionCall.args: expected an object, got an "
        "array");
    expect_error("[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"args\":{}}}]}]",
                 CG_INVALID_ARGUMENT, "$[0].parts[0].functionCall.name: required");
    expect_error("[{\"parts\":[{\"functionResponse\":{\"name\":\"f\",\"response\":\"x\"}}]}]",
                 CG_INVALID_ARGUMENT,
                 "$[0].parts[0].functionResponse.response: expected an object");
    expect_error("[{\"parts\":[{\"inlineData\":{\"mimeType\":\"image/png\",\"data\":\"a*b\"}}]}]",
                 CG_INVALID_ARGUMENT, "$[0].parts[0].inlineData.data: not base64");
    expect_error("[{\"parts\":[{\"inline_data\":{\"mime_type\":\"image/png\"}}]}]",
                 CG_INVALID_ARGUMENT, "$[0].parts[0].inline_data.data: required");
    expect_error("[{\"parts\":[{\"text\":\"a\",\"fileData\":{\"fileUri\":\"x\"}}]}]",
                 CG_INVALID_ARGUMENT, "$[0].parts[0]: a part holds one of");
    expect_error("[{\"parts\":[{\"inlineData\":{},\"inline_data\":{}}]}]", CG_INVALID_ARGUMENT,
                 "$[0].parts[0]: both \"inlineData\" and \"inline_data\"");
    expect_error("[{\"parts\":[{\"functionCall\":{\"name\":\"f\"}}]}]", CG_INVALID_ARGUMENT,
                 "$[0].parts[0].functionCall: only \"model\" contents hold function calls");
    expect_error("[{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"name\":\"f\",\"id\":"
                 "\"ctxguard-gemini-1-1\"}}]}]",
                 CG_INVALID_ARGUMENT, "functionCall.id: the prefix");
    expect_error("[{\"parts\":[{\"text\":\"a\",\"thought\":\"yes\"}]}]", CG_INVALID_ARGUMENT,
                 "$[0].parts[0].thought: expected a boolean");
    expect_error("[{\"role\":\"user\"}]", CG_INVALID_ARGUMENT, "$[0].parts: required");
    expect_error("{\"model\":\"x\"}", CG_INVALID_ARGUMENT, "needs a \"contents\" array");
    expect_error("{\"contents\":[],\"systemInstruction\":{\"parts\":[{\"inlineData\":{\"mimeType\":"
                 "\"a\",\"data\":\"\"}}]}}",
                 CG_INVALID_ARGUMENT, "$.systemInstruction: parts[0]: system instruction parts");
    expect_error("{\"contents\":[],\"tools\":[{\"functionDeclarations\":[{\"name\":\"f\","
                 "\"parameters\":{},\"parametersJsonSchema\":{}}]}]}",
                 CG_INVALID_ARGUMENT, "$.tools[0].functionDeclarations[0]: \"parameters\" and");
    expect_error("\"hello\"", CG_INVALID_ARGUMENT, "expected an array of contents");
}

Test(conv_json_gemini, mixed_spellings_read_and_write_in_the_first_one, .timeout = 10)
{
    const char *mixed = "{\"system_instruction\":{\"parts\":[{\"text\":\"s\"}]},\"contents\":[{"
                        "\"parts\":[{\"inlineData\":{\"mime_type\":\"image/gif\",\"data\":"
                        "\"R0lGODlhAQABAAAAACw=\"}}]}]}";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, mixed, strlen(mixed));
    cr_assert(conv->snake_keys, "the first multi-word key was snake_case");
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    json_t *part = json_array_get(
        json_object_get(json_array_get(json_object_get(g, "contents"), 0), "parts"), 0);
    json_t *blob = json_object_get(part, "inline_data");
    cr_assert_not_null(blob, "written in one spelling");
    cr_assert_str_eq(json_string_value(json_object_get(blob, "mime_type")), "image/gif");
    cr_assert_not_null(json_object_get(g, "system_instruction"));
    json_decref(g);
    /* Through another format, the spelling is Gemini's default. */
    size_t len;
    char *chat = write_text(conv, CG_CONV_JSON_OPENAI, &len);
    struct cg_conv *from_chat = read_ok(CG_CONV_JSON_OPENAI, chat, len);
    g = write_json(from_chat, CG_CONV_JSON_GEMINI);
    part = json_array_get(
        json_object_get(json_array_get(json_object_get(g, "contents"), 0), "parts"), 0);
    cr_assert_not_null(json_object_get(part, "inlineData"));
    cr_assert_not_null(json_object_get(g, "systemInstruction"));
    json_decref(g);
    cg_conv_free(from_chat);
    free(chat);
    cg_conv_free(conv);
}

/* The function names of the calls and responses of a Gemini document, in order. */
static void calls_and_responses(json_t *contents, char *calls, char *responses, size_t cap)
{
    calls[0] = responses[0] = '\0';
    size_t i, k;
    json_t *c, *p;
    json_array_foreach(contents, i, c)
    {
        json_array_foreach(json_object_get(c, "parts"), k, p)
        {
            json_t *fc = json_object_get(p, "functionCall"),
                   *fr = json_object_get(p, "functionResponse");
            if (fc != NULL)
                snprintf(calls + strlen(calls), cap - strlen(calls), "%s/%s ",
                         json_string_value(json_object_get(fc, "name")),
                         json_string_value(json_object_get(fc, "id")));
            if (fr != NULL)
                snprintf(responses + strlen(responses), cap - strlen(responses), "%s/%s ",
                         json_string_value(json_object_get(fr, "name")),
                         json_string_value(json_object_get(fr, "id")));
        }
    }
}

Test(conv_json_gemini, openai_chat_written_as_gemini_reads_back, .timeout = 10)
{
    size_t len;
    char *json = fixture("openai_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    cr_assert_null(json_object_get(g, "model"), "the body of another format keeps its model");
    cr_assert_null(json_object_get(g, "temperature"), "unknown keys stay with their format");
    json_t *sys = json_object_get(json_object_get(g, "systemInstruction"), "parts");
    cr_assert_eq(json_array_size(sys), 2, "system and developer become the system instruction");
    json_t *contents = json_object_get(g, "contents");
    cr_assert_eq(json_array_size(contents), 5, "user, model, user (both results), model, user");
    char calls[256], responses[256];
    calls_and_responses(contents, calls, responses, sizeof calls);
    cr_assert_str_eq(calls, "read_file/call_a1 run_command/call_a2 ");
    cr_assert_str_eq(responses, "read_file/call_a1 run_command/call_a2 ",
                     "responses carry the name of their call");
    json_t *user = json_array_get(contents, 0);
    json_t *img = json_object_get(json_array_get(json_object_get(user, "parts"), 1), "inlineData");
    cr_assert_str_eq(json_string_value(json_object_get(img, "mimeType")), "image/png");
    json_t *r0 =
        json_object_get(json_array_get(json_object_get(json_array_get(contents, 2), "parts"), 0),
                        "functionResponse");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(r0, "response"), "output")),
                     "CFLAGS = -O2 -Wall\nall: ledger\n", "text results are wrapped");
    json_t *decls =
        json_object_get(json_array_get(json_object_get(g, "tools"), 0), "functionDeclarations");
    cr_assert_eq(json_array_size(decls), 2);
    cr_assert_not_null(json_object_get(json_array_get(decls, 0), "parametersJsonSchema"));
    struct cg_conv *back = through_gemini(conv);
    cr_assert_eq(back->n_messages, 6, "system, user, model, user (results), model, user");
    str_is(&back->messages[0].parts[1].u.text, "Prefer read-only tools.");
    const struct cg_message *res = &back->messages[3];
    cr_assert_eq(res->n_parts, 2);
    str_is(&res->parts[0].u.tool_result.tool_call_id, "call_a1");
    str_is(&res->parts[0].u.tool_result.content, "CFLAGS = -O2 -Wall\nall: ledger\n");
    str_is(&res->parts[1].u.tool_result.content, "cc -O2 -Wall -o ledger ledger.c\n");
    cr_assert_eq(back->messages[5].parts[0].u.text.len, 15, "a NUL survives");
    str_is(&back->messages[2].parts[1].u.tool_call.arguments, "{\"command\":\"make -n\"}");
    cg_conv_free(back);
    json_decref(g);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, anthropic_written_as_gemini_reads_back, .timeout = 10)
{
    size_t len;
    char *json = fixture("anthropic_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_ANTHROPIC, json, len);
    expect_write_error(CG_CONV_JSON_GEMINI, conv,
                       "tools[1]: the built-in tool \"web_search_20250305\" has no Gemini");
    conv->n_tools = 1; /* without Anthropic's own web search */
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    json_t *contents = json_object_get(g, "contents");
    json_t *model = json_object_get(json_array_get(contents, 1), "parts");
    cr_assert_eq(json_array_size(model), 3, "thought, text, call: redacted reasoning dropped");
    json_t *thought = json_array_get(model, 0);
    cr_assert(json_is_true(json_object_get(thought, "thought")));
    cr_assert_null(json_object_get(thought, "thoughtSignature"), "not a Gemini signature");
    json_t *results = json_object_get(json_array_get(contents, 2), "parts");
    cr_assert_eq(json_array_size(results), 3, "response, its image, then the text");
    json_t *fr = json_object_get(json_array_get(results, 0), "functionResponse");
    cr_assert_str_eq(json_string_value(json_object_get(fr, "name")), "read_file");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(fr, "response"), "error")),
                     "ENOENT");
    json_t *fd = json_object_get(json_array_get(results, 1), "fileData");
    cr_assert_str_eq(json_string_value(json_object_get(fd, "fileUri")),
                     "https://example.com/a.png");
    struct cg_conv *back = through_gemini(conv);
    const struct cg_message *r = &back->messages[3];
    str_is(&r->parts[0].u.tool_result.tool_call_id, "toolu_01");
    str_is(&r->parts[0].u.tool_result.content, "ENOENT");
    cr_assert(r->parts[0].u.tool_result.is_error);
    cr_assert_eq(r->parts[1].kind, CG_PART_IMAGE);
    str_is(&r->parts[2].u.text, "It should exist.");
    str_is(&back->messages[2].parts[2].u.tool_call.arguments,
           "{\"path\":\"logo.txt\",\"lines\":[1,2.5]}");
    cr_assert_eq(back->messages[1].parts[1].u.image.width, 3);
    cg_conv_free(back);
    json_decref(g);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, what_gemini_cannot_carry_is_an_error, .timeout = 10)
{
    const char *late =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, late, strlen(late));
    expect_write_error(CG_CONV_JSON_GEMINI, conv,
                       "messages[1]: a system message after the first turn");
    cg_conv_free(conv);
    const char *no_call =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\",\"tool_call_id\":"
        "\"c9\",\"content\":\"x\"}]";
    conv = read_ok(CG_CONV_JSON_OPENAI, no_call, strlen(no_call));
    expect_write_error(CG_CONV_JSON_GEMINI, conv,
                       "messages[1].parts[0].tool_result: a Gemini functionResponse needs "
                       "the function name (no earlier call has id \"c9\")");
    cg_conv_free(conv);
    const char *bad_args = "[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":"
                           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{oops\"}}]}]";
    conv = read_ok(CG_CONV_JSON_OPENAI, bad_args, strlen(bad_args));
    expect_write_error(CG_CONV_JSON_GEMINI, conv,
                       "messages[0].parts[0].tool_call.arguments: not a JSON object");
    cg_conv_free(conv);
}

Test(conv_json_gemini, a_conversation_changed_like_compress_writes_valid_output, .timeout = 10)
{
    size_t len;
    char *json = fixture("gemini_small.json", &len);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_GEMINI, json, len);
    struct cg_err err = {0};
    /* Replace a text that has a kept signature, and cut a tool result to plain text. */
    struct cg_part *said = &conv->messages[2].parts[1];
    cr_assert_eq(cg_conv_str(conv, "[shortened]", 11, &said->u.text, &err), CG_OK);
    struct cg_tool_result *r = &conv->messages[3].parts[1].u.tool_result;
    cr_assert_eq(cg_conv_str(conv, "[cut: 2 lines]", 14, &r->content, &err), CG_OK);
    /* Drop the model's answer, then put a summary before the first user content. */
    free(conv->messages[4].parts);
    memmove(&conv->messages[4], &conv->messages[5], 2 * sizeof conv->messages[0]);
    conv->n_messages--;
    insert_user_text(conv, 1, "Summary of earlier turns.");
    size_t n;
    char *out = write_text(conv, CG_CONV_JSON_GEMINI, &n);
    cr_assert_null(strstr(out, "Let me look."), "no stale text: %s", out);
    cr_assert_null(strstr(out, "spec v2"), "no stale result");
    cr_assert_null(strstr(out, "naïve"), "the dropped message is gone");
    struct cg_conv *back = read_ok(CG_CONV_JSON_GEMINI, out, n);
    cr_assert_eq(back->n_messages, conv->n_messages);
    str_is(&back->messages[1].parts[0].u.text, "Summary of earlier turns.");
    str_is(&back->messages[3].parts[1].u.text, "[shortened]");
    str_is(&back->messages[4].parts[1].u.tool_result.content, "[cut: 2 lines]");
    str_is(&back->messages[4].parts[1].u.tool_result.tool_call_id,
           "ctxguard-gemini-3-3"); /* still paired with the second read_file */
    cr_assert_eq(back->messages[5].role, CG_ROLE_USER);
    json_t *v = json_loadb(out, n, JSON_ALLOW_NUL, NULL);
    json_t *summary = json_array_get(json_object_get(v, "contents"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(summary, "role")), "user");
    json_decref(v);
    free(out);
    cg_conv_free(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, tool_messages_merge_into_one_user_content, .timeout = 10)
{
    /* Compress adds TOOL messages (error results) to any conversation, Gemini's too. */
    const char *chat =
        "[{\"role\":\"user\",\"content\":\"go\"},{\"role\":\"assistant\",\"tool_calls\":"
        "[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"arguments\":\"{}\"}},{\"id\":\"b\",\"type\":\"function\",\"function\":{"
        "\"name\":\"g\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":"
        "\"a\",\"content\":\"{\\\"n\\\": 1}\"},{\"role\":\"tool\",\"tool_call_id\":"
        "\"b\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"and?\"}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, chat, strlen(chat));
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    cr_assert(json_is_array(g), "a bare array stays one");
    cr_assert_eq(json_array_size(g), 3);
    json_t *parts = json_object_get(json_array_get(g, 2), "parts");
    cr_assert_eq(json_array_size(parts), 3, "two responses and the user's text");
    json_t *r0 =
        json_object_get(json_object_get(json_array_get(parts, 0), "functionResponse"), "response");
    cr_assert_eq(json_integer_value(json_object_get(r0, "n")), 1, "object results stay objects");
    json_t *r1 =
        json_object_get(json_object_get(json_array_get(parts, 1), "functionResponse"), "response");
    cr_assert_str_eq(json_string_value(json_object_get(r1, "output")), "");
    json_decref(g);
    cg_conv_free(conv);
}

/* ---- the generated conversations: chat -> Gemini -> chat ---- */

/* A chat document's texts and tool pairs, as one comparable JSON value: the text of every
 * message in order (content strings and text parts), and for each tool result the name and
 * arguments of its call and its content (parsed when it is JSON, so that spacing is no
 * difference). */
static json_t *texts_and_pairs(json_t *root)
{
    json_t *texts = json_array(), *pairs = json_array(), *calls = json_object();
    size_t i, k;
    json_t *m, *x;
    json_array_foreach(json_object_get(root, "messages"), i, m)
    {
        json_t *content = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        bool tool = strcmp(role, "tool") == 0;
        if (json_is_string(content) && !tool)
            json_array_append(texts, content);
        json_array_foreach(content, k, x)
        {
            if (!tool)
                json_array_append(texts, json_object_get(x, "text"));
        }
        json_array_foreach(json_object_get(m, "tool_calls"), k, x)
        {
            json_t *fn = json_object_get(x, "function");
            const char *args = json_string_value(json_object_get(fn, "arguments"));
            json_object_set_new(
                calls, json_string_value(json_object_get(x, "id")),
                json_pack("[O,o]", json_object_get(fn, "name"), json_loads(args, 0, NULL)));
        }
        if (strcmp(role, "tool") == 0) {
            const char *text = json_string_value(content);
            json_t *parsed = text != NULL ? json_loads(text, 0, NULL) : NULL;
            const char *id = json_string_value(json_object_get(m, "tool_call_id"));
            json_array_append_new(pairs, json_pack("[s,O,o]", id, json_object_get(calls, id),
                                                   parsed != NULL ? parsed : json_copy(content)));
        }
    }
    json_t *out = json_pack("{s:o,s:o}", "texts", texts, "pairs", pairs);
    json_decref(calls);
    return out;
}

/* One chat conversation through Gemini and back: texts and tool pairs kept. */
static void through_gemini_one(const char *path)
{
    size_t len;
    char *json = slurp(path, &len);
    cr_assert_not_null(json, "%s", path);
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, json, len);
    json_t *orig = json_loadb(json, len, 0, NULL);
    struct cg_conv *back = through_gemini(conv);
    json_t *chat = write_json(back, CG_CONV_JSON_OPENAI);
    json_t *want = texts_and_pairs(orig), *got = texts_and_pairs(chat);
    cr_assert(json_equal(want, got), "%s: chat -> Gemini -> chat keeps texts and pairs", path);
    cr_assert_eq(json_array_size(json_object_get(chat, "tools")),
                 json_array_size(json_object_get(orig, "tools")));
    /* Gemini written again from its own reading is the same document. */
    json_t *g1 = write_json(conv, CG_CONV_JSON_GEMINI), *g2 = write_json(back, CG_CONV_JSON_GEMINI);
    cr_assert(json_equal(g1, g2), "%s: Gemini round trip", path);
    json_decref(g1);
    json_decref(g2);
    json_decref(want);
    json_decref(got);
    json_decref(chat);
    json_decref(orig);
    cg_conv_free(back);
    cg_conv_free(conv);
    free(json);
}

Test(conv_json_gemini, sample_conversations_survive_gemini_and_back, .timeout = 120)
{
    cr_assert_geq(each_conversation(CG_TESTDATA_CONVERSATIONS, through_gemini_one), 20, "%s",
                  CG_TESTDATA_CONVERSATIONS);
    const char *extra = getenv("CG_EXTRA_CONVERSATIONS");
    if (extra != NULL && extra[0] != '\0')
        cr_assert_gt(each_conversation(extra, through_gemini_one), 0, "CG_EXTRA_CONVERSATIONS=%s",
                     extra);
}

/* One random change to buf (insert, delete, replace or duplicate a byte). */
static size_t mutate(char *buf, size_t n, size_t cap, unsigned *seed)
{
    static const char alphabet[] = "{}[]\":,0123456789aetrux\\ \xff\xc3";
    size_t at = n > 0 ? (size_t)rand_r(seed) % n : 0;
    char ch = alphabet[rand_r(seed) % (int)(sizeof alphabet - 1)];
    switch (rand_r(seed) % 4) {
    case 0:
        if (n + 1 < cap) {
            memmove(buf + at + 1, buf + at, n - at);
            buf[at] = ch;
            n++;
        }
        break;
    case 1:
        if (n > 0) {
            memmove(buf + at, buf + at + 1, n - at - 1);
            n--;
        }
        break;
    case 2:
        if (n > 0)
            buf[at] = ch;
        break;
    default:
        if (n > 0 && n + 1 < cap) {
            memmove(buf + at + 1, buf + at, n - at);
            n++;
        }
    }
    return n;
}

Test(conv_json_gemini, hostile_input_never_crashes, .timeout = 60)
{
    size_t len;
    char *json = fixture("gemini_small.json", &len);
    size_t cap = len + 64;
    char *buf = malloc(cap);
    unsigned seed = 4242;
    for (int round = 0; round < 3000; round++) {
        memcpy(buf, json, len);
        size_t n = len;
        for (int k = 1 + rand_r(&seed) % 4; k > 0; k--)
            n = mutate(buf, n, cap, &seed);
        struct cg_conv *conv = NULL;
        struct cg_err err = {0};
        cg_status st = cg_conv_json_read(CG_CONV_JSON_GEMINI, buf, n, NULL, &conv, &err);
        cr_assert(st == CG_OK || st == CG_INVALID_ARGUMENT || st == CG_RESOURCE_EXHAUSTED,
                  "status %d", st);
        cr_assert(st == CG_OK || err.msg[0] == '$', "errors start with a path: %s", err.msg);
        if (st != CG_OK)
            continue;
        for (int f = CG_CONV_JSON_OPENAI; f <= CG_CONV_JSON_GEMINI; f++) {
            char *out = NULL;
            size_t out_len;
            if (cg_conv_json_write(conv, (cg_conv_json_format)f, &out, &out_len, &err) == CG_OK &&
                f == CG_CONV_JSON_GEMINI) {
                struct cg_conv *again = NULL;
                cr_assert_eq(
                    cg_conv_json_read(CG_CONV_JSON_GEMINI, out, out_len, NULL, &again, &err), CG_OK,
                    "what the writer wrote reads: %s", err.msg);
                cg_conv_free(again);
            }
            free(out);
        }
        cg_conv_free(conv);
    }
    free(buf);
    free(json);
}

Test(conv_json_gemini, calls_of_the_current_turn_from_another_format_get_the_sentinel,
     .timeout = 10)
{
    /* Gemini 3 refuses a function call of the current turn without a thought signature;
     * Google documents a sentinel for history that comes from elsewhere. Earlier turns need
     * none, and a Gemini document's own calls are left as they came. */
    const char *chat =
        "[{\"role\":\"user\",\"content\":\"one\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"x\"},"
        "{\"role\":\"user\",\"content\":\"two\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"b\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"id\":\"c\",\"type\":"
        "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"b\",\"content\":\"y\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"z\"}]";
    struct cg_conv *conv = read_ok(CG_CONV_JSON_OPENAI, chat, strlen(chat));
    json_t *g = write_json(conv, CG_CONV_JSON_GEMINI);
    json_t *old = json_object_get(json_array_get(g, 1), "parts");
    /* Tool results and the next user text share a user content: the calls of now are at 3. */
    json_t *now = json_object_get(json_array_get(g, 3), "parts");
    cr_assert_null(json_object_get(json_array_get(old, 0), "thoughtSignature"), "an earlier turn");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(now, 0), "thoughtSignature")),
                     "skip_thought_signature_validator");
    cr_assert_null(json_object_get(json_array_get(now, 1), "thoughtSignature"),
                   "only the first call of a step carries it");
    /* Read back as Gemini and written again: the same document (no second sentinel). */
    char *text = json_dumps(g, JSON_COMPACT);
    struct cg_conv *back = read_ok(CG_CONV_JSON_GEMINI, text, strlen(text));
    json_t *again = write_json(back, CG_CONV_JSON_GEMINI);
    cr_assert(json_equal(g, again));
    json_decref(again);
    cg_conv_free(back);
    free(text);
    json_decref(g);
    cg_conv_free(conv);
}

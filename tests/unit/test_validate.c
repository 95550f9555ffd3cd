/* test_validate.c - ValidateContext's rules, dialect by dialect. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/validate.h"

static struct cg_conv *openai(const char *json)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, json, strlen(json), NULL, &conv, &err),
                 CG_OK, "%s", err.msg);
    return conv;
}

static struct cg_validate_result check(const struct cg_conv *conv, cg_dialect d)
{
    struct cg_validate_input in = {.conv = conv, .dialect = d};
    struct cg_validate_result r;
    struct cg_err err;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    cr_assert_eq(r.valid, r.errors == 0);
    return r;
}

/* The issue of this kind, or NULL. */
static const struct cg_issue *find(const struct cg_validate_result *r, cg_issue_kind kind)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->issues[i].kind == kind)
            return &r->issues[i];
    return NULL;
}

/* Asserts the severity of `kind` in conv under each dialect (0: no such issue). */
static void expect(const char *json, cg_issue_kind kind, int openai_sev, int anthropic_sev,
                   int google_sev, int generic_sev, int64_t message_index)
{
    struct cg_conv *conv = openai(json);
    const int want[] = {0, openai_sev, anthropic_sev, google_sev, generic_sev};
    for (int d = CG_DIALECT_OPENAI; d <= CG_DIALECT_GENERIC; d++) {
        struct cg_validate_result r = check(conv, (cg_dialect)d);
        const struct cg_issue *is = find(&r, kind);
        if (want[d] == 0) {
            cr_assert_null(is, "dialect %d: unexpected %s: %s", d, cg_validate_kind_name(kind),
                           is ? is->message : "");
        } else {
            cr_assert_not_null(is, "dialect %d: expected %s", d, cg_validate_kind_name(kind));
            cr_assert_eq(is->severity, want[d], "dialect %d: severity of %s", d,
                         cg_validate_kind_name(kind));
            cr_assert_eq(is->message_index, message_index, "%s", is->message);
        }
        cg_validate_result_free(&r);
    }
    cg_conv_free(conv);
}

#define E CG_SEVERITY_ERROR
#define W CG_SEVERITY_WARNING

#define CALL(id, name, args)                                                                       \
    "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":\"" name                      \
    "\",\"arguments\":\"" args "\"}}"

Test(validate, a_well_formed_conversation_has_no_issue_in_any_dialect, .timeout = 10)
{
    struct cg_conv *conv = openai(
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":"
        "\"u\"},{\"role\":\"assistant\",\"content\":\"a\",\"tool_calls\":[" CALL(
            "c1", "f",
            "{}") "," CALL("c2", "f",
                           "{\\\"x\\\":1}") "]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                                            "\"content\":"
                                            "\"r1\"},{\"role\":\"tool\",\"tool_call_id\":\"c2\","
                                            "\"content\":\"r2\"},{\"role\":\"user\","
                                            "\"content\":\"next\"},{\"role\":\"assistant\","
                                            "\"content\":\"done\"}],\"tools\":[{\"type\":"
                                            "\"function\",\"function\":{\"name\":\"f\"}}]}");
    for (int d = CG_DIALECT_OPENAI; d <= CG_DIALECT_GENERIC; d++) {
        struct cg_validate_result r = check(conv, (cg_dialect)d);
        cr_assert_eq(r.n, 0, "dialect %d: %s", d, r.n ? r.issues[0].message : "");
        cr_assert(r.valid);
        cg_validate_result_free(&r);
    }
    cg_conv_free(conv);
}

Test(validate, orphan_tool_results, .timeout = 10)
{
    expect("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"tool\",\"tool_call_id\":\"nope\","
           "\"content\":\"r\"}]",
           CG_ISSUE_ORPHAN_TOOL_RESULT, E, E, E, E, 1);
    struct cg_conv *conv = openai("[{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"r\"}]");
    struct cg_validate_result r = check(conv, CG_DIALECT_GENERIC);
    cr_assert_str_eq(find(&r, CG_ISSUE_ORPHAN_TOOL_RESULT)->tool_call_id, "x");
    cr_assert_eq(find(&r, CG_ISSUE_ORPHAN_TOOL_RESULT)->part_index, 0);
    cg_validate_result_free(&r);
    cg_conv_free(conv);
}

Test(validate, dangling_calls_and_late_results_depend_on_the_dialect, .timeout = 10)
{
    /* A user message between the call and its result. */
    const char *late =
        "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
        "\"tool_calls\":[" CALL(
            "c1", "f",
            "{}") "]},{\"role\":\"user\",\"content\":"
                  "\"hurry\"},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"r\"},"
                  "{\"role\":\"assistant\",\"content\":\"ok\"}]";
    expect(late, CG_ISSUE_DANGLING_TOOL_CALL, E, E, 0, 0, 1);
    expect(late, CG_ISSUE_ORPHAN_TOOL_RESULT, E, E, 0, 0, 3);
    /* No result at all before the next assistant message, or the end. */
    expect("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":[" CALL(
               "c1", "f", "{}") "]},{\"role\":\"assistant\",\"content\":\"x\"}]",
           CG_ISSUE_DANGLING_TOOL_CALL, E, E, E, E, 1);
    expect("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":[" CALL(
               "c1", "f", "{}") "]}]",
           CG_ISSUE_DANGLING_TOOL_CALL, E, E, E, E, 1);
}

Test(validate, role_order_rules, .timeout = 10)
{
    expect("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\",\"content\":\"a\"},"
           "{\"role\":\"user\",\"content\":\"u\"}]",
           CG_ISSUE_WRONG_FIRST_ROLE, 0, E, E, W, 1);
    expect("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]",
           CG_ISSUE_NON_ALTERNATING_ROLES, 0, E, E, W, 1);
    expect("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]",
           CG_ISSUE_SYSTEM_NOT_FIRST, 0, E, E, W, 1);
    /* Tool results and the user message after them are one user turn. */
    expect(
        "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":[" CALL(
            "c1", "f", "{}") "," CALL("c2", "f", "{}") "]},{\"role\":\"tool\",\"tool_call_"
                                                       "id\":\"c1\",\"content\":\"r\"},{\"role\":"
                                                       "\"tool\",\"tool_call_id\":\"c2\","
                                                       "\"content\":\"r\"},{\"role\":\"user\","
                                                       "\"content\":\"and?\"}]",
        CG_ISSUE_NON_ALTERNATING_ROLES, 0, 0, 0, 0, -1);
}

Test(validate, duplicates, .timeout = 10)
{
    const char *dup_call = "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
                           "\"tool_calls\":[" CALL("c1", "f", "{}") "," CALL(
                               "c1", "g", "{}") "]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                                                "\"content\":\"r\"}]";
    expect(dup_call, CG_ISSUE_DUPLICATE_TOOL_CALL_ID, E, E, E, E, 1);
    const char *dup_result = "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
                             "\"tool_calls\":[" CALL("c1", "f", "{}") "]},{\"role\":\"tool\","
                                                                      "\"tool_call_id\":\"c1\","
                                                                      "\"content\":\"r\"},"
                                                                      "{\"role\":\"tool\",\"tool_"
                                                                      "call_id\":\"c1\","
                                                                      "\"content\":\"again\"}]";
    expect(dup_result, CG_ISSUE_DUPLICATE_TOOL_RESULT, E, E, W, W, 3);
}

Test(validate, empty_messages, .timeout = 10)
{
    expect("[{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":\"a\"}]",
           CG_ISSUE_EMPTY_MESSAGE, W, E, E, W, 0);
    /* A final empty assistant message is Anthropic's prefill; OpenAI needs content. */
    expect("[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"content\":null}]",
           CG_ISSUE_EMPTY_MESSAGE, E, 0, E, W, 1);
}

Test(validate, tool_arguments_and_names, .timeout = 10)
{
    const char *bad =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\","
        "\"tool_calls\":[" CALL("c1", "f", "{oops") "," CALL(
            "c2", "zap", "[1]") "]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
                                "\"content\":\"r\"},{\"role\":\"tool\",\"tool_call_"
                                "id\":\"c2\",\"content\":\"r\"}],\"tools\":[{"
                                "\"type\":\"function\",\"function\":{\"name\":\"f\"}"
                                "}]}";
    expect(bad, CG_ISSUE_INVALID_TOOL_ARGUMENTS, W, E, E, W, 1);
    expect(bad, CG_ISSUE_UNKNOWN_TOOL, W, W, W, W, 1);
    struct cg_conv *conv = openai(bad);
    struct cg_validate_result r = check(conv, CG_DIALECT_ANTHROPIC);
    size_t invalid = 0;
    for (size_t i = 0; i < r.n; i++)
        invalid += r.issues[i].kind == CG_ISSUE_INVALID_TOOL_ARGUMENTS;
    cr_assert_eq(invalid, 2, "\"[1]\" is JSON but not an object");
    cg_validate_result_free(&r);
    conv->n_tools = 0; /* without definitions, names are not checked */
    r = check(conv, CG_DIALECT_OPENAI);
    cr_assert_null(find(&r, CG_ISSUE_UNKNOWN_TOOL));
    cg_validate_result_free(&r);
    cg_conv_free(conv);
}

Test(validate, parts_a_role_cannot_carry, .timeout = 10)
{
    struct cg_conv *conv = cg_conv_new(NULL);
    struct cg_err err;
    struct cg_message *m;
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(conv, "hi", 2, &p->u.text, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TOOL_CALL, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(conv, "c9", 2, &p->u.tool_call.id, &err), CG_OK);
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_ASSISTANT, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_IMAGE, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(conv, "x", 1, &p->u.text, &err), CG_OK);
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_SYSTEM, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_REASONING, &p, &err), CG_OK);
    for (int d = CG_DIALECT_OPENAI; d <= CG_DIALECT_GENERIC; d++) {
        struct cg_validate_result r = check(conv, (cg_dialect)d);
        size_t n = 0;
        for (size_t i = 0; i < r.n; i++)
            if (r.issues[i].kind == CG_ISSUE_PART_NOT_ALLOWED) {
                cr_assert_eq(r.issues[i].severity, E);
                n++;
            }
        cr_assert_eq(n, 3,
                     "tool call in a user message, image from the assistant, reasoning in "
                     "a system message");
        cg_validate_result_free(&r);
    }
    cg_conv_free(conv);
}

Test(validate, headroom_and_window, .timeout = 10)
{
    struct cg_conv *conv = openai("[{\"role\":\"user\",\"content\":\"u\"}]");
    struct cg_validate_input in = {.conv = conv,
                                   .dialect = CG_DIALECT_OPENAI,
                                   .have_counts = true,
                                   .prompt_tokens = 900,
                                   .context_window = 1000,
                                   .reserved_output_tokens = 200};
    struct cg_validate_result r;
    struct cg_err err;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    const struct cg_issue *is = find(&r, CG_ISSUE_HEADROOM_BELOW_RESERVE);
    cr_assert_not_null(is);
    cr_assert_eq(is->severity, E);
    cr_assert_eq(is->message_index, -1);
    cg_validate_result_free(&r);
    in.dialect = CG_DIALECT_GOOGLE;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    cr_assert_eq(find(&r, CG_ISSUE_HEADROOM_BELOW_RESERVE)->severity, W);
    cr_assert(r.valid);
    cg_validate_result_free(&r);
    in.prompt_tokens = 1001;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    cr_assert_not_null(find(&r, CG_ISSUE_EXCEEDS_CONTEXT_WINDOW));
    cr_assert_null(find(&r, CG_ISSUE_HEADROOM_BELOW_RESERVE));
    cr_assert_not(r.valid);
    cg_validate_result_free(&r);
    in.prompt_tokens = 900;
    in.reserved_output_tokens = 0;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    cr_assert_eq(r.n, 0, "reserve 0: no headroom check");
    cg_validate_result_free(&r);
    cg_conv_free(conv);
}

Test(validate, issues_come_in_message_order_and_are_capped, .timeout = 30)
{
    /* A dangling call (found at the end) sorts before a later orphan. */
    struct cg_conv *conv = openai(
        "[{\"role\":\"user\",\"content\":\"u\"},{\"role\":\"assistant\",\"tool_calls\":[" CALL(
            "c1", "f", "{}") "]},{\"role\":\"user\",\"content\":\"v\"},{\"role\":\"tool\","
                             "\"tool_call_id\":\"zz\",\"content\":\"r\"}]");
    struct cg_validate_input in = {.conv = conv,
                                   .dialect = CG_DIALECT_GENERIC,
                                   .have_counts = true,
                                   .prompt_tokens = 5000,
                                   .context_window = 10};
    struct cg_validate_result r;
    struct cg_err err;
    cr_assert_eq(cg_validate(&in, &r, &err), CG_OK);
    for (size_t i = 1; i < r.n; i++) {
        uint64_t a = (uint64_t)r.issues[i - 1].message_index,
                 b = (uint64_t)r.issues[i].message_index;
        cr_assert_leq(a, b, "issue %zu out of order", i);
    }
    cr_assert_eq(r.issues[r.n - 1].kind, CG_ISSUE_EXCEEDS_CONTEXT_WINDOW,
                 "whole-conversation last");
    cg_validate_result_free(&r);
    cg_conv_free(conv);

    conv = cg_conv_new(NULL);
    for (int i = 0; i < 5000; i++) {
        struct cg_message *m;
        struct cg_part *p;
        cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_TOOL, &m, &err), CG_OK);
        cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TOOL_RESULT, &p, &err), CG_OK);
        cr_assert_eq(cg_conv_str(conv, "orphan", 6, &p->u.tool_result.tool_call_id, &err), CG_OK);
    }
    r = check(conv, CG_DIALECT_OPENAI);
    cr_assert_eq(r.n, CG_VALIDATE_MAX_ISSUES);
    cr_assert(r.truncated);
    cr_assert_geq(r.errors, 5000);
    cr_assert_not(r.valid);
    cg_validate_result_free(&r);
    cg_conv_free(conv);
}

Test(validate, dialect_resolution, .timeout = 10)
{
    struct cg_model_info claude;
    cg_models_lookup("claude-sonnet-4", &claude);
    cr_assert_eq(cg_validate_dialect(CG_DIALECT_GOOGLE, CG_CONV_ORIGIN_OPENAI, &claude),
                 CG_DIALECT_GOOGLE);
    cr_assert_eq(cg_validate_dialect(0, CG_CONV_ORIGIN_OPENAI, &claude), CG_DIALECT_OPENAI);
    cr_assert_eq(cg_validate_dialect(0, CG_CONV_ORIGIN_STRUCTURED, &claude), CG_DIALECT_ANTHROPIC);
    cr_assert_eq(cg_validate_dialect(0, CG_CONV_ORIGIN_STRUCTURED, NULL), CG_DIALECT_GENERIC);
    cr_assert_str_eq(cg_validate_kind_name(CG_ISSUE_PART_NOT_ALLOWED), "PART_NOT_ALLOWED");
}

static bool is_json_name(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".json") == 0;
}

/* Every *.json conversation of dir is valid in every dialect; returns how many there are. */
static int all_valid(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no conversations at %s", dir);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (!is_json_name(e->d_name))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        cr_assert_not_null(f, "%s", path);
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        rewind(f);
        char *json = malloc((size_t)len + 1);
        cr_assert_eq(fread(json, 1, (size_t)len, f), (size_t)len);
        json[len] = '\0';
        fclose(f);
        struct cg_conv *conv = openai(json);
        for (int dl = CG_DIALECT_OPENAI; dl <= CG_DIALECT_GENERIC; dl++) {
            struct cg_validate_result r = check(conv, (cg_dialect)dl);
            cr_assert(r.valid, "%s dialect %d: %s", path, dl, r.n ? r.issues[0].message : "");
            cg_validate_result_free(&r);
        }
        cg_conv_free(conv);
        free(json);
        n++;
    }
    closedir(d);
    return n;
}

/* The conversations that tests/support/gen_conversations.py writes at build time
 * (cmake/testdata.cmake), and those of $CG_EXTRA_CONVERSATIONS when it names a directory. */
Test(validate, sample_conversations_are_valid, .timeout = 60)
{
    cr_assert_geq(all_valid(CG_TESTDATA_CONVERSATIONS), 20, "%s", CG_TESTDATA_CONVERSATIONS);
    const char *extra = getenv("CG_EXTRA_CONVERSATIONS");
    if (extra != NULL && extra[0] != '\0')
        cr_assert_gt(all_valid(extra), 0, "CG_EXTRA_CONVERSATIONS=%s", extra);
}

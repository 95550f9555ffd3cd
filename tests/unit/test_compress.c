/* test_compress.c - each step of the cascade on small hand-made conversations. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/compress.h"
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

static char *to_json(const struct cg_conv *conv)
{
    char *out;
    size_t len;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, CG_CONV_JSON_OPENAI, &out, &len, &err), CG_OK, "%s",
                 err.msg);
    return out;
}

struct fixture {
    struct cg_compress_count_state state;
    struct cg_compress_input in;
    struct cg_compress_policy p;
    struct cg_model_info model;
};

static void setup(struct fixture *f, const struct cg_conv *conv, int64_t window)
{
    memset(f, 0, sizeof *f);
    f->state.profile = CG_PROFILE_OPENAI;
    cg_models_lookup("claude-sonnet-4", &f->model);
    f->model.takes_reasoning = false;
    f->in.conv = conv;
    f->in.model = &f->model;
    f->in.dialect = CG_DIALECT_OPENAI;
    f->in.context_window = window;
    cg_compress_counter_init(&f->in.counter, &f->state, conv);
    cg_compress_policy_defaults(&f->p, CG_STRATEGY_SUMMARIZING, NULL);
    f->p.reserved_output_tokens = 0;
}

static const struct cg_compress_layer_result *layer(const struct cg_compress_result *r,
                                                    cg_compress_layer l)
{
    for (size_t i = 0; i < r->n_layers; i++)
        if (r->layers[i].layer == l)
            return &r->layers[i];
    return NULL;
}

static char *repeat(const char *unit, size_t times)
{
    size_t u = strlen(unit);
    char *s = malloc(u * times + 1);
    for (size_t i = 0; i < times; i++)
        memcpy(s + i * u, unit, u);
    s[u * times] = '\0';
    return s;
}

Test(compress, under_the_trigger_nothing_changes, .timeout = 10)
{
    const char *j = "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\","
                    "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"hello\"}]";
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 100000);
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_not(r.triggered);
    cr_assert(r.target_reached);
    cr_assert_eq(r.tokens_before, r.tokens_after);
    char *a = to_json(c), *b = to_json(r.conv);
    cr_assert_str_eq(a, b);
    cr_assert_eq(layer(&r, CG_LAYER_TOOL_RESULT)->outcome, CG_OUTCOME_NOT_NEEDED);
    free(a);
    free(b);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

/* Several calls of one assistant message without results: each gets its error result, in
 * call order, right after the message (the repair once read the calls from the result it had
 * just added: a heap overflow found by fuzz_compress). */
Test(compress, every_dangling_call_of_a_message_is_answered, .timeout = 10)
{
    char j[4096];
    int n = snprintf(j, sizeof j,
                     "[{\"role\":\"user\",\"content\":\"go\"},"
                     "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[");
    for (int k = 0; k < 20; k++)
        n += snprintf(j + n, sizeof j - (size_t)n,
                      "%s{\"id\":\"d%d\",\"type\":\"function\",\"function\":{\"name\":\"ls\","
                      "\"arguments\":\"{}\"}}",
                      k ? "," : "", k);
    snprintf(j + n, sizeof j - (size_t)n,
             "]},{\"role\":\"tool\",\"tool_call_id\":\"d3\",\"content\":\"three\"},"
             "{\"role\":\"user\",\"content\":\"next\"}]");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 100000);
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    /* user, assistant, 19 error results, the real one for d3, user */
    cr_assert_eq(r.conv->n_messages, 23);
    int k = 0;
    for (size_t i = 2; i < 21; i++, k++) {
        if (k == 3)
            k++;
        const struct cg_part *p = &r.conv->messages[i].parts[0];
        char id[16];
        snprintf(id, sizeof id, "d%d", k);
        cr_assert_eq(p->kind, CG_PART_TOOL_RESULT);
        cr_assert(p->u.tool_result.is_error);
        cr_assert_eq(p->u.tool_result.tool_call_id.len, strlen(id));
        cr_assert_eq(memcmp(p->u.tool_result.tool_call_id.ptr, id, strlen(id)), 0, "message %zu",
                     i);
    }
    cr_assert_eq(r.conv->messages[21].parts[0].u.tool_result.tool_call_id.ptr[1], '3');
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, normalize_repairs_pairs_strips_checkpoints_and_merges, .timeout = 10)
{
    const char *j =
        "[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"},"
        "{\"role\":\"assistant\",\"content\":\"x<checkpoint_id>42</checkpoint_id>y\","
        "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"ls\","
        "\"arguments\":\"{}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"ls\","
        "\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"old\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"new\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"zz\",\"content\":\"orphan\"},"
        "{\"role\":\"user\",\"content\":\"<checkpoint_id>7</checkpoint_id> mine\"}]";
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 100000);
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    char *out = to_json(r.conv);
    cr_assert_null(strstr(out, "orphan"), "%s", out);
    cr_assert_null(strstr(out, "\"old\""), "%s", out);
    cr_assert_not_null(strstr(out, "\"new\""), "%s", out);
    cr_assert_not_null(strstr(out, "\"xy\""), "%s", out);
    /* User text is never touched, checkpoint tag or not. */
    cr_assert_not_null(strstr(out, "<checkpoint_id>7</checkpoint_id> mine"), "%s", out);
    cr_assert_not_null(strstr(out, "no result was recorded"), "%s", out);
    cr_assert_eq(r.conv->messages[0].role, CG_ROLE_USER);
    cr_assert_eq(r.conv->messages[0].n_parts, 2, "the two user messages are merged");
    cr_assert_eq(r.conv->messages[1].role, CG_ROLE_ASSISTANT);
    cr_assert_eq(r.source_indexes[0], 0);
    cr_assert_geq(r.n_warnings, 3);
    free(out);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, reasoning_dropped_only_for_models_that_do_not_take_it, .timeout = 10)
{
    const char *j = "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
                    "\"content\":\"a\",\"reasoning_content\":\"secret thoughts\"}]";
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 100000);
    struct cg_compress_result r;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
    char *out = to_json(r.conv);
    cr_assert_null(strstr(out, "secret thoughts"), "%s", out);
    free(out);
    cg_compress_result_free(&r);
    f.model.takes_reasoning = true;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
    out = to_json(r.conv);
    cr_assert_not_null(strstr(out, "secret thoughts"), "%s", out);
    free(out);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, responses_items_lose_their_ids_with_their_reasoning, .timeout = 10)
{
    /* OpenAI refuses a function_call or message item whose id says a reasoning item came with
     * it when that reasoning item is not sent: when a layer removes the reasoning, the turn's
     * items go without ids; a turn that keeps its reasoning keeps them. */
    const char *j =
        "[{\"role\":\"user\",\"content\":\"q\"},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\","
        "\"text\":\"secret thoughts\"}]},"
        "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"c1\",\"name\":\"f\","
        "\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"ok\"}]";
    struct cg_conv *c = NULL;
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_RESPONSES, j, strlen(j), NULL, &c, NULL), CG_OK);
    struct fixture f;
    setup(&f, c, 100000);
    for (int takes = 0; takes <= 1; takes++) {
        f.model.takes_reasoning = takes == 1;
        struct cg_compress_result r;
        cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
        char *out;
        size_t len;
        cr_assert_eq(cg_conv_json_write(r.conv, CG_CONV_JSON_RESPONSES, &out, &len, NULL), CG_OK);
        if (takes) {
            cr_assert_not_null(strstr(out, "\"id\":\"fc_1\""), "%s", out);
            cr_assert_not_null(strstr(out, "\"id\":\"rs_1\""), "%s", out);
        } else {
            cr_assert_null(strstr(out, "secret thoughts"), "%s", out);
            cr_assert_null(strstr(out, "fc_1"), "the id is gone with the reasoning: %s", out);
            cr_assert_not_null(strstr(out, "\"call_id\":\"c1\""), "the call stays: %s", out);
        }
        free(out);
        cg_compress_result_free(&r);
    }
    cg_conv_free(c);
}

Test(compress, json_results_stay_valid_json_with_counts, .timeout = 10)
{
    /* An object of 500 keys and an array of 2,000 elements. */
    size_t cap = 200000, n = 0;
    char *obj = malloc(cap);
    n += (size_t)snprintf(obj + n, cap - n, "{");
    for (int i = 0; i < 500; i++)
        n += (size_t)snprintf(obj + n, cap - n, "%s\"key%d\":\"%0120d\"", i ? "," : "", i, i);
    snprintf(obj + n, cap - n, "}");
    char *out;
    size_t len;
    cr_assert(cg_compress_tool_text(obj, strlen(obj), 8000, NULL, &out, &len));
    cr_assert(cg_conv_json_is_valid(out, len, true), "%s", out);
    cr_assert_not_null(strstr(out, "\"key0\""));
    cr_assert_not_null(strstr(out, "\"key2\""));
    cr_assert_null(strstr(out, "\"key3\""));
    cr_assert_not_null(strstr(out, "of 500 keys"), "%s", out);
    cr_assert_lt(len, 1000);
    free(out);
    n = 0;
    n += (size_t)snprintf(obj + n, cap - n, "[");
    for (int i = 0; i < 2000; i++)
        n +=
            (size_t)snprintf(obj + n, cap - n, "%s{\"id\":%d,\"v\":\"abcdefgh\"}", i ? "," : "", i);
    snprintf(obj + n, cap - n, "]");
    cr_assert(cg_compress_tool_text(obj, strlen(obj), 8000, NULL, &out, &len));
    cr_assert(cg_conv_json_is_valid(out, len, false), "%s", out);
    cr_assert_not_null(strstr(out, "of 2000 elements"), "%s", out);
    free(out);
    /* Plain text: the head and a size marker. */
    char *text = repeat("line of log output\n", 2000);
    cr_assert(cg_compress_tool_text(text, strlen(text), 8000, NULL, &out, &len));
    cr_assert_eq(strncmp(out, text, 8000), 0);
    cr_assert_not_null(strstr(out, "truncated, 8000 of 38000 bytes shown"), "%s", out + 8000);
    free(out);
    cr_assert_not(cg_compress_tool_text("short", 5, 8000, NULL, &out, &len));
    free(text);
    free(obj);
}

/* A conversation of `turns` turns, each with a tool call whose result is `result_size`
 * bytes, as OpenAI JSON. */
static char *session(int turns, size_t result_size, const char *tool)
{
    size_t cap = (size_t)turns * (result_size + 1200) + 256, n = 0;
    char *s = malloc(cap);
    char *blob = repeat("abc ", result_size / 4);
    n += (size_t)snprintf(s + n, cap - n, "[{\"role\":\"system\",\"content\":\"sys\"}");
    for (int t = 0; t < turns; t++)
        n += (size_t)snprintf(
            s + n, cap - n,
            ",{\"role\":\"user\",\"content\":\"question %d\"},"
            "{\"role\":\"assistant\",\"content\":\"thinking about %d\",\"tool_calls\":[{\"id\":"
            "\"c%d\",\"type\":\"function\",\"function\":{\"name\":\"%s\",\"arguments\":"
            "\"{\\\"path\\\":\\\"f%d\\\",\\\"content\\\":\\\"%.*s\\\"}\"}}]},"
            "{\"role\":\"tool\",\"tool_call_id\":\"c%d\",\"content\":\"%s\"},"
            "{\"role\":\"assistant\",\"content\":\"answer %d\"}",
            t, t, t, tool, t, (int)(result_size < 300 ? result_size : 300), blob, t, blob, t);
    snprintf(s + n, cap - n, "]");
    free(blob);
    return s;
}

Test(compress, tool_result_and_write_compaction_reach_the_target, .timeout = 20)
{
    char *j = session(6, 20000, "write_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 30000);
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert(r.triggered);
    cr_assert_eq(layer(&r, CG_LAYER_OFFLOAD)->outcome, CG_OUTCOME_SKIPPED);
    const struct cg_compress_layer_result *l1 = layer(&r, CG_LAYER_TOOL_RESULT);
    cr_assert_eq(l1->outcome, CG_OUTCOME_APPLIED);
    cr_assert_eq(l1->messages_affected, 6);
    cr_assert_lt(l1->tokens_after, l1->tokens_before);
    cr_assert_eq(r.tokens_before, r.layers[0].tokens_before);
    char *out = to_json(r.conv);
    cr_assert_not_null(strstr(out, "truncated, 8000 of 20000 bytes shown"));
    free(out);
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
}

Test(compress, offload_makes_artifacts_with_previews, .timeout = 20)
{
    char *j = session(3, 30000, "read_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 20000);
    f.in.offload = true;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(layer(&r, CG_LAYER_OFFLOAD)->outcome, CG_OUTCOME_APPLIED);
    cr_assert_eq(r.n_artifacts, 3);
    for (size_t i = 0; i < 3; i++) {
        const struct cg_compress_artifact *a = &r.artifacts[i];
        cr_assert_eq(a->content_len, 30000);
        cr_assert_eq(a->preview_bytes, 4096);
        cr_assert_eq(a->source_index, 3 + 4 * (int64_t)i);
        cr_assert_eq(a->output_index, a->source_index);
        cr_assert_str_eq(a->tool_name, "read_file");
        const struct cg_tool_result *tr =
            &r.conv->messages[a->output_index].parts[a->part_index].u.tool_result;
        cr_assert_eq(memcmp(tr->content.ptr, a->content, 4096), 0);
        cr_assert_lt(tr->content.len, 4300);
    }
    cr_assert_eq(layer(&r, CG_LAYER_TOOL_RESULT)->outcome, CG_OUTCOME_NOT_NEEDED);
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
}

Test(compress, trim_boundary_is_monotonic_with_hysteresis, .timeout = 30)
{
    /* TRIMMING over a growing session: the boundary never moves back, and it stays frozen
     * for several turns after each move. */
    int64_t boundary = 0, moves = 0, calls = 0;
    for (int turns = 4; turns <= 40; turns++) {
        char *j = session(turns, 2000, "read_file");
        struct cg_conv *c = openai(j);
        struct fixture f;
        setup(&f, c, 12000);
        cg_compress_policy_defaults(&f.p, CG_STRATEGY_TRIMMING, NULL);
        f.p.reserved_output_tokens = 0;
        f.in.trim_boundary = boundary;
        struct cg_compress_result r;
        struct cg_err err = {0};
        cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
        cr_assert_geq(r.boundary_after, boundary);
        cr_assert_leq(r.tokens_after, r.trigger_tokens, "turn %d", turns);
        if (r.boundary_moved) {
            moves++;
            cr_assert_gt(r.cache_tokens_invalidated, 0);
            cr_assert_leq(r.tokens_after, r.target_tokens);
        } else {
            cr_assert_eq(r.cache_tokens_invalidated, 0);
        }
        /* Before the boundary assistant and tool content is trimmed; user text stays. */
        for (size_t i = 0; i < r.conv->n_messages; i++) {
            const struct cg_message *m = &r.conv->messages[i];
            if (r.source_indexes[i] < 0 || r.source_indexes[i] >= r.boundary_after)
                continue;
            if (m->role == CG_ROLE_TOOL) {
                char want[48];
                snprintf(want, sizeof want, "[trimmed: input %lld]",
                         (long long)r.source_indexes[i]);
                cr_assert_str_eq(m->parts[0].u.tool_result.content.ptr, want);
            }
            if (m->role == CG_ROLE_USER)
                cr_assert_eq(strncmp(m->parts[0].u.text.ptr, "question", 8), 0);
        }
        boundary = r.boundary_after;
        calls++;
        cg_compress_result_free(&r);
        cg_conv_free(c);
        free(j);
    }
    cr_assert_gt(moves, 0);
    cr_assert_lt(moves * 3, calls, "%lld moves in %lld calls", (long long)moves, (long long)calls);
}

struct fake_summary {
    const char *text;
    int calls;
    size_t from, to;
};

static cg_status fake_summarize(void *ctx, const struct cg_conv *conv, size_t from, size_t to,
                                int64_t target_tokens, char **out, struct cg_err *err)
{
    struct fake_summary *fs = ctx;
    (void)conv;
    (void)target_tokens;
    fs->calls++;
    fs->from = from;
    fs->to = to;
    if (fs->text == NULL) {
        snprintf(err->msg, sizeof err->msg, "model timed out");
        return CG_UNAVAILABLE;
    }
    *out = strdup(fs->text);
    return CG_OK;
}

Test(compress, window_replaces_whole_turns_by_a_summary_naming_them, .timeout = 20)
{
    char *j = session(30, 1000, "read_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 8000);
    f.p.keep_last_assistant = 1000; /* no trimming: the window must do it */
    f.p.max_escalation_passes = 0;
    struct cg_compress_result r;
    struct cg_err err = {0};
    /* Without a summarizer no turn goes: the window is SKIPPED, every message stays. */
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(layer(&r, CG_LAYER_WINDOW)->outcome, CG_OUTCOME_SKIPPED);
    cr_assert_eq(r.messages_after, r.messages_before);
    cg_compress_result_free(&r);

    struct fake_summary fs = {.text = "the user asked questions; files were read"};
    f.in.summarize = fake_summarize;
    f.in.summarize_ctx = &fs;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    const struct cg_compress_layer_result *w = layer(&r, CG_LAYER_WINDOW);
    cr_assert_eq(w->outcome, CG_OUTCOME_APPLIED, "%s", w->detail);
    cr_assert(r.target_reached, "%lld > %lld", (long long)r.tokens_after,
              (long long)r.target_tokens);
    cr_assert_eq(fs.calls, 1);
    /* System and the first turn (primers 2 reach to the next turn start) stay; the summary
     * rides on the first kept user message after them and names what it replaced. */
    cr_assert_eq(r.source_indexes[0], 0);
    cr_assert_eq(r.source_indexes[1], 1);
    cr_assert_eq(r.source_indexes[r.messages_after - 1], 120);
    cr_assert(r.has_summary);
    cr_assert_eq(r.summary_first, 5);
    cr_assert_eq(r.summary_output_index, 5);
    cr_assert_eq(r.source_indexes[5], r.summary_last + 1);
    char head[96];
    snprintf(head, sizeof head, "[ctxguard summary of input messages 5-%lld]\n",
             (long long)r.summary_last);
    const struct cg_message *m = &r.conv->messages[r.summary_output_index];
    cr_assert_eq(m->role, CG_ROLE_USER);
    cr_assert_eq(strncmp(m->parts[0].u.text.ptr, head, strlen(head)), 0, "%s",
                 m->parts[0].u.text.ptr);
    cr_assert_not_null(strstr(m->parts[0].u.text.ptr, fs.text));
    cr_assert_eq(layer(&r, CG_LAYER_SUMMARIZE)->outcome, CG_OUTCOME_NOT_NEEDED);
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
}

Test(compress, summary_layer_skipped_without_a_summarizer_and_transactional, .timeout = 20)
{
    char *j = session(30, 1000, "read_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 8000);
    f.p.keep_last_assistant = 1000;
    f.p.recents = 100; /* the window cannot reach the target */
    f.p.max_escalation_passes = 0;
    f.p.disabled_layers = 1u << CG_LAYER_WINDOW; /* L5 on its own */
    struct cg_compress_result r;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
    cr_assert_eq(layer(&r, CG_LAYER_SUMMARIZE)->outcome, CG_OUTCOME_SKIPPED);
    int64_t without = r.tokens_after;
    cg_compress_result_free(&r);

    struct fake_summary fs = {.text = NULL};
    f.in.summarize = fake_summarize;
    f.in.summarize_ctx = &fs;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
    const struct cg_compress_layer_result *s = layer(&r, CG_LAYER_SUMMARIZE);
    cr_assert_eq(s->outcome, CG_OUTCOME_FAILED);
    cr_assert_not_null(strstr(s->detail, "model timed out"), "%s", s->detail);
    cr_assert_eq(r.tokens_after, without, "a failed layer leaves nothing");
    cr_assert_not(r.has_summary);
    cg_compress_result_free(&r);

    fs.text = "the user asked 30 questions; files f0..f29 were read";
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, NULL), CG_OK);
    cr_assert_eq(layer(&r, CG_LAYER_SUMMARIZE)->outcome, CG_OUTCOME_APPLIED);
    cr_assert(r.has_summary);
    cr_assert_lt(r.tokens_after, without);
    cr_assert_lt(r.summary_tokens, r.summary_replaced_tokens);
    const struct cg_message *m = &r.conv->messages[r.summary_output_index];
    cr_assert_eq(m->role, CG_ROLE_USER);
    cr_assert_not_null(strstr(m->parts[0].u.text.ptr, fs.text));
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
}

Test(compress, bad_policy_and_input_name_the_field, .timeout = 10)
{
    struct cg_conv *c = openai("[{\"role\":\"user\",\"content\":\"q\"}]");
    struct fixture f;
    setup(&f, c, 1000);
    struct cg_compress_result r;
    struct cg_err err = {0};
    f.p.target_ratio = 0.9;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "policy.target_ratio"), "%s", err.msg);
    setup(&f, c, 1000);
    f.p.disabled_layers = 1u << CG_LAYER_NORMALIZE;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "disabled_layers"), "%s", err.msg);
    setup(&f, c, 1000);
    f.in.trim_boundary = 99;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK);
    cr_assert_eq(r.boundary_after, 1);
    cr_assert_eq(r.warnings[0].code == CG_CWARN_BOUNDARY_ADJUSTED ||
                     r.warnings[1].code == CG_CWARN_BOUNDARY_ADJUSTED,
                 true);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, empty_conversation_is_fine, .timeout = 10)
{
    /* Found by fuzz_compress: a layer copying an empty list. */
    struct cg_conv *c = openai("[]");
    struct fixture f;
    setup(&f, c, 1000);
    f.in.force = true;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(r.messages_after, 0);
    cr_assert_eq(r.tokens_after, r.tokens_before);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, write_arguments_become_a_preview_and_stay_json, .timeout = 10)
{
    char *body = repeat("int main(void) { return 0; }\n", 400);
    size_t cap = strlen(body) + 1024;
    char *j = malloc(cap);
    snprintf(j, cap,
             "[{\"role\":\"user\",\"content\":\"write it\"},{\"role\":\"assistant\",\"tool_calls\":"
             "[{\"id\":\"w1\",\"type\":\"function\",\"function\":{\"name\":\"write_file\","
             "\"arguments\":\"{\\\"path\\\":\\\"m.c\\\",\\\"content\\\":\\\"%s\\\"}\"}},"
             "{\"id\":\"r1\",\"type\":\"function\",\"function\":{\"name\":\"read_file\","
             "\"arguments\":\"{\\\"path\\\":\\\"%.*s\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"w1\",\"content\":\"ok\"},"
             "{\"role\":\"tool\",\"tool_call_id\":\"r1\",\"content\":\"ok\"},"
             "{\"role\":\"assistant\",\"content\":\"done\"}]",
             body, 300, body);
    /* The JSON above has raw newlines inside strings: use \n escapes instead. */
    for (char *p = j; *p; p++)
        if (*p == '\n')
            *p = ' ';
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 4000);
    f.p.keep_last_assistant = 1000;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    const struct cg_compress_layer_result *l2 = layer(&r, CG_LAYER_WRITE_COMPACTION);
    cr_assert_eq(l2->outcome, CG_OUTCOME_APPLIED, "%s", l2->detail);
    cr_assert_eq(l2->messages_affected, 1);
    const struct cg_tool_call *w = &r.conv->messages[1].parts[0].u.tool_call;
    const struct cg_tool_call *rd = &r.conv->messages[1].parts[1].u.tool_call;
    cr_assert(cg_conv_json_is_valid(w->arguments.ptr, w->arguments.len, true), "%s",
              w->arguments.ptr);
    cr_assert_not_null(strstr(w->arguments.ptr, "written to disk"), "%s", w->arguments.ptr);
    cr_assert_not_null(strstr(w->arguments.ptr, "\"path\":\"m.c\""), "%s", w->arguments.ptr);
    cr_assert_lt(w->arguments.len, 300);
    /* Only the write tools: read_file's argument is as it was. */
    cr_assert_gt(rd->arguments.len, 300);
    cr_assert(r.target_reached);
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
    free(body);
}

Test(compress, anthropic_dialect_gets_a_user_turn_first, .timeout = 10)
{
    struct cg_conv *c = openai("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"assistant\","
                               "\"content\":\"I start\"},{\"role\":\"user\",\"content\":\"u\"}]");
    struct fixture f;
    setup(&f, c, 10000);
    f.in.dialect = CG_DIALECT_ANTHROPIC;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(r.conv->n_messages, 4);
    cr_assert_eq(r.conv->messages[1].role, CG_ROLE_USER);
    cr_assert_eq(r.source_indexes[1], -1);
    cr_assert_eq(r.source_indexes[2], 1);
    bool repaired = false;
    for (size_t i = 0; i < r.n_warnings; i++)
        repaired |= r.warnings[i].code == CG_CWARN_INPUT_REPAIRED;
    cr_assert(repaired);
    cg_compress_result_free(&r);
    /* OpenAI takes an assistant first: nothing is added. */
    f.in.dialect = CG_DIALECT_OPENAI;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(r.conv->n_messages, 3);
    cg_compress_result_free(&r);
    cg_conv_free(c);
}

Test(compress, boundary_move_reports_the_cache_tokens_after_the_first_change, .timeout = 20)
{
    char *j = session(20, 2000, "read_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 12000);
    cg_compress_policy_defaults(&f.p, CG_STRATEGY_TRIMMING, NULL);
    f.p.reserved_output_tokens = 0;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert(r.boundary_moved);
    /* The first changed output message is the first trimmed one; everything from it on is
     * what the provider's cache loses. */
    size_t first = 0;
    while (first < r.n_changes && r.changes[first].layer != CG_LAYER_TRIM)
        first++;
    cr_assert_lt(first, r.n_changes);
    int64_t want = 0;
    for (size_t i = (size_t)r.changes[first].output_index; i < r.conv->n_messages; i++)
        want += f.in.counter.count_message(f.in.counter.ctx, &r.conv->messages[i]);
    cr_assert_eq(r.cache_tokens_invalidated, want);
    /* The same call with the boundary it returned moves nothing and loses nothing. */
    f.in.trim_boundary = r.boundary_after;
    struct cg_compress_result again;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &again, &err), CG_OK, "%s", err.msg);
    cr_assert_not(again.boundary_moved);
    cr_assert_eq(again.cache_tokens_invalidated, 0);
    cr_assert_eq(again.tokens_after, r.tokens_after);
    cg_compress_result_free(&again);
    cg_compress_result_free(&r);
    cg_conv_free(c);
    free(j);
}

/* policy.target_tokens (issue 16, item 6: CheckBudget's compress_to_tokens): the cascade runs
 * whenever the count is over it, however large the window, and aims at it. */
Test(compress, an_absolute_target_runs_the_cascade_down_to_it, .timeout = 20)
{
    char *j = session(30, 1000, "read_file");
    struct cg_conv *c = openai(j);
    struct fixture f;
    setup(&f, c, 1000000); /* far under any ratio of this window */
    struct fake_summary fs = {.text = "the user asked questions; files were read"};
    f.in.summarize = fake_summarize;
    f.in.summarize_ctx = &fs;
    struct cg_compress_result r;
    struct cg_err err = {0};
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert_not(r.triggered);
    int64_t before = r.tokens_before;
    cg_compress_result_free(&r);
    f.p.target_tokens = before / 3;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_OK, "%s", err.msg);
    cr_assert(r.triggered);
    cr_assert_eq(r.target_tokens, before / 3);
    cr_assert_leq(r.tokens_after, before / 3, "%lld > %lld", (long long)r.tokens_after,
                  (long long)(before / 3));
    cr_assert(r.target_reached);
    cg_compress_result_free(&r);
    f.p.target_tokens = -1;
    cr_assert_eq(cg_compress_run(&f.in, &f.p, &r, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "policy.target_tokens"), "%s", err.msg);
    cg_conv_free(c);
    free(j);
}

/* test_summarize_service.c - service/summarize.h with a fake summarizer object in place of
 * the LLM client: a long conversation is summarized hierarchically (one call per chunk, then
 * one over the partial summaries), a failing LLM falls back (AUTO) or fails the call (LLM),
 * an answer without the six sections is refused, and no summarizer is a failed
 * precondition.
 *
 * Lives in integration/ only because that kind links cg_service; it needs no database and
 * no network.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "service/summarize.h"

/* The fake LLM: answers every chat with `answer` (or fails with `fail`), counting calls. */
struct fake_llm {
    cg_llm_result fail;
    const char *answer;
    int calls;
    int partial_calls; /* prompts asking for a partial summary */
};

static cg_llm_result fake_chat(void *ctx, const struct cg_llm_request *req,
                               struct cg_llm_reply *reply)
{
    struct fake_llm *f = ctx;
    memset(reply, 0, sizeof *reply);
    f->calls++;
    reply->attempts = 1;
    cr_assert_geq(req->n_messages, 2);
    if (strstr(req->messages[0].content, "one part of a longer session") != NULL)
        f->partial_calls++;
    if (f->fail != CG_LLM_OK) {
        snprintf(reply->detail, sizeof reply->detail, "the fake failed");
        return f->fail;
    }
    reply->content = strdup(f->answer);
    reply->content_len = strlen(f->answer);
    return CG_LLM_OK;
}

static const char *SECTIONS = "## Session intent\n- fix the export job\n"
                              "## Progress\n- read the modules\n"
                              "## Key decisions\n- move the job to 02:00\n"
                              "## Current state\n- passing on staging\n"
                              "## Next steps\n- update the runbook\n"
                              "## Important details\n- batch size 100\n";

/* rounds x 2 messages of about 400 bytes: long enough for several chunks of 8 KB. */
static struct cg_conv *long_conv(int rounds)
{
    struct cg_conv_limits limits = {0};
    struct cg_conv *conv = cg_conv_new(&limits);
    struct cg_err err = {0};
    cr_assert_not_null(conv);
    for (int i = 0; i < 2 * rounds; i++) {
        char text[512];
        int n = snprintf(text, sizeof text,
                         "Step %d: I read src/export/job_%d.py; the batch size there is %d rows "
                         "and the retry delay %d ms. Nothing else stood out in that module, the "
                         "code paths look ordinary and well tested, and the logs of the last "
                         "night show the same timeout as before in the upload step of the job, "
                         "after about forty minutes of work on the largest tenant's export.",
                         i, i, 100 + i, 50 * i);
        struct cg_message *m;
        struct cg_part *p;
        cr_assert_eq(cg_conv_add_message(conv, i % 2 ? CG_ROLE_ASSISTANT : CG_ROLE_USER, &m, &err),
                     CG_OK, "%s", err.msg);
        cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK, "%s", err.msg);
        cr_assert_eq(cg_conv_str(conv, text, (size_t)n, &p->u.text, &err), CG_OK, "%s", err.msg);
    }
    return conv;
}

struct run {
    struct cg_err err;
    struct cg_principal principal;
    struct cg_op op;
    struct cg_summarize_result out;
};

static cg_status summarize(struct run *r, const struct cg_summarizer *llm, int kind,
                           const struct cg_conv *conv)
{
    memset(r, 0, sizeof *r);
    r->op = (struct cg_op){.request_id = "test", .principal = &r->principal, .err = &r->err};
    struct cg_summarize_opts opts = {.kind = kind, .target_tokens = 300, .language = "en"};
    return cg_summarize(&r->op, llm, conv, &opts, &r->out);
}

Test(summarize_service, a_long_conversation_is_summarized_in_chunks_then_as_a_whole, .timeout = 20)
{
    struct cg_conv *conv = long_conv(40); /* ~32 KB of transcript */
    struct fake_llm fake = {.answer = SECTIONS};
    /* A model with a small window: chunks of 12 KB. */
    struct cg_summarizer llm = {.chat = fake_chat, .ctx = &fake, .model = "gpt-4"};
    struct run r;
    cr_assert_eq(summarize(&r, &llm, CG_SUMMARIZER_LLM, conv), CG_OK, "%s", r.err.msg);
    cr_assert_eq(r.out.used, CG_SUMMARIZER_LLM);
    cr_assert_gt(r.out.chunks, 1, "more than one chunk: %u", r.out.chunks);
    cr_assert_eq((unsigned)fake.partial_calls, r.out.chunks, "one partial summary per chunk");
    cr_assert_eq(fake.calls, fake.partial_calls + 1, "then one over the partial summaries");
    cr_assert_eq(r.out.llm_attempts, (uint32_t)fake.calls);
    cr_assert_not_null(strstr(r.out.summary.text, "move the job to 02:00"));
    cr_assert_lt(r.out.summary.tokens, r.out.input_tokens);
    cg_summary_cleanup(&r.out.summary);
    cg_conv_free(conv);
}

Test(summarize_service, a_failing_llm_falls_back_under_auto_and_fails_under_llm, .timeout = 20)
{
    struct cg_conv *conv = long_conv(3);
    struct fake_llm fake = {.fail = CG_LLM_TIMEOUT};
    struct cg_summarizer llm = {.chat = fake_chat, .ctx = &fake, .model = "gpt-4o"};
    struct run r;
    cr_assert_eq(summarize(&r, &llm, CG_SUMMARIZER_AUTO, conv), CG_OK, "%s", r.err.msg);
    cr_assert_eq(r.out.used, CG_SUMMARIZER_EXTRACTIVE);
    cr_assert_eq(r.out.reason, CG_LLM_TIMEOUT);
    cr_assert_not_null(strstr(r.out.detail, "the fake failed"), "%s", r.out.detail);
    cr_assert_not_null(strstr(r.out.summary.text, "## Session intent"));
    cg_summary_cleanup(&r.out.summary);

    cr_assert_eq(summarize(&r, &llm, CG_SUMMARIZER_LLM, conv), CG_UNAVAILABLE);
    cr_assert_not_null(strstr(r.err.msg, "the LLM summarizer failed"), "%s", r.err.msg);
    cg_summary_cleanup(&r.out.summary);
    cg_conv_free(conv);
}

Test(summarize_service, an_answer_without_the_sections_is_refused, .timeout = 20)
{
    struct cg_conv *conv = long_conv(3);
    struct fake_llm fake = {.answer = "Here is a summary without any headings."};
    struct cg_summarizer llm = {.chat = fake_chat, .ctx = &fake, .model = "gpt-4o"};
    struct run r;
    cr_assert_eq(summarize(&r, &llm, CG_SUMMARIZER_AUTO, conv), CG_OK, "%s", r.err.msg);
    cr_assert_eq(r.out.used, CG_SUMMARIZER_EXTRACTIVE);
    cr_assert_eq(r.out.reason, CG_LLM_INVALID_OUTPUT, "%d %s", r.out.reason, r.out.detail);
    cg_summary_cleanup(&r.out.summary);
    cg_conv_free(conv);
}

Test(summarize_service, no_summarizer_is_a_failed_precondition_for_llm, .timeout = 20)
{
    struct cg_conv *conv = long_conv(3);
    struct run r;
    cr_assert_eq(summarize(&r, NULL, CG_SUMMARIZER_LLM, conv), CG_FAILED_PRECONDITION);
    cr_assert_not_null(strstr(r.err.msg, "llm_base_url"), "%s", r.err.msg);
    cg_summary_cleanup(&r.out.summary);
    cr_assert_eq(summarize(&r, NULL, CG_SUMMARIZER_AUTO, conv), CG_OK, "%s", r.err.msg);
    cr_assert_eq(r.out.used, CG_SUMMARIZER_EXTRACTIVE);
    cr_assert_eq(r.out.reason, CG_LLM_NOT_CONFIGURED);
    cg_summary_cleanup(&r.out.summary);
    cg_conv_free(conv);
}

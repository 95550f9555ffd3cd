/* summarize_charge.c - an LLM summarizer whose every call is charged to a budget scope
 * (summarize.h: cg_summarize_charge_wrap), through the same Reserve and Commit as an
 * orchestrator's own model calls: the request's estimate is reserved first, a refusal (a
 * HARD limit, or an approval it would need) means the LLM is not asked, a backpressure delay
 * is waited out, and the usage the LLM reports is committed (the hold released when the call
 * fails). The summary's own work (chunks, fallback) stays in summarize.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/estimate.h"
#include "service/budget_reserve.h"
#include "service/summarize.h"

/* The tokens of a chat request as the estimator sees them: each message's text and its
 * framing, and the reply's priming. */
static int64_t request_tokens(const struct cg_llm_request *req)
{
    int64_t n = 3;
    for (size_t i = 0; i < req->n_messages; i++)
        n += cg_estimate_text(CG_PROFILE_OPENAI, req->messages[i].content,
                              req->messages[i].content_len) +
             4;
    return n;
}

/* Sleeps ms milliseconds, at most until deadline_ms (cg_mono_ms; 0: none). This is the
 * backpressure delay the budget asked for, not a wait for some other event: it runs on the
 * pool thread that is about to block on the LLM call for seconds anyway (the LLM client is
 * synchronous, one per pool thread), so it costs no thread the call did not already hold. */
static void wait_out(uint32_t ms, int64_t deadline_ms)
{
    int64_t now = cg_mono_ms();
    if (deadline_ms > 0 && now + (int64_t)ms > deadline_ms)
        ms = deadline_ms > now ? (uint32_t)(deadline_ms - now) : 0;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A refusal as the summarizer sees it: nothing sent, why in reply->detail. */
static cg_llm_result refused(struct cg_llm_reply *reply, cg_llm_result result, const char *why)
{
    memset(reply, 0, sizeof *reply);
    reply->prompt_tokens = reply->completion_tokens = -1;
    snprintf(reply->detail, sizeof reply->detail, "%s", why);
    return result;
}

static cg_llm_result charged_chat(void *ctx, const struct cg_llm_request *req,
                                  struct cg_llm_reply *reply)
{
    struct cg_summarize_charge *c = ctx;
    int64_t in = request_tokens(req), out = req->max_tokens > 0 ? req->max_tokens : 1000;
    struct cg_budget_reserve_request rr = {
        .ids = c->ids,
        .tokens = in + out,
        .estimated_output_tokens = out,
        .model = c->inner.model != NULL ? c->inner.model : "",
        .estimate_id = "",
        .idempotency_key = "",
    };
    struct cg_budget_reserve_result held;
    struct cg_err saved = *c->op->err;
    cg_status st = cg_budget_reserve(c->env, c->op, &rr, &held);
    if (st != CG_OK || held.outcome == CG_RESERVE_APPROVAL) {
        char why[CG_ERR_MSG_MAX];
        snprintf(why, sizeof why, "charge_scope: %.*s", (int)sizeof why - 16,
                 st != CG_OK ? c->op->err->msg : "the budget asks for an approval");
        *c->op->err = saved;
        /* A refusal of the budget is the budget's; a store that cannot answer is an error. */
        bool budget = st == CG_OK || st == CG_RESOURCE_EXHAUSTED || st == CG_FAILED_PRECONDITION ||
                      st == CG_NOT_FOUND;
        return refused(reply, budget ? CG_LLM_BUDGET : CG_LLM_ERROR, why);
    }
    if (held.decision.delay_ms > 0)
        wait_out(held.decision.delay_ms, req->deadline_ms);
    cg_llm_result r = c->inner.chat(c->inner.ctx, req, reply);
    if (r == CG_LLM_OK) {
        struct cg_budget_commit_request cr = {
            .reservation_id = held.reservation.reservation_id,
            .usage = {.input_tokens = reply->prompt_tokens >= 0 ? reply->prompt_tokens : in,
                      .output_tokens = reply->completion_tokens >= 0
                                           ? reply->completion_tokens
                                           : cg_estimate_text(CG_PROFILE_OPENAI, reply->content,
                                                              reply->content_len)},
            .model = "",
            .estimate_id = "",
        };
        struct cg_budget_commit_result done;
        if (cg_budget_commit(c->env, c->op, &cr, &done) == CG_OK) {
            c->input_tokens += cr.usage.input_tokens;
            c->output_tokens += cr.usage.output_tokens;
        } else {
            cg_log(CG_LOG_WARN, "summarize", c->op->request_id,
                   "charging the summary's LLM call failed: %s (reservation %s)", c->op->err->msg,
                   held.reservation.reservation_id);
        }
    } else {
        struct cg_budget_release_result gone;
        if (cg_budget_release(c->env, c->op, held.reservation.reservation_id, &gone) != CG_OK)
            cg_log(CG_LOG_WARN, "summarize", c->op->request_id,
                   "releasing the failed LLM call's hold failed: %s (reservation %s)",
                   c->op->err->msg, held.reservation.reservation_id);
    }
    *c->op->err = saved;
    return r;
}

void cg_summarize_charge_wrap(struct cg_summarize_charge *c, const struct cg_svc_env *env,
                              const struct cg_op *op, const struct cg_summarizer *inner,
                              const struct cg_scope_ids *ids, struct cg_summarizer *out)
{
    memset(c, 0, sizeof *c);
    c->env = env;
    c->op = op;
    c->inner = *inner;
    c->ids = *ids;
    out->chat = charged_chat;
    out->ctx = c;
    out->model = inner->model;
}

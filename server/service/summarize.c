/* summarize.c - redaction before summarizing, and the LLM or extractive summarizer with
 * its fallbacks (summarize.h).
 *
 * The LLM: the transcript of the messages is cut into chunks that fit the model (half of its
 * context window from core/models.h, at about three bytes a token); one chunk is summarized
 * at once, more are summarized one by one and then their summaries together (again in
 * chunks if need be), so no input is too large. Every answer must parse into the six
 * sections; the final one must also have fewer tokens than the messages it replaces.
 */
#include "service/summarize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "core/compress.h"
#include "core/estimate.h"
#include "core/redact_conv.h"
#include "service/meters.h"
#include "service/pseudonyms.h"
#include "service/tokenizers.h"
#include "service/op_err.h"
#include "store/store.h"

#define FALLBACK_RESERVE_MS 300 /* of the deadline, kept for the extractive fallback */
#define TOOL_RESULT_BYTES 2000  /* of each tool result the LLM reads */
#define CHUNK_BYTES_MIN 8192
#define CHUNK_BYTES_MAX (256u << 10)
#define LLM_CALLS_MAX 40 /* per request, all levels of a hierarchical summary */
#define LEVELS_MAX 4

/* Exact with an encoding (specials counted as text), else the estimator's profile. */
struct counter {
    cg_profile profile;
    const struct cg_tok_encoding *enc;
};

static int64_t count_tokens(void *arg, const char *text, size_t len)
{
    const struct counter *c = arg;
    return c->enc ? cg_tok_count(c->enc, text, len, false)
                  : cg_estimate_text(c->profile, text, len);
}

/* The tokens of messages [from, to) of conv, framing included, counted as Compress counts
 * them (exact with counter->enc); -1 when out of memory. */
static int64_t range_tokens(const struct counter *counter, const struct cg_conv *conv, size_t from,
                            size_t to)
{
    struct cg_compress_count_state cs = {.enc = counter->enc, .profile = counter->profile};
    struct cg_compress_counter cc;
    cg_compress_counter_init(&cc, &cs, conv);
    int64_t sum = 0;
    for (size_t m = from; m < to; m++) {
        int64_t t = cc.count_message(cc.ctx, &conv->messages[m]);
        if (t < 0)
            return -1;
        sum += t;
    }
    return sum;
}

/* ------------------------------------------------------------------ redaction -------- */

struct redactor {
    struct cg_redact_options options;
    struct cg_redact_session *session;
    struct cg_redact_buf buf;
    struct cg_redact_counts counts;
    struct cg_pseudonym_table *shared; /* the session's table, or NULL */
    struct cg_redact_session *own;     /* else one of the call's own */
};

cg_status cg_summarize_tenant_redaction(const struct cg_svc_env *env, const struct cg_op *op,
                                        unsigned *types, bool *artifacts)
{
    *types = CG_PII_ALL;
    *artifacts = false;
    if (op->principal->tenant_id[0] == '\0' || env->store == NULL)
        return CG_OK;
    struct cg_tenant t;
    struct cg_err serr = {0};
    cg_status st = cg_store_tenant_get(env->store, op->principal->tenant_id, &t, &serr);
    if (st != CG_OK) {
        cg_log(CG_LOG_WARN, "summarize", op->request_id,
               "tenant settings unreadable (%s): every PII type is redacted", serr.msg);
        return st;
    }
    if (t.settings.redact_types != 0)
        *types = t.settings.redact_types & CG_PII_ALL;
    *artifacts = t.settings.redact_artifacts;
    return CG_OK;
}

/* Takes the pseudonym table for the call (the session's when it can) and the options. */
static cg_status redactor_open(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *session_id, unsigned types, size_t max_bytes,
                               struct redactor *r)
{
    memset(r, 0, sizeof *r);
    cg_redact_options_init(&r->options);
    r->options.enabled = types != 0 ? types & CG_PII_ALL : CG_PII_ALL;
    if (session_id != NULL && session_id[0] != '\0' && env->pseudonyms != NULL)
        r->shared = cg_pseudonyms_acquire(env->pseudonyms, op->principal->tenant_id, session_id);
    if (r->shared != NULL) {
        r->session = cg_pseudonyms_session(r->shared);
    } else {
        if ((r->own = malloc(sizeof *r->own)) == NULL)
            return cg_op_oom(op);
        cg_pseudonyms_seed(r->own);
        r->session = r->own;
    }
    cg_redact_buf_init(&r->buf, max_bytes);
    return CG_OK;
}

/* Releases what redactor_open took; on success adds the counts to counts. */
static void redactor_close(const struct cg_svc_env *env, struct redactor *r, bool ok,
                           struct cg_redact_counts *counts)
{
    if (r->shared != NULL)
        cg_pseudonyms_release(env->pseudonyms, r->shared);
    free(r->own);
    cg_redact_buf_cleanup(&r->buf);
    if (ok && counts != NULL) {
        for (int t = 0; t < CG_PII_TYPE_COUNT; t++)
            counts->by_type[t] += r->counts.by_type[t];
        counts->session_full = counts->session_full || r->counts.session_full;
    }
}

cg_status cg_summarize_redact_conv(const struct cg_svc_env *env, const struct cg_op *op,
                                   const char *session_id, unsigned types,
                                   const struct cg_conv *conv, struct cg_conv **out,
                                   struct cg_redact_counts *counts)
{
    *out = NULL;
    struct redactor r;
    cg_status st = redactor_open(env, op, session_id, types, conv->limits.max_bytes, &r);
    if (st == CG_OK)
        st = cg_redact_conv(&r.options, r.session, &r.buf, &r.counts, conv, out, op->err);
    redactor_close(env, &r, st == CG_OK, counts);
    return st;
}

cg_status cg_summarize_redact_texts(const struct cg_svc_env *env, const struct cg_op *op,
                                    const char *session_id, unsigned types, const char *field,
                                    size_t n, const char *const *in, const size_t *in_len,
                                    size_t max_bytes, char **out, size_t *out_len,
                                    struct cg_redact_counts *counts)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    struct redactor r;
    cg_status st = redactor_open(env, op, session_id, types, max_bytes, &r);
    for (size_t i = 0; i < n && st == CG_OK; i++) {
        struct cg_err err = {0};
        st = cg_redact(&r.options, r.session, in[i], in_len[i], &r.buf, &r.counts, &err);
        if (st != CG_OK) {
            cg_err_set(op->err, st == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : st, "field '%s': %s",
                       field, err.msg);
            break;
        }
        if ((out[i] = malloc(r.buf.len + 1)) == NULL) {
            st = cg_op_oom(op);
            break;
        }
        if (r.buf.len > 0)
            memcpy(out[i], r.buf.data, r.buf.len);
        out[i][r.buf.len] = '\0';
        out_len[i] = r.buf.len;
    }
    if (st != CG_OK) {
        for (size_t i = 0; i < n; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    }
    redactor_close(env, &r, st == CG_OK, counts);
    return st;
}

/* ------------------------------------------------------------------ the LLM ---------- */

struct llm_run {
    const struct cg_op *op;
    const struct cg_summarizer *llm;
    const char *language;
    const char *focus;
    int64_t target;
    int64_t deadline_ms;
    struct counter *counter;
    unsigned calls;
    uint32_t attempts;
    uint32_t chunks;
    int reason;       /* why it failed: a SummaryFallbackReason */
    char detail[200]; /* and in words */
};

static bool run_fail(struct llm_run *run, int reason, const char *fmt, const char *what)
{
    run->reason = reason;
    snprintf(run->detail, sizeof run->detail, fmt, what);
    return false;
}

/* One chat call: the prompt and one text. On success *answer is the malloc'd content. */
static bool llm_call(struct llm_run *run, const char *text, bool partial, int64_t target,
                     char **answer)
{
    if (run->calls >= LLM_CALLS_MAX)
        return run_fail(run, CG_LLM_ERROR, "the input needs more than %s LLM calls", "40");
    char *prompt =
        cg_summary_prompt(run->language, target, run->focus, strlen(run->focus), partial);
    if (prompt == NULL)
        return run_fail(run, CG_LLM_ERROR, "%s", "out of memory for the prompt");
    struct cg_llm_message msgs[2] = {
        {"system", prompt, strlen(prompt)},
        {"user", text, strlen(text)},
    };
    /* Room to answer: the target and some slack (the model does not count exactly). */
    struct cg_llm_request lreq = {.messages = msgs,
                                  .n_messages = 2,
                                  .max_tokens = (int)(target * 2 + 64),
                                  .deadline_ms = run->deadline_ms,
                                  .rid = run->op->request_id};
    struct cg_llm_reply reply;
    memset(&reply, 0, sizeof reply);
    cg_llm_result res = run->llm->chat(run->llm->ctx, &lreq, &reply);
    run->calls++;
    run->attempts += (uint32_t)(reply.attempts > 0 ? reply.attempts : 0);
    free(prompt);
    if (res != CG_LLM_OK) {
        run->reason = (int)res;
        snprintf(run->detail, sizeof run->detail, "%s: %s", cg_llm_result_name(res), reply.detail);
        cg_llm_reply_cleanup(&reply);
        return false;
    }
    /* The checks every answer passes: it parses into the six sections. */
    struct cg_summary parsed;
    cg_summary_init(&parsed);
    unsigned found = 0;
    struct cg_err err = {0};
    bool ok = cg_summary_parse(reply.content, reply.content_len, run->language, &parsed, &found,
                               &err) == CG_OK;
    cg_summary_cleanup(&parsed);
    if (!ok || found != (1u << CG_SUMMARY_SECTION_COUNT) - 1) {
        cg_llm_reply_cleanup(&reply);
        return run_fail(run, CG_LLM_INVALID_OUTPUT, "%s",
                        ok ? "the answer lacks some of the six section headings"
                           : "out of memory reading the answer");
    }
    *answer = reply.content;
    reply.content = NULL;
    cg_llm_reply_cleanup(&reply);
    return true;
}

/* The LLM's summary of conv into *summary (malloc'd), hierarchically when it is long. */
static bool llm_summarize(struct llm_run *run, const struct cg_conv *conv, size_t from, size_t to,
                          size_t chunk_bytes, char **summary)
{
    char **chunks = NULL;
    size_t n = 0;
    struct cg_err err = {0};
    if (cg_summary_transcript(conv, from, to, chunk_bytes, TOOL_RESULT_BYTES, &chunks, &n, &err) !=
        CG_OK)
        return run_fail(run, CG_LLM_ERROR, "%s", err.msg);
    if (n == 0) {
        cg_summary_chunks_free(chunks, n);
        return run_fail(run, CG_LLM_INVALID_OUTPUT, "%s", "nothing to summarize");
    }
    run->chunks = n > 1 ? (uint32_t)n : 0;
    for (int level = 0; level < LEVELS_MAX; level++) {
        if (n == 1) {
            char *answer = NULL;
            bool ok = llm_call(run, chunks[0], false, run->target, &answer);
            cg_summary_chunks_free(chunks, n);
            if (ok)
                *summary = answer;
            return ok;
        }
        /* Each part gets a share of room, never less than the target. */
        char **partials = calloc(n, sizeof *partials);
        if (partials == NULL) {
            cg_summary_chunks_free(chunks, n);
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
        }
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++)
            ok = llm_call(run, chunks[i], true, run->target, &partials[i]);
        cg_summary_chunks_free(chunks, n);
        if (!ok) {
            cg_summary_chunks_free(partials, n);
            return false;
        }
        char *joined = cg_summary_join(partials, n);
        cg_summary_chunks_free(partials, n);
        if (joined == NULL)
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
        chunks = cg_summary_split(joined, chunk_bytes, &n);
        free(joined);
        if (chunks == NULL)
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
    }
    cg_summary_chunks_free(chunks, n);
    return run_fail(run, CG_LLM_ERROR, "the summaries did not converge in %s levels", "4");
}

/* The model's context window gives the chunk size: half of it for the input, at about three
 * bytes a token, within bounds. */
static size_t chunk_bytes_for(const char *model)
{
    struct cg_model_info info;
    cg_models_lookup(model, &info);
    int64_t bytes = info.context_window / 2 * 3;
    if (bytes < (int64_t)CHUNK_BYTES_MIN)
        bytes = CHUNK_BYTES_MIN;
    if (bytes > (int64_t)CHUNK_BYTES_MAX)
        bytes = CHUNK_BYTES_MAX;
    return (size_t)bytes;
}

/* ------------------------------------------------------------------ summarize ------- */

/* The thread's LLM client (ctx: the thread's env), counted (service/meters.h). */
static cg_llm_result llm_chat(void *ctx, const struct cg_llm_request *req,
                              struct cg_llm_reply *reply)
{
    const struct cg_svc_env *env = ctx;
    cg_llm_result r = cg_llm_chat(env->llm, req, reply);
    cg_svc_meters_llm(env->meters, env->metrics_slot, r, reply);
    return r;
}

bool cg_summarize_llm(const struct cg_svc_env *env, struct cg_summarizer *out)
{
    if (env->llm == NULL || !cg_llm_is_configured(env->llm))
        return false;
    out->chat = llm_chat;
    out->ctx = (void *)env; /* the thread's, for the length of the call */
    out->model = env->config->llm_model;
    return true;
}

cg_status cg_summarize(const struct cg_op *op, const struct cg_summarizer *llm,
                       const struct cg_conv *conv, const struct cg_summarize_opts *opts,
                       struct cg_summarize_result *out)
{
    memset(out, 0, sizeof *out);
    cg_summary_init(&out->summary);
    size_t to = opts->to == 0 ? conv->n_messages : opts->to;
    if (opts->from >= to || to > conv->n_messages)
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "field 'conversation': messages [%zu, %zu) of %zu to summarize",
                          opts->from, to, conv->n_messages);
    bool llm_ready = llm != NULL;
    if (opts->kind == CG_SUMMARIZER_LLM && !llm_ready)
        return cg_err_setr(op->err, CG_FAILED_PRECONDITION, CG_ERR_LLM_NOT_CONFIGURED,
                           "field 'summarizer': LLM asked for but no LLM is configured "
                           "(llm_base_url)");

    /* What the summary replaces, in tokens: the messages of the range. */
    struct counter counter = {opts->profile, opts->enc};
    struct cg_err err = {0};
    if ((out->input_tokens = range_tokens(&counter, conv, opts->from, to)) < 0)
        return cg_op_oom(op);
    const char *language = opts->language != NULL && opts->language[0] != '\0'
                               ? cg_summary_language(opts->language)
                               : cg_summary_detect_language(conv, opts->from, to);
    const char *focus = opts->focus != NULL ? opts->focus : "";

    if (opts->kind == CG_SUMMARIZER_EXTRACTIVE) {
        out->reason = CG_SUMMARY_FALLBACK_REQUESTED;
        snprintf(out->detail, sizeof out->detail, "the extractive summarizer was asked for");
    } else if (!llm_ready) {
        out->reason = CG_LLM_NOT_CONFIGURED;
        snprintf(out->detail, sizeof out->detail, "no LLM is configured (llm_base_url)");
    } else {
        struct llm_run run = {.op = op,
                              .llm = llm,
                              .language = language,
                              .focus = focus,
                              .target = opts->target_tokens,
                              .counter = &counter};
        if (op->deadline_ms > 0)
            run.deadline_ms = op->deadline_ms - FALLBACK_RESERVE_MS;
        char *text = NULL;
        bool ok = llm_summarize(&run, conv, opts->from, to, chunk_bytes_for(llm->model), &text);
        out->llm_attempts = run.attempts;
        out->chunks = run.chunks;
        if (ok) {
            int64_t tokens = count_tokens(&counter, text, strlen(text));
            if (tokens >= out->input_tokens) {
                ok = false;
                run.reason = CG_SUMMARY_FALLBACK_NOT_SMALLER;
                snprintf(run.detail, sizeof run.detail,
                         "the LLM's summary (%lld tokens) is not smaller than the input (%lld)",
                         (long long)tokens, (long long)out->input_tokens);
            }
        }
        if (ok) {
            struct cg_summary *s = &out->summary;
            unsigned found = 0;
            snprintf(s->language, sizeof s->language, "%s", language);
            if (cg_summary_parse(text, strlen(text), language, s, &found, &err) != CG_OK) {
                free(text);
                return cg_op_oom(op);
            }
            s->text = text;
            s->text_len = strlen(text);
            s->tokens = count_tokens(&counter, s->text, s->text_len);
            s->target_met = s->tokens <= opts->target_tokens;
            s->messages = to - opts->from;
            out->used = CG_SUMMARIZER_LLM;
            return CG_OK;
        }
        free(text);
        if (opts->kind == CG_SUMMARIZER_LLM && run.reason == CG_LLM_BUDGET)
            return cg_err_setr(op->err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                               "the LLM summarizer was not asked: %s", run.detail);
        if (opts->kind == CG_SUMMARIZER_LLM)
            return cg_err_setr(op->err, CG_UNAVAILABLE, CG_ERR_LLM_UNAVAILABLE,
                               "the LLM summarizer failed: %s", run.detail);
        out->reason = run.reason;
        snprintf(out->detail, sizeof out->detail, "%s", run.detail);
    }

    struct cg_summary_opts sopts = {.target_tokens = opts->target_tokens,
                                    .count = count_tokens,
                                    .count_arg = &counter,
                                    .focus = focus,
                                    .focus_len = strlen(focus),
                                    .language = language,
                                    .from = opts->from,
                                    .to = to};
    if (cg_summary_extract(conv, &sopts, &out->summary, &err) != CG_OK)
        return cg_err_set(op->err, err.code == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : err.code,
                          "summarizing: %s", err.msg);
    out->used = CG_SUMMARIZER_EXTRACTIVE;
    if (out->reason != CG_SUMMARY_FALLBACK_REQUESTED)
        cg_log(CG_LOG_INFO, "summarize", op->request_id,
               "extractive fallback reason=%d detail=\"%s\"", out->reason, out->detail);
    return CG_OK;
}

cg_status cg_summarize_redacted(const struct cg_svc_env *env, const struct cg_op *op,
                                const char *session_id, unsigned types, const struct cg_conv *conv,
                                const struct cg_summarize_opts *opts,
                                struct cg_redact_counts *counts, struct cg_summarize_result *out)
{
    memset(out, 0, sizeof *out);
    cg_summary_init(&out->summary);
    struct cg_conv *redacted = NULL;
    cg_status st = cg_summarize_redact_conv(env, op, session_id, types, conv, &redacted, counts);
    if (st == CG_OK) {
        struct cg_summarizer llm, charged;
        struct cg_summarize_charge charge;
        bool have_llm = cg_summarize_llm(env, &llm);
        if (have_llm && opts->charge != NULL)
            cg_summarize_charge_wrap(&charge, env, op, &llm, opts->charge, &charged);
        st = cg_summarize(op,
                          !have_llm              ? NULL
                          : opts->charge != NULL ? &charged
                                                 : &llm,
                          redacted, opts, out);
        if (have_llm && opts->charge != NULL) {
            out->charged_input_tokens = charge.input_tokens;
            out->charged_output_tokens = charge.output_tokens;
        }
    }
    cg_conv_free(redacted);
    return st;
}

cg_status cg_summarize_request(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_summarize_req *req, struct cg_redact_counts *counts,
                               struct cg_summarize_result *out)
{
    memset(out, 0, sizeof *out);
    cg_summary_init(&out->summary);
    struct cg_conv *history = NULL;
    const struct cg_conv *conv = req->conv;
    if (conv == NULL) {
        cg_status st =
            cg_ctx_session_history(env, op, req->session_id, req->from_position, req->to_position,
                                   CG_SUMMARIZE_HISTORY_MAX, req->codec, &history);
        if (st != CG_OK)
            return st;
        conv = history;
    }
    cg_status st = CG_OK;
    if (conv->n_messages == 0) {
        st = cg_err_set(op->err, CG_INVALID_ARGUMENT, "field 'conversation' has no messages");
        goto out;
    }
    struct cg_model_info info;
    cg_models_lookup(req->model != NULL && req->model[0] != '\0' ? req->model : conv->model.ptr,
                     &info);
    struct cg_summarize_opts opts = {.kind = req->kind,
                                     .target_tokens = req->target_tokens,
                                     .focus = req->focus,
                                     .language = req->language,
                                     .profile = info.profile,
                                     .enc = cg_tokenizer(env->tokenizers, info.encoding),
                                     .charge = req->charge};
    /* The tenant's settings choose the types; when they cannot be read every type is
     * redacted (the safe side). */
    unsigned types;
    bool artifacts;
    if (cg_summarize_tenant_redaction(env, op, &types, &artifacts) != CG_OK)
        types = CG_PII_ALL;
    st = cg_summarize_redacted(env, op, req->session_id, types, conv, &opts, counts, out);
out:
    cg_conv_free(history);
    return st;
}

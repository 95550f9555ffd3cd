/* rpc_context_summarize.c - ContextService.Summarize: a conversation to a structured
 * summary. Validates every field (the message names it), redacts PII from the whole
 * conversation before any summarizer sees it (the types the tenant's settings enable, every
 * type by default; service/summarize.h: with the pseudonym table of the
 * request's session, so a value keeps its label across the session's summaries), summarizes
 * by the rules of SummarizerKind (service/summarize.h: LLM, hierarchical and checked, or the
 * extractive summarizer, with the fallback reason) and answers with the text, the sections,
 * token counts (the estimator of the request's model, else the conversation's) and the
 * redaction counts.
 */
#include "rpc/rpc_handlers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/models.h"
#include "core/summary.h"
#include "core/utf8.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_context_state.h"
#include "rpc/rpc_conv.h"
#include "service/summarize.h"

#define LANGUAGE_MAX 35 /* characters of a BCP 47 tag */
#define MODEL_MAX 200   /* characters */

/* ------------------------------------------------------------------ validation ------- */

static cg_status check_request(struct cg_rpc_call *call, const Ctxguard__V1__SummarizeRequest *req,
                               int64_t *target)
{
    *target = req->target_tokens == 0 ? CG_SUMMARY_TARGET_DEFAULT : req->target_tokens;
    if (*target < CG_SUMMARY_TARGET_MIN || *target > CG_SUMMARY_TARGET_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'target_tokens' must be %d..%d (0 means %d), got %lld",
                          CG_SUMMARY_TARGET_MIN, CG_SUMMARY_TARGET_MAX, CG_SUMMARY_TARGET_DEFAULT,
                          (long long)req->target_tokens);
    if (cg_utf8_length(req->focus, strlen(req->focus)) > CG_SUMMARY_FOCUS_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'focus' is longer than %d characters", CG_SUMMARY_FOCUS_MAX);
    size_t lang_len = strlen(req->language);
    if (lang_len > LANGUAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'language' is longer than %d characters", LANGUAGE_MAX);
    for (size_t i = 0; i < lang_len; i++) {
        char c = req->language[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-'))
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'language' must be a BCP 47 tag such as \"de\" or \"ja-JP\"");
    }
    if (req->summarizer == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_NONE)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'summarizer': NONE is for Compress only; use AUTO, LLM or "
                          "EXTRACTIVE");
    if ((int)req->summarizer < 0 ||
        (int)req->summarizer > CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_NONE)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'summarizer': unknown value %d",
                          (int)req->summarizer);
    cg_status st = cg_rpc_check_name(call, "model", req->model, MODEL_MAX, false);
    if (st != CG_OK)
        return st;
    st = cg_rpc_check_name(call, "session_id", req->session_id, 200, false);
    if (st != CG_OK)
        return st;
    /* A session outside a scope-bound key is unknown, also when only its redaction labels
     * would be used (a conversation given). */
    if (req->session_id[0] != '\0' &&
        !cg_rpc_scope_reachable(&call->principal, req->session_id, ""))
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_SESSION_NOT_FOUND,
                           "field 'session_id': no such session");
    if (req->from_position < 0 || req->to_position < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' must not be negative",
                          req->from_position < 0 ? "from_position" : "to_position");
    if (req->conversation == NULL) {
        if (req->session_id[0] != '\0')
            return CG_OK; /* the session's stored history (history_in) */
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'conversation' is required (or a session_id with history)");
    }
    if (req->from_position != 0 || req->to_position != 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "fields 'from_position' and 'to_position' apply to a session's "
                          "history only, not to 'conversation'");
    return CG_OK;
}

/* ------------------------------------------------------------------ the answer ------- */

static char **list_out(struct cg_rpc_call *call, const struct cg_summary_list *l, size_t *n)
{
    *n = 0;
    if (l->n == 0)
        return NULL;
    char **out = cg_arena_calloc(call->arena, l->n, sizeof *out);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < l->n; i++)
        if ((out[i] = cg_arena_strdup(call->arena, l->items[i])) == NULL)
            return NULL;
    *n = l->n;
    return out;
}

static char *joined_out(struct cg_rpc_call *call, const struct cg_summary_list *l)
{
    size_t len = 0;
    for (size_t i = 0; i < l->n; i++)
        len += strlen(l->items[i]) + 1;
    char *out = cg_arena_alloc(call->arena, len + 1);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0)
            out[pos++] = ' ';
        size_t n = strlen(l->items[i]);
        memcpy(out + pos, l->items[i], n);
        pos += n;
    }
    out[pos] = '\0';
    return out;
}

static cg_status fill_sections(struct cg_rpc_call *call, const struct cg_summary *s,
                               Ctxguard__V1__SummarySections **out)
{
    Ctxguard__V1__SummarySections *sec =
        NEW(call, Ctxguard__V1__SummarySections, ctxguard__v1__summary_sections__init);
    if (sec == NULL)
        return OOM(call);
    sec->intent = joined_out(call, &s->sections[CG_SUMMARY_INTENT]);
    sec->current_state = joined_out(call, &s->sections[CG_SUMMARY_STATE]);
    sec->progress = list_out(call, &s->sections[CG_SUMMARY_PROGRESS], &sec->n_progress);
    sec->key_decisions = list_out(call, &s->sections[CG_SUMMARY_DECISIONS], &sec->n_key_decisions);
    sec->next_steps = list_out(call, &s->sections[CG_SUMMARY_NEXT], &sec->n_next_steps);
    sec->important_details =
        list_out(call, &s->sections[CG_SUMMARY_DETAILS], &sec->n_important_details);
    if (sec->intent == NULL || sec->current_state == NULL ||
        (s->sections[CG_SUMMARY_PROGRESS].n > 0 && sec->progress == NULL) ||
        (s->sections[CG_SUMMARY_DECISIONS].n > 0 && sec->key_decisions == NULL) ||
        (s->sections[CG_SUMMARY_NEXT].n > 0 && sec->next_steps == NULL) ||
        (s->sections[CG_SUMMARY_DETAILS].n > 0 && sec->important_details == NULL))
        return OOM(call);
    *out = sec;
    return CG_OK;
}

static cg_status fill_redactions(struct cg_rpc_call *call, const struct cg_redact_counts *c,
                                 Ctxguard__V1__SummarizeResponse *resp)
{
    size_t n = 0;
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++)
        n += c->by_type[t] > 0;
    if (n == 0)
        return CG_OK;
    resp->redactions = cg_arena_calloc(call->arena, n, sizeof *resp->redactions);
    if (resp->redactions == NULL)
        return OOM(call);
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++) {
        if (c->by_type[t] == 0)
            continue;
        Ctxguard__V1__PiiRedactionCount *rc =
            NEW(call, Ctxguard__V1__PiiRedactionCount, ctxguard__v1__pii_redaction_count__init);
        if (rc == NULL)
            return OOM(call);
        rc->type = (Ctxguard__V1__PiiType)t;
        rc->count = c->by_type[t];
        resp->redactions[resp->n_redactions++] = rc;
    }
    return CG_OK;
}

cg_status cg_rpc_context_summarize(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                   const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__SummarizeRequest *req = (const Ctxguard__V1__SummarizeRequest *)request;
    int64_t target;
    cg_status st = check_request(call, req, &target);
    if (st != CG_OK)
        return st;
    int kind = req->summarizer == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_UNSPECIFIED
                   ? CG_SUMMARIZER_AUTO
                   : (int)req->summarizer;
    struct cg_summarizer llm;
    if (kind == CG_SUMMARIZER_LLM && !cg_summarize_llm(&env->svc, &llm))
        return cg_err_setr(&call->err, CG_FAILED_PRECONDITION, CG_ERR_LLM_NOT_CONFIGURED,
                           "field 'summarizer': LLM asked for but no LLM is configured "
                           "(llm_base_url)");

    struct cg_scope_ids charge_ids;
    const struct cg_scope_ids *charge = NULL;
    if ((st = cg_rpc_charge_scope(call, req->charge_scope, &charge_ids, &charge)) != CG_OK)
        return st;
    struct cg_conv *conv = NULL;
    struct cg_redact_counts counts = {0};
    struct cg_summarize_result res;
    memset(&res, 0, sizeof res);
    cg_summary_init(&res.summary);
    if (req->conversation != NULL &&
        (st = cg_rpc_conv_in(call, "conversation", req->conversation, &conv)) != CG_OK)
        goto out;
    /* Without a conversation, the session's stored history (read by the service). */
    struct cg_rpc_history_codec_ctx hc = {.call = call, .request_conv = NULL};
    struct cg_ctx_history_codec codec;
    cg_rpc_ctx_history_codec(&hc, &codec);
    struct cg_summarize_req sreq = {.conv = conv,
                                    .session_id = req->session_id,
                                    .from_position = req->from_position,
                                    .to_position = req->to_position,
                                    .codec = &codec,
                                    .model = req->model,
                                    .kind = kind,
                                    .target_tokens = target,
                                    .focus = req->focus,
                                    .language = req->language,
                                    .charge = charge};
    struct cg_op op = cg_rpc_op(call);
    if ((st = cg_summarize_request(&env->svc, &op, &sreq, &counts, &res)) != CG_OK)
        goto out;

    Ctxguard__V1__SummarizeResponse *resp =
        NEW(call, Ctxguard__V1__SummarizeResponse, ctxguard__v1__summarize_response__init);
    if (resp == NULL) {
        st = OOM(call);
        goto out;
    }
    const struct cg_summary *sum = &res.summary;
    resp->summarizer_used = (Ctxguard__V1__SummarizerKind)res.used;
    resp->fallback_reason = (Ctxguard__V1__SummaryFallbackReason)res.reason;
    resp->fallback_detail = cg_arena_strdup(call->arena, res.detail);
    resp->llm_model = cg_arena_strdup(
        call->arena,
        res.llm_attempts > 0 || res.used == CG_SUMMARIZER_LLM ? env->svc.config->llm_model : "");
    resp->llm_attempts = res.llm_attempts;
    resp->charged_input_tokens = res.charged_input_tokens;
    resp->charged_output_tokens = res.charged_output_tokens;
    resp->chunks = res.chunks;
    resp->summary = cg_arena_strdup(call->arena, sum->text);
    resp->input_tokens = res.input_tokens;
    resp->summary_tokens = sum->tokens;
    resp->target_met = sum->target_met;
    resp->language = cg_arena_strdup(call->arena, sum->language);
    resp->messages_summarized = (int64_t)sum->messages;
    if (resp->summary == NULL || resp->language == NULL || resp->fallback_detail == NULL ||
        resp->llm_model == NULL) {
        st = OOM(call);
        goto out;
    }
    st = fill_sections(call, sum, &resp->sections);
    if (st == CG_OK)
        st = fill_redactions(call, &counts, resp);
    if (st == CG_OK)
        *response = &resp->base;

out:
    cg_summary_cleanup(&res.summary);
    cg_conv_free(conv);
    return st;
}

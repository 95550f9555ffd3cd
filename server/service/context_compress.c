/* context_compress.c - one Compress (context_compress.h): the cascade with the summary layer
 * and the tenant's redaction, stateless or as the work of a session's attempt.
 */
#include "service/context_compress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/conv_json.h"
#include "core/utf8.h"
#include "service/meters.h"
#include "service/summarize.h"
#include "service/tokenizers.h"
#include "service/op_err.h"

static int64_t clock_ms(void *ctx)
{
    (void)ctx;
    return cg_mono_ms();
}

/* ------------------------------------------------------------------ the summary layer */

/* What the summary layer's callback needs of the call. */
struct summary_ctx {
    const struct cg_svc_env *env;
    const struct cg_op *op;
    const char *session_id;
    cg_profile profile;
    const struct cg_tok_encoding *enc; /* exact counts when not NULL */
    int kind;                          /* AUTO, LLM or EXTRACTIVE */
    unsigned types;                    /* the PII types to redact (the tenant's settings) */
    struct cg_redact_counts counts;    /* of the summaries that succeeded */
    const struct cg_scope_ids *charge; /* the LLM's tokens go to it; NULL: none */
    int64_t charged_in, charged_out;   /* of every summary made, inserted or not */
};

/* cg_compress_summarize_cb: the messages [from, to) redacted, then summarized. A failure (the
 * LLM with no fallback, say) fails the layer only: the cascade keeps what the other layers
 * did and reports why. */
static cg_status summarize_range(void *ctx, const struct cg_conv *conv, size_t from, size_t to,
                                 int64_t target_tokens, char **summary_out, struct cg_err *err)
{
    struct summary_ctx *sc = ctx;
    *summary_out = NULL;
    struct cg_err saved = *sc->op->err;
    struct cg_redact_counts counts;
    memset(&counts, 0, sizeof counts);
    struct cg_summarize_opts opts = {
        .kind = sc->kind,
        .target_tokens = target_tokens < 64     ? 64
                         : target_tokens > 2000 ? 2000
                                                : target_tokens,
        .from = from,
        .to = to,
        .profile = sc->profile,
        .enc = sc->enc,
        .charge = sc->charge,
    };
    struct cg_summarize_result out;
    cg_status st = cg_summarize_redacted(sc->env, sc->op, sc->session_id, sc->types, conv, &opts,
                                         &counts, &out);
    sc->charged_in += out.charged_input_tokens;
    sc->charged_out += out.charged_output_tokens;
    if (st == CG_OK && (*summary_out = strdup(out.summary.text ? out.summary.text : "")) == NULL)
        st = cg_err_set(sc->op->err, CG_NOMEM, "out of memory");
    /* The last summary made is the one inserted (escalation replaces earlier ones). */
    if (st == CG_OK)
        sc->counts = counts;
    if (st != CG_OK && err != NULL)
        *err = *sc->op->err;
    /* The call itself goes on: what a failed summary said belongs to the layer's report. */
    *sc->op->err = saved;
    cg_summary_cleanup(&out.summary);
    return st;
}

/* ------------------------------------------------------------------ artifact redaction */

#define OFFLOAD_MARKER "\n[ctxguard: offloaded, "

/* The longest head of text[0..len) of at most max bytes that ends on a character boundary. */
static size_t utf8_head(const char *text, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
        n--;
    return n;
}

/* Tokens of one tool result holding text, counted as the cascade counts it. */
static int64_t result_tokens(const struct cg_compress_counter *counter, const struct cg_part *part,
                             const char *text, size_t len)
{
    struct cg_part p = *part;
    p.u.tool_result.content.ptr = text;
    p.u.tool_result.content.len = len;
    struct cg_message one = {.role = CG_ROLE_TOOL, .parts = &p, .n_parts = 1};
    return counter->count_message(counter->ctx, &one);
}

/* The new text of the offloaded message's part: the redacted head and a marker with the
 * redacted sizes when the part is still the offload's preview, else NULL (redact it whole). */
static char *preview_text(const struct cg_compress_artifact *a, const struct cg_str *now,
                          const char *red, size_t red_len, size_t preview_max, size_t *keep_out,
                          size_t *len_out)
{
    size_t raw_keep = a->preview_bytes;
    size_t mlen = strlen(OFFLOAD_MARKER);
    if (now->len < raw_keep + mlen || memcmp(now->ptr, a->content, raw_keep) != 0 ||
        memcmp(now->ptr + raw_keep, OFFLOAD_MARKER, mlen) != 0)
        return NULL;
    size_t keep = utf8_head(red, red_len, preview_max);
    char marker[240];
    int ml = snprintf(marker, sizeof marker,
                      "\n[ctxguard: offloaded, %zu of %zu bytes shown; the whole result "
                      "is artifact %s (GetArtifact)]",
                      keep, red_len, a->id);
    if (ml < 0 || (size_t)ml >= sizeof marker)
        return NULL;
    char *text = malloc(keep + (size_t)ml + 1);
    if (text == NULL)
        return NULL;
    memcpy(text, red, keep);
    memcpy(text + keep, marker, (size_t)ml + 1);
    *keep_out = keep;
    *len_out = keep + (size_t)ml;
    return text;
}

/* The preview that artifact i's message part keeps in r->conv, redacted: rebuilt as the head
 * of the redacted artifact red (at most preview_max bytes) and the marker, or, when a later
 * layer changed the part, its own redacted form *whole (taken: *whole becomes NULL). The
 * tokens of the output and of the change follow. */
static cg_status redact_preview(const struct cg_op *op, struct cg_compress_result *r,
                                const struct cg_compress_counter *counter, size_t i,
                                struct cg_part *part, const char *red, size_t red_len,
                                size_t preview_max, char **whole, size_t whole_len)
{
    struct cg_compress_artifact *a = &r->artifacts[i];
    struct cg_str *now = &part->u.tool_result.content;
    size_t keep = 0, text_len = 0;
    char *text = preview_text(a, now, red, red_len, preview_max, &keep, &text_len);
    bool rebuilt = text != NULL;
    if (text == NULL) { /* changed after offload: its redacted form as a whole */
        text = *whole;
        text_len = whole_len;
        *whole = NULL;
    }
    int64_t before = result_tokens(counter, part, now->ptr, now->len);
    struct cg_err err = {0};
    cg_status st = cg_conv_str(r->conv, text, text_len, now, &err);
    free(text);
    if (st != CG_OK) {
        cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "redacting an artifact's preview: %s", err.msg);
        return st;
    }
    int64_t delta = result_tokens(counter, part, now->ptr, now->len) - before;
    r->tokens_after += delta;
    for (size_t c = 0; c < r->n_changes; c++)
        if (r->changes[c].artifact == (int64_t)i)
            r->changes[c].tokens_after += delta;
    if (rebuilt)
        a->preview_bytes = keep;
    return CG_OK;
}

/* The redaction counts in the report, where it has room for them: the last OFFLOAD layer's
 * detail ("; PII redacted: EMAIL 2, PHONE 1", or " none"). */
static void report_counts(struct cg_compress_result *r, const struct cg_redact_counts *counts)
{
    for (size_t l = r->n_layers; l-- > 0;) {
        if (r->layers[l].layer != CG_LAYER_OFFLOAD)
            continue;
        char *d = r->layers[l].detail;
        size_t dl = strlen(d);
        dl += (size_t)snprintf(d + dl, sizeof r->layers[l].detail - dl, "; PII redacted:");
        bool any = false;
        for (int t = 1; t < CG_PII_TYPE_COUNT && dl < sizeof r->layers[l].detail; t++) {
            if (counts->by_type[t] == 0)
                continue;
            dl += (size_t)snprintf(d + dl, sizeof r->layers[l].detail - dl, "%s %s %lld",
                                   any ? "," : "", cg_pii_type_name((cg_pii_type)t),
                                   (long long)counts->by_type[t]);
            any = true;
        }
        if (!any && dl < sizeof r->layers[l].detail)
            snprintf(d + dl, sizeof r->layers[l].detail - dl, " none");
        break;
    }
}

/* The tenant setting redact_artifacts: redacts the PII `types` (CG_PII_BIT mask) in each
 * artifact of r before it is stored, with the session's pseudonym table, and in the preview
 * its message keeps in r->conv (rebuilt as the head of the redacted text, at most
 * preview_max bytes, and the marker; a message a later layer changed is redacted whole).
 * The artifact's size and tokens, the output's tokens_after and the message's change follow;
 * the last OFFLOAD layer's detail gets the counts ("; PII redacted: EMAIL 2, PHONE 1").
 * History is not touched. On error op->err says why and r is as it was or partly redacted
 * (the caller fails the call, so nothing is stored). */
static cg_status redact_artifacts(const struct cg_svc_env *env, const struct cg_op *op,
                                  const char *session_id, struct cg_compress_result *r,
                                  const struct cg_compress_counter *counter, unsigned types,
                                  int64_t preview_max)
{
    size_t n = r->n_artifacts;
    if (n == 0)
        return CG_OK;
    /* One pass over every artifact and its message part, so both get the same labels. */
    const char **in = calloc(2 * n, sizeof *in);
    size_t *in_len = calloc(2 * n, sizeof *in_len), *out_len = calloc(2 * n, sizeof *out_len);
    char **out = calloc(2 * n, sizeof *out);
    struct cg_part **parts = calloc(n, sizeof *parts);
    struct cg_redact_counts counts;
    memset(&counts, 0, sizeof counts);
    cg_status st = CG_OK;
    if (in == NULL || in_len == NULL || out_len == NULL || out == NULL || parts == NULL) {
        st = cg_op_oom(op);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const struct cg_compress_artifact *a = &r->artifacts[i];
        in[2 * i] = a->content;
        in_len[2 * i] = a->content_len;
        in[2 * i + 1] = "";
        if (r->conv != NULL && a->output_index >= 0 &&
            (size_t)a->output_index < r->conv->n_messages &&
            a->part_index < r->conv->messages[a->output_index].n_parts &&
            r->conv->messages[a->output_index].parts[a->part_index].kind == CG_PART_TOOL_RESULT) {
            parts[i] = &r->conv->messages[a->output_index].parts[a->part_index];
            in[2 * i + 1] = parts[i]->u.tool_result.content.ptr;
            in_len[2 * i + 1] = parts[i]->u.tool_result.content.len;
        }
    }
    /* Labels may be longer than the values they replace. */
    size_t max = 2 * (r->conv != NULL ? r->conv->limits.max_bytes : (size_t)64 << 20);
    st = cg_summarize_redact_texts(env, op, session_id, types, "conversation", 2 * n, in, in_len,
                                   max, out, out_len, &counts);
    if (st != CG_OK)
        goto done;
    for (size_t i = 0; i < n; i++) {
        struct cg_compress_artifact *a = &r->artifacts[i];
        char *red = out[2 * i];
        size_t red_len = out_len[2 * i];
        if (parts[i] != NULL) {
            st = redact_preview(op, r, counter, i, parts[i], red, red_len, (size_t)preview_max,
                                &out[2 * i + 1], out_len[2 * i + 1]);
            if (st != CG_OK)
                goto done;
        }
        if (a->preview_bytes > red_len)
            a->preview_bytes = red_len;
        if (parts[i] != NULL)
            a->tokens = result_tokens(counter, parts[i], red, red_len);
        free(a->content);
        a->content = red;
        a->content_len = red_len;
        out[2 * i] = NULL;
    }
    report_counts(r, &counts);
done:
    if (out != NULL)
        for (size_t i = 0; i < 2 * n; i++)
            free(out[i]);
    free(in);
    free(in_len);
    free(out_len);
    free(out);
    free(parts);
    return st;
}

/* ------------------------------------------------------------------ the cascade ------ */

/* One run of the cascade: stateless, or one attempt of a session (then with no transaction
 * open). */
struct cascade {
    const struct cg_svc_env *env;
    const struct cg_op *op;
    const struct cg_ctx_compress_req *req;
    struct cg_compress_input in; /* conv, counter and boundary set for each run */
    struct cg_compress_count_state cs;
    bool redact_artifacts;
    struct summary_ctx sctx;
    struct cg_ctx_compress_out *out;
};

/* The output format asked for, or the one the conversation came in. */
static cg_ctx_format resolved_format(cg_ctx_format asked, cg_conv_origin origin)
{
    if (asked != CG_CTX_FORMAT_AS_READ)
        return asked;
    switch (origin) {
    case CG_CONV_ORIGIN_OPENAI:
        return CG_CTX_FORMAT_OPENAI;
    case CG_CONV_ORIGIN_ANTHROPIC:
        return CG_CTX_FORMAT_ANTHROPIC;
    case CG_CONV_ORIGIN_RESPONSES:
        return CG_CTX_FORMAT_RESPONSES;
    case CG_CONV_ORIGIN_GEMINI:
        return CG_CTX_FORMAT_GEMINI;
    case CG_CONV_ORIGIN_STRUCTURED:
        break;
    }
    return CG_CTX_FORMAT_STRUCTURED;
}

static cg_conv_json_format json_format(cg_ctx_format f)
{
    return f == CG_CTX_FORMAT_OPENAI      ? CG_CONV_JSON_OPENAI
           : f == CG_CTX_FORMAT_ANTHROPIC ? CG_CONV_JSON_ANTHROPIC
           : f == CG_CTX_FORMAT_RESPONSES ? CG_CONV_JSON_RESPONSES
                                          : CG_CONV_JSON_GEMINI;
}

/* Whether the output is the request's conversation untouched: every message kept in place by
 * no layer, nothing inserted (the request's text can then be the answer, byte for byte). */
static bool unchanged(const struct cg_compress_result *res, const struct cg_conv *request)
{
    if (res->n_changes != 0 || res->messages_after != res->messages_before ||
        res->messages_before != (int64_t)request->n_messages)
        return false;
    for (int64_t i = 0; i < res->messages_after; i++)
        if (res->source_indexes[i] != i)
            return false;
    return true;
}

/* The output in the JSON format asked (or the one it came in) into out->json; nothing when
 * the answer can be the request's own text (out->verbatim). */
static cg_status render(struct cascade *c, const struct cg_compress_result *res)
{
    struct cg_ctx_compress_out *out = c->out;
    free(out->json);
    out->json = NULL;
    out->format = resolved_format(c->req->format, res->conv->origin);
    out->verbatim = false;
    if (out->format == CG_CTX_FORMAT_STRUCTURED)
        return CG_OK;
    cg_conv_json_format jf = json_format(out->format);
    if (c->req->conv->origin == cg_conv_json_origin(jf) && unchanged(res, c->req->conv)) {
        out->verbatim = true;
        return CG_OK;
    }
    struct cg_err err = {0};
    cg_status st = cg_conv_json_write(res->conv, jf, &out->json, &out->json_len, &err);
    if (st != CG_OK)
        return cg_err_set(c->op->err, st, "conversation: %s", err.msg);
    return CG_OK;
}

/* Runs the cascade over conv (s: the session attempt, NULL stateless) into *res, adds the
 * call's warnings, redacts the artifacts when the tenant asks, and renders the output. On
 * error op->err says why and res is not filled. */
static cg_status run_cascade(struct cascade *c, struct cg_ctx_session_state *s,
                             const struct cg_conv *conv, struct cg_compress_result *res)
{
    const struct cg_ctx_compress_req *req = c->req;
    struct cg_compress_policy policy = *req->policy;
    c->in.conv = conv;
    cg_compress_counter_init(&c->in.counter, &c->cs, conv);
    memset(&c->sctx.counts, 0, sizeof c->sctx.counts);
    if (s != NULL) {
        c->in.trim_boundary = s->boundary;
        c->in.offload = !req->dry_run;
        c->in.offload_skip_reason = "dry run: nothing is stored";
        c->in.name_artifact = cg_ctx_session_name_artifact;
    }
    /* Never past the call's deadline. */
    if (c->op->deadline_ms > 0) {
        int64_t left = c->op->deadline_ms - req->started_ms;
        if (left < 100)
            left = 100;
        if (left < (int64_t)policy.time_budget_ms)
            policy.time_budget_ms = (uint32_t)left;
    }
    struct cg_err cerr = {0};
    cg_status st = cg_compress_run(&c->in, &policy, res, &cerr);
    if (st != CG_OK) {
        *c->op->err = cerr;
        if (c->op->err->msg[0] == '\0')
            cg_err_set(c->op->err, st, "compression failed");
        return st;
    }
    if (s != NULL && s->diverged)
        cg_compress_add_warning(res, CG_CWARN_HISTORY_DIVERGED, s->diverged_at,
                                "the conversation differs from the stored history at message "
                                "%lld; revision %u starts there",
                                (long long)s->diverged_at, s->revision);
    if (s != NULL && req->trim_boundary != 0 && req->trim_boundary != s->stored.trim_boundary)
        cg_compress_add_warning(res, CG_CWARN_BOUNDARY_ADJUSTED, -1,
                                "trim_boundary %lld ignored: the session's stored boundary is %lld",
                                (long long)req->trim_boundary, (long long)s->stored.trim_boundary);
    if (req->window_defaulted)
        cg_compress_add_warning(res, CG_CWARN_DEFAULT_WINDOW, -1,
                                "the model's context window is not known; %lld tokens assumed",
                                (long long)req->context_window);
    /* Artifacts (and their previews) redacted before they are stored, when the tenant asks. */
    if (s != NULL && c->redact_artifacts && res->n_artifacts > 0) {
        if ((st = redact_artifacts(c->env, c->op, s->session_id, res, &c->in.counter, c->sctx.types,
                                   policy.offload_preview_bytes)) != CG_OK)
            goto fail;
        s->artifacts_redacted = true;
    }
    if ((st = render(c, res)) != CG_OK)
        goto fail;
    c->out->summary_counts = c->sctx.counts;
    return CG_OK;
fail:
    cg_compress_result_free(res);
    return st;
}

/* cg_ctx_session_work_cb: one attempt of a stateful call. */
static cg_status session_work(void *ctx, struct cg_ctx_session_state *s, const struct cg_conv *conv,
                              struct cg_compress_result *res)
{
    return run_cascade(ctx, s, conv, res);
}

cg_status cg_ctx_compress(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_ctx_compress_req *req, struct cg_ctx_compress_out *out)
{
    memset(out, 0, sizeof *out);
    bool stateful = req->session_id != NULL && req->session_id[0] != '\0';
    struct cascade c = {.env = env, .op = op, .req = req, .out = out};
    c.cs.enc = cg_tokenizer(env->tokenizers, req->model->encoding);
    c.cs.profile = req->model->profile;
    out->exact = c.cs.enc != NULL;
    c.in = (struct cg_compress_input){
        .conv = req->conv,
        .model = req->model,
        .dialect = req->dialect,
        .context_window = req->context_window,
        .external_prompt_tokens = req->external_prompt_tokens,
        .trim_boundary = req->trim_boundary,
        .force = req->force,
        .offload = false,
        .history_positions = stateful,
        .offload_skip_reason = "offload needs a session (artifacts are stored with it)",
        .no_summary_reason = "summarizer NONE",
        .clock = clock_ms,
    };
    /* The summary layer: PII redacted first, then the LLM or the extractive summarizer. */
    c.sctx = (struct summary_ctx){.env = env,
                                  .op = op,
                                  .session_id = req->session_id,
                                  .profile = req->model->profile,
                                  .enc = c.cs.enc,
                                  .kind = req->summarizer,
                                  .types = CG_PII_ALL,
                                  .charge = req->charge};
    /* The tenant's redaction settings. A session needs the store anyway, so failing to read
     * them fails the call; stateless, every type is redacted (the safe side). */
    if (cg_summarize_tenant_redaction(env, op, &c.sctx.types, &c.redact_artifacts) != CG_OK &&
        stateful)
        return cg_err_set(op->err, CG_UNAVAILABLE, "storage unavailable (tenant settings)");
    if (req->summarizer != 0) {
        c.in.summarize = summarize_range;
        c.in.summarize_ctx = &c.sctx;
    }
    cg_status st;
    if (!stateful) {
        st = run_cascade(&c, NULL, req->conv, &out->result);
        out->charged_input_tokens = c.sctx.charged_in;
        out->charged_output_tokens = c.sctx.charged_out;
        if (st == CG_OK)
            cg_svc_meters_compress(env->meters, env->metrics_slot, &out->result);
        return st;
    }
    out->stateful = true;
    struct cg_ctx_session_req sreq = {
        .session_id = req->session_id,
        .append = req->append,
        .dry_run = req->dry_run,
        .conv = req->conv,
        .codec = req->codec,
        .count_state = &c.cs,
        .strategy = (int)req->policy->strategy,
        .context_window = req->context_window,
    };
    st = cg_ctx_session_run(env, op, &sreq, session_work, &c, &out->session, &out->result);
    out->charged_input_tokens = c.sctx.charged_in;
    out->charged_output_tokens = c.sctx.charged_out;
    if (st == CG_OK)
        cg_svc_meters_compress(env->meters, env->metrics_slot, &out->result);
    return st;
}

void cg_ctx_compress_out_free(struct cg_ctx_compress_out *out)
{
    cg_compress_result_free(&out->result);
    cg_ctx_session_cleanup(&out->session);
    free(out->json);
    out->json = NULL;
}

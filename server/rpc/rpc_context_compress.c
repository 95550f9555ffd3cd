/* rpc_context_compress.c - ContextService.Compress and ValidateContext: decode, validate
 * (every error names the field), one service call, encode.
 *
 * Compress: the policy is resolved here (request > preset > server default_preset) and the
 * conversation decoded once (rpc_conv.c); service/context_compress.c runs the cascade, the
 * summary layer, the tenant's redaction of artifacts and, with a session_id, the session flow
 * of service/context_session.c (load, the cascade with no transaction open, save with a
 * revision check), and renders JSON output; the answer is encoded here (the conversation, the
 * CompressionReport with its effective policy and session entries). Counts are exact for
 * models with an OpenAI encoding, estimated otherwise.
 */
#include "rpc/rpc_handlers.h"

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "core/compress.h"
#include "core/models.h"
#include "core/tok.h"
#include "core/utf8.h"
#include "core/validate.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_context_state.h"
#include "rpc/rpc_conv.h"
#include "service/context_compress.h"
#include "service/summarize.h"
#include "service/tokenizers.h"

#define TOKENS_MAX 100000000
#define RESERVED_MAX 10000000
#define MODEL_MAX 200

/* ------------------------------------------------------------------ shared checks ----- */

static cg_status check_range(struct cg_rpc_call *call, const char *field, int64_t v, int64_t min,
                             int64_t max)
{
    if (v < min || v > max)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' must be %lld..%lld", field,
                          (long long)min, (long long)max);
    return CG_OK;
}

static cg_status check_enum(struct cg_rpc_call *call, const char *field, int v, int max)
{
    if (v < 0 || v > max)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' has an unknown value %d",
                          field, v);
    return CG_OK;
}

/* The model's table entry and the window to use (given, else the table's). */
static void model_window(const char *model, int64_t given, struct cg_model_info *info,
                         int64_t *window, bool *defaulted)
{
    cg_models_lookup(model, info);
    *defaulted = false;
    if (given > 0) {
        *window = given;
    } else {
        *window = info->context_window > 0 ? info->context_window : CG_MODELS_DEFAULT_WINDOW;
        *defaulted = !info->known;
    }
}

/* ------------------------------------------------------------------ policy ------------ */

static cg_status ratio(struct cg_rpc_call *call, const char *field, double v, double *out)
{
    if (v == 0)
        return CG_OK;
    if (!(v > 0 && v <= 1))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'policy.%s' must be in (0, 1]",
                          field);
    *out = v;
    return CG_OK;
}

/* The policy's ratios (0: the preset's), TRIMMING's target following the trigger and the
 * hysteresis unless given. */
static cg_status policy_ratios(struct cg_rpc_call *call, const Ctxguard__V1__CompressionPolicy *rp,
                               struct cg_compress_policy *p)
{
    cg_status st;
    if ((st = ratio(call, "trigger_ratio", rp->trigger_ratio, &p->trigger_ratio)) != CG_OK ||
        (st = ratio(call, "ceiling_ratio", rp->ceiling_ratio, &p->ceiling_ratio)) != CG_OK ||
        (st = ratio(call, "trim_hysteresis_ratio", rp->trim_hysteresis_ratio,
                    &p->hysteresis_ratio)) != CG_OK ||
        (st = ratio(call, "summarize_ratio", rp->summarize_ratio, &p->summarize_ratio)) != CG_OK)
        return st;
    /* TRIMMING's target follows the trigger and the hysteresis unless given. */
    if (p->strategy == CG_STRATEGY_TRIMMING)
        p->target_ratio = p->trigger_ratio * p->hysteresis_ratio;
    if ((st = ratio(call, "target_ratio", rp->target_ratio, &p->target_ratio)) != CG_OK)
        return st;
    if ((st = check_range(call, "policy.target_tokens", rp->target_tokens, 0, 100000000)) != CG_OK)
        return st;
    p->target_tokens = rp->target_tokens;
    return CG_OK;
}

/* The policy's message counts and sizes (unset or 0: the preset's). */
static cg_status policy_counts(struct cg_rpc_call *call, const Ctxguard__V1__CompressionPolicy *rp,
                               struct cg_compress_policy *p)
{
    cg_status st;
    if (rp->reserved_output_tokens_opt_case ==
        CTXGUARD__V1__COMPRESSION_POLICY__RESERVED_OUTPUT_TOKENS_OPT_RESERVED_OUTPUT_TOKENS) {
        if ((st = check_range(call, "policy.reserved_output_tokens", rp->reserved_output_tokens, 0,
                              RESERVED_MAX)) != CG_OK)
            return st;
        p->reserved_output_tokens = rp->reserved_output_tokens;
    }
    if (rp->primers_opt_case == CTXGUARD__V1__COMPRESSION_POLICY__PRIMERS_OPT_PRIMERS) {
        if ((st = check_range(call, "policy.primers", rp->primers, 0, 1000)) != CG_OK)
            return st;
        p->primers = rp->primers;
    }
    if (rp->recents_opt_case == CTXGUARD__V1__COMPRESSION_POLICY__RECENTS_OPT_RECENTS) {
        if ((st = check_range(call, "policy.recents", rp->recents, 0, 10000)) != CG_OK)
            return st;
        p->recents = rp->recents;
    }
    if (rp->window_messages != 0) {
        if ((st = check_range(call, "policy.window_messages", rp->window_messages, 1, 100000)))
            return st;
        p->window_messages = rp->window_messages;
    }
    if (rp->keep_last_assistant_opt_case ==
        CTXGUARD__V1__COMPRESSION_POLICY__KEEP_LAST_ASSISTANT_OPT_KEEP_LAST_ASSISTANT) {
        if ((st = check_range(call, "policy.keep_last_assistant", rp->keep_last_assistant, 0,
                              10000)) != CG_OK)
            return st;
        p->keep_last_assistant = rp->keep_last_assistant;
    }
    struct {
        const char *field;
        int64_t v, min, max;
        int64_t *out;
    } ints[] = {
        {"policy.offload_threshold_chars", rp->offload_threshold_chars, 1, (int64_t)1 << 31,
         &p->offload_threshold_chars},
        {"policy.offload_threshold_tokens", rp->offload_threshold_tokens, 1, (int64_t)1 << 31,
         &p->offload_threshold_tokens},
        {"policy.offload_preview_bytes", rp->offload_preview_bytes, 1, 1048576,
         &p->offload_preview_bytes},
        {"policy.tool_result_threshold_chars", rp->tool_result_threshold_chars, 1, (int64_t)1 << 31,
         &p->tool_result_threshold_chars},
        {"policy.tool_result_target_chars", rp->tool_result_target_chars, 1, (int64_t)1 << 31,
         &p->tool_result_target_chars},
        {"policy.summary_max_tokens", rp->summary_max_tokens, 64, 2000, &p->summary_max_tokens},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        if (ints[i].v == 0)
            continue;
        if ((st = check_range(call, ints[i].field, ints[i].v, ints[i].min, ints[i].max)))
            return st;
        *ints[i].out = ints[i].v;
    }
    return CG_OK;
}

/* policy.write_tool_names: at most CG_COMPRESS_WRITE_TOOLS_MAX names, each checked. */
static cg_status policy_write_tools(struct cg_rpc_call *call,
                                    const Ctxguard__V1__CompressionPolicy *rp,
                                    struct cg_compress_policy *p)
{
    cg_status st;
    if (rp->n_write_tool_names > 0) {
        if (rp->n_write_tool_names > CG_COMPRESS_WRITE_TOOLS_MAX)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'policy.write_tool_names' has more than %d names",
                              CG_COMPRESS_WRITE_TOOLS_MAX);
        for (size_t i = 0; i < rp->n_write_tool_names; i++) {
            char field[64];
            snprintf(field, sizeof field, "policy.write_tool_names[%zu]", i);
            if ((st = cg_rpc_check_name(call, field, rp->write_tool_names[i], CG_CONV_ID_MAX,
                                        true)) != CG_OK)
                return st;
            p->write_tool_names[i] = rp->write_tool_names[i];
        }
        p->n_write_tool_names = rp->n_write_tool_names;
    }
    return CG_OK;
}

/* The summary focus, the cache hint, the escalation and time budgets and the disabled
 * layers. */
static cg_status policy_run_limits(struct cg_rpc_call *call,
                                   const Ctxguard__V1__CompressionPolicy *rp,
                                   struct cg_compress_policy *p)
{
    cg_status st;
    if (cg_utf8_length(rp->summary_focus, strlen(rp->summary_focus)) > 2000)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'policy.summary_focus' is longer than 2000 characters");
    p->prompt_cache_hint = rp->prompt_cache_hint;
    if (rp->max_escalation_passes_opt_case ==
        CTXGUARD__V1__COMPRESSION_POLICY__MAX_ESCALATION_PASSES_OPT_MAX_ESCALATION_PASSES) {
        if ((st = check_range(call, "policy.max_escalation_passes", rp->max_escalation_passes, 0,
                              10)) != CG_OK)
            return st;
        p->max_escalation_passes = rp->max_escalation_passes;
    }
    if (rp->time_budget_ms != 0) {
        if ((st = check_range(call, "policy.time_budget_ms", rp->time_budget_ms, 100, 300000)))
            return st;
        p->time_budget_ms = rp->time_budget_ms;
    }
    for (size_t i = 0; i < rp->n_disabled_layers; i++) {
        int layer = (int)rp->disabled_layers[i];
        if (layer < CG_LAYER_NORMALIZE || layer > CG_LAYER_SUMMARIZE)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'policy.disabled_layers[%zu]' has an unknown value %d", i,
                              layer);
        if (layer == CG_LAYER_NORMALIZE)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'policy.disabled_layers[%zu]': NORMALIZE cannot be disabled",
                              i);
        p->disabled_layers |= 1u << layer;
    }
    return CG_OK;
}

/* Resolves the request's policy over the preset and the server's default preset. */
static cg_status policy_resolve(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const Ctxguard__V1__CompressionPolicy *rp,
                                struct cg_compress_policy *p)
{
    cg_status st;
    int preset_id = rp != NULL ? (int)rp->preset : 0;
    int strategy = rp != NULL ? (int)rp->strategy : 0;
    if ((st = check_enum(call, "policy.preset", preset_id, 3)) != CG_OK ||
        (st = check_enum(call, "policy.strategy", strategy, 2)) != CG_OK)
        return st;
    const struct cg_preset *preset =
        preset_id ? cg_preset_get(preset_id) : cg_preset_by_name(env->svc.config->default_preset);
    cg_compress_policy_defaults(p, strategy == 2 ? CG_STRATEGY_TRIMMING : CG_STRATEGY_SUMMARIZING,
                                preset);
    if (rp == NULL)
        return CG_OK;
    if ((st = policy_ratios(call, rp, p)) != CG_OK || (st = policy_counts(call, rp, p)) != CG_OK ||
        (st = policy_write_tools(call, rp, p)) != CG_OK ||
        (st = policy_run_limits(call, rp, p)) != CG_OK)
        return st;
    struct cg_err perr = {0};
    if (cg_compress_policy_check(p, &perr) != CG_OK)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "%s", perr.msg);
    return CG_OK;
}

static Ctxguard__V1__CompressionPolicy *policy_out(struct cg_rpc_call *call,
                                                   const struct cg_compress_policy *p,
                                                   const struct cg_preset *preset,
                                                   const Ctxguard__V1__CompressionPolicy *rp)
{
    Ctxguard__V1__CompressionPolicy *o =
        NEW(call, Ctxguard__V1__CompressionPolicy, ctxguard__v1__compression_policy__init);
    if (o == NULL)
        return NULL;
    o->preset = (Ctxguard__V1__UseCasePreset)preset->id;
    o->strategy = (Ctxguard__V1__CompressionStrategy)p->strategy;
    o->trigger_ratio = p->trigger_ratio;
    o->target_ratio = p->target_ratio;
    o->ceiling_ratio = p->ceiling_ratio;
    o->target_tokens = p->target_tokens;
    o->reserved_output_tokens_opt_case =
        CTXGUARD__V1__COMPRESSION_POLICY__RESERVED_OUTPUT_TOKENS_OPT_RESERVED_OUTPUT_TOKENS;
    o->reserved_output_tokens = p->reserved_output_tokens;
    o->primers_opt_case = CTXGUARD__V1__COMPRESSION_POLICY__PRIMERS_OPT_PRIMERS;
    o->primers = p->primers;
    o->recents_opt_case = CTXGUARD__V1__COMPRESSION_POLICY__RECENTS_OPT_RECENTS;
    o->recents = p->recents;
    o->window_messages = p->window_messages;
    o->keep_last_assistant_opt_case =
        CTXGUARD__V1__COMPRESSION_POLICY__KEEP_LAST_ASSISTANT_OPT_KEEP_LAST_ASSISTANT;
    o->keep_last_assistant = p->keep_last_assistant;
    o->trim_hysteresis_ratio = p->hysteresis_ratio;
    o->offload_threshold_chars = p->offload_threshold_chars;
    o->offload_threshold_tokens = p->offload_threshold_tokens;
    o->offload_preview_bytes = p->offload_preview_bytes;
    o->tool_result_threshold_chars = p->tool_result_threshold_chars;
    o->tool_result_target_chars = p->tool_result_target_chars;
    o->n_write_tool_names = p->n_write_tool_names;
    o->write_tool_names = cg_arena_alloc(call->arena, (p->n_write_tool_names + 1) * sizeof(char *));
    if (o->write_tool_names == NULL)
        return NULL;
    for (size_t i = 0; i < p->n_write_tool_names; i++)
        o->write_tool_names[i] = (char *)p->write_tool_names[i];
    o->summarize_ratio = p->summarize_ratio;
    o->summary_max_tokens = p->summary_max_tokens;
    o->summary_focus = rp != NULL ? rp->summary_focus : (char *)"";
    o->prompt_cache_hint = p->prompt_cache_hint;
    o->max_escalation_passes_opt_case =
        CTXGUARD__V1__COMPRESSION_POLICY__MAX_ESCALATION_PASSES_OPT_MAX_ESCALATION_PASSES;
    o->max_escalation_passes = p->max_escalation_passes;
    o->time_budget_ms = p->time_budget_ms;
    size_t n = 0;
    for (int l = CG_LAYER_NORMALIZE; l <= CG_LAYER_SUMMARIZE; l++)
        n += (p->disabled_layers >> l) & 1u;
    o->disabled_layers = cg_arena_alloc(call->arena, (n + 1) * sizeof *o->disabled_layers);
    if (o->disabled_layers == NULL)
        return NULL;
    for (int l = CG_LAYER_NORMALIZE; l <= CG_LAYER_SUMMARIZE; l++)
        if ((p->disabled_layers >> l) & 1u)
            o->disabled_layers[o->n_disabled_layers++] = (Ctxguard__V1__CompressionLayer)l;
    return o;
}

/* ------------------------------------------------------------------ report ------------ */

static char *dup(struct cg_rpc_call *call, const char *s)
{
    return cg_arena_strdup(call->arena, s);
}

/* The non-zero counts of c as PiiRedactionCount entries in the arena; false when out of
 * memory. */
static bool redactions_out(struct cg_rpc_call *call, const struct cg_redact_counts *c,
                           Ctxguard__V1__PiiRedactionCount ***out, size_t *n_out)
{
    *n_out = 0;
    *out = cg_arena_calloc(call->arena, CG_PII_TYPE_COUNT, sizeof **out);
    if (*out == NULL)
        return false;
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++) {
        if (c->by_type[t] == 0)
            continue;
        Ctxguard__V1__PiiRedactionCount *rc =
            NEW(call, Ctxguard__V1__PiiRedactionCount, ctxguard__v1__pii_redaction_count__init);
        if (rc == NULL)
            return false;
        rc->type = (Ctxguard__V1__PiiType)t;
        rc->count = c->by_type[t];
        (*out)[(*n_out)++] = rc;
    }
    return true;
}

static Ctxguard__V1__CompressionReport *report_out(struct cg_rpc_call *call,
                                                   const struct cg_compress_result *r,
                                                   int64_t window, bool exact, cg_dialect dialect,
                                                   const struct cg_redact_counts *summary_counts)
{
    Ctxguard__V1__CompressionReport *o =
        NEW(call, Ctxguard__V1__CompressionReport, ctxguard__v1__compression_report__init);
    if (o == NULL)
        return NULL;
    o->tokens_before = r->tokens_before;
    o->tokens_after = r->tokens_after;
    o->messages_before = r->messages_before;
    o->messages_after = r->messages_after;
    o->context_window_tokens = window;
    o->effective_window_tokens = r->effective_window;
    o->trigger_tokens = r->trigger_tokens;
    o->target_tokens = r->target_tokens;
    o->ceiling_tokens = r->ceiling_tokens;
    o->triggered = r->triggered;
    o->target_reached = r->target_reached;
    o->under_ceiling = r->under_ceiling;
    o->count_method = exact ? CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_EXACT
                            : CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_ESTIMATED;
    o->provider = (Ctxguard__V1__ProviderDialect)dialect;
    o->layers = cg_arena_alloc(call->arena, (r->n_layers + 1) * sizeof *o->layers);
    if (o->layers == NULL)
        return NULL;
    for (size_t i = 0; i < r->n_layers; i++) {
        const struct cg_compress_layer_result *l = &r->layers[i];
        Ctxguard__V1__LayerResult *lr =
            NEW(call, Ctxguard__V1__LayerResult, ctxguard__v1__layer_result__init);
        if (lr == NULL || (lr->detail = dup(call, l->detail)) == NULL)
            return NULL;
        lr->layer = (Ctxguard__V1__CompressionLayer)l->layer;
        lr->outcome = (Ctxguard__V1__LayerOutcome)l->outcome;
        lr->tokens_before = l->tokens_before;
        lr->tokens_after = l->tokens_after;
        lr->tokens_saved = l->tokens_before - l->tokens_after;
        lr->messages_affected = l->messages_affected;
        lr->escalation_pass = l->escalation_pass;
        lr->duration_ms = l->duration_ms;
        o->layers[o->n_layers++] = lr;
    }
    o->trim_boundary_before = r->boundary_before;
    o->trim_boundary_after = r->boundary_after;
    o->boundary_moved = r->boundary_moved;
    o->cache_tokens_invalidated = r->cache_tokens_invalidated;
    o->warnings = cg_arena_alloc(call->arena, (r->n_warnings + 1) * sizeof *o->warnings);
    if (o->warnings == NULL)
        return NULL;
    for (size_t i = 0; i < r->n_warnings; i++) {
        Ctxguard__V1__CompressionWarning *w =
            NEW(call, Ctxguard__V1__CompressionWarning, ctxguard__v1__compression_warning__init);
        if (w == NULL || (w->message = dup(call, r->warnings[i].message)) == NULL)
            return NULL;
        w->code = (Ctxguard__V1__CompressionWarningCode)r->warnings[i].code;
        w->message_index = r->warnings[i].message_index;
        o->warnings[o->n_warnings++] = w;
    }
    o->escalation_passes = r->escalation_passes;
    o->n_source_indexes = (size_t)r->messages_after;
    o->source_indexes = r->source_indexes; /* copied by the encoder before r is freed */
    o->changes = cg_arena_alloc(call->arena, (r->n_changes + 1) * sizeof *o->changes);
    if (o->changes == NULL)
        return NULL;
    for (size_t i = 0; i < r->n_changes; i++) {
        const struct cg_compress_change *c = &r->changes[i];
        Ctxguard__V1__MessageChange *mc =
            NEW(call, Ctxguard__V1__MessageChange, ctxguard__v1__message_change__init);
        if (mc == NULL)
            return NULL;
        mc->source_index = c->source_index;
        mc->output_index = c->output_index;
        mc->layer = (Ctxguard__V1__CompressionLayer)c->layer;
        mc->tokens_before = c->tokens_before;
        mc->tokens_after = c->tokens_after;
        o->changes[o->n_changes++] = mc;
    }
    if (r->has_summary) {
        Ctxguard__V1__CompressionSummaryInfo *s = NEW(call, Ctxguard__V1__CompressionSummaryInfo,
                                                      ctxguard__v1__compression_summary_info__init);
        if (s == NULL)
            return NULL;
        s->first_source_index = r->summary_first;
        s->last_source_index = r->summary_last;
        s->replaced_tokens = r->summary_replaced_tokens;
        s->summary_tokens = r->summary_tokens;
        s->output_index = r->summary_output_index;
        if (!redactions_out(call, summary_counts, &s->redactions, &s->n_redactions))
            return NULL;
        o->summary = s;
    }
    return o;
}

/* ------------------------------------------------------------------ Compress ---------- */

/* The answer: the conversation (JSON rendered by the service), the report with its effective
 * policy and, with a session, its session entries. */
static cg_status compress_out(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const Ctxguard__V1__CompressRequest *req,
                              const struct cg_compress_policy *policy,
                              const struct cg_ctx_compress_req *creq,
                              const struct cg_ctx_compress_out *out,
                              Ctxguard__V1__CompressResponse **resp_out)
{
    const struct cg_compress_result *res = &out->result;
    Ctxguard__V1__CompressResponse *resp =
        NEW(call, Ctxguard__V1__CompressResponse, ctxguard__v1__compress_response__init);
    const struct cg_preset *preset = req->policy && req->policy->preset
                                         ? cg_preset_get((int)req->policy->preset)
                                         : cg_preset_by_name(env->svc.config->default_preset);
    if (resp == NULL)
        return OOM(call);
    cg_status st = CG_OK;
    if (out->verbatim) /* nothing changed: the request's own text (it lives as long as call) */
        resp->conversation = req->conversation;
    else
        st = cg_rpc_conv_out_rendered(call, res->conv, (int)out->format, out->json, out->json_len,
                                      &resp->conversation);
    if (st != CG_OK)
        return st;
    resp->report = report_out(call, res, creq->context_window, out->exact, creq->dialect,
                              &out->summary_counts);
    if (resp->report == NULL ||
        (resp->report->effective_policy = policy_out(call, policy, preset, req->policy)) == NULL)
        return OOM(call);
    /* source_indexes must outlive res: copy into the arena. */
    int64_t *si = cg_arena_alloc(call->arena, (size_t)(res->messages_after + 1) * sizeof *si);
    if (si == NULL)
        return OOM(call);
    memcpy(si, res->source_indexes, (size_t)res->messages_after * sizeof *si);
    resp->report->source_indexes = si;
    if (out->stateful && (st = cg_rpc_ctx_report_session(call, req->dry_run, &out->session, res,
                                                         resp->report)) != CG_OK)
        return st;
    resp->trim_boundary = res->boundary_after;
    *resp_out = resp;
    return CG_OK;
}

/* reject_invalid_input: FAILED_PRECONDITION when a provider would reject the conversation,
 * naming the first error. */
static cg_status reject_invalid(struct cg_rpc_call *call, const struct cg_conv *conv,
                                cg_dialect dialect)
{
    struct cg_validate_input vin = {.conv = conv, .dialect = dialect};
    struct cg_validate_result vr;
    cg_status st = cg_validate(&vin, &vr, &call->err);
    if (st != CG_OK)
        return st;
    if (!vr.valid) {
        const struct cg_issue *is = cg_validate_first_error(&vr);
        cg_err_set(&call->err, CG_FAILED_PRECONDITION,
                   "field 'conversation': %zu issue(s) a provider would reject; first: %s at "
                   "message %lld: %.80s",
                   vr.errors, is ? cg_validate_kind_name(is->kind) : "",
                   is ? (long long)is->message_index : -1LL, is ? is->message : "");
        st = CG_FAILED_PRECONDITION;
    }
    cg_validate_result_free(&vr);
    return st;
}

/* The request's fields as the service takes them; checks them on the way (errors name the
 * field). On success *conv is the decoded conversation (the caller frees it). */
static cg_status compress_in(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const Ctxguard__V1__CompressRequest *req,
                             struct cg_compress_policy *policy, struct cg_model_info *model,
                             struct cg_conv **conv, struct cg_ctx_compress_req *creq)
{
    cg_status st;
    if ((st = cg_rpc_check_name(call, "model", req->model, MODEL_MAX, false)) != CG_OK ||
        (st = check_range(call, "context_window_tokens", req->context_window_tokens, 0,
                          TOKENS_MAX)) != CG_OK ||
        (st = check_range(call, "external_prompt_tokens", req->external_prompt_tokens, 0,
                          TOKENS_MAX)) != CG_OK ||
        (st = check_range(call, "trim_boundary", req->trim_boundary, 0, INT64_MAX)) != CG_OK ||
        (st = check_enum(call, "session_sync", (int)req->session_sync, 2)) != CG_OK ||
        (st = check_enum(call, "response_format", (int)req->response_format,
                         CG_RPC_CONV_FORMAT_MAX)) != CG_OK ||
        (st = check_enum(call, "summarizer", (int)req->summarizer, 4)) != CG_OK ||
        (st = check_enum(call, "provider", (int)req->provider, 4)) != CG_OK)
        return st;
    if ((st = policy_resolve(call, env, req->policy, policy)) != CG_OK)
        return st;
    if ((st = cg_rpc_conv_in(call, "conversation", req->conversation, conv)) != CG_OK)
        return st;
    int64_t window;
    bool defaulted;
    model_window(req->model[0] ? req->model : (*conv)->model.ptr, req->context_window_tokens, model,
                 &window, &defaulted);
    cg_dialect dialect = cg_validate_dialect((cg_dialect)req->provider, (*conv)->origin, model);
    if (req->reject_invalid_input && (st = reject_invalid(call, *conv, dialect)) != CG_OK)
        return st;
    bool none = req->summarizer == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_NONE;
    if (none)
        policy->disabled_layers |= 1u << CG_LAYER_SUMMARIZE;
    *creq = (struct cg_ctx_compress_req){
        .conv = *conv,
        .model = model,
        .dialect = dialect,
        .context_window = window,
        .window_defaulted = defaulted,
        .external_prompt_tokens = req->external_prompt_tokens,
        .trim_boundary = req->trim_boundary,
        .force = req->force,
        .policy = policy,
        .summarizer = none              ? 0
                      : req->summarizer ? (int)req->summarizer
                                        : CG_SUMMARIZER_AUTO,
        .format = (cg_ctx_format)req->response_format,
        .session_id = req->session_id,
        .append = req->session_sync == CTXGUARD__V1__SESSION_SYNC__SESSION_SYNC_APPEND,
        .dry_run = req->dry_run,
    };
    return CG_OK;
}

cg_status cg_rpc_context_compress(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__CompressRequest *req = (const Ctxguard__V1__CompressRequest *)request;
    int64_t started = cg_mono_ms();
    struct cg_compress_policy policy;
    struct cg_model_info model;
    struct cg_conv *conv = NULL;
    struct cg_ctx_compress_req creq;
    struct cg_scope_ids charge;
    cg_status st = compress_in(call, env, req, &policy, &model, &conv, &creq);
    if (st == CG_OK && req->session_id[0] != '\0')
        st = cg_rpc_ctx_check_session_id(call, req->session_id);
    if (st == CG_OK)
        st = cg_rpc_charge_scope(call, req->charge_scope, &charge, &creq.charge);
    if (st != CG_OK) {
        cg_conv_free(conv);
        return st;
    }
    creq.started_ms = started;
    struct cg_rpc_history_codec_ctx hc = {.call = call, .request_conv = req->conversation};
    struct cg_ctx_history_codec codec;
    cg_rpc_ctx_history_codec(&hc, &codec);
    creq.codec = &codec;
    struct cg_op op = cg_rpc_op(call);
    struct cg_ctx_compress_out out;
    Ctxguard__V1__CompressResponse *resp = NULL;
    st = cg_ctx_compress(&env->svc, &op, &creq, &out);
    if (st == CG_OK && (st = compress_out(call, env, req, &policy, &creq, &out, &resp)) == CG_OK) {
        resp->report->duration_ms = cg_mono_ms() - started;
        if (resp->report->summary != NULL) {
            resp->report->summary->charged_input_tokens = out.charged_input_tokens;
            resp->report->summary->charged_output_tokens = out.charged_output_tokens;
        }
        *response = &resp->base;
    }
    cg_ctx_compress_out_free(&out);
    cg_conv_free(conv);
    return st;
}

/* ------------------------------------------------------------------ ValidateContext --- */

cg_status cg_rpc_context_validate(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response)
{
    (void)env;
    const Ctxguard__V1__ValidateContextRequest *req =
        (const Ctxguard__V1__ValidateContextRequest *)request;
    cg_status st;
    int64_t reserved = CG_COMPRESS_RESERVED_OUTPUT;
    if ((st = cg_rpc_check_name(call, "model", req->model, MODEL_MAX, false)) != CG_OK ||
        (st = check_range(call, "context_window_tokens", req->context_window_tokens, 0,
                          TOKENS_MAX)) != CG_OK ||
        (st = check_range(call, "external_prompt_tokens", req->external_prompt_tokens, 0,
                          TOKENS_MAX)) != CG_OK ||
        (st = check_enum(call, "provider", (int)req->provider, 4)) != CG_OK)
        return st;
    if (req->reserved_output_tokens_opt_case ==
        CTXGUARD__V1__VALIDATE_CONTEXT_REQUEST__RESERVED_OUTPUT_TOKENS_OPT_RESERVED_OUTPUT_TOKENS) {
        if ((st = check_range(call, "reserved_output_tokens", req->reserved_output_tokens, 0,
                              RESERVED_MAX)) != CG_OK)
            return st;
        reserved = req->reserved_output_tokens;
    }
    struct cg_conv *conv = NULL;
    if ((st = cg_rpc_conv_in(call, "conversation", req->conversation, &conv)) != CG_OK)
        return st;
    struct cg_model_info model;
    int64_t window;
    bool defaulted;
    model_window(req->model[0] ? req->model : conv->model.ptr, req->context_window_tokens, &model,
                 &window, &defaulted);
    struct cg_compress_count_state cs = {.enc = cg_tokenizer(env->svc.tokenizers, model.encoding),
                                         .profile = model.profile};
    struct cg_compress_counter counter;
    cg_compress_counter_init(&counter, &cs, conv);
    int64_t prompt = counter.fixed_tokens + req->external_prompt_tokens;
    for (size_t i = 0; i < conv->n_messages; i++) {
        int64_t t = counter.count_message(counter.ctx, &conv->messages[i]);
        if (t < 0) {
            cg_conv_free(conv);
            return OOM(call);
        }
        prompt += t;
    }
    cg_dialect dialect = cg_validate_dialect((cg_dialect)req->provider, conv->origin, &model);
    struct cg_validate_input vin = {.conv = conv,
                                    .dialect = dialect,
                                    .have_counts = true,
                                    .prompt_tokens = prompt,
                                    .context_window = window,
                                    .reserved_output_tokens = reserved};
    struct cg_validate_result vr;
    if ((st = cg_validate(&vin, &vr, &call->err)) != CG_OK) {
        cg_conv_free(conv);
        return st;
    }
    cg_conv_free(conv);
    Ctxguard__V1__ValidateContextResponse *resp = NEW(
        call, Ctxguard__V1__ValidateContextResponse, ctxguard__v1__validate_context_response__init);
    if (resp == NULL ||
        (resp->issues = cg_arena_alloc(call->arena, (vr.n + 1) * sizeof *resp->issues)) == NULL) {
        cg_validate_result_free(&vr);
        return OOM(call);
    }
    for (size_t i = 0; i < vr.n; i++) {
        const struct cg_issue *is = &vr.issues[i];
        Ctxguard__V1__ValidationIssue *o =
            NEW(call, Ctxguard__V1__ValidationIssue, ctxguard__v1__validation_issue__init);
        if (o == NULL || (o->tool_call_id = dup(call, is->tool_call_id)) == NULL ||
            (o->message = dup(call, is->message)) == NULL) {
            cg_validate_result_free(&vr);
            return OOM(call);
        }
        o->kind = (Ctxguard__V1__ValidationIssueKind)is->kind;
        o->severity = (Ctxguard__V1__IssueSeverity)is->severity;
        o->message_index = is->message_index;
        o->part_index = is->part_index;
        resp->issues[resp->n_issues++] = o;
    }
    resp->valid = vr.valid;
    resp->prompt_tokens = prompt;
    resp->context_window_tokens = window;
    resp->headroom_tokens = window - prompt;
    resp->count_method = cs.enc != NULL
                             ? CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_EXACT
                             : CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_ESTIMATED;
    resp->provider = (Ctxguard__V1__ProviderDialect)dialect;
    cg_validate_result_free(&vr);
    *response = &resp->base;
    return CG_OK;
}

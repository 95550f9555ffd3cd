/* compress_policy.c - the cascade's defaults (DESIGN.md §4), the policy check, and names. */
#include <stdio.h>
#include <string.h>

#include "core/compress.h"

void cg_compress_policy_defaults(struct cg_compress_policy *p, cg_compress_strategy strategy,
                                 const struct cg_preset *preset)
{
    if (preset == NULL)
        preset = cg_preset_get(CG_PRESET_GENERAL);
    memset(p, 0, sizeof *p);
    p->strategy = strategy == CG_STRATEGY_TRIMMING ? CG_STRATEGY_TRIMMING : CG_STRATEGY_SUMMARIZING;
    p->hysteresis_ratio = 0.75;
    if (p->strategy == CG_STRATEGY_TRIMMING) {
        p->trigger_ratio = 0.80;
        p->target_ratio = 0.80 * 0.75;
    } else {
        p->trigger_ratio = 0.75;
        p->target_ratio = 0.375;
    }
    p->ceiling_ratio = 0.98;
    p->reserved_output_tokens = CG_COMPRESS_RESERVED_OUTPUT;
    p->primers = (uint32_t)preset->primers;
    p->recents = (uint32_t)preset->recents;
    p->window_messages = (uint32_t)preset->window_messages;
    p->keep_last_assistant = 10;
    p->offload_threshold_chars = 10000;
    p->offload_threshold_tokens = 20000;
    p->offload_preview_bytes = 4096;
    p->tool_result_threshold_chars = 10000;
    p->tool_result_target_chars = 8000;
    p->write_tool_names[0] = "write_file";
    p->write_tool_names[1] = "edit_file";
    p->n_write_tool_names = 2;
    p->summarize_ratio = 0.30;
    p->summary_max_tokens = 400;
    p->max_escalation_passes = 2;
    p->time_budget_ms = 30000;
}

static cg_status bad(struct cg_err *err, const char *field, const char *why)
{
    if (err != NULL) {
        err->code = CG_INVALID_ARGUMENT;
        snprintf(err->msg, sizeof err->msg, "policy.%s: %s", field, why);
    }
    return CG_INVALID_ARGUMENT;
}

static bool ratio_ok(double r)
{
    return r > 0 && r <= 1;
}

cg_status cg_compress_policy_check(const struct cg_compress_policy *p, struct cg_err *err)
{
    if (p->strategy != CG_STRATEGY_SUMMARIZING && p->strategy != CG_STRATEGY_TRIMMING)
        return bad(err, "strategy", "unknown value");
    if (!ratio_ok(p->trigger_ratio))
        return bad(err, "trigger_ratio", "must be in (0, 1]");
    if (!ratio_ok(p->target_ratio))
        return bad(err, "target_ratio", "must be in (0, 1]");
    if (!ratio_ok(p->ceiling_ratio))
        return bad(err, "ceiling_ratio", "must be in (0, 1]");
    if (!ratio_ok(p->hysteresis_ratio))
        return bad(err, "trim_hysteresis_ratio", "must be in (0, 1]");
    if (p->target_ratio > p->trigger_ratio)
        return bad(err, "target_ratio", "must not exceed trigger_ratio");
    if (p->trigger_ratio > p->ceiling_ratio)
        return bad(err, "trigger_ratio", "must not exceed ceiling_ratio");
    if (p->reserved_output_tokens < 0 || p->reserved_output_tokens > 10000000)
        return bad(err, "reserved_output_tokens", "must be 0..10,000,000");
    if (p->primers > 1000)
        return bad(err, "primers", "must be 0..1,000");
    if (p->recents > 10000)
        return bad(err, "recents", "must be 0..10,000");
    if (p->window_messages < 1 || p->window_messages > 100000)
        return bad(err, "window_messages", "must be 1..100,000");
    if (p->keep_last_assistant > 10000)
        return bad(err, "keep_last_assistant", "must be 0..10,000");
    if (p->offload_threshold_chars < 1 || p->offload_threshold_chars > ((int64_t)1 << 31))
        return bad(err, "offload_threshold_chars", "must be positive");
    if (p->offload_threshold_tokens < 1 || p->offload_threshold_tokens > ((int64_t)1 << 31))
        return bad(err, "offload_threshold_tokens", "must be positive");
    if (p->offload_preview_bytes < 0 || p->offload_preview_bytes > 1048576)
        return bad(err, "offload_preview_bytes", "must be 0..1,048,576");
    if (p->tool_result_threshold_chars < 1 || p->tool_result_threshold_chars > ((int64_t)1 << 31))
        return bad(err, "tool_result_threshold_chars", "must be positive");
    if (p->tool_result_target_chars < 1 ||
        p->tool_result_target_chars >= p->tool_result_threshold_chars)
        return bad(err, "tool_result_target_chars", "must be positive and below the threshold");
    if (p->n_write_tool_names > CG_COMPRESS_WRITE_TOOLS_MAX)
        return bad(err, "write_tool_names", "too many (at most 32)");
    if (!ratio_ok(p->summarize_ratio))
        return bad(err, "summarize_ratio", "must be in (0, 1]");
    if (p->summary_max_tokens < 64 || p->summary_max_tokens > 2000)
        return bad(err, "summary_max_tokens", "must be 64..2,000");
    if (p->max_escalation_passes > 10)
        return bad(err, "max_escalation_passes", "must be 0..10");
    if (p->target_tokens < 0 || p->target_tokens > 100000000)
        return bad(err, "target_tokens", "must be 0..100,000,000");
    if (p->time_budget_ms < 100 || p->time_budget_ms > 300000)
        return bad(err, "time_budget_ms", "must be 100..300,000");
    if (p->disabled_layers & (1u << CG_LAYER_NORMALIZE))
        return bad(err, "disabled_layers", "NORMALIZE cannot be disabled");
    return CG_OK;
}

const char *cg_compress_layer_name(cg_compress_layer layer)
{
    switch (layer) {
    case CG_LAYER_NORMALIZE:
        return "NORMALIZE";
    case CG_LAYER_OFFLOAD:
        return "OFFLOAD";
    case CG_LAYER_TOOL_RESULT:
        return "TOOL_RESULT_COMPRESSION";
    case CG_LAYER_WRITE_COMPACTION:
        return "WRITE_COMPACTION";
    case CG_LAYER_TRIM:
        return "STABLE_PREFIX_TRIM";
    case CG_LAYER_WINDOW:
        return "SLIDING_WINDOW";
    case CG_LAYER_SUMMARIZE:
        return "SUMMARIZE";
    }
    return "UNKNOWN";
}

const char *cg_compress_outcome_name(cg_compress_outcome outcome)
{
    switch (outcome) {
    case CG_OUTCOME_NOT_NEEDED:
        return "NOT_NEEDED";
    case CG_OUTCOME_APPLIED:
        return "APPLIED";
    case CG_OUTCOME_NO_EFFECT:
        return "NO_EFFECT";
    case CG_OUTCOME_FAILED:
        return "FAILED";
    case CG_OUTCOME_DISABLED:
        return "DISABLED";
    case CG_OUTCOME_SKIPPED:
        return "SKIPPED";
    }
    return "UNKNOWN";
}

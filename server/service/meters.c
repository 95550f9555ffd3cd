/* meters.c - the services' metric families (meters.h). */
#include "service/meters.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static cg_status llm_families(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    struct cg_metric_family *calls = cg_metrics_counter_family(
        reg, "ctxguard_llm_calls_total", "The summarizer's LLM calls by outcome.",
        CG_LABELS("result"), CG_SVC_LLM_RESULTS, err);
    struct cg_metric_family *seconds = cg_metrics_histogram_family(
        reg, "ctxguard_llm_call_seconds",
        "Time of the summarizer's LLM calls, answered or not (retries included).", CG_NO_LABELS,
        (const double[]){0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}, 9, 1, err);
    struct cg_metric_family *tokens = cg_metrics_counter_family(
        reg, "ctxguard_llm_tokens_total", "Tokens the summarizer's LLM calls reported using.",
        CG_LABELS("kind"), 2, err);
    if (calls == NULL || seconds == NULL || tokens == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    for (int r = 0; r < CG_SVC_LLM_RESULTS; r++) {
        const char *name = cg_llm_result_name((cg_llm_result)r);
        if (strcmp(name, "UNKNOWN") != 0) /* values with no name (7, 9) stay NULL */
            m->llm_calls[r] = cg_metric_get(calls, CG_LABELS(name));
    }
    m->llm_seconds = cg_metric_get(seconds, CG_NO_LABELS);
    m->llm_prompt_tokens = cg_metric_get(tokens, CG_LABELS("prompt"));
    m->llm_completion_tokens = cg_metric_get(tokens, CG_LABELS("completion"));
    return CG_OK;
}

static cg_status compress_families(struct cg_svc_meters *m, struct cg_metrics *reg,
                                   struct cg_err *err)
{
    struct cg_metric_family *saved = cg_metrics_counter_family(
        reg, "ctxguard_compression_tokens_saved_total",
        "Tokens each layer of the compression cascade saved in the Compress calls that answered.",
        CG_LABELS("layer"), CG_SVC_LAYERS, err);
    struct cg_metric_family *calls = cg_metrics_counter_family(
        reg, "ctxguard_compress_calls_total",
        "Compress calls that answered, by whether they were over the trigger (or forced).",
        CG_LABELS("triggered"), 2, err);
    if (saved == NULL || calls == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    for (int l = CG_LAYER_NORMALIZE; l <= CG_LAYER_SUMMARIZE && l < CG_SVC_LAYERS; l++)
        m->compression_saved[l] =
            cg_metric_get(saved, CG_LABELS(cg_compress_layer_name((cg_compress_layer)l)));
    m->compress_calls[0] = cg_metric_get(calls, CG_LABELS("false"));
    m->compress_calls[1] = cg_metric_get(calls, CG_LABELS("true"));
    return CG_OK;
}

static cg_status cache_family(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    struct cg_metric_family *f = cg_metrics_counter_family(
        reg, "ctxguard_cache_lookups_total",
        "Where the budget path reads found their rows: the process cache and Redis (hit, "
        "miss), PostgreSQL (hit: read, error).",
        CG_LABELS("layer", "result"), 9, err);
    if (f == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    static const char *const layers[3] = {"process", "redis", "postgresql"};
    static const char *const results[3] = {"hit", "miss", "error"};
    for (int l = 0; l < 3; l++) {
        bool pg = l == CG_SVC_CACHE_POSTGRESQL; /* a read of the truth errs, never misses */
        for (int r = 0; r < 3; r++)
            if (r == CG_SVC_LOOKUP_HIT || r == (pg ? CG_SVC_LOOKUP_ERROR : CG_SVC_LOOKUP_MISS))
                m->cache_lookups[l][r] = cg_metric_get(f, CG_LABELS(layers[l], results[r]));
    }
    return CG_OK;
}

cg_status cg_svc_meters_init(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    *m = (struct cg_svc_meters){0};
    cg_status st = llm_families(m, reg, err);
    if (st == CG_OK)
        st = compress_families(m, reg, err);
    return st == CG_OK ? cache_family(m, reg, err) : st;
}

void cg_svc_meters_lookup(const struct cg_svc_meters *m, uint32_t slot, cg_svc_cache_layer layer,
                          cg_svc_lookup found)
{
    if (m != NULL && (int)layer >= 0 && layer <= CG_SVC_CACHE_POSTGRESQL && (int)found >= 0 &&
        found <= CG_SVC_LOOKUP_ERROR)
        cg_metric_inc(m->cache_lookups[layer][found], slot);
}

void cg_svc_meters_llm(const struct cg_svc_meters *m, uint32_t slot, cg_llm_result result,
                       const struct cg_llm_reply *reply)
{
    if (m == NULL)
        return;
    if ((int)result >= 0 && (int)result < CG_SVC_LLM_RESULTS)
        cg_metric_inc(m->llm_calls[result], slot);
    cg_metric_observe(m->llm_seconds, slot, (double)reply->elapsed_ms / 1000.0);
    if (reply->prompt_tokens > 0)
        cg_metric_add(m->llm_prompt_tokens, slot, (uint64_t)reply->prompt_tokens);
    if (reply->completion_tokens > 0)
        cg_metric_add(m->llm_completion_tokens, slot, (uint64_t)reply->completion_tokens);
}

void cg_svc_meters_compress(const struct cg_svc_meters *m, uint32_t slot,
                            const struct cg_compress_result *res)
{
    if (m == NULL)
        return;
    cg_metric_inc(m->compress_calls[res->triggered ? 1 : 0], slot);
    for (size_t i = 0; i < res->n_layers; i++) {
        const struct cg_compress_layer_result *lr = &res->layers[i];
        int64_t saved = lr->tokens_before - lr->tokens_after;
        if (lr->outcome == CG_OUTCOME_APPLIED && saved > 0 && (int)lr->layer > 0 &&
            (int)lr->layer < CG_SVC_LAYERS)
            cg_metric_add(m->compression_saved[lr->layer], slot, (uint64_t)saved);
    }
}

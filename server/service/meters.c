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

/* Reservations and approvals by what became of them, and the batches' sizes. */
static cg_status budget_families(struct cg_svc_meters *m, struct cg_metrics *reg,
                                 struct cg_err *err)
{
    struct cg_metric_family *res = cg_metrics_counter_family(
        reg, "ctxguard_reservations_total",
        "Reservations created, committed, released and expired, counted by the replica whose "
        "write committed (expired: whose sweeper, or whose Commit or Release, settled it).",
        CG_LABELS("outcome"), CG_SVC_RES_OUTCOMES, err);
    struct cg_metric_family *approvals = cg_metrics_counter_family(
        reg, "ctxguard_approvals_total",
        "Approvals requested, approved, denied and expired, counted by the replica whose "
        "transaction wrote the change when it committed.",
        CG_LABELS("event"), CG_SVC_APPROVAL_EVENTS - 1, err);
    struct cg_metric_family *batch = cg_metrics_histogram_family(
        reg, "ctxguard_store_batch_size",
        "Reserves and Commits written by each committed batched budget transaction.", CG_NO_LABELS,
        (const double[]){1, 2, 4, 8, 16, 32, 64, 128, 256}, 9, 1, err);
    if (res == NULL || approvals == NULL || batch == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    static const char *const outcomes[CG_SVC_RES_OUTCOMES] = {"created", "committed", "released",
                                                              "expired"};
    for (int i = 0; i < CG_SVC_RES_OUTCOMES; i++)
        m->reservations[i] = cg_metric_get(res, CG_LABELS(outcomes[i]));
    /* By cg_approval_state: 1 PENDING (requested) ... 4 EXPIRED. */
    static const char *const events[CG_SVC_APPROVAL_EVENTS] = {NULL, "requested", "approved",
                                                               "denied", "expired"};
    for (int i = 1; i < CG_SVC_APPROVAL_EVENTS; i++)
        m->approvals[i] = cg_metric_get(approvals, CG_LABELS(events[i]));
    m->batch_size = cg_metric_get(batch, CG_NO_LABELS);
    return CG_OK;
}

/* What the monitor thread reads from PostgreSQL now and then (service/gauges.h). */
static cg_status read_families(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    struct cg_metric_family *pending = cg_metrics_gauge_family(
        reg, "ctxguard_approvals_pending",
        "Approvals pending (not decided, not expired), all tenants: read from PostgreSQL, the "
        "same on every replica.",
        CG_NO_LABELS, 1, err);
    struct cg_metric_family *oldest = cg_metrics_gauge_family(
        reg, "ctxguard_approval_oldest_pending_seconds",
        "Age of the oldest pending approval, all tenants (0: none): read from PostgreSQL, the "
        "same on every replica.",
        CG_NO_LABELS, 1, err);
    m->budget_used_ratio = cg_metrics_gauge_set_family(
        reg, "ctxguard_budget_used_ratio",
        "Used over limit tokens of the budgets nearest their limit (the top metrics_budget_top_n "
        "tenant/level pairs; level session: the tenant's highest session), read from "
        "PostgreSQL.",
        CG_LABELS("tenant_id", "level"), CG_SVC_BUDGET_TOP_N_MAX, err);
    if (pending == NULL || oldest == NULL || m->budget_used_ratio == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    m->approvals_pending = cg_metric_get(pending, CG_NO_LABELS);
    m->approval_oldest_pending_seconds = cg_metric_get(oldest, CG_NO_LABELS);
    return CG_OK;
}

/* What the ledger recorded, and what the notifier sent. */
static cg_status spend_families(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    struct cg_metric_family *tokens = cg_metrics_counter_family(
        reg, "ctxguard_usage_tokens_total",
        "Tokens recorded in the ledger by Commit and RecordUsage, by kind, counted by the "
        "replica whose transaction committed.",
        CG_LABELS("kind"), 4, err);
    struct cg_metric_family *cost = cg_metrics_counter_family(
        reg, "ctxguard_usage_cost_micros_total",
        "Cost of the usage recorded in the ledger, micro-dollars (priced by the price table "
        "or given by the caller).",
        CG_NO_LABELS, 1, err);
    struct cg_metric_family *notify = cg_metrics_counter_family(
        reg, "ctxguard_notify_deliveries_total",
        "Webhook and Slack delivery attempts of this replica's notifier, by outcome.",
        CG_LABELS("result"), 3, err);
    m->budget_exhaustion = cg_metrics_gauge_set_family(
        reg, "ctxguard_budget_exhaustion_seconds",
        "Seconds until a budget runs out at its recent spend rate: per tenant and level the "
        "soonest, the metrics_budget_top_n soonest of all (read by each forecast pass).",
        CG_LABELS("tenant_id", "level"), CG_SVC_BUDGET_TOP_N_MAX, err);
    if (tokens == NULL || cost == NULL || notify == NULL || m->budget_exhaustion == NULL)
        return err != NULL && err->code != CG_OK ? err->code : CG_NOMEM;
    static const char *const kinds[4] = {"input", "output", "cache_read", "cache_write"};
    for (int i = 0; i < 4; i++)
        m->usage_tokens[i] = cg_metric_get(tokens, CG_LABELS(kinds[i]));
    m->usage_cost = cg_metric_get(cost, CG_NO_LABELS);
    static const char *const results[3] = {"delivered", "retried", "dead"};
    for (int i = 0; i < 3; i++)
        m->notify[i] = cg_metric_get(notify, CG_LABELS(results[i]));
    return CG_OK;
}

void cg_svc_meters_usage(const struct cg_svc_meters *m, uint32_t slot, const struct cg_usage *u)
{
    if (m == NULL || u == NULL)
        return;
    const int64_t v[4] = {u->input_tokens, u->output_tokens, u->cache_read_tokens,
                          u->cache_write_tokens};
    for (int i = 0; i < 4; i++)
        if (v[i] > 0)
            cg_metric_add(m->usage_tokens[i], slot, (uint64_t)v[i]);
    if (u->cost_micros > 0)
        cg_metric_add(m->usage_cost, slot, (uint64_t)u->cost_micros);
}

void cg_svc_meters_notify(const struct cg_svc_meters *m, uint32_t slot, int delivered, int retried,
                          int dead)
{
    if (m == NULL)
        return;
    const int v[3] = {delivered, retried, dead};
    for (int i = 0; i < 3; i++)
        if (v[i] > 0)
            cg_metric_add(m->notify[i], slot, (uint64_t)v[i]);
}

cg_status cg_svc_meters_init(struct cg_svc_meters *m, struct cg_metrics *reg, struct cg_err *err)
{
    *m = (struct cg_svc_meters){0};
    cg_status st = llm_families(m, reg, err);
    if (st == CG_OK)
        st = compress_families(m, reg, err);
    if (st == CG_OK)
        st = cache_family(m, reg, err);
    if (st == CG_OK)
        st = budget_families(m, reg, err);
    if (st == CG_OK)
        st = spend_families(m, reg, err);
    return st == CG_OK ? read_families(m, reg, err) : st;
}

void cg_svc_meters_reservations(const struct cg_svc_meters *m, uint32_t slot,
                                cg_svc_reservation_outcome outcome, int64_t n)
{
    if (m != NULL && n > 0 && (int)outcome >= 0 && outcome < CG_SVC_RES_OUTCOMES)
        cg_metric_add(m->reservations[outcome], slot, (uint64_t)n);
}

void cg_svc_meters_batch(const struct cg_svc_meters *m, uint32_t slot, int ops)
{
    if (m != NULL && ops > 0)
        cg_metric_observe(m->batch_size, slot, (double)ops);
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

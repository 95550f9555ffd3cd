/* meters.h - what the services count (base/metrics.h): the handles of their metric families,
 * registered once at start (cg_svc_meters_init) and shared by every thread; each thread
 * counts into its own slot (cg_svc_env.metrics_slot).
 *
 *   ctxguard_llm_calls_total{result}          the summarizer's LLM calls by outcome (OK,
 *                                             TIMEOUT, LLM_ERROR, CIRCUIT_OPEN, BUDGET, ...)
 *   ctxguard_llm_call_seconds                 their time, answered or not (histogram)
 *   ctxguard_llm_tokens_total{kind}           the tokens they reported (prompt, completion)
 *   ctxguard_compression_tokens_saved_total{layer}
 *                                             tokens each cascade layer saved in the Compress
 *                                             calls that answered (NORMALIZE ... SUMMARIZE)
 *   ctxguard_compress_calls_total{triggered}  Compress calls that answered, over the trigger
 *                                             (or forced) or not
 *   ctxguard_cache_lookups_total{layer,result}
 *                                             where a budget path read found its rows:
 *                                             process (hit, miss), redis (hit, miss),
 *                                             postgresql (hit: read, error)
 *   ctxguard_reservations_total{outcome}      reservations created, committed, released and
 *                                             expired, counted by the process whose write
 *                                             committed (cg_svc_meters_reservations)
 *   ctxguard_approvals_total{event}           approvals requested, approved, denied and
 *                                             expired: counted by the stores when the
 *                                             transaction that wrote them commits (the handles
 *                                             go to cg_store_meters)
 *   ctxguard_store_batch_size                 Reserves and Commits each committed batch
 *                                             transaction wrote (histogram, 1 ... 256)
 *   ctxguard_usage_tokens_total{kind}         tokens recorded in the ledger (Commit,
 *                                             RecordUsage), by kind: input, output,
 *                                             cache_read, cache_write; counted at commit
 *   ctxguard_usage_cost_micros_total          their cost (as recorded, priced or given)
 *   ctxguard_budget_exhaustion_seconds{tenant_id,level}
 *                                             the soonest forecast exhaustion per tenant and
 *                                             level, the top metrics_budget_top_n soonest
 *                                             (service/forecast.c, each forecast pass)
 *   ctxguard_notify_deliveries_total{result}  webhook/Slack delivery attempts by outcome:
 *                                             delivered, retried (failed, tried again later),
 *                                             dead (failed for the last time)
 *   ctxguard_approvals_pending                approvals pending, all tenants
 *   ctxguard_approval_oldest_pending_seconds  the oldest one's age
 *   ctxguard_budget_used_ratio{tenant_id,level}
 *                                             the top N budgets by used / limit; these three
 *                                             read from PostgreSQL every so often by the
 *                                             monitor thread (service/gauges.h)
 */
#ifndef CG_SERVICE_METERS_H
#define CG_SERVICE_METERS_H

#include <stdint.h>

#include "base/metrics.h"
#include "base/status.h"
#include "core/compress.h"
#include "llm/llm.h"
#include "store/store.h"

#define CG_SVC_LLM_RESULTS 11 /* cg_llm_result values 0..10 */
#define CG_SVC_LAYERS 8       /* cg_compress_layer values 1..7 */

/* The layers a budget path is read through, and what a lookup found. */
typedef enum {
    CG_SVC_CACHE_PROCESS,
    CG_SVC_CACHE_REDIS,
    CG_SVC_CACHE_POSTGRESQL
} cg_svc_cache_layer;
typedef enum { CG_SVC_LOOKUP_HIT, CG_SVC_LOOKUP_MISS, CG_SVC_LOOKUP_ERROR } cg_svc_lookup;

/* What became of a reservation (ctxguard_reservations_total's outcome). */
typedef enum {
    CG_SVC_RES_CREATED,
    CG_SVC_RES_COMMITTED,
    CG_SVC_RES_RELEASED,
    CG_SVC_RES_EXPIRED,
} cg_svc_reservation_outcome;
#define CG_SVC_RES_OUTCOMES 4

/* The events of ctxguard_approvals_total, indexed like cg_approval_state (store.h): the state
 * an approval enters (PENDING: requested). */
#define CG_SVC_APPROVAL_EVENTS 5

/* The most label sets of ctxguard_budget_used_ratio (the bound of metrics_budget_top_n). */
#define CG_SVC_BUDGET_TOP_N_MAX 500

struct cg_svc_meters {
    struct cg_metric *llm_calls[CG_SVC_LLM_RESULTS];
    struct cg_metric *llm_seconds;
    struct cg_metric *llm_prompt_tokens, *llm_completion_tokens;
    struct cg_metric *compression_saved[CG_SVC_LAYERS];  /* by cg_compress_layer */
    struct cg_metric *compress_calls[2];                 /* [triggered] */
    struct cg_metric *cache_lookups[3][3];               /* [cg_svc_cache_layer][cg_svc_lookup] */
    struct cg_metric *reservations[CG_SVC_RES_OUTCOMES]; /* by cg_svc_reservation_outcome */
    struct cg_metric *approvals[CG_SVC_APPROVAL_EVENTS]; /* [1..4] by cg_approval_state */
    struct cg_metric *batch_size;                        /* ctxguard_store_batch_size */
    struct cg_metric *usage_tokens[4]; /* input, output, cache_read, cache_write */
    struct cg_metric *usage_cost;
    struct cg_metric *notify[3];                /* delivered, retried, dead */
    struct cg_metric_family *budget_exhaustion; /* replaced whole by service/forecast.c */
    struct cg_metric *approvals_pending;        /* gauges set by service/gauges.c */
    struct cg_metric *approval_oldest_pending_seconds;
    struct cg_metric_family *budget_used_ratio; /* replaced whole (metrics.h) by gauges.c */
};

/* Registers the families in reg and resolves every handle into *m. On error (out of memory,
 * a clash with a family of the same name) err says why. */
cg_status cg_svc_meters_init(struct cg_svc_meters *m, struct cg_metrics *reg,
                             struct cg_err *err) CG_MUST_CHECK;

/* One LLM call of the summarizer: its outcome, time and reported usage (m NULL: nothing). */
void cg_svc_meters_llm(const struct cg_svc_meters *m, uint32_t slot, cg_llm_result result,
                       const struct cg_llm_reply *reply);

/* One lookup of a budget path in a layer (m NULL: nothing). */
void cg_svc_meters_lookup(const struct cg_svc_meters *m, uint32_t slot, cg_svc_cache_layer layer,
                          cg_svc_lookup found);

/* n reservations (0: nothing) that came to outcome in writes that committed (m NULL:
 * nothing). */
void cg_svc_meters_reservations(const struct cg_svc_meters *m, uint32_t slot,
                                cg_svc_reservation_outcome outcome, int64_t n);

/* Usage the ledger recorded in a transaction that committed (m or u NULL: nothing). */
void cg_svc_meters_usage(const struct cg_svc_meters *m, uint32_t slot, const struct cg_usage *u);

/* What a notifier pass did (m NULL: nothing). */
void cg_svc_meters_notify(const struct cg_svc_meters *m, uint32_t slot, int delivered, int retried,
                          int dead);

/* One committed batch transaction that wrote ops Reserves and Commits (m NULL: nothing). */
void cg_svc_meters_batch(const struct cg_svc_meters *m, uint32_t slot, int ops);

/* One Compress that answered: what each layer saved (m NULL: nothing). */
void cg_svc_meters_compress(const struct cg_svc_meters *m, uint32_t slot,
                            const struct cg_compress_result *res);

#endif

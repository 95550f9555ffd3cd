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
 */
#ifndef CG_SERVICE_METERS_H
#define CG_SERVICE_METERS_H

#include <stdint.h>

#include "base/metrics.h"
#include "base/status.h"
#include "core/compress.h"
#include "llm/llm.h"

#define CG_SVC_LLM_RESULTS 11 /* cg_llm_result values 0..10 */
#define CG_SVC_LAYERS 8       /* cg_compress_layer values 1..7 */

/* The layers a budget path is read through, and what a lookup found. */
typedef enum {
    CG_SVC_CACHE_PROCESS,
    CG_SVC_CACHE_REDIS,
    CG_SVC_CACHE_POSTGRESQL
} cg_svc_cache_layer;
typedef enum { CG_SVC_LOOKUP_HIT, CG_SVC_LOOKUP_MISS, CG_SVC_LOOKUP_ERROR } cg_svc_lookup;

struct cg_svc_meters {
    struct cg_metric *llm_calls[CG_SVC_LLM_RESULTS];
    struct cg_metric *llm_seconds;
    struct cg_metric *llm_prompt_tokens, *llm_completion_tokens;
    struct cg_metric *compression_saved[CG_SVC_LAYERS]; /* by cg_compress_layer */
    struct cg_metric *compress_calls[2];                /* [triggered] */
    struct cg_metric *cache_lookups[3][3];              /* [cg_svc_cache_layer][cg_svc_lookup] */
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

/* One Compress that answered: what each layer saved (m NULL: nothing). */
void cg_svc_meters_compress(const struct cg_svc_meters *m, uint32_t slot,
                            const struct cg_compress_result *res);

#endif

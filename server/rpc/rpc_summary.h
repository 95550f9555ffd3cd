/* rpc_summary.h - summarizing inside the server, for Summarize and for Compress's summary
 * layer: PII redaction of a conversation before any summarizer sees it, then the LLM or the
 * extractive summarizer (core/summary.h) by the rules of ctxguard.v1.SummarizerKind, with the
 * fallback reason when AUTO falls back. Internal to rpc/.
 */
#ifndef CG_RPC_SUMMARY_H
#define CG_RPC_SUMMARY_H

#include <stdint.h>

#include "core/conv.h"
#include "core/tok.h"
#include "core/models.h"
#include "core/redact.h"
#include "core/summary.h"
#include "rpc/rpc.h"

/* Values of ctxguard.v1.SummarizerKind and SummaryFallbackReason used here. */
#define CG_RPC_SUMMARIZER_AUTO 1
#define CG_RPC_SUMMARIZER_LLM 2
#define CG_RPC_SUMMARIZER_EXTRACTIVE 3
#define CG_RPC_FALLBACK_NONE 0
#define CG_RPC_FALLBACK_NOT_SMALLER 7
#define CG_RPC_FALLBACK_REQUESTED 9

/* The call's tenant's redaction settings (admin.proto TenantSettings), one primary-key
 * read: *types gets the CG_PII_BIT mask to redact (CG_PII_ALL when the tenant lists none),
 * *artifacts whether Compress redacts artifacts. On a store error *types is CG_PII_ALL,
 * *artifacts false, call->err is left alone and the store's status is returned (the caller
 * decides whether it can go on: redacting every type is the safe side). */
cg_status cg_rpc_tenant_redaction(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  unsigned *types, bool *artifacts) CG_MUST_CHECK;

/* A copy of conv (*out, the caller frees it with cg_conv_free) in which every text a
 * summarizer reads (text, tool call arguments, tool results, reasoning) is redacted of the
 * types in `types` (a CG_PII_BIT mask; 0 means CG_PII_ALL); images are left out. With a
 * non-empty session_id the pseudonym table of (the caller's tenant, session_id) in
 * env->svc.pseudonyms is used, so a value keeps its label across the session's requests;
 * otherwise a table of the call's own. counts is added to. On error fills call->err (naming
 * `conversation`) and *out is NULL. */
cg_status cg_rpc_redact_conv(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const char *session_id, unsigned types, const struct cg_conv *conv,
                             struct cg_conv **out, struct cg_redact_counts *counts) CG_MUST_CHECK;

/* Redacts texts in[0..n) (in_len[i] bytes each) of `types` as cg_rpc_redact_conv does,
 * with the same pseudonym table, into out[i] (malloc'd, NUL-terminated, out_len[i] bytes;
 * the caller frees them). Each result is at most max_bytes. On error every out[i] is NULL,
 * call->err names `field` and counts is unchanged. */
cg_status cg_rpc_redact_texts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const char *session_id, unsigned types, const char *field, size_t n,
                              const char *const *in, const size_t *in_len, size_t max_bytes,
                              char **out, size_t *out_len,
                              struct cg_redact_counts *counts) CG_MUST_CHECK;

struct cg_rpc_summary_opts {
    int kind;                          /* CG_RPC_SUMMARIZER_AUTO, _LLM or _EXTRACTIVE */
    int64_t target_tokens;             /* 64..2000 (checked by the caller) */
    size_t from, to;                   /* the messages [from, to); to == 0: to the end */
    const char *focus;                 /* "" or NULL: none */
    const char *language;              /* a table language ("de"); "" or NULL: detected */
    cg_profile profile;                /* the estimator profile tokens are counted with, */
    const struct cg_tok_encoding *enc; /* unless this exact encoding is given */
};

struct cg_rpc_summary_result {
    struct cg_summary summary; /* the caller cleans it up (cg_summary_cleanup) */
    int used;                  /* CG_RPC_SUMMARIZER_LLM or _EXTRACTIVE */
    int reason;                /* a SummaryFallbackReason; 0 when the LLM's was used */
    char detail[240];          /* the fallback in words; "" when none */
    int64_t input_tokens;      /* of the messages summarized */
    uint32_t llm_attempts;     /* HTTP requests made */
    uint32_t chunks;           /* of a hierarchical LLM summary; 0 when in one piece */
};

/* Summarizes the messages [from, to) of conv, which must be redacted already
 * (cg_rpc_redact_conv). LLM: its summary (hierarchical when long; each answer must have the
 * six section headings, the final one fewer tokens than the input) or FAILED_PRECONDITION
 * when no LLM is configured, UNAVAILABLE when it fails (call->err says why). AUTO: the LLM's
 * when it succeeds, else the extractive summary with the reason. EXTRACTIVE: the extractive
 * summary (reason REQUESTED). The LLM gets the call's deadline minus a reserve for the
 * fallback. out is initialised here; clean out->summary up also after an error. Runs on a
 * pool thread (env->svc.llm). */
cg_status cg_rpc_summarize(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                           const struct cg_conv *conv, const struct cg_rpc_summary_opts *opts,
                           struct cg_rpc_summary_result *out) CG_MUST_CHECK;

#endif

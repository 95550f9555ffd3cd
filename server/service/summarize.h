/* summarize.h - summarizing inside the server, for Summarize and for Compress's summary
 * layer, in domain types: PII redaction of a conversation before any summarizer sees it (with
 * the session's pseudonym table, service/pseudonyms.h), then the LLM or the extractive
 * summarizer (core/summary.h) by the rules of ctxguard.v1.SummarizerKind, with the fallback
 * reason when AUTO falls back. The LLM comes in as a summarizer object (a chat function and
 * its context), so that it can be replaced by a fake.
 */
#ifndef CG_SERVICE_SUMMARIZE_H
#define CG_SERVICE_SUMMARIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/conv.h"
#include "core/models.h"
#include "core/redact.h"
#include "core/summary.h"
#include "core/tok.h"
#include "llm/llm.h"
#include "service/context_session.h"
#include "service/service.h"

/* Values of ctxguard.v1.SummarizerKind and SummaryFallbackReason used here (the other
 * reasons are llm/llm.h's cg_llm_result values). */
#define CG_SUMMARIZER_AUTO 1
#define CG_SUMMARIZER_LLM 2
#define CG_SUMMARIZER_EXTRACTIVE 3
#define CG_SUMMARY_FALLBACK_NONE 0
#define CG_SUMMARY_FALLBACK_NOT_SMALLER 7
#define CG_SUMMARY_FALLBACK_REQUESTED 9
#define CG_SUMMARY_FALLBACK_BUDGET 10 /* = CG_LLM_BUDGET */

/* An LLM as a summarizer sees it: one chat completion with cg_llm_chat's contract (llm.h). */
struct cg_summarizer {
    cg_llm_result (*chat)(void *ctx, const struct cg_llm_request *req, struct cg_llm_reply *reply);
    void *ctx;
    const char *model; /* the model asked (its context window sizes the chunks) */
};

/* The thread's LLM client (env->llm, the llm_model setting) as a summarizer in *out; false
 * when there is none or it is not configured (llm_base_url empty), *out then untouched. */
bool cg_summarize_llm(const struct cg_svc_env *env, struct cg_summarizer *out);

/* The caller's tenant's redaction settings (admin.proto TenantSettings), one primary-key
 * read: *types gets the CG_PII_BIT mask to redact (CG_PII_ALL when the tenant lists none),
 * *artifacts whether Compress redacts artifacts. On a store error *types is CG_PII_ALL,
 * *artifacts false, op->err is left alone and the store's status is returned (the caller
 * decides whether it can go on: redacting every type is the safe side). */
cg_status cg_summarize_tenant_redaction(const struct cg_svc_env *env, const struct cg_op *op,
                                        unsigned *types, bool *artifacts) CG_MUST_CHECK;

/* A copy of conv (*out, the caller frees it with cg_conv_free) in which every text a
 * summarizer reads is redacted of the types in `types` (a CG_PII_BIT mask; 0 means
 * CG_PII_ALL): core/redact_conv.h. With a non-empty session_id the pseudonym table of (the
 * caller's tenant, session_id) in env->pseudonyms is used, so a value keeps its label across
 * the session's requests; otherwise a table of the call's own. counts is added to. On error
 * fills op->err (naming `conversation`) and *out is NULL. */
cg_status cg_summarize_redact_conv(const struct cg_svc_env *env, const struct cg_op *op,
                                   const char *session_id, unsigned types,
                                   const struct cg_conv *conv, struct cg_conv **out,
                                   struct cg_redact_counts *counts) CG_MUST_CHECK;

/* Redacts texts in[0..n) (in_len[i] bytes each) of `types` as cg_summarize_redact_conv does,
 * with the same pseudonym table, into out[i] (malloc'd, NUL-terminated, out_len[i] bytes;
 * the caller frees them). Each result is at most max_bytes. On error every out[i] is NULL,
 * op->err names `field` and counts is unchanged. */
cg_status cg_summarize_redact_texts(const struct cg_svc_env *env, const struct cg_op *op,
                                    const char *session_id, unsigned types, const char *field,
                                    size_t n, const char *const *in, const size_t *in_len,
                                    size_t max_bytes, char **out, size_t *out_len,
                                    struct cg_redact_counts *counts) CG_MUST_CHECK;

struct cg_summarize_opts {
    int kind;                          /* CG_SUMMARIZER_AUTO, _LLM or _EXTRACTIVE */
    int64_t target_tokens;             /* 64..2000 (checked by the caller) */
    size_t from, to;                   /* the messages [from, to); to == 0: to the end */
    const char *focus;                 /* "" or NULL: none */
    const char *language;              /* a table language ("de"); "" or NULL: detected */
    cg_profile profile;                /* the estimator profile tokens are counted with, */
    const struct cg_tok_encoding *enc; /* unless this exact encoding is given */
    /* The scope the LLM's tokens are charged to (cg_summarize_charge_wrap); NULL: none. */
    const struct cg_scope_ids *charge;
};

struct cg_summarize_result {
    struct cg_summary summary; /* the caller cleans it up (cg_summary_cleanup) */
    int used;                  /* CG_SUMMARIZER_LLM or _EXTRACTIVE */
    int reason;                /* a SummaryFallbackReason; 0 when the LLM's was used */
    char detail[240];          /* the fallback in words; "" when none */
    int64_t input_tokens;      /* of the messages summarized */
    uint32_t llm_attempts;     /* HTTP requests made */
    uint32_t chunks;           /* of a hierarchical LLM summary; 0 when in one piece */
    int64_t charged_input_tokens, charged_output_tokens; /* to opts->charge */
};

/* An LLM summarizer charged to a scope: what cg_summarize_charge_wrap keeps. */
struct cg_summarize_charge {
    const struct cg_svc_env *env;
    const struct cg_op *op;
    struct cg_summarizer inner;
    struct cg_scope_ids ids;
    int64_t input_tokens, output_tokens; /* committed so far */
};

/* *out: inner with every call charged to ids through Reserve and Commit (service/budget_
 * reserve.h) on env's store for op's caller: the request's estimate is reserved first; a
 * refusal (a HARD limit: RESOURCE_EXHAUSTED, an approval it would need, a closed or unknown
 * scope) answers CG_LLM_BUDGET without asking the LLM, a store error CG_LLM_ERROR; a
 * backpressure delay is waited out (within the request's deadline); the usage the LLM
 * reports is committed, the hold released when the call fails. c holds the state and the
 * totals committed (it must outlive *out). op->err is left as it was. */
void cg_summarize_charge_wrap(struct cg_summarize_charge *c, const struct cg_svc_env *env,
                              const struct cg_op *op, const struct cg_summarizer *inner,
                              const struct cg_scope_ids *ids, struct cg_summarizer *out);

/* Summarizes the messages [from, to) of conv, which must be redacted already
 * (cg_summarize_redact_conv), with llm (NULL: no LLM configured). LLM: its summary
 * (hierarchical when long; each answer must have the six section headings, the final one
 * fewer tokens than the input) or FAILED_PRECONDITION when there is no LLM, UNAVAILABLE when
 * it fails (op->err says why). AUTO: the LLM's when it succeeds, else the extractive summary
 * with the reason. EXTRACTIVE: the extractive summary (reason REQUESTED). The LLM gets the
 * operation's deadline minus a reserve for the fallback. out is initialised here; clean
 * out->summary up also after an error. Holds no lock and no transaction: the LLM may take
 * seconds. */
cg_status cg_summarize(const struct cg_op *op, const struct cg_summarizer *llm,
                       const struct cg_conv *conv, const struct cg_summarize_opts *opts,
                       struct cg_summarize_result *out) CG_MUST_CHECK;

/* The two steps in one: conv redacted of `types` (cg_summarize_redact_conv, with
 * session_id's pseudonyms; counts is added to), then summarized (cg_summarize) with the
 * thread's LLM when one is configured. Nothing but the summary keeps the redacted copy. */
cg_status cg_summarize_redacted(const struct cg_svc_env *env, const struct cg_op *op,
                                const char *session_id, unsigned types, const struct cg_conv *conv,
                                const struct cg_summarize_opts *opts,
                                struct cg_redact_counts *counts,
                                struct cg_summarize_result *out) CG_MUST_CHECK;

/* One Summarize, checked by the caller. */
struct cg_summarize_req {
    const struct cg_conv *conv; /* the request's conversation, or NULL: the session's history */
    const char *session_id;     /* its pseudonyms (and its history when conv is NULL) */
    int64_t from_position, to_position;       /* of the history; to 0: to its end */
    const struct cg_ctx_history_codec *codec; /* how the history is stored */
    const char *model; /* counted with its estimator and encoding; "": the conversation's */
    int kind;          /* CG_SUMMARIZER_AUTO, _LLM or _EXTRACTIVE */
    int64_t target_tokens;
    const char *focus, *language;      /* "" for none / detected */
    const struct cg_scope_ids *charge; /* the LLM's tokens are charged to it; NULL: none */
};

#define CG_SUMMARIZE_HISTORY_MAX 20000 /* messages of a session's history in one Summarize */

/* Summarize's one call: the conversation (or the session's history, see
 * context_session.h cg_ctx_session_history), INVALID_ARGUMENT naming `conversation` when
 * it has no messages, then cg_summarize_redacted with the types of the caller's tenant's
 * settings (every type when they cannot be read). counts is added to; *out as for
 * cg_summarize (clean out->summary up also after an error). */
cg_status cg_summarize_request(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_summarize_req *req, struct cg_redact_counts *counts,
                               struct cg_summarize_result *out) CG_MUST_CHECK;

#endif

/* context_compress.h - ContextService.Compress as a service, in domain types: the cascade
 * (core/compress.h) over a conversation decoded once by the caller, with the summary layer
 * (service/summarize.h: redacted, then the LLM or the extractive summarizer), the tenant's
 * redaction of artifacts and, with a session_id, the session flow of
 * service/context_session.h (load, the cascade with no transaction open, save with a
 * revision check). The output conversation is rendered here for the JSON formats, before
 * anything is saved, so that a conversation the format cannot carry fails the call with
 * nothing stored.
 */
#ifndef CG_SERVICE_CONTEXT_COMPRESS_H
#define CG_SERVICE_CONTEXT_COMPRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compress.h"
#include "core/conv.h"
#include "core/models.h"
#include "core/redact.h"
#include "core/validate.h"
#include "service/context_session.h"
#include "service/service.h"

/* The output's form (the values of ctxguard.v1.ConversationFormat). */
typedef enum {
    CG_CTX_FORMAT_AS_READ = 0, /* the form the conversation came in */
    CG_CTX_FORMAT_STRUCTURED = 1,
    CG_CTX_FORMAT_OPENAI = 2,
    CG_CTX_FORMAT_ANTHROPIC = 3,
    CG_CTX_FORMAT_RESPONSES = 4,
    CG_CTX_FORMAT_GEMINI = 5,
} cg_ctx_format;

/* One Compress, checked by the caller (every pointer borrowed for the call). */
struct cg_ctx_compress_req {
    const struct cg_conv *conv; /* the request's conversation (APPEND: the new messages) */
    const struct cg_model_info *model;
    cg_dialect dialect;
    int64_t context_window;
    bool window_defaulted; /* the model's window was not known: a warning says so */
    int64_t external_prompt_tokens;
    int64_t trim_boundary; /* the caller's; a session's stored boundary wins */
    bool force;
    const struct cg_compress_policy *policy; /* resolved and checked */
    int summarizer; /* CG_SUMMARIZER_AUTO, _LLM or _EXTRACTIVE; 0: no summary layer */
    cg_ctx_format format;
    const char *session_id; /* "" or NULL: stateless (nothing stored, no offload) */
    bool append;            /* SESSION_SYNC_APPEND */
    bool dry_run;           /* with a session: nothing is stored */
    const struct cg_ctx_history_codec *codec; /* with a session: how history is stored */
    int64_t started_ms;                /* cg_mono_ms at the start of the call (the time budget) */
    const struct cg_scope_ids *charge; /* the summary LLM's tokens go to it; NULL: none */
};

struct cg_ctx_compress_out {
    struct cg_compress_result result;
    bool stateful;
    struct cg_ctx_session_state session; /* stateful: what was saved (dry run: would be) */
    bool exact;                          /* counted with the model's exact encoding */
    cg_ctx_format format;                /* resolved: never AS_READ */
    char *json;                          /* the output in the JSON formats (owned) */
    size_t json_len;
    /* Nothing changed and the answer is in the JSON format the request came in: json is NULL
     * and the caller answers with the request's own text, byte for byte. */
    bool verbatim;
    struct cg_redact_counts summary_counts;              /* of the summary inserted */
    int64_t charged_input_tokens, charged_output_tokens; /* of every LLM summary, to charge */
};

/* Runs one Compress on a pool thread (env->store, env->llm). On success *out holds the result
 * (free it with cg_ctx_compress_out_free). On error op->err says what the client sees
 * (tenant settings unreadable with a session: UNAVAILABLE; the cascade's errors; the
 * session's: see context_session.h) and *out needs cg_ctx_compress_out_free too. */
cg_status cg_ctx_compress(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_ctx_compress_req *req,
                          struct cg_ctx_compress_out *out) CG_MUST_CHECK;

/* Frees what *out holds. */
void cg_ctx_compress_out_free(struct cg_ctx_compress_out *out);

#endif

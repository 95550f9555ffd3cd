/* validate.h - what a provider would reject in a conversation, before it is sent
 * (ValidateContext, and the invariant Compress checks its output against).
 *
 * Rules by dialect (ERROR: the provider rejects the request; WARNING: accepted but likely
 * wrong or wasteful):
 * | kind                  | OPENAI  | ANTHROPIC | GOOGLE  | GENERIC |
 * |-----------------------|---------|-----------|---------|---------|
 * | orphan tool_result    | ERROR   | ERROR     | ERROR   | ERROR   |
 * | dangling tool_call    | ERROR   | ERROR     | ERROR   | ERROR   |
 * | wrong first role      | -       | ERROR     | ERROR   | WARNING |
 * | non-alternating roles | -       | ERROR     | ERROR   | WARNING |
 * | system not first      | -       | ERROR     | ERROR   | WARNING |
 * | duplicate call id     | ERROR   | ERROR     | ERROR   | ERROR   |
 * | duplicate result      | ERROR   | ERROR     | WARNING | WARNING |
 * | empty message         | WARNING | ERROR     | ERROR   | WARNING |
 * | invalid arguments     | WARNING | ERROR     | ERROR   | WARNING |
 * | unknown tool          | WARNING | WARNING   | WARNING | WARNING |
 * | part not allowed      | ERROR   | ERROR     | ERROR   | ERROR   |
 * | exceeds window        | ERROR   | ERROR     | ERROR   | ERROR   |
 * | headroom below reserve| ERROR   | ERROR     | WARNING | WARNING |
 * Tool pairing: OpenAI and Anthropic need a call's results right after the assistant message
 * that made it (tool messages, or for Anthropic one user message of tool_result blocks);
 * Google and generic only before the next assistant message. An OpenAI assistant message
 * without content or tool calls is an ERROR (empty); Anthropic allows an empty final assistant
 * message and rejects an empty text block anywhere. For alternation, tool messages count as
 * user turns, and consecutive tool messages with the user message after them as one turn (the
 * Anthropic writer merges them into one user message); system and developer messages are
 * skipped. A user message may carry tool_result parts (Anthropic's shape) in every dialect.
 * Pure; thread-safe.
 */
#ifndef CG_CORE_VALIDATE_H
#define CG_CORE_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/conv.h"
#include "core/models.h"

/* Values match ctxguard.v1.ValidationIssueKind. */
typedef enum {
    CG_ISSUE_ORPHAN_TOOL_RESULT = 1,
    CG_ISSUE_DANGLING_TOOL_CALL = 2,
    CG_ISSUE_WRONG_FIRST_ROLE = 3,
    CG_ISSUE_NON_ALTERNATING_ROLES = 4,
    CG_ISSUE_HEADROOM_BELOW_RESERVE = 5,
    CG_ISSUE_EXCEEDS_CONTEXT_WINDOW = 6,
    CG_ISSUE_SYSTEM_NOT_FIRST = 7,
    CG_ISSUE_DUPLICATE_TOOL_CALL_ID = 8,
    CG_ISSUE_DUPLICATE_TOOL_RESULT = 9,
    CG_ISSUE_EMPTY_MESSAGE = 10,
    CG_ISSUE_INVALID_TOOL_ARGUMENTS = 11,
    CG_ISSUE_UNKNOWN_TOOL = 12,
    CG_ISSUE_PART_NOT_ALLOWED = 13,
} cg_issue_kind;

/* Values match ctxguard.v1.IssueSeverity. */
typedef enum {
    CG_SEVERITY_ERROR = 1,
    CG_SEVERITY_WARNING = 2,
} cg_severity;

#define CG_VALIDATE_MAX_ISSUES 1000
#define CG_VALIDATE_TEXT_MAX 160

struct cg_issue {
    cg_issue_kind kind;
    cg_severity severity;
    int64_t message_index; /* -1 for whole-conversation issues */
    int64_t part_index;    /* -1 for the whole message */
    char tool_call_id[CG_CONV_ID_MAX + 1];
    char message[CG_VALIDATE_TEXT_MAX];
};

struct cg_validate_input {
    const struct cg_conv *conv; /* its tools are the definitions checked against */
    cg_dialect dialect;         /* UNSPECIFIED means GENERIC (see cg_validate_dialect) */
    bool have_counts;           /* the three counts below are set */
    int64_t prompt_tokens;
    int64_t context_window;
    int64_t reserved_output_tokens; /* 0: no headroom check */
};

struct cg_validate_result {
    struct cg_issue *issues; /* in message order, whole-conversation issues last; malloc'd */
    size_t n;
    bool truncated; /* more than CG_VALIDATE_MAX_ISSUES were found; `valid` counts them all */
    bool valid;     /* no issue of severity ERROR */
    size_t errors, warnings;
};

/* Checks in->conv against the dialect's rules into *out (free with cg_validate_result_free).
 * Returns CG_RESOURCE_EXHAUSTED when out of memory (err says so; *out is then empty). */
cg_status cg_validate(const struct cg_validate_input *in, struct cg_validate_result *out,
                      struct cg_err *err) CG_MUST_CHECK;

/* The first issue of r whose severity is ERROR (the one an answer names), or NULL. */
const struct cg_issue *cg_validate_first_error(const struct cg_validate_result *r);

/* Frees the issues of r and empties it. NULL is a no-op. */
void cg_validate_result_free(struct cg_validate_result *r);

/* The dialect to apply: the requested one; else the conversation's JSON format (OpenAI chat
 * and Responses: OPENAI, Anthropic: ANTHROPIC, Gemini: GOOGLE); else the model's provider;
 * else GENERIC. */
cg_dialect cg_validate_dialect(cg_dialect requested, cg_conv_origin origin,
                               const struct cg_model_info *model);

/* "ORPHAN_TOOL_RESULT", ...; "UNKNOWN" for other values. */
const char *cg_validate_kind_name(cg_issue_kind kind);

#endif

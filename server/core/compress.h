/* compress.h - the compression cascade of DESIGN.md §4 (Compress), as pure logic.
 *
 * In: a conversation, the model, a resolved policy, the previous trim boundary, a token
 * counter, optionally a summarizer and a clock. Out: a new conversation and a report. Steps:
 *   normalize  always: drop orphan tool results and answer dangling calls with an error result
 *              (INPUT_REPAIRED each), keep the last result per tool_call_id, strip
 *              `<checkpoint_id>...</checkpoint_id>` from assistant and tool text (user and system
 *              text are never touched), drop reasoning parts when the model does not take them,
 *              merge consecutive user (or assistant) messages, and put a "[conversation start]"
 *              user message first when the dialect needs a user turn first.
 *   L0 offload tool results over the threshold become artifacts (returned in the result for
 *              the caller to store); the message keeps a head preview and a reference. Only
 *              when input.offload is set (else SKIPPED with the reason given by the caller).
 *   L1         tool results over the threshold: JSON objects keep their first 3 keys (string
 *              values cut to 100 characters) plus a key count, arrays their first 3 elements plus
 *              the length (still valid JSON); other text keeps its head plus a size marker. The
 *              note names where the whole result is ("history 12" or "input 12").
 *   L2         write/edit tool-call arguments: string values over 100 characters become a
 *              100-character preview and a marker (the content is on disk); still valid JSON.
 *   L3         assistant and tool content of messages whose input index is before the trim
 *              boundary becomes "[trimmed: history 12]" ("input 12" stateless: the message's
 *              position; tool_call ids and names kept, arguments "{}").
 *              The boundary never moves back; it moves only when the count with the old boundary
 *              is over the trigger (TRIMMING) or the target (SUMMARIZING), and then as far as
 *              needed to get under min(target, hysteresis x trigger), never into the last
 *              keep_last_assistant assistant messages.
 *   L4         sliding window: system messages and the primers stay, then the oldest middle
 *              turns (a cut always lands on a user message, so a tool_call and its results are
 *              never separated; never into the recents, never past a pinned turn) are replaced
 *              by one summary until the count with it is at the target: user text never goes
 *              without a summary whose head names the span ("[ctxguard summary of messages
 *              3-41 ...]"), which the summarizer callback writes.
 *   L5         summary: the oldest summarize_ratio of the middle (after the primers, cut at a
 *              user message) becomes one summary the same way, when L4 made none.
 *              No callback: L4 and L5 SKIPPED (a documented outcome). A summary that is not
 *              smaller than what it replaces, or a failing callback: FAILED, changes discarded.
 *   escalate   while over the ceiling: up to max_escalation_passes more passes of L3, L4
 *              (recents halved each pass; its summary takes the earlier one in) and L5, within
 *              the time budget (the clock is passed in).
 * A layer runs only when the ones before it did not reach the target (TRIMMING: L0-L2 run on
 * every triggered call so a message's reduced form never depends on the rest of the
 * conversation, which keeps the prompt prefix stable across turns; L4/L5 only over the
 * ceiling). Every layer works on a copy of the message list: a failing layer leaves nothing.
 *
 * Invariants (tests/unit/test_compress_props.c): the output passes cg_validate for the dialect
 * whenever the input could be repaired; user and system text parts are byte-identical to input
 * parts, in order, except an inserted summary; the output is at or under the target when
 * that is reachable; the same input, policy and boundary give a byte-identical output.
 * Pure: no I/O, no globals; thread-safe for distinct inputs. The callbacks run on the
 * calling thread.
 */
#ifndef CG_CORE_COMPRESS_H
#define CG_CORE_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/conv.h"
#include "core/models.h"
#include "core/preset.h"

struct cg_tok_encoding;

/* Values match ctxguard.v1.CompressionStrategy. */
typedef enum {
    CG_STRATEGY_SUMMARIZING = 1,
    CG_STRATEGY_TRIMMING = 2,
} cg_compress_strategy;

/* Values match ctxguard.v1.CompressionLayer. */
typedef enum {
    CG_LAYER_NORMALIZE = 1,
    CG_LAYER_OFFLOAD = 2,
    CG_LAYER_TOOL_RESULT = 3,
    CG_LAYER_WRITE_COMPACTION = 4,
    CG_LAYER_TRIM = 5,
    CG_LAYER_WINDOW = 6,
    CG_LAYER_SUMMARIZE = 7,
} cg_compress_layer;

/* Values match ctxguard.v1.LayerOutcome. */
typedef enum {
    CG_OUTCOME_NOT_NEEDED = 1,
    CG_OUTCOME_APPLIED = 2,
    CG_OUTCOME_NO_EFFECT = 3,
    CG_OUTCOME_FAILED = 4,
    CG_OUTCOME_DISABLED = 5,
    CG_OUTCOME_SKIPPED = 6,
} cg_compress_outcome;

/* Values match ctxguard.v1.CompressionWarningCode. */
typedef enum {
    CG_CWARN_TARGET_UNREACHABLE = 1,
    CG_CWARN_CEILING_EXCEEDED = 2,
    CG_CWARN_TIME_BUDGET_EXHAUSTED = 3,
    CG_CWARN_INPUT_REPAIRED = 4,
    CG_CWARN_HISTORY_DIVERGED = 5,
    CG_CWARN_BOUNDARY_ADJUSTED = 6,
    CG_CWARN_ESTIMATED_COUNTS = 7,
    CG_CWARN_LAYER_FAILED = 8,
    CG_CWARN_DEFAULT_WINDOW = 9,
} cg_compress_warning_code;

#define CG_COMPRESS_RESERVED_OUTPUT 16000
#define CG_COMPRESS_WRITE_TOOLS_MAX 32
#define CG_COMPRESS_DETAIL_MAX 160
#define CG_COMPRESS_LAYERS_MAX 48
#define CG_COMPRESS_WARNINGS_MAX 64 /* more are counted in warnings_dropped */
#define CG_COMPRESS_TRIMMED                                                                        \
    "[trimmed]" /* where the position is unknown; else "[trimmed: input 12]" */

/* Every knob, resolved (cg_compress_policy_defaults fills them; the rpc layer overrides with
 * request fields). Ratios are of the effective window. */
struct cg_compress_policy {
    cg_compress_strategy strategy;
    double trigger_ratio;           /* 0.75 SUMMARIZING, 0.80 TRIMMING (x1.1 with the cache hint) */
    double target_ratio;            /* 0.375 SUMMARIZING, hysteresis x trigger TRIMMING */
    double ceiling_ratio;           /* 0.98 */
    double hysteresis_ratio;        /* 0.75: L3 trims down to this x the trigger */
    int64_t reserved_output_tokens; /* 16,000 */
    /* From the preset. window_messages is reported in the effective policy only: L4 keeps
     * as many whole turns as the token target allows, which keeps more facts than a fixed
     * message count. */
    uint32_t primers, recents, window_messages;
    uint32_t keep_last_assistant;                              /* 10 */
    int64_t offload_threshold_chars;                           /* 10,000 */
    int64_t offload_threshold_tokens;                          /* 20,000 */
    int64_t offload_preview_bytes;                             /* 4,096 */
    int64_t tool_result_threshold_chars;                       /* 10,000 */
    int64_t tool_result_target_chars;                          /* 8,000 */
    const char *write_tool_names[CG_COMPRESS_WRITE_TOOLS_MAX]; /* borrowed */
    size_t n_write_tool_names;                                 /* write_file, edit_file */
    double summarize_ratio;                                    /* 0.30 */
    int64_t summary_max_tokens;                                /* 400 */
    int64_t target_tokens; /* an absolute target (0: none); the trigger follows it down */
    bool prompt_cache_hint;
    uint32_t max_escalation_passes; /* 2 */
    uint32_t time_budget_ms;        /* 30,000 */
    uint32_t disabled_layers;       /* bit (1u << layer) per disabled layer */
};

/* Fills *p with DESIGN §4's defaults for the strategy and the preset (NULL: general). The
 * prompt-cache hint is off; set it, then call cg_compress_policy_finish. */
void cg_compress_policy_defaults(struct cg_compress_policy *p, cg_compress_strategy strategy,
                                 const struct cg_preset *preset);

/* Checks *p (each ratio in (0, 1], target <= trigger <= ceiling after the hint, sizes in
 * range). On error returns CG_INVALID_ARGUMENT and err names the policy field
 * ("policy.target_ratio: ..."). */
cg_status cg_compress_policy_check(const struct cg_compress_policy *p,
                                   struct cg_err *err) CG_MUST_CHECK;

/* Counts one message's tokens, framing included; -1 when it cannot (out of memory). */
typedef int64_t (*cg_compress_count_cb)(void *ctx, const struct cg_message *msg);

/* How counts are made. fixed_tokens covers what is not a message (reply priming, tool
 * definitions); the report's totals are fixed_tokens + the messages' counts. */
struct cg_compress_counter {
    cg_compress_count_cb count_message;
    void *ctx;
    int64_t fixed_tokens;
    bool exact;
};

/* The built-in counter: exact with enc (o200k/cl100k, not NULL), else the estimator's profile
 * times calibration (0: none). Framing: 3 tokens per message + the role, 3 per tool call or
 * result, a name's text + 1; 3 of reply priming plus the tool definitions in fixed_tokens
 * (counted with the estimator when inexact, the same text rules when exact). state is the
 * caller's storage for the counter's context and must outlive it. */
struct cg_compress_count_state {
    const struct cg_tok_encoding *enc;
    cg_profile profile;
    double calibration;
    /* A count memo (tok.h) or NULL; callers leave it NULL: cg_compress_run makes one for the
     * run (on its own copy of this state), so repeated words are counted once. */
    struct cg_tok_cache *cache;
};
void cg_compress_counter_init(struct cg_compress_counter *c, struct cg_compress_count_state *state,
                              const struct cg_conv *conv);

/* Writes a summary of conv's messages [from, to) in at most target_tokens tokens into
 * *summary_out (malloc'd NUL-terminated text the caller frees). On error returns a status
 * other than CG_OK, fills err, and *summary_out is NULL. */
typedef cg_status (*cg_compress_summarize_cb)(void *ctx, const struct cg_conv *conv, size_t from,
                                              size_t to, int64_t target_tokens, char **summary_out,
                                              struct cg_err *err);

/* The time in milliseconds on any monotonic clock. */
typedef int64_t (*cg_compress_clock_cb)(void *ctx);

struct cg_compress_input {
    const struct cg_conv *conv;        /* borrowed */
    const struct cg_model_info *model; /* borrowed; takes_reasoning */
    cg_dialect dialect;                /* the output is made valid for it (UNSPECIFIED: GENERIC) */
    int64_t context_window;            /* > 0 */
    int64_t external_prompt_tokens;    /* >= 0 */
    int64_t trim_boundary;             /* from the previous answer; clamped to the input size */
    bool force;                        /* run down to the target even under the trigger */
    bool offload;                      /* L0 may make artifacts */
    /* The input's indexes are the session's history positions (a stateful call): the pointers
     * the output carries to what was reduced say "history N" (ctxguard_recall reads them back),
     * else "input N". */
    bool history_positions;
    const char *offload_skip_reason; /* the SKIPPED detail when !offload */
    /* Names the index-th artifact of this call into id (NUL-terminated, < 64 bytes), which the
     * preview's reference then quotes; NULL: the reference gives the index. */
    void (*name_artifact)(void *ctx, size_t index, char id[64]);
    void *name_ctx;
    struct cg_compress_counter counter;
    cg_compress_summarize_cb summarize; /* NULL: L5 SKIPPED */
    void *summarize_ctx;
    const char *no_summary_reason; /* the SKIPPED detail when summarize is NULL */
    cg_compress_clock_cb clock;    /* NULL: no time budget */
    void *clock_ctx;
};

struct cg_compress_layer_result {
    cg_compress_layer layer;
    cg_compress_outcome outcome;
    int64_t tokens_before, tokens_after;
    uint32_t messages_affected;
    uint32_t escalation_pass;
    int64_t duration_ms;
    char detail[CG_COMPRESS_DETAIL_MAX];
};

/* A tool result L0 offloaded. content is its full text (malloc'd, content_len bytes). */
struct cg_compress_artifact {
    char id[64];          /* from name_artifact, or "" */
    int64_t source_index; /* input message */
    int64_t output_index; /* in the output */
    size_t part_index;    /* in the output message */
    char *content;
    size_t content_len;
    size_t preview_bytes;
    bool is_json;
    char tool_call_id[CG_CONV_ID_MAX + 1];
    char tool_name[CG_CONV_ID_MAX + 1];
    int64_t tokens;
};

struct cg_compress_warning {
    cg_compress_warning_code code;
    int64_t message_index; /* input index, -1 when none */
    char message[CG_COMPRESS_DETAIL_MAX];
};

/* What happened to one input message that changed. */
struct cg_compress_change {
    int64_t source_index;
    int64_t output_index; /* -1: dropped or summarized */
    cg_compress_layer layer;
    int64_t tokens_before, tokens_after;
    int64_t artifact; /* index into artifacts, -1 */
};

struct cg_compress_result {
    struct cg_conv *conv; /* the output; owned (cg_compress_result_free) */
    int64_t tokens_before, tokens_after;
    int64_t messages_before, messages_after;
    int64_t effective_window, trigger_tokens, target_tokens, ceiling_tokens;
    bool triggered, target_reached, under_ceiling;
    struct cg_compress_layer_result layers[CG_COMPRESS_LAYERS_MAX];
    size_t n_layers;
    struct cg_compress_artifact *artifacts;
    size_t n_artifacts;
    int64_t boundary_before, boundary_after;
    bool boundary_moved;
    int64_t cache_tokens_invalidated;
    struct cg_compress_warning warnings[CG_COMPRESS_WARNINGS_MAX];
    size_t n_warnings, warnings_dropped;
    uint32_t escalation_passes;
    int64_t *source_indexes; /* messages_after of them; -1 for a summary or inserted message */
    struct cg_compress_change *changes;
    size_t n_changes;
    bool has_summary;
    int64_t summary_first, summary_last; /* input indexes, inclusive */
    int64_t summary_replaced_tokens, summary_tokens, summary_output_index;
};

/* Runs the cascade. On success *out holds the output and the report (free with
 * cg_compress_result_free). Errors: CG_INVALID_ARGUMENT (a bad input or policy, err names it),
 * CG_RESOURCE_EXHAUSTED (a conversation cap, out of memory), CG_FAILED_PRECONDITION (the input
 * cannot be repaired into one the dialect accepts: err names the first issue). On error *out
 * is empty. A failing layer is not an error (see the layer results). */
cg_status cg_compress_run(const struct cg_compress_input *in, const struct cg_compress_policy *p,
                          struct cg_compress_result *out, struct cg_err *err) CG_MUST_CHECK;

/* Adds a warning to out (its message formatted like printf); past CG_COMPRESS_WARNINGS_MAX
 * it is only counted in warnings_dropped. For warnings the caller of cg_compress_run adds
 * about its own part of the call (a session's history, the window it assumed). */
void cg_compress_add_warning(struct cg_compress_result *out, cg_compress_warning_code code,
                             int64_t message_index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Frees what *r owns and empties it. NULL is a no-op. */
void cg_compress_result_free(struct cg_compress_result *r);

/* "NORMALIZE", "OFFLOAD", ...; "UNKNOWN" otherwise. */
const char *cg_compress_layer_name(cg_compress_layer layer);

/* "NOT_NEEDED", "APPLIED", ...; "UNKNOWN" otherwise. */
const char *cg_compress_outcome_name(cg_compress_outcome outcome);

/* L1 on one text: the compact form of content[0..len) in at most about target_chars bytes
 * (JSON stays valid JSON), malloc'd into *out / *out_len; its note says where the whole result
 * is when where is not NULL ("history 12"). Returns false (nothing allocated)
 * when the text is already small enough or memory runs out. Exposed for tests. */
bool cg_compress_tool_text(const char *content, size_t len, size_t target_chars, const char *where,
                           char **out, size_t *out_len);

#endif

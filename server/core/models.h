/* models.h - what ctxguard knows about a model from its name: the exact encoding when OpenAI
 * publishes one, the estimator profile otherwise, the context window, the provider's dialect
 * and whether the model takes reasoning parts back in its input.
 *
 * Names match by prefix, case-insensitively, the longest prefix winning; a routing prefix
 * (`openai/gpt-4o`, `anthropic.claude-...`, `us.anthropic.claude-...`) is skipped. An unknown
 * model gets the default profile, no encoding and `known = false` (its window is then
 * CG_MODELS_DEFAULT_WINDOW, and callers say so).
 * Pure data and lookup: no I/O, no globals that change; thread-safe.
 */
#ifndef CG_CORE_MODELS_H
#define CG_CORE_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Values match ctxguard.v1.TokenEncoding. */
typedef enum {
    CG_ENCODING_NONE = 0, /* no public tokenizer: estimated */
    CG_ENCODING_CL100K_BASE = 1,
    CG_ENCODING_O200K_BASE = 2,
} cg_encoding;

/* Families of the estimator (core/estimate.h). OPENAI is for o200k-like counting (used when an
 * exact count is not wanted, e.g. a quick bound). */
typedef enum {
    CG_PROFILE_DEFAULT = 0,
    CG_PROFILE_OPENAI,
    CG_PROFILE_CLAUDE,
    CG_PROFILE_GEMINI,
    CG_PROFILE_LLAMA,
    CG_PROFILE_MISTRAL,
    CG_PROFILE_KIMI,
    CG__PROFILE_COUNT
} cg_profile;

/* Values match ctxguard.v1.ProviderDialect. */
typedef enum {
    CG_DIALECT_UNSPECIFIED = 0,
    CG_DIALECT_OPENAI = 1,
    CG_DIALECT_ANTHROPIC = 2,
    CG_DIALECT_GOOGLE = 3,
    CG_DIALECT_GENERIC = 4,
} cg_dialect;

#define CG_MODELS_DEFAULT_WINDOW 128000
#define CG_MODELS_NAME_MAX 200

struct cg_model_info {
    const char *prefix; /* the table entry that matched; "" for unknown models */
    cg_encoding encoding;
    cg_profile profile;
    int64_t context_window; /* tokens */
    cg_dialect dialect;
    bool takes_reasoning; /* reasoning parts are sent back to it (else dropped by normalize) */
    bool known;
};

/* Fills *out for the model name (NULL or "" is unknown). Never fails. */
void cg_models_lookup(const char *model, struct cg_model_info *out);

/* "default", "openai", "claude", "gemini", "llama", "mistral", "kimi"; "unknown" otherwise. */
const char *cg_models_profile_name(cg_profile profile);

/* "cl100k_base", "o200k_base", or "" for CG_ENCODING_NONE. */
const char *cg_models_encoding_name(cg_encoding encoding);

/* Models the operator adds or re-maps without a new build (the `model_map` setting):
 * "PREFIX=TARGET[@WINDOW];..." where TARGET is an encoding (cl100k_base, o200k_base: counted
 * exactly) or an estimator profile (default, openai, claude, gemini, llama, mistral, kimi)
 * and WINDOW the context window in tokens (1,000..100,000,000; default: the built-in entry's
 * for that name, else CG_MODELS_DEFAULT_WINDOW). Prefixes match as in cg_models_lookup and
 * win over the built-in table. */
#define CG_MODEL_MAP_MAX 64
struct cg_model_map {
    char prefixes[CG_MODEL_MAP_MAX][CG_MODELS_NAME_MAX + 1];
    struct cg_model_info entries[CG_MODEL_MAP_MAX]; /* prefix points into prefixes */
    int n;
};

/* Parses text (NULL or "" is an empty map) into *out. On error err names the entry and
 * the problem and *out is empty. */
cg_status cg_models_map_parse(const char *text, struct cg_model_map *out, struct cg_err *err);

/* cg_models_lookup, the map's entries first (map may be NULL). */
void cg_models_lookup_with(const struct cg_model_map *map, const char *model,
                           struct cg_model_info *out);

/* The whole table (borrowed, static), for listings and tests. */
const struct cg_model_info *cg_models_table(size_t *count);

#endif

/* estimate.h - token estimates for models without a public tokenizer (Claude, Gemini, Llama,
 * Mistral, Kimi, unknown), with an error bound.
 *
 * Content-aware: one pass over the bytes (SSE2, 16 bytes a step; a scalar path elsewhere)
 * counts letters, word starts, digits and digit runs, punctuation, quotes, spaces, newlines
 * and UTF-8 lead bytes by script (2-byte scripts such as Cyrillic, CJK and Hangul, other 3-byte,
 * 4-byte). The token count is a linear function of those counts fitted, at a high quantile so
 * that it seldom undercounts, to exact o200k_base counts of text of every kind (prose, C, JSON,
 * logs, CJK, Cyrillic and other scripts; bench/README.md says how). A family profile scales
 * each component (Latin words, symbols, digits, CJK, other scripts) for the family's
 * tokenizer; those factors are priors that per-tenant calibration corrects (the caller passes
 * the factor). The text's class (prose, code, JSON, logs, CJK, other script) sets the error
 * bound.
 *
 * Conversation estimates add per-message framing (OpenAI's 3 tokens + role, the reply
 * priming of 3), tool-call framing, tool definitions (from their names, descriptions and
 * schemas, plus per-tool framing) and images from their dimensions: OpenAI's tile rule for the
 * OpenAI profile (85 + 170 per 512-px tile after scaling to 2048 and 768; 85 for detail
 * "low"), width x height / 750 for Claude (after scaling to 1568 px on the long side),
 * 258 per image for Gemini, and a default when the size is unknown.
 * Pure; thread-safe.
 */
#ifndef CG_CORE_ESTIMATE_H
#define CG_CORE_ESTIMATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/conv.h"
#include "core/models.h"

/* What one pass over a text counts (sums: scanning several texts into one struct adds). */
struct cg_est_features {
    uint64_t bytes;
    uint64_t letters;      /* ASCII A-Z a-z */
    uint64_t upper;        /* ASCII A-Z */
    uint64_t word_starts;  /* letters whose previous byte is not a letter */
    uint64_t digits;       /* ASCII 0-9 */
    uint64_t digit_starts; /* digits whose previous byte is not a digit */
    uint64_t punct;        /* printable ASCII that is neither letter, digit nor space */
    uint64_t punct_starts; /* punct whose previous byte is not punct */
    uint64_t quotes;       /* '"' (also in punct) */
    uint64_t spaces;       /* ' ' */
    uint64_t space_runs;   /* runs of 2 or more ' ' (counted at their second space) */
    uint64_t newlines;     /* '\n' */
    uint64_t tabs;         /* '\t' */
    uint64_t lead2_latin;  /* UTF-8 lead bytes C2-C5: Latin-1 supplement, Latin extended-A */
    uint64_t lead2;        /* other lead bytes C0-DF: Greek, Cyrillic, Hebrew, Arabic, ... */
    uint64_t lead3_cjk;    /* E3-ED: CJK, kana, Hangul */
    uint64_t lead3_other;  /* E0-E2, EE-EF: Indic, Thai, symbols, ... */
    uint64_t lead4;        /* F0-F7: emoji and rare scripts */
};

typedef enum {
    CG_TEXT_PROSE = 0,
    CG_TEXT_CODE,
    CG_TEXT_JSON,
    CG_TEXT_LOGS,
    CG_TEXT_CJK,
    CG_TEXT_OTHER_SCRIPT,
    CG__TEXT_CLASS_COUNT
} cg_text_class;

#define CG_ESTIMATE_IMAGE_DEFAULT 1000 /* tokens of an image of unknown size */

/* Adds the counts of s[0..len) to *f (zero it first for one text). Any bytes; never fails. */
void cg_estimate_scan(const char *s, size_t len, struct cg_est_features *f);

/* The class of a text from its counts. */
cg_text_class cg_estimate_classify(const struct cg_est_features *f);

/* "prose", "code", "json", "logs", "cjk", "other_script". */
const char *cg_estimate_class_name(cg_text_class cls);

/* Tokens of a text with these counts for the profile (unrounded, >= 0). */
double cg_estimate_tokens(cg_profile profile, const struct cg_est_features *f);

/* Relative error bound (e.g. 0.12 for +-12 %) of an estimate of a text of this class and
 * size for the profile, uncalibrated. */
double cg_estimate_bound(cg_profile profile, cg_text_class cls, double tokens);

/* Tokens of one text (rounded up). */
int64_t cg_estimate_text(cg_profile profile, const char *s, size_t len);

/* Tokens of one image for the profile. width or height 0: CG_ESTIMATE_IMAGE_DEFAULT. detail
 * is OpenAI's ("low" counts the base only); may be NULL. */
int64_t cg_estimate_image(cg_profile profile, uint32_t width, uint32_t height, const char *detail);

/* Tokens of the conversation's tool definitions. */
int64_t cg_estimate_tools(cg_profile profile, const struct cg_conv *conv);

struct cg_estimate {
    int64_t total;          /* everything below, calibrated */
    int64_t content_tokens; /* text of all parts */
    int64_t overhead_tokens;
    int64_t tool_definition_tokens;
    int64_t image_tokens;
    int64_t error_bound; /* tokens: the true count is within total +- error_bound */
    double factor;       /* the calibration factor applied (1.0: none) */
};

/* Estimates conv for the profile, multiplied by calibration (0 or 1.0: none; must be within
 * 0.25..4). When message_tokens is not NULL it receives conv->n_messages per-message counts
 * (framing included, calibrated). Returns CG_INVALID_ARGUMENT for a calibration factor out of
 * range (err says so) and fills nothing else then. */
cg_status cg_estimate_conv(const struct cg_conv *conv, cg_profile profile, double calibration,
                           int64_t *message_tokens, struct cg_estimate *out,
                           struct cg_err *err) CG_MUST_CHECK;

#endif

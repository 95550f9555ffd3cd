/* summary.h - structured summaries of a conversation: the extractive summarizer, the
 * sections and their headings in the conversation's language, and what an LLM summarizer
 * needs around it (prompt, transcript chunks, checking and parsing its answer).
 *
 * A summary has six sections, always in this order, each under a heading in the summary's
 * language (the headings table is data: en, de, ja, fr, es, zh; other languages are written
 * with the English headings):
 *     Session intent, Progress, Key decisions, Current state, Next steps, Important details
 * Rendered as text it is `## Heading` lines, the intent and the current state as one
 * paragraph, the other sections as `- item` lines; an empty section holds one `-`.
 *
 * The extractive summarizer (cg_summary_extract) never invents text: every item is a
 * sentence (or the head of one) of the conversation, except one line per summary counting
 * the tool calls made and the files they touched. It splits the user and assistant text into
 * sentences, scores each for the details it carries (numbers with units, ids, paths, versions,
 * host names, config keys, URLs), for decision, progress and next-step wording (word lists
 * per language), for the focus terms, and against repetition (a sentence said many times says
 * little), mines lines of tool output that carry details (at a lower weight, errors first), and
 * fills the sections by score within the target tokens, counting with the caller's counter.
 * Items are written in conversation order. Cost: linear in the text scanned.
 *
 * Pure: no I/O, no globals, no logging; thread-safe (distinct outputs).
 */
#ifndef CG_CORE_SUMMARY_H
#define CG_CORE_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "core/conv.h"

#define CG_SUMMARY_TARGET_MIN 64
#define CG_SUMMARY_TARGET_MAX 2000
#define CG_SUMMARY_TARGET_DEFAULT 400
#define CG_SUMMARY_FOCUS_MAX 2000 /* bytes */
#define CG_SUMMARY_LANG_MAX 16    /* a language tag's room, NUL included */

typedef enum {
    CG_SUMMARY_INTENT = 0,
    CG_SUMMARY_PROGRESS,
    CG_SUMMARY_DECISIONS,
    CG_SUMMARY_STATE,
    CG_SUMMARY_NEXT,
    CG_SUMMARY_DETAILS,
    CG_SUMMARY_SECTION_COUNT
} cg_summary_section;

/* Counts the tokens of text[0..len). Must be thread-safe when the summarizer is used from
 * several threads with the same arg. */
typedef int64_t (*cg_summary_count_cb)(void *arg, const char *text, size_t len);

struct cg_summary_opts {
    int64_t target_tokens;     /* 0: CG_SUMMARY_TARGET_DEFAULT; else 1..CG_SUMMARY_TARGET_MAX */
    cg_summary_count_cb count; /* NULL: the estimator's OpenAI profile (core/estimate.h) */
    void *count_arg;
    const char *focus; /* terms to emphasise; may be NULL */
    size_t focus_len;
    const char *language; /* tag to write in ("de", "ja-JP"); NULL or "": detected */
    size_t from, to;      /* the messages [from, to) of conv; to == 0: up to the end */
};

/* One section's items; the intent and the current state have at most one. */
struct cg_summary_list {
    char **items; /* NUL-terminated UTF-8 strings */
    size_t n;
};

/* A summary. Everything is owned by it and freed by cg_summary_cleanup. */
struct cg_summary {
    char *text; /* the rendered summary, NUL-terminated */
    size_t text_len;
    struct cg_summary_list sections[CG_SUMMARY_SECTION_COUNT];
    char language[CG_SUMMARY_LANG_MAX]; /* the language written in ("en", "de", "ja", ...) */
    int64_t tokens;                     /* of text, by the counter */
    bool target_met;                    /* tokens <= target */
    size_t messages;                    /* messages summarized (the range's size) */
};

/* An empty summary (nothing to free). */
void cg_summary_init(struct cg_summary *summary);

/* Frees what the summary holds; it is empty afterwards. Safe on an empty summary. */
void cg_summary_cleanup(struct cg_summary *summary);

/* The extractive summary of conv's messages [from, to) into out (which it initialises; the
 * caller cleans it up, also after an error). The summary's tokens are at most the target
 * unless even the bare headings with the intent's first words exceed it (then target_met is
 * false). Errors: CG_INVALID_ARGUMENT when the range is empty or out of bounds or the target
 * out of range (err names `target_tokens` or the range), CG_NOMEM. Thread-safe. */
cg_status cg_summary_extract(const struct cg_conv *conv, const struct cg_summary_opts *opts,
                             struct cg_summary *out, struct cg_err *err) CG_MUST_CHECK;

/* The language of conv's messages [from, to) as a short tag ("en", "de", "ja", "fr", "es",
 * "zh"): by script (kana means Japanese, other Han text Chinese) and otherwise by common
 * words, from the user's text (the assistant's when the user wrote none); the first user
 * message weighs as much as all the others (it states the task). "en" when unsure. */
const char *cg_summary_detect_language(const struct cg_conv *conv, size_t from, size_t to);

/* The headings table's language for a BCP 47 tag ("de-AT" -> "de"); "en" for tags it has no
 * headings for. Borrowed static string. */
const char *cg_summary_language(const char *tag);

/* The heading of a section in a language of the table (other tags: English). Static. */
const char *cg_summary_heading(const char *language, cg_summary_section section);

/* Renders out->sections into out->text ("## Heading" lines, see above) in out->language.
 * CG_NOMEM on failure (out->text unchanged). */
cg_status cg_summary_render(struct cg_summary *out, struct cg_err *err) CG_MUST_CHECK;

/* Parses a summary text written by someone else (an LLM) into out->sections: a heading is a
 * line of '#'s or a **bold** line (a trailing ':' allowed) naming a section in `language` or
 * in English, case-insensitively. List lines ("- ", "* ", "• ", "1. ") are items, other
 * lines are joined into one item per paragraph. *found gets a bit (1 << section) per
 * heading met. out->text is not touched. CG_NOMEM on failure. */
cg_status cg_summary_parse(const char *text, size_t len, const char *language,
                           struct cg_summary *out, unsigned *found,
                           struct cg_err *err) CG_MUST_CHECK;

/* ------------------------------------------------------------- for an LLM summarizer ---- */

/* The system prompt asking for the six sections with the headings of `language`, at most
 * target_tokens tokens, in that language, with the focus when given (focus_len bytes). When
 * partial is true, the text is one part of a longer session and the answer is a partial
 * summary to be merged later. Returns a malloc'd NUL-terminated string, NULL when out of
 * memory. */
char *cg_summary_prompt(const char *language, int64_t target_tokens, const char *focus,
                        size_t focus_len, bool partial);

/* A transcript of conv's messages [from, to) cut into chunks of at most max_chunk_bytes
 * bytes (each a malloc'd NUL-terminated string; a message longer than a chunk is cut, the
 * head of a long tool result is kept: at most tool_result_bytes of it). One line group per
 * message: "role: text", tool calls as "[tool_call NAME ARGS]", results as
 * "[tool_result ...]". *chunks gets the array (free each and it), *n_chunks its length.
 * CG_INVALID_ARGUMENT for a bad range, CG_NOMEM. */
cg_status cg_summary_transcript(const struct cg_conv *conv, size_t from, size_t to,
                                size_t max_chunk_bytes, size_t tool_result_bytes, char ***chunks,
                                size_t *n_chunks, struct cg_err *err) CG_MUST_CHECK;

/* Frees chunks[0..n) and the array. */
void cg_summary_chunks_free(char **chunks, size_t n);

/* The next level of a hierarchical summary, in two steps: the partial summaries texts[0..n)
 * joined, each followed by a blank line, into one malloc'd string (NULL when out of
 * memory); */
char *cg_summary_join(char **texts, size_t n);

/* and that text cut into chunks of at most max (> 0) bytes, at a line end in the second half
 * of a chunk when there is one, else at a character boundary, never inside a UTF-8
 * sequence. Returns the malloc'd array (free with cg_summary_chunks_free) and its length
 * in *n_out (0 for ""); NULL when out of memory. */
char **cg_summary_split(const char *text, size_t max, size_t *n_out);

#endif

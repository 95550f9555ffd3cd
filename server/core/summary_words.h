/* summary_words.h - sentence features of the extractive summarizer (summary_words.c).
 * Internal to core/summary*. Pure; thread-safe. */
#ifndef CG_CORE_SUMMARY_WORDS_H
#define CG_CORE_SUMMARY_WORDS_H

#include <stdbool.h>
#include <stddef.h>

struct cg__summary_words {
    bool decision, progress, next, error;
};

/* Writes " " + s lower-cased (ASCII letters; other bytes kept) + " " into out (cap >= 3),
 * cut to fit; returns the length written (NUL added). */
size_t cg__summary_lower(const char *s, size_t len, char *out, size_t cap);

/* The markers found in a text made by cg__summary_lower (only the error words when
 * errors_only). */
void cg__summary_markers(const char *lc, size_t n, bool errors_only, struct cg__summary_words *w);

/* How many specific details s[0..len) carries, 0..12: ids, versions, addresses, numbers
 * (more with a unit after them), paths, file and host names, config keys, key=value pairs,
 * URLs, `code`. */
double cg__summary_spec(const char *s, size_t len);

#endif

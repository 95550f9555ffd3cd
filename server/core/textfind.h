/* textfind.h - finding a query in texts, for SearchHistory: a plain substring or a POSIX
 * extended regular expression, either case-sensitive or ASCII case-insensitive.
 *
 * A query is 1..CG_TEXTFIND_QUERY_MAX bytes of UTF-8 without NUL; a regular expression may
 * not use back-references (the one construct that makes matching exponential), which
 * cg_textfind_new refuses naming the field. Matches are never empty: a pattern that matches
 * the empty string finds only its non-empty matches. Pure; a finder is read-only after
 * cg_textfind_new and may be used by one thread at a time (regexec on a shared regex_t is
 * thread-safe in glibc, but nothing here relies on it).
 */
#ifndef CG_CORE_TEXTFIND_H
#define CG_CORE_TEXTFIND_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

#define CG_TEXTFIND_QUERY_MAX 1000

struct cg_textfind;

/* A finder of query[0..len) into *out. INVALID_ARGUMENT naming `field` for an empty or too
 * long query, invalid UTF-8, a NUL, a back-reference or a pattern regcomp refuses (its
 * message quoted). */
cg_status cg_textfind_new(const char *query, size_t len, bool regex, bool ignore_case,
                          const char *field, struct cg_textfind **out,
                          struct cg_err *err) CG_MUST_CHECK;

/* The first match in text[from..len) into *start / *mlen (byte offsets into text); false when
 * there is none. text[len] must be a NUL (protobuf-c's strings are): regexec is told the
 * length (REG_STARTEND), so NUL bytes inside are searched over, but sanitizers' interceptors
 * of regexec read up to the terminator. */
bool cg_textfind_next(const struct cg_textfind *f, const char *text, size_t len, size_t from,
                      size_t *start, size_t *mlen);

/* NULL is a no-op. */
void cg_textfind_free(struct cg_textfind *f);

/* The snippet around text[start, start + mlen): up to context bytes either side, widened to
 * whole UTF-8 characters, as [*from, *to). */
void cg_textfind_snippet(const char *text, size_t len, size_t start, size_t mlen, size_t context,
                         size_t *from, size_t *to);

#endif

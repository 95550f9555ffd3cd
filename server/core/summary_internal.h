/* summary_internal.h - what the summary*.c files share: the headings table's rows and a
 * small growable string. Internal to core/summary*. */
#ifndef CG_CORE_SUMMARY_INTERNAL_H
#define CG_CORE_SUMMARY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/summary.h"

struct cg__summary_lang {
    const char *tag;
    const char *headings[CG_SUMMARY_SECTION_COUNT];
    const char *tool_calls; /* the label of the tool-activity line */
};

/* The row of a table language; the English row for anything else (NULL included). */
const struct cg__summary_lang *cg__summary_lang_get(const char *language);

/* A malloc'd string that grows; failed stays set after the first allocation failure. */
struct cg__summary_buf {
    char *data;
    size_t len, cap;
    bool failed;
};

bool cg__summary_buf_add(struct cg__summary_buf *b, const char *s, size_t n);
bool cg__summary_buf_str(struct cg__summary_buf *b, const char *s);

/* Appends a copy of s[0..n) to the list; false when out of memory. */
bool cg__summary_list_add(struct cg_summary_list *l, const char *s, size_t n);

#endif

/* compress_internal.h - helpers shared by the compress_*.c files. Internal to core/. */
#ifndef CG_CORE_COMPRESS_INTERNAL_H
#define CG_CORE_COMPRESS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

/* The longest prefix of s[0..len) of at most max bytes that does not split a UTF-8
 * character. */
size_t cg__compress_utf8_cut(const char *s, size_t len, size_t max);

/* L2 on one arguments text (a JSON object): string values over 100 characters become a
 * preview and a marker. false when nothing changes (or out of memory); else *out is malloc'd. */
bool cg__compress_write_args(const char *args, size_t len, char **out, size_t *out_len);

/* s without its <checkpoint_id>...</checkpoint_id> spans; false when there are none (or out of
 * memory); else *out is malloc'd and NUL-terminated. */
bool cg__compress_strip_checkpoints(const char *s, size_t len, char **out, size_t *out_len);

struct cg_compress_counter;

/* Whether c is the built-in counter of cg_compress_counter_init (its ctx is then a
 * struct cg_compress_count_state). */
bool cg__compress_counter_is_builtin(const struct cg_compress_counter *c);

#endif

/* utf8.h - strict UTF-8 validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
 * Pure; thread-safe. */
#ifndef CG_CORE_UTF8_H
#define CG_CORE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Whether s[0..len) is valid UTF-8. When it is not and bad_offset is not NULL, the byte
 * offset of the first invalid sequence is stored there. */
bool cg_utf8_valid(const char *s, size_t len, size_t *bad_offset);

/* Number of code points in valid UTF-8 s[0..len). */
size_t cg_utf8_length(const char *s, size_t len);

#endif

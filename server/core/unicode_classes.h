/* unicode_classes.h - the character classes of the tokenizer's pre-tokenizers, per code point.
 *
 * Unicode 16.0 (the version of the regex tables inside npm tiktoken), generated into
 * unicode_classes.c by scripts/gen_unicode_classes.sh. Pure, read-only, thread-safe. */
#ifndef CG_CORE_UNICODE_CLASSES_H
#define CG_CORE_UNICODE_CLASSES_H

#include <stdint.h>

/* Flags of one code point. */
#define CG_UC_L 1     /* \p{L} */
#define CG_UC_N 2     /* \p{N} */
#define CG_UC_WS 4    /* \s: the White_Space property */
#define CG_UC_UP 8    /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] (o200k_base) */
#define CG_UC_LO 16   /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] (o200k_base) */
#define CG_UC_CRLF 32 /* \r or \n */

extern const unsigned char cg_uc_index[0x110000 / 256];
extern const unsigned char cg_uc_blocks[][256];

/* The flags of code point cp (< 0x110000; larger values are a caller bug). */
static inline unsigned cg_uc_flags(uint32_t cp)
{
    return cg_uc_blocks[cg_uc_index[cp >> 8]][cp & 0xFF];
}

#endif

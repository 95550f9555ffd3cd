/* tok.h - exact token counts for OpenAI's cl100k_base and o200k_base encodings.
 *
 * The count equals the length of what OpenAI's tiktoken returns for the same text:
 * encode_ordinary(text) when specials are not allowed (a special token's text is ordinary
 * text), encode(text, allowed_special="all") when they are.
 *
 * Bytes counted. tiktoken's APIs take strings, so a text that is not valid UTF-8 has to be
 * decoded by the caller first; ctxguard counts what the lossless-as-possible standard
 * decoding gives: every maximal ill-formed subsequence (Unicode §3.9, "substitution of
 * maximal subparts", what JavaScript's TextDecoder and Python's errors="replace" do) is
 * counted as one U+FFFD. So cg_tok_count(bytes) == tiktoken(new TextDecoder().decode(bytes)).
 * NUL bytes are ordinary characters.
 *
 * Cost. Pre-tokenization is one linear pass; each piece is merged by tiktoken's rule (lowest
 * rank first, leftmost among equals) with a heap for long pieces, so the whole count is
 * O(n log n) for any input: a 256 KB piece without any merge is no worse than short words.
 *
 * Rank data (the compact form written by scripts/tiktoken_to_cgtok.py), little-endian:
 *     0  "CGTOKBP1"                 magic
 *     8  char[16]                   encoding name, NUL-padded ("cl100k_base", "o200k_base")
 *    24  u32 n_tokens               number of records
 *    28  u32 blob_bytes             total bytes of all tokens
 *    32  u32 0                      reserved
 *    36  u8[32]                     SHA-256 of everything after the 72-byte header
 *    68  u32 0                      reserved
 *    72  n_tokens x {u32 rank, u8 len}   then the tokens' bytes, concatenated in that order
 * Every byte value must have a rank of its own (byte-level BPE), lengths are 1..128, ranks
 * and byte strings are unique. The core checks the structure, not the SHA-256 (base/tokdata
 * does, with the file's other checks).
 *
 * Pure: no I/O, no globals; an encoding is read-only once built and may be shared by any
 * number of threads.
 */
#ifndef CG_CORE_TOK_H
#define CG_CORE_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define CG_TOK_MAGIC "CGTOKBP1"
#define CG_TOK_HEADER_SIZE 72
#define CG_TOK_NAME_MAX 16
#define CG_TOK_TOKEN_BYTES_MAX 128        /* the longest token of either encoding */
#define CG_TOK_TOKENS_MAX 1000000         /* records accepted in rank data */
#define CG_TOK_BLOB_MAX (16u << 20)       /* token bytes accepted in rank data */
#define CG_TOK_TEXT_MAX ((size_t)1 << 31) /* longest text counted (2 GiB) */

/* Which pre-tokenization regex an encoding uses. */
typedef enum {
    CG_TOK_PATTERN_CL100K = 1, /* cl100k_base */
    CG_TOK_PATTERN_O200K = 2,  /* o200k_base */
} cg_tok_pattern;

struct cg_tok_encoding;

/* Builds an encoding from rank data in the compact form above (data[0..len), only read; the
 * encoding keeps its own copy). The encoding name in the data chooses the pattern and the
 * special tokens; names other than cl100k_base and o200k_base are refused. On error returns
 * CG_INVALID_ARGUMENT (malformed data, err says what and where) or CG_NOMEM, and *out is
 * NULL. Free the result with cg_tok_encoding_free. */
cg_status cg_tok_encoding_new(const void *data, size_t len, struct cg_tok_encoding **out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Frees an encoding (NULL is a no-op). No count may be running on it. */
void cg_tok_encoding_free(struct cg_tok_encoding *enc);

/* The encoding's name ("cl100k_base"), borrowed, valid while enc lives. */
const char *cg_tok_encoding_name(const struct cg_tok_encoding *enc);

/* Number of ranks (ordinary tokens) in the encoding. */
size_t cg_tok_encoding_size(const struct cg_tok_encoding *enc);

/* Number of tokens of text[0..len) (any bytes; see "Bytes counted"). With allow_special the
 * special tokens' texts (e.g. "<|endoftext|>") count as one token each; otherwise they are
 * ordinary text. len 0 is 0 tokens (text may then be NULL). Returns -1 when
 * len > CG_TOK_TEXT_MAX or memory runs out: invalid UTF-8 needs a copy of up to 3 * len
 * bytes, and a piece longer than 64 bytes about 20 bytes per byte of it while it is merged
 * (ordinary text needs nothing). Thread-safe. */
int64_t cg_tok_count(const struct cg_tok_encoding *enc, const char *text, size_t len,
                     bool allow_special);

/* Like cg_tok_count but stops as soon as the count exceeds limit (>= 0), returning that
 * partial count (some value > limit); a result <= limit is the exact count. */
int64_t cg_tok_count_limit(const struct cg_tok_encoding *enc, const char *text, size_t len,
                           bool allow_special, int64_t limit);

/* A bounded memo of counts of short stretches of text, for one thread: a caller that counts a
 * lot of text with repeated words (a conversation, agent logs) makes one, counts through it,
 * and frees it. Stretches are cut where no piece can span: at an ASCII space that follows a
 * printable ASCII character (a piece holds a space only as its first character or inside a
 * run of white space), so the count of a text is the sum of its stretches' counts, each
 * the same whether it comes from the memo or not. ~160 KB; not thread-safe (one per thread or
 * per call); it remembers which encoding it was used with and forgets everything when that
 * changes. */
struct cg_tok_cache;

/* A new, empty memo; NULL when memory runs out. */
struct cg_tok_cache *cg_tok_cache_new(void);

/* Frees a memo (NULL is a no-op). */
void cg_tok_cache_free(struct cg_tok_cache *cache);

/* cg_tok_count(enc, text, len, allow_special), through cache (NULL: no memo). Only ordinary
 * text of valid UTF-8 uses the memo; the result is always cg_tok_count's. */
int64_t cg_tok_count_cached(const struct cg_tok_encoding *enc, struct cg_tok_cache *cache,
                            const char *text, size_t len, bool allow_special);

/* Pre-tokenization: the end of the piece that starts at pos in text[0..len) under pattern
 * (pos < len, at a character boundary). text must be valid UTF-8 for the result to be
 * tiktoken's; any bytes are memory-safe. The result is > pos and <= len. */
size_t cg_tok_piece_end(cg_tok_pattern pattern, const char *text, size_t len, size_t pos);

/* Number of tokens tiktoken's byte-pair merge makes of one piece piece[0..len) (len >= 1)
 * with enc's ranks; -1 when memory runs out (pieces longer than a few dozen bytes need a
 * buffer). For tests and tools; cg_tok_count is pieces + this. */
int64_t cg_tok_piece_count(const struct cg_tok_encoding *enc, const char *piece, size_t len);

#endif

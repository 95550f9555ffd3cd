/* tok_split.c - the pre-tokenizers of cl100k_base and o200k_base, written out by hand.
 *
 * Each function returns the end of the match that tiktoken's regex finds at pos. The regex
 * is a list of alternatives tried in order with backtracking (leftmost-first), and every
 * character is matched by one of them, so a match always starts at pos. The comments name
 * the alternative each branch reproduces; where backtracking decides the result, the comment
 * says what the backtracking amounts to. `$` is the end of the text only, and \s is
 * White_Space. Character classes come from unicode_classes (Unicode 16.0).
 */
#include "core/tok.h"
#include "core/unicode_classes.h"

#define L CG_UC_L
#define N CG_UC_N
#define WS CG_UC_WS
#define UP CG_UC_UP
#define LO CG_UC_LO
#define CRLF CG_UC_CRLF

/* Flags of the character at s[i] (i < n) and its length in *clen. Valid UTF-8 is assumed for
 * the meaning, not for safety: a truncated or out-of-range sequence reads as one byte of
 * class "other". */
static inline unsigned flags_at(const unsigned char *s, size_t n, size_t i, size_t *clen)
{
    unsigned c = s[i];
    if (c < 0x80) {
        *clen = 1;
        return cg_uc_blocks[0][c];
    }
    uint32_t cp;
    size_t need;
    if (c < 0xE0) {
        need = 2;
        cp = c & 0x1F;
    } else if (c < 0xF0) {
        need = 3;
        cp = c & 0x0F;
    } else {
        need = 4;
        cp = c & 0x07;
    }
    if (c < 0xC0 || need > n - i) {
        *clen = 1;
        return 0;
    }
    for (size_t k = 1; k < need; k++)
        cp = (cp << 6) | (s[i + k] & 0x3F);
    if (cp >= 0x110000) {
        *clen = 1;
        return 0;
    }
    *clen = need;
    return cg_uc_flags(cp);
}

/* End of the run of characters from i whose flags have any bit of `any`. */
static inline size_t run_any(const unsigned char *s, size_t n, size_t i, unsigned any)
{
    size_t clen;
    while (i < n && (flags_at(s, n, i, &clen) & any))
        i += clen;
    return i;
}

/* End of the run of characters from i whose flags have no bit of `none`. */
static inline size_t run_none(const unsigned char *s, size_t n, size_t i, unsigned none)
{
    size_t clen;
    while (i < n && !(flags_at(s, n, i, &clen) & none))
        i += clen;
    return i;
}

static inline size_t run_crlf(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == '\r' || s[i] == '\n'))
        i++;
    return i;
}

/* [\r\n/]* of o200k_base: after the greedy punctuation run, '/' can still follow a \r or \n. */
static inline size_t run_crlf_slash(const unsigned char *s, size_t n, size_t i)
{
    while (i < n && (s[i] == '\r' || s[i] == '\n' || s[i] == '/'))
        i++;
    return i;
}

static inline unsigned lower_ascii(unsigned c)
{
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* Length of a contraction at s[i] == '\'': (?i:'s|'t|'re|'ve|'m|'ll|'d) in both patterns
 * (cl100k writes it '(?i:[sdmt]|ll|ve|re), the same set). Case-insensitive matching uses
 * Unicode simple case folding, under which 's' also matches U+017F LONG S (C5 BF).
 * Returns 0 when there is none. */
static size_t contraction(const unsigned char *s, size_t n, size_t i)
{
    if (i + 1 >= n)
        return 0;
    unsigned c1 = lower_ascii(s[i + 1]);
    if (c1 == 's' || c1 == 'd' || c1 == 'm' || c1 == 't')
        return 2;
    if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF)
        return 3;
    if (i + 2 >= n)
        return 0;
    unsigned c2 = lower_ascii(s[i + 2]);
    if ((c1 == 'l' && c2 == 'l') || (c1 == 'v' && c2 == 'e') || (c1 == 'r' && c2 == 'e'))
        return 3;
    return 0;
}

/* The white-space alternatives shared by both patterns, at a white-space character of length
 * clen: `\s*[\r\n]` (cl100k) / `\s*[\r\n]+` (o200k): greedy \s* backtracks to the last \r or
 * \n of the run, so the match ends just after it; `\s+(?!\S)`: the run less its last
 * character when a non-space follows (nothing when the run is one character), the whole run
 * at the end of the text; then `\s` / `\s+`: one character (the run is one character here).
 * cl100k's `\s++$` comes first and takes a run reaching the end; crlf_first says whether the
 * \r\n alternative is tried before that end-of-text one (o200k) or after (cl100k). */
static size_t whitespace(const unsigned char *s, size_t n, size_t i, size_t clen, bool crlf_first)
{
    size_t k = i, last_start = i, nl_end = 0, cl;
    while (k < n) {
        unsigned f = flags_at(s, n, k, &cl);
        if (!(f & WS))
            break;
        if (f & CRLF)
            nl_end = k + 1;
        last_start = k;
        k += cl;
    }
    if (crlf_first && nl_end != 0)
        return nl_end;
    if (k == n)
        return n;
    if (nl_end != 0)
        return nl_end;
    if (last_start > i)
        return last_start;
    return i + clen;
}

/* cl100k_base:
 * '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|
 * \s++$|\s*[\r\n]|\s+(?!\S)|\s */
static size_t cl100k_end(const unsigned char *s, size_t n, size_t i)
{
    size_t c0len, c1len;
    if (s[i] == '\'') {
        size_t k = contraction(s, n, i);
        if (k != 0)
            return i + k;
    }
    unsigned f0 = flags_at(s, n, i, &c0len);
    if (f0 & L) /* \p{L}++ without the optional prefix */
        return run_any(s, n, i, L);
    if (f0 & N) { /* \p{N}{1,3}+ */
        size_t k = i + c0len, cl;
        for (int d = 1; d < 3 && k < n && (flags_at(s, n, k, &cl) & N); d++)
            k += cl;
        return k;
    }
    size_t j = i + c0len;
    unsigned f1 = j < n ? flags_at(s, n, j, &c1len) : 0;
    if (!(f0 & CRLF) && (f1 & L)) /* [^\r\n\p{L}\p{N}]?+\p{L}++ with the prefix */
        return run_any(s, n, j, L);
    if (!(f0 & WS)) /* ?[^\s\p{L}\p{N}]++[\r\n]*+ without the space */
        return run_crlf(s, n, run_none(s, n, i, WS | L | N));
    if (s[i] == ' ' && j < n && !(f1 & (WS | L | N))) /* the same with the space */
        return run_crlf(s, n, run_none(s, n, j, WS | L | N));
    return whitespace(s, n, i, c0len, false);
}

/* o200k_base's letter alternatives after the optional prefix, from j:
 * A = [UP]*[LO]+ : greedy [UP]* takes the UP run j..k; [LO]+ then needs an LO character at k
 *     (one that is LO but not UP, i.e. Ll) and takes the LO run from there; otherwise [UP]*
 *     gives back characters until one is LO (Lm, Lo, M are both), which ends the match.
 * B = [UP]+[LO]* : the UP run (at least one) and the LO run after it.
 * Both return 0 when they do not match. */
static size_t o200k_a(const unsigned char *s, size_t n, size_t j)
{
    size_t k = j, last_lo_end = 0, cl;
    unsigned f = 0;
    while (k < n) {
        f = flags_at(s, n, k, &cl);
        if (!(f & UP))
            break;
        if (f & LO)
            last_lo_end = k + cl;
        k += cl;
    }
    if (k < n && (f & LO))
        return run_any(s, n, k, LO);
    return last_lo_end;
}

static size_t o200k_b(const unsigned char *s, size_t n, size_t j)
{
    size_t k = run_any(s, n, j, UP);
    if (k == j)
        return 0;
    return run_any(s, n, k, LO);
}

/* o200k_base:
 * [^\r\n\p{L}\p{N}]?[UP]*[LO]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * [^\r\n\p{L}\p{N}]?[UP]+[LO]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with UP = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and LO = [\p{Ll}\p{Lm}\p{Lo}\p{M}]. */
static size_t o200k_end(const unsigned char *s, size_t n, size_t i)
{
    size_t c0len;
    unsigned f0 = flags_at(s, n, i, &c0len);
    bool prefix = !(f0 & (L | N | CRLF)); /* may the optional prefix take s[i]? */
    size_t j = i + c0len, e = 0;
    if (prefix && j < n)
        e = o200k_a(s, n, j);
    if (e == 0 && (f0 & (UP | LO)))
        e = o200k_a(s, n, i);
    if (e == 0 && prefix && j < n)
        e = o200k_b(s, n, j);
    if (e == 0 && (f0 & UP))
        e = o200k_b(s, n, i);
    if (e != 0) {
        if (e < n && s[e] == '\'')
            e += contraction(s, n, e);
        return e;
    }
    if (f0 & N) { /* \p{N}{1,3} */
        size_t k = j, cl;
        for (int d = 1; d < 3 && k < n && (flags_at(s, n, k, &cl) & N); d++)
            k += cl;
        return k;
    }
    /* ?[^\s\p{L}\p{N}]+[\r\n/]* */
    if (!(f0 & WS))
        return run_crlf_slash(s, n, run_none(s, n, i, WS | L | N));
    if (s[i] == ' ' && j < n) {
        size_t c1len;
        if (!(flags_at(s, n, j, &c1len) & (WS | L | N)))
            return run_crlf_slash(s, n, run_none(s, n, j, WS | L | N));
    }
    return whitespace(s, n, i, c0len, true);
}

size_t cg_tok_piece_end(cg_tok_pattern pattern, const char *text, size_t len, size_t pos)
{
    const unsigned char *s = (const unsigned char *)text;
    if (pos >= len)
        return len;
    size_t end = pattern == CG_TOK_PATTERN_O200K ? o200k_end(s, len, pos) : cl100k_end(s, len, pos);
    return end > pos ? end : pos + 1; /* cannot happen; a guard against an endless loop */
}

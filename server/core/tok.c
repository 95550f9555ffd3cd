/* tok.c - rank tables and tiktoken's byte-pair merge, and the count over a text.
 *
 * The rank table is open addressing over 16-byte slots that hold a token's first 8 bytes,
 * its length, its rank and where the rest of it lies, so that the usual lookup (tokens are
 * short) touches one cache line. A piece is first looked up whole (most pieces are one
 * token); short pieces are merged with tiktoken's own loop (quadratic in a length that is
 * bounded here), long ones with a heap of candidate pairs keyed (rank, position), which pops
 * exactly the pair tiktoken's scan would pick (lowest rank, then leftmost) in O(log n).
 */
#include "core/tok.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

#define NO_RANK UINT32_MAX
#define SMALL_PIECE 64         /* longest piece merged by the quadratic loop */
#define FILTER_BITS (1u << 21) /* 256 KB: most misses are answered without the big table */

struct slot {
    uint64_t head; /* the token's first 8 bytes, zero-padded */
    uint32_t rank;
    uint32_t meta; /* length (low 8 bits; 0 = empty slot) | blob offset << 8 */
};

struct special {
    const char *text;
    size_t len;
};

struct cg_tok_encoding {
    cg_tok_pattern pattern;
    char name[CG_TOK_NAME_MAX + 1];
    size_t n_tokens;
    struct slot *slots;
    uint64_t mask;
    unsigned char *blob;
    const struct special *specials;
    size_t n_specials;
    uint32_t *pair_rank; /* rank of every 2-byte string (first byte << 8 | second), 256 KB */
    uint64_t *filter;    /* one bit per hash value (bits 40..60): set for every token */
};

/* The special tokens of each encoding (tiktoken's lists; ranks do not matter for counts). */
static const struct special CL100K_SPECIALS[] = {
    {"<|endoftext|>", 13},  {"<|fim_prefix|>", 14},  {"<|fim_middle|>", 14},
    {"<|fim_suffix|>", 14}, {"<|endofprompt|>", 15},
};
static const struct special O200K_SPECIALS[] = {
    {"<|endoftext|>", 13},
    {"<|endofprompt|>", 15},
};

/* ------------------------------------------------------------------ hashing ----------- */

/* Up to 8 bytes of p[0..len) as a zero-padded little-endian word. */
static inline uint64_t load_head(const unsigned char *p, size_t len)
{
    uint64_t w = 0;
    if (len >= 8) {
        memcpy(&w, p, 8);
        return w;
    }
    if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + len - 4, 4);
        /* bytes 0..3 from a, 4..len-1 from the top of b */
        w = (uint64_t)a | ((uint64_t)b >> (8 * (8 - len))) << 32;
        return w;
    }
    for (size_t k = 0; k < len; k++)
        w |= (uint64_t)p[k] << (8 * k);
    return w;
}

static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    return h;
}

static inline uint64_t hash_bytes(uint64_t head, const unsigned char *p, size_t len)
{
    uint64_t h = (head ^ (uint64_t)len) * 0x9E3779B97F4A7C15ULL;
    for (size_t k = 8; k < len; k += 8) {
        uint64_t w = load_head(p + k, len - k < 8 ? len - k : 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
    }
    return mix(h);
}

static inline uint32_t lookup(const struct cg_tok_encoding *enc, const unsigned char *p, size_t len)
{
    if (len > CG_TOK_TOKEN_BYTES_MAX)
        return NO_RANK;
    uint64_t head = load_head(p, len);
    uint64_t h = hash_bytes(head, p, len);
    uint64_t bit = (h >> 40) & (FILTER_BITS - 1);
    if (!(enc->filter[bit / 64] & (1ULL << (bit % 64))))
        return NO_RANK;
    uint64_t i = h & enc->mask;
    for (;;) {
        const struct slot *sl = &enc->slots[i];
        uint32_t slen = sl->meta & 0xFF;
        if (slen == 0)
            return NO_RANK;
        if (slen == len && sl->head == head &&
            (len <= 8 || memcmp(enc->blob + (sl->meta >> 8) + 8, p + 8, len - 8) == 0))
            return sl->rank;
        i = (i + 1) & enc->mask;
    }
}

/* ------------------------------------------------------------------ building ---------- */

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Fills err (when not NULL) and returns code; the core does not call into base/ for this. */
static cg_status set_err(struct cg_err *err, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);
static cg_status set_err(struct cg_err *err, cg_status code, const char *fmt, ...)
{
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

static cg_status bad(struct cg_err *err, const char *what, size_t index)
{
    return set_err(err, CG_INVALID_ARGUMENT, "token rank data: %s (record %zu)", what, index);
}

#define NOMEM_TEXT "token rank data: out of memory building the table"

/* The n_tokens records (rank, length) of the rank data at rec into enc's table (its blob
 * already copied): each rank and token once, the lengths adding up to blob_bytes, every byte
 * with a rank of its own. */
static cg_status load_ranks(struct cg_tok_encoding *enc, const unsigned char *records,
                            uint32_t n_tokens, uint32_t blob_bytes, struct cg_err *err)
{
    cg_status rc = CG_OK;
    /* Ranks must be unique: a bitmap over the rank space seen so far. */
    uint32_t max_rank = 0;
    for (uint32_t r = 0; r < n_tokens; r++) {
        uint32_t rank = get_u32(records + (size_t)r * 5);
        if (rank > max_rank)
            max_rank = rank;
    }
    if (max_rank >= 16u * CG_TOK_TOKENS_MAX)
        return bad(err, "rank out of bounds", 0);
    unsigned char *seen = calloc((size_t)max_rank / 8 + 1, 1);
    if (seen == NULL)
        return set_err(err, CG_NOMEM, NOMEM_TEXT);
    size_t off = 0;
    bool bytes_seen[256] = {false};
    for (uint32_t r = 0; r < n_tokens; r++) {
        const unsigned char *rec = records + (size_t)r * 5;
        uint32_t rank = get_u32(rec), tlen = rec[4];
        if (tlen == 0 || tlen > CG_TOK_TOKEN_BYTES_MAX || off + tlen > blob_bytes) {
            rc = bad(err, "token length out of bounds", r);
            break;
        }
        if (seen[rank / 8] & (1u << (rank % 8))) {
            rc = bad(err, "duplicate rank", r);
            break;
        }
        seen[rank / 8] |= (unsigned char)(1u << (rank % 8));
        const unsigned char *tok = enc->blob + off;
        if (lookup(enc, tok, tlen) != NO_RANK) {
            rc = bad(err, "duplicate token", r);
            break;
        }
        if (tlen == 1)
            bytes_seen[tok[0]] = true;
        uint64_t head = load_head(tok, tlen), h = hash_bytes(head, tok, tlen);
        uint64_t bit = (h >> 40) & (FILTER_BITS - 1), i = h & enc->mask;
        enc->filter[bit / 64] |= 1ULL << (bit % 64);
        while (enc->slots[i].meta != 0)
            i = (i + 1) & enc->mask;
        enc->slots[i] =
            (struct slot){.head = head, .rank = rank, .meta = tlen | (uint32_t)off << 8};
        off += tlen;
    }
    free(seen);
    if (rc != CG_OK)
        return rc;
    if (off != blob_bytes)
        return bad(err, "token bytes left over", n_tokens);
    for (int b = 0; b < 256; b++)
        if (!bytes_seen[b])
            return set_err(err, CG_INVALID_ARGUMENT,
                           "token rank data: byte 0x%02x has no rank of its own", b);
    return CG_OK;
}

cg_status cg_tok_encoding_new(const void *data, size_t len, struct cg_tok_encoding **out,
                              struct cg_err *err)
{
    const unsigned char *d = data;
    struct cg_tok_encoding *enc = NULL;
    cg_status rc = CG_OK;
    *out = NULL;
    if (d == NULL || len < CG_TOK_HEADER_SIZE || memcmp(d, CG_TOK_MAGIC, 8) != 0)
        return set_err(err, CG_INVALID_ARGUMENT, "token rank data: not in the CGTOKBP1 form");
    char name[CG_TOK_NAME_MAX + 1] = {0};
    memcpy(name, d + 8, CG_TOK_NAME_MAX);
    cg_tok_pattern pattern;
    if (strcmp(name, "cl100k_base") == 0)
        pattern = CG_TOK_PATTERN_CL100K;
    else if (strcmp(name, "o200k_base") == 0)
        pattern = CG_TOK_PATTERN_O200K;
    else
        return set_err(err, CG_INVALID_ARGUMENT,
                       "token rank data: unknown encoding '%.16s' (cl100k_base, o200k_base)", name);
    uint32_t n_tokens = get_u32(d + 24), blob_bytes = get_u32(d + 28);
    if (n_tokens < 256 || n_tokens > CG_TOK_TOKENS_MAX || blob_bytes > CG_TOK_BLOB_MAX)
        return set_err(err, CG_INVALID_ARGUMENT,
                       "token rank data: %u tokens, %u bytes: out of bounds", n_tokens, blob_bytes);
    size_t records = (size_t)n_tokens * 5;
    if (len - CG_TOK_HEADER_SIZE != records + blob_bytes)
        return set_err(err, CG_INVALID_ARGUMENT,
                       "token rank data: %zu bytes where the header says %zu",
                       len - CG_TOK_HEADER_SIZE, records + blob_bytes);
    enc = calloc(1, sizeof *enc);
    if (enc == NULL)
        goto nomem;
    enc->pattern = pattern;
    memcpy(enc->name, name, sizeof name);
    enc->n_tokens = n_tokens;
    if (pattern == CG_TOK_PATTERN_CL100K) {
        enc->specials = CL100K_SPECIALS;
        enc->n_specials = sizeof CL100K_SPECIALS / sizeof CL100K_SPECIALS[0];
    } else {
        enc->specials = O200K_SPECIALS;
        enc->n_specials = sizeof O200K_SPECIALS / sizeof O200K_SPECIALS[0];
    }
    uint64_t cap = 1024;
    while (cap < (uint64_t)n_tokens * 5 / 2)
        cap <<= 1;
    enc->mask = cap - 1;
    enc->slots = calloc(cap, sizeof *enc->slots);
    enc->filter = calloc(FILTER_BITS / 64, sizeof *enc->filter);
    /* +8 so that the blob can be read in whole words past its last token */
    enc->blob = malloc((size_t)blob_bytes + 8);
    if (enc->slots == NULL || enc->blob == NULL || enc->filter == NULL)
        goto nomem;
    memcpy(enc->blob, d + CG_TOK_HEADER_SIZE + records, blob_bytes);
    memset(enc->blob + blob_bytes, 0, 8);

    if ((rc = load_ranks(enc, d + CG_TOK_HEADER_SIZE, n_tokens, blob_bytes, err)) != CG_OK)
        goto out;
    /* Every merge starts from byte pairs: a direct table saves a hash probe per byte. */
    enc->pair_rank = malloc(65536 * sizeof *enc->pair_rank);
    if (enc->pair_rank == NULL)
        goto nomem;
    for (unsigned pair = 0; pair < 65536; pair++) {
        unsigned char two[2] = {(unsigned char)(pair >> 8), (unsigned char)pair};
        enc->pair_rank[pair] = lookup(enc, two, 2);
    }
    *out = enc;
    return CG_OK;
nomem:
    rc = set_err(err, CG_NOMEM, NOMEM_TEXT);
out:
    cg_tok_encoding_free(enc);
    return rc;
}

void cg_tok_encoding_free(struct cg_tok_encoding *enc)
{
    if (enc == NULL)
        return;
    free(enc->pair_rank);
    free(enc->filter);
    free(enc->slots);
    free(enc->blob);
    free(enc);
}

const char *cg_tok_encoding_name(const struct cg_tok_encoding *enc)
{
    return enc->name;
}

size_t cg_tok_encoding_size(const struct cg_tok_encoding *enc)
{
    return enc->n_tokens;
}

/* ------------------------------------------------------------------ merging ----------- */

static inline uint32_t lookup_pair(const struct cg_tok_encoding *enc, const unsigned char *p)
{
    return enc->pair_rank[(unsigned)p[0] << 8 | p[1]];
}

/* tiktoken's loop: parts are start offsets, pair_rank[k] the rank of parts k and k+1
 * together; merge the lowest (leftmost among equals) until no pair has a rank. */
static int64_t merge_small(const struct cg_tok_encoding *enc, const unsigned char *p, size_t len)
{
    uint8_t start[SMALL_PIECE + 1];
    uint32_t pair_rank[SMALL_PIECE];
    size_t parts = len;
    for (size_t k = 0; k <= len; k++)
        start[k] = (uint8_t)k;
    for (size_t k = 0; k + 1 < len; k++)
        pair_rank[k] = lookup_pair(enc, p + k);
    while (parts > 1) {
        uint32_t best = NO_RANK;
        size_t at = 0;
        for (size_t k = 0; k + 1 < parts; k++)
            if (pair_rank[k] < best) {
                best = pair_rank[k];
                at = k;
            }
        if (best == NO_RANK)
            break;
        /* parts at and at+1 become one: drop start[at+1] */
        memmove(&start[at + 1], &start[at + 2], (parts - at - 1) * sizeof start[0]);
        memmove(&pair_rank[at + 1], &pair_rank[at + 2],
                (parts > at + 2 ? parts - at - 2 : 0) * sizeof pair_rank[0]);
        parts--;
        if (at + 1 < parts)
            pair_rank[at] = lookup(enc, p + start[at], (size_t)start[at + 2] - start[at]);
        if (at > 0)
            pair_rank[at - 1] =
                lookup(enc, p + start[at - 1], (size_t)start[at + 1] - start[at - 1]);
    }
    return (int64_t)parts;
}

/* A 4-ary min-heap of (rank << 32 | position): half the depth of a binary heap, and the four
 * children of a node share a cache line. */
struct heap {
    uint64_t *v;
    size_t n, cap;
};

static void heap_sift_down(struct heap *h, size_t i, uint64_t x)
{
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= h->n)
            break;
        size_t best = c, last = c + 4 < h->n ? c + 4 : h->n;
        for (size_t k = c + 1; k < last; k++)
            if (h->v[k] < h->v[best])
                best = k;
        if (h->v[best] >= x)
            break;
        h->v[i] = h->v[best];
        i = best;
    }
    h->v[i] = x;
}

/* False when the heap cannot grow (out of memory). */
static bool heap_push(struct heap *h, uint64_t x)
{
    if (h->n == h->cap) {
        uint64_t *bigger = realloc(h->v, 2 * h->cap * sizeof *h->v);
        if (bigger == NULL)
            return false;
        h->v = bigger;
        h->cap *= 2;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 4;
        if (h->v[parent] <= x)
            break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = x;
    return true;
}

static uint64_t heap_pop(struct heap *h)
{
    uint64_t top = h->v[0], x = h->v[--h->n];
    if (h->n > 0)
        heap_sift_down(h, 0, x);
    return top;
}

/* Orders v[0..n) into a heap in O(n). */
static void heap_build(struct heap *h)
{
    for (size_t i = h->n / 4 + 1; i-- > 0;)
        if (i < h->n)
            heap_sift_down(h, i, h->v[i]);
}

/* One part of a long piece: a linked list over byte positions (next is the start of the part
 * after this one, len for the last); rank is that of this part joined with the next one,
 * NO_RANK when there is none or when this position no longer starts a part; queued is the
 * rank this position was last pushed with (NO_RANK: not since its rank last changed). */
struct part {
    uint32_t next, prev, rank, queued;
};

static inline uint64_t part_key(const struct part *parts, uint32_t i)
{
    return (uint64_t)parts[i].rank << 32 | i;
}

/* Whether the pair at i merges before both neighbouring pairs: (rank, position) below theirs.
 * The next merge, the least pair of all, is always such a local minimum. */
static inline bool local_min(const struct part *parts, uint32_t i, size_t len)
{
    if (parts[i].rank == NO_RANK)
        return false;
    uint64_t key = part_key(parts, i);
    uint32_t before = parts[i].prev, after = parts[i].next;
    return (before == UINT32_MAX || part_key(parts, before) > key) &&
           (after >= len || part_key(parts, after) > key);
}

/* Pushes the pair at i when it is a local minimum not yet queued with its rank; false when
 * memory runs out. */
static inline bool consider(struct heap *h, struct part *parts, uint32_t i, size_t len)
{
    if (i < len && local_min(parts, i, len) && parts[i].queued != parts[i].rank) {
        parts[i].queued = parts[i].rank;
        return heap_push(h, part_key(parts, i));
    }
    return true;
}

static inline void set_rank(struct part *parts, uint32_t i, uint32_t rank)
{
    if (parts[i].rank != rank)
        parts[i].queued = NO_RANK;
    parts[i].rank = rank;
}

/* The heap holds every pair that is a local minimum (and stale entries, skipped when popped
 * because their rank is no longer the pair's): the least entry whose rank is current is then
 * the least pair overall, the one tiktoken's scan would merge. Keeping only local minima
 * makes the heap a fraction of the piece (no two neighbours are both minima); each merge
 * changes two ranks and re-examines the four pairs around it. The heap starts at len / 2
 * entries and grows when needed; memory is about 20 bytes per byte of the piece. */
static int64_t merge_large(const struct cg_tok_encoding *enc, const unsigned char *p, size_t len)
{
    if (len > UINT32_MAX - 1)
        return -1;
    struct part *parts = malloc(len * sizeof *parts);
    struct heap h = {.v = malloc((len / 2 + 64) * sizeof(uint64_t)), .n = 0, .cap = len / 2 + 64};
    int64_t count = -1;
    if (parts == NULL || h.v == NULL)
        goto out;
    for (size_t i = 0; i < len; i++)
        parts[i] = (struct part){(uint32_t)(i + 1), (uint32_t)(i == 0 ? UINT32_MAX : i - 1),
                                 i + 1 < len ? lookup_pair(enc, p + i) : NO_RANK, NO_RANK};
    for (uint32_t i = 0; i < len; i++)
        if (local_min(parts, i, len)) {
            parts[i].queued = parts[i].rank;
            h.v[h.n++] = part_key(parts, i);
        }
    heap_build(&h);
    int64_t parts_left = (int64_t)len;
    while (h.n > 0) {
        uint64_t top = heap_pop(&h);
        uint32_t rank = (uint32_t)(top >> 32), at = (uint32_t)top;
        struct part *pa = &parts[at];
        if (pa->rank != rank)
            continue;
        uint32_t gone = pa->next;
        pa->next = parts[gone].next;
        if (pa->next < len)
            parts[pa->next].prev = at;
        set_rank(parts, gone, NO_RANK);
        parts_left--;
        uint32_t after = pa->next, before = pa->prev;
        set_rank(parts, at, after < len ? lookup(enc, p + at, parts[after].next - at) : NO_RANK);
        bool ok = true;
        if (before != UINT32_MAX) {
            set_rank(parts, before, lookup(enc, p + before, (size_t)after - before));
            ok = consider(&h, parts, parts[before].prev, len) && consider(&h, parts, before, len);
        }
        if (!ok || !consider(&h, parts, at, len) || !consider(&h, parts, after, len))
            goto out;
    }
    count = parts_left;
out:
    free(parts);
    free(h.v);
    return count;
}

static inline int64_t piece_count(const struct cg_tok_encoding *enc, const unsigned char *p,
                                  size_t len)
{
    if (len == 1)
        return 1;
    if (len == 2) /* the table of every pair: no hashing */
        return lookup_pair(enc, p) != NO_RANK ? 1 : 2;
    if (len <= CG_TOK_TOKEN_BYTES_MAX && lookup(enc, p, len) != NO_RANK)
        return 1;
    if (len <= SMALL_PIECE)
        return merge_small(enc, p, len);
    return merge_large(enc, p, len);
}

int64_t cg_tok_piece_count(const struct cg_tok_encoding *enc, const char *piece, size_t len)
{
    if (len == 0)
        return 0;
    return piece_count(enc, (const unsigned char *)piece, len);
}

/* ------------------------------------------------------------------ counting ---------- */

/* Ordinary text s[0..n), valid UTF-8: pieces, each merged. */
static int64_t count_ordinary(const struct cg_tok_encoding *enc, const unsigned char *s, size_t n,
                              int64_t limit)
{
    int64_t total = 0;
    size_t i = 0;
    while (i < n) {
        size_t e = cg_tok_piece_end(enc->pattern, (const char *)s, n, i);
        int64_t c = piece_count(enc, s + i, e - i);
        if (c < 0)
            return -1;
        total += c;
        if (total > limit)
            return total;
        i = e;
    }
    return total;
}

/* Valid UTF-8 s[0..n): with specials allowed, each special token's text is one token and the
 * text between is ordinary (tiktoken splits at the leftmost special, then pre-tokenizes each
 * stretch on its own: `$` is the end of the stretch). */
static int64_t count_valid(const struct cg_tok_encoding *enc, const unsigned char *s, size_t n,
                           bool allow_special, int64_t limit)
{
    if (!allow_special)
        return count_ordinary(enc, s, n, limit);
    int64_t total = 0;
    size_t from = 0, scan = 0;
    while (scan + 1 < n) {
        const unsigned char *lt = memchr(s + scan, '<', n - scan - 1);
        if (lt == NULL)
            break;
        size_t at = (size_t)(lt - s), hit = 0;
        if (s[at + 1] == '|')
            for (size_t k = 0; k < enc->n_specials; k++) {
                const struct special *sp = &enc->specials[k];
                if (sp->len <= n - at && memcmp(s + at, sp->text, sp->len) == 0) {
                    hit = sp->len;
                    break;
                }
            }
        if (hit == 0) {
            scan = at + 1;
            continue;
        }
        int64_t c = count_ordinary(enc, s + from, at - from, limit - total);
        if (c < 0)
            return -1;
        total += c + 1;
        if (total > limit)
            return total;
        from = scan = at + hit;
    }
    int64_t c = count_ordinary(enc, s + from, n - from, limit - total);
    return c < 0 ? -1 : total + c;
}

/* Length of the maximal subpart of an ill-formed sequence at s[0..n) (s[0] starts one):
 * the longest prefix of a well-formed sequence, at least one byte (Unicode §3.9, D93b). */
static size_t ill_formed_length(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 1;
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi)
        k++;
    else
        return 1;
    while (k <= need && k < n && s[k] >= 0x80 && s[k] <= 0xBF)
        k++;
    return k; /* k <= need: the sequence stopped short */
}

/* s[0..n) with every maximal ill-formed subsequence replaced by U+FFFD, in a new buffer
 * (*out_len set), or NULL when memory runs out. */
static unsigned char *replace_ill_formed(const unsigned char *s, size_t n, size_t *out_len)
{
    unsigned char *out = malloc(n * 3 + 1);
    if (out == NULL)
        return NULL;
    size_t i = 0, o = 0;
    while (i < n) {
        size_t bad_at;
        if (cg_utf8_valid((const char *)s + i, n - i, &bad_at)) {
            memcpy(out + o, s + i, n - i);
            o += n - i;
            break;
        }
        memcpy(out + o, s + i, bad_at);
        o += bad_at;
        i += bad_at;
        i += ill_formed_length(s + i, n - i);
        out[o++] = 0xEF;
        out[o++] = 0xBF;
        out[o++] = 0xBD;
    }
    *out_len = o;
    return out;
}

int64_t cg_tok_count_limit(const struct cg_tok_encoding *enc, const char *text, size_t len,
                           bool allow_special, int64_t limit)
{
    if (len == 0)
        return 0;
    if (len > CG_TOK_TEXT_MAX || text == NULL)
        return -1;
    if (limit < 0)
        limit = 0;
    const unsigned char *s = (const unsigned char *)text;
    if (cg_utf8_valid(text, len, NULL))
        return count_valid(enc, s, len, allow_special, limit);
    size_t n;
    unsigned char *fixed = replace_ill_formed(s, len, &n);
    if (fixed == NULL)
        return -1;
    int64_t c = count_valid(enc, fixed, n, allow_special, limit);
    free(fixed);
    return c;
}

int64_t cg_tok_count(const struct cg_tok_encoding *enc, const char *text, size_t len,
                     bool allow_special)
{
    return cg_tok_count_limit(enc, text, len, allow_special, INT64_MAX);
}

/* ------------------------------------------------------------------ the memo ---------- */

#define CACHE_KEY_MAX 24 /* longer stretches are counted each time */
#define CACHE_BITS 12
#define CACHE_SLOTS (1u << CACHE_BITS) /* direct-mapped: a new stretch replaces the one there */

struct cache_slot {
    uint64_t key[CACHE_KEY_MAX / 8]; /* the stretch, zero-padded */
    uint32_t len;                    /* 0: empty */
    uint32_t count;
};

struct cg_tok_cache {
    const struct cg_tok_encoding *enc;
    struct cache_slot slots[CACHE_SLOTS];
};

struct cg_tok_cache *cg_tok_cache_new(void)
{
    return calloc(1, sizeof(struct cg_tok_cache));
}

void cg_tok_cache_free(struct cg_tok_cache *cache)
{
    free(cache);
}

/* The memo's slot for s[0..n) (n <= CACHE_KEY_MAX) as a stretch (tag 0) or a piece (tag
 * PIECE_TAG: a piece's count is its merge alone, which may differ from the count of the
 * same bytes as text); *hit says whether it holds them, else the caller fills it with
 * memo_fill. */
#define PIECE_TAG 64u

struct memo_key {
    uint64_t w[3];
    uint32_t len;
};

static inline struct cache_slot *memo_slot(struct cg_tok_cache *cache, const unsigned char *s,
                                           size_t n, uint32_t tag, struct memo_key *k, bool *hit)
{
    k->w[0] = load_head(s, n);
    k->w[1] = n > 8 ? load_head(s + 8, n - 8 < 8 ? n - 8 : 8) : 0;
    k->w[2] = n > 16 ? load_head(s + 16, n - 16) : 0;
    k->len = (uint32_t)n + tag;
    /* Multiply-shift: the top bits of a sum of independent products. */
    uint64_t h = (k->w[0] ^ k->len) * 0x9E3779B97F4A7C15ULL + k->w[1] * 0xC2B2AE3D27D4EB4FULL +
                 k->w[2] * 0x165667B19E3779F9ULL;
    struct cache_slot *sl = &cache->slots[h >> (64 - CACHE_BITS)];
    *hit = sl->len == k->len && sl->key[0] == k->w[0] && sl->key[1] == k->w[1] &&
           sl->key[2] == k->w[2];
    return sl;
}

static inline void memo_fill(struct cache_slot *sl, const struct memo_key *k, int64_t count)
{
    if (count < 0 || count > UINT32_MAX)
        return;
    sl->key[0] = k->w[0];
    sl->key[1] = k->w[1];
    sl->key[2] = k->w[2];
    sl->len = k->len;
    sl->count = (uint32_t)count;
}

/* count_ordinary with each piece of 3..CACHE_KEY_MAX bytes through the memo (rank lookups
 * of real text miss the CPU caches; repeated pieces then cost one memo probe). */
static int64_t count_pieces(const struct cg_tok_encoding *enc, struct cg_tok_cache *cache,
                            const unsigned char *s, size_t n)
{
    int64_t total = 0;
    size_t i = 0;
    while (i < n) {
        size_t e = cg_tok_piece_end(enc->pattern, (const char *)s, n, i), len = e - i;
        int64_t c;
        if (len <= 2 || len > CACHE_KEY_MAX) {
            c = piece_count(enc, s + i, len);
        } else {
            struct memo_key k;
            bool hit;
            struct cache_slot *sl = memo_slot(cache, s + i, len, PIECE_TAG, &k, &hit);
            if (hit) {
                c = sl->count;
            } else {
                c = piece_count(enc, s + i, len);
                memo_fill(sl, &k, c);
            }
        }
        if (c < 0)
            return -1;
        total += c;
        i = e;
    }
    return total;
}

/* One stretch s[0..n) of valid UTF-8 (see tok.h: no piece crosses its ends). */
static int64_t count_stretch(const struct cg_tok_encoding *enc, struct cg_tok_cache *cache,
                             const unsigned char *s, size_t n)
{
    if (n > CACHE_KEY_MAX)
        return count_pieces(enc, cache, s, n);
    struct memo_key k;
    bool hit;
    struct cache_slot *sl = memo_slot(cache, s, n, 0, &k, &hit);
    if (hit)
        return sl->count;
    int64_t c = count_pieces(enc, cache, s, n);
    /* count_pieces may have reused the slot for a piece: fill it again with the stretch. */
    memo_fill(sl, &k, c);
    return c;
}

int64_t cg_tok_count_cached(const struct cg_tok_encoding *enc, struct cg_tok_cache *cache,
                            const char *text, size_t len, bool allow_special)
{
    if (cache == NULL || allow_special || len == 0 || len > CG_TOK_TEXT_MAX || text == NULL ||
        !cg_utf8_valid(text, len, NULL))
        return cg_tok_count(enc, text, len, allow_special);
    if (cache->enc != enc) {
        memset(cache->slots, 0, sizeof cache->slots);
        cache->enc = enc;
    }
    const unsigned char *s = (const unsigned char *)text, *end = s + len, *from = s, *p = s + 1;
    int64_t total = 0;
    /* Cut before every space whose previous byte is printable ASCII (not white space). */
    while (p < end && (p = memchr(p, ' ', (size_t)(end - p))) != NULL) {
        if (p[-1] > 0x20 && p[-1] < 0x7F) {
            int64_t c = count_stretch(enc, cache, from, (size_t)(p - from));
            if (c < 0)
                return -1;
            total += c;
            from = p;
        }
        p++;
    }
    int64_t c = count_stretch(enc, cache, from, (size_t)(end - from));
    return c < 0 ? -1 : total + c;
}

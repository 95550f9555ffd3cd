/* test_tok.c - the exact token counter: pre-tokenization of both patterns, tiktoken's merge
 * order (short and long pieces), special tokens, invalid UTF-8, rank data checks. Uses rank
 * data the test makes itself; tests/tokens/exactness.sh compares with npm tiktoken on the
 * real encodings. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/tok.h"
#include "test_tok_vocab.h"

/* The pieces of text under pattern, joined with '|'. */
static const char *split(cg_tok_pattern pattern, const char *text, size_t len)
{
    static char out[4096];
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        size_t e = cg_tok_piece_end(pattern, text, len, i);
        cr_assert(e > i && e <= len);
        if (i > 0)
            out[o++] = '|';
        memcpy(out + o, text + i, e - i);
        o += e - i;
        i = e;
    }
    out[o] = '\0';
    return out;
}

#define CL(text, expected)                                                                         \
    cr_expect_str_eq(split(CG_TOK_PATTERN_CL100K, text, strlen(text)), expected)
#define O2(text, expected)                                                                         \
    cr_expect_str_eq(split(CG_TOK_PATTERN_O200K, text, strlen(text)), expected)

Test(tok, cl100k_pieces_follow_the_regex, .timeout = 10)
{
    CL("Hello world", "Hello| world");
    CL("I'll don't HE'S", "I|'ll| don|'t| HE|'S");
    CL("'s'x", "'s|'x");
    CL("it'\xC5\xBF", "it|'\xC5\xBF"); /* U+017F LONG S folds to s */
    CL("a   b", "a|  | b");
    CL("a\n\n  b", "a|\n\n| | b");
    CL("x  ", "x|  ");
    CL("  \n  ", "  \n  "); /* \s++$ takes a run that reaches the end */
    CL("12345 123", "123|45| |123");
    CL("a\r\nb", "a|\r\n|b");
    CL("!!!\n\nx", "!!!\n\n|x");
    CL(" !!x", " !!|x");
    CL("\t\tx", "\t|\tx");
    CL("\xE4\xB8\xAD\xE6\x96\x87"
       "abc",
       "\xE4\xB8\xAD\xE6\x96\x87"
       "abc"); /* CJK are letters */
    CL("\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok", "\xF0\x9F\x98\x80\xF0\x9F\x98\x80| ok");
    CL("e\xCC\x81", "e|\xCC\x81"); /* a combining mark is not \p{L} */
    CL("//\n//", "//\n|//");
    CL("\xC2\xA0word", "\xC2\xA0word"); /* NBSP is \s and may prefix a word */
}

Test(tok, o200k_pieces_follow_the_regex, .timeout = 10)
{
    O2("HelloWorld", "Hello|World");
    O2("HELLOworld", "HELLOworld");
    O2("HELLO World", "HELLO| World");
    O2("don't I'LL", "don't| I'LL");
    O2("//\n//x", "//\n//|x"); /* [\r\n/]* after punctuation */
    O2("12345", "123|45");
    O2("a\n\n  b", "a|\n\n| | b");
    O2("  \n  ", "  \n|  "); /* \s*[\r\n]+ comes first here */
    O2("x  ", "x|  ");
    O2("e\xCC\x81x", "e\xCC\x81x"); /* marks are in both case classes */
    O2("\xE4\xB8\xAD\xE6\x96\x87"
       "abc",
       "\xE4\xB8\xAD\xE6\x96\x87"
       "abc");
    O2(" $100", " $|100");
    O2("(hello)", "(hello|)");
    O2("\xC7\x85"
       "ab",
       "\xC7\x85"
       "ab"); /* titlecase U+01C5 then lower */
}

static struct cg_tok_encoding *make(const char *name, const char *const *merges)
{
    struct vocab v = vocab_make(name, merges);
    struct cg_tok_encoding *enc = NULL;
    struct cg_err err = {0};
    cg_status st = cg_tok_encoding_new(v.data, v.len, &enc, &err);
    free(v.data);
    cr_assert_eq(st, CG_OK, "%s", err.msg);
    return enc;
}

static int64_t count(const struct cg_tok_encoding *enc, const char *s, bool special)
{
    return cg_tok_count(enc, s, strlen(s), special);
}

Test(tok, merges_lowest_rank_first, .timeout = 10)
{
    const char *merges[] = {"ab", "bc", "cd", "abc", NULL};
    struct cg_tok_encoding *enc = make("cl100k_base", merges);
    cr_expect_eq(cg_tok_encoding_size(enc), 260);
    cr_expect_str_eq(cg_tok_encoding_name(enc), "cl100k_base");
    cr_expect_eq(count(enc, "", false), 0);
    cr_expect_eq(cg_tok_count(enc, NULL, 0, true), 0);
    cr_expect_eq(cg_tok_count(enc, "x", (size_t)CG_TOK_TEXT_MAX + 1, false), -1,
                 "over the maximum size: refused before reading");
    cr_expect_eq(count(enc, "abc", false), 1);
    /* ab (256) before bc (257): [ab][c][d] -> cd (258) -> [ab][cd]; bc first would give 3 */
    cr_expect_eq(count(enc, "abcd", false), 2);
    cr_expect_eq(count(enc, "xyz", false), 3);
    cg_tok_encoding_free(enc);
    cg_tok_encoding_free(NULL);
}

Test(tok, equal_ranks_merge_leftmost_first, .timeout = 10)
{
    const char *merges[] = {"aa", "aab", NULL};
    struct cg_tok_encoding *enc = make("o200k_base", merges);
    /* "aaab": [aa][a][b] then "ab" has no rank: 3; merging the right pair first would give
     * [a][aa][b] -> aab -> 2 */
    cr_expect_eq(count(enc, "aaab", false), 3);
    cr_expect_eq(count(enc, "aab", false), 1);
    cg_tok_encoding_free(enc);
}

/* tiktoken's merge loop, written plainly, as the reference for long pieces. */
static int64_t reference_merge(const struct cg_tok_encoding *enc, const char *p, size_t len)
{
    size_t *start = malloc((len + 1) * sizeof *start), parts = len;
    for (size_t k = 0; k <= len; k++)
        start[k] = k;
    for (;;) {
        int64_t best = -1;
        size_t at = 0;
        for (size_t k = 0; k + 1 < parts; k++) {
            size_t l = start[k + 2] - start[k];
            /* a piece of 2 tokens or fewer is the rank of the pair itself */
            if (l > CG_TOK_TOKEN_BYTES_MAX || cg_tok_piece_count(enc, p + start[k], l) != 1)
                continue;
            /* rank order: the pair's rank is unknown here, so the vocabulary of this test
             * makes ranks increase with length and then with bytes (see below) */
            int64_t key =
                (int64_t)l << 32 | (unsigned char)p[start[k]] << 8 | (unsigned char)p[start[k] + 1];
            if (best < 0 || key < best) {
                best = key;
                at = k;
            }
        }
        if (best < 0)
            break;
        memmove(&start[at + 1], &start[at + 2], (parts - at - 1) * sizeof *start);
        parts--;
    }
    free(start);
    return (int64_t)parts;
}

Test(tok, long_pieces_merge_as_tiktoken_does, .timeout = 30)
{
    /* Vocabulary: all 2-letter strings over "abc" and some 3- and 4-letter ones, ranked by
     * length then bytes, so that the reference above can order pairs without the ranks. */
    static char store[200][8];
    const char *merges[200];
    size_t n = 0;
    const char *alpha = "abc";
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            snprintf(store[n], 8, "%c%c", alpha[i], alpha[j]), merges[n] = store[n], n++;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++)
                if ((i + j + k) % 2 == 0)
                    snprintf(store[n], 8, "%c%c%c", alpha[i], alpha[j], alpha[k]),
                        merges[n] = store[n], n++;
    merges[n] = NULL;
    struct cg_tok_encoding *enc = make("o200k_base", merges);
    srand(7);
    char text[600];
    for (int round = 0; round < 200; round++) {
        size_t len = 65 + (size_t)(rand() % 500); /* past the short-piece path */
        for (size_t i = 0; i < len; i++)
            text[i] = alpha[rand() % 3];
        cr_assert_eq(cg_tok_piece_count(enc, text, len), reference_merge(enc, text, len),
                     "round %d, %zu bytes", round, len);
        len = 3 + (size_t)(rand() % 60); /* the short-piece path */
        cr_assert_eq(cg_tok_piece_count(enc, text, len), reference_merge(enc, text, len),
                     "round %d, %zu bytes", round, len);
    }
    cg_tok_encoding_free(enc);
}

Test(tok, a_256k_piece_counts_in_linear_time, .timeout = 30)
{
    const char *merges[] = {"ab", "cd", "abcd", "ef", "gh", "efgh", "abcdefgh", NULL};
    struct cg_tok_encoding *enc = make("cl100k_base", merges);
    size_t len = 256 * 1024;
    char *text = malloc(len);
    for (size_t i = 0; i < len; i++)
        text[i] = "abcdefgh"[i % 8];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int64_t c = cg_tok_count(enc, text, len, false);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_expect_eq(c, (int64_t)(len / 8), "one piece of 'abcdefgh' x 32768");
    double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    /* quadratic merging takes tens of seconds here; linear-ish takes milliseconds */
    cr_expect_lt(s, 2.0, "%.3f s", s);
    for (size_t i = 0; i < len; i++)
        text[i] = (char)('a' + (i * 7919) % 26);
    cr_expect_gt(cg_tok_count(enc, text, len, false), 0);
    free(text);
    cg_tok_encoding_free(enc);
}

Test(tok, specials_are_text_unless_allowed, .timeout = 10)
{
    struct cg_tok_encoding *cl = make("cl100k_base", NULL);
    struct cg_tok_encoding *o2 = make("o200k_base", NULL);
    /* bytes only: every piece counts its bytes. "a" "<|" "endoftext" "|>" "b" */
    cr_expect_eq(count(cl, "a<|endoftext|>b", false), 15);
    cr_expect_eq(count(cl, "a<|endoftext|>b", true), 3);
    cr_expect_eq(count(cl, "<|fim_prefix|><|fim_middle|><|fim_suffix|><|endofprompt|>", true), 4);
    cr_expect_eq(count(o2, "<|fim_prefix|>", true), count(o2, "<|fim_prefix|>", false),
                 "o200k has no FIM specials");
    cr_expect_eq(count(o2, "x<|endofprompt|>", true), 2);
    cr_expect_eq(count(cl, "<|endoftext", true), count(cl, "<|endoftext", false));
    cr_expect_eq(count(cl, "<<|endoftext|>", true), 2);
    /* text around a special is pre-tokenized on its own: "  " before it ends that text */
    cr_expect_eq(count(cl, "x  <|endoftext|>", true), 1 + 2 + 1);
    cg_tok_encoding_free(cl);
    cg_tok_encoding_free(o2);
}

Test(tok, invalid_utf8_counts_as_replacement_characters, .timeout = 10)
{
    struct cg_tok_encoding *enc = make("o200k_base", NULL);
    const char fffd[] = "\xEF\xBF\xBD";
    cr_expect_eq(cg_tok_count(enc, "\xFF", 1, false), 3);
    cr_expect_eq(cg_tok_count(enc,
                              "a\xFF"
                              "b",
                              3, false),
                 count(enc,
                       "a\xEF\xBF\xBD"
                       "b",
                       false));
    /* maximal subparts: E2 82 is one, ED A0 80 (a surrogate) is three */
    cr_expect_eq(cg_tok_count(enc, "\xE2\x82", 2, false), 3);
    cr_expect_eq(cg_tok_count(enc, "\xED\xA0\x80", 3, false), 9);
    cr_expect_eq(cg_tok_count(enc, "\xF4\x90\x80\x80", 4, false), 12);
    cr_expect_eq(cg_tok_count(enc, "\xC0\xAF", 2, false), 6);
    cr_expect_eq(cg_tok_count(enc, fffd, 3, false), 3);
    /* NUL bytes are ordinary characters */
    cr_expect_eq(cg_tok_count(enc, "\0\0a", 3, false), 3);
    /* garbage of every byte value, every length: never fails */
    unsigned char junk[512];
    srand(11);
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(rand() % (int)sizeof junk);
        for (size_t i = 0; i < len; i++)
            junk[i] = (unsigned char)rand();
        int64_t c = cg_tok_count(enc, (const char *)junk, len, round % 2);
        cr_assert(c >= (len > 0) && c <= (int64_t)len * 3, "round %d: %lld", round, (long long)c);
    }
    cg_tok_encoding_free(enc);
}

Test(tok, count_limit_stops_early_and_is_exact_below, .timeout = 10)
{
    struct cg_tok_encoding *enc = make("cl100k_base", NULL);
    const char *text = "one two three four five six";
    int64_t full = count(enc, text, false);
    cr_expect_eq(cg_tok_count_limit(enc, text, strlen(text), false, full), full);
    int64_t partial = cg_tok_count_limit(enc, text, strlen(text), false, 5);
    cr_expect(partial > 5 && partial < full, "%lld", (long long)partial);
    cg_tok_encoding_free(enc);
}

static cg_status try_build(const unsigned char *data, size_t len, struct cg_err *err)
{
    struct cg_tok_encoding *enc = (struct cg_tok_encoding *)1;
    cg_status st = cg_tok_encoding_new(data, len, &enc, err);
    cr_expect_null(enc);
    cg_tok_encoding_free(enc);
    return st;
}

Test(tok, malformed_rank_data_is_refused_with_a_reason, .timeout = 10)
{
    const char *merges[] = {"ab", NULL};
    struct vocab v = vocab_make("cl100k_base", merges);
    struct cg_err err;
    cr_expect_eq(try_build(v.data, 10, &err), CG_INVALID_ARGUMENT);
    cr_expect_eq(try_build(v.data, v.len - 1, &err), CG_INVALID_ARGUMENT, "truncated");
    cr_expect(strstr(err.msg, "bytes") != NULL, "%s", err.msg);

    struct vocab w = vocab_make("p50k_base", merges);
    cr_expect_eq(try_build(w.data, w.len, &err), CG_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "p50k_base") != NULL, "%s", err.msg);
    free(w.data);

    const char *dup[] = {"ab", "ab", NULL};
    w = vocab_make("cl100k_base", dup);
    cr_expect_eq(try_build(w.data, w.len, &err), CG_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "duplicate token") != NULL, "%s", err.msg);
    free(w.data);

    w = vocab_make("cl100k_base", merges);
    put_u32(w.data + CG_TOK_HEADER_SIZE + 256 * 5, 3); /* record 256 now says rank 3 */
    cr_expect_eq(try_build(w.data, w.len, &err), CG_INVALID_ARGUMENT);
    cr_expect(strstr(err.msg, "duplicate rank") != NULL, "%s", err.msg);
    free(w.data);

    w = vocab_make("cl100k_base", merges);
    w.data[CG_TOK_HEADER_SIZE + 4] = 0; /* byte 0 has length 0 */
    cr_expect_eq(try_build(w.data, w.len, &err), CG_INVALID_ARGUMENT);
    free(w.data);

    w = vocab_make("cl100k_base", merges);
    unsigned char *bytes = w.data + CG_TOK_HEADER_SIZE + 257 * 5;
    bytes[0x41] = 0x42; /* byte 0x41 replaced: 0x41 has no rank, 0x42 appears twice */
    cr_expect_eq(try_build(w.data, w.len, &err), CG_INVALID_ARGUMENT);
    free(w.data);
    free(v.data);
}

struct shared_count {
    const struct cg_tok_encoding *enc;
    const char *text;
    size_t len;
    int64_t result;
};

static void *count_in_thread(void *arg)
{
    struct shared_count *job = arg;
    for (int k = 0; k < 20; k++) {
        int64_t c = cg_tok_count(job->enc, job->text, job->len, k % 2 == 0);
        if (k > 0 && c != job->result)
            job->result = -2;
        else
            job->result = c;
    }
    return NULL;
}

Test(tok, one_encoding_counts_in_many_threads, .timeout = 30)
{
    const char *merges[] = {"ab", "abc", "  ", " the", "th", "the", NULL};
    struct cg_tok_encoding *enc = make("o200k_base", merges);
    static char text[200000];
    srand(3);
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = "abc the  \n"[rand() % 10];
    memset(text + 5000, 'a', 3000); /* a long piece: the heap path */
    struct shared_count jobs[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        jobs[t] = (struct shared_count){enc, text, sizeof text - (size_t)t * 1000, 0};
        cr_assert_eq(pthread_create(&threads[t], NULL, count_in_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        pthread_join(threads[t], NULL);
        cr_expect_eq(jobs[t].result, cg_tok_count(enc, text, jobs[t].len, true), "thread %d", t);
    }
    cg_tok_encoding_free(enc);
}

/* The memo gives cg_tok_count's counts: random texts from fragments that stress the cuts
 * (spaces after printable ASCII, runs of spaces, non-ASCII white space and letters, newlines,
 * contractions, digits, punctuation, invalid UTF-8), both patterns, one memo across
 * encodings, and a memo small enough to evict. */
Test(tok, the_memo_counts_as_cg_tok_count, .timeout = 60)
{
    const char *merges[] = {"ab", "abc", "  ", " the", "th", "the", "'s", " '", "12", NULL};
    struct cg_tok_encoding *encs[2] = {make("o200k_base", merges), make("cl100k_base", merges)};
    static const char *const frags[] = {
        " ",
        "  ",
        "the",
        " the",
        "abc",
        "'s",
        "'S",
        "\n",
        "\r\n",
        " \n ",
        "\t",
        "123",
        "1234",
        ".",
        "(",
        "...",
        "/",
        "x",
        "A",
        "Ab",
        "aB",
        "\xC2\xA0",
        "\xE3\x80\x80" /* U+3000 */,
        "\xC3\xA9" /* é */,
        "\xE4\xB8\xAD" /* 中 */,
        "\xCC\x81" /* a combining mark */,
        "\xC7\x85" /* titlecase */,
        "\xFF" /* invalid */,
        "<|endoftext|>",
        "a very long word with more than twenty-four bytes in one stretch"};
    const size_t n_frags = sizeof frags / sizeof frags[0];
    struct cg_tok_cache *memo = cg_tok_cache_new();
    cr_assert_not_null(memo);
    uint64_t seed = 11;
    char text[512];
    for (int i = 0; i < 20000; i++) {
        size_t len = 0;
        int parts = 1 + (int)(seed % 12);
        for (int k = 0; k < parts; k++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *f = frags[(seed >> 33) % n_frags];
            size_t fl = strlen(f);
            if (len + fl >= sizeof text)
                break;
            memcpy(text + len, f, fl);
            len += fl;
        }
        const struct cg_tok_encoding *enc = encs[i % 2];
        cr_assert_eq(cg_tok_count_cached(enc, memo, text, len, false),
                     cg_tok_count(enc, text, len, false), "\"%.*s\"", (int)len, text);
        cr_assert_eq(cg_tok_count_cached(enc, memo, text, len, true),
                     cg_tok_count(enc, text, len, true));
    }
    cr_expect_eq(cg_tok_count_cached(encs[0], NULL, "the the", 7, false),
                 cg_tok_count(encs[0], "the the", 7, false));
    cg_tok_cache_free(memo);
    cg_tok_cache_free(NULL);
    cg_tok_encoding_free(encs[0]);
    cg_tok_encoding_free(encs[1]);
}

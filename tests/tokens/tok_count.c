/* tok_count.c - counts tokens with ctxguard's counter, for the exactness test and by hand.
 *
 *   tok_count [--dir DIR] --records FILE   one line per record of FILE (records are a u32
 *                                          little-endian length and that many bytes):
 *                                          "cl100k cl100k_special o200k o200k_special"
 *   tok_count [--dir DIR] FILE...          the same four counts for each whole file
 *
 * DIR defaults to the build's token data directory (cg_tokdata_default_dir()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokdata.h"
#include "core/tok.h"

#define RECORD_MAX (64u << 20)

static struct cg_tok_encoding *load(const char *dir, const char *name)
{
    struct cg_tokdata data;
    struct cg_err err;
    struct cg_tok_encoding *enc = NULL;
    if (cg_tokdata_load(dir, name, &data, &err) != CG_OK) {
        fprintf(stderr, "tok_count: %s\n", err.msg);
        exit(2);
    }
    if (cg_tok_encoding_new(data.data, data.len, &enc, &err) != CG_OK) {
        fprintf(stderr, "tok_count: %s: %s\n", name, err.msg);
        exit(2);
    }
    cg_tokdata_cleanup(&data);
    return enc;
}

/* One memo across all records and both encodings (it forgets on a change of encoding), so
 * the ordinary counts also check the memo: a count through it that differs from the plain
 * count prints -1, which no reference count equals. */
static struct cg_tok_cache *memo;

static long long ordinary(const struct cg_tok_encoding *enc, const char *s, size_t n)
{
    int64_t plain = cg_tok_count(enc, s, n, false);
    int64_t memoed = cg_tok_count_cached(enc, memo, s, n, false);
    return memoed == plain ? (long long)plain : -1;
}

static void print_counts(struct cg_tok_encoding *const encs[2], const char *s, size_t n)
{
    printf("%lld %lld %lld %lld\n", ordinary(encs[0], s, n),
           (long long)cg_tok_count(encs[0], s, n, true), ordinary(encs[1], s, n),
           (long long)cg_tok_count(encs[1], s, n, true));
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
        if (n == cap) {
            if (cap >= RECORD_MAX) {
                free(buf);
                return NULL;
            }
            char *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                return NULL;
            }
            buf = bigger;
            cap *= 2;
        }
    }
    *len = n;
    return buf;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *records = NULL;
    int first = 1;
    while (first < argc && strncmp(argv[first], "--", 2) == 0) {
        if (strcmp(argv[first], "--dir") == 0 && first + 1 < argc) {
            dir = argv[first + 1];
            first += 2;
        } else if (strcmp(argv[first], "--records") == 0 && first + 1 < argc) {
            records = argv[first + 1];
            first += 2;
        } else {
            fprintf(stderr, "usage: tok_count [--dir DIR] (--records FILE | FILE...)\n");
            return 2;
        }
    }
    if (records == NULL && first >= argc) {
        fprintf(stderr, "usage: tok_count [--dir DIR] (--records FILE | FILE...)\n");
        return 2;
    }
    struct cg_tok_encoding *encs[2] = {load(dir, "cl100k_base"), load(dir, "o200k_base")};
    if ((memo = cg_tok_cache_new()) == NULL) {
        fprintf(stderr, "tok_count: out of memory\n");
        return 2;
    }
    int rc = 0;
    if (records != NULL) {
        FILE *f = fopen(records, "rb");
        if (f == NULL) {
            perror(records);
            return 2;
        }
        char *buf = NULL;
        for (;;) {
            unsigned char lenb[4];
            if (fread(lenb, 1, 4, f) != 4)
                break;
            size_t n = (size_t)lenb[0] | (size_t)lenb[1] << 8 | (size_t)lenb[2] << 16 |
                       (size_t)lenb[3] << 24;
            if (n > RECORD_MAX) {
                fprintf(stderr, "tok_count: record of %zu bytes\n", n);
                rc = 2;
                break;
            }
            char *nb = realloc(buf, n + 1);
            if (nb == NULL || fread(nb, 1, n, f) != n) {
                fprintf(stderr, "tok_count: truncated record\n");
                free(nb);
                buf = NULL;
                rc = 2;
                break;
            }
            buf = nb;
            print_counts(encs, buf, n);
        }
        free(buf);
        fclose(f);
    }
    for (int i = first; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        size_t n = 0;
        char *buf = f != NULL ? read_all(f, &n) : NULL;
        if (f != NULL)
            fclose(f);
        if (buf == NULL) {
            fprintf(stderr, "tok_count: cannot read %s\n", argv[i]);
            rc = 2;
            continue;
        }
        print_counts(encs, buf, n);
        free(buf);
    }
    cg_tok_cache_free(memo);
    cg_tok_encoding_free(encs[0]);
    cg_tok_encoding_free(encs[1]);
    return rc;
}

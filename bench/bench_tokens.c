/* bench_tokens.c - throughput of the exact token counter, single thread, against the npm
 * peers measured in the same run (bench/tokens.sh runs both).
 *
 *   bench_tokens [--dir DIR] --corpus FILE.records [--parts N] [--peers FILE]
 *
 * The corpus (records: u32 little-endian length + bytes) is cut into N parts of about equal
 * size (default 8); each part is counted once per encoding, so every timed pass sees new
 * text, and the figure is the median MB/s over the parts. --peers names the output of
 * bench/peers/bench_peers.mjs (lines "PEER ENCODING MBPS" for the corpus, and
 * "PEER ENCODING worst BYTES SECONDS" for the single-piece case); the table then shows the
 * ratios to npm tiktoken and to the fastest of gpt-tokenizer / ai-tokenizer.
 * Worst case: one piece of 256 KB random lower-case ASCII letters (one piece in both patterns;
 * no merge beyond a few letters applies), median of 5 counts. Prints figures; never fails on time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/tokdata.h"
#include "core/tok.h"

#define MAX_PARTS 64
#define WORST_BYTES (256u * 1024)

struct record {
    const char *text;
    size_t len;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* This thread's CPU time: the figures use min(wall, CPU) per timed pass, which discounts the
 * time other processes take the core away on this shared 2-core machine; the peers' runner
 * does the same with the process's CPU time. */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct cg_tok_encoding *load(const char *dir, const char *name)
{
    struct cg_tokdata data;
    struct cg_err err;
    struct cg_tok_encoding *enc = NULL;
    if (cg_tokdata_load(dir, name, &data, &err) != CG_OK) {
        fprintf(stderr, "bench_tokens: %s\n", err.msg);
        exit(1);
    }
    if (cg_tok_encoding_new(data.data, data.len, &enc, &err) != CG_OK) {
        fprintf(stderr, "bench_tokens: %s\n", err.msg);
        exit(1);
    }
    cg_tokdata_cleanup(&data);
    return enc;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && n < (1L << 31) && fseek(f, 0, SEEK_SET) == 0) {
            buf = malloc((size_t)n + 1);
            if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            }
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

/* A peer's figure from the peers file, or 0 when absent. */
static double peer_figure(const char *peers, const char *peer, const char *enc, bool worst,
                          double *worst_bytes)
{
    if (peers == NULL)
        return 0;
    char line[256];
    FILE *f = fopen(peers, "r");
    double found = 0;
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof line, f) != NULL) {
        char name[64], e[64], third[64];
        double a = 0, b = 0;
        int got = sscanf(line, "%63s %63s %63s %lf %lf", name, e, third, &a, &b);
        if (got < 3 || strcmp(name, peer) != 0 || strcmp(e, enc) != 0)
            continue;
        if (worst && got == 5 && strcmp(third, "worst") == 0) {
            *worst_bytes = a;
            found = b;
        } else if (!worst && strcmp(third, "worst") != 0) {
            found = strtod(third, NULL);
        }
    }
    fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *corpus = NULL, *peers = NULL;
    int parts = 8;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--corpus") == 0 && i + 1 < argc)
            corpus = argv[++i];
        else if (strcmp(argv[i], "--peers") == 0 && i + 1 < argc)
            peers = argv[++i];
        else if (strcmp(argv[i], "--parts") == 0 && i + 1 < argc)
            parts = (int)strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_tokens [--dir DIR] --corpus FILE [--parts N] "
                            "[--peers FILE]\n");
            return 2;
        }
    }
    if (corpus == NULL || parts < 1 || parts > MAX_PARTS) {
        fprintf(stderr,
                "bench_tokens: --corpus FILE is needed (bench/tokens.sh makes one); "
                "--parts 1..%d\n",
                MAX_PARTS);
        return 2;
    }
    size_t flen = 0;
    char *file = read_file(corpus, &flen);
    if (file == NULL) {
        fprintf(stderr, "bench_tokens: cannot read %s\n", corpus);
        return 1;
    }
    size_t cap = 1024, n = 0, total = 0;
    struct record *recs = malloc(cap * sizeof *recs);
    for (size_t off = 0; recs != NULL && off + 4 <= flen;) {
        const unsigned char *p = (const unsigned char *)file + off;
        size_t len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        if (len > flen - off - 4)
            break;
        if (n == cap) {
            cap *= 2;
            struct record *bigger = realloc(recs, cap * sizeof *recs);
            if (bigger == NULL)
                break;
            recs = bigger;
        }
        recs[n++] = (struct record){file + off + 4, len};
        total += len;
        off += 4 + len;
    }
    if (recs == NULL || n == 0) {
        fprintf(stderr, "bench_tokens: no records in %s\n", corpus);
        return 1;
    }
    const char *names[2] = {"cl100k_base", "o200k_base"};
    printf("corpus: %zu records, %.1f MB, %d parts; single thread\n", n, total / 1e6, parts);
    printf("%-12s %10s %14s %8s %16s %8s %12s %14s\n", "encoding", "MB/s", "tiktoken MB/s", "ratio",
           "fastest js MB/s", "ratio", "worst 256K s", "peers worst");
    char *worst = malloc(WORST_BYTES);
    srand(4);
    for (size_t i = 0; worst != NULL && i < WORST_BYTES; i++)
        worst[i] = (char)('a' + rand() % 26);
    for (int e = 0; e < 2; e++) {
        struct cg_tok_encoding *enc = load(dir, names[e]);
        double mbps[MAX_PARTS];
        size_t r = 0, done = 0;
        int64_t tokens = 0;
        for (int part = 0; part < parts; part++) {
            size_t until = total / (size_t)parts * (size_t)(part + 1), bytes = 0;
            double t0 = now_s(), c0 = cpu_s();
            for (; r < n && (done < until || part == parts - 1); r++) {
                tokens += cg_tok_count(enc, recs[r].text, recs[r].len, false);
                bytes += recs[r].len;
                done += recs[r].len;
            }
            double dt = now_s() - t0, dc = cpu_s() - c0;
            if (dc < dt)
                dt = dc;
            mbps[part] = dt > 0 ? bytes / 1e6 / dt : 0;
        }
        double ours = median(mbps, parts);
        double worst_t[5];
        for (int k = 0; k < 5; k++) {
            double t0 = now_s(), c0 = cpu_s();
            int64_t c = worst != NULL ? cg_tok_count(enc, worst, WORST_BYTES, false) : -1;
            worst_t[k] = now_s() - t0;
            if (cpu_s() - c0 < worst_t[k])
                worst_t[k] = cpu_s() - c0;
            if (c <= 0)
                worst_t[k] = -1;
        }
        double tik = peer_figure(peers, "tiktoken", names[e], false, NULL);
        double gpt = peer_figure(peers, "gpt-tokenizer", names[e], false, NULL);
        double ait = peer_figure(peers, "ai-tokenizer", names[e], false, NULL);
        double fastest = gpt > ait ? gpt : ait;
        double wb = 0, wt = 0, pb, pt;
        const char *peer_names[3] = {"tiktoken", "gpt-tokenizer", "ai-tokenizer"};
        for (int k = 0; k < 3; k++) {
            pt = peer_figure(peers, peer_names[k], names[e], true, &pb);
            if (pt > wt) {
                wt = pt;
                wb = pb;
            }
        }
        char ratio1[16] = "-", ratio2[16] = "-", pw[32] = "-";
        if (tik > 0)
            snprintf(ratio1, sizeof ratio1, "%.1fx", ours / tik);
        if (fastest > 0)
            snprintf(ratio2, sizeof ratio2, "%.1fx", ours / fastest);
        if (wt > 0)
            snprintf(pw, sizeof pw, "%.1f s @%.0fK", wt, wb / 1024);
        printf("%-12s %10.1f %14.2f %8s %16.2f %8s %12.4f %14s\n", names[e], ours, tik, ratio1,
               fastest, ratio2, median(worst_t, 5), pw);
        fprintf(stderr, "bench_tokens: %s: %lld tokens, %.2f bytes/token\n", names[e],
                (long long)tokens, tokens > 0 ? (double)total / (double)tokens : 0);
        cg_tok_encoding_free(enc);
    }
    free(worst);
    free(recs);
    free(file);
    return 0;
}

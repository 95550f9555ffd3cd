/* bench_count.c - the exact counter in-process on one conversation, the reference that
 * CountTokens through gRPC is held to (issue 16, item 8; bench/count.sh runs both).
 *
 *   bench_count FILE.json [-r RUNS]
 *
 * FILE is an OpenAI-format conversation object. Each run counts every text, tool-call
 * argument, tool-result and reasoning part of it with o200k_base: "counter" is cg_tok_count
 * over the parts of a conversation already read (the counter's own speed); "read+count" also
 * reads the JSON into the conversation first and counts through a per-run memo (what the
 * server does for a large CountTokens, without the transport). Figures: median over RUNS
 * (default 21) of min(wall, thread CPU) per run, as MB/s of the FILE's bytes. Prints figures;
 * never fails on time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/tokdata.h"
#include "core/conv_json.h"
#include "core/tok.h"

#define RUNS_MAX 1000

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Every countable text of conv, through memo (NULL: plain cg_tok_count). */
static int64_t count_conv(const struct cg_tok_encoding *enc, struct cg_tok_cache *memo,
                          const struct cg_conv *conv)
{
    int64_t total = 0;
    for (size_t i = 0; i < conv->n_messages; i++)
        for (size_t k = 0; k < conv->messages[i].n_parts; k++) {
            const struct cg_part *p = &conv->messages[i].parts[k];
            const struct cg_str *s = p->kind == CG_PART_TEXT          ? &p->u.text
                                     : p->kind == CG_PART_TOOL_RESULT ? &p->u.tool_result.content
                                     : p->kind == CG_PART_TOOL_CALL   ? &p->u.tool_call.arguments
                                     : p->kind == CG_PART_REASONING   ? &p->u.reasoning.text
                                                                      : NULL;
            if (s != NULL && s->len > 0)
                total += cg_tok_count_cached(enc, memo, s->ptr, s->len, false);
        }
    return total;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int runs = 21;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (path == NULL)
            path = argv[i];
    }
    if (path == NULL || runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "usage: bench_count FILE.json [-r RUNS (1..%d)]\n", RUNS_MAX);
        return 2;
    }
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "bench_count: cannot open %s\n", path);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *json = malloc((size_t)len + 1);
    if (json == NULL || fread(json, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        fprintf(stderr, "bench_count: cannot read %s\n", path);
        return 1;
    }
    fclose(f);
    json[len] = '\0';
    struct cg_err err = {0};
    struct cg_tokdata td;
    struct cg_tok_encoding *enc = NULL;
    if (cg_tokdata_load(NULL, "o200k_base", &td, &err) != CG_OK ||
        cg_tok_encoding_new(td.data, td.len, &enc, &err) != CG_OK) {
        fprintf(stderr, "bench_count: %s\n", err.msg);
        return 1;
    }
    cg_tokdata_cleanup(&td);
    struct cg_conv *conv = NULL;
    if (cg_conv_json_read(CG_CONV_JSON_OPENAI, json, (size_t)len, NULL, &conv, &err) != CG_OK) {
        fprintf(stderr, "bench_count: %s: %s\n", path, err.msg);
        return 1;
    }
    double counter[RUNS_MAX], full[RUNS_MAX];
    int64_t tokens = 0;
    for (int r = 0; r < runs; r++) {
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        tokens = count_conv(enc, NULL, conv);
        double w1 = clock_s(CLOCK_MONOTONIC), c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        counter[r] = w1 - w0 < c1 - c0 ? w1 - w0 : c1 - c0;
        struct cg_conv *again = NULL;
        struct cg_tok_cache *memo = cg_tok_cache_new();
        if (cg_conv_json_read(CG_CONV_JSON_OPENAI, json, (size_t)len, NULL, &again, &err) !=
                CG_OK ||
            count_conv(enc, memo, again) != tokens) {
            fprintf(stderr, "bench_count: the memo's count differs\n");
            return 1;
        }
        cg_tok_cache_free(memo);
        cg_conv_free(again);
        double w2 = clock_s(CLOCK_MONOTONIC), c2 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        full[r] = w2 - w1 < c2 - c1 ? w2 - w1 : c2 - c1;
    }
    qsort(counter, (size_t)runs, sizeof *counter, cmp_double);
    qsort(full, (size_t)runs, sizeof *full, cmp_double);
    double mb = (double)len / 1e6;
    printf("COUNT %s bytes=%ld tokens=%lld counter_ms=%.2f counter_mbps=%.1f read_count_ms=%.2f "
           "read_count_mbps=%.1f\n",
           path, len, (long long)tokens, counter[runs / 2] * 1e3, mb / counter[runs / 2],
           full[runs / 2] * 1e3, mb / full[runs / 2]);
    cg_conv_free(conv);
    cg_tok_encoding_free(enc);
    free(json);
    return 0;
}

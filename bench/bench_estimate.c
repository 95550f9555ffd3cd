/* bench_estimate.c - estimator throughput, single thread, against baselines over the same
 * bytes in the same run: memchr for a byte that is absent (the memory-bandwidth floor of one
 * pass), strlen, and a UTF-8 character count (what a chars/4 heuristic must do at least).
 *
 *   bench_estimate [DIR]   DIR: OpenAI JSON conversations (default: the ones generated at
 *                          build time, <build>/testdata/conversations,
 *                          tests/support/gen_conversations.py).
 * Prints MB/s and the ratio to memchr for: the scan + model over all text as one buffer;
 * cg_estimate_text part by part (as counting a conversation does); cg_estimate_conv over
 * each parsed conversation (framing, tools, images included; parsing excluded).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/conv_json.h"
#include "core/estimate.h"

#define MAX_CONVS 4096

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b != NULL)
        b[n] = '\0';
    fclose(f);
    *len = b != NULL ? (size_t)n : 0;
    return b;
}

/* All text of all parts, back to back, and the parts' offsets. */
struct text {
    char *buf;
    size_t len, cap;
    size_t *ends;
    size_t n, ncap;
};

static void append(struct text *t, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    if (t->n == t->ncap) {
        t->ncap = t->ncap ? t->ncap * 2 : 1024;
        t->ends = realloc(t->ends, t->ncap * sizeof *t->ends);
    }
    if (t->buf == NULL || t->ends == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
    t->ends[t->n++] = t->len;
}

static void collect(struct text *t, const struct cg_conv *conv)
{
    for (size_t i = 0; i < conv->n_messages; i++)
        for (size_t k = 0; k < conv->messages[i].n_parts; k++) {
            const struct cg_part *p = &conv->messages[i].parts[k];
            if (p->kind == CG_PART_TEXT)
                append(t, p->u.text.ptr, p->u.text.len);
            else if (p->kind == CG_PART_TOOL_CALL)
                append(t, p->u.tool_call.arguments.ptr, p->u.tool_call.arguments.len);
            else if (p->kind == CG_PART_TOOL_RESULT)
                append(t, p->u.tool_result.content.ptr, p->u.tool_result.content.len);
        }
}

static volatile size_t sink;

/* Runs fn until at least min_s seconds pass; returns MB/s over bytes per run. */
#define MEASURE(result, bytes, body)                                                               \
    do {                                                                                           \
        double t0_ = now_s(), t_;                                                                  \
        long runs_ = 0;                                                                            \
        do {                                                                                       \
            body;                                                                                  \
            runs_++;                                                                               \
        } while ((t_ = now_s() - t0_) < 0.6);                                                      \
        (result) = (double)(bytes) * (double)runs_ / t_ / 1e6;                                     \
    } while (0)

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : CG_TESTDATA_CONVERSATIONS;
    struct text t = {0};
    static struct cg_conv *convs[MAX_CONVS];
    size_t nconv = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL && nconv < MAX_CONVS) {
        if (strstr(e->d_name, ".json") == NULL)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t len;
        char *json = slurp(path, &len);
        struct cg_err err;
        if (json != NULL &&
            cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &convs[nconv], &err) == CG_OK)
            collect(&t, convs[nconv++]);
        free(json);
    }
    if (d != NULL)
        closedir(d);
    if (t.len == 0) {
        fprintf(stderr, "bench_estimate: no conversations (*.json) with text in %s\n", dir);
        return 1;
    }
    printf("estimator throughput, single thread: %.1f MB of text in %zu parts from %s\n",
           (double)t.len / 1e6, t.n, dir);

    double memchr_mbs, strlen_mbs, utf8_mbs, bulk_mbs, parts_mbs, conv_mbs = 0;
    MEASURE(memchr_mbs, t.len, sink += memchr(t.buf, 0x01, t.len) != NULL);
    MEASURE(strlen_mbs, t.len, sink += strlen(t.buf));
    MEASURE(utf8_mbs, t.len, {
        size_t chars = 0;
        for (size_t i = 0; i < t.len; i++)
            chars += ((unsigned char)t.buf[i] & 0xC0) != 0x80;
        sink += chars;
    });
    MEASURE(bulk_mbs, t.len, {
        struct cg_est_features f = {0};
        cg_estimate_scan(t.buf, t.len, &f);
        sink += (size_t)cg_estimate_tokens(CG_PROFILE_DEFAULT, &f);
    });
    MEASURE(parts_mbs, t.len, {
        size_t start = 0;
        int64_t total = 0;
        for (size_t i = 0; i < t.n; i++) {
            total += cg_estimate_text(CG_PROFILE_DEFAULT, t.buf + start, t.ends[i] - start);
            start = t.ends[i];
        }
        sink += (size_t)total;
    });
    if (nconv > 0)
        MEASURE(conv_mbs, t.len, {
            for (size_t i = 0; i < nconv; i++) {
                struct cg_estimate est;
                if (cg_estimate_conv(convs[i], CG_PROFILE_CLAUDE, 1.0, NULL, &est, NULL) == CG_OK)
                    sink += (size_t)est.total;
            }
        });

    printf("%-44s %10s %10s\n", "", "MB/s", "x memchr");
    printf("%-44s %10.0f %10.2f\n", "baseline: memchr (absent byte)", memchr_mbs, 1.0);
    printf("%-44s %10.0f %10.2f\n", "baseline: strlen", strlen_mbs, strlen_mbs / memchr_mbs);
    printf("%-44s %10.0f %10.2f\n", "baseline: UTF-8 character count (chars/4)", utf8_mbs,
           utf8_mbs / memchr_mbs);
    printf("%-44s %10.0f %10.2f\n", "estimator: one buffer (scan + model)", bulk_mbs,
           bulk_mbs / memchr_mbs);
    printf("%-44s %10.0f %10.2f\n", "estimator: part by part (cg_estimate_text)", parts_mbs,
           parts_mbs / memchr_mbs);
    if (nconv > 0)
        printf("%-44s %10.0f %10.2f\n", "estimator: whole conversations (estimate_conv)", conv_mbs,
               conv_mbs / memchr_mbs);
    for (size_t i = 0; i < nconv; i++)
        cg_conv_free(convs[i]);
    free(t.buf);
    free(t.ends);
    return 0;
}

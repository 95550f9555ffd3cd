/* compare.c - the estimator against exact o200k_base counts on whole conversations, next to
 * the "(chars/4 + 5 per message) x 1.1" heuristic. Reads reference.mjs's `convs` output (name,
 * exact, chars, messages) on stdin and the conversation files from DIR; counts what the
 * reference counts (message text, tool-call names and arguments, tool results) with the same
 * framing (3 + role per message, 3 for priming). A development tool (bench/README.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/estimate.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (b != NULL && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static double est(const char *s, size_t len)
{
    struct cg_est_features f = {0};
    if (len == 0)
        return 0;
    cg_estimate_scan(s, len, &f);
    return cg_estimate_tokens(CG_PROFILE_OPENAI, &f);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: node reference.mjs convs DIR | compare DIR\n");
        return 2;
    }
    char name[256];
    long exact, chars, msgs;
    int n = 0, under_est = 0, under_base = 0;
    double worst_est = 0, worst_base = 0, sum_est = 0, sum_base = 0, sum_abs_est = 0,
           sum_abs_base = 0;
    int inside_bound = 0;
    printf("%-16s %9s %9s %8s %9s %8s %9s\n", "conversation", "exact", "estimate", "err", "chars/4",
           "err", "bound");
    while (scanf("%255s %ld %ld %ld", name, &exact, &chars, &msgs) == 4) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", argv[1], name);
        size_t len;
        char *json = slurp(path, &len);
        struct cg_conv *conv = NULL;
        struct cg_err err = {0};
        if (json == NULL || cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &conv, &err)) {
            fprintf(stderr, "%s: %s\n", name, err.msg);
            return 1;
        }
        double e = 3;
        for (size_t i = 0; i < conv->n_messages; i++) {
            const struct cg_message *m = &conv->messages[i];
            e += 4;
            for (size_t k = 0; k < m->n_parts; k++) {
                const struct cg_part *p = &m->parts[k];
                if (p->kind == CG_PART_TEXT)
                    e += est(p->u.text.ptr, p->u.text.len);
                else if (p->kind == CG_PART_TOOL_CALL)
                    e += est(p->u.tool_call.name.ptr, p->u.tool_call.name.len) +
                         est(p->u.tool_call.arguments.ptr, p->u.tool_call.arguments.len);
                else if (p->kind == CG_PART_TOOL_RESULT)
                    e += est(p->u.tool_result.content.ptr, p->u.tool_result.content.len);
            }
        }
        struct cg_estimate full;
        if (cg_estimate_conv(conv, CG_PROFILE_OPENAI, 1.0, NULL, &full, &err) != CG_OK)
            return 1;
        double estimate = ceil(e);
        double base = ((double)chars / 4 + 5.0 * (double)msgs) * 1.1;
        double re = (estimate - (double)exact) / (double)exact;
        double rb = (base - (double)exact) / (double)exact;
        double bound = (double)full.error_bound;
        inside_bound += fabs(estimate - (double)exact) <= bound;
        printf("%-16s %9ld %9.0f %+7.1f%% %9.0f %+7.1f%% %9.0f\n", name, exact, estimate, 100 * re,
               base, 100 * rb, bound);
        n++;
        under_est += re < 0;
        under_base += rb < 0;
        if (re < worst_est)
            worst_est = re;
        if (rb < worst_base)
            worst_base = rb;
        sum_est += re;
        sum_base += rb;
        sum_abs_est += fabs(re);
        sum_abs_base += fabs(rb);
        cg_conv_free(conv);
        free(json);
    }
    if (n == 0)
        return 1;
    printf("\n%-28s %12s %12s %12s %12s\n", "", "undercounted", "worst under", "mean err",
           "mean |err|");
    printf("%-28s %5d/%d %4.0f%% %+11.1f%% %+11.1f%% %11.1f%%\n", "ctxguard estimator", under_est,
           n, 100.0 * under_est / n, 100 * worst_est, 100 * sum_est / n, 100 * sum_abs_est / n);
    printf("%-28s %5d/%d %4.0f%% %+11.1f%% %+11.1f%% %11.1f%%\n", "(chars/4 + 5/msg) x 1.1",
           under_base, n, 100.0 * under_base / n, 100 * worst_base, 100 * sum_base / n,
           100 * sum_abs_base / n);
    printf("exact count within the estimator's error bound: %d/%d\n", inside_bound, n);
    return 0;
}

/* bench_summary.c - the extractive summarizer (core/summary): how many planted facts a
 * 400-token summary keeps, and how long the largest conversation takes.
 *
 * usage: bench_summary [DIR_OR_FILE...] [-t TARGET] [-r REPEATS] [-v]
 * Default input: the conversations generated at build time (<build>/testdata/conversations,
 * tests/support/gen_conversations.py) and tests/data/summary (held-out conversations written
 * for this test, with facts of other shapes, in en, de and ja).
 * Each file is an OpenAI-format conversation object with a "needles" array of
 * {"fact": TEXT, "where": "user"|"assistant"|"tool"}: TEXT is stated in a message of that
 * role. A fact is kept when TEXT appears in the summary (ASCII case folded): the summary
 * must carry the statement, not only its number. Tokens are counted exactly with o200k_base.
 * Timing: median over REPEATS runs of this thread's CPU time for the largest conversation,
 * next to a baseline measured in the same run (one memchr pass over the same text, and
 * the estimator over it) so that machines compare.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/tokdata.h"
#include "core/conv_json.h"
#include "core/estimate.h"
#include "core/summary.h"
#include "core/tok.h"

#define MAX_FILES 256

struct file {
    char path[1024];
    char *json;
    size_t len;
};

static struct file files[MAX_FILES];
static size_t n_files;
static struct cg_tok_encoding *enc;

static int64_t count_o200k(void *arg, const char *text, size_t len)
{
    (void)arg;
    return cg_tok_count(enc, text, len, false);
}

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void add_file(const char *path)
{
    if (n_files == MAX_FILES)
        return;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        fclose(f);
        free(buf);
        return;
    }
    fclose(f);
    buf[len] = '\0';
    snprintf(files[n_files].path, sizeof files[n_files].path, "%s", path);
    files[n_files].json = buf;
    files[n_files].len = (size_t)len;
    n_files++;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return;
    if (!S_ISDIR(sb.st_mode)) {
        add_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (d == NULL)
        return;
    char *names[MAX_FILES];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_FILES) {
        size_t l = strlen(e->d_name);
        if (l > 5 && strcmp(e->d_name + l - 5, ".json") == 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", path, names[i]);
        add_file(p);
        free(names[i]);
    }
}

/* Whether needle occurs in hay, ASCII letters compared without case. */
static bool contains_fold(const char *hay, const char *needle)
{
    size_t n = strlen(needle), h = strlen(hay);
    for (size_t i = 0; i + n <= h; i++) {
        size_t k = 0;
        while (k < n) {
            unsigned char a = (unsigned char)hay[i + k], b = (unsigned char)needle[k];
            if (a >= 'A' && a <= 'Z')
                a += 32;
            if (b >= 'A' && b <= 'Z')
                b += 32;
            if (a != b)
                break;
            k++;
        }
        if (k == n)
            return true;
    }
    return false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct tally {
    int said, said_kept, user, user_kept, tool, tool_kept, convs, over;
};

int main(int argc, char **argv)
{
    int64_t target = 400;
    int repeats = 21;
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc)
            target = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc)
            repeats = (int)strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "-v") == 0)
            verbose = true;
        else
            add_path(argv[i]);
    }
    if (n_files == 0) {
        add_path(CG_TESTDATA_CONVERSATIONS);
        /* The held-out set lives in the source tree, found from this file's path. */
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", __FILE__);
        char *slash = strstr(dir, "bench/bench_summary.c");
        if (slash != NULL) {
            snprintf(slash, sizeof dir - (size_t)(slash - dir), "tests/data/summary");
            add_path(dir);
        }
    }
    struct cg_err err = {0};
    struct cg_tokdata td;
    if (cg_tokdata_load(NULL, "o200k_base", &td, &err) != CG_OK ||
        cg_tok_encoding_new(td.data, td.len, &enc, &err) != CG_OK) {
        fprintf(stderr, "bench_summary: %s\n", err.msg);
        return 1;
    }
    cg_tokdata_cleanup(&td);

    struct tally sample = {0}, held = {0};
    size_t largest = SIZE_MAX;
    struct cg_conv *largest_conv = NULL;
    printf("%-40s %5s %4s %8s %8s %8s %6s\n", "file", "lang", "msgs", "said", "user", "tool",
           "tokens");
    for (size_t f = 0; f < n_files; f++) {
        struct cg_conv *conv = NULL;
        if (cg_conv_json_read(CG_CONV_JSON_OPENAI, files[f].json, files[f].len, NULL, &conv,
                              &err) != CG_OK) {
            fprintf(stderr, "%s: %s\n", files[f].path, err.msg);
            continue;
        }
        json_t *root = json_loadb(files[f].json, files[f].len, 0, NULL);
        json_t *needles = json_object_get(root, "needles");
        struct cg_summary_opts opts = {.target_tokens = target, .count = count_o200k};
        struct cg_summary sum;
        if (cg_summary_extract(conv, &opts, &sum, &err) != CG_OK) {
            fprintf(stderr, "%s: %s\n", files[f].path, err.msg);
            cg_summary_cleanup(&sum);
            json_decref(root);
            cg_conv_free(conv);
            continue;
        }
        bool is_held = strstr(files[f].path, "tests/data/summary") != NULL;
        struct tally *t = is_held ? &held : &sample;
        t->convs++;
        if (sum.tokens > target)
            t->over++;
        int said = 0, said_kept = 0, user = 0, user_kept = 0, tool = 0, tool_kept = 0;
        size_t i;
        json_t *nd;
        json_array_foreach(needles, i, nd)
        {
            const char *fact = json_string_value(json_object_get(nd, "fact"));
            const char *where = json_string_value(json_object_get(nd, "where"));
            if (fact == NULL || where == NULL)
                continue;
            bool kept = contains_fold(sum.text, fact);
            if (strcmp(where, "tool") == 0) {
                tool++;
                tool_kept += kept;
            } else {
                said++;
                said_kept += kept;
                if (strcmp(where, "user") == 0) {
                    user++;
                    user_kept += kept;
                }
            }
            if (verbose && !kept)
                printf("    lost (%s): %s\n", where, fact);
        }
        t->said += said, t->said_kept += said_kept, t->tool += tool, t->tool_kept += tool_kept;
        t->user += user, t->user_kept += user_kept;
        const char *base = strrchr(files[f].path, '/');
        printf("%-40s %5s %4zu %3d/%-4d %3d/%-4d %3d/%-4d %6lld\n",
               base ? base + 1 : files[f].path, sum.language, conv->n_messages, said_kept, said,
               user_kept, user, tool_kept, tool, (long long)sum.tokens);
        if (verbose)
            printf("%s\n\n", sum.text);
        if (!is_held && (largest == SIZE_MAX || files[f].len > files[largest].len)) {
            largest = f;
            cg_conv_free(largest_conv);
            largest_conv = conv;
            conv = NULL;
        }
        cg_summary_cleanup(&sum);
        json_decref(root);
        cg_conv_free(conv);
    }
    printf("\nsample conversations (%d): facts said by users kept %d/%d = %.1f %%; by users or "
           "assistants %d/%d = %.1f %%; facts only in tool output kept %d/%d = %.1f %%; over "
           "target: %d\n",
           sample.convs, sample.user_kept, sample.user,
           sample.user ? 100.0 * sample.user_kept / sample.user : 0, sample.said_kept, sample.said,
           sample.said ? 100.0 * sample.said_kept / sample.said : 0, sample.tool_kept, sample.tool,
           sample.tool ? 100.0 * sample.tool_kept / sample.tool : 0, sample.over);
    if (held.convs > 0)
        printf("held-out conversations (%d): user facts kept %d/%d = %.1f %%; facts said kept "
               "%d/%d = %.1f %%; tool %d/%d = %.1f %%; over target: %d\n",
               held.convs, held.user_kept, held.user,
               held.user ? 100.0 * held.user_kept / held.user : 0, held.said_kept, held.said,
               held.said ? 100.0 * held.said_kept / held.said : 0, held.tool_kept, held.tool,
               held.tool ? 100.0 * held.tool_kept / held.tool : 0, held.over);

    if (largest_conv != NULL) {
        /* Baseline: one memchr over every text byte of the conversation, and the estimator. */
        size_t bytes = 0;
        for (size_t m = 0; m < largest_conv->n_messages; m++)
            for (size_t p = 0; p < largest_conv->messages[m].n_parts; p++)
                bytes += cg_conv_part_text_bytes(&largest_conv->messages[m].parts[p]);
        double *ts = calloc((size_t)repeats, sizeof *ts);
        double *tb = calloc((size_t)repeats, sizeof *tb);
        for (int r = 0; r < repeats; r++) {
            double t0 = cpu_ms();
            struct cg_estimate est;
            if (cg_estimate_conv(largest_conv, CG_PROFILE_OPENAI, 0, NULL, &est, &err) != CG_OK)
                return 1;
            tb[r] = cpu_ms() - t0;
            struct cg_summary_opts opts = {.target_tokens = target, .count = count_o200k};
            struct cg_summary sum;
            t0 = cpu_ms();
            if (cg_summary_extract(largest_conv, &opts, &sum, &err) != CG_OK)
                return 1;
            ts[r] = cpu_ms() - t0;
            cg_summary_cleanup(&sum);
        }
        qsort(ts, (size_t)repeats, sizeof *ts, cmp_double);
        qsort(tb, (size_t)repeats, sizeof *tb, cmp_double);
        printf("largest: %s (%zu messages, %zu text bytes): extractive summary %.2f ms "
               "(median of %d); baseline estimate of the conversation %.2f ms; ratio %.1fx\n",
               files[largest].path, largest_conv->n_messages, bytes, ts[repeats / 2], repeats,
               tb[repeats / 2], tb[repeats / 2] > 0 ? ts[repeats / 2] / tb[repeats / 2] : 0);
        free(ts);
        free(tb);
        cg_conv_free(largest_conv);
    }
    for (size_t f = 0; f < n_files; f++)
        free(files[f].json);
    cg_tok_encoding_free(enc);
    return 0;
}

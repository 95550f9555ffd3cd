/* bench_redact.c - single-thread throughput of PII redaction (core/redact) on the text of
 * sample conversations, against memcpy and memchr baselines measured in the same run.
 *
 * usage: bench_redact [DIR_OR_FILE...] [-r REPEATS]
 * Default input: the conversations generated at build time (<build>/testdata/conversations,
 * tests/support/gen_conversations.py; every *.json). From each OpenAI-format
 * conversation the string values of "content", "text" and "arguments" (message text, tool
 * outputs, tool-call arguments) are decoded from JSON and redacted one message at a time with
 * one session per conversation, as the server would. Figures are medians over REPEATS runs
 * of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/redact.h"

#define DEFAULT_DIR CG_TESTDATA_CONVERSATIONS
#define FILE_MAX (256u << 20)

struct text {
    char *data;
    size_t len, cap;
    size_t *starts; /* message i is data[starts[i]..starts[i+1]) */
    size_t nmsg, msg_cap;
    size_t *conv_first; /* first message of each conversation */
    size_t nconv, conv_cap;
};

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (q == NULL) {
        fprintf(stderr, "bench_redact: out of memory\n");
        exit(1);
    }
    *cap = c;
    return q;
}

static void put_utf8(struct text *t, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (char)(0xf0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    t->data = grow(t->data, &t->cap, t->len + n + 1, 1);
    memcpy(t->data + t->len, b, n);
    t->len += n;
}

static int hex4(const char *s, const char *end, uint32_t *out)
{
    if (end - s < 4)
        return 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = s[k];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return 0;
    }
    *out = v;
    return 1;
}

/* Decodes the JSON string starting after its opening quote at p; appends it to t when keep.
 * Returns the position after the closing quote (or end). */
static const char *json_string(const char *p, const char *end, struct text *t, int keep)
{
    while (p < end && *p != '"') {
        uint32_t cp = (unsigned char)*p;
        if (*p == '\\' && p + 1 < end) {
            p++;
            switch (*p) {
            case 'n':
                cp = '\n';
                break;
            case 't':
                cp = '\t';
                break;
            case 'r':
                cp = '\r';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'u':
                if (!hex4(p + 1, end, &cp))
                    cp = '?';
                else {
                    p += 4;
                    uint32_t lo;
                    if (cp >= 0xd800 && cp < 0xdc00 && p + 2 < end && p[1] == '\\' && p[2] == 'u' &&
                        hex4(p + 3, end, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                        p += 6;
                    }
                }
                break;
            default:
                cp = (unsigned char)*p;
                break;
            }
            p++;
            if (keep)
                put_utf8(t, cp);
            continue;
        }
        p++;
        if (keep) {
            t->data = grow(t->data, &t->cap, t->len + 2, 1);
            t->data[t->len++] = (char)cp;
        }
    }
    return p < end ? p + 1 : end;
}

/* Every "content" / "text" / "arguments" string of one JSON document becomes a message. */
static void extract(const char *p, const char *end, struct text *t)
{
    t->conv_first = grow(t->conv_first, &t->conv_cap, t->nconv + 1, sizeof(size_t));
    t->conv_first[t->nconv++] = t->nmsg;
    while (p < end) {
        if (*p != '"') {
            p++;
            continue;
        }
        const char *key = p + 1;
        p = json_string(key, end, t, 0);
        size_t klen = (size_t)(p - 1 - key);
        const char *q = p;
        while (q < end && (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r'))
            q++;
        if (q >= end || *q != ':')
            continue; /* a value, not a key */
        q++;
        while (q < end && (*q == ' ' || *q == '\n' || *q == '\t' || *q == '\r'))
            q++;
        int wanted = (klen == 7 && memcmp(key, "content", 7) == 0) ||
                     (klen == 4 && memcmp(key, "text", 4) == 0) ||
                     (klen == 9 && memcmp(key, "arguments", 9) == 0);
        if (!wanted || q >= end || *q != '"') {
            p = q;
            continue;
        }
        t->starts = grow(t->starts, &t->msg_cap, t->nmsg + 2, sizeof(size_t));
        t->starts[t->nmsg++] = t->len;
        p = json_string(q + 1, end, t, 1);
    }
    t->starts = grow(t->starts, &t->msg_cap, t->nmsg + 2, sizeof(size_t));
    t->starts[t->nmsg] = t->len;
}

static int load_file(const char *path, struct text *t)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    char *buf = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[65536];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && len < FILE_MAX) {
        buf = grow(buf, &cap, len + got, 1);
        memcpy(buf + len, chunk, got);
        len += got;
    }
    fclose(f);
    extract(buf, buf + len, t);
    free(buf);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_path(const char *path, struct text *t)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return load_file(path, t);
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0)
            continue;
        names = grow(names, &cap, n + 1, sizeof *names);
        names[n] = malloc(strlen(path) + l + 2);
        snprintf(names[n], strlen(path) + l + 2, "%s/%s", path, e->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    for (size_t k = 0; k < n; k++) {
        if (load_file(names[k], t) != 0)
            fprintf(stderr, "bench_redact: cannot read %s\n", names[k]);
        free(names[k]);
    }
    free(names);
    return n > 0 ? 0 : -1;
}

/* CPU time of this thread: on a shared machine wall time also counts the time the thread
 * waited for a core, which says nothing about the redactor. */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int repeats = 15;
    struct text t = {0};
    int loaded = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-r") == 0 && a + 1 < argc) {
            repeats = (int)strtol(argv[++a], NULL, 10);
            if (repeats < 1 || repeats > 1000)
                repeats = 15;
            continue;
        }
        if (load_path(argv[a], &t) != 0) {
            fprintf(stderr, "bench_redact: nothing to read in %s\n", argv[a]);
            return 1;
        }
        loaded = 1;
    }
    if (!loaded && load_path(DEFAULT_DIR, &t) != 0) {
        fprintf(stderr, "bench_redact: nothing to read in %s\n", DEFAULT_DIR);
        return 1;
    }
    if (t.len == 0) {
        fprintf(stderr, "bench_redact: no message text found\n");
        return 1;
    }
    double mb = (double)t.len / 1e6;
    printf("input: %zu conversations, %zu messages, %.2f MB of text\n", t.nconv, t.nmsg, mb);

    char *copy = malloc(t.len);
    struct cg_redact_session *ses = malloc(sizeof *ses);
    struct cg_redact_buf out;
    struct cg_redact_counts counts;
    struct cg_err err;
    double *memcpy_s = calloc((size_t)repeats, sizeof(double));
    double *memchr_s = calloc((size_t)repeats, sizeof(double));
    double *msg_s = calloc((size_t)repeats, sizeof(double));
    double *whole_s = calloc((size_t)repeats, sizeof(double));
    if (!copy || !ses || !memcpy_s || !memchr_s || !msg_s || !whole_s)
        return 1;
    cg_redact_buf_init(&out, 4 * t.len + 4096);
    size_t lines = 0, out_bytes = 0;

    for (int r = 0; r < repeats; r++) {
        /* baseline 1: copy every byte */
        double t0 = now();
        for (size_t m = 0; m < t.nmsg; m++)
            memcpy(copy + t.starts[m], t.data + t.starts[m], t.starts[m + 1] - t.starts[m]);
        memcpy_s[r] = now() - t0;

        /* baseline 2: look at every byte (memchr for newlines, strlen-like) */
        t0 = now();
        lines = 0;
        for (size_t m = 0; m < t.nmsg; m++) {
            const char *p = t.data + t.starts[m], *end = t.data + t.starts[m + 1];
            while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
                lines++;
                p++;
            }
        }
        memchr_s[r] = now() - t0;

        /* redaction, message by message, one session per conversation */
        memset(&counts, 0, sizeof counts);
        out_bytes = 0;
        t0 = now();
        for (size_t c = 0; c < t.nconv; c++) {
            cg_redact_session_init(ses, 0x9e3779b97f4a7c15ULL, (uint64_t)c);
            size_t last = c + 1 < t.nconv ? t.conv_first[c + 1] : t.nmsg;
            for (size_t m = t.conv_first[c]; m < last; m++) {
                if (cg_redact(NULL, ses, t.data + t.starts[m], t.starts[m + 1] - t.starts[m], &out,
                              &counts, &err) != CG_OK) {
                    fprintf(stderr, "bench_redact: %s\n", err.msg);
                    return 1;
                }
                out_bytes += out.len;
            }
        }
        msg_s[r] = now() - t0;

        /* redaction of all the text in one call */
        cg_redact_session_init(ses, 1, 2);
        t0 = now();
        if (cg_redact(NULL, ses, t.data, t.len, &out, NULL, &err) != CG_OK) {
            fprintf(stderr, "bench_redact: %s\n", err.msg);
            return 1;
        }
        whole_s[r] = now() - t0;
    }
    double cp = median(memcpy_s, repeats), ch = median(memchr_s, repeats),
           rm = median(msg_s, repeats), rw = median(whole_s, repeats);
    printf("repeats: %d (medians of thread CPU time)\n", repeats);
    printf("%-34s %10.1f MB/s\n", "baseline memcpy", mb / cp);
    printf("%-34s %10.1f MB/s  (%zu lines)\n", "baseline memchr('\\n')", mb / ch, lines);
    printf("%-34s %10.1f MB/s  %.3fx memcpy  %.3fx memchr  (target >= 200 MB/s)\n",
           "redact, per message", mb / rm, cp / rm, ch / rm);
    printf("%-34s %10.1f MB/s  %.3fx memcpy  %.3fx memchr\n", "redact, all text in one call",
           mb / rw, cp / rw, ch / rw);
    printf("output: %zu bytes (%+.3f%% of input)\nredacted:", out_bytes,
           100.0 * ((double)out_bytes - (double)t.len) / (double)t.len);
    for (int k = 1; k < CG_PII_TYPE_COUNT; k++)
        printf(" %s=%lld", cg_pii_type_name((cg_pii_type)k), (long long)counts.by_type[k]);
    printf("\n");

    cg_redact_buf_cleanup(&out);
    free(copy);
    free(ses);
    free(memcpy_s);
    free(memchr_s);
    free(msg_s);
    free(whole_s);
    free(t.data);
    free(t.starts);
    free(t.conv_first);
    return 0;
}

/* bench_compress.c - Compress (no LLM) on every sample conversation and on a synthetic
 * 1,000-message / ~250k-token one, as the server runs it in-process: JSON read, exact o200k
 * counts (gpt-4o, as the peers count), the cascade with the extractive summarizer (no PII
 * redaction, which the server adds before it), validation. The target is the peers' in
 * bench/compress.sh: 37.5 % of the conversation's own count, capped at 48,000 (37.5 % of a
 * 128k window), given as policy.target_tokens with `force`.
 *
 *   bench_compress [--out ODIR] [DIR]
 *     DIR: OpenAI JSON conversations with `needles` (default: the ones generated at build time,
 *     <build>/testdata/conversations, by tests/support/gen_conversations.py); ODIR: where to
 *     write the synthetic input (synthetic-1000.json) and every output, as OpenAI JSON
 *     (out-NAME), for bench/compress.sh to race and score the peers.
 * Prints per conversation: messages, tokens before, tokens after / target, valid, planted
 * facts still in the output itself (artifacts and history not counted), p50 time of 5 runs,
 * and that time as a ratio to the baseline: one exact o200k count of all the conversation's
 * text (what any tool that fits a conversation by exact counts must do at least once). Then
 * the facts kept by where they were planted (user / assistant / tool) and the overall p50.
 * bench/compress.sh races the npm peers (bench/peers/compress_peers.mjs) on the same inputs
 * and scores every output alike; the last line here (`CTXGUARD ...`) is for it.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/tokdata.h"
#include "core/compress.h"
#include "core/conv_json.h"
#include "core/summary.h"
#include "core/tok.h"
#include "core/validate.h"

#define RUNS 5
#define WINDOW 128000
#define CAP 48000 /* 37.5 % of WINDOW */
#define MODEL "gpt-4o"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
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

struct outcome {
    int64_t before, after, target;
    bool valid, reached;
    struct cg_conv *conv;
};

/* cg_compress_summarize_cb: core's extractive summarizer. */
static cg_status extractive(void *ctx, const struct cg_conv *conv, size_t from, size_t to,
                            int64_t target, char **out, struct cg_err *err)
{
    (void)ctx;
    struct cg_summary_opts opts = {.target_tokens = target, .from = from, .to = to};
    struct cg_summary s;
    cg_status st = cg_summary_extract(conv, &opts, &s, err);
    if (st == CG_OK && (*out = strdup(s.text != NULL ? s.text : "")) == NULL)
        st = CG_NOMEM;
    cg_summary_cleanup(&s);
    return st;
}

/* The peers' target for a conversation: 37.5 % of its exact count, at most CAP. */
static int64_t target_of(const char *json, size_t len, const struct cg_tok_encoding *o200k)
{
    struct cg_err err = {0};
    struct cg_conv *conv = NULL;
    if (cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &conv, &err) != CG_OK)
        return CAP;
    struct cg_compress_count_state cs = {.enc = o200k, .profile = CG_PROFILE_OPENAI};
    struct cg_compress_counter counter;
    cg_compress_counter_init(&counter, &cs, conv);
    int64_t total = counter.fixed_tokens;
    for (size_t i = 0; i < conv->n_messages; i++)
        total += counter.count_message(counter.ctx, &conv->messages[i]);
    cg_conv_free(conv);
    return total * 3 / 8 < CAP ? total * 3 / 8 : CAP;
}

/* JSON read + cascade + validation, as the server does it. */
static int compress_once(const char *json, size_t len, int64_t target,
                         const struct cg_tok_encoding *o200k, struct outcome *o)
{
    struct cg_err err = {0};
    struct cg_conv *conv = NULL;
    if (cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &conv, &err) != CG_OK) {
        fprintf(stderr, "read: %s\n", err.msg);
        return -1;
    }
    struct cg_model_info model;
    cg_models_lookup(MODEL, &model);
    struct cg_compress_count_state cs = {.enc = o200k, .profile = model.profile};
    struct cg_compress_input in = {.conv = conv,
                                   .model = &model,
                                   .dialect = cg_validate_dialect(0, conv->origin, &model),
                                   .context_window = WINDOW,
                                   .force = true,
                                   .summarize = extractive};
    cg_compress_counter_init(&in.counter, &cs, conv);
    struct cg_compress_policy p;
    cg_compress_policy_defaults(&p, CG_STRATEGY_SUMMARIZING, NULL);
    p.reserved_output_tokens = 0;
    p.target_tokens = target;
    struct cg_compress_result r;
    cg_status st = cg_compress_run(&in, &p, &r, &err);
    if (st != CG_OK) {
        fprintf(stderr, "compress: %s\n", err.msg);
        cg_conv_free(conv);
        return -1;
    }
    struct cg_validate_input vin = {.conv = r.conv, .dialect = in.dialect};
    struct cg_validate_result vr;
    o->valid = cg_validate(&vin, &vr, &err) == CG_OK && vr.valid;
    cg_validate_result_free(&vr);
    o->before = r.tokens_before;
    o->after = r.tokens_after;
    o->target = r.target_tokens;
    o->reached = r.target_reached;
    o->conv = r.conv;
    r.conv = NULL;
    cg_compress_result_free(&r);
    cg_conv_free(conv);
    return 0;
}

/* Whether fact occurs in any text the model reads in conv. */
static bool has_fact(const struct cg_conv *conv, const char *fact)
{
    size_t fl = strlen(fact);
    for (size_t i = 0; i < conv->n_messages; i++) {
        const struct cg_message *m = &conv->messages[i];
        for (size_t k = 0; k < m->n_parts; k++) {
            const struct cg_part *p = &m->parts[k];
            const struct cg_str *s = p->kind == CG_PART_TEXT          ? &p->u.text
                                     : p->kind == CG_PART_TOOL_RESULT ? &p->u.tool_result.content
                                     : p->kind == CG_PART_TOOL_CALL   ? &p->u.tool_call.arguments
                                                                      : NULL;
            if (s == NULL || s->len < fl)
                continue;
            for (size_t at = 0; at + fl <= s->len; at++)
                if (s->ptr[at] == fact[0] && memcmp(s->ptr + at, fact, fl) == 0)
                    return true;
        }
    }
    return false;
}

/* One exact count of all text of the conversation's messages (the baseline). */
static double count_all_ms(const char *json, size_t len, const struct cg_tok_encoding *o200k)
{
    struct cg_conv *conv = NULL;
    if (cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &conv, NULL) != CG_OK)
        return 0;
    double t0 = now_ms();
    int64_t total = 0;
    for (size_t i = 0; i < conv->n_messages; i++)
        for (size_t k = 0; k < conv->messages[i].n_parts; k++) {
            const struct cg_part *p = &conv->messages[i].parts[k];
            if (p->kind == CG_PART_TEXT)
                total += cg_tok_count(o200k, p->u.text.ptr, p->u.text.len, false);
            else if (p->kind == CG_PART_TOOL_RESULT)
                total += cg_tok_count(o200k, p->u.tool_result.content.ptr,
                                      p->u.tool_result.content.len, false);
            else if (p->kind == CG_PART_TOOL_CALL)
                total += cg_tok_count(o200k, p->u.tool_call.arguments.ptr,
                                      p->u.tool_call.arguments.len, false);
        }
    double t = now_ms() - t0;
    cg_conv_free(conv);
    return total >= 0 ? t : 0;
}

static const char *const words[] = {"the",   "request", "handler", "returns", "an",    "error",
                                    "when",  "config",  "value",   "is",      "empty", "retry",
                                    "queue", "worker",  "port",    "8080",    "log",   "line"};

/* A synthetic session of 250 turns x 4 messages with ~1,000 tokens per turn. */
static char *synthetic(size_t *len)
{
    json_t *msgs = json_array();
    json_array_append_new(
        msgs, json_pack("{s:s,s:s}", "role", "system", "content", "You are a coding agent."));
    unsigned seed = 7;
    char *buf = malloc(8192);
    for (int t = 0; t < 250; t++) {
        snprintf(buf, 8192, "step %d: please look at module %d and fix the failing test", t, t);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", buf));
        char id[32];
        snprintf(id, sizeof id, "call_%d", t);
        json_array_append_new(
            msgs, json_pack("{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]}", "role", "assistant", "content",
                            "Reading the file.", "tool_calls", "id", id, "type", "function",
                            "function", "name", "read_file", "arguments", "{\"path\":\"m.c\"}"));
        size_t n = 0;
        for (int w = 0; w < 780 && n + 16 < 8192; w++) {
            seed = seed * 1103515245u + 12345u;
            n += (size_t)snprintf(buf + n, 8192 - n, "%s ", words[(seed >> 16) % 18]);
        }
        json_array_append_new(
            msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", id, "content", buf));
        snprintf(buf, 8192, "Module %d fixed: the handler now checks the value.", t);
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", buf));
    }
    free(buf);
    json_t *root = json_pack("{s:o}", "messages", msgs);
    char *out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    *len = strlen(out);
    return out;
}

struct row_totals {
    int planted[3], kept[3];
};

static int where_index(const char *w)
{
    return strcmp(w, "user") == 0 ? 0 : strcmp(w, "assistant") == 0 ? 1 : 2;
}

static const char *out_dir;

/* Writes text to out_dir/prefix+name when --out was given. */
static void write_out(const char *prefix, const char *name, const char *text, size_t len)
{
    if (out_dir == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s%s", out_dir, prefix, name);
    FILE *f = fopen(path, "w");
    if (f == NULL || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        fprintf(stderr, "bench_compress: cannot write %s\n", path);
}

static void run_one(const char *name, const char *json, size_t len, json_t *needles,
                    const struct cg_tok_encoding *o200k, double *all_p50, int *n_p50,
                    struct row_totals *tot, int *invalid, int *unreached)
{
    double times[RUNS];
    struct outcome o = {0};
    int64_t target = target_of(json, len, o200k);
    for (int i = 0; i < RUNS; i++) {
        if (o.conv != NULL)
            cg_conv_free(o.conv);
        double t0 = now_ms();
        if (compress_once(json, len, target, o200k, &o) != 0) {
            printf("%-14s failed\n", name);
            return;
        }
        times[i] = now_ms() - t0;
    }
    double p50 = median(times, RUNS);
    double base = count_all_ms(json, len, o200k);
    all_p50[(*n_p50)++] = p50;
    int planted = 0, kept = 0;
    size_t nn = needles != NULL ? json_array_size(needles) : 0;
    for (size_t i = 0; i < nn; i++) {
        json_t *n = json_array_get(needles, i);
        const char *fact = json_string_value(json_object_get(n, "fact"));
        const char *where = json_string_value(json_object_get(n, "where"));
        if (fact == NULL || where == NULL)
            continue;
        int w = where_index(where);
        bool k = has_fact(o.conv, fact);
        tot->planted[w]++;
        tot->kept[w] += k;
        planted++;
        kept += k;
    }
    if (out_dir != NULL) {
        char *text = NULL;
        size_t tlen = 0;
        if (cg_conv_json_write(o.conv, CG_CONV_JSON_OPENAI, &text, &tlen, NULL) == CG_OK)
            write_out("out-", name, text, tlen);
        free(text);
    }
    *invalid += !o.valid;
    *unreached += !o.reached;
    printf("%-14s %6zu %9lld %9lld / %-7lld %-5s %3d/%-3d %9.2f %8.1fx\n", name, o.conv->n_messages,
           (long long)o.before, (long long)o.after, (long long)o.target, o.valid ? "yes" : "NO",
           kept, planted, p50, base > 0 ? p50 / base : 0.0);
    cg_conv_free(o.conv);
}

int main(int argc, char **argv)
{
    const char *dir = CG_TESTDATA_CONVERSATIONS;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out_dir = argv[++i];
        else
            dir = argv[i];
    }
    struct cg_tokdata td;
    struct cg_err err = {0};
    struct cg_tok_encoding *o200k = NULL;
    if (cg_tokdata_load(NULL, "o200k_base", &td, &err) != CG_OK ||
        cg_tok_encoding_new(td.data, td.len, &o200k, &err) != CG_OK) {
        fprintf(stderr, "bench_compress: %s\n", err.msg);
        return 1;
    }
    cg_tokdata_cleanup(&td);
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/conv-*.json", dir);
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) {
        fprintf(stderr, "bench_compress: no conversations in %s\n", dir);
        return 1;
    }
    printf("Compress (no LLM, extractive summaries), SUMMARIZING, exact o200k (%s), target 37.5%% "
           "of each conversation capped at %d, reserved 0\n",
           MODEL, CAP);
    printf("%-14s %6s %9s %19s %-5s %7s %9s %9s\n", "conversation", "msgs", "before",
           "after / target", "valid", "facts", "p50 ms", "/count");
    double all[512];
    int n_all = 0, invalid = 0, unreached = 0;
    struct row_totals tot = {0};
    for (size_t i = 0; i < g.gl_pathc && i < 500; i++) {
        json_error_t jerr;
        json_t *d = json_load_file(g.gl_pathv[i], 0, &jerr);
        if (d == NULL)
            continue;
        json_t *body = json_pack("{s:O}", "messages", json_object_get(d, "messages"));
        if (json_object_get(d, "tools") != NULL)
            json_object_set(body, "tools", json_object_get(d, "tools"));
        char *json = json_dumps(body, JSON_COMPACT);
        const char *name = strrchr(g.gl_pathv[i], '/') + 1;
        run_one(name, json, strlen(json), json_object_get(d, "needles"), o200k, all, &n_all, &tot,
                &invalid, &unreached);
        free(json);
        json_decref(body);
        json_decref(d);
    }
    globfree(&g);
    double samples_p50 = median(all, n_all);
    size_t slen;
    char *syn = synthetic(&slen);
    write_out("", "synthetic-1000.json", syn, slen);
    double syn_times[1];
    int n_syn = 0;
    run_one("synthetic-1000", syn, slen, NULL, o200k, syn_times, &n_syn, &tot, &invalid,
            &unreached);
    free(syn);
    printf("\nfacts kept in the output itself, by where planted:\n");
    const char *names[3] = {"user", "assistant", "tool"};
    int kp = 0, pl = 0;
    for (int w = 0; w < 3; w++) {
        printf("  %-10s %3d/%-3d %5.1f%%\n", names[w], tot.kept[w], tot.planted[w],
               tot.planted[w] ? 100.0 * tot.kept[w] / tot.planted[w] : 0.0);
        kp += tot.kept[w];
        pl += tot.planted[w];
    }
    printf("  %-10s %3d/%-3d %5.1f%%\n", "all", kp, pl, pl ? 100.0 * kp / pl : 0.0);
    printf("\ntool       p50 ms (samples)  p50 ms (synthetic)  invalid outputs  target missed\n");
    printf("ctxguard   %14.2f  %18.2f  %15d  %13d\n", samples_p50, n_syn ? syn_times[0] : 0.0,
           invalid, unreached);
    printf("CTXGUARD %.3f %.3f %d %d\n", samples_p50, n_syn ? syn_times[0] : 0.0, invalid,
           unreached);
    cg_tok_encoding_free(o200k);
    return 0;
}

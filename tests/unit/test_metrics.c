/* test_metrics.c - the metrics registry (base/metrics.h): sharded counts under threads,
 * histograms, escaping, the cardinality cap, registration rules, replaced families (whole sets
 * swapped under renders), and an exposition that a strict reader of the text format 0.0.4
 * accepts. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/metrics.h"

static char *render(struct cg_metrics *m)
{
    char *text = NULL;
    size_t len = 0;
    struct cg_err err;
    cg_err_clear(&err);
    cr_assert_eq(cg_metrics_render(m, &text, &len, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(strlen(text), len);
    return text;
}

static void assert_has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return;
    cr_assert_fail("line not found: %s\nin:\n%s", line, text);
}

/* ---------------------------------------------------------------- threads --------- */

#define THREADS 8
#define ROUNDS 200000

struct worker_arg {
    struct cg_metrics *m;
    struct cg_metric *counter;
    struct cg_metric *hist;
};

static void *count_main(void *p)
{
    struct worker_arg *a = p;
    uint32_t slot = cg_metrics_slot_claim(a->m);
    for (int i = 0; i < ROUNDS; i++) {
        cg_metric_inc(a->counter, slot);
        cg_metric_observe(a->hist, slot, (i % 4) * 0.5); /* 0, .5, 1, 1.5 */
    }
    return NULL;
}

Test(metrics, sharded_counts_sum_right_under_threads, .timeout = 60)
{
    /* 3 slots for 8 threads: 3 count in their own slot, 5 share the shared one. */
    struct cg_metrics *m = cg_metrics_new(3);
    struct cg_metric_family *c =
        cg_metrics_counter_family(m, "t_total", "t", CG_LABELS("k"), 0, NULL);
    struct cg_metric_family *h = cg_metrics_histogram_family(m, "t_seconds", "t", CG_NO_LABELS,
                                                             (const double[]){1}, 1, 0, NULL);
    struct worker_arg arg = {m, cg_metric_get(c, CG_LABELS("a")), cg_metric_get(h, CG_NO_LABELS)};
    cr_assert_not_null(arg.counter);
    cr_assert_not_null(arg.hist);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, count_main, &arg), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(cg_metric_value(arg.counter), (double)THREADS * ROUNDS);
    cr_assert_eq(cg_metric_value(arg.hist), (double)THREADS * ROUNDS);
    char *text = render(m);
    assert_has_line(text, "t_total{k=\"a\"} 1600000");
    assert_has_line(text, "t_seconds_bucket{le=\"1\"} 1200000"); /* 0, .5 and 1 */
    assert_has_line(text, "t_seconds_bucket{le=\"+Inf\"} 1600000");
    assert_has_line(text, "t_seconds_sum 1200000"); /* 400000 * (0 + .5 + 1 + 1.5) */
    assert_has_line(text, "t_seconds_count 1600000");
    free(text);
    cg_metrics_free(m);
}

Test(metrics, slots_are_claimed_once_then_shared, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(2);
    cr_assert_eq(cg_metrics_slot_claim(m), 0);
    cr_assert_eq(cg_metrics_slot_claim(m), 1);
    cr_assert_eq(cg_metrics_slot_claim(m), CG_METRICS_SHARED_SLOT);
    cr_assert_eq(cg_metrics_slot_claim(NULL), CG_METRICS_SHARED_SLOT);
    /* A slot number past the registry's is the shared slot, not memory past the end. */
    struct cg_metric *x = cg_metric_get(
        cg_metrics_counter_family(m, "x_total", "x", CG_NO_LABELS, 0, NULL), CG_NO_LABELS);
    cg_metric_add(x, 7, 5);
    cg_metric_add(x, 1, 2);
    cr_assert_eq(cg_metric_value(x), 7);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- histogram ------- */

Test(metrics, histogram_buckets_are_cumulative_with_inf_sum_and_count, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f = cg_metrics_histogram_family(
        m, "grpc_server_handling_seconds", "Handling time.", CG_LABELS("grpc_method"),
        CG_METRICS_GRPC_BUCKETS, CG_METRICS_GRPC_NBUCKETS, 0, NULL);
    struct cg_metric *h = cg_metric_get(f, CG_LABELS("Check"));
    double values[] = {0.001, 0.005, 0.007, 3, 20, NAN};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++)
        cg_metric_observe(h, 0, values[i]);
    char *text = render(m);
    const char *want[] = {
        "# TYPE grpc_server_handling_seconds histogram",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"0.005\"} 2",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"0.01\"} 3",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"0.025\"} 3",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"2.5\"} 3",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"5\"} 4",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"10\"} 4",
        "grpc_server_handling_seconds_bucket{grpc_method=\"Check\",le=\"+Inf\"} 5",
        "grpc_server_handling_seconds_count{grpc_method=\"Check\"} 5",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        assert_has_line(text, want[i]);
    /* The sum, to the precision of doubles (0.001 + 0.005 + ... has no exact form). */
    const char *sum_line = strstr(text, "grpc_server_handling_seconds_sum{grpc_method=\"Check\"} ");
    cr_assert_not_null(sum_line);
    double sum = strtod(strchr(sum_line, '}') + 2, NULL);
    cr_assert_float_eq(sum, 23.013, 1e-9);
    /* The buckets come in rising order, +Inf last. */
    cr_assert_lt(strstr(text, "le=\"0.005\""), strstr(text, "le=\"10\""));
    cr_assert_lt(strstr(text, "le=\"10\""), strstr(text, "le=\"+Inf\""));
    free(text);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- escaping -------- */

Test(metrics, label_values_and_help_are_escaped, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f = cg_metrics_counter_family(
        m, "esc_total", "Help with \\ and \"quotes\"\nand a second line.", CG_LABELS("v"), 0, NULL);
    cg_metric_inc(cg_metric_get(f, CG_LABELS("a\\b\"c\nd")), 0);
    char *text = render(m);
    /* In HELP only backslash and newline are escaped; in label values the quote too. */
    assert_has_line(text, "# HELP esc_total Help with \\\\ and \"quotes\"\\nand a second line.");
    assert_has_line(text, "esc_total{v=\"a\\\\b\\\"c\\nd\"} 1");
    free(text);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- cardinality ----- */

Test(metrics, a_family_refuses_label_sets_past_its_cap_and_counts_them, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f =
        cg_metrics_counter_family(m, "capped_total", "c", CG_LABELS("tenant"), 3, NULL);
    struct cg_metric *a = cg_metric_get(f, CG_LABELS("a"));
    cr_assert_not_null(a);
    cr_assert_not_null(cg_metric_get(f, CG_LABELS("b")));
    cr_assert_not_null(cg_metric_get(f, CG_LABELS("c")));
    cr_assert_null(cg_metric_get(f, CG_LABELS("d")), "the fourth label set is over the cap");
    cr_assert_null(cg_metric_get(f, CG_LABELS("e")));
    cr_assert_eq(cg_metric_get(f, CG_LABELS("a")), a, "a known label set still resolves");
    cg_metric_inc(NULL, 0); /* a refused handle counts nothing, harmlessly */
    cg_metric_observe(NULL, 0, 1);
    cg_metric_set(NULL, 1);
    /* Wrong count of values, and a value too long, are refusals too. */
    cr_assert_null(cg_metric_get(f, CG_LABELS("a", "b")));
    char long_value[CG_METRICS_MAX_VALUE_BYTES + 2];
    memset(long_value, 'x', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    cr_assert_null(cg_metric_get(f, CG_LABELS(long_value)));
    cr_assert_eq(cg_metric_family_refused(f), 4);
    char *text = render(m);
    assert_has_line(text, "ctxguard_metrics_series_refused_total{family=\"capped_total\"} 4");
    cr_assert_null(strstr(text, "tenant=\"d\""));
    free(text);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- registration ---- */

Test(metrics, registering_twice_gives_the_same_family_unless_it_differs, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_metric_family *a =
        cg_metrics_counter_family(m, "r_total", "r", CG_LABELS("x"), 0, &err);
    cr_assert_not_null(a);
    cr_assert_eq(cg_metrics_counter_family(m, "r_total", "r", CG_LABELS("x"), 0, &err), a);
    cr_assert_null(cg_metrics_counter_family(m, "r_total", "r", CG_LABELS("y"), 0, &err));
    cr_assert_eq(err.code, CG_ALREADY_EXISTS);
    cr_assert_null(cg_metrics_gauge_family(m, "r_total", "r", CG_LABELS("x"), 0, &err));
    const char *bad_names[] = {"", "1abc", "a-b", "a b"};
    for (size_t i = 0; i < sizeof bad_names / sizeof *bad_names; i++) {
        cr_assert_null(cg_metrics_counter_family(m, bad_names[i], "h", CG_NO_LABELS, 0, &err));
        cr_assert_eq(err.code, CG_INVALID_ARGUMENT, "%s", bad_names[i]);
    }
    cr_assert_null(cg_metrics_counter_family(m, "ok_total", "h", CG_LABELS("__x"), 0, &err));
    cr_assert_null(cg_metrics_counter_family(m, "ok_total", "h", CG_LABELS("a", "a"), 0, &err));
    cr_assert_null(cg_metrics_histogram_family(m, "h_seconds", "h", CG_LABELS("le"),
                                               (const double[]){1}, 1, 0, &err));
    cr_assert_null(cg_metrics_histogram_family(m, "h_seconds", "h", CG_NO_LABELS,
                                               (const double[]){2, 1}, 2, 0, &err));
    cg_metrics_free(m);
}

static double read_answer(void *ctx)
{
    return *(const double *)ctx;
}

Test(metrics, callbacks_and_gauges_are_read_at_scrape_time, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    double answer = 42.5, nothing = NAN;
    cr_assert_eq(cg_metrics_callback(m, "cb_seconds_total", "cb", CG_METRIC_COUNTER, read_answer,
                                     &answer, NULL),
                 CG_OK);
    cr_assert_eq(
        cg_metrics_callback(m, "cb_missing", "cb", CG_METRIC_GAUGE, read_answer, &nothing, NULL),
        CG_OK);
    struct cg_metric *g =
        cg_metric_get(cg_metrics_gauge_family(m, "build_info", "b", CG_LABELS("version"), 0, NULL),
                      CG_LABELS("1.2.3"));
    cg_metric_set(g, 1);
    struct cg_metric *q = cg_metric_get(
        cg_metrics_gauge_family(m, "queue_depth", "q", CG_NO_LABELS, 0, NULL), CG_NO_LABELS);
    cg_metric_gauge_add(q, 3);
    cg_metric_gauge_add(q, -1);
    answer = 43.25; /* read when scraped, not when registered */
    char *text = render(m);
    assert_has_line(text, "# TYPE cb_seconds_total counter");
    assert_has_line(text, "cb_seconds_total 43.25");
    cr_assert_null(strstr(text, "cb_missing"), "a NaN callback prints nothing");
    assert_has_line(text, "build_info{version=\"1.2.3\"} 1");
    assert_has_line(text, "queue_depth 2");
    free(text);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- parsing --------- */

/* A strict reader of one sample line: name, optional {l="v",...} with escapes, a space, a
 * number. Returns the metric name's length, 0 when the line is not valid. */
static size_t parse_sample(const char *line, double *value)
{
    const char *p = line;
    while (*p && (strchr("_:", *p) || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                  (p > line && *p >= '0' && *p <= '9')))
        p++;
    size_t name_len = (size_t)(p - line);
    if (name_len == 0)
        return 0;
    if (*p == '{') {
        p++;
        while (*p != '}') {
            const char *l = p;
            while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' ||
                   (p > l && *p >= '0' && *p <= '9'))
                p++;
            if (p == l || p[0] != '=' || p[1] != '"')
                return 0;
            for (p += 2; *p != '"'; p++) {
                if (*p == '\0' || *p == '\n')
                    return 0;
                if (*p == '\\') {
                    p++;
                    if (*p != '\\' && *p != '"' && *p != 'n')
                        return 0;
                }
            }
            p++;
            if (*p == ',')
                p++;
            else if (*p != '}')
                return 0;
        }
        p++;
    }
    if (*p++ != ' ')
        return 0;
    char *end;
    if (strcmp(p, "+Inf") == 0 || strcmp(p, "-Inf") == 0 || strcmp(p, "NaN") == 0) {
        *value = strtod(p, NULL);
        return name_len;
    }
    *value = strtod(p, &end);
    return end != p && *end == '\0' ? name_len : 0;
}

Test(metrics, the_exposition_parses_as_text_format_0_0_4, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(2);
    struct cg_metric_family *started =
        cg_metrics_counter_family(m, "grpc_server_started_total", "RPCs started.",
                                  CG_LABELS("grpc_type", "grpc_service", "grpc_method"), 0, NULL);
    struct cg_metric_family *seconds =
        cg_metrics_histogram_family(m, "grpc_server_handling_seconds", "Handling time.",
                                    CG_LABELS("grpc_type", "grpc_service", "grpc_method"),
                                    CG_METRICS_GRPC_BUCKETS, CG_METRICS_GRPC_NBUCKETS, 0, NULL);
    struct cg_metric_family *odd =
        cg_metrics_counter_family(m, "odd_total", "odd \\ help\n", CG_LABELS("v"), 1, NULL);
    cg_metric_add(
        cg_metric_get(started, CG_LABELS("unary", "ctxguard.v1.BudgetService", "CheckBudget")), 0,
        3);
    cg_metric_observe(
        cg_metric_get(seconds, CG_LABELS("unary", "ctxguard.v1.BudgetService", "CheckBudget")), 1,
        0.02);
    cg_metric_inc(cg_metric_get(odd, CG_LABELS("\"}\n\\")), 0);
    cg_metric_get(odd, CG_LABELS("refused"));
    char *text = render(m);

    char family[256] = "";
    char type[32] = "";
    int samples = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0) {
            cr_assert(sscanf(line, "# HELP %255s", family) == 1);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char name[256];
            cr_assert(sscanf(line, "# TYPE %255s %31s", name, type) == 2, "%s", line);
            cr_assert_str_eq(name, family, "TYPE follows its HELP");
            cr_assert(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                      strcmp(type, "histogram") == 0);
            continue;
        }
        cr_assert_neq(line[0], '#', "no other comments: %s", line);
        double v;
        size_t n = parse_sample(line, &v);
        cr_assert_gt(n, 0, "not a sample line: %s", line);
        size_t fl = strlen(family);
        bool same = n == fl && strncmp(line, family, fl) == 0;
        bool suffixed =
            strcmp(type, "histogram") == 0 && strncmp(line, family, fl) == 0 &&
            (strncmp(line + fl, "_bucket", n - fl) == 0 ||
             strncmp(line + fl, "_sum", n - fl) == 0 || strncmp(line + fl, "_count", n - fl) == 0);
        cr_assert(same || suffixed, "sample %s outside its family %s", line, family);
        samples++;
    }
    /* 1 started + 12 buckets, sum, count + 1 odd + 1 refusal. */
    cr_assert_eq(samples, 1 + 14 + 1 + 1);
    free(text);
    cg_metrics_free(m);
}

/* ---------------------------------------------------------------- replaced families */

/* Whether text has a line starting with prefix. */
static bool has_line_starting(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; (p = strstr(p, prefix)) != NULL; p += n)
        if (p == text || p[-1] == '\n')
            return true;
    return false;
}

static cg_status replace(struct cg_metric_family *f, const struct cg_metric_sample *s, size_t n)
{
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = cg_metric_family_replace(f, s, n, &err);
    cr_assert(st == CG_OK || err.code == st, "err filled: %s", err.msg);
    return st;
}

Test(metrics, a_replaced_family_shows_exactly_its_last_set, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f = cg_metrics_gauge_set_family(
        m, "top_ratio", "Top ratios.", CG_LABELS("tenant_id", "level"), 10, NULL);
    cr_assert_not_null(f);
    char *text = render(m);
    cr_assert(!has_line_starting(text, "# HELP top_ratio"), "empty before the first set");
    free(text);

    struct cg_metric_sample first[] = {
        {{"t1", "tenant"}, 0.5},
        {{"t2", "session"}, 0.25},
        {{"t3", "tenant"}, 1.5},
    };
    cr_assert_eq(replace(f, first, 3), CG_OK);
    text = render(m);
    assert_has_line(text, "# TYPE top_ratio gauge");
    assert_has_line(text, "top_ratio{tenant_id=\"t1\",level=\"tenant\"} 0.5");
    assert_has_line(text, "top_ratio{tenant_id=\"t2\",level=\"session\"} 0.25");
    assert_has_line(text, "top_ratio{tenant_id=\"t3\",level=\"tenant\"} 1.5");
    /* In the order given. */
    cr_assert_lt(strstr(text, "\"t1\""), strstr(text, "\"t2\""));
    cr_assert_lt(strstr(text, "\"t2\""), strstr(text, "\"t3\""));
    free(text);

    /* t1 and t3 fall out, t2 moves, t4 comes in. */
    struct cg_metric_sample second[] = {
        {{"t4", "session"}, 0.75},
        {{"t2", "session"}, 0.3},
    };
    cr_assert_eq(replace(f, second, 2), CG_OK);
    text = render(m);
    assert_has_line(text, "top_ratio{tenant_id=\"t4\",level=\"session\"} 0.75");
    assert_has_line(text, "top_ratio{tenant_id=\"t2\",level=\"session\"} 0.3");
    cr_assert_null(strstr(text, "\"t1\""), "%s", text);
    cr_assert_null(strstr(text, "\"t3\""), "%s", text);
    cr_assert_null(strstr(text, "0.25"), "t2's old value is gone");
    free(text);

    /* An empty set empties the family: not even its HELP and TYPE are left. */
    cr_assert_eq(replace(f, NULL, 0), CG_OK);
    text = render(m);
    cr_assert(!has_line_starting(text, "# HELP top_ratio"), "%s", text);
    cr_assert(!has_line_starting(text, "top_ratio"), "%s", text);
    free(text);
    cr_assert_eq(cg_metric_family_refused(f), 0);
    cg_metrics_free(m);
}

Test(metrics, a_replacement_leaves_out_bad_repeated_and_capped_samples, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f =
        cg_metrics_gauge_set_family(m, "capped_ratio", "c", CG_LABELS("k", "l"), 3, NULL);
    char long_value[CG_METRICS_MAX_VALUE_BYTES + 2];
    memset(long_value, 'x', sizeof long_value - 1);
    long_value[sizeof long_value - 1] = '\0';
    struct cg_metric_sample s[] = {
        {{"a", "1"}, 1},        {{"b", NULL}, 2},      /* a value missing */
        {{long_value, "1"}, 3},                        /* a value too long */
        {{"a", "1"}, 4},                               /* the label set of the first again */
        {{"a", "2"}, 5},        {{"c", "\"q\"\n"}, 6}, /* escaped on output */
        {{"d", "1"}, 7},                               /* past the cap of 3 */
        {{"e", "1"}, 8},                               /* past the cap of 3 */
    };
    cr_assert_eq(replace(f, s, sizeof s / sizeof *s), CG_OK);
    cr_assert_eq(cg_metric_family_refused(f), 5);
    char *text = render(m);
    assert_has_line(text, "capped_ratio{k=\"a\",l=\"1\"} 1");
    assert_has_line(text, "capped_ratio{k=\"a\",l=\"2\"} 5");
    assert_has_line(text, "capped_ratio{k=\"c\",l=\"\\\"q\\\"\\n\"} 6");
    cr_assert_null(strstr(text, "k=\"b\""));
    cr_assert_null(strstr(text, "k=\"d\""));
    cr_assert_null(strstr(text, "capped_ratio{k=\"a\",l=\"1\"} 4"));
    assert_has_line(text, "ctxguard_metrics_series_refused_total{family=\"capped_ratio\"} 5");
    free(text);
    cg_metrics_free(m);
}

Test(metrics, a_replaced_family_has_no_handles_and_keeps_its_kind, .timeout = 10)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_metric_family *f =
        cg_metrics_gauge_set_family(m, "set_ratio", "s", CG_LABELS("k"), 0, &err);
    cr_assert_not_null(f, "%s", err.msg);
    /* Registering it again the same way finds it; as a gauge with handles, it clashes. */
    cr_assert_eq(cg_metrics_gauge_set_family(m, "set_ratio", "s", CG_LABELS("k"), 0, NULL), f);
    cr_assert_null(cg_metrics_gauge_family(m, "set_ratio", "s", CG_LABELS("k"), 0, &err));
    cr_assert_eq(err.code, CG_ALREADY_EXISTS);
    struct cg_metric_family *g = cg_metrics_gauge_family(m, "plain", "p", CG_LABELS("k"), 0, NULL);
    cr_assert_null(cg_metrics_gauge_set_family(m, "plain", "p", CG_LABELS("k"), 0, &err));
    cr_assert_eq(err.code, CG_ALREADY_EXISTS);
    /* No handles on it; no replacing a family with handles. */
    cr_assert_null(cg_metric_get(f, CG_LABELS("a")));
    cr_assert_eq(cg_metric_family_refused(f), 1);
    struct cg_metric_sample one = {{"a"}, 1};
    cg_err_clear(&err);
    cr_assert_eq(cg_metric_family_replace(g, &one, 1, &err), CG_INVALID_ARGUMENT);
    cr_assert_eq(err.code, CG_INVALID_ARGUMENT);
    cr_assert_eq(cg_metric_family_replace(NULL, &one, 1, NULL), CG_INVALID_ARGUMENT);
    /* Bad names are refused as for every family. */
    cr_assert_null(cg_metrics_gauge_set_family(m, "bad name", "b", CG_NO_LABELS, 0, &err));
    cr_assert_eq(err.code, CG_INVALID_ARGUMENT);
    cg_metrics_free(m);
}

#define SET_ROUNDS 2000

struct replace_arg {
    struct cg_metric_family *f;
    _Atomic bool stop;
    _Atomic int replaced; /* replacements done */
};

/* Replaces the family's set with set A (3 samples of value 1) and set B (5 of value 2) in
 * turn. */
static void *replace_main(void *p)
{
    struct replace_arg *a = p;
    struct cg_metric_sample set_a[] = {{{"a0"}, 1}, {{"a1"}, 1}, {{"a2"}, 1}};
    struct cg_metric_sample set_b[] = {
        {{"b0"}, 2}, {{"b1"}, 2}, {{"b2"}, 2}, {{"b3"}, 2}, {{"b4"}, 2}};
    for (int i = 0; !atomic_load(&a->stop); i++) {
        cg_status st = i % 2 ? cg_metric_family_replace(a->f, set_a, 3, NULL)
                             : cg_metric_family_replace(a->f, set_b, 5, NULL);
        if (st != CG_OK)
            return (void *)1;
        atomic_fetch_add(&a->replaced, 1);
    }
    return NULL;
}

Test(metrics, a_render_shows_one_whole_set_while_it_is_replaced, .timeout = 60)
{
    struct cg_metrics *m = cg_metrics_new(1);
    struct cg_metric_family *f =
        cg_metrics_gauge_set_family(m, "swapped", "s", CG_LABELS("k"), 10, NULL);
    struct cg_metric_sample first[] = {{{"a0"}, 1}, {{"a1"}, 1}, {{"a2"}, 1}};
    cr_assert_eq(replace(f, first, 3), CG_OK); /* never empty from here on */
    struct replace_arg arg = {.f = f};
    atomic_init(&arg.stop, false);
    atomic_init(&arg.replaced, 0);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, replace_main, &arg), 0);
    int seen_a = 0, seen_b = 0;
    /* Renders until the sets were swapped many times under them and each set was seen (on a
     * busy machine a stretch of renders may all fall on one set; the timeout bounds it). */
    for (int round = 0; round < SET_ROUNDS || atomic_load(&arg.replaced) < SET_ROUNDS ||
                        seen_a == 0 || seen_b == 0;
         round++) {
        char *text = render(m);
        int ones = 0, twos = 0;
        for (const char *p = text; (p = strstr(p, "swapped{k=")) != NULL; p++) {
            const char *sp = strchr(p, ' ');
            cr_assert_not_null(sp);
            double v = strtod(sp + 1, NULL);
            ones += v == 1;
            twos += v == 2;
        }
        cr_assert((ones == 3 && twos == 0) || (ones == 0 && twos == 5),
                  "a mixed or partial set: %d ones, %d twos\n%s", ones, twos, text);
        seen_a += ones == 3;
        seen_b += twos == 5;
        free(text);
    }
    atomic_store(&arg.stop, true);
    void *rc;
    pthread_join(t, &rc);
    cr_assert_null(rc, "a replacement failed");
    cr_assert_gt(seen_a, 0, "set A rendered");
    cr_assert_gt(atomic_load(&arg.replaced), SET_ROUNDS - 1);
    cg_metrics_free(m);
}

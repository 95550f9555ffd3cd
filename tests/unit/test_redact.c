/* test_redact.c - PII redaction: the corpus of positives and look-alike negatives
 * (tests/data/redact/), session-stable pseudonyms, per-type switches, hostile bytes, caps. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"

#define OPEN_MARK "\xc2\xab"  /* « */
#define CLOSE_MARK "\xc2\xbb" /* » */

/* The repository root, from this file's path (tests/unit/test_redact.c). */
static void source_path(char *out, size_t cap, const char *rel)
{
    const char *file = __FILE__;
    const char *cut = strstr(file, "tests/unit/test_redact.c");
    cr_assert_not_null(cut, "__FILE__ is %s", file);
    snprintf(out, cap, "%.*s%s", (int)(cut - file), file, rel);
}

static char *slurp(const char *rel)
{
    char path[4096];
    source_path(path, sizeof path, rel);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[8192];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + got + 1 > cap) {
            cap = (len + got + 1) * 2;
            text = realloc(text, cap);
            cr_assert_not_null(text);
        }
        memcpy(text + len, chunk, got);
        len += got;
    }
    fclose(f);
    cr_assert_not_null(text, "%s is empty", path);
    text[len] = '\0';
    return text;
}

static struct cg_redact_session *session_new(void)
{
    struct cg_redact_session *s = malloc(sizeof *s);
    cr_assert_not_null(s);
    cg_redact_session_init(s, 0x0123456789abcdefULL, 0xfedcba9876543210ULL);
    return s;
}

/* Redacts text with a fresh session and the given options; returns a malloc'd copy. */
static char *redact_text(const struct cg_redact_options *opt, struct cg_redact_session *ses,
                         const char *text, struct cg_redact_counts *counts)
{
    struct cg_redact_buf out;
    struct cg_err err;
    cg_redact_buf_init(&out, 1 << 20);
    cr_assert_eq(cg_redact(opt, ses, text, strlen(text), &out, counts, &err), CG_OK, "%s", err.msg);
    char *copy = strdup(out.data);
    cg_redact_buf_cleanup(&out);
    return copy;
}

static int64_t total(const struct cg_redact_counts *c)
{
    int64_t sum = 0;
    for (int t = 0; t < CG_PII_TYPE_COUNT; t++)
        sum += c->by_type[t];
    return sum;
}

static const char *const contexts[] = {
    "%s",
    "Contact: %s, thanks.",
    "(%s)",
    "line one\n%s\nline three",
};

static cg_pii_type type_by_name(const char *name)
{
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++)
        if (strcmp(cg_pii_type_name((cg_pii_type)t), name) == 0)
            return (cg_pii_type)t;
    cr_assert_fail("unknown type %s in the corpus", name);
    return CG_PII_UNSPECIFIED;
}

Test(redact, every_positive_is_redacted_with_its_label, .timeout = 30)
{
    char *corpus = slurp("tests/data/redact/positives.txt");
    struct cg_redact_session *ses = session_new();
    int lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(corpus, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || line[0] == '\0')
            continue;
        char *tab = strchr(line, '\t');
        cr_assert_not_null(tab, "no TAB in '%s'", line);
        *tab = '\0';
        cg_pii_type type = type_by_name(line);
        char *text = tab + 1;
        /* input: the text without marks; expected: the marked part (or all) as a label */
        char input[1024], expected[1024], tag[40];
        snprintf(tag, sizeof tag, "<%s_1>", cg_pii_type_name(type));
        char *open = strstr(text, OPEN_MARK), *close = open ? strstr(open, CLOSE_MARK) : NULL;
        if (open != NULL) {
            cr_assert_not_null(close, "unbalanced marks in '%s'", text);
            snprintf(input, sizeof input, "%.*s%.*s%s", (int)(open - text), text,
                     (int)(close - open - 2), open + 2, close + 2);
            snprintf(expected, sizeof expected, "%.*s%s%s", (int)(open - text), text, tag,
                     close + 2);
        } else {
            snprintf(input, sizeof input, "%s", text);
            snprintf(expected, sizeof expected, "%s", tag);
        }
        for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
            char in_ctx[2048], want_ctx[2048];
            snprintf(in_ctx, sizeof in_ctx, contexts[c], input);
            snprintf(want_ctx, sizeof want_ctx, contexts[c], expected);
            struct cg_redact_counts counts = {0};
            cg_redact_session_init(ses, 1, 2);
            char *got = redact_text(NULL, ses, in_ctx, &counts);
            cr_expect_str_eq(got, want_ctx, "type %s, input [%s]", cg_pii_type_name(type), in_ctx);
            cr_expect_eq(counts.by_type[type], 1, "[%s]: %lld of %s", in_ctx,
                         (long long)counts.by_type[type], cg_pii_type_name(type));
            cr_expect_eq(total(&counts), 1, "[%s]: %lld values in all", in_ctx,
                         (long long)total(&counts));
            free(got);
        }
        lines++;
    }
    cr_assert_geq(lines, 80, "the corpus holds %d positives", lines);
    free(ses);
    free(corpus);
}

Test(redact, no_negative_is_touched, .timeout = 30)
{
    char *corpus = slurp("tests/data/redact/negatives.txt");
    struct cg_redact_session *ses = session_new();
    int lines = 0;
    char *save = NULL;
    for (char *line = strtok_r(corpus, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#' || line[0] == '\0')
            continue;
        for (size_t c = 0; c < sizeof contexts / sizeof contexts[0]; c++) {
            char in_ctx[2048];
            snprintf(in_ctx, sizeof in_ctx, contexts[c], line);
            struct cg_redact_counts counts = {0};
            char *got = redact_text(NULL, ses, in_ctx, &counts);
            cr_expect_str_eq(got, in_ctx, "a look-alike was changed");
            cr_expect_eq(total(&counts), 0, "[%s] counted %lld values", in_ctx,
                         (long long)total(&counts));
            free(got);
        }
        lines++;
    }
    cr_assert_geq(lines, 80, "the corpus holds %d negatives", lines);
    free(ses);
    free(corpus);
}

Test(redact, same_value_same_label_within_a_session, .timeout = 10)
{
    struct cg_redact_session *ses = session_new();
    struct cg_redact_counts counts = {0};
    char *got = redact_text(NULL, ses,
                            "a@example.com wrote to b@example.com; A@Example.COM again; "
                            "call +1 415 555 0100 or +1-415-555-0100, not +1 415 555 0199",
                            &counts);
    cr_assert_str_eq(got, "<EMAIL_1> wrote to <EMAIL_2>; <EMAIL_1> again; "
                          "call <PHONE_1> or <PHONE_1>, not <PHONE_2>");
    cr_assert_eq(counts.by_type[CG_PII_EMAIL], 3, "occurrences, not distinct values");
    cr_assert_eq(counts.by_type[CG_PII_PHONE], 3);
    free(got);
    /* the next message of the same session continues the numbering */
    got = redact_text(NULL, ses, "b@example.com and c@example.com from 10.0.0.1", &counts);
    cr_assert_str_eq(got, "<EMAIL_2> and <EMAIL_3> from <IPV4_1>");
    cr_assert_eq(counts.by_type[CG_PII_EMAIL], 5, "counts are added to");
    free(got);
    /* another session starts again at 1 */
    struct cg_redact_session *other = session_new();
    got = redact_text(NULL, other, "c@example.com", NULL);
    cr_assert_str_eq(got, "<EMAIL_1>");
    free(got);
    free(other);
    free(ses);
}

Test(redact, a_disabled_type_is_left_and_the_others_still_work, .timeout = 10)
{
    const char *text = "mail a@example.com from 10.0.0.1, password=hunter2, key "
                       "AKIAIOSFODNN7EXAMPLE, card 4111 1111 1111 1111";
    struct cg_redact_options opt;
    cg_redact_options_init(&opt);
    opt.enabled &= ~(CG_PII_BIT(CG_PII_EMAIL) | CG_PII_BIT(CG_PII_CARD_NUMBER));
    struct cg_redact_session *ses = session_new();
    struct cg_redact_counts counts = {0};
    char *got = redact_text(&opt, ses, text, &counts);
    cr_assert_str_eq(got, "mail a@example.com from <IPV4_1>, password=<SECRET_1>, key "
                          "<API_KEY_1>, card 4111 1111 1111 1111");
    cr_assert_eq(counts.by_type[CG_PII_EMAIL], 0);
    cr_assert_eq(total(&counts), 3);
    free(got);
    opt.enabled = 0;
    got = redact_text(&opt, ses, text, &counts);
    cr_assert_str_eq(got, text, "everything off: nothing changes");
    free(got);
    /* a secret pair whose value is an API key still hides the key when SECRET is off */
    opt.enabled = CG_PII_BIT(CG_PII_API_KEY);
    got = redact_text(&opt, ses, "OPENAI_API_KEY=sk-proj-4fJ8kLmN2pQrStUvWxYz0123AbCdEfGh", NULL);
    cr_assert_str_eq(got, "OPENAI_API_KEY=<API_KEY_2>");
    free(got);
    free(ses);
}

Test(redact, invalid_utf8_and_nul_bytes_pass_through_around_labels, .timeout = 10)
{
    static const char in[] = "\xff\xfe mail\0x@example.com\0 \xc3\x28 10.0.0.1\xe2\x82 "
                             "\xed\xa0\x80+1 415 555 0100\xc0\xaf";
    static const char want[] = "\xff\xfe mail\0<EMAIL_1>\0 \xc3\x28 <IPV4_1>\xe2\x82 "
                               "\xed\xa0\x80<PHONE_1>\xc0\xaf";
    struct cg_redact_session *ses = session_new();
    struct cg_redact_buf out;
    struct cg_redact_counts counts = {0};
    cg_redact_buf_init(&out, 4096);
    cr_assert_eq(cg_redact(NULL, ses, in, sizeof in - 1, &out, &counts, NULL), CG_OK);
    cr_assert_eq(out.len, sizeof want - 1);
    cr_assert(memcmp(out.data, want, out.len) == 0, "bytes around the labels are kept");
    cr_assert_eq(out.data[out.len], '\0');
    cr_assert_eq(total(&counts), 3);
    cg_redact_buf_cleanup(&out);
    free(ses);
}

Test(redact, empty_input_and_bad_arguments, .timeout = 10)
{
    struct cg_redact_session *ses = session_new();
    struct cg_redact_buf out;
    struct cg_err err;
    cg_redact_buf_init(&out, 16);
    cr_assert_eq(cg_redact(NULL, ses, "", 0, &out, NULL, &err), CG_OK);
    cr_assert_eq(out.len, 0);
    cr_assert_str_eq(out.data, "");
    cr_assert_eq(cg_redact(NULL, ses, NULL, 0, &out, NULL, &err), CG_OK, "NULL, 0 is empty");
    cr_assert_eq(cg_redact(NULL, ses, NULL, 3, &out, NULL, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "input") != NULL, "%s", err.msg);
    cr_assert_eq(cg_redact(NULL, NULL, "x", 1, &out, NULL, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "session") != NULL, "%s", err.msg);
    cr_assert_eq(cg_redact(NULL, ses, "x", 1, NULL, NULL, &err), CG_INVALID_ARGUMENT);
    cr_assert_null(cg_pii_type_name(CG_PII_UNSPECIFIED));
    cr_assert_null(cg_pii_type_name((cg_pii_type)9));
    cg_redact_buf_cleanup(&out);
    free(ses);
}

Test(redact, huge_input_within_and_beyond_the_cap, .timeout = 60)
{
    const char *unit = "user42 wrote from 10.0.0.42 to ops@example.com about v1.2.3 at "
                       "12:30:45, see /usr/lib/x86_64-linux-gnu/libc.so.6 and sha "
                       "da39a3ee5e6b4b0d3255bfef95601890afd80709.\n";
    size_t unit_len = strlen(unit), reps = (16u << 20) / unit_len;
    char *big = malloc(unit_len * reps + 1);
    cr_assert_not_null(big);
    for (size_t r = 0; r < reps; r++)
        memcpy(big + r * unit_len, unit, unit_len);
    size_t len = unit_len * reps;
    big[len] = '\0';

    struct cg_redact_session *ses = session_new();
    struct cg_redact_buf out;
    struct cg_redact_counts counts = {0};
    struct cg_err err;
    cg_redact_buf_init(&out, len);
    cr_assert_eq(cg_redact(NULL, ses, big, len, &out, &counts, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(counts.by_type[CG_PII_IPV4], (int64_t)reps);
    cr_assert_eq(counts.by_type[CG_PII_EMAIL], (int64_t)reps);
    cr_assert_eq(total(&counts), 2 * (int64_t)reps);
    const char *want_unit = "user42 wrote from <IPV4_1> to <EMAIL_1> about v1.2.3 at 12:30:45, "
                            "see /usr/lib/x86_64-linux-gnu/libc.so.6 and sha "
                            "da39a3ee5e6b4b0d3255bfef95601890afd80709.\n";
    size_t want_len = strlen(want_unit);
    cr_assert_eq(out.len, want_len * reps);
    cr_assert(memcmp(out.data + (reps - 1) * want_len, want_unit, want_len) == 0);

    /* Labels longer than their values: "::1" becomes "<IPV6_1>", beyond a cap of len. */
    size_t n6 = 1 << 20;
    char *v6 = malloc(n6 + 1);
    cr_assert_not_null(v6);
    for (size_t k = 0; k < n6; k += 4)
        memcpy(v6 + k, "::1 ", 4);
    struct cg_redact_counts before = counts;
    cg_redact_buf_cleanup(&out);
    cg_redact_buf_init(&out, n6);
    cr_assert_eq(cg_redact(NULL, ses, v6, n6, &out, &counts, &err), CG_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err.msg, "exceeds") != NULL, "%s", err.msg);
    cr_assert_eq(out.len, 0, "nothing half-written is handed out");
    cr_assert(memcmp(before.by_type, counts.by_type, sizeof counts.by_type) == 0,
              "counts unchanged on error");
    cg_redact_buf_cleanup(&out);
    cg_redact_buf_init(&out, 3 * n6);
    cr_assert_eq(cg_redact(NULL, ses, v6, n6, &out, &counts, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(out.len, n6 / 4 * strlen("<IPV6_1> "));
    cg_redact_buf_cleanup(&out);
    free(v6);
    free(big);
    free(ses);
}

Test(redact, pem_private_key_body_is_redacted_certificates_are_kept, .timeout = 10)
{
    const char *key = "key:\n-----BEGIN RSA PRIVATE KEY-----\n"
                      "MIIEpAIBAAKCAQEA7bq0rDf0zN1wXq2uJ9K+Hn3mF0pZ5sH8qYxR2w\n"
                      "a9Q8lM3nZ0rT5vX7yB2cE4dF6gH8iJ0kL1mN3oP5qR7sT9uV1wX3\n"
                      "-----END RSA PRIVATE KEY-----\ndone";
    const char *cert = "-----BEGIN CERTIFICATE-----\n"
                       "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
                       "-----END CERTIFICATE-----\n";
    struct cg_redact_session *ses = session_new();
    struct cg_redact_counts counts = {0};
    char *got = redact_text(NULL, ses, key, &counts);
    cr_assert_str_eq(got, "key:\n-----BEGIN RSA PRIVATE KEY-----\n<SECRET_1>\n"
                          "-----END RSA PRIVATE KEY-----\ndone");
    free(got);
    got = redact_text(NULL, ses, cert, &counts);
    cr_assert_str_eq(got, cert, "a certificate is public");
    free(got);
    got = redact_text(NULL, ses,
                      "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAA\n"
                      "truncated here",
                      &counts);
    cr_assert_str_eq(got, "-----BEGIN OPENSSH PRIVATE KEY-----\n<SECRET_2>",
                     "no END: the rest is the key");
    free(got);
    cr_assert_eq(counts.by_type[CG_PII_SECRET], 2);
    cr_assert_eq(total(&counts), 2);
    free(ses);
}

Test(redact, a_second_pass_over_redacted_text_changes_nothing, .timeout = 10)
{
    const char *text = "From: a@example.com (+44 20 7946 0958), host 192.168.1.20 / fe80::3, "
                       "token=abcd1234efgh, card 5555555555554444, ssn 078-05-1120, key "
                       "ghp_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R, https://u:pw@h.example/";
    struct cg_redact_session *ses = session_new();
    struct cg_redact_counts counts = {0};
    char *once = redact_text(NULL, ses, text, &counts);
    cr_assert_eq(total(&counts), 9, "got %lld in [%s]", (long long)total(&counts), once);
    struct cg_redact_counts again = {0};
    char *twice = redact_text(NULL, ses, once, &again);
    cr_assert_str_eq(twice, once);
    cr_assert_eq(total(&again), 0);
    free(once);
    free(twice);
    free(ses);
}

Test(redact, a_full_session_still_redacts_with_new_numbers, .timeout = 30)
{
    struct cg_redact_session *ses = session_new();
    struct cg_redact_counts counts = {0};
    struct cg_redact_buf out;
    cg_redact_buf_init(&out, 1 << 20);
    char text[64];
    for (int k = 0; k < CG_REDACT_SESSION_VALUES; k++) {
        int len = snprintf(text, sizeof text, "u%d@example.com", k);
        cr_assert_eq(cg_redact(NULL, ses, text, (size_t)len, &out, &counts, NULL), CG_OK);
    }
    cr_assert_not(counts.session_full);
    cr_assert_eq(cg_redact(NULL, ses, "u0@example.com", 14, &out, &counts, NULL), CG_OK);
    cr_assert_str_eq(out.data, "<EMAIL_1>", "remembered values keep their label");
    cr_assert_eq(cg_redact(NULL, ses, "new@example.com new@example.com", 31, &out, &counts, NULL),
                 CG_OK);
    cr_assert_str_eq(out.data, "<EMAIL_4097> <EMAIL_4098>",
                     "beyond the table: labelled, never leaked, not remembered");
    cr_assert(counts.session_full);
    cg_redact_buf_cleanup(&out);
    free(ses);
}

Test(redact, types_map_one_to_one_to_the_proto_enum, .timeout = 10)
{
    char *proto = slurp("proto/ctxguard/v1/common.proto");
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++) {
        char row[64];
        snprintf(row, sizeof row, "PII_TYPE_%s = %d;", cg_pii_type_name((cg_pii_type)t), t);
        cr_expect(strstr(proto, row) != NULL, "the proto has no '%s'", row);
    }
    cr_expect(strstr(proto, "PII_TYPE_SECRET = 8;\n}") != NULL, "no type beyond SECRET");
    free(proto);
}

Test(redact, seeds_do_not_change_labels, .timeout = 10)
{
    struct cg_redact_session *a = session_new(), *b = malloc(sizeof *b);
    cr_assert_not_null(b);
    cg_redact_session_init(b, 42, 4242);
    const char *text = "x@example.com y@example.com x@example.com 8.8.8.8";
    char *ga = redact_text(NULL, a, text, NULL), *gb = redact_text(NULL, b, text, NULL);
    cr_assert_str_eq(ga, gb);
    cr_assert_str_eq(ga, "<EMAIL_1> <EMAIL_2> <EMAIL_1> <IPV4_1>");
    free(ga);
    free(gb);
    free(a);
    free(b);
}

Test(redact, spans_say_where_each_value_was, .timeout = 10)
{
    const char *text = "mail x@example.com, then 10.0.0.1 and x@example.com";
    struct cg_redact_session *ses = session_new();
    struct cg_redact_buf out;
    struct cg_redact_span items[2];
    struct cg_redact_spans spans = {.items = items, .cap = 2, .len = 99, .dropped = 99};
    cg_redact_buf_init(&out, SIZE_MAX); /* no cap at all works too */
    cr_assert_eq(cg_redact_with_spans(NULL, ses, text, strlen(text), &out, NULL, &spans, NULL),
                 CG_OK);
    cr_assert_str_eq(out.data, "mail <EMAIL_1>, then <IPV4_1> and <EMAIL_1>");
    cr_assert_eq(spans.len, 2);
    cr_assert_eq(spans.dropped, 1, "the third value found no room");
    cr_assert_eq(items[0].start, 5);
    cr_assert_eq(items[0].len, strlen("x@example.com"));
    cr_assert_eq(items[0].type, CG_PII_EMAIL);
    cr_assert_eq(items[0].number, 1);
    cr_assert_eq(items[1].start, (size_t)(strstr(text, "10.0") - text));
    cr_assert_eq(items[1].type, CG_PII_IPV4);
    cg_redact_buf_cleanup(&out);
    free(ses);
}

/* test_estimate.c - the estimator: the SSE2 scan against a plain byte loop, classes, the model
 * against exact o200k_base counts of fixture texts (tests/data/conv/texts/o200k_counts.tsv,
 * computed with npm gpt-tokenizer), images, tools, calibration and per-message counts. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/estimate.h"

/* The counts by the definitions in estimate.h, one byte at a time. */
static void reference_scan(const unsigned char *s, size_t n, struct cg_est_features *f)
{
    memset(f, 0, sizeof *f);
    f->bytes = n;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = s[i], p = i > 0 ? s[i - 1] : 0, pp = i > 1 ? s[i - 2] : 0;
#define LETTER(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define DIGIT(c) ((c) >= '0' && (c) <= '9')
#define PUNCT(c) ((c) >= 0x21 && (c) <= 0x7e && !LETTER(c) && !DIGIT(c))
        f->letters += LETTER(b);
        f->upper += b >= 'A' && b <= 'Z';
        f->word_starts += LETTER(b) && !(i > 0 && LETTER(p));
        f->digits += DIGIT(b);
        f->digit_starts += DIGIT(b) && !(i > 0 && DIGIT(p));
        f->punct += PUNCT(b);
        f->punct_starts += PUNCT(b) && !(i > 0 && PUNCT(p));
        f->quotes += b == '"';
        f->spaces += b == ' ';
        f->space_runs += b == ' ' && i > 0 && p == ' ' && !(i > 1 && pp == ' ');
        f->newlines += b == '\n';
        f->tabs += b == '\t';
        f->lead2_latin += b >= 0xC2 && b <= 0xC5;
        f->lead2 += (b >= 0xC0 && b <= 0xC1) || (b >= 0xC6 && b <= 0xDF);
        f->lead3_cjk += b >= 0xE3 && b <= 0xED;
        f->lead3_other += (b >= 0xE0 && b <= 0xE2) || b == 0xEE || b == 0xEF;
        f->lead4 += b >= 0xF0 && b <= 0xF7;
    }
}

Test(estimate, simd_scan_counts_what_a_byte_loop_counts, .timeout = 60)
{
    unsigned seed = 99;
    size_t cap = 20000;
    unsigned char *buf = malloc(cap + 16);
    for (int round = 0; round < 400; round++) {
        size_t n = (size_t)(rand_r(&seed) % (round < 200 ? 70 : (int)cap));
        size_t off = (size_t)(rand_r(&seed) % 16);
        int mode = rand_r(&seed) % 3;
        for (size_t i = 0; i < n; i++) {
            static const char text[] = "ab Z9  \t\n\"{}:,-_x  42 ";
            buf[off + i] = mode == 0   ? (unsigned char)rand_r(&seed)
                           : mode == 1 ? (unsigned char)text[rand_r(&seed) % (sizeof text - 1)]
                                       : (unsigned char)(rand_r(&seed) % 2 ? ' ' : 0xE3);
        }
        struct cg_est_features want, got = {0};
        reference_scan(buf + off, n, &want);
        cg_estimate_scan((const char *)buf + off, n, &got);
        cr_assert_eq(memcmp(&want, &got, sizeof want), 0, "round %d, %zu bytes, mode %d", round, n,
                     mode);
    }
    /* Long runs cross the counters' flush point (255 blocks) without wrapping. */
    size_t big = 1u << 20;
    unsigned char *a = malloc(big);
    memset(a, 'a', big);
    struct cg_est_features f = {0};
    cg_estimate_scan((const char *)a, big, &f);
    cr_assert_eq(f.letters, big);
    cr_assert_eq(f.word_starts, 1);
    free(a);
    free(buf);
}

static char *fixture(const char *name, size_t *len)
{
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof path, "%.*s/../data/conv/%s", (int)(slash - __FILE__), __FILE__, name);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

Test(estimate, texts_of_every_kind_are_classified_and_within_their_bound, .timeout = 10)
{
    size_t len;
    char *tsv = fixture("texts/o200k_counts.tsv", &len);
    static const struct {
        const char *file;
        cg_text_class cls;
    } expected[] = {{"prose.txt", CG_TEXT_PROSE}, {"code.c", CG_TEXT_CODE},
                    {"data.json", CG_TEXT_JSON},  {"log.txt", CG_TEXT_LOGS},
                    {"ja.txt", CG_TEXT_CJK},      {"ru.txt", CG_TEXT_OTHER_SCRIPT}};
    int checked = 0;
    for (char *line = tsv, *next; line != NULL && *line != '\0'; line = next) {
        next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        char name[64];
        long exact, bytes;
        cr_assert_eq(sscanf(line, "%63s %ld %ld", name, &exact, &bytes), 3);
        char path[128];
        snprintf(path, sizeof path, "texts/%s", name);
        size_t n;
        char *text = fixture(path, &n);
        cr_assert_eq((long)n, bytes);
        struct cg_est_features f = {0};
        cg_estimate_scan(text, n, &f);
        cg_text_class cls = cg_estimate_classify(&f);
        for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
            if (strcmp(expected[i].file, name) == 0)
                cr_assert_eq(cls, expected[i].cls, "%s classified as %s", name,
                             cg_estimate_class_name(cls));
        double est = cg_estimate_tokens(CG_PROFILE_OPENAI, &f);
        double bound = cg_estimate_bound(CG_PROFILE_OPENAI, cls, est) * est;
        cr_assert_leq(fabs(est - (double)exact), bound, "%s: estimate %.0f, exact %ld, bound %.0f",
                      name, est, exact, bound);
        cr_assert_eq(cg_estimate_text(CG_PROFILE_OPENAI, text, n), (int64_t)ceil(est));
        /* chars/4 undercounts these badly; the estimator much less. */
        cr_assert_gt(est, 0.8 * (double)exact, "%s: estimate %.0f, exact %ld", name, est, exact);
        free(text);
        checked++;
    }
    cr_assert_eq(checked, 6);
    free(tsv);
}

Test(estimate, families_scale_components, .timeout = 10)
{
    const char *digits = "1234567890 1234567890 1234567890 1234567890";
    int64_t openai = cg_estimate_text(CG_PROFILE_OPENAI, digits, strlen(digits));
    cr_assert_gt(cg_estimate_text(CG_PROFILE_GEMINI, digits, strlen(digits)), openai,
                 "Gemini splits digits one by one");
    const char *en = "The quick brown fox jumps over the lazy dog again and again.";
    cr_assert_gt(cg_estimate_text(CG_PROFILE_CLAUDE, en, strlen(en)),
                 cg_estimate_text(CG_PROFILE_OPENAI, en, strlen(en)));
    cr_assert_eq(cg_estimate_text(CG_PROFILE_DEFAULT, "", 0), 0);
    cr_assert_eq(cg_estimate_text(CG_PROFILE_DEFAULT, "a", 1), 1);
    cr_assert_gt(cg_estimate_bound(CG_PROFILE_CLAUDE, CG_TEXT_PROSE, 1000),
                 cg_estimate_bound(CG_PROFILE_OPENAI, CG_TEXT_PROSE, 1000),
                 "an uncalibrated family prior widens the bound");
    /* Any bytes, however hostile, give a finite positive count. */
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 131 + 7);
    int64_t t = cg_estimate_text(CG_PROFILE_KIMI, junk, sizeof junk);
    cr_assert(t >= (int64_t)(sizeof junk / 8) && t < (int64_t)(4 * sizeof junk));
}

Test(estimate, images_follow_the_providers_rules, .timeout = 10)
{
    cr_assert_eq(cg_estimate_image(CG_PROFILE_OPENAI, 1024, 1024, "high"), 765);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_OPENAI, 1024, 1024, "low"), 85);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_OPENAI, 2048, 4096, NULL), 1105);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_OPENAI, 512, 512, "auto"), 255);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_CLAUDE, 1000, 1000, NULL), 1334);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_CLAUDE, 3136, 1568, NULL), 1640,
                 "scaled to 1568 on the long side first");
    cr_assert_eq(cg_estimate_image(CG_PROFILE_GEMINI, 300, 200, NULL), 258);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_GEMINI, 1536, 800, NULL), 258 * 4);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_CLAUDE, 0, 100, NULL),
                 CG_ESTIMATE_IMAGE_DEFAULT + 600);
    cr_assert_eq(cg_estimate_image(CG_PROFILE_OPENAI, 0, 0, NULL), 765);
}

static struct cg_conv *openai(const char *json)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, json, strlen(json), NULL, &conv, &err),
                 CG_OK, "%s", err.msg);
    return conv;
}

Test(estimate, conversations_add_framing_tools_images_and_calibration, .timeout = 10)
{
    struct cg_conv *conv = openai(
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
        "\"content\":[{\"type\":\"text\",\"text\":\"What is in this picture?\"},{\"type\":"
        "\"image_url\",\"image_url\":{\"url\":\"https://x/y.png\",\"detail\":\"low\"}}]},"
        "{\"role\":\"assistant\",\"content\":\"Let me look.\",\"tool_calls\":[{\"id\":\"c1\","
        "\"type\":\"function\",\"function\":{\"name\":\"zoom\",\"arguments\":\"{\\\"x\\\":2}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"A cat on a mat.\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"zoom\",\"description\":"
        "\"Zoom into the image\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{"
        "\"type\":\"number\"}}}}}]}");
    struct cg_estimate e;
    int64_t per[4];
    struct cg_err err;
    cr_assert_eq(cg_estimate_conv(conv, CG_PROFILE_OPENAI, 0, per, &e, &err), CG_OK);
    cr_assert_eq(e.image_tokens, 85);
    cr_assert_eq(e.overhead_tokens, 3 + 4 * 4 + 3 + 3, "priming, 4 messages, a call, a result");
    cr_assert_gt(e.tool_definition_tokens, 12 + 8);
    cr_assert_eq(e.total,
                 e.content_tokens + e.overhead_tokens + e.image_tokens + e.tool_definition_tokens);
    int64_t sum = 0;
    for (int i = 0; i < 4; i++) {
        cr_assert_gt(per[i], 4);
        sum += per[i];
    }
    cr_assert_leq(llabs(sum + 3 + e.tool_definition_tokens - e.total), 4,
                  "messages + priming + tools make the total (up to rounding)");
    cr_assert_gt(e.error_bound, 0);
    cr_assert_eq(e.factor, 1.0);
    struct cg_estimate twice;
    cr_assert_eq(cg_estimate_conv(conv, CG_PROFILE_OPENAI, 2.0, NULL, &twice, &err), CG_OK);
    cr_assert_leq(llabs(twice.total - 2 * e.total), 4);
    cr_assert_eq(twice.factor, 2.0);
    cr_assert_eq(cg_estimate_conv(conv, CG_PROFILE_OPENAI, 5.0, NULL, &twice, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "calibration") != NULL);
    cr_assert_eq(cg_estimate_conv(conv, CG_PROFILE_OPENAI, NAN, NULL, &twice, &err),
                 CG_INVALID_ARGUMENT);
    /* Claude adds its tool-use system prompt when tools are present. */
    cr_assert_gt(cg_estimate_tools(CG_PROFILE_CLAUDE, conv), 346);
    conv->n_tools = 0;
    cr_assert_eq(cg_estimate_tools(CG_PROFILE_CLAUDE, conv), 0);
    cg_conv_free(conv);
}

Test(estimate, bigger_schemas_cost_more, .timeout = 10)
{
    struct cg_conv *small = openai("{\"messages\":[],\"tools\":[{\"type\":\"function\","
                                   "\"function\":{\"name\":\"f\"}}]}");
    struct cg_conv *large = openai(
        "{\"messages\":[],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"description\":\"Searches the repository for a pattern and returns matching lines\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\","
        "\"description\":\"a regular expression\"},\"path\":{\"type\":\"string\"},\"max\":{"
        "\"type\":\"integer\",\"minimum\":1}},\"required\":[\"pattern\"]}}}]}");
    cr_assert_gt(cg_estimate_tools(CG_PROFILE_DEFAULT, large),
                 cg_estimate_tools(CG_PROFILE_DEFAULT, small) + 30);
    cg_conv_free(small);
    cg_conv_free(large);
}

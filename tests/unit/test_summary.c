/* test_summary.c - the extractive summarizer (core/summary): sections and headings in the
 * conversation's language, the target kept, facts of the held-out conversations
 * (tests/data/summary) kept, boilerplate passed over, bad ranges refused, the parser, the
 * prompt and the transcript chunks. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/estimate.h"
#include "core/summary.h"

static void source_path(char *out, size_t cap, const char *rel)
{
    const char *file = __FILE__;
    const char *cut = strstr(file, "tests/unit/test_summary.c");
    cr_assert_not_null(cut, "__FILE__ is %s", file);
    snprintf(out, cap, "%.*s%s", (int)(cut - file), file, rel);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static struct cg_conv *read_conv(const char *json)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, json, strlen(json), NULL, &conv, &err),
                 CG_OK, "%s", err.msg);
    return conv;
}

/* Counts calls, so tests can see the counter is the one used. */
static int64_t counting(void *arg, const char *text, size_t len)
{
    (*(int *)arg)++;
    return cg_estimate_text(CG_PROFILE_OPENAI, text, len);
}

static void summarize(struct cg_conv *conv, int64_t target, const char *focus,
                      struct cg_summary *out)
{
    struct cg_err err = {0};
    struct cg_summary_opts opts = {
        .target_tokens = target, .focus = focus, .focus_len = focus ? strlen(focus) : 0};
    cr_assert_eq(cg_summary_extract(conv, &opts, out, &err), CG_OK, "%s", err.msg);
}

static const char *const de_conv =
    "[{\"role\":\"system\",\"content\":\"Du bist ein hilfreicher Assistent.\"},"
    "{\"role\":\"user\",\"content\":\"Die Tests im Paket billing schlagen fehl. Kannst du "
    "bitte nachsehen, was da los ist?\"},"
    "{\"role\":\"assistant\",\"content\":\"Ich sehe mir das an. Der Fehler kommt aus "
    "src/billing/invoice.py Zeile 212.\"},"
    "{\"role\":\"user\",\"content\":\"Wir haben uns entschieden, die Rundung auf 2 "
    "Nachkommastellen festzulegen.\"},"
    "{\"role\":\"assistant\",\"content\":\"Ich habe die Rundung in invoice.py behoben und "
    "die Tests laufen jetzt durch.\"},"
    "{\"role\":\"user\",\"content\":\"Als Nächstes bitte die Dokumentation aktualisieren.\"}]";

static const char *const ja_conv =
    "[{\"role\":\"user\",\"content\":\"夜間バッチが途中で止まります。原因を調べてください。\"},"
    "{\"role\":\"assistant\",\"content\":\"ログを確認します。メモリ上限は 2 GiB です。\"},"
    "{\"role\":\"user\",\"content\":\"リリースは v3.1.0 で行うことに決めました。\"},"
    "{\"role\":\"assistant\",\"content\":\"タイムアウトを 45 秒に延ばしました。\"},"
    "{\"role\":\"user\",\"content\":\"次にドキュメントを更新してください。\"}]";

static const char *const en_conv =
    "[{\"role\":\"user\",\"content\":\"The importer crashes on large CSV files. Please fix "
    "it.\"},"
    "{\"role\":\"assistant\",\"content\":\"I found the cause: the buffer in "
    "lib/csv/reader.c is fixed at 4096 bytes.\"},"
    "{\"role\":\"user\",\"content\":\"We decided to stream the file instead of loading it "
    "whole.\"},"
    "{\"role\":\"assistant\",\"content\":\"Done: the reader now streams in 64 KiB blocks and "
    "the 2 GB sample imports in 41 s.\"},"
    "{\"role\":\"user\",\"content\":\"Next, add a test for quoted newlines.\"}]";

Test(summary, german_conversation_gets_german_headings_and_content)
{
    struct cg_conv *conv = read_conv(de_conv);
    cr_assert_str_eq(cg_summary_detect_language(conv, 0, 0), "de");
    struct cg_summary s;
    summarize(conv, 400, NULL, &s);
    cr_assert_str_eq(s.language, "de");
    for (int k = 0; k < CG_SUMMARY_SECTION_COUNT; k++)
        cr_assert_not_null(strstr(s.text, cg_summary_heading("de", (cg_summary_section)k)),
                           "heading %d missing:\n%s", k, s.text);
    cr_assert_not_null(strstr(s.text, "## Ziel der Sitzung\nDie Tests im Paket billing"));
    cr_assert_not_null(strstr(s.text, "src/billing/invoice.py Zeile 212"), "%s", s.text);
    cr_assert_eq(s.sections[CG_SUMMARY_DECISIONS].n, 1, "%s", s.text);
    cr_assert_not_null(strstr(s.sections[CG_SUMMARY_DECISIONS].items[0], "2 Nachkommastellen"));
    cr_assert_not_null(strstr(s.text, "Als Nächstes bitte die Dokumentation"), "%s", s.text);
    cr_assert_null(strstr(s.text, "Session intent"));
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, japanese_conversation_gets_japanese_headings_and_content)
{
    struct cg_conv *conv = read_conv(ja_conv);
    struct cg_summary s;
    summarize(conv, 400, NULL, &s);
    cr_assert_str_eq(s.language, "ja");
    for (int k = 0; k < CG_SUMMARY_SECTION_COUNT; k++)
        cr_assert_not_null(strstr(s.text, cg_summary_heading("ja", (cg_summary_section)k)), "%s",
                           s.text);
    cr_assert_not_null(strstr(s.text, "## セッションの目的\n夜間バッチが途中で止まります。"), "%s",
                       s.text);
    cr_assert_not_null(strstr(s.text, "リリースは v3.1.0 で行うことに決めました。"), "%s", s.text);
    cr_assert_not_null(strstr(s.text, "メモリ上限は 2 GiB です。"), "%s", s.text);
    cr_assert_not_null(strstr(s.text, "タイムアウトを 45 秒に延ばしました。"), "%s", s.text);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, english_sections_hold_what_they_name)
{
    struct cg_conv *conv = read_conv(en_conv);
    struct cg_summary s;
    summarize(conv, 400, NULL, &s);
    cr_assert_str_eq(s.language, "en");
    cr_assert_eq(s.sections[CG_SUMMARY_INTENT].n, 1);
    cr_assert_str_eq(s.sections[CG_SUMMARY_INTENT].items[0],
                     "The importer crashes on large CSV files.");
    cr_assert_eq(s.sections[CG_SUMMARY_DECISIONS].n, 1, "%s", s.text);
    cr_assert_str_eq(s.sections[CG_SUMMARY_DECISIONS].items[0],
                     "We decided to stream the file instead of loading it whole.");
    cr_assert_eq(s.sections[CG_SUMMARY_STATE].n, 1);
    cr_assert_not_null(strstr(s.sections[CG_SUMMARY_STATE].items[0], "64 KiB blocks"));
    cr_assert_eq(s.sections[CG_SUMMARY_NEXT].n, 1, "%s", s.text);
    cr_assert_str_eq(s.sections[CG_SUMMARY_NEXT].items[0], "Next, add a test for quoted newlines.");
    cr_assert_not_null(strstr(s.text, "lib/csv/reader.c is fixed at 4096 bytes"), "%s", s.text);
    cr_assert(s.target_met);
    cr_assert_eq(s.messages, 5);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, unknown_language_falls_back_to_english_headings)
{
    cr_assert_str_eq(cg_summary_language("pt-BR"), "en");
    cr_assert_str_eq(cg_summary_language("de-AT"), "de");
    cr_assert_str_eq(cg_summary_language("JA"), "ja");
    cr_assert_str_eq(cg_summary_heading("xx", CG_SUMMARY_NEXT), "Next steps");
    struct cg_conv *conv = read_conv(de_conv);
    struct cg_summary s;
    struct cg_err err = {0};
    struct cg_summary_opts opts = {.language = "pt"};
    cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_OK);
    cr_assert_str_eq(s.language, "en");
    cr_assert_not_null(strstr(s.text, "## Session intent\n"));
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

/* A long conversation built here: many specific sentences, more than fit. */
static struct cg_conv *long_conv(void)
{
    struct cg_conv *conv = cg_conv_new(NULL);
    struct cg_err err = {0};
    for (int i = 0; i < 400; i++) {
        struct cg_message *m;
        struct cg_part *p;
        cr_assert_eq(cg_conv_add_message(conv, i % 2 ? CG_ROLE_ASSISTANT : CG_ROLE_USER, &m, &err),
                     CG_OK);
        cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
        char text[200];
        snprintf(text, sizeof text,
                 "Step %d: the worker pool_%d uses %d threads and writes /var/lib/app/%d.db.", i, i,
                 i * 3 + 1, i);
        cr_assert_eq(cg_conv_str(conv, text, strlen(text), &p->u.text, &err), CG_OK);
    }
    return conv;
}

Test(summary, summary_stays_within_every_target)
{
    struct cg_conv *conv = long_conv();
    const int64_t targets[] = {64, 100, 250, 400, 1000, 2000};
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        int calls = 0;
        struct cg_summary s;
        struct cg_err err = {0};
        struct cg_summary_opts opts = {
            .target_tokens = targets[i], .count = counting, .count_arg = &calls};
        cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_OK);
        cr_assert_gt(calls, 0);
        int64_t recount = cg_estimate_text(CG_PROFILE_OPENAI, s.text, s.text_len);
        cr_assert_eq(recount, s.tokens);
        cr_assert_leq(s.tokens, targets[i], "target %lld: %lld", (long long)targets[i],
                      (long long)s.tokens);
        cr_assert(s.target_met);
        /* Most of the room is used: the summary is not needlessly short. */
        cr_assert_geq(s.tokens, targets[i] * 6 / 10, "target %lld: only %lld",
                      (long long)targets[i], (long long)s.tokens);
        cg_summary_cleanup(&s);
    }
    cg_conv_free(conv);
}

Test(summary, same_input_gives_the_same_summary)
{
    struct cg_conv *conv = long_conv();
    struct cg_summary a, b;
    summarize(conv, 300, NULL, &a);
    summarize(conv, 300, NULL, &b);
    cr_assert_str_eq(a.text, b.text);
    cg_summary_cleanup(&a);
    cg_summary_cleanup(&b);
    cg_conv_free(conv);
}

Test(summary, focus_brings_its_terms_in)
{
    struct cg_conv *conv = long_conv();
    struct cg_summary s;
    summarize(conv, 200, NULL, &s);
    cr_assert_null(strstr(s.text, "pool_17 "), "%s", s.text);
    cg_summary_cleanup(&s);
    summarize(conv, 200, "pool_17", &s);
    cr_assert_not_null(strstr(s.text, "pool_17 uses 52 threads"), "%s", s.text);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, repeated_boilerplate_gives_way_to_facts)
{
    char json[32768];
    size_t n =
        (size_t)snprintf(json, sizeof json, "[{\"role\":\"user\",\"content\":\"Find the leak.\"}");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(json + n, sizeof json - n,
                              ",{\"role\":\"assistant\",\"content\":\"Here is what I found so "
                              "far: the tests at tests/unit pass %d of 10 runs.\"}"
                              ",{\"role\":\"user\",\"content\":\"OK.\"}",
                              7);
    snprintf(json + n, sizeof json - n,
             ",{\"role\":\"assistant\",\"content\":\"The leak is in cache_evict() at "
             "src/cache.c:88.\"},{\"role\":\"user\",\"content\":\"Thanks.\"}]");
    struct cg_conv *conv = read_conv(json);
    struct cg_summary s;
    summarize(conv, 64, NULL, &s);
    cr_assert_not_null(strstr(s.text, "src/cache.c:88"), "%s", s.text);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, bad_ranges_and_targets_are_refused)
{
    struct cg_conv *conv = read_conv(en_conv);
    struct cg_summary s;
    struct cg_err err = {0};
    struct cg_summary_opts opts = {.target_tokens = 2001};
    cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(err.msg, "target_tokens"));
    cg_summary_cleanup(&s);
    opts = (struct cg_summary_opts){.from = 3, .to = 3};
    cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_INVALID_ARGUMENT);
    cg_summary_cleanup(&s);
    opts = (struct cg_summary_opts){.from = 0, .to = 9};
    cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_INVALID_ARGUMENT);
    cg_summary_cleanup(&s);
    struct cg_conv *empty = cg_conv_new(NULL);
    opts = (struct cg_summary_opts){0};
    cr_assert_eq(cg_summary_extract(empty, &opts, &s, &err), CG_INVALID_ARGUMENT);
    cg_summary_cleanup(&s);
    cg_conv_free(empty);
    /* A range: only its messages are summarized. */
    opts = (struct cg_summary_opts){.from = 2, .to = 4};
    cr_assert_eq(cg_summary_extract(conv, &opts, &s, &err), CG_OK);
    cr_assert_eq(s.messages, 2);
    cr_assert_null(strstr(s.text, "importer crashes"));
    cr_assert_not_null(strstr(s.text, "stream the file"));
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, hostile_text_is_summarized_safely)
{
    struct cg_conv *conv = cg_conv_new(NULL);
    struct cg_err err = {0};
    struct cg_message *m;
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    size_t len = 300000;
    char *junk = malloc(len);
    unsigned x = 12345;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        junk[i] = (char)(x >> 16);
    }
    cr_assert_eq(cg_conv_str(conv, junk, len, &p->u.text, &err), CG_OK);
    free(junk);
    struct cg_summary s;
    summarize(conv, 200, NULL, &s);
    cr_assert_leq(s.tokens, 200);
    cr_assert_eq(strlen(s.text), s.text_len);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, parse_reads_back_what_render_wrote)
{
    struct cg_conv *conv = read_conv(de_conv);
    struct cg_summary s, back;
    summarize(conv, 400, NULL, &s);
    cg_summary_init(&back);
    unsigned found = 0;
    struct cg_err err = {0};
    cr_assert_eq(cg_summary_parse(s.text, s.text_len, "de", &back, &found, &err), CG_OK);
    cr_assert_eq(found, (1u << CG_SUMMARY_SECTION_COUNT) - 1);
    for (int k = 0; k < CG_SUMMARY_SECTION_COUNT; k++) {
        cr_assert_eq(back.sections[k].n, s.sections[k].n, "section %d", k);
        for (size_t i = 0; i < s.sections[k].n; i++)
            cr_assert_str_eq(back.sections[k].items[i], s.sections[k].items[i]);
    }
    cg_summary_cleanup(&back);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

Test(summary, parse_takes_llm_styles_and_reports_missing_sections)
{
    const char *text = "**Session intent:**\nFix the importer\nfor big files.\n\n"
                       "### Progress\n* found the buffer\n1. streamed the reader\n"
                       "## Key decisions\n-\n"
                       "## current state\nDone.\n";
    struct cg_summary s;
    cg_summary_init(&s);
    unsigned found = 0;
    struct cg_err err = {0};
    cr_assert_eq(cg_summary_parse(text, strlen(text), "en", &s, &found, &err), CG_OK);
    cr_assert_eq(found, 0xfu);
    cr_assert_eq(s.sections[CG_SUMMARY_INTENT].n, 1);
    cr_assert_str_eq(s.sections[CG_SUMMARY_INTENT].items[0], "Fix the importer for big files.");
    cr_assert_eq(s.sections[CG_SUMMARY_PROGRESS].n, 2);
    cr_assert_str_eq(s.sections[CG_SUMMARY_PROGRESS].items[1], "streamed the reader");
    cr_assert_eq(s.sections[CG_SUMMARY_DECISIONS].n, 0);
    cr_assert_str_eq(s.sections[CG_SUMMARY_STATE].items[0], "Done.");
    cg_summary_cleanup(&s);
}

Test(summary, prompt_names_the_sections_in_the_language)
{
    char *p = cg_summary_prompt("ja", 400, "latency", 7, false);
    cr_assert_not_null(p);
    for (int k = 0; k < CG_SUMMARY_SECTION_COUNT; k++)
        cr_assert_not_null(strstr(p, cg_summary_heading("ja", (cg_summary_section)k)));
    cr_assert_not_null(strstr(p, "400 tokens"));
    cr_assert_not_null(strstr(p, "Emphasise: latency"));
    free(p);
}

Test(summary, transcript_chunks_fit_and_keep_everything)
{
    struct cg_conv *conv = long_conv();
    char **chunks = NULL;
    size_t n = 0;
    struct cg_err err = {0};
    cr_assert_eq(cg_summary_transcript(conv, 0, 0, 2000, 500, &chunks, &n, &err), CG_OK);
    cr_assert_gt(n, 5);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_leq(strlen(chunks[i]), 2000);
        total += strlen(chunks[i]);
    }
    /* Every message is in some chunk, whole (they are far shorter than a chunk). */
    for (int i = 0; i < 400; i += 37) {
        char needle[100];
        snprintf(needle, sizeof needle, "pool_%d uses %d threads", i, i * 3 + 1);
        bool seen = false;
        for (size_t c = 0; c < n && !seen; c++)
            seen = strstr(chunks[c], needle) != NULL;
        cr_assert(seen, "%s", needle);
    }
    cg_summary_chunks_free(chunks, n);
    cg_conv_free(conv);
}

/* The held-out conversations: facts stated by the user or the assistant, checked verbatim.
 * They were written apart from the sample data (tests/data/summary/make_heldout.py). */
Test(summary, held_out_conversations_keep_most_facts, .timeout = 60)
{
    const char *names[] = {"heldout-en-web", "heldout-en-long", "heldout-de-infra",
                           "heldout-ja-batch"};
    const char *langs[] = {"en", "en", "de", "ja"};
    int said = 0, kept = 0;
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        char path[4096], rel[200];
        snprintf(rel, sizeof rel, "tests/data/summary/%s.json", names[f]);
        source_path(path, sizeof path, rel);
        size_t len;
        char *json = slurp(path, &len);
        struct cg_conv *conv = NULL;
        struct cg_err err = {0};
        cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, json, len, NULL, &conv, &err), CG_OK,
                     "%s", err.msg);
        struct cg_summary s;
        summarize(conv, 400, NULL, &s);
        cr_assert_str_eq(s.language, langs[f], "%s", names[f]);
        cr_assert_leq(s.tokens, 400);
        json_t *root = json_loadb(json, len, 0, NULL);
        size_t i;
        json_t *nd;
        json_array_foreach(json_object_get(root, "needles"), i, nd)
        {
            if (strcmp(json_string_value(json_object_get(nd, "where")), "tool") == 0)
                continue;
            said++;
            kept += strstr(s.text, json_string_value(json_object_get(nd, "fact"))) != NULL;
        }
        json_decref(root);
        cg_summary_cleanup(&s);
        cg_conv_free(conv);
        free(json);
    }
    cr_assert_gt(said, 30);
    cr_assert_geq(kept * 100, said * 80, "kept %d of %d", kept, said);
}

/* ------------------------------------------------------------------ the chunk plan ---- */

Test(summary, partial_summaries_join_with_blank_lines)
{
    char a[] = "## Progress\n- one", b[] = "## Progress\n- two";
    char *texts[] = {a, b};
    char *joined = cg_summary_join(texts, 2);
    cr_assert_str_eq(joined, "## Progress\n- one\n\n## Progress\n- two\n\n");
    free(joined);
    joined = cg_summary_join(texts, 0);
    cr_assert_str_eq(joined, "");
    free(joined);
}

/* Every chunk at most max bytes, none starting inside a UTF-8 sequence, together the text. */
static void check_split(const char *text, size_t max, size_t *n_out, char ***chunks_out)
{
    size_t n = 0;
    char **chunks = cg_summary_split(text, max, &n);
    cr_assert_not_null(chunks);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(chunks[i]);
        cr_assert(len > 0 && len <= max, "chunk %zu has %zu bytes (max %zu)", i, len, max);
        cr_assert_neq((unsigned char)chunks[i][0] & 0xc0, 0x80, "chunk %zu starts mid-character",
                      i);
        cr_assert_eq(memcmp(text + at, chunks[i], len), 0, "chunk %zu is the next piece", i);
        at += len;
    }
    cr_assert_eq(at, strlen(text), "nothing lost");
    *n_out = n;
    *chunks_out = chunks;
}

Test(summary, a_long_text_is_cut_at_line_ends)
{
    char text[4096];
    size_t used = 0;
    for (int i = 0; i < 60; i++)
        used += (size_t)snprintf(text + used, sizeof text - used,
                                 "- line %02d of the partial summaries\n", i);
    size_t n;
    char **chunks;
    check_split(text, 200, &n, &chunks);
    cr_assert_gt(n, 1);
    for (size_t i = 0; i + 1 < n; i++) {
        size_t len = strlen(chunks[i]);
        cr_assert_eq(chunks[i][len - 1], '\n', "chunk %zu ends at a line end", i);
        cr_assert_gt(len, 100, "a line end in the second half is used");
    }
    cg_summary_chunks_free(chunks, n);
}

Test(summary, a_text_without_line_ends_is_cut_between_characters)
{
    /* "ä" is two bytes and "日" three: a cut at max bytes would fall inside them. */
    char text[2048];
    size_t used = 0;
    for (int i = 0; i < 150; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s", i % 2 ? "日" : "ä");
    size_t n;
    char **chunks;
    check_split(text, 101, &n, &chunks);
    cr_assert_gt(n, 3);
    cg_summary_chunks_free(chunks, n);
    check_split("", 64, &n, &chunks);
    cr_assert_eq(n, 0);
    cg_summary_chunks_free(chunks, n);
}

/* Issue 16, item 4: what users state (names, numbers, paths, decisions) comes first. Random
 * sessions where each user fact sits among pasted log lines, long assistant replies full of
 * specifics and tool output; a 400-token summary keeps at least 95 % of the user facts
 * over all of them (the summarizer before this kept about one in eight). */
static unsigned pick(uint64_t *rng, unsigned n)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)(*rng >> 33) % n;
}

Test(summary, user_facts_come_first)
{
    static const char *const first[] = {"Tomasz", "Keiko", "Rosa", "Dana", "Jonas", "Hana"};
    static const char *const last[] = {"Zhang", "Tanaka", "Varga", "Fischer", "Quispe"};
    static const char *const svc[] = {"geo-lookup", "ledger", "rate-limiter", "notifier"};
    uint64_t rng = 0x5eed;
#define PICK(n) pick(&rng, (n))
    int facts = 0, kept = 0;
    for (int conv_i = 0; conv_i < 30; conv_i++) {
        struct cg_conv *conv = cg_conv_new(NULL);
        struct cg_err err = {0};
        char said[12][160];
        int n_said = 0, turns = 10 + (int)PICK(30);
        for (int t = 0; t < turns; t++) {
            char text[4096];
            size_t n = 0;
            struct cg_message *m;
            struct cg_part *p;
            /* The user: a request, pasted log lines, and now and then a fact. */
            n += (size_t)snprintf(text + n, sizeof text - n, "%s",
                                  t % 2 ? "Please look at the next step of the rollout. "
                                        : "Go on with what you were doing. ");
            for (int l = 0; l < 3; l++)
                n += (size_t)snprintf(text + n, sizeof text - n,
                                      "\n2025-0%d-1%dT0%d:1%d:00Z ERROR [%s] pool_%d: %d/%d in "
                                      "use, %d waiting\n",
                                      1 + l, t % 10, l, t % 10, svc[PICK(4)], (int)PICK(90),
                                      (int)PICK(300), (int)PICK(300), (int)PICK(50));
            if (n_said < 12 && PICK(3) == 0) {
                char *f = said[n_said++];
                switch (PICK(3)) {
                case 0:
                    snprintf(f, 160, "%s %s is on call for %s this week", first[PICK(6)],
                             last[PICK(5)], svc[PICK(4)]);
                    break;
                case 1:
                    snprintf(f, 160, "the read replica of %s listens on port %d", svc[PICK(4)],
                             1024 + (int)PICK(60000));
                    break;
                default:
                    snprintf(f, 160, "the backups of %s go to s3://b-%d/%s/daily", svc[PICK(4)],
                             (int)PICK(99), svc[PICK(4)]);
                }
                n += (size_t)snprintf(text + n, sizeof text - n, " By the way, %s.", f);
            }
            cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_OK);
            cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
            cr_assert_eq(cg_conv_str(conv, text, n, &p->u.text, &err), CG_OK);
            /* The assistant: long, specific, and decisive now and then. */
            n = (size_t)snprintf(text, sizeof text,
                                 "I checked /srv/app/%d/config.yaml and the pool_%d settings: "
                                 "max_conns=%d, timeout_ms=%d. We decided to raise "
                                 "worker_threads to %d in v1.%d.%d. Next I will run the load "
                                 "test against %s-%d.stg.internal.",
                                 t, t, (int)PICK(500), (int)PICK(9000), (int)PICK(64), (int)PICK(9),
                                 (int)PICK(9), svc[PICK(4)], (int)PICK(9));
            cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_ASSISTANT, &m, &err), CG_OK);
            cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
            cr_assert_eq(cg_conv_str(conv, text, n, &p->u.text, &err), CG_OK);
        }
        struct cg_summary s;
        summarize(conv, 400, NULL, &s);
        cr_assert_leq(s.tokens, 400);
        for (int i = 0; i < n_said; i++) {
            facts++;
            kept += strstr(s.text, said[i]) != NULL;
        }
        cg_summary_cleanup(&s);
        cg_conv_free(conv);
    }
#undef PICK
    cr_log_info("user facts kept: %d of %d", kept, facts);
    cr_assert_gt(facts, 100);
    cr_assert_geq(kept * 100, facts * 95, "user facts kept: %d of %d", kept, facts);
}

Test(summary, an_earlier_summary_is_taken_in_without_its_head)
{
    /* Compress's later pass summarizes a span that starts with its earlier summary (head,
     * headings, items): the head and headings are not content, the items are. */
    const char *json =
        "[{\"role\":\"user\",\"content\":\"[ctxguard summary of input messages 3-54]\\n"
        "## Session intent\\nPort the billing importer to Rust for ACME.\\n\\n## Progress\\n-\\n"
        "\\n## Key decisions\\n- We chose serde for the CSV rows.\\n\"},"
        "{\"role\":\"assistant\",\"content\":\"The parser now handles quoted fields.\"},"
        "{\"role\":\"user\",\"content\":\"Good. Keep the 64 MB memory cap.\"},"
        "{\"role\":\"assistant\",\"content\":\"Noted: the cap stays at 64 MB.\"}]";
    struct cg_conv *conv = read_conv(json);
    struct cg_summary s;
    summarize(conv, 400, NULL, &s);
    cr_assert_eq(s.sections[CG_SUMMARY_INTENT].n, 1, "%s", s.text);
    cr_assert_str_eq(s.sections[CG_SUMMARY_INTENT].items[0],
                     "Port the billing importer to Rust for ACME.");
    cr_assert_null(strstr(s.text, "[ctxguard summary"), "%s", s.text);
    cr_assert_not_null(strstr(s.text, "serde"), "the earlier decision is kept: %s", s.text);
    cg_summary_cleanup(&s);
    cg_conv_free(conv);
}

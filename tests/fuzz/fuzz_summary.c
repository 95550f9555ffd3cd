/* fuzz_summary.c - the summary core (core/summary) on arbitrary bytes.
 *
 * The first byte picks the target (64..2000 tokens) and whether the rest is read as OpenAI
 * JSON (summarized when it parses) or split into messages at NUL bytes with rotating roles
 * (user, assistant, tool result). Invariants (a violation traps):
 * - the extractive summary succeeds, is valid UTF-8 when its input was, has all six
 *   headings, says target_met exactly when within the target, and parsing it back finds
 *   the six sections;
 * - the transcript's chunks are at most the chunk size, and joined and split again (the next
 *   level of a hierarchical summary) they are pieces of at most the size that together are
 *   the joined text;
 * - parsing the raw bytes as an LLM answer never fails other than for memory.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/summary.h"
#include "core/utf8.h"

/* The chunk plan: texts joined, then cut into pieces of at most 200 bytes. */
static void check_split(char **texts, size_t n)
{
    char *joined = cg_summary_join(texts, n);
    if (joined == NULL)
        return;
    size_t pieces = 0, at = 0;
    char **split = cg_summary_split(joined, 200, &pieces);
    if (split != NULL) {
        for (size_t i = 0; i < pieces; i++) {
            size_t len = strlen(split[i]);
            if (len == 0 || len > 200 || memcmp(joined + at, split[i], len) != 0)
                __builtin_trap();
            at += len;
        }
        if (at != strlen(joined))
            __builtin_trap();
        cg_summary_chunks_free(split, pieces);
    }
    free(joined);
}

static void check_summary(const struct cg_conv *conv, int64_t target, bool valid_utf8)
{
    struct cg_summary s;
    struct cg_err err = {0};
    struct cg_summary_opts opts = {.target_tokens = target};
    if (cg_summary_extract(conv, &opts, &s, &err) != CG_OK) {
        if (err.code != CG_NOMEM && conv->n_messages > 0)
            __builtin_trap();
        cg_summary_cleanup(&s);
        return;
    }
    if (s.text == NULL || strlen(s.text) != s.text_len)
        __builtin_trap();
    if (valid_utf8 && !cg_utf8_valid(s.text, s.text_len, NULL))
        __builtin_trap();
    if (s.target_met != (s.tokens <= target))
        __builtin_trap();
    struct cg_summary back;
    cg_summary_init(&back);
    unsigned found = 0;
    if (cg_summary_parse(s.text, s.text_len, s.language, &back, &found, &err) == CG_OK) {
        /* Every heading is found (an item may read like a heading too, so the items
         * themselves are compared in the unit tests, not here). */
        if (found != (1u << CG_SUMMARY_SECTION_COUNT) - 1)
            __builtin_trap();
    }
    cg_summary_cleanup(&back);
    cg_summary_cleanup(&s);

    char **chunks = NULL;
    size_t n = 0;
    if (cg_summary_transcript(conv, 0, 0, 512, 300, &chunks, &n, &err) == CG_OK) {
        for (size_t i = 0; i < n; i++)
            if (strlen(chunks[i]) > 512)
                __builtin_trap();
        check_split(chunks, n);
        cg_summary_chunks_free(chunks, n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int64_t target = 64 + (int64_t)(data[0] & 0x7f) * 15;
    bool as_json = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    struct cg_summary parsed;
    cg_summary_init(&parsed);
    unsigned found;
    struct cg_err err = {0};
    if (cg_summary_parse(text, len, "en", &parsed, &found, &err) != CG_OK && err.code != CG_NOMEM)
        __builtin_trap();
    cg_summary_cleanup(&parsed);

    struct cg_conv *conv = NULL;
    bool valid = cg_utf8_valid(text, len, NULL);
    if (as_json) {
        if (cg_conv_json_read(CG_CONV_JSON_OPENAI, text, len, NULL, &conv, &err) != CG_OK)
            return 0;
        valid = true; /* the reader checked every string */
    } else {
        conv = cg_conv_new(NULL);
        if (conv == NULL)
            return 0;
        static const cg_role roles[] = {CG_ROLE_USER, CG_ROLE_ASSISTANT, CG_ROLE_TOOL};
        size_t start = 0, i = 0;
        for (size_t k = 0; k <= len; k++) {
            if (k < len && text[k] != '\0')
                continue;
            struct cg_message *m;
            struct cg_part *p;
            cg_role role = roles[i++ % 3];
            if (cg_conv_add_message(conv, role, &m, &err) != CG_OK ||
                cg_conv_add_part(conv, m, role == CG_ROLE_TOOL ? CG_PART_TOOL_RESULT : CG_PART_TEXT,
                                 &p, &err) != CG_OK ||
                cg_conv_str(conv, text + start, k - start,
                            role == CG_ROLE_TOOL ? &p->u.tool_result.content : &p->u.text,
                            &err) != CG_OK)
                break;
            start = k + 1;
        }
    }
    if (conv->n_messages > 0)
        check_summary(conv, target, valid);
    cg_conv_free(conv);
    return 0;
}

/* summary_llm.c - what an LLM summarizer sends: the prompt naming the six sections in the
 * summary's language, and the conversation as a transcript cut into chunks that fit the
 * model's budget (summary.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/summary.h"
#include "core/summary_internal.h"

char *cg_summary_prompt(const char *language, int64_t target_tokens, const char *focus,
                        size_t focus_len, bool partial)
{
    const struct cg__summary_lang *lang = cg__summary_lang_get(cg_summary_language(language));
    struct cg__summary_buf b = {0};
    char line[256];
    cg__summary_buf_str(&b, partial ? "You summarize one part of a longer session between a user "
                                      "and an AI agent (the parts are merged afterwards).\n"
                                    : "You summarize a session between a user and an AI agent so "
                                      "that the agent can continue from the summary alone.\n");
    snprintf(line, sizeof line,
             "Write in the language whose tag is \"%s\", at most %lld tokens, with exactly "
             "these six sections, each under its heading line as written here, in this "
             "order:\n",
             lang->tag, (long long)target_tokens);
    cg__summary_buf_str(&b, line);
    static const char *const what[CG_SUMMARY_SECTION_COUNT] = {
        "what the session is for (one paragraph)",
        "what has been done (one \"- \" line each)",
        "decisions made and why (one \"- \" line each)",
        "where things stand now (one paragraph)",
        "what remains to be done (one \"- \" line each)",
        ("values, paths, ids, numbers with units, config keys and versions that must survive, "
         "verbatim (one \"- \" line each)"),
    };
    for (int s = 0; s < CG_SUMMARY_SECTION_COUNT; s++) {
        cg__summary_buf_str(&b, "## ");
        cg__summary_buf_str(&b, lang->headings[s]);
        cg__summary_buf_str(&b, "\n(");
        cg__summary_buf_str(&b, what[s]);
        cg__summary_buf_str(&b, ")\n");
    }
    cg__summary_buf_str(&b, "Write \"-\" under a heading with nothing to say. Keep every specific "
                            "value exactly as written. Labels such as <EMAIL_1> stand for redacted "
                            "values: keep them as they are. Do not add anything that the text does "
                            "not say. Answer with the summary only.\n");
    if (focus != NULL && focus_len > 0) {
        cg__summary_buf_str(&b, "Emphasise: ");
        cg__summary_buf_add(&b, focus, focus_len);
        cg__summary_buf_str(&b, "\n");
    }
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

void cg_summary_chunks_free(char **chunks, size_t n)
{
    if (chunks == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(chunks[i]);
    free(chunks);
}

struct chunker {
    char **chunks;
    size_t n, cap;
    struct cg__summary_buf cur;
    size_t max;
    bool oom;
};

static void chunk_close(struct chunker *c)
{
    if (c->cur.len == 0 || c->oom)
        return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        char **p = realloc(c->chunks, cap * sizeof *p);
        if (p == NULL) {
            c->oom = true;
            return;
        }
        c->chunks = p;
        c->cap = cap;
    }
    c->chunks[c->n++] = c->cur.data;
    memset(&c->cur, 0, sizeof c->cur);
}

/* Appends s[0..len) to the transcript, starting a new chunk when it would not fit and
 * cutting a piece larger than a chunk at a character boundary. */
static void chunk_add(struct chunker *c, const char *s, size_t len)
{
    while (len > 0 && !c->oom) {
        if (c->cur.len > 0 && c->cur.len + len > c->max)
            chunk_close(c);
        size_t n = len;
        if (n > c->max - c->cur.len) {
            n = c->max - c->cur.len;
            while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
                n--;
            if (n == 0)
                n = len < c->max ? len : c->max;
        }
        if (!cg__summary_buf_add(&c->cur, s, n))
            c->oom = true;
        s += n;
        len -= n;
        if (len > 0)
            chunk_close(c);
    }
}

static void chunk_str(struct chunker *c, const char *s)
{
    chunk_add(c, s, strlen(s));
}

cg_status cg_summary_transcript(const struct cg_conv *conv, size_t from, size_t to,
                                size_t max_chunk_bytes, size_t tool_result_bytes, char ***chunks,
                                size_t *n_chunks, struct cg_err *err)
{
    *chunks = NULL;
    *n_chunks = 0;
    if (to == 0)
        to = conv->n_messages;
    if (from >= to || to > conv->n_messages)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "messages [%zu, %zu) out of range", from, to);
    if (max_chunk_bytes < 256)
        max_chunk_bytes = 256;
    struct chunker c = {.max = max_chunk_bytes};
    char tmp[64];
    for (size_t m = from; m < to && !c.oom; m++) {
        const struct cg_message *msg = &conv->messages[m];
        /* A message starts a new chunk when its head would not fit in this one. */
        if (c.cur.len > 0 && c.cur.len + 200 > c.max)
            chunk_close(&c);
        chunk_str(&c, cg_conv_role_name(msg->role));
        chunk_str(&c, ":");
        for (size_t p = 0; p < msg->n_parts; p++) {
            const struct cg_part *part = &msg->parts[p];
            switch (part->kind) {
            case CG_PART_TEXT:
                chunk_str(&c, " ");
                if (msg->role == CG_ROLE_TOOL && part->u.text.len > tool_result_bytes) {
                    chunk_add(&c, part->u.text.ptr, tool_result_bytes);
                    snprintf(tmp, sizeof tmp, " [... %zu more bytes]",
                             part->u.text.len - tool_result_bytes);
                    chunk_str(&c, tmp);
                } else {
                    chunk_add(&c, part->u.text.ptr, part->u.text.len);
                }
                break;
            case CG_PART_TOOL_CALL:
                chunk_str(&c, " [tool_call ");
                chunk_add(&c, part->u.tool_call.name.ptr, part->u.tool_call.name.len);
                chunk_str(&c, " ");
                if (part->u.tool_call.arguments.len > tool_result_bytes) {
                    chunk_add(&c, part->u.tool_call.arguments.ptr, tool_result_bytes);
                    chunk_str(&c, " ...");
                } else {
                    chunk_add(&c, part->u.tool_call.arguments.ptr, part->u.tool_call.arguments.len);
                }
                chunk_str(&c, "]");
                break;
            case CG_PART_TOOL_RESULT: {
                const struct cg_str *r = &part->u.tool_result.content;
                chunk_str(&c, part->u.tool_result.is_error ? " [tool_result error] "
                                                           : " [tool_result] ");
                size_t n = r->len > tool_result_bytes ? tool_result_bytes : r->len;
                chunk_add(&c, r->ptr, n);
                if (n < r->len) {
                    snprintf(tmp, sizeof tmp, " [... %zu more bytes]", r->len - n);
                    chunk_str(&c, tmp);
                }
                break;
            }
            case CG_PART_IMAGE:
                chunk_str(&c, " [image]");
                break;
            default:
                break;
            }
        }
        chunk_str(&c, "\n");
    }
    chunk_close(&c);
    if (c.oom) {
        free(c.cur.data);
        cg_summary_chunks_free(c.chunks, c.n);
        return cg_err_set(err, CG_NOMEM, "out of memory for the transcript");
    }
    *chunks = c.chunks;
    *n_chunks = c.n;
    return CG_OK;
}

char *cg_summary_join(char **texts, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(texts[i]) + 2;
    char *out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(texts[i]);
        memcpy(out + pos, texts[i], l);
        pos += l;
        memcpy(out + pos, "\n\n", 2);
        pos += 2;
    }
    out[pos] = '\0';
    return out;
}

char **cg_summary_split(const char *text, size_t max, size_t *n_out)
{
    size_t len = strlen(text), cap = len / max + 2, n = 0;
    char **out = calloc(cap, sizeof *out);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    while (pos < len) {
        size_t end = len - pos <= max ? len : pos + max;
        if (end < len) {
            size_t nl = end;
            while (nl > pos + max / 2 && text[nl - 1] != '\n')
                nl--;
            if (text[nl - 1] == '\n')
                end = nl;
            while (end > pos + 1 && ((unsigned char)text[end] & 0xc0) == 0x80)
                end--;
        }
        if (n == cap) {
            char **p = realloc(out, 2 * cap * sizeof *out);
            if (p == NULL)
                break;
            out = p;
            cap *= 2;
        }
        out[n] = strndup(text + pos, end - pos);
        if (out[n] == NULL)
            break;
        n++;
        pos = end;
    }
    if (pos < len) {
        cg_summary_chunks_free(out, n);
        return NULL;
    }
    *n_out = n;
    return out;
}

/* compress_text.c - the cascade's work on single texts: L1 tool-result compaction (JSON stays
 * JSON), L2 write-argument compaction, <checkpoint_id> stripping, and the built-in counter.
 * Pure; jansson for every JSON read and written.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/compress.h"
#include "core/compress_internal.h"
#include "core/conv_json.h"
#include "core/estimate.h"
#include "core/json_fast.h"
#include "core/tok.h"

#define JSON_KEEP 3        /* keys of an object, elements of an array */
#define JSON_VALUE_MAX 100 /* characters of a kept value */
#define WRITE_PREVIEW 100  /* characters of a compacted write argument */

size_t cg__compress_utf8_cut(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    /* Back up over continuation bytes so a character is never split. */
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return n;
}

/* A value of at most JSON_VALUE_MAX characters: strings cut, big composites replaced by a
 * string holding the head of their compact text. Returns a new reference or NULL. */
static json_t *cut_value(json_t *v)
{
    if (json_is_string(v)) {
        size_t len = json_string_length(v);
        if (len <= JSON_VALUE_MAX)
            return json_incref(v);
        const char *s = json_string_value(v);
        size_t n = cg__compress_utf8_cut(s, len, JSON_VALUE_MAX);
        char buf[JSON_VALUE_MAX + 64];
        int w = snprintf(buf, sizeof buf, "%.*s...[%zu chars]", (int)n, s, len);
        return json_stringn(buf, (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1);
    }
    if (!json_is_object(v) && !json_is_array(v))
        return json_incref(v);
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (text == NULL)
        return NULL;
    size_t len = strlen(text);
    json_t *r;
    if (len <= JSON_VALUE_MAX) {
        r = json_incref(v);
    } else {
        size_t n = cg__compress_utf8_cut(text, len, JSON_VALUE_MAX);
        char buf[JSON_VALUE_MAX + 64];
        int w = snprintf(buf, sizeof buf, "%.*s...[%zu chars]", (int)n, text, len);
        r = json_stringn(buf, (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1);
    }
    free(text);
    return r;
}

static bool json_compact(json_t *root, size_t len, const char *where, char **out, size_t *out_len)
{
    json_t *small = NULL;
    char note[224];
    if (json_is_object(root)) {
        small = json_object();
        size_t i = 0;
        const char *key;
        json_t *value;
        json_object_foreach(root, key, value)
        {
            if (i++ == JSON_KEEP)
                break;
            json_t *cut = cut_value(value);
            if (cut == NULL || json_object_set_new(small, key, cut) != 0) {
                json_decref(small);
                return false;
            }
        }
        snprintf(note, sizeof note, "showing %d of %zu keys, %zu chars in all%s%s",
                 (int)(json_object_size(root) < JSON_KEEP ? json_object_size(root) : JSON_KEEP),
                 json_object_size(root), len, where ? "; the whole result: " : "",
                 where ? where : "");
        json_object_set_new(small, "[ctxguard]", json_string(note));
    } else {
        small = json_array();
        size_t n = json_array_size(root);
        for (size_t i = 0; i < n && i < JSON_KEEP; i++) {
            json_t *cut = cut_value(json_array_get(root, i));
            if (cut == NULL || json_array_append_new(small, cut) != 0) {
                json_decref(small);
                return false;
            }
        }
        snprintf(note, sizeof note, "[ctxguard] showing %d of %zu elements, %zu chars in all%s%s",
                 (int)(n < JSON_KEEP ? n : JSON_KEEP), n, len, where ? "; the whole result: " : "",
                 where ? where : "");
        json_array_append_new(small, json_string(note));
    }
    char *text = json_dumps(small, JSON_COMPACT);
    json_decref(small);
    if (text == NULL)
        return false;
    *out = text;
    *out_len = strlen(text);
    return true;
}

bool cg_compress_tool_text(const char *content, size_t len, size_t target_chars, const char *where,
                           char **out, size_t *out_len)
{
    if (len <= target_chars)
        return false;
    if (cg_conv_json_is_valid(content, len, false)) {
        json_error_t jerr;
        json_t *root = cg_json_load(content, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (root != NULL && (json_is_object(root) || json_is_array(root))) {
            bool ok = json_compact(root, len, where, out, out_len);
            json_decref(root);
            if (ok && *out_len < len)
                return true;
            if (ok)
                free(*out);
        } else {
            json_decref(root);
        }
    }
    char marker[192];
    size_t keep = cg__compress_utf8_cut(content, len, target_chars);
    int m = snprintf(marker, sizeof marker, "\n[ctxguard: truncated, %zu of %zu bytes shown%s%s]",
                     keep, len, where ? "; the whole result: " : "", where ? where : "");
    char *text = malloc(keep + (size_t)m + 1);
    if (text == NULL)
        return false;
    memcpy(text, content, keep);
    memcpy(text + keep, marker, (size_t)m + 1);
    *out = text;
    *out_len = keep + (size_t)m;
    return true;
}

bool cg__compress_write_args(const char *args, size_t len, char **out, size_t *out_len)
{
    if (len <= WRITE_PREVIEW || !cg_conv_json_is_valid(args, len, true))
        return false;
    json_error_t jerr;
    json_t *root = cg_json_load(args, len, JSON_ALLOW_NUL, &jerr);
    if (root == NULL)
        return false;
    bool changed = false;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        if (!json_is_string(value) || json_string_length(value) <= WRITE_PREVIEW)
            continue;
        const char *s = json_string_value(value);
        size_t slen = json_string_length(value);
        size_t n = cg__compress_utf8_cut(s, slen, WRITE_PREVIEW);
        char buf[WRITE_PREVIEW + 96];
        int w = snprintf(buf, sizeof buf, "%.*s...[ctxguard: %zu chars, written to disk]", (int)n,
                         s, slen);
        json_object_set_new(root, key,
                            json_stringn(buf, (size_t)w < sizeof buf ? (size_t)w : sizeof buf - 1));
        changed = true;
    }
    char *text = changed ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (text == NULL)
        return false;
    *out = text;
    *out_len = strlen(text);
    if (*out_len >= len) {
        free(text);
        return false;
    }
    return true;
}

/* Finds "<checkpoint_id>" ... "</checkpoint_id>" in s[0..len) from `from`. */
static const char *find(const char *s, size_t len, size_t from, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = from; i + n <= len; i++)
        if (s[i] == '<' && memcmp(s + i, needle, n) == 0)
            return s + i;
    return NULL;
}

bool cg__compress_strip_checkpoints(const char *s, size_t len, char **out, size_t *out_len)
{
    static const char open[] = "<checkpoint_id>", close[] = "</checkpoint_id>";
    const char *first = find(s, len, 0, open);
    if (first == NULL)
        return false;
    char *buf = malloc(len + 1);
    if (buf == NULL)
        return false;
    size_t w = 0, at = 0;
    for (;;) {
        const char *o = find(s, len, at, open);
        const char *c = o == NULL ? NULL : find(s, len, (size_t)(o - s) + sizeof open - 1, close);
        if (o == NULL || c == NULL) {
            memcpy(buf + w, s + at, len - at);
            w += len - at;
            break;
        }
        memcpy(buf + w, s + at, (size_t)(o - s) - at);
        w += (size_t)(o - s) - at;
        at = (size_t)(c - s) + sizeof close - 1;
    }
    buf[w] = '\0';
    if (w == len) {
        free(buf);
        return false;
    }
    *out = buf;
    *out_len = w;
    return true;
}

/* ------------------------------------------------------------------ counting ---------- */

static int64_t text_count(const struct cg_compress_count_state *st, const struct cg_str *s)
{
    if (s->len == 0)
        return 0;
    if (st->enc != NULL)
        return cg_tok_count_cached(st->enc, st->cache, s->ptr, s->len, false);
    double t = (double)cg_estimate_text(st->profile, s->ptr, s->len);
    if (st->calibration > 0)
        t *= st->calibration;
    return (int64_t)(t + 0.999);
}

static int64_t count_message(void *ctx, const struct cg_message *m)
{
    const struct cg_compress_count_state *st = ctx;
    int64_t total = 4, n; /* framing and the role */
    if (m->name.len > 0) {
        if ((n = text_count(st, &m->name)) < 0)
            return -1;
        total += n + 1;
    }
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        switch (p->kind) {
        case CG_PART_TEXT:
            n = text_count(st, &p->u.text);
            break;
        case CG_PART_TOOL_CALL: {
            int64_t a = text_count(st, &p->u.tool_call.id),
                    b = text_count(st, &p->u.tool_call.name),
                    c = text_count(st, &p->u.tool_call.arguments);
            n = (a < 0 || b < 0 || c < 0) ? -1 : a + b + c + 3;
            break;
        }
        case CG_PART_TOOL_RESULT: {
            const struct cg_tool_result *r = &p->u.tool_result;
            int64_t a = text_count(st, &r->tool_call_id), b = text_count(st, &r->content);
            n = (a < 0 || b < 0) ? -1 : a + b + 3;
            for (size_t k = 0; n >= 0 && k < r->n_images; k++)
                n += cg_estimate_image(st->profile, r->images[k].width, r->images[k].height,
                                       r->images[k].detail.ptr);
            break;
        }
        case CG_PART_IMAGE:
            n = cg_estimate_image(st->profile, p->u.image.width, p->u.image.height,
                                  p->u.image.detail.ptr);
            break;
        case CG_PART_REASONING:
            n = text_count(st, &p->u.reasoning.text);
            break;
        default:
            n = 0;
        }
        if (n < 0)
            return -1;
        total += n;
    }
    return total;
}

bool cg__compress_counter_is_builtin(const struct cg_compress_counter *c)
{
    return c->count_message == count_message && c->ctx != NULL;
}

void cg_compress_counter_init(struct cg_compress_counter *c, struct cg_compress_count_state *state,
                              const struct cg_conv *conv)
{
    c->count_message = count_message;
    c->ctx = state;
    c->exact = state->enc != NULL;
    int64_t tools = 0;
    if (conv != NULL && conv->n_tools > 0) {
        if (state->enc != NULL) {
            for (size_t i = 0; i < conv->n_tools; i++) {
                const struct cg_tool_def *t = &conv->tools[i];
                tools += text_count(state, &t->name) + text_count(state, &t->description) +
                         text_count(state, &t->parameters) + 8;
            }
            tools += 12;
        } else {
            tools = cg_estimate_tools(state->profile, conv);
        }
    }
    c->fixed_tokens = 3 + tools;
}

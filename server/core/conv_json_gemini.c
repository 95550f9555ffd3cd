/* conv_json_gemini.c - Google Gemini generateContent JSON <-> the conversation model: a bare
 * array of Content objects, or a request body with "contents", "systemInstruction", "tools",
 * "model" and other keys (generationConfig, safetySettings, ...) kept in top_extra.
 *
 * Mapping. role "user" (or absent/null, or the legacy "function"/"tool") is USER, "model" is
 * ASSISTANT; systemInstruction is a leading SYSTEM message (system_form PARTS). Parts: text ->
 * TEXT; text with "thought": true -> REASONING (thoughtSignature in reasoning.signature);
 * inlineData -> IMAGE with its decoded bytes (any mime type: audio and PDF are carried the same
 * way); fileData -> IMAGE by URL; functionCall -> TOOL_CALL (args as compact JSON text; no id:
 * "ctxguard-gemini-<message>-<part>", never written back); functionResponse -> TOOL_RESULT in
 * the USER message (no id: the earliest unanswered call of that name, else a generated id).
 * A response {"output": "<text>"} or {"error": "<text>"} is read as that text (is_error for
 * "error") and written so again; any other response object is kept as its compact JSON text.
 * Both key spellings are read (inlineData, inline_data); the first multi-word key decides
 * conv->snake_keys, and the document is written in that one spelling. Refused with the path:
 * executableCode and codeExecutionResult parts, a part with no data (videoMetadata alone),
 * multimodal functionResponse "parts", a "system" role inside contents.
 *
 * Round trip (same format): JSON-equal, except: base64 is written back in the standard
 * alphabet with padding; a document mixing spellings is written in one; several
 * functionDeclarations entries (or one tool entry with several kinds) become one entry of all
 * declarations at the first one's place plus one entry per other kind; an empty
 * functionDeclarations list, an empty fileData mimeType, "systemInstruction": null and an
 * explicit "thoughtSignature": "" on a thought are dropped; "tools": null is written as []. What
 * the model cannot hold is kept in `extra`, with private markers under keys the reader owns (a
 * value the reader would reject, so never ambiguous): a content's "role" false (absent), null or
 * "function"/"tool"; inside a part's "functionCall"/"functionResponse" extra, "args" false (absent,
 * written back only while the arguments are still {}) and "id" false (absent, the id was matched by
 * name); a declaration's "parametersJsonSchema": true (the schema's key).
 *
 * From other formats: TOOL messages and a following USER message become one user content of
 * functionResponse parts; a result's images follow its functionResponse as parts; a text
 * result is {"output": text} ({"error": text} when is_error), a JSON-object result the object;
 * leading system/developer messages become systemInstruction (a later one is an error); message
 * names, image detail, cache breakpoints, Anthropic signatures and redacted reasoning are
 * dropped, and so is a content left with no parts; schemas go under parametersJsonSchema
 * (JSON Schema, which "parameters" is not); built-in tools of other formats are an error; the
 * first function call of each model content of the current turn carries Google's documented
 * sentinel signature, without which Gemini 3 refuses it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json_internal.h"

#define GEN_PREFIX "ctxguard-gemini-"
#define GEN_PREFIX_LEN (sizeof GEN_PREFIX - 1)
#define ID_MATCH_WINDOW 64 /* queued calls searched for a response's explicit id */
#define NONE SIZE_MAX

static const char supported_kinds[] = "text, inlineData, fileData, functionCall, functionResponse";

/* ------------------------------------------------------------ a small string table ---- */

/* Open addressing on the bytes of a conversation string (the strings outlive the table). The
 * reader keys calls by function name, the writer calls by id; a and b are the user's. */
struct slot {
    struct cg_str key, text;
    size_t a, b;
    bool used;
};

struct table {
    struct slot *slots;
    size_t cap, n;
};

static size_t hash_str(const struct cg_str *s)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < s->len; i++)
        h = (h ^ (unsigned char)s->ptr[i]) * 1099511628211u;
    return (size_t)h;
}

static bool str_eq(const struct cg_str *x, const struct cg_str *y)
{
    return x->len == y->len && memcmp(x->ptr, y->ptr, x->len) == 0;
}

static struct slot *table_probe(struct slot *slots, size_t cap, const struct cg_str *key)
{
    size_t i = hash_str(key) & (cap - 1);
    while (slots[i].used && !str_eq(&slots[i].key, key))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static struct slot *table_find(const struct table *t, const struct cg_str *key)
{
    if (t->cap == 0)
        return NULL;
    struct slot *s = table_probe(t->slots, t->cap, key);
    return s->used ? s : NULL;
}

/* The slot of key, added (a = b = NONE) when new; NULL when out of memory. */
static struct slot *table_add(struct table *t, const struct cg_str *key)
{
    if ((t->n + 1) * 2 > t->cap) {
        size_t cap = t->cap == 0 ? 16 : t->cap * 2;
        struct slot *slots = calloc(cap, sizeof *slots);
        if (slots == NULL)
            return NULL;
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i].used)
                *table_probe(slots, cap, &t->slots[i].key) = t->slots[i];
        free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    struct slot *s = table_probe(t->slots, t->cap, key);
    if (!s->used) {
        *s = (struct slot){.key = *key, .a = NONE, .b = NONE, .used = true};
        t->n++;
    }
    return s;
}

static bool is_generated(const struct cg_str *id)
{
    return id->len >= GEN_PREFIX_LEN && memcmp(id->ptr, GEN_PREFIX, GEN_PREFIX_LEN) == 0;
}

/* Whether a tool result's text is a JSON object (written as itself, not wrapped). */
static bool is_object_text(const struct cg_str *s)
{
    if (s->len == 0)
        return false;
    json_t *v = cg__cj_parse_object_or_empty(s);
    json_decref(v);
    return v != NULL;
}

/* ------------------------------------------------------------------ reading ----------- */

/* A function call waiting for its response; queued per name through `next`. */
struct pending {
    struct cg_str id;
    size_t next;
    bool answered;
};

struct gread {
    struct ctx *c;
    bool spelling_decided;
    struct pending *calls;
    size_t n_calls, cap_calls;
    struct table by_name; /* a: first queued call, b: last */
};

static cg_status oom(struct ctx *c)
{
    return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
}

/* obj's value under its camelCase or snake_case key (*key: the one found, else camel). The
 * first such key decides the document's spelling; both at once is an error. */
static cg_status pick(struct gread *g, json_t *obj, const char *camel, const char *snake,
                      json_t **value, const char **key)
{
    json_t *a = json_object_get(obj, camel), *b = json_object_get(obj, snake);
    if (a != NULL && b != NULL)
        return cg__cj_fail(g->c, CG_INVALID_ARGUMENT, "both \"%s\" and \"%s\"", camel, snake);
    if (!g->spelling_decided && (a != NULL || b != NULL)) {
        g->spelling_decided = true;
        g->c->conv->snake_keys = b != NULL;
    }
    *value = a != NULL ? a : b;
    if (key != NULL)
        *key = b != NULL ? snake : camel;
    return CG_OK;
}

static cg_status get_str2(struct gread *g, json_t *obj, const char *camel, const char *snake,
                          bool required, struct cg_str *out)
{
    json_t *v;
    const char *key = camel;
    cg_status st = pick(g, obj, camel, snake, &v, &key);
    return st != CG_OK ? st : cg__cj_get_string(g->c, obj, key, required, out);
}

/* A copy of obj without the keys in skip (NULL-terminated); NULL when out of memory. */
static json_t *copy_except(json_t *obj, const char *const *skip)
{
    json_t *out = json_object();
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool skipped = false;
        for (const char *const *k = skip; *k != NULL && !skipped; k++)
            skipped = strcmp(*k, key) == 0;
        if (!skipped && out != NULL && json_object_set(out, key, v) != 0) {
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

/* Stores extra (taken) as *out's JSON text when it has keys. */
static cg_status store_extra(struct ctx *c, json_t *extra, struct cg_str *out)
{
    if (extra == NULL)
        return oom(c);
    cg_status st = json_object_size(extra) > 0 ? cg__cj_dump_value(c, extra, out) : CG_OK;
    json_decref(extra);
    return st;
}

/* The part's unknown keys, with the unknown keys of its wrapper object (inner_extra, taken,
 * may be NULL) under the wrapper's camelCase name so that either spelling finds them. */
static cg_status part_extra(struct ctx *c, json_t *part, const char *const *skip, const char *canon,
                            json_t *inner_extra, struct cg_part *p)
{
    json_t *extra = copy_except(part, skip);
    if (extra != NULL && inner_extra != NULL && json_object_size(inner_extra) > 0)
        json_object_set(extra, canon, inner_extra);
    json_decref(inner_extra);
    return store_extra(c, extra, &p->extra);
}

static cg_status reserved_id(struct ctx *c, const struct cg_str *id)
{
    if (!is_generated(id))
        return CG_OK;
    size_t saved = cg__cj_path_push(c, ".id");
    cg_status st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                               "the prefix \"" GEN_PREFIX "\" is reserved for ids ctxguard makes");
    cg__cj_path_pop(c, saved);
    return st;
}

/* "ctxguard-gemini-<message>-<part>" for a call or response that came without an id. */
static cg_status generated_id(struct ctx *c, size_t mi, size_t pi, struct cg_str *out)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, GEN_PREFIX "%zu-%zu", mi, pi);
    cg_status st = cg_conv_str(c->conv, buf, (size_t)n, out, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

/* An optional id: *present says whether obj had one (checked like every id). */
static cg_status optional_id(struct ctx *c, json_t *obj, struct cg_str *out, bool *present)
{
    json_t *v = json_object_get(obj, "id");
    *present = v != NULL && !json_is_null(v);
    if (!*present)
        return CG_OK;
    cg_status st = cg__cj_get_id(c, obj, "id", out);
    return st != CG_OK ? st : reserved_id(c, out);
}

/* Queues a call so that a later response without an id finds it by name. */
static cg_status remember_call(struct gread *g, const struct cg_str *name, const struct cg_str *id)
{
    if (g->n_calls == g->cap_calls) {
        size_t cap = g->cap_calls == 0 ? 16 : g->cap_calls * 2;
        struct pending *calls = realloc(g->calls, cap * sizeof *calls);
        if (calls == NULL)
            return oom(g->c);
        g->calls = calls;
        g->cap_calls = cap;
    }
    struct slot *q = table_add(&g->by_name, name);
    if (q == NULL)
        return oom(g->c);
    size_t i = g->n_calls++;
    g->calls[i] = (struct pending){.id = *id, .next = NONE};
    if (q->a == NONE)
        q->a = i;
    else
        g->calls[q->b].next = i;
    q->b = i;
    return CG_OK;
}

/* The earliest unanswered call named name (FIFO), marked answered; false when none. */
static bool take_call(struct gread *g, const struct cg_str *name, struct cg_str *id)
{
    struct slot *q = table_find(&g->by_name, name);
    while (q != NULL && q->a != NONE && g->calls[q->a].answered)
        q->a = g->calls[q->a].next;
    if (q == NULL || q->a == NONE)
        return false;
    *id = g->calls[q->a].id;
    g->calls[q->a].answered = true;
    q->a = g->calls[q->a].next;
    return true;
}

/* A response that names its call's id answers it (searched near the queue's head only, so that
 * hostile input cannot make this quadratic). */
static void answer_by_id(struct gread *g, const struct cg_str *name, const struct cg_str *id)
{
    struct slot *q = table_find(&g->by_name, name);
    size_t i = q != NULL ? q->a : NONE;
    for (int k = 0; i != NONE && k < ID_MATCH_WINDOW; k++, i = g->calls[i].next) {
        if (!g->calls[i].answered && str_eq(&g->calls[i].id, id)) {
            g->calls[i].answered = true;
            return;
        }
    }
}

/* Base64 bytes into an image's data (decoded size, dimensions when the header says). */
static cg_status decode_data(struct ctx *c, const struct cg_str *b64, struct cg_image *im)
{
    size_t cap = b64->len / 4 * 3 + 3;
    unsigned char *bytes = cg_conv_alloc(c->conv, cap + 1, 1);
    if (bytes == NULL)
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
    size_t n = cg__cj_b64_decode(b64->ptr, b64->len, bytes, cap);
    if (n == SIZE_MAX) {
        size_t saved = cg__cj_path_push(c, ".data");
        cg_status st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "not base64");
        cg__cj_path_pop(c, saved);
        return st;
    }
    im->data = (struct cg_str){(const char *)bytes, n};
    im->source = CG_IMAGE_SOURCE_DATA;
    im->size_bytes = (int64_t)n;
    cg_conv_image_sniff(bytes, n, &im->width, &im->height);
    return CG_OK;
}

static const char *const inline_inner[] = {"mimeType", "mime_type", "data", NULL};
static const char *const file_inner[] = {"mimeType", "mime_type", "fileUri", "file_uri", NULL};

/* inlineData (bytes) or fileData (a URI) into an image part. */
static cg_status read_media(struct gread *g, json_t *v, bool inline_data, struct cg_part *p)
{
    struct ctx *c = g->c;
    struct cg_image *im = &p->u.image;
    cg_status st = cg__cj_expect_object(c, v);
    if (st == CG_OK && inline_data) {
        struct cg_str b64 = {"", 0};
        if ((st = get_str2(g, v, "mimeType", "mime_type", true, &im->media_type)) == CG_OK &&
            (st = cg__cj_get_string(c, v, "data", true, &b64)) == CG_OK)
            st = decode_data(c, &b64, im);
    } else if (st == CG_OK) {
        if ((st = get_str2(g, v, "mimeType", "mime_type", false, &im->media_type)) == CG_OK &&
            (st = get_str2(g, v, "fileUri", "file_uri", true, &im->url)) == CG_OK) {
            im->source = CG_IMAGE_SOURCE_URL;
            cg__cj_describe_data_url(im);
        }
    }
    return st;
}

/* functionCall: name, args (an object; absent means {}), id (else generated). */
static cg_status read_call(struct gread *g, json_t *v, struct cg_part *p, size_t mi, size_t pi,
                           json_t *inner_extra)
{
    struct ctx *c = g->c;
    struct cg_tool_call *call = &p->u.tool_call;
    bool has_id;
    cg_status st = cg__cj_get_id(c, v, "name", &call->name);
    if (st == CG_OK && (st = optional_id(c, v, &call->id, &has_id)) == CG_OK && !has_id)
        st = generated_id(c, mi, pi, &call->id);
    json_t *args = json_object_get(v, "args");
    if (st != CG_OK)
        return st;
    size_t saved = cg__cj_path_push(c, ".args");
    if (args == NULL || json_is_null(args)) {
        st = cg_conv_str(c->conv, "{}", 2, &call->arguments, c->err);
        st = st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
        if (args == NULL)
            json_object_set_new(inner_extra, "args", json_false());
    } else if (json_is_object(args)) {
        st = cg__cj_dump_value(c, args, &call->arguments);
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s",
                         cg__cj_type_name(args));
    }
    cg__cj_path_pop(c, saved);
    return st == CG_OK ? remember_call(g, &call->name, &call->id) : st;
}

/* A response's content: {"output": text} (the key Gemini documents for a function's output)
 * and {"error": text} unwrapped, else the object. */
static cg_status response_content(struct ctx *c, json_t *resp, struct cg_tool_result *r)
{
    json_t *text = NULL;
    if (json_object_size(resp) == 1) {
        json_t *e = json_object_get(resp, "error"), *res = json_object_get(resp, "output");
        if (json_is_string(e)) {
            text = e;
            r->is_error = true;
        } else if (json_is_string(res)) {
            struct cg_str s = {json_string_value(res), json_string_length(res)};
            text = is_object_text(&s) ? NULL : res; /* else it would come back unwrapped */
        }
    }
    if (text == NULL)
        return cg__cj_dump_value(c, resp, &r->content);
    cg_status st = cg_conv_str(c->conv, json_string_value(text), json_string_length(text),
                               &r->content, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

/* functionResponse: name, response (an object), id (else the FIFO call of that name). */
static cg_status read_response(struct gread *g, json_t *v, struct cg_part *p, size_t mi, size_t pi,
                               json_t *inner_extra)
{
    struct ctx *c = g->c;
    struct cg_tool_result *r = &p->u.tool_result;
    bool has_id;
    cg_status st = cg__cj_get_id(c, v, "name", &r->tool_name);
    if (st == CG_OK && json_object_get(v, "parts") != NULL) {
        size_t saved = cg__cj_path_push(c, ".parts");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "multimodal function responses are not supported");
        cg__cj_path_pop(c, saved);
    }
    if (st != CG_OK || (st = optional_id(c, v, &r->tool_call_id, &has_id)) != CG_OK)
        return st;
    json_t *resp = json_object_get(v, "response");
    size_t saved = cg__cj_path_push(c, ".response");
    if (resp == NULL)
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    else if (!json_is_object(resp))
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s",
                         cg__cj_type_name(resp));
    else
        st = response_content(c, resp, r);
    cg__cj_path_pop(c, saved);
    if (st != CG_OK)
        return st;
    if (has_id) {
        answer_by_id(g, &r->tool_name, &r->tool_call_id);
    } else if (!take_call(g, &r->tool_name, &r->tool_call_id)) {
        st = generated_id(c, mi, pi, &r->tool_call_id); /* an orphan: validation says so */
    } else if (!is_generated(&r->tool_call_id)) {
        json_object_set_new(inner_extra, "id", json_false()); /* matched by name: keep it so */
    }
    return st;
}

/* The data key a part holds (index into data_keys) and its value; exactly one is allowed. */
static const char *const data_keys[][2] = {{"text", "text"},
                                           {"inlineData", "inline_data"},
                                           {"fileData", "file_data"},
                                           {"functionCall", "function_call"},
                                           {"functionResponse", "function_response"}};
enum { KIND_TEXT, KIND_INLINE, KIND_FILE, KIND_CALL, KIND_RESPONSE, N_KINDS };

static cg_status unsupported_kind(struct ctx *c, json_t *part)
{
    static const char *const meta[] = {"thought", "thoughtSignature", "thought_signature", NULL};
    const char *key;
    json_t *v;
    json_object_foreach(part, key, v)
    {
        bool is_meta = false;
        for (const char *const *k = meta; *k != NULL && !is_meta; k++)
            is_meta = strcmp(*k, key) == 0;
        if (is_meta)
            continue;
        char shown[KEY_SHOWN_MAX + 1];
        cg__cj_show_key(shown, sizeof shown, key, strlen(key));
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "unsupported part kind \"%s\" (supported: %s)",
                           shown, supported_kinds);
    }
    return cg__cj_fail(c, CG_INVALID_ARGUMENT, "a part needs one of %s", supported_kinds);
}

static cg_status part_kind(struct gread *g, json_t *part, int *kind, json_t **value,
                           const char **key)
{
    static const char *const unsupported[] = {"executableCode", "executable_code",
                                              "codeExecutionResult", "code_execution_result", NULL};
    for (const char *const *k = unsupported; *k != NULL; k++)
        if (json_object_get(part, *k) != NULL)
            return unsupported_kind(g->c, part);
    *kind = -1;
    for (int k = 0; k < N_KINDS; k++) {
        json_t *v = json_object_get(part, "text");
        const char *found = "text";
        /* "text" is one word: it says nothing about the document's spelling. */
        cg_status st =
            k == KIND_TEXT ? CG_OK : pick(g, part, data_keys[k][0], data_keys[k][1], &v, &found);
        if (st != CG_OK)
            return st;
        if (v != NULL && *kind >= 0)
            return cg__cj_fail(g->c, CG_INVALID_ARGUMENT,
                               "a part holds one of %s, not both \"%s\" and \"%s\"",
                               supported_kinds, *key, found);
        if (v != NULL) {
            *kind = k;
            *value = v;
            *key = found;
        }
    }
    return *kind >= 0 ? CG_OK : unsupported_kind(g->c, part);
}

/* A text part, or a thought (REASONING) when "thought" is true. */
static cg_status read_text(struct gread *g, json_t *part, struct cg_message *m)
{
    struct ctx *c = g->c;
    json_t *thought = json_object_get(part, "thought");
    if (thought != NULL && !json_is_boolean(thought) && !json_is_null(thought)) {
        size_t saved = cg__cj_path_push(c, ".thought");
        cg_status st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a boolean, got %s",
                                   cg__cj_type_name(thought));
        cg__cj_path_pop(c, saved);
        return st;
    }
    static const char *const text_skip[] = {"text", NULL};
    static const char *const thought_skip[] = {"text", "thought", "thoughtSignature",
                                               "thought_signature", NULL};
    bool is_thought = json_is_true(thought);
    struct cg_part *p;
    cg_status st = cg__cj_add_part(c, m, is_thought ? CG_PART_REASONING : CG_PART_TEXT, &p);
    if (st != CG_OK ||
        (st = cg__cj_get_string(c, part, "text", true,
                                is_thought ? &p->u.reasoning.text : &p->u.text)) != CG_OK)
        return st;
    if (is_thought && (st = get_str2(g, part, "thoughtSignature", "thought_signature", false,
                                     &p->u.reasoning.signature)) != CG_OK)
        return st;
    return part_extra(c, part, is_thought ? thought_skip : text_skip, NULL, NULL, p);
}

static cg_status role_misplaced(struct ctx *c, int kind, cg_role role)
{
    if (kind == KIND_CALL && role != CG_ROLE_ASSISTANT)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "only \"model\" contents hold function calls");
    if (kind == KIND_RESPONSE && role != CG_ROLE_USER)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT,
                           "function responses belong in \"user\" contents");
    return CG_OK;
}

/* A media, call or response part: the wrapper object at ".<key>" and its unknown keys. */
static cg_status read_wrapped(struct gread *g, json_t *part, struct cg_message *m, size_t mi,
                              int kind, json_t *v, const char *key)
{
    static const char *const call_inner[] = {"name", "args", "id", NULL};
    static const char *const response_inner[] = {"name", "response", "id", NULL};
    static const char *const *const inner_known[N_KINDS] = {NULL, inline_inner, file_inner,
                                                            call_inner, response_inner};
    static const cg_part_kind part_kinds[N_KINDS] = {CG_PART_TEXT, CG_PART_IMAGE, CG_PART_IMAGE,
                                                     CG_PART_TOOL_CALL, CG_PART_TOOL_RESULT};
    struct ctx *c = g->c;
    size_t saved = cg__cj_path_push(c, ".%s", key);
    struct cg_part *p = NULL;
    cg_status st = role_misplaced(c, kind, m->role);
    if (st == CG_OK && (st = cg__cj_expect_object(c, v)) == CG_OK)
        st = cg__cj_add_part(c, m, part_kinds[kind], &p);
    json_t *inner = st == CG_OK ? copy_except(v, inner_known[kind]) : NULL;
    if (st == CG_OK && inner == NULL)
        st = oom(c);
    size_t pi = m->n_parts - 1;
    if (st == CG_OK && (kind == KIND_INLINE || kind == KIND_FILE))
        st = read_media(g, v, kind == KIND_INLINE, p);
    else if (st == CG_OK && kind == KIND_CALL)
        st = read_call(g, v, p, mi, pi, inner);
    else if (st == CG_OK)
        st = read_response(g, v, p, mi, pi, inner);
    cg__cj_path_pop(c, saved);
    const char *const skip[] = {key, NULL};
    if (st == CG_OK)
        return part_extra(c, part, skip, data_keys[kind][0], inner, p);
    json_decref(inner);
    return st;
}

static cg_status read_part(struct gread *g, json_t *part, struct cg_message *m, size_t mi)
{
    int kind = KIND_TEXT;
    json_t *v = NULL;
    const char *key = NULL;
    cg_status st = cg__cj_expect_object(g->c, part);
    if (st == CG_OK)
        st = part_kind(g, part, &kind, &v, &key);
    if (st != CG_OK)
        return st;
    return kind == KIND_TEXT ? read_text(g, part, m) : read_wrapped(g, part, m, mi, kind, v, key);
}

/* A content's role; *marker (a new value, or NULL) records a spelling the model does not keep:
 * false for no role, null, or the legacy "function"/"tool". */
static cg_status read_role(struct ctx *c, json_t *content, cg_role *role, json_t **marker)
{
    json_t *r = json_object_get(content, "role");
    const char *s = json_string_value(r);
    *role = CG_ROLE_USER;
    *marker = NULL;
    if (r == NULL || json_is_null(r)) {
        *marker = r == NULL ? json_false() : json_null();
        return CG_OK;
    }
    if (s != NULL && strcmp(s, "model") == 0)
        *role = CG_ROLE_ASSISTANT;
    else if (s != NULL && (strcmp(s, "function") == 0 || strcmp(s, "tool") == 0))
        *marker = json_string(s);
    else if (s == NULL || strcmp(s, "user") != 0) {
        char shown[KEY_SHOWN_MAX + 1];
        if (s != NULL)
            cg__cj_show_key(shown, sizeof shown, s, json_string_length(r));
        size_t saved = cg__cj_path_push(c, ".role");
        cg_status st = s == NULL
                           ? cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s",
                                         cg__cj_type_name(r))
                           : cg__cj_fail(c, CG_INVALID_ARGUMENT,
                                         "unknown role \"%s\" (Gemini contents are \"user\" or "
                                         "\"model\"; system prompts go in systemInstruction)",
                                         shown);
        cg__cj_path_pop(c, saved);
        return st;
    }
    return CG_OK;
}

/* The parts array of a content into m (message mi). */
static cg_status read_parts(struct gread *g, json_t *content, struct cg_message *m, size_t mi)
{
    struct ctx *c = g->c;
    json_t *parts = json_object_get(content, "parts");
    size_t saved = cg__cj_path_push(c, ".parts");
    cg_status st = CG_OK;
    if (!json_is_array(parts))
        st = parts == NULL ? cg__cj_fail(c, CG_INVALID_ARGUMENT, "required")
                           : cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an array, got %s",
                                         cg__cj_type_name(parts));
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part)
    {
        if (st != CG_OK)
            break;
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        st = read_part(g, part, m, mi);
        cg__cj_path_pop(c, s2);
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static cg_status read_content(struct gread *g, json_t *content)
{
    struct ctx *c = g->c;
    cg_role role = CG_ROLE_USER;
    json_t *marker = NULL;
    struct cg_message *m = NULL;
    cg_status st = cg__cj_expect_object(c, content);
    if (st == CG_OK)
        st = read_role(c, content, &role, &marker);
    if (st == CG_OK && (st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK)
        st = cg__cj_fail_from(c, st);
    if (st == CG_OK) {
        m->form = CG_FORM_PARTS;
        st = read_parts(g, content, m, c->conv->n_messages - 1);
    }
    static const char *const known[] = {"role", "parts", NULL};
    json_t *extra = st == CG_OK ? copy_except(content, known) : NULL;
    if (extra != NULL && marker != NULL)
        json_object_set(extra, "role", marker);
    json_decref(marker);
    return st == CG_OK ? store_extra(c, extra, &m->extra) : st;
}

/* systemInstruction: a Content of text parts, as a leading system message. */
static cg_status read_system(struct gread *g, json_t *sys)
{
    struct ctx *c = g->c;
    struct cg_message *m = NULL;
    cg_status st = cg__cj_expect_object(c, sys);
    if (st == CG_OK && (st = cg_conv_add_message(c->conv, CG_ROLE_SYSTEM, &m, c->err)) != CG_OK)
        st = cg__cj_fail_from(c, st);
    if (st == CG_OK)
        st = read_parts(g, sys, m, c->conv->n_messages - 1);
    for (size_t i = 0; st == CG_OK && i < m->n_parts; i++)
        if (m->parts[i].kind != CG_PART_TEXT)
            st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                             "parts[%zu]: system instruction parts are text", i);
    if (st != CG_OK)
        return st;
    m->form = CG_FORM_PARTS;
    c->conv->system_form = CG_FORM_PARTS;
    static const char *const known[] = {"parts", NULL};
    return store_extra(c, copy_except(sys, known), &m->extra); /* "role" included */
}

/* One functionDeclarations entry: name, description, parameters or parametersJsonSchema. */
static cg_status read_declaration(struct gread *g, json_t *decl)
{
    struct ctx *c = g->c;
    struct cg_tool_def *t;
    cg_status st = cg__cj_expect_object(c, decl);
    if (st == CG_OK && (st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    json_t *params = json_object_get(decl, "parameters"), *schema;
    const char *schema_key;
    if (st != CG_OK || (st = cg__cj_get_id(c, decl, "name", &t->name)) != CG_OK ||
        (st = cg__cj_get_string(c, decl, "description", false, &t->description)) != CG_OK ||
        (st = pick(g, decl, "parametersJsonSchema", "parameters_json_schema", &schema,
                   &schema_key)) != CG_OK)
        return st;
    if (cg_conv_str(c->conv, "function", 8, &t->type, c->err) != CG_OK)
        return cg__cj_fail_from(c, CG_RESOURCE_EXHAUSTED);
    if (params != NULL && schema != NULL)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "\"parameters\" and \"%s\" exclude each other",
                           schema_key);
    json_t *value = schema != NULL ? schema : params;
    const char *key = schema != NULL ? schema_key : "parameters";
    json_t *extra = NULL;
    static const char *const known[] = {"name", "description", NULL};
    if (value != NULL && !json_is_null(value)) {
        size_t saved = cg__cj_path_push(c, ".%s", key);
        st = json_is_object(value) ? cg__cj_dump_value(c, value, &t->parameters)
                                   : cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object");
        cg__cj_path_pop(c, saved);
        const char *const skip[] = {"name", "description", key, NULL};
        extra = st == CG_OK ? copy_except(decl, skip) : NULL;
        if (extra != NULL && schema != NULL)
            json_object_set_new(extra, key, json_true()); /* the schema's key, for the writer */
    } else {
        extra = copy_except(decl, known); /* a null schema stays as it was */
    }
    return st == CG_OK ? store_extra(c, extra, &t->extra) : st;
}

/* A tool entry of another kind (googleSearch, codeExecution, ...): type and name are the key,
 * extra is {key: value}. */
static cg_status read_builtin(struct ctx *c, const char *key, json_t *value)
{
    struct cg_tool_def *t;
    size_t len = strlen(key);
    cg_status st = cg_conv_add_tool(c->conv, &t, c->err);
    if (st == CG_OK && (st = cg_conv_str(c->conv, key, len, &t->name, c->err)) == CG_OK)
        st = cg_conv_str(c->conv, key, len, &t->type, c->err);
    if (st != CG_OK)
        return cg__cj_fail_from(c, st);
    if (len == 0 || len > CG_CONV_ID_MAX)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "a tool kind must be 1..%d bytes",
                           CG_CONV_ID_MAX);
    json_t *extra = json_object();
    if (extra != NULL)
        json_object_set(extra, key, value);
    return store_extra(c, extra, &t->extra);
}

static cg_status read_one_declaration(void *arg, json_t *decl)
{
    return read_declaration(arg, decl);
}

static cg_status read_declarations(struct gread *g, json_t *decls)
{
    return cg__cj_each(g->c, decls, read_one_declaration, g);
}

static cg_status read_tool_entry(struct gread *g, json_t *entry)
{
    struct ctx *c = g->c;
    cg_status st = cg__cj_expect_object(c, entry);
    const char *key;
    json_t *v;
    json_object_foreach(entry, key, v)
    {
        if (st != CG_OK)
            break;
        bool camel = strcmp(key, "functionDeclarations") == 0;
        if (!camel && strcmp(key, "function_declarations") != 0) {
            st = read_builtin(c, key, v);
            continue;
        }
        if (!g->spelling_decided) {
            g->spelling_decided = true;
            c->conv->snake_keys = !camel;
        }
        size_t saved = cg__cj_path_push(c, ".%s", key);
        st = read_declarations(g, v);
        cg__cj_path_pop(c, saved);
    }
    return st;
}

static cg_status read_one_tool_entry(void *arg, json_t *entry)
{
    return read_tool_entry(arg, entry);
}

static cg_status read_tools(struct gread *g, json_t *tools)
{
    struct ctx *c = g->c;
    size_t saved = cg__cj_path_push(c, ".tools");
    cg_status st = cg__cj_each(c, tools, read_one_tool_entry, g);
    if (st == CG_OK)
        cg__cj_path_pop(c, saved);
    return st;
}

/* The other top-level keys in order, the model's own as null placeholders. */
static cg_status keep_top_extra(struct ctx *c, json_t *root)
{
    static const char *const owned[] = {"contents",           "tools", "model", "systemInstruction",
                                        "system_instruction", NULL};
    json_t *shallow = json_copy(root);
    if (shallow == NULL)
        return oom(c);
    for (const char *const *k = owned; *k != NULL; k++)
        if (json_object_get(shallow, *k) != NULL)
            json_object_set_new(shallow, *k, json_null());
    cg_status st = cg__cj_dump_value(c, shallow, &c->conv->top_extra);
    json_decref(shallow);
    return st;
}

static cg_status read_top(struct gread *g, json_t *root, json_t **contents)
{
    struct ctx *c = g->c;
    cg_status st;
    c->conv->top_is_object = true;
    *contents = json_object_get(root, "contents");
    if (*contents == NULL)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "an object needs a \"contents\" array");
    if ((st = cg__cj_get_string(c, root, "model", false, &c->conv->model)) != CG_OK)
        return st;
    json_t *sys;
    const char *key;
    if ((st = pick(g, root, "systemInstruction", "system_instruction", &sys, &key)) != CG_OK)
        return st;
    if (sys != NULL && !json_is_null(sys)) {
        size_t saved = cg__cj_path_push(c, ".%s", key);
        st = read_system(g, sys);
        cg__cj_path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    json_t *tools = json_object_get(root, "tools");
    c->conv->has_tools_key = tools != NULL;
    if (tools != NULL && !json_is_null(tools) && (st = read_tools(g, tools)) != CG_OK)
        return st;
    return keep_top_extra(c, root);
}

cg_status cg__cj_gemini_read(struct ctx *c, json_t *root)
{
    struct gread g = {.c = c};
    json_t *contents = root;
    cg_status st = CG_OK;
    if (json_is_object(root))
        st = read_top(&g, root, &contents);
    else if (!json_is_array(root))
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                         "expected an array of contents or an object with \"contents\", got %s",
                         cg__cj_type_name(root));
    size_t saved = cg__cj_path_push(c, "%s", contents == root ? "" : ".contents");
    if (st == CG_OK && !json_is_array(contents))
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an array, got %s",
                         cg__cj_type_name(contents));
    size_t i;
    json_t *content;
    json_array_foreach(contents, i, content)
    {
        if (st != CG_OK)
            break;
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        st = read_content(&g, content);
        cg__cj_path_pop(c, s2);
    }
    if (st == CG_OK)
        cg__cj_path_pop(c, saved);
    free(g.calls);
    free(g.by_name.slots);
    return st;
}

/* ------------------------------------------------------------------ writing ----------- */

struct gwrite {
    struct wctx *w;
    bool snake;         /* write snake_case keys */
    struct table by_id; /* calls by id (text: name, a: message), built when first needed */
    bool indexed;
};

static const char *key_of(const struct gwrite *gw, const char *camel, const char *snake)
{
    return gw->snake ? snake : camel;
}

/* Sets obj[key] to v (taken); false when v is NULL or out of memory. */
static bool set_new(json_t *obj, const char *key, json_t *v)
{
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

/* A wrapper's kept keys: false marks an owned key the input did not have ("id": matched by
 * name; "args": written only while the arguments are still {}). */
static void merge_inner(json_t *inner, json_t *kept)
{
    const char *key;
    json_t *v;
    json_object_foreach(kept, key, v)
    {
        json_t *have = json_object_get(inner, key);
        bool id = strcmp(key, "id") == 0, args = strcmp(key, "args") == 0;
        if (json_is_false(v) && (id || (args && json_object_size(have) == 0)))
            json_object_del(inner, key);
        else if (have == NULL && !id && !args)
            json_object_set(inner, key, v);
    }
}

/* The part's unknown keys back (same format only), a wrapper's into the wrapper written. */
static void merge_part_extra(const struct gwrite *gw, json_t *obj, const struct cg_part *p)
{
    if (!gw->w->same_origin || p->extra.len == 0)
        return;
    json_t *e = cg__cj_parse_object_or_empty(&p->extra);
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v)
    {
        json_t *inner = NULL;
        for (int k = KIND_INLINE; k < N_KINDS && inner == NULL; k++)
            if (strcmp(key, data_keys[k][0]) == 0)
                inner = json_object_get(obj, key_of(gw, data_keys[k][0], data_keys[k][1]));
        if (json_is_object(inner) && json_is_object(v))
            merge_inner(inner, v);
        else if (json_object_get(obj, key) == NULL)
            json_object_set(obj, key, v);
    }
    json_decref(e);
}

/* {"inlineData": ...} or {"fileData": ...} for an image; NULL when it has no source. */
static json_t *media_json(const struct gwrite *gw, const struct cg_image *im)
{
    json_t *inner = json_object(), *out = json_object();
    const char *mime = key_of(gw, "mimeType", "mime_type");
    bool ok = inner != NULL && out != NULL;
    struct cg_str data_type, payload;
    bool data_url = im->source == CG_IMAGE_SOURCE_URL && !gw->w->same_origin &&
                    cg__cj_data_url_base64(&im->url, &data_type, &payload);
    if (ok && im->source == CG_IMAGE_SOURCE_DATA) {
        size_t n;
        char *b64 = cg__cj_b64_encode((const unsigned char *)im->data.ptr, im->data.len, &n);
        const struct cg_str octets = {"application/octet-stream", 24};
        bool own = im->media_type.len > 0 || gw->w->same_origin; /* Gemini requires one */
        ok = b64 != NULL && set_new(inner, mime, cg__cj_jstr(own ? &im->media_type : &octets)) &&
             set_new(inner, "data", json_stringn(b64, n));
        free(b64);
    } else if (ok && data_url) {
        /* A base64 data: URL of another format is sent as the bytes it holds. */
        ok = set_new(inner, mime, json_stringn(data_type.ptr, data_type.len)) &&
             set_new(inner, "data", json_stringn(payload.ptr, payload.len));
    } else if (ok && im->source == CG_IMAGE_SOURCE_URL) {
        ok = (im->media_type.len == 0 || set_new(inner, mime, cg__cj_jstr(&im->media_type))) &&
             set_new(inner, key_of(gw, "fileUri", "file_uri"), cg__cj_jstr(&im->url));
    } else {
        ok = false;
    }
    bool bytes = im->source == CG_IMAGE_SOURCE_DATA || data_url;
    const char *wrapper =
        bytes ? key_of(gw, "inlineData", "inline_data") : key_of(gw, "fileData", "file_data");
    if (ok && json_object_set(out, wrapper, inner) == 0) {
        json_decref(inner);
        return out;
    }
    json_decref(inner);
    json_decref(out);
    return NULL;
}

static cg_status no_media(struct wctx *w, size_t mi, size_t pi, const char *what)
{
    return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu].%s: Gemini JSON needs its bytes or a URL "
                        "(valid UTF-8)",
                        mi, pi, what);
}

/* The function name of a result without one: the call with its id earlier on. */
static cg_status result_name(struct gwrite *gw, const struct cg_tool_result *r, size_t mi,
                             size_t pi, struct cg_str *name)
{
    const struct cg_conv *conv = gw->w->conv;
    if (r->tool_name.len > 0) {
        *name = r->tool_name;
        return CG_OK;
    }
    for (size_t i = 0; !gw->indexed && i < conv->n_messages; i++)
        for (size_t k = 0; k < conv->messages[i].n_parts; k++) {
            const struct cg_part *p = &conv->messages[i].parts[k];
            struct slot *s =
                p->kind == CG_PART_TOOL_CALL ? table_add(&gw->by_id, &p->u.tool_call.id) : NULL;
            if (p->kind == CG_PART_TOOL_CALL && s == NULL)
                return WOOM(gw->w);
            if (s != NULL && s->a == NONE) {
                s->a = i;
                s->text = p->u.tool_call.name;
            }
        }
    gw->indexed = true;
    struct slot *s = table_find(&gw->by_id, &r->tool_call_id);
    if (s != NULL && s->a < mi) {
        *name = s->text;
        return CG_OK;
    }
    char shown[KEY_SHOWN_MAX + 1];
    cg__cj_show_key(shown, sizeof shown, r->tool_call_id.ptr, r->tool_call_id.len);
    return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu].tool_result: a Gemini functionResponse needs the "
                        "function name (no earlier call has id \"%s\")",
                        mi, pi, shown);
}

/* The response object: a JSON-object result as itself, other text wrapped. */
static json_t *response_json(const struct cg_tool_result *r)
{
    json_t *text = cg__cj_jstr(&r->content);
    if (text == NULL)
        return NULL;
    if (!r->is_error && is_object_text(&r->content)) {
        json_decref(text);
        return cg__cj_parse_object_or_empty(&r->content);
    }
    return json_pack("{s:o}", r->is_error ? "error" : "output", text);
}

/* A functionResponse part, then the result's images as parts of their own. */
static cg_status result_out(struct gwrite *gw, const struct cg_part *p, size_t mi, size_t pi,
                            json_t *parts)
{
    const struct cg_tool_result *r = &p->u.tool_result;
    struct cg_str name;
    cg_status st = result_name(gw, r, mi, pi, &name);
    if (st != CG_OK)
        return st;
    json_t *part = json_object();
    if (part == NULL || json_array_append_new(parts, part) != 0)
        return WOOM(gw->w);
    json_t *inner = json_object();
    if (json_object_set_new(part, key_of(gw, "functionResponse", "function_response"), inner))
        return WOOM(gw->w);
    if (!set_new(inner, "name", cg__cj_jstr(&name)) ||
        !set_new(inner, "response", response_json(r)) ||
        (!is_generated(&r->tool_call_id) && !cg__cj_set_str(inner, "id", &r->tool_call_id)))
        return cg__cj_bad_utf8(gw->w, mi, pi, "tool_result");
    merge_part_extra(gw, part, p);
    for (size_t k = 0; k < r->n_images; k++) {
        json_t *im = media_json(gw, &r->images[k]);
        if (im == NULL)
            return no_media(gw->w, mi, pi, "tool_result.images");
        if (json_array_append_new(parts, im) != 0)
            return WOOM(gw->w);
    }
    return CG_OK;
}

static cg_status call_out(struct gwrite *gw, const struct cg_part *p, size_t mi, size_t pi,
                          json_t **out)
{
    const struct cg_tool_call *call = &p->u.tool_call;
    json_t *args = cg__cj_parse_object_or_empty(&call->arguments);
    if (args == NULL)
        return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                            "messages[%zu].parts[%zu].tool_call.arguments: not a JSON object "
                            "(Gemini functionCall args must be one)",
                            mi, pi);
    json_t *inner = json_object();
    *out = json_object();
    if (*out == NULL || inner == NULL) {
        json_decref(args);
        json_decref(inner);
        return WOOM(gw->w);
    }
    json_object_set_new(*out, key_of(gw, "functionCall", "function_call"), inner);
    if (!set_new(inner, "name", cg__cj_jstr(&call->name))) {
        json_decref(args);
        return cg__cj_bad_utf8(gw->w, mi, pi, "tool_call");
    }
    if (!set_new(inner, "args", args) ||
        (!is_generated(&call->id) && !cg__cj_set_str(inner, "id", &call->id)))
        return cg__cj_bad_utf8(gw->w, mi, pi, "tool_call");
    return CG_OK;
}

/* A text or thought part; *out NULL for reasoning Gemini cannot take (redacted). */
static cg_status text_out(struct gwrite *gw, const struct cg_part *p, size_t mi, size_t pi,
                          json_t **out)
{
    bool thought = p->kind == CG_PART_REASONING;
    if (thought && p->u.reasoning.redacted)
        return CG_OK;
    json_t *text = cg__cj_jstr(thought ? &p->u.reasoning.text : &p->u.text);
    if (text == NULL)
        return cg__cj_bad_utf8(gw->w, mi, pi, thought ? "reasoning" : "text");
    *out = json_pack("{s:o}", "text", text);
    if (*out == NULL || !thought)
        return *out != NULL ? CG_OK : WOOM(gw->w);
    json_object_set_new(*out, "thought", json_true());
    /* Only Gemini's own signature means anything to Gemini. */
    if (gw->w->same_origin && p->u.reasoning.signature.len > 0 &&
        !cg__cj_set_str(*out, key_of(gw, "thoughtSignature", "thought_signature"),
                        &p->u.reasoning.signature))
        return cg__cj_bad_utf8(gw->w, mi, pi, "reasoning.signature");
    return CG_OK;
}

/* Part pi of message mi appended to parts (a result may add its images after it). */
static cg_status part_out(struct gwrite *gw, const struct cg_message *m, size_t mi, size_t pi,
                          json_t *parts)
{
    const struct cg_part *p = &m->parts[pi];
    json_t *obj = NULL;
    cg_status st = CG_OK;
    if (p->kind == CG_PART_TOOL_CALL && m->role != CG_ROLE_ASSISTANT)
        return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                            "messages[%zu].parts[%zu]: only assistant messages carry tool calls",
                            mi, pi);
    if (p->kind == CG_PART_TOOL_RESULT && m->role != CG_ROLE_USER && m->role != CG_ROLE_TOOL)
        return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                            "messages[%zu].parts[%zu]: a %s message cannot hold tool results", mi,
                            pi, cg_conv_role_name(m->role));
    switch (p->kind) {
    case CG_PART_TOOL_RESULT:
        return result_out(gw, p, mi, pi, parts);
    case CG_PART_TOOL_CALL:
        st = call_out(gw, p, mi, pi, &obj);
        break;
    case CG_PART_IMAGE:
        if ((obj = media_json(gw, &p->u.image)) == NULL)
            return no_media(gw->w, mi, pi, "image");
        break;
    case CG_PART_TEXT:
    case CG_PART_REASONING:
        st = text_out(gw, p, mi, pi, &obj);
        break;
    }
    if (st == CG_OK && obj != NULL) {
        merge_part_extra(gw, obj, p);
        if (json_array_append(parts, obj) != 0)
            st = WOOM(gw->w);
    }
    json_decref(obj);
    return st;
}

static cg_status parts_out(struct gwrite *gw, const struct cg_message *m, size_t mi, json_t *parts)
{
    for (size_t pi = 0; pi < m->n_parts; pi++) {
        cg_status st = part_out(gw, m, mi, pi, parts);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* The content's kept keys; "role" holds how the input spelled a user role (absent, null, the
 * legacy "function"), which stands only while the message is still a user message (and, for
 * "function", only of function responses). */
static void merge_message_extra(const struct gwrite *gw, json_t *obj, const struct cg_message *m)
{
    if (!gw->w->same_origin || m->extra.len == 0)
        return;
    json_t *e = cg__cj_parse_object_or_empty(&m->extra);
    json_t *role = json_object_get(e, "role");
    bool results_only = m->n_parts > 0;
    for (size_t i = 0; i < m->n_parts; i++)
        results_only = results_only && m->parts[i].kind == CG_PART_TOOL_RESULT;
    if (role != NULL && m->role == CG_ROLE_USER) {
        if (json_is_false(role))
            json_object_del(obj, "role");
        else if (json_is_null(role) || results_only)
            json_object_set(obj, "role", role);
    }
    json_object_del(e, "role");
    json_object_update_missing(obj, e);
    json_decref(e);
}

/* One content for a user, assistant or tool message appended to contents; *opened its parts
 * array (NULL when the content was left out). */
static cg_status content_out(struct gwrite *gw, const struct cg_message *m, size_t mi,
                             json_t *contents, json_t **opened)
{
    json_t *parts = json_array();
    json_t *obj = json_pack("{s:s, s:o}", "role", m->role == CG_ROLE_ASSISTANT ? "model" : "user",
                            "parts", parts);
    if (obj == NULL)
        return WOOM(gw->w);
    cg_status st = parts_out(gw, m, mi, parts);
    /* A content whose every part was dropped (redacted reasoning) would be rejected. */
    bool empty = json_array_size(parts) == 0 && m->n_parts > 0 && !gw->w->same_origin;
    *opened = NULL;
    if (st == CG_OK && !empty) {
        merge_message_extra(gw, obj, m);
        st = json_array_append(contents, obj) == 0 ? CG_OK : WOOM(gw->w);
        *opened = parts; /* now held by contents */
    }
    json_decref(obj);
    return st;
}

static cg_status contents_out(struct gwrite *gw, size_t first, json_t *contents)
{
    const struct cg_conv *conv = gw->w->conv;
    json_t *open_results = NULL; /* the parts of the user content of tool messages */
    for (size_t mi = first; mi < conv->n_messages; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        cg_status st = CG_OK;
        if (cg_conv_role_is_system(m->role))
            return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                                "messages[%zu]: a %s message after the first turn cannot be "
                                "written as Gemini JSON",
                                mi, cg_conv_role_name(m->role));
        for (size_t i = 0; m->role == CG_ROLE_TOOL && i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TOOL_RESULT)
                return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                                    "messages[%zu].parts[%zu]: a tool message holds tool results",
                                    mi, i);
        if (open_results != NULL && (m->role == CG_ROLE_TOOL || m->role == CG_ROLE_USER)) {
            /* Tool messages, and the user message after them, make one user content. */
            st = parts_out(gw, m, mi, open_results);
            if (m->role == CG_ROLE_USER)
                open_results = NULL;
        } else {
            json_t *parts = NULL;
            st = content_out(gw, m, mi, contents, &parts);
            open_results = m->role == CG_ROLE_TOOL ? parts : NULL;
        }
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* The leading system/developer messages as systemInstruction (*out NULL when none). */
static cg_status system_out(struct gwrite *gw, size_t *first, json_t **out)
{
    const struct cg_conv *conv = gw->w->conv;
    size_t n = 0;
    while (n < conv->n_messages && cg_conv_role_is_system(conv->messages[n].role))
        n++;
    *first = n;
    *out = NULL;
    if (n == 0)
        return CG_OK;
    json_t *parts = json_array();
    *out = json_pack("{s:o}", "parts", parts);
    if (*out == NULL)
        return WOOM(gw->w);
    for (size_t mi = 0; mi < n; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        for (size_t i = 0; i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TEXT)
                return cg__cj_wfail(
                    gw->w, CG_INVALID_ARGUMENT,
                    "messages[%zu].parts[%zu]: a Gemini system instruction is text only", mi, i);
        cg_status st = parts_out(gw, m, mi, parts);
        if (st != CG_OK)
            return st;
    }
    if (n == 1 && gw->w->same_origin && conv->messages[0].extra.len > 0) {
        json_t *e = cg__cj_parse_object_or_empty(&conv->messages[0].extra);
        json_object_update_missing(*out, e);
        json_decref(e);
    }
    return CG_OK;
}

/* One function declaration; the schema under the key it was read from ("parameters" for
 * Gemini's own, parametersJsonSchema for other formats' JSON Schema). */
static cg_status declaration_out(const struct gwrite *gw, const struct cg_tool_def *t, size_t i,
                                 json_t *decls)
{
    struct wctx *w = gw->w;
    json_t *d = json_object(), *kept = NULL;
    if (d == NULL || json_array_append_new(decls, d) != 0)
        return WOOM(w);
    if (!cg__cj_set_str(d, "name", &t->name) ||
        (t->description.len > 0 && !cg__cj_set_str(d, "description", &t->description)))
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu]: invalid UTF-8", i);
    const char *key = w->same_origin ? "parameters" : "parametersJsonSchema";
    if (w->same_origin && t->extra.len > 0) {
        kept = cg__cj_parse_object_or_empty(&t->extra);
        static const char *const marked[] = {"parametersJsonSchema", "parameters_json_schema"};
        for (int k = 0; k < 2; k++)
            if (json_is_true(json_object_get(kept, marked[k]))) {
                key = marked[k];
                json_object_del(kept, key);
            }
    }
    if (t->parameters.len > 0) {
        json_t *schema = cg__cj_parse_object_or_empty(&t->parameters);
        if (schema == NULL) {
            json_decref(kept);
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "tools[%zu].parameters_json: not a JSON object", i);
        }
        json_object_set_new(d, key, schema);
    }
    if (kept != NULL)
        json_object_update_missing(d, kept);
    json_decref(kept);
    return CG_OK;
}

static bool is_function_def(const struct cg_tool_def *t)
{
    return t->type.len == 0 || strcmp(t->type.ptr, "function") == 0 ||
           strcmp(t->type.ptr, "custom") == 0;
}

/* Every function in one functionDeclarations entry at the first one's place; the other
 * entries as read (only Gemini's own: another format's built-in tool has no Gemini form). */
static cg_status tools_out(const struct gwrite *gw, json_t **out)
{
    const struct cg_conv *conv = gw->w->conv;
    json_t *decls = NULL;
    *out = json_array();
    if (*out == NULL)
        return WOOM(gw->w);
    for (size_t i = 0; i < conv->n_tools; i++) {
        const struct cg_tool_def *t = &conv->tools[i];
        cg_status st = CG_OK;
        if (is_function_def(t) && decls == NULL) {
            decls = json_array();
            json_t *entry = json_pack(
                "{s:o}", key_of(gw, "functionDeclarations", "function_declarations"), decls);
            if (entry == NULL || json_array_append_new(*out, entry) != 0)
                return WOOM(gw->w);
        }
        if (is_function_def(t)) {
            st = declaration_out(gw, t, i, decls);
        } else {
            json_t *entry = gw->w->same_origin ? cg__cj_parse_object_or_empty(&t->extra) : NULL;
            if (json_object_size(entry) == 0) {
                json_decref(entry);
                char shown[KEY_SHOWN_MAX + 1];
                cg__cj_show_key(shown, sizeof shown, t->type.ptr, t->type.len);
                return cg__cj_wfail(gw->w, CG_INVALID_ARGUMENT,
                                    "tools[%zu]: the built-in tool \"%s\" has no Gemini form", i,
                                    shown);
            }
            st = json_array_append_new(*out, entry) == 0 ? CG_OK : WOOM(gw->w);
        }
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* The request object: the input's other keys (same format), model, systemInstruction under
 * the spelling it was read with, contents and tools. */
static json_t *top_object(const struct gwrite *gw, json_t *system, json_t *contents, json_t *tools)
{
    const struct cg_conv *conv = gw->w->conv;
    json_t *root = gw->w->same_origin && conv->top_extra.len > 0
                       ? cg__cj_parse_object_or_empty(&conv->top_extra)
                       : json_object();
    if (root == NULL)
        return NULL;
    if (gw->w->same_origin && conv->model.len > 0)
        cg__cj_set_str(root, "model", &conv->model);
    else
        json_object_del(root, "model");
    const char *sys_key = json_object_get(root, "system_instruction") != NULL ? "system_instruction"
                          : json_object_get(root, "systemInstruction") != NULL
                              ? "systemInstruction"
                              : key_of(gw, "systemInstruction", "system_instruction");
    /* Setting a key the input had keeps its place; a stale one goes. */
    json_object_del(root, strcmp(sys_key, "systemInstruction") == 0 ? "system_instruction"
                                                                    : "systemInstruction");
    if (system == NULL)
        json_object_del(root, sys_key);
    if (tools == NULL)
        json_object_del(root, "tools");
    bool ok = (system == NULL || json_object_set(root, sys_key, system) == 0) &&
              json_object_set(root, "contents", contents) == 0 &&
              (tools == NULL || json_object_set(root, "tools", tools) == 0);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* The sentinel Google documents for a function call whose thought signature is not known (a
 * conversation that comes from another model or format): Gemini 3 refuses a function call of
 * the current turn without a signature (400 "missing a thought_signature"). */
#define SIGNATURE_SENTINEL "skip_thought_signature_validator"

/* Whether a user content starts a turn: it holds something besides function responses. */
static bool starts_turn(const struct gwrite *gw, json_t *content)
{
    const char *role = json_string_value(json_object_get(content, "role"));
    if (role == NULL || strcmp(role, "user") != 0)
        return false;
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(content, "parts"), i, part)
    {
        if (json_object_get(part, key_of(gw, "functionResponse", "function_response")) == NULL)
            return true;
    }
    return false;
}

/* For conversations of another format: the first function call of each model content of the
 * current turn (after the last user content that starts one) gets the sentinel signature. */
static void sign_current_turn(const struct gwrite *gw, json_t *contents)
{
    size_t from = 0, i;
    json_t *content;
    json_array_foreach(contents, i, content)
    {
        if (starts_turn(gw, content))
            from = i + 1;
    }
    const char *call_key = key_of(gw, "functionCall", "function_call");
    const char *sig_key = key_of(gw, "thoughtSignature", "thought_signature");
    for (i = from; i < json_array_size(contents); i++) {
        content = json_array_get(contents, i);
        const char *role = json_string_value(json_object_get(content, "role"));
        if (role == NULL || strcmp(role, "model") != 0)
            continue;
        size_t k;
        json_t *part;
        json_array_foreach(json_object_get(content, "parts"), k, part)
        {
            if (json_object_get(part, call_key) == NULL)
                continue;
            if (json_object_get(part, sig_key) == NULL)
                json_object_set_new(part, sig_key, json_string(SIGNATURE_SENTINEL));
            break;
        }
    }
}

cg_status cg__cj_gemini_write(struct wctx *w, json_t **out)
{
    const struct cg_conv *conv = w->conv;
    struct gwrite gw = {.w = w, .snake = w->same_origin && conv->snake_keys};
    json_t *system = NULL, *tools = NULL, *contents = json_array();
    size_t first = 0;
    *out = NULL;
    cg_status st = contents != NULL ? system_out(&gw, &first, &system) : WOOM(w);
    if (st == CG_OK)
        st = contents_out(&gw, first, contents);
    if (st == CG_OK && !w->same_origin)
        sign_current_turn(&gw, contents);
    bool want_tools =
        !conv->tools_external && (conv->n_tools > 0 || (conv->has_tools_key && w->same_origin));
    if (st == CG_OK && want_tools)
        st = tools_out(&gw, &tools);
    if (st == CG_OK && (conv->top_is_object || system != NULL || tools != NULL)) {
        *out = top_object(&gw, system, contents, tools);
        st = *out != NULL ? CG_OK : WOOM(w);
    } else if (st == CG_OK) {
        *out = json_incref(contents);
    }
    json_decref(system);
    json_decref(tools);
    json_decref(contents);
    free(gw.by_id.slots);
    return st;
}

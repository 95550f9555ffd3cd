/* conv_json_responses.c - OpenAI Responses API input JSON <-> the conversation model.
 *
 * A document is a bare array of input items, a bare string (one user message), or a request
 * object with "input" (a string or an array of items), "instructions" (a leading system
 * message, conv->system_form STRING), "tools", "model" and other keys kept in top_extra.
 * Items: message (type optional when "role" is given), function_call, function_call_output,
 * reasoning. Consecutive assistant-side items (reasoning, function_call and at most one
 * assistant message item) form one ASSISTANT message whose parts keep their order; one made
 * only of calls and reasoning has form ABSENT. function_call_output items become TOOL messages.
 *
 * What is normalized (everything else round-trips as read):
 * - a function_call_output's array output: its input_text parts are joined with "\n" and
 *   written back as one input_text part followed by the images; an empty text is dropped;
 *   images there must have an image_url (a file_id-only image is refused when reading);
 * - null "model", "instructions" and "tools" at the top are dropped;
 * - between formats: messages are written as role + content items (no "type"), one text part
 *   as a plain string; output_text parts get "annotations": [] and images "detail": "auto"
 *   (the API's schema requires both); function tools are written flat with "strict": false
 *   unless the other format said true (a missing strict may mean true there); message names,
 *   tool_result is_error and unknown keys are not carried; reasoning read from another format
 *   is dropped (a Responses reasoning item needs the id of the provider's own item);
 *   built-in tools of another format are refused.
 * - after a layer changed a text: a reasoning part whose text no longer equals its kept
 *   summary is written as one summary_text (its raw "content" dropped); kept annotations
 *   whose indexes fall outside the new text become [].
 *
 * Markers in top_extra (the writer's, never shown): for a bare string root the JSON text
 * "string"; in an object, "input": "string" instead of the null placeholder when the input
 * was a string. They make a string come back as a string and not as a one-item array.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json_internal.h"
#include "core/json_fast.h"

#define STRING_INPUT_MARK "\"string\""
#define STRING_INPUT_VALUE "string"
#define SUMMARY_JOIN "\n\n"
#define OUTPUT_JOIN "\n"

/* ------------------------------------------------------------------ read: helpers ---- */

/* Like cg__cj_keep_extra, but a known key whose value is null is kept too: the model has no
 * null for it, and the writer gives the null back instead of dropping the key. */
static cg_status keep_unknown(struct ctx *c, json_t *obj, const char *const *known,
                              struct cg_str *out)
{
    json_t *extra = json_object();
    if (extra == NULL)
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool is_known = false;
        for (const char *const *k = known; *k != NULL && !is_known; k++)
            is_known = strcmp(*k, key) == 0;
        if (!is_known || json_is_null(v))
            json_object_set(extra, key, v);
    }
    cg_status st = json_object_size(extra) > 0 ? cg__cj_dump_value(c, extra, out) : CG_OK;
    json_decref(extra);
    return st;
}

/* The error for a value of "type" that is not in the supported list. */
static cg_status unsupported_type(struct ctx *c, json_t *tv, const char *what,
                                  const char *supported)
{
    size_t saved = cg__cj_path_push(c, ".type");
    cg_status st;
    if (tv == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (!json_is_string(tv)) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", cg__cj_type_name(tv));
    } else {
        char shown[KEY_SHOWN_MAX + 1];
        cg__cj_show_key(shown, sizeof shown, json_string_value(tv), json_string_length(tv));
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "%s \"%s\" is not supported (%s)", what, shown,
                         supported);
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static bool type_is(json_t *tv, const char *want)
{
    return json_is_string(tv) && strcmp(json_string_value(tv), want) == 0;
}

/* A string value into the conversation (the path is the caller's). */
static cg_status copy_string(struct ctx *c, json_t *v, struct cg_str *out)
{
    cg_status st = cg_conv_str(c->conv, json_string_value(v), json_string_length(v), out, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

/* The media type of a data: URL image, for writers that need it (Anthropic). */
static cg_status data_url_media_type(struct ctx *c, struct cg_image *im)
{
    if (im->url.len <= 5 || strncmp(im->url.ptr, "data:", 5) != 0)
        return CG_OK;
    const char *semi = memchr(im->url.ptr + 5, ';', im->url.len - 5);
    const char *comma = memchr(im->url.ptr + 5, ',', im->url.len - 5);
    const char *end = semi != NULL && (comma == NULL || semi < comma) ? semi : comma;
    if (end == NULL || end - im->url.ptr - 5 > 100)
        return CG_OK;
    cg_status st = cg_conv_str(c->conv, im->url.ptr + 5, (size_t)(end - im->url.ptr - 5),
                               &im->media_type, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

/* An input_image block into im: a URL source from "image_url" (https or data:), or no source
 * when only "file_id" is given (the caller keeps it in extra; refused when need_url). */
static cg_status read_image(struct ctx *c, json_t *block, struct cg_image *im, bool need_url)
{
    json_t *iu = json_object_get(block, "image_url");
    json_t *file_id = json_object_get(block, "file_id");
    cg_status st = cg__cj_get_string(c, block, "detail", false, &im->detail);
    if (st != CG_OK)
        return st;
    if (iu == NULL || json_is_null(iu)) {
        if (json_is_string(file_id) && !need_url)
            return CG_OK;
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "%s",
                           need_url ? "an image here needs \"image_url\""
                                    : "an input_image needs \"image_url\" or \"file_id\"");
    }
    if ((st = cg__cj_get_string(c, block, "image_url", true, &im->url)) != CG_OK)
        return st;
    im->source = CG_IMAGE_SOURCE_URL;
    cg__cj_describe_data_url(im);
    return data_url_media_type(c, im);
}

/* ------------------------------------------------------------------ read: messages --- */

static const char *const text_keys[] = {"text", NULL};
static const char *const refusal_keys[] = {"refusal", NULL};
static const char *const image_keys[] = {"image_url", "detail", NULL};

#define CONTENT_TYPES "input_text, output_text, refusal, input_image"

/* One block of a message's content array into a part of m; "type" stays in the part's extra
 * so that the block comes back as the same type. */
static cg_status read_content_part(struct ctx *c, json_t *block, struct cg_message *m)
{
    cg_status st = cg__cj_expect_object(c, block);
    if (st != CG_OK)
        return st;
    json_t *tv = json_object_get(block, "type");
    struct cg_part *p;
    bool refusal = type_is(tv, "refusal");
    if (type_is(tv, "input_text") || type_is(tv, "output_text") || refusal) {
        const char *key = refusal ? "refusal" : "text";
        if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) != CG_OK ||
            (st = cg__cj_get_string(c, block, key, true, &p->u.text)) != CG_OK)
            return st;
        return keep_unknown(c, block, refusal ? refusal_keys : text_keys, &p->extra);
    }
    if (!type_is(tv, "input_image"))
        return unsupported_type(c, tv, "content part type", CONTENT_TYPES);
    if (m->role == CG_ROLE_ASSISTANT)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT,
                           "an assistant message holds output_text and refusal parts");
    if ((st = cg__cj_add_part(c, m, CG_PART_IMAGE, &p)) != CG_OK ||
        (st = read_image(c, block, &p->u.image, false)) != CG_OK)
        return st;
    return keep_unknown(c, block, image_keys, &p->extra);
}

/* A message item's "content": a string (one text part) or an array of blocks. */
static cg_status read_message_content(struct ctx *c, json_t *item, struct cg_message *m)
{
    json_t *content = json_object_get(item, "content");
    size_t saved = cg__cj_path_push(c, ".content");
    cg_status st = CG_OK;
    struct cg_part *p;
    if (content == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (json_is_string(content)) {
        m->form = CG_FORM_STRING;
        if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
            st = copy_string(c, content, &p->u.text);
    } else if (json_is_array(content)) {
        m->form = CG_FORM_PARTS;
        size_t i;
        json_t *block;
        json_array_foreach(content, i, block)
        {
            size_t s2 = cg__cj_path_push(c, "[%zu]", i);
            st = read_content_part(c, block, m);
            cg__cj_path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of parts, got %s",
                         cg__cj_type_name(content));
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static cg_status read_role(struct ctx *c, json_t *item, cg_role *role)
{
    json_t *r = json_object_get(item, "role");
    const char *s = json_string_value(r);
    size_t saved = cg__cj_path_push(c, ".role");
    cg_status st = CG_OK;
    if (r == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (s == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", cg__cj_type_name(r));
    } else if (strcmp(s, "user") == 0) {
        *role = CG_ROLE_USER;
    } else if (strcmp(s, "assistant") == 0) {
        *role = CG_ROLE_ASSISTANT;
    } else if (strcmp(s, "system") == 0) {
        *role = CG_ROLE_SYSTEM;
    } else if (strcmp(s, "developer") == 0) {
        *role = CG_ROLE_DEVELOPER;
    } else {
        char shown[KEY_SHOWN_MAX + 1];
        cg__cj_show_key(shown, sizeof shown, s, json_string_length(r));
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                         "unknown role \"%s\" (user, assistant, system, developer)", shown);
    }
    cg__cj_path_pop(c, saved);
    return st;
}

/* Reading state: the ASSISTANT message that consecutive assistant-side items join. */
struct group {
    bool open;
    bool has_message; /* it already holds an assistant message item */
    size_t index;     /* of the message in c->conv */
};

/* The open assistant message, or a new one (form ABSENT until a message item joins it). */
static cg_status group_message(struct ctx *c, struct group *g, struct cg_message **out)
{
    if (g->open) {
        *out = &c->conv->messages[g->index];
        return CG_OK;
    }
    cg_status st = cg_conv_add_message(c->conv, CG_ROLE_ASSISTANT, out, c->err);
    if (st != CG_OK)
        return cg__cj_fail_from(c, st);
    (*out)->form = CG_FORM_ABSENT;
    *g = (struct group){.open = true, .index = c->conv->n_messages - 1};
    return CG_OK;
}

static const char *const message_keys[] = {"role", "content", NULL};

static cg_status read_message(struct ctx *c, json_t *item, struct group *g)
{
    cg_role role = CG_ROLE_USER;
    cg_status st = read_role(c, item, &role);
    if (st != CG_OK)
        return st;
    struct cg_message *m;
    if (role == CG_ROLE_ASSISTANT && g->open && !g->has_message) {
        m = &c->conv->messages[g->index];
    } else if ((st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK) {
        return cg__cj_fail_from(c, st);
    }
    *g = (struct group){.open = role == CG_ROLE_ASSISTANT,
                        .has_message = true,
                        .index = (size_t)(m - c->conv->messages)};
    if ((st = read_message_content(c, item, m)) != CG_OK)
        return st;
    /* "type", "id" and "status" stay here, so that the item comes back as it was. */
    return keep_unknown(c, item, message_keys, &m->extra);
}

/* ------------------------------------------------------------------ read: other items - */

static const char *const call_keys[] = {"type", "call_id", "name", "arguments", NULL};

static cg_status read_function_call(struct ctx *c, json_t *item, struct group *g)
{
    struct cg_message *m;
    struct cg_part *p;
    cg_status st;
    if ((st = group_message(c, g, &m)) != CG_OK ||
        (st = cg__cj_add_part(c, m, CG_PART_TOOL_CALL, &p)) != CG_OK ||
        (st = cg__cj_get_id(c, item, "call_id", &p->u.tool_call.id)) != CG_OK ||
        (st = cg__cj_get_id(c, item, "name", &p->u.tool_call.name)) != CG_OK ||
        (st = cg__cj_get_string(c, item, "arguments", true, &p->u.tool_call.arguments)) != CG_OK)
        return st;
    return keep_unknown(c, item, call_keys, &p->extra);
}

/* The texts of a reasoning item's summary joined with SUMMARY_JOIN into *out. */
static cg_status read_summary(struct ctx *c, json_t *summary, struct cg_str *out)
{
    size_t saved = cg__cj_path_push(c, ".summary");
    cg_status st = CG_OK;
    size_t i, joined = 0;
    json_t *s;
    if (summary == NULL || !json_is_array(summary))
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "%s",
                         summary == NULL ? "required" : "expected an array of summary_text parts");
    json_array_foreach(summary, i, s)
    {
        if (st != CG_OK)
            break;
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        json_t *text = json_object_get(s, "text");
        if ((st = cg__cj_expect_object(c, s)) == CG_OK &&
            !type_is(json_object_get(s, "type"), "summary_text"))
            st = unsupported_type(c, json_object_get(s, "type"), "summary part type",
                                  "summary_text");
        else if (st == CG_OK && !json_is_string(text))
            st = cg__cj_get_string(c, s, "text", true, out); /* names the problem */
        else if (st == CG_OK)
            joined += json_string_length(text) + (i > 0 ? strlen(SUMMARY_JOIN) : 0);
        cg__cj_path_pop(c, s2);
    }
    char *buf = st == CG_OK ? cg_conv_alloc(c->conv, joined + 1, 1) : NULL;
    if (st == CG_OK && buf == NULL)
        st = cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
    size_t at = 0;
    json_array_foreach(summary, i, s)
    {
        if (st != CG_OK)
            break;
        json_t *text = json_object_get(s, "text");
        if (i > 0) {
            memcpy(buf + at, SUMMARY_JOIN, strlen(SUMMARY_JOIN));
            at += strlen(SUMMARY_JOIN);
        }
        memcpy(buf + at, json_string_value(text), json_string_length(text));
        at += json_string_length(text);
    }
    if (st == CG_OK)
        *out = (struct cg_str){buf, joined};
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const reasoning_keys[] = {"type", "encrypted_content", NULL};

/* A reasoning item: the joined summary is the part's text, encrypted_content its signature;
 * id, the original summary array and the other keys stay in the part's extra (the writer
 * compares the text with that summary to see whether a layer changed it). */
static cg_status read_reasoning(struct ctx *c, json_t *item, struct group *g)
{
    struct cg_message *m;
    struct cg_part *p;
    cg_status st;
    if ((st = group_message(c, g, &m)) != CG_OK ||
        (st = cg__cj_add_part(c, m, CG_PART_REASONING, &p)) != CG_OK ||
        (st = read_summary(c, json_object_get(item, "summary"), &p->u.reasoning.text)) != CG_OK ||
        (st = cg__cj_get_string(c, item, "encrypted_content", false, &p->u.reasoning.signature)) !=
            CG_OK)
        return st;
    return keep_unknown(c, item, reasoning_keys, &p->extra);
}

/* A function_call_output's array output: input_text parts joined, input_image parts as the
 * result's images. */
static cg_status read_output_parts(struct ctx *c, json_t *output, struct cg_tool_result *r)
{
    size_t i, joined = 0, images = 0, texts = 0;
    json_t *b;
    cg_status st = CG_OK;
    json_array_foreach(output, i, b)
    {
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        json_t *tv = json_object_get(b, "type");
        if ((st = cg__cj_expect_object(c, b)) == CG_OK && type_is(tv, "input_text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t))
                st = cg__cj_get_string(c, b, "text", true, &r->content); /* names it */
            else
                joined += json_string_length(t) + (texts++ > 0 ? strlen(OUTPUT_JOIN) : 0);
        } else if (st == CG_OK && type_is(tv, "input_image")) {
            images++;
        } else if (st == CG_OK) {
            st = unsupported_type(c, tv, "output part type", "input_text, input_image");
        }
        cg__cj_path_pop(c, s2);
        if (st != CG_OK)
            return st;
    }
    char *buf = cg_conv_alloc(c->conv, joined + 1, 1);
    r->images = images > 0 ? cg_conv_alloc(c->conv, images, sizeof *r->images) : NULL;
    if (buf == NULL || (images > 0 && r->images == NULL))
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
    size_t at = 0, written = 0;
    json_array_foreach(output, i, b)
    {
        if (type_is(json_object_get(b, "type"), "input_text")) {
            json_t *t = json_object_get(b, "text");
            if (written++ > 0) {
                memcpy(buf + at, OUTPUT_JOIN, strlen(OUTPUT_JOIN));
                at += strlen(OUTPUT_JOIN);
            }
            memcpy(buf + at, json_string_value(t), json_string_length(t));
            at += json_string_length(t);
            continue;
        }
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        struct cg_image *im = &r->images[r->n_images++];
        *im = (struct cg_image){
            .media_type = {"", 0}, .data = {"", 0}, .url = {"", 0}, .detail = {"", 0}};
        st = read_image(c, b, im, true);
        cg__cj_path_pop(c, s2);
        if (st != CG_OK)
            return st;
    }
    r->content = (struct cg_str){buf, joined};
    return CG_OK;
}

static const char *const output_keys[] = {"type", "call_id", "output", NULL};

static cg_status read_function_call_output(struct ctx *c, json_t *item, struct group *g)
{
    struct cg_message *m;
    struct cg_part *p;
    cg_status st;
    g->open = false;
    if ((st = cg_conv_add_message(c->conv, CG_ROLE_TOOL, &m, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    struct cg_tool_result *r;
    if ((st = cg__cj_add_part(c, m, CG_PART_TOOL_RESULT, &p)) != CG_OK ||
        (st = cg__cj_get_id(c, item, "call_id", &p->u.tool_result.tool_call_id)) != CG_OK)
        return st;
    r = &p->u.tool_result;
    json_t *output = json_object_get(item, "output");
    size_t saved = cg__cj_path_push(c, ".output");
    if (output == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (json_is_string(output)) {
        r->form = CG_FORM_STRING;
        st = copy_string(c, output, &r->content);
    } else if (json_is_array(output)) {
        r->form = CG_FORM_PARTS;
        st = read_output_parts(c, output, r);
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of parts, got %s",
                         cg__cj_type_name(output));
    }
    cg__cj_path_pop(c, saved);
    if (st != CG_OK)
        return st;
    m->form = r->form;
    return keep_unknown(c, item, output_keys, &m->extra);
}

#define ITEM_TYPES "message, function_call, function_call_output, reasoning"

static cg_status read_item(struct ctx *c, json_t *item, struct group *g)
{
    cg_status st = cg__cj_expect_object(c, item);
    if (st != CG_OK)
        return st;
    json_t *tv = json_object_get(item, "type");
    if ((tv == NULL && json_object_get(item, "role") != NULL) || type_is(tv, "message"))
        return read_message(c, item, g);
    if (type_is(tv, "function_call"))
        return read_function_call(c, item, g);
    if (type_is(tv, "reasoning"))
        return read_reasoning(c, item, g);
    if (type_is(tv, "function_call_output"))
        return read_function_call_output(c, item, g);
    return unsupported_type(c, tv, "item type", ITEM_TYPES);
}

/* The document's input (at the current path): a string or an array of items. */
static cg_status read_input(struct ctx *c, json_t *input)
{
    if (json_is_string(input)) {
        struct cg_message *m;
        struct cg_part *p;
        cg_status st = cg_conv_add_message(c->conv, CG_ROLE_USER, &m, c->err);
        if (st != CG_OK)
            return cg__cj_fail_from(c, st);
        m->form = CG_FORM_STRING;
        if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) != CG_OK)
            return st;
        return copy_string(c, input, &p->u.text);
    }
    if (!json_is_array(input))
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of items, got %s",
                           cg__cj_type_name(input));
    struct group g = {0};
    size_t i;
    json_t *item;
    json_array_foreach(input, i, item)
    {
        size_t saved = cg__cj_path_push(c, "[%zu]", i);
        cg_status st = read_item(c, item, &g);
        cg__cj_path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* ------------------------------------------------------------------ read: top -------- */

static const char *const function_tool_keys[] = {"type", "name", "description", "parameters", NULL};
static const char *const builtin_tool_keys[] = {"type", NULL};

/* A tool: flat function tools into name/description/parameters (strict and the rest in
 * extra); other types keep everything but "type" in extra and are named by "name" or type. */
static cg_status read_tool(struct ctx *c, json_t *tool)
{
    cg_status st = cg__cj_expect_object(c, tool);
    struct cg_tool_def *t;
    if (st != CG_OK)
        return st;
    if ((st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    /* A type and a name of 1..CG_CONV_ID_MAX bytes, as the writer needs them back. */
    if ((st = cg__cj_get_id(c, tool, "type", &t->type)) != CG_OK)
        return st;
    if (strcmp(t->type.ptr, "function") != 0) {
        json_t *name = json_object_get(tool, "name");
        st = json_is_string(name)
                 ? cg__cj_get_id(c, tool, "name", &t->name)
                 : cg_conv_str(c->conv, t->type.ptr, t->type.len, &t->name, c->err);
        if (st != CG_OK)
            return json_is_string(name) ? st : cg__cj_fail_from(c, st);
        return keep_unknown(c, tool, builtin_tool_keys, &t->extra);
    }
    if ((st = cg__cj_get_id(c, tool, "name", &t->name)) != CG_OK ||
        (st = cg__cj_get_string(c, tool, "description", false, &t->description)) != CG_OK)
        return st;
    json_t *params = json_object_get(tool, "parameters");
    if (params != NULL && !json_is_null(params)) {
        size_t saved = cg__cj_path_push(c, ".parameters");
        st = json_is_object(params) ? cg__cj_dump_value(c, params, &t->parameters)
                                    : cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object");
        cg__cj_path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    return keep_unknown(c, tool, function_tool_keys, &t->extra);
}

static cg_status read_one_tool(void *arg, json_t *tool)
{
    return read_tool(arg, tool);
}

static cg_status read_tools(struct ctx *c, json_t *tools)
{
    size_t saved = cg__cj_path_push(c, ".tools");
    cg_status st = cg__cj_each(c, tools, read_one_tool, c);
    cg__cj_path_pop(c, saved);
    return st;
}

/* "instructions": the leading SYSTEM message, written back there (system_form STRING). */
static cg_status read_instructions(struct ctx *c, json_t *instructions)
{
    size_t saved = cg__cj_path_push(c, ".instructions");
    cg_status st = CG_OK;
    struct cg_message *m;
    struct cg_part *p;
    if (!json_is_string(instructions))
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s",
                         cg__cj_type_name(instructions));
    else if ((st = cg_conv_add_message(c->conv, CG_ROLE_SYSTEM, &m, c->err)) != CG_OK)
        st = cg__cj_fail_from(c, st);
    else if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
        st = copy_string(c, instructions, &p->u.text);
    if (st == CG_OK) {
        m->form = CG_FORM_STRING;
        c->conv->system_form = CG_FORM_STRING;
    }
    cg__cj_path_pop(c, saved);
    return st;
}

/* The other keys of a request object, in order, with the model's own as placeholders: null,
 * or STRING_INPUT_VALUE for an input that was a string. */
static cg_status keep_top_extra(struct ctx *c, json_t *root)
{
    json_t *shallow = json_copy(root);
    if (shallow == NULL)
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
    static const char *const owned[] = {"input", "tools", "model", "instructions"};
    for (size_t k = 0; k < sizeof owned / sizeof owned[0]; k++)
        if (json_object_get(shallow, owned[k]) != NULL)
            json_object_set_new(shallow, owned[k], json_null());
    if (json_is_string(json_object_get(root, "input")))
        json_object_set_new(shallow, "input", json_string(STRING_INPUT_VALUE));
    cg_status st = cg__cj_dump_value(c, shallow, &c->conv->top_extra);
    json_decref(shallow);
    return st;
}

static cg_status read_top_object(struct ctx *c, json_t *root)
{
    struct cg_conv *conv = c->conv;
    conv->top_is_object = true;
    json_t *input = json_object_get(root, "input");
    if (input == NULL)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT,
                           "an object needs \"input\" (a string or an array of items)");
    cg_status st = cg__cj_get_string(c, root, "model", false, &conv->model);
    json_t *instructions = json_object_get(root, "instructions");
    if (st == CG_OK && instructions != NULL && !json_is_null(instructions))
        st = read_instructions(c, instructions);
    json_t *tools = json_object_get(root, "tools");
    conv->has_tools_key = tools != NULL && !json_is_null(tools);
    if (st == CG_OK && conv->has_tools_key)
        st = read_tools(c, tools);
    if (st == CG_OK)
        st = keep_top_extra(c, root);
    if (st != CG_OK)
        return st;
    size_t saved = cg__cj_path_push(c, ".input");
    st = read_input(c, input);
    cg__cj_path_pop(c, saved);
    return st;
}

cg_status cg__cj_responses_read(struct ctx *c, json_t *root)
{
    if (json_is_object(root))
        return read_top_object(c, root);
    if (!json_is_string(root) && !json_is_array(root))
        return cg__cj_fail(c, CG_INVALID_ARGUMENT,
                           "expected an array of items, a string or an object with \"input\", "
                           "got %s",
                           cg__cj_type_name(root));
    if (json_is_string(root)) {
        cg_status st = cg_conv_str(c->conv, STRING_INPUT_MARK, strlen(STRING_INPUT_MARK),
                                   &c->conv->top_extra, c->err);
        if (st != CG_OK)
            return cg__cj_fail_from(c, st);
    }
    return read_input(c, root);
}

/* ------------------------------------------------------------------ write: parts ----- */

/* The part's extra as an object when it goes back (same origin); NULL otherwise. */
static json_t *extra_of(const struct wctx *w, const struct cg_str *extra)
{
    if (!w->same_origin || extra->len == 0)
        return NULL;
    json_t *e = cg_json_load(extra->ptr, extra->len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(e)) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Code points of UTF-8 text (annotation indexes count characters, not bytes). */
static size_t code_points(const struct cg_str *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->len; i++)
        n += ((unsigned char)s->ptr[i] & 0xC0) != 0x80;
    return n;
}

/* Kept annotations whose indexes fall outside the text were written for a text a layer has
 * since replaced: they become []. */
static void fit_annotations(json_t *block, const struct cg_str *text)
{
    json_t *anns = json_object_get(block, "annotations");
    size_t i, chars = code_points(text);
    json_t *a;
    json_array_foreach(anns, i, a)
    {
        json_t *start = json_object_get(a, "start_index"), *end = json_object_get(a, "end_index");
        if ((json_is_integer(start) && (size_t)json_integer_value(start) > chars) ||
            (json_is_integer(end) && (size_t)json_integer_value(end) > chars) ||
            json_integer_value(start) < 0 || json_integer_value(end) < 0) {
            json_object_set_new(block, "annotations", json_array());
            return;
        }
    }
}

/* A text part as an input_text, output_text or refusal block: the kept type when the part
 * came from this format, else the role's default. */
static json_t *text_block(const struct wctx *w, const struct cg_part *p, cg_role role)
{
    json_t *extra = extra_of(w, &p->extra);
    const char *type = json_string_value(json_object_get(extra, "type"));
    if (type == NULL || (strcmp(type, "input_text") != 0 && strcmp(type, "output_text") != 0 &&
                         strcmp(type, "refusal") != 0))
        type = role == CG_ROLE_ASSISTANT ? "output_text" : "input_text";
    json_t *text = cg__cj_jstr(&p->u.text);
    json_t *b = text != NULL ? json_pack("{s:s, s:o}", "type", type,
                                         strcmp(type, "refusal") == 0 ? "refusal" : "text", text)
                             : NULL;
    if (b != NULL && extra != NULL)
        json_object_update_missing(b, extra);
    if (b != NULL && strcmp(type, "output_text") == 0) {
        if (json_object_get(b, "annotations") == NULL && extra == NULL)
            json_object_set_new(b, "annotations", json_array());
        fit_annotations(b, &p->u.text);
    }
    json_decref(extra);
    return b;
}

/* An input_image block (extra: the part's kept keys, file_id among them, or NULL). NULL when
 * the image has neither URL, bytes nor a kept file_id. fresh: written for another format, so
 * the detail the schema requires is given. */
static json_t *image_block(const struct cg_image *im, json_t *extra, bool fresh)
{
    json_t *b = json_pack("{s:s}", "type", "input_image");
    json_t *url = cg__cj_image_url(im);
    if (b == NULL || (url == NULL && !json_is_string(json_object_get(extra, "file_id")))) {
        json_decref(b);
        json_decref(url);
        return NULL;
    }
    if (url != NULL)
        json_object_set_new(b, "image_url", url);
    if (im->detail.len > 0)
        json_object_set_new(b, "detail", cg__cj_jstr(&im->detail));
    else if (fresh)
        json_object_set_new(b, "detail", json_string("auto"));
    if (extra != NULL)
        json_object_update_missing(b, extra);
    return b;
}

static cg_status no_image_source(struct wctx *w, size_t mi, size_t pi)
{
    return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu].image: Responses JSON needs its URL, its bytes "
                        "or its file_id",
                        mi, pi);
}

/* The blocks of parts [from, to) of m (text and images) appended to arr. */
static cg_status blocks_out(struct wctx *w, const struct cg_message *m, size_t mi, size_t from,
                            size_t to, json_t *arr)
{
    for (size_t i = from; i < to; i++) {
        const struct cg_part *p = &m->parts[i];
        json_t *b;
        if (p->kind == CG_PART_TEXT) {
            if ((b = text_block(w, p, m->role)) == NULL)
                return cg__cj_bad_utf8(w, mi, i, "text");
        } else {
            if (m->role == CG_ROLE_ASSISTANT)
                return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                    "messages[%zu].parts[%zu]: a Responses assistant message "
                                    "cannot hold images",
                                    mi, i);
            json_t *extra = extra_of(w, &p->extra);
            b = image_block(&p->u.image, extra, extra == NULL);
            json_decref(extra);
            if (b == NULL)
                return no_image_source(w, mi, i);
        }
        if (json_array_append_new(arr, b) != 0)
            return WOOM(w);
    }
    return CG_OK;
}

/* ------------------------------------------------------------------ write: items ----- */

/* A message item of parts [from, to) of m (text and images). with_keys: this item carries the
 * message's kept keys and form (the first one written for m). */
static cg_status message_item_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                  size_t from, size_t to, bool with_keys, json_t *items)
{
    json_t *o = json_pack("{s:s}", "role", cg_conv_role_name(m->role));
    if (o == NULL || json_array_append_new(items, o) != 0)
        return WOOM(w);
    cg_content_form form = with_keys && w->same_origin ? m->form : CG_FORM_DEFAULT;
    const struct cg_part *p = from < to ? &m->parts[from] : NULL; /* parts is NULL when none */
    bool one_plain_text =
        to == from + 1 && p->kind == CG_PART_TEXT && (p->extra.len == 0 || !w->same_origin);
    json_t *content;
    if (to == from && form != CG_FORM_PARTS)
        content = json_string("");
    else if (one_plain_text && form != CG_FORM_PARTS)
        content = cg__cj_jstr(&p->u.text);
    else
        content = json_array();
    if (content == NULL)
        return cg__cj_bad_utf8(w, mi, from, "text");
    json_object_set_new(o, "content", content);
    cg_status st = CG_OK;
    if (json_is_array(content))
        st = blocks_out(w, m, mi, from, to, content);
    if (with_keys)
        cg__cj_merge_extra(w, o, &m->extra);
    return st;
}

/* Whether s fits where the reader takes an id or name (1..CG_CONV_ID_MAX bytes): what the
 * writer gives, the reader must take back. */
static bool id_fits(const struct cg_str *s)
{
    return s->len > 0 && s->len <= CG_CONV_ID_MAX;
}

static cg_status bad_id(struct wctx *w, size_t mi, size_t pi, const char *field)
{
    return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu].%s: Responses JSON needs 1..%d bytes", mi, pi,
                        field, CG_CONV_ID_MAX);
}

static cg_status function_call_out(struct wctx *w, const struct cg_part *p, size_t mi, size_t pi,
                                   json_t *items)
{
    const struct cg_tool_call *tc = &p->u.tool_call;
    if (!id_fits(&tc->id) || !id_fits(&tc->name))
        return bad_id(w, mi, pi, id_fits(&tc->id) ? "tool_call.name" : "tool_call.id");
    json_t *id = cg__cj_jstr(&tc->id), *name = cg__cj_jstr(&tc->name),
           *args = cg__cj_jstr(&tc->arguments);
    if (id == NULL || name == NULL || args == NULL) {
        json_decref(id);
        json_decref(name);
        json_decref(args);
        return cg__cj_bad_utf8(w, mi, pi, "tool_call");
    }
    json_t *o = json_pack("{s:s, s:o, s:o, s:o}", "type", "function_call", "call_id", id, "name",
                          name, "arguments", args);
    if (o == NULL || json_array_append_new(items, o) != 0)
        return WOOM(w);
    cg__cj_merge_extra(w, o, &p->extra);
    return CG_OK;
}

/* Whether the texts of a kept summary array joined with SUMMARY_JOIN are text. */
static bool summary_is(json_t *summary, const struct cg_str *text)
{
    size_t i, at = 0, sep = strlen(SUMMARY_JOIN);
    json_t *s;
    if (!json_is_array(summary))
        return false;
    json_array_foreach(summary, i, s)
    {
        json_t *t = json_object_get(s, "text");
        size_t n = json_string_length(t);
        if (i > 0 && (at + sep > text->len || memcmp(text->ptr + at, SUMMARY_JOIN, sep) != 0))
            return false;
        at += i > 0 ? sep : 0;
        if (!json_is_string(t) || at + n > text->len ||
            memcmp(text->ptr + at, json_string_value(t), n) != 0)
            return false;
        at += n;
    }
    return at == text->len;
}

/* A reasoning part read from a Responses reasoning item (its extra keeps the summary); the
 * reasoning of other formats has no item id the API would take and is left out. */
static cg_status reasoning_out(struct wctx *w, const struct cg_part *p, size_t mi, size_t pi,
                               json_t *items)
{
    const struct cg_reasoning *r = &p->u.reasoning;
    json_t *extra = extra_of(w, &p->extra);
    json_t *kept = json_object_get(extra, "summary");
    if (kept == NULL || r->redacted) {
        json_decref(extra);
        return CG_OK;
    }
    json_t *summary;
    if (summary_is(kept, &r->text)) {
        summary = json_incref(kept);
    } else {
        /* A layer changed the text: the kept summary and raw content are stale. */
        json_object_del(extra, "content");
        json_t *t = cg__cj_jstr(&r->text);
        summary = t == NULL         ? NULL
                  : r->text.len > 0 ? json_pack("[{s:s, s:o}]", "type", "summary_text", "text", t)
                                    : (json_decref(t), json_array());
    }
    json_t *o =
        summary != NULL ? json_pack("{s:s, s:o}", "type", "reasoning", "summary", summary) : NULL;
    if (o != NULL && r->signature.len > 0 &&
        !cg__cj_set_str(o, "encrypted_content", &r->signature)) {
        json_decref(o);
        o = NULL;
    }
    if (o != NULL)
        json_object_update_missing(o, extra);
    json_decref(extra);
    if (o == NULL)
        return cg__cj_bad_utf8(w, mi, pi, "reasoning");
    return json_array_append_new(items, o) == 0 ? CG_OK : WOOM(w);
}

/* An assistant message: runs of text parts as message items, each tool call a function_call
 * item, each reasoning part a reasoning item, in the parts' order. */
static cg_status assistant_items(struct wctx *w, const struct cg_message *m, size_t mi,
                                 json_t *items)
{
    size_t first_item = json_array_size(items), run = SIZE_MAX;
    bool keys_used = false;
    cg_status st = CG_OK;
    for (size_t i = 0; i <= m->n_parts && st == CG_OK; i++) {
        cg_part_kind kind = i < m->n_parts ? m->parts[i].kind : CG_PART_TOOL_CALL;
        bool content = i < m->n_parts && (kind == CG_PART_TEXT || kind == CG_PART_IMAGE);
        if (content && run == SIZE_MAX)
            run = i;
        if (content)
            continue;
        if (run != SIZE_MAX) {
            st = message_item_out(w, m, mi, run, i, !keys_used, items);
            keys_used = true;
            run = SIZE_MAX;
        }
        if (st != CG_OK || i == m->n_parts)
            break;
        if (kind == CG_PART_TOOL_CALL)
            st = function_call_out(w, &m->parts[i], mi, i, items);
        else if (kind == CG_PART_REASONING)
            st = reasoning_out(w, &m->parts[i], mi, i, items);
        else
            st = cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                              "messages[%zu].parts[%zu]: an assistant message cannot hold tool "
                              "results",
                              mi, i);
    }
    if (st != CG_OK || keys_used || !w->same_origin ||
        (m->form != CG_FORM_STRING && m->form != CG_FORM_PARTS))
        return st;
    /* An assistant message item with empty content: written first, where the reader put it. */
    json_t *tail = json_array();
    if (tail == NULL || (st = message_item_out(w, m, mi, 0, 0, true, tail)) != CG_OK) {
        json_decref(tail);
        return st != CG_OK ? st : WOOM(w);
    }
    int rc = json_array_insert(items, first_item, json_array_get(tail, 0));
    json_decref(tail);
    return rc == 0 ? CG_OK : WOOM(w);
}

/* assistant_items, less the item ids when a layer removed the turn's reasoning: the API
 * refuses an item whose id says a reasoning item came with it when that item is not sent
 * ("provided without its required 'reasoning' item"); without an id it is taken as is. */
static cg_status assistant_out(struct wctx *w, const struct cg_message *m, size_t mi, json_t *items)
{
    size_t from = json_array_size(items);
    cg_status st = assistant_items(w, m, mi, items);
    for (size_t i = from; st == CG_OK && m->lost_reasoning && i < json_array_size(items); i++)
        json_object_del(json_array_get(items, i), "id");
    return st;
}

/* A function_call_output's output: a string, or an input_text part and the images. */
static json_t *output_value(const struct wctx *w, const struct cg_tool_result *r)
{
    json_t *text = cg__cj_jstr(&r->content);
    if (text == NULL || (r->n_images == 0 && (r->form != CG_FORM_PARTS || !w->same_origin)))
        return text;
    json_t *arr = json_array();
    if (arr != NULL && r->content.len > 0)
        json_array_append_new(arr, json_pack("{s:s, s:O}", "type", "input_text", "text", text));
    json_decref(text);
    for (size_t k = 0; arr != NULL && k < r->n_images; k++) {
        json_t *b = image_block(&r->images[k], NULL, !w->same_origin);
        if (b == NULL || json_array_append_new(arr, b) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

static cg_status result_out(struct wctx *w, const struct cg_message *m, size_t mi, size_t pi,
                            bool with_keys, json_t *items)
{
    const struct cg_tool_result *r = &m->parts[pi].u.tool_result;
    if (!id_fits(&r->tool_call_id))
        return bad_id(w, mi, pi, "tool_result.tool_call_id");
    json_t *id = cg__cj_jstr(&r->tool_call_id);
    json_t *output = id != NULL ? output_value(w, r) : NULL;
    if (output == NULL) {
        json_decref(id);
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                            "messages[%zu].parts[%zu].tool_result: invalid UTF-8 or an image "
                            "without a URL or bytes",
                            mi, pi);
    }
    json_t *o = json_pack("{s:s, s:o, s:o}", "type", "function_call_output", "call_id", id,
                          "output", output);
    if (o == NULL || json_array_append_new(items, o) != 0)
        return WOOM(w);
    if (with_keys)
        cg__cj_merge_extra(w, o, &m->extra);
    return CG_OK;
}

/* A user, system, developer or tool message: its tool results as function_call_output items
 * first, then (unless it held only results) one message item of the rest. */
static cg_status other_message_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                   json_t *items)
{
    size_t nresults = 0;
    cg_status st = CG_OK;
    for (size_t i = 0; i < m->n_parts && st == CG_OK; i++) {
        cg_part_kind kind = m->parts[i].kind;
        if (kind == CG_PART_TOOL_RESULT && m->role != CG_ROLE_USER && m->role != CG_ROLE_TOOL) {
            st = cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                              "messages[%zu].parts[%zu]: a %s message cannot hold tool results", mi,
                              i, cg_conv_role_name(m->role));
        } else if (kind == CG_PART_TOOL_RESULT) {
            /* A tool message's kept keys (id, status) go with its first output only. */
            st = result_out(w, m, mi, i, m->role == CG_ROLE_TOOL && nresults == 0, items);
            nresults++;
        } else if (m->role == CG_ROLE_TOOL) {
            st = cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                              "messages[%zu].parts[%zu]: a tool message holds tool results", mi, i);
        } else if (kind != CG_PART_TEXT && kind != CG_PART_IMAGE) {
            st = cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                              "messages[%zu].parts[%zu]: only assistant messages carry tool calls "
                              "and reasoning",
                              mi, i);
        }
    }
    if (st != CG_OK || m->role == CG_ROLE_TOOL || (nresults > 0 && nresults == m->n_parts))
        return st;
    if (nresults == 0)
        return message_item_out(w, m, mi, 0, m->n_parts, true, items);
    /* Results written above; the rest of the message, without them, as one item. */
    struct cg_message rest = *m;
    struct cg_part *parts = malloc(m->n_parts * sizeof *parts);
    if (parts == NULL)
        return WOOM(w);
    rest.n_parts = 0;
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind != CG_PART_TOOL_RESULT)
            parts[rest.n_parts++] = m->parts[i];
    rest.parts = parts;
    st = message_item_out(w, &rest, mi, 0, rest.n_parts, true, items);
    free(parts);
    return st;
}

/* ------------------------------------------------------------------ write: top ------- */

/* Whether a function tool of another format was strict (chat keeps it in the extra). */
static bool was_strict(const struct cg_tool_def *t)
{
    json_t *e = cg__cj_parse_object_or_empty(&t->extra);
    bool strict = json_is_true(json_object_get(e, "strict"));
    json_decref(e);
    return strict;
}

static bool is_function_tool(const struct wctx *w, const struct cg_tool_def *t)
{
    if (t->type.len == 0 || strcmp(t->type.ptr, "function") == 0)
        return true;
    /* Anthropic's "custom" type is its ordinary tool; Responses' own is a free-form one. */
    return !w->same_origin && w->conv->origin == CG_CONV_ORIGIN_ANTHROPIC &&
           strcmp(t->type.ptr, "custom") == 0;
}

static cg_status tool_out(struct wctx *w, const struct cg_tool_def *t, size_t i, json_t *o)
{
    if (!is_function_tool(w, t)) {
        if (!w->same_origin)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "tools[%zu]: a built-in tool of another format (type \"%.40s\") "
                                "cannot be written as Responses JSON",
                                i, t->type.ptr);
        cg__cj_set_str(o, "type", &t->type);
        cg__cj_merge_extra(w, o, &t->extra);
        return CG_OK;
    }
    json_object_set_new(o, "type", json_string("function"));
    if (t->name.len == 0 || t->name.len > CG_CONV_ID_MAX)
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                            "tools[%zu].name: Responses JSON needs 1..%d bytes", i, CG_CONV_ID_MAX);
    if (!cg__cj_set_str(o, "name", &t->name))
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].name: invalid UTF-8", i);
    if (t->description.len > 0 && !cg__cj_set_str(o, "description", &t->description))
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].description: invalid UTF-8", i);
    json_t *params = t->parameters.len > 0 ? cg__cj_parse_object_or_empty(&t->parameters)
                     : w->same_origin      ? NULL
                                      : json_pack("{s:s, s:{}}", "type", "object", "properties");
    if (t->parameters.len > 0 && params == NULL)
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].parameters_json: not a JSON object",
                            i);
    if (params != NULL)
        json_object_set_new(o, "parameters", params);
    if (!w->same_origin)
        json_object_set_new(o, "strict", json_boolean(was_strict(t)));
    cg__cj_merge_extra(w, o, &t->extra);
    return CG_OK;
}

static cg_status tools_out(struct wctx *w, json_t **out)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return WOOM(w);
    *out = arr;
    for (size_t i = 0; i < w->conv->n_tools; i++) {
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(arr, o) != 0)
            return WOOM(w);
        cg_status st = tool_out(w, &w->conv->tools[i], i, o);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* The leading message read from "instructions", still a plain system text: *out its text. */
static bool instructions_message(const struct wctx *w, const struct cg_str **out)
{
    const struct cg_conv *conv = w->conv;
    if (!w->same_origin || conv->system_form != CG_FORM_STRING || conv->n_messages == 0)
        return false;
    const struct cg_message *m = &conv->messages[0];
    if (m->role != CG_ROLE_SYSTEM || m->n_parts != 1 || m->parts[0].kind != CG_PART_TEXT ||
        m->parts[0].extra.len > 0 || m->extra.len > 0)
        return false;
    *out = &m->parts[0].u.text;
    return true;
}

/* Whether the input was a string (the markers of the reader) and still is one plain user
 * text: messages [first, n) are exactly that. */
static bool input_as_string(const struct wctx *w, json_t *top, size_t first)
{
    const struct cg_conv *conv = w->conv;
    bool was_string =
        top != NULL ? json_is_string(json_object_get(top, "input"))
                    : conv->top_extra.len == strlen(STRING_INPUT_MARK) &&
                          memcmp(conv->top_extra.ptr, STRING_INPUT_MARK, conv->top_extra.len) == 0;
    if (!w->same_origin || !was_string || conv->n_messages != first + 1)
        return false;
    const struct cg_message *m = &conv->messages[first];
    return m->role == CG_ROLE_USER && m->n_parts == 1 && m->parts[0].kind == CG_PART_TEXT &&
           m->parts[0].extra.len == 0 && m->extra.len == 0 && m->form != CG_FORM_PARTS;
}

static cg_status items_out(struct wctx *w, size_t first, json_t *items)
{
    cg_status st = CG_OK;
    for (size_t mi = first; mi < w->conv->n_messages && st == CG_OK; mi++) {
        const struct cg_message *m = &w->conv->messages[mi];
        st = m->role == CG_ROLE_ASSISTANT ? assistant_out(w, m, mi, items)
                                          : other_message_out(w, m, mi, items);
    }
    return st;
}

/* The request object: the kept keys (same origin), model, instructions, input, tools. */
static cg_status top_object(struct wctx *w, json_t *top, const struct cg_str *instructions,
                            json_t *input, json_t *tools, json_t **out)
{
    json_t *root = top != NULL ? json_incref(top) : json_object();
    if (root == NULL)
        return WOOM(w);
    *out = root;
    if (w->conv->model.len > 0 && !cg__cj_set_str(root, "model", &w->conv->model))
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "model: invalid UTF-8");
    if (w->conv->model.len == 0)
        json_object_del(root, "model");
    if (instructions != NULL && !cg__cj_set_str(root, "instructions", instructions))
        return cg__cj_bad_utf8(w, 0, 0, "text");
    if (instructions == NULL)
        json_object_del(root, "instructions");
    json_object_set(root, "input", input);
    if (tools != NULL)
        json_object_set(root, "tools", tools);
    else
        json_object_del(root, "tools");
    return CG_OK;
}

cg_status cg__cj_responses_write(struct wctx *w, json_t **out)
{
    const struct cg_conv *conv = w->conv;
    *out = NULL;
    json_t *top = NULL, *input = NULL, *tools = NULL;
    if (w->same_origin && conv->top_is_object)
        top = cg__cj_parse_object_or_empty(&conv->top_extra);
    const struct cg_str *instructions = NULL;
    size_t first = instructions_message(w, &instructions) ? 1 : 0;
    cg_status st = CG_OK;
    if (input_as_string(w, top, first)) {
        input = cg__cj_jstr(&conv->messages[first].parts[0].u.text);
        if (input == NULL)
            st = cg__cj_bad_utf8(w, first, 0, "text");
    } else if ((input = json_array()) == NULL) {
        st = WOOM(w);
    } else {
        st = items_out(w, first, input);
    }
    bool want_tools =
        !conv->tools_external && (conv->n_tools > 0 || (conv->has_tools_key && w->same_origin));
    if (st == CG_OK && want_tools)
        st = tools_out(w, &tools);
    if (st == CG_OK && (conv->top_is_object || instructions != NULL || tools != NULL))
        st = top_object(w, top, instructions, input, tools, out);
    else if (st == CG_OK)
        *out = json_incref(input);
    json_decref(top);
    json_decref(input);
    json_decref(tools);
    if (st != CG_OK) {
        json_decref(*out);
        *out = NULL;
    }
    return st;
}

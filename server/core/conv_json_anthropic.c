/* conv_json_anthropic.c - Anthropic Messages JSON <-> the conversation model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json_internal.h"

/* ---------------------------------------------------------------- Anthropic: read ---- */

static cg_status anthropic_image(struct ctx *c, json_t *block, struct cg_image *im)
{
    json_t *src = json_object_get(block, "source");
    size_t saved = cg__cj_path_push(c, ".source");
    cg_status st = src == NULL ? cg__cj_fail(c, CG_INVALID_ARGUMENT, "required")
                               : cg__cj_expect_object(c, src);
    const char *type = json_string_value(json_object_get(src, "type"));
    if (st == CG_OK && type != NULL && strcmp(type, "base64") == 0) {
        struct cg_str b64 = {"", 0};
        if ((st = cg__cj_get_string(c, src, "media_type", false, &im->media_type)) == CG_OK &&
            (st = cg__cj_get_string(c, src, "data", true, &b64)) == CG_OK) {
            size_t cap = b64.len / 4 * 3 + 3;
            unsigned char *bytes = cg_conv_alloc(c->conv, cap + 1, 1);
            size_t n = bytes != NULL ? cg__cj_b64_decode(b64.ptr, b64.len, bytes, cap) : 0;
            if (bytes == NULL)
                st = cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
            else if (n == SIZE_MAX)
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "\"data\" is not base64");
            else {
                im->data = (struct cg_str){(const char *)bytes, n};
                im->source = CG_IMAGE_SOURCE_DATA;
                im->size_bytes = (int64_t)n;
                cg_conv_image_sniff(bytes, n, &im->width, &im->height);
            }
        }
    } else if (st == CG_OK && type != NULL && strcmp(type, "url") == 0) {
        if ((st = cg__cj_get_string(c, src, "url", true, &im->url)) == CG_OK) {
            im->source = CG_IMAGE_SOURCE_URL;
            cg__cj_describe_data_url(im);
        }
    } else if (st == CG_OK) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "source type must be \"base64\" or \"url\"");
    }
    cg__cj_path_pop(c, saved);
    return st;
}

/* A tool_result's content: a string, or text and image blocks. */
static cg_status anthropic_result_content(struct ctx *c, json_t *block, struct cg_tool_result *r)
{
    json_t *content = json_object_get(block, "content");
    if (content == NULL || json_is_null(content))
        return CG_OK;
    size_t saved = cg__cj_path_push(c, ".content");
    cg_status st = CG_OK;
    if (json_is_string(content)) {
        r->form = CG_FORM_STRING;
        st = cg_conv_str(c->conv, json_string_value(content), json_string_length(content),
                         &r->content, c->err);
        if (st != CG_OK)
            st = cg__cj_fail_from(c, st);
    } else if (json_is_array(content)) {
        r->form = CG_FORM_PARTS;
        size_t i, joined = 0, images = 0;
        json_t *b;
        json_array_foreach(content, i, b)
        {
            size_t s2 = cg__cj_path_push(c, "[%zu]", i);
            const char *type = json_string_value(json_object_get(b, "type"));
            if ((st = cg__cj_expect_object(c, b)) == CG_OK && type != NULL &&
                strcmp(type, "text") == 0) {
                json_t *t = json_object_get(b, "text");
                if (!json_is_string(t))
                    st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "\"text\" must be a string");
                else
                    joined += json_string_length(t) + (joined > 0 ? 1 : 0);
            } else if (st == CG_OK && type != NULL && strcmp(type, "image") == 0) {
                images++;
            } else if (st == CG_OK) {
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                                 "a tool_result holds text and image blocks");
            }
            cg__cj_path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
        char *buf = st == CG_OK ? cg_conv_alloc(c->conv, joined + 1, 1) : NULL;
        r->images =
            st == CG_OK && images > 0 ? cg_conv_alloc(c->conv, images, sizeof *r->images) : NULL;
        if (st == CG_OK && (buf == NULL || (images > 0 && r->images == NULL)))
            st = cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
        size_t at = 0;
        json_array_foreach(content, i, b)
        {
            if (st != CG_OK)
                break;
            const char *type = json_string_value(json_object_get(b, "type"));
            if (strcmp(type, "text") == 0) {
                json_t *t = json_object_get(b, "text");
                if (at > 0)
                    buf[at++] = '\n';
                memcpy(buf + at, json_string_value(t), json_string_length(t));
                at += json_string_length(t);
            } else {
                size_t s2 = cg__cj_path_push(c, "[%zu]", i);
                struct cg_image *im = &r->images[r->n_images++];
                *im = (struct cg_image){
                    .media_type = {"", 0}, .data = {"", 0}, .url = {"", 0}, .detail = {"", 0}};
                st = anthropic_image(c, b, im);
                cg__cj_path_pop(c, s2);
            }
        }
        if (st == CG_OK)
            r->content = (struct cg_str){buf, joined};
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of blocks, got %s",
                         cg__cj_type_name(content));
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const thinking_keys[] = {"type", "thinking", "signature", NULL};
static const char *const redacted_keys[] = {"type", "data", NULL};

/* One content block into a part of m. */
static cg_status anthropic_block(struct ctx *c, json_t *b, struct cg_message *m)
{
    cg_status st = cg__cj_expect_object(c, b);
    if (st != CG_OK)
        return st;
    json_t *tv = json_object_get(b, "type");
    const char *type = json_string_value(tv);
    if (type == NULL) {
        size_t saved = cg__cj_path_push(c, ".type");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "%s",
                         tv == NULL ? "required" : "expected a string");
        cg__cj_path_pop(c, saved);
        return st;
    }
    struct cg_part *p = NULL;
    if (strcmp(type, "text") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
            st = cg__cj_get_string(c, b, "text", true, &p->u.text);
    } else if (strcmp(type, "image") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_IMAGE, &p)) == CG_OK)
            st = anthropic_image(c, b, &p->u.image);
    } else if (strcmp(type, "tool_use") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_TOOL_CALL, &p)) == CG_OK &&
            (st = cg__cj_get_id(c, b, "id", &p->u.tool_call.id)) == CG_OK &&
            (st = cg__cj_get_id(c, b, "name", &p->u.tool_call.name)) == CG_OK) {
            json_t *input = json_object_get(b, "input");
            size_t saved = cg__cj_path_push(c, ".input");
            if (input == NULL)
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
            else if (!json_is_object(input))
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s",
                                 cg__cj_type_name(input));
            else
                st = cg__cj_dump_value(c, input, &p->u.tool_call.arguments);
            cg__cj_path_pop(c, saved);
        }
    } else if (strcmp(type, "tool_result") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_TOOL_RESULT, &p)) == CG_OK &&
            (st = cg__cj_get_id(c, b, "tool_use_id", &p->u.tool_result.tool_call_id)) == CG_OK)
            st = anthropic_result_content(c, b, &p->u.tool_result);
        json_t *is_error = json_object_get(b, "is_error");
        if (st == CG_OK && is_error != NULL && !json_is_boolean(is_error) &&
            !json_is_null(is_error)) {
            size_t saved = cg__cj_path_push(c, ".is_error");
            st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a boolean");
            cg__cj_path_pop(c, saved);
        }
        if (st == CG_OK)
            p->u.tool_result.is_error = json_is_true(is_error);
    } else if (strcmp(type, "thinking") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_REASONING, &p)) == CG_OK &&
            (st = cg__cj_get_string(c, b, "thinking", true, &p->u.reasoning.text)) == CG_OK)
            st = cg__cj_get_string(c, b, "signature", false, &p->u.reasoning.signature);
    } else if (strcmp(type, "redacted_thinking") == 0) {
        if ((st = cg__cj_add_part(c, m, CG_PART_REASONING, &p)) == CG_OK &&
            (st = cg__cj_get_string(c, b, "data", true, &p->u.reasoning.text)) == CG_OK)
            p->u.reasoning.redacted = true;
    } else {
        char shown[KEY_SHOWN_MAX + 1];
        cg__cj_show_key(shown, sizeof shown, type, json_string_length(tv));
        size_t saved = cg__cj_path_push(c, ".type");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "unknown block type \"%s\"", shown);
        cg__cj_path_pop(c, saved);
        return st;
    }
    if (st != CG_OK)
        return st;
    json_t *cc = json_object_get(b, "cache_control");
    p->cache_breakpoint = cc != NULL && !json_is_null(cc);
    /* cache_control stays in extra too, so that its options (ttl) survive a round trip. */
    const char *const *keep = thinking_keys;
    static const char *const text_keys_no_cc[] = {"type", "text", NULL};
    static const char *const image_keys_no_cc[] = {"type", "source", NULL};
    static const char *const tool_use_no_cc[] = {"type", "id", "name", "input", NULL};
    static const char *const tool_result_no_cc[] = {"type", "tool_use_id", "content", "is_error",
                                                    NULL};
    switch (p->kind) {
    case CG_PART_TEXT:
        keep = text_keys_no_cc;
        break;
    case CG_PART_IMAGE:
        keep = image_keys_no_cc;
        break;
    case CG_PART_TOOL_CALL:
        keep = tool_use_no_cc;
        break;
    case CG_PART_TOOL_RESULT:
        keep = tool_result_no_cc;
        break;
    case CG_PART_REASONING:
        keep = p->u.reasoning.redacted ? redacted_keys : thinking_keys;
        break;
    }
    return cg__cj_keep_extra(c, b, keep, &p->extra);
}

static cg_status anthropic_content(struct ctx *c, json_t *content, struct cg_message *m,
                                   const char *segment)
{
    size_t saved = cg__cj_path_push(c, "%s", segment);
    cg_status st = CG_OK;
    if (content == NULL) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (json_is_string(content)) {
        m->form = CG_FORM_STRING;
        struct cg_part *p;
        if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK) {
            st = cg_conv_str(c->conv, json_string_value(content), json_string_length(content),
                             &p->u.text, c->err);
            if (st != CG_OK)
                st = cg__cj_fail_from(c, st);
        }
    } else if (json_is_array(content)) {
        m->form = CG_FORM_PARTS;
        size_t i;
        json_t *b;
        json_array_foreach(content, i, b)
        {
            size_t s2 = cg__cj_path_push(c, "[%zu]", i);
            st = anthropic_block(c, b, m);
            cg__cj_path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of blocks, got %s",
                         cg__cj_type_name(content));
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const anthropic_msg_keys[] = {"role", "content", NULL};

cg_status cg__cj_anthropic_message(struct ctx *c, json_t *msg)
{
    cg_status st = cg__cj_expect_object(c, msg);
    cg_role role = CG_ROLE_USER;
    if (st == CG_OK)
        st = cg__cj_parse_role(c, msg, true, &role);
    if (st != CG_OK)
        return st;
    struct cg_message *m;
    if ((st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    if ((st = anthropic_content(c, json_object_get(msg, "content"), m, ".content")) != CG_OK)
        return st;
    return cg__cj_keep_extra(c, msg, anthropic_msg_keys, &m->extra);
}

cg_status cg__cj_anthropic_system(struct ctx *c, json_t *system)
{
    size_t saved = cg__cj_path_push(c, ".system");
    cg_status st = CG_OK;
    struct cg_message *m;
    if (!json_is_string(system) && !json_is_array(system)) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                         "expected a string or an array of text blocks, got %s",
                         cg__cj_type_name(system));
    } else if ((st = cg_conv_add_message(c->conv, CG_ROLE_SYSTEM, &m, c->err)) != CG_OK) {
        st = cg__cj_fail_from(c, st);
    } else {
        st = anthropic_content(c, system, m, "");
        c->conv->system_form = m->form;
        for (size_t i = 0; st == CG_OK && i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TEXT)
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "[%zu]: system blocks must be text", i);
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const anthropic_tool_keys[] = {"name", "description", "input_schema", "type",
                                                  NULL};

cg_status cg__cj_anthropic_tool(struct ctx *c, json_t *tool)
{
    cg_status st = cg__cj_expect_object(c, tool);
    struct cg_tool_def *t;
    if (st == CG_OK && (st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    if (st != CG_OK || (st = cg__cj_get_id(c, tool, "name", &t->name)) != CG_OK ||
        (st = cg__cj_get_string(c, tool, "description", false, &t->description)) != CG_OK ||
        (st = cg__cj_get_string(c, tool, "type", false, &t->type)) != CG_OK)
        return st;
    json_t *schema = json_object_get(tool, "input_schema");
    if (schema != NULL && !json_is_null(schema)) {
        size_t saved = cg__cj_path_push(c, ".input_schema");
        st = json_is_object(schema) ? cg__cj_dump_value(c, schema, &t->parameters)
                                    : cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object");
        cg__cj_path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    return cg__cj_keep_extra(c, tool, anthropic_tool_keys, &t->extra);
}

/* ---- Anthropic ---- */

static json_t *anthropic_image_block(const struct cg_image *im)
{
    json_t *src = NULL;
    struct cg_str mt, payload;
    if (im->source == CG_IMAGE_SOURCE_DATA) {
        size_t n;
        char *b64 = cg__cj_b64_encode((const unsigned char *)im->data.ptr, im->data.len, &n);
        if (b64 == NULL)
            return NULL;
        json_t *media = cg__cj_jstr(&im->media_type);
        src = json_pack("{s:s, s:o, s:s%}", "type", "base64", "media_type", media, "data", b64, n);
        free(b64);
    } else if (im->source == CG_IMAGE_SOURCE_URL &&
               cg__cj_data_url_base64(&im->url, &mt, &payload)) {
        /* A base64 data: URL becomes a base64 source without decoding it (any other URL,
         * a data: URL that is not base64 too, stays a URL, as Anthropic's reader takes it). */
        src = json_pack("{s:s, s:s%, s:s%}", "type", "base64", "media_type", mt.ptr, mt.len, "data",
                        payload.ptr, payload.len);
    } else if (im->source == CG_IMAGE_SOURCE_URL) {
        src = json_pack("{s:s, s:o}", "type", "url", "url", cg__cj_jstr(&im->url));
    }
    if (src == NULL)
        return NULL;
    return json_pack("{s:s, s:o}", "type", "image", "source", src);
}

static void set_cache_control(struct wctx *w, json_t *b, const struct cg_part *p)
{
    cg__cj_merge_extra(w, b, &p->extra);
    if (p->cache_breakpoint && json_object_get(b, "cache_control") == NULL)
        json_object_set_new(b, "cache_control", json_pack("{s:s}", "type", "ephemeral"));
    else if (!p->cache_breakpoint)
        json_object_del(b, "cache_control");
}

static cg_status anthropic_block_out(struct wctx *w, const struct cg_part *p, size_t mi, size_t pi,
                                     json_t **out)
{
    json_t *b = NULL;
    switch (p->kind) {
    case CG_PART_TEXT: {
        json_t *t = cg__cj_jstr(&p->u.text);
        if (t == NULL)
            return cg__cj_bad_utf8(w, mi, pi, "text");
        b = json_pack("{s:s, s:o}", "type", "text", "text", t);
        break;
    }
    case CG_PART_IMAGE:
        b = anthropic_image_block(&p->u.image);
        if (b == NULL)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "messages[%zu].parts[%zu].image: Anthropic JSON needs its bytes, a "
                                "base64 data: URL or an http(s) URL",
                                mi, pi);
        break;
    case CG_PART_TOOL_CALL: {
        json_t *input = cg__cj_parse_object_or_empty(&p->u.tool_call.arguments);
        if (input == NULL)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "messages[%zu].parts[%zu].tool_call.arguments: not a JSON object "
                                "(Anthropic tool_use input must be one)",
                                mi, pi);
        json_t *id = cg__cj_jstr(&p->u.tool_call.id), *name = cg__cj_jstr(&p->u.tool_call.name);
        if (id == NULL || name == NULL) {
            json_decref(id);
            json_decref(name);
            json_decref(input);
            return cg__cj_bad_utf8(w, mi, pi, "tool_call");
        }
        b = json_pack("{s:s, s:o, s:o, s:o}", "type", "tool_use", "id", id, "name", name, "input",
                      input);
        break;
    }
    case CG_PART_TOOL_RESULT: {
        const struct cg_tool_result *r = &p->u.tool_result;
        json_t *id = cg__cj_jstr(&r->tool_call_id), *content = cg__cj_jstr(&r->content);
        if (id == NULL || content == NULL) {
            json_decref(id);
            json_decref(content);
            return cg__cj_bad_utf8(w, mi, pi, "tool_result");
        }
        if (r->n_images > 0 || (r->form == CG_FORM_PARTS && w->same_origin)) {
            json_t *arr = json_array();
            if (r->content.len > 0 || r->n_images == 0)
                json_array_append_new(arr,
                                      json_pack("{s:s, s:o}", "type", "text", "text", content));
            else
                json_decref(content);
            for (size_t k = 0; k < r->n_images; k++) {
                json_t *ib = anthropic_image_block(&r->images[k]);
                if (ib == NULL) {
                    json_decref(arr);
                    json_decref(id);
                    return cg__cj_wfail(
                        w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu].tool_result.images[%zu]: no source", mi, pi, k);
                }
                json_array_append_new(arr, ib);
            }
            content = arr;
        }
        b = json_pack("{s:s, s:o, s:o}", "type", "tool_result", "tool_use_id", id, "content",
                      content);
        if (b != NULL && r->is_error)
            json_object_set_new(b, "is_error", json_true());
        break;
    }
    case CG_PART_REASONING: {
        const struct cg_reasoning *r = &p->u.reasoning;
        json_t *t = cg__cj_jstr(&r->text);
        if (t == NULL)
            return cg__cj_bad_utf8(w, mi, pi, "reasoning");
        if (r->redacted) {
            b = json_pack("{s:s, s:o}", "type", "redacted_thinking", "data", t);
        } else {
            b = json_pack("{s:s, s:o}", "type", "thinking", "thinking", t);
            if (b != NULL && (r->signature.len > 0 || w->same_origin))
                cg__cj_set_str(b, "signature", &r->signature);
        }
        break;
    }
    }
    if (b == NULL)
        return WOOM(w);
    set_cache_control(w, b, p);
    *out = b;
    return CG_OK;
}

/* Appends the blocks of m to arr. */
static cg_status anthropic_blocks_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                      json_t *arr)
{
    for (size_t i = 0; i < m->n_parts; i++) {
        json_t *b = NULL;
        cg_status st = anthropic_block_out(w, &m->parts[i], mi, i, &b);
        if (st != CG_OK)
            return st;
        if (json_array_append_new(arr, b) != 0)
            return WOOM(w);
    }
    return CG_OK;
}

cg_status cg__cj_anthropic_messages_out(struct wctx *w, size_t first, json_t *arr)
{
    const struct cg_conv *conv = w->conv;
    json_t *open_results = NULL; /* the content array of the user message of tool results */
    for (size_t mi = first; mi < conv->n_messages; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        cg_status st;
        if (cg_conv_role_is_system(m->role))
            return cg__cj_wfail(
                w, CG_INVALID_ARGUMENT,
                "messages[%zu]: a %s message after the first turn cannot be written as "
                "Anthropic JSON",
                mi, cg_conv_role_name(m->role));
        if (m->role == CG_ROLE_TOOL) {
            if (open_results == NULL) {
                open_results = json_array();
                json_t *o = json_pack("{s:s, s:o}", "role", "user", "content", open_results);
                if (o == NULL || json_array_append_new(arr, o) != 0)
                    return WOOM(w);
            }
            for (size_t i = 0; i < m->n_parts; i++)
                if (m->parts[i].kind != CG_PART_TOOL_RESULT)
                    return cg__cj_wfail(
                        w, CG_INVALID_ARGUMENT,
                        "messages[%zu].parts[%zu]: a tool message holds tool results", mi, i);
            if ((st = anthropic_blocks_out(w, m, mi, open_results)) != CG_OK)
                return st;
            continue;
        }
        if (open_results != NULL && m->role == CG_ROLE_USER) {
            /* A user message right after tool results joins their user message (Anthropic
             * takes results first, then text, in one turn). */
            cg_status st2 = anthropic_blocks_out(w, m, mi, open_results);
            open_results = NULL;
            if (st2 != CG_OK)
                return st2;
            continue;
        }
        open_results = NULL;
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(arr, o) != 0)
            return WOOM(w);
        json_object_set_new(o, "role", json_string(cg_conv_role_name(m->role)));
        cg_content_form form = w->same_origin ? m->form : CG_FORM_DEFAULT;
        bool as_string = m->n_parts == 1 && m->parts[0].kind == CG_PART_TEXT &&
                         form != CG_FORM_PARTS && !m->parts[0].cache_breakpoint &&
                         (m->parts[0].extra.len == 0 || !w->same_origin);
        if (m->n_parts == 0 && form == CG_FORM_STRING)
            as_string = true;
        if (as_string) {
            struct cg_str empty = {"", 0};
            json_t *v = cg__cj_jstr(m->n_parts == 1 ? &m->parts[0].u.text : &empty);
            if (v == NULL)
                return cg__cj_bad_utf8(w, mi, 0, "text");
            json_object_set_new(o, "content", v);
        } else {
            json_t *blocks = json_array();
            if (blocks == NULL || json_object_set_new(o, "content", blocks) != 0)
                return WOOM(w);
            if ((st = anthropic_blocks_out(w, m, mi, blocks)) != CG_OK)
                return st;
        }
        cg__cj_merge_extra(w, o, &m->extra);
    }
    return CG_OK;
}

cg_status cg__cj_anthropic_system_out(struct wctx *w, size_t *first, json_t **out)
{
    const struct cg_conv *conv = w->conv;
    size_t n = 0, parts = 0;
    while (n < conv->n_messages && cg_conv_role_is_system(conv->messages[n].role)) {
        parts += conv->messages[n].n_parts;
        n++;
    }
    *first = n;
    *out = NULL;
    if (n == 0)
        return CG_OK;
    const struct cg_part *p0 = n == 1 && parts == 1 ? &conv->messages[0].parts[0] : NULL;
    cg_content_form form = w->same_origin ? conv->system_form : CG_FORM_DEFAULT;
    if (p0 != NULL && p0->kind == CG_PART_TEXT && form != CG_FORM_PARTS && !p0->cache_breakpoint &&
        (p0->extra.len == 0 || !w->same_origin)) {
        *out = cg__cj_jstr(&p0->u.text);
        return *out != NULL ? CG_OK : cg__cj_bad_utf8(w, 0, 0, "text");
    }
    json_t *arr = json_array();
    if (arr == NULL)
        return WOOM(w);
    *out = arr;
    for (size_t mi = 0; mi < n; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        for (size_t i = 0; i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TEXT)
                return cg__cj_wfail(
                    w, CG_INVALID_ARGUMENT,
                    "messages[%zu].parts[%zu]: an Anthropic system prompt is text only", mi, i);
        cg_status st = anthropic_blocks_out(w, m, mi, arr);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

cg_status cg__cj_anthropic_tools_out(struct wctx *w, json_t **out)
{
    json_t *arr = json_array();
    if (arr == NULL)
        return WOOM(w);
    *out = arr;
    for (size_t i = 0; i < w->conv->n_tools; i++) {
        const struct cg_tool_def *t = &w->conv->tools[i];
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(arr, o) != 0)
            return WOOM(w);
        bool builtin = t->type.len > 0 && strcmp(t->type.ptr, "function") != 0 &&
                       strcmp(t->type.ptr, "custom") != 0;
        /* Anthropic names every tool (its reader refuses one without): an unnamed tool of
         * another format cannot be carried. */
        if (t->name.len == 0 || t->name.len > CG_CONV_ID_MAX)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "tools[%zu].name: Anthropic JSON needs a name of 1..%d bytes", i,
                                CG_CONV_ID_MAX);
        if (t->type.len > 0 && (builtin || w->same_origin))
            cg__cj_set_str(o, "type", &t->type);
        if (!cg__cj_set_str(o, "name", &t->name))
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].name: invalid UTF-8", i);
        if (t->description.len > 0 && !cg__cj_set_str(o, "description", &t->description))
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].description: invalid UTF-8", i);
        if (!builtin) {
            json_t *schema = t->parameters.len > 0
                                 ? cg__cj_parse_object_or_empty(&t->parameters)
                                 : json_pack("{s:s, s:{}}", "type", "object", "properties");
            if (schema == NULL)
                return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                    "tools[%zu].parameters_json: not a JSON object", i);
            json_object_set_new(o, "input_schema", schema);
        }
        cg__cj_merge_extra(w, o, &t->extra);
    }
    return CG_OK;
}

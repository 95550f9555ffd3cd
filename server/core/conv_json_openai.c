/* conv_json_openai.c - OpenAI Chat Completions JSON <-> the conversation model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json_internal.h"

/* ------------------------------------------------------------------ OpenAI: read ------ */

static cg_status openai_image(struct ctx *c, json_t *block, struct cg_part *p)
{
    json_t *iu = json_object_get(block, "image_url");
    size_t saved = cg__cj_path_push(c, ".image_url");
    cg_status st = CG_OK;
    struct cg_image *im = &p->u.image;
    if (json_is_string(iu)) {
        st = cg_conv_str(c->conv, json_string_value(iu), json_string_length(iu), &im->url, c->err);
        if (st != CG_OK)
            st = cg__cj_fail_from(c, st);
    } else if (json_is_object(iu)) {
        if ((st = cg__cj_get_string(c, iu, "url", true, &im->url)) == CG_OK)
            st = cg__cj_get_string(c, iu, "detail", false, &im->detail);
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object with \"url\"");
    }
    cg__cj_path_pop(c, saved);
    if (st != CG_OK)
        return st;
    im->source = CG_IMAGE_SOURCE_URL;
    cg__cj_describe_data_url(im);
    /* The media type of a data: URL, for writers that need it (Anthropic). */
    if (im->url.len > 5 && strncmp(im->url.ptr, "data:", 5) == 0) {
        const char *semi = memchr(im->url.ptr + 5, ';', im->url.len - 5);
        const char *comma = memchr(im->url.ptr + 5, ',', im->url.len - 5);
        const char *end = semi != NULL && (comma == NULL || semi < comma) ? semi : comma;
        if (end != NULL && end - im->url.ptr - 5 <= 100) {
            st = cg_conv_str(c->conv, im->url.ptr + 5, (size_t)(end - im->url.ptr - 5),
                             &im->media_type, c->err);
            if (st != CG_OK)
                return cg__cj_fail_from(c, st);
        }
    }
    return CG_OK;
}

static const char *const openai_block_keys[] = {"type", "text", "image_url", NULL};

/* An OpenAI content value (string or parts) into m. For tool messages the text goes into the
 * tool_result part `result`. */
static cg_status openai_content(struct ctx *c, json_t *msg, struct cg_message *m,
                                struct cg_tool_result *result)
{
    json_t *content = json_object_get(msg, "content");
    size_t saved = cg__cj_path_push(c, ".content");
    cg_status st = CG_OK;
    if (content == NULL) {
        m->form = CG_FORM_ABSENT;
    } else if (json_is_null(content)) {
        m->form = CG_FORM_NULL;
    } else if (json_is_string(content)) {
        m->form = CG_FORM_STRING;
        struct cg_str s;
        st = cg_conv_str(c->conv, json_string_value(content), json_string_length(content), &s,
                         c->err);
        if (st != CG_OK) {
            st = cg__cj_fail_from(c, st);
        } else if (result != NULL) {
            result->content = s;
            result->form = CG_FORM_STRING;
        } else {
            struct cg_part *p;
            if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
                p->u.text = s;
        }
    } else if (json_is_array(content)) {
        m->form = CG_FORM_PARTS;
        if (result != NULL)
            result->form = CG_FORM_PARTS;
        size_t i;
        json_t *block;
        /* Tool content: the text parts joined, sized first so one copy is made. */
        size_t joined = 0;
        json_array_foreach(content, i, block)
        {
            size_t s2 = cg__cj_path_push(c, "[%zu]", i);
            st = cg__cj_expect_object(c, block);
            const char *type = json_string_value(json_object_get(block, "type"));
            if (st == CG_OK && type == NULL)
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "\"type\" is required");
            if (st == CG_OK && strcmp(type, "text") == 0) {
                json_t *tv = json_object_get(block, "text");
                struct cg_str text = {"", 0};
                if (result != NULL) {
                    if (json_is_string(tv))
                        joined += json_string_length(tv);
                    else
                        st = cg__cj_get_string(c, block, "text", true, &text); /* names the error */
                } else if ((st = cg__cj_get_string(c, block, "text", true, &text)) == CG_OK) {
                    struct cg_part *p;
                    if ((st = cg__cj_add_part(c, m, CG_PART_TEXT, &p)) == CG_OK) {
                        p->u.text = text;
                        st = cg__cj_keep_extra(c, block, openai_block_keys, &p->extra);
                    }
                }
            } else if (st == CG_OK && strcmp(type, "image_url") == 0 && result == NULL) {
                struct cg_part *p;
                if ((st = cg__cj_add_part(c, m, CG_PART_IMAGE, &p)) == CG_OK &&
                    (st = openai_image(c, block, p)) == CG_OK)
                    st = cg__cj_keep_extra(c, block, openai_block_keys, &p->extra);
            } else if (st == CG_OK) {
                char shown[KEY_SHOWN_MAX + 1];
                cg__cj_show_key(shown, sizeof shown, type, strlen(type));
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "unknown content part type \"%s\"%s",
                                 shown, result != NULL ? " (a tool message takes text parts)" : "");
            }
            cg__cj_path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
        if (st == CG_OK && result != NULL) {
            char *buf = cg_conv_alloc(c->conv, joined + 1, 1);
            if (buf == NULL)
                st = cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
            size_t at = 0;
            json_array_foreach(content, i, block)
            {
                if (st != CG_OK)
                    break;
                json_t *t = json_object_get(block, "text");
                memcpy(buf + at, json_string_value(t), json_string_length(t));
                at += json_string_length(t);
            }
            if (st == CG_OK)
                result->content = (struct cg_str){buf, joined};
        }
    } else {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT,
                         "expected a string, an array of parts or null, got %s",
                         cg__cj_type_name(content));
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const openai_call_keys[] = {"id", "type", "function", NULL};

static cg_status openai_tool_calls(struct ctx *c, json_t *calls, struct cg_message *m)
{
    size_t saved = cg__cj_path_push(c, ".tool_calls");
    cg_status st = CG_OK;
    if (!json_is_array(calls)) {
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an array, got %s",
                         cg__cj_type_name(calls));
        cg__cj_path_pop(c, saved);
        return st;
    }
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
    {
        size_t s2 = cg__cj_path_push(c, "[%zu]", i);
        struct cg_part *p = NULL;
        if ((st = cg__cj_expect_object(c, call)) == CG_OK)
            st = cg__cj_add_part(c, m, CG_PART_TOOL_CALL, &p);
        const char *type = json_string_value(json_object_get(call, "type"));
        if (st == CG_OK && type != NULL && strcmp(type, "function") != 0) {
            size_t s3 = cg__cj_path_push(c, ".type");
            st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "only \"function\" tool calls are supported");
            cg__cj_path_pop(c, s3);
        }
        if (st == CG_OK)
            st = cg__cj_get_id(c, call, "id", &p->u.tool_call.id);
        json_t *fn = json_object_get(call, "function");
        if (st == CG_OK) {
            size_t s3 = cg__cj_path_push(c, ".function");
            if (fn == NULL)
                st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
            else
                st = cg__cj_expect_object(c, fn);
            if (st == CG_OK)
                st = cg__cj_get_id(c, fn, "name", &p->u.tool_call.name);
            json_t *args = fn != NULL ? json_object_get(fn, "arguments") : NULL;
            if (st == CG_OK && args != NULL && !json_is_null(args)) {
                if (json_is_string(args)) {
                    st = cg__cj_get_string(c, fn, "arguments", true, &p->u.tool_call.arguments);
                } else if (json_is_object(args)) {
                    size_t s4 = cg__cj_path_push(c, ".arguments");
                    st = cg__cj_dump_value(c, args, &p->u.tool_call.arguments);
                    cg__cj_path_pop(c, s4);
                } else {
                    size_t s4 = cg__cj_path_push(c, ".arguments");
                    st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s",
                                     cg__cj_type_name(args));
                    cg__cj_path_pop(c, s4);
                }
            }
            cg__cj_path_pop(c, s3);
        }
        if (st == CG_OK)
            st = cg__cj_keep_extra(c, call, openai_call_keys, &p->extra);
        cg__cj_path_pop(c, s2);
        if (st != CG_OK)
            break;
    }
    cg__cj_path_pop(c, saved);
    return st;
}

static const char *const openai_msg_keys[] = {
    "role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", NULL};

cg_status cg__cj_openai_message(struct ctx *c, json_t *msg)
{
    cg_status st = cg__cj_expect_object(c, msg);
    cg_role role = CG_ROLE_USER;
    if (st == CG_OK)
        st = cg__cj_parse_role(c, msg, false, &role);
    if (st != CG_OK)
        return st;
    struct cg_message *m;
    if ((st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    if ((st = cg__cj_get_string(c, msg, "name", false, &m->name)) != CG_OK)
        return st;
    if (m->name.len > CG_CONV_NAME_MAX) {
        size_t saved = cg__cj_path_push(c, ".name");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "longer than %d bytes", CG_CONV_NAME_MAX);
        cg__cj_path_pop(c, saved);
        return st;
    }
    json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (reasoning != NULL && !json_is_null(reasoning)) {
        struct cg_part *p;
        if ((st = cg__cj_add_part(c, m, CG_PART_REASONING, &p)) != CG_OK ||
            (st = cg__cj_get_string(c, msg, "reasoning_content", true, &p->u.reasoning.text)) !=
                CG_OK)
            return st;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    if (calls != NULL && !json_is_null(calls) && role != CG_ROLE_ASSISTANT) {
        size_t saved = cg__cj_path_push(c, ".tool_calls");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "only assistant messages have tool calls");
        cg__cj_path_pop(c, saved);
        return st;
    }
    if (role == CG_ROLE_TOOL) {
        struct cg_part *p;
        if ((st = cg__cj_add_part(c, m, CG_PART_TOOL_RESULT, &p)) != CG_OK ||
            (st = cg__cj_get_id(c, msg, "tool_call_id", &p->u.tool_result.tool_call_id)) != CG_OK ||
            (st = openai_content(c, msg, m, &p->u.tool_result)) != CG_OK)
            return st;
    } else if ((st = openai_content(c, msg, m, NULL)) != CG_OK) {
        return st;
    }
    if (calls != NULL && !json_is_null(calls) && (st = openai_tool_calls(c, calls, m)) != CG_OK)
        return st;
    return cg__cj_keep_extra(c, msg, openai_msg_keys, &m->extra);
}

static const char *const openai_fn_keys[] = {"name", "description", "parameters", NULL};

cg_status cg__cj_openai_tool(struct ctx *c, json_t *tool)
{
    cg_status st = cg__cj_expect_object(c, tool);
    struct cg_tool_def *t;
    if (st == CG_OK && (st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return cg__cj_fail_from(c, st);
    if (st != CG_OK || (st = cg__cj_get_string(c, tool, "type", false, &t->type)) != CG_OK)
        return st;
    json_t *fn = json_object_get(tool, "function");
    if (fn == NULL && (t->type.len == 0 || strcmp(t->type.ptr, "function") == 0)) {
        size_t saved = cg__cj_path_push(c, ".function");
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
        cg__cj_path_pop(c, saved);
        return st;
    }
    if (fn == NULL) {
        /* A built-in tool type: counted by its name. */
        if ((st = cg__cj_get_string(c, tool, "name", false, &t->name)) != CG_OK)
            return st;
        static const char *const builtin_keys[] = {"type", "name", NULL};
        return cg__cj_keep_extra(c, tool, builtin_keys, &t->extra);
    }
    size_t saved = cg__cj_path_push(c, ".function");
    if ((st = cg__cj_expect_object(c, fn)) == CG_OK &&
        (st = cg__cj_get_id(c, fn, "name", &t->name)) == CG_OK &&
        (st = cg__cj_get_string(c, fn, "description", false, &t->description)) == CG_OK) {
        json_t *params = json_object_get(fn, "parameters");
        if (params != NULL && !json_is_null(params)) {
            size_t s2 = cg__cj_path_push(c, ".parameters");
            st = json_is_object(params) ? cg__cj_dump_value(c, params, &t->parameters)
                                        : cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object");
            cg__cj_path_pop(c, s2);
        }
    }
    if (st == CG_OK)
        st = cg__cj_keep_extra(c, fn, openai_fn_keys, &t->extra);
    cg__cj_path_pop(c, saved);
    return st;
}

/* ---- OpenAI ---- */

static json_t *openai_image_block(const struct cg_image *im)
{
    json_t *url = cg__cj_image_url(im);
    if (url == NULL)
        return NULL;
    json_t *iu = json_object();
    json_object_set_new(iu, "url", url);
    if (im->detail.len > 0)
        json_object_set_new(iu, "detail", cg__cj_jstr(&im->detail));
    return json_pack("{s:s, s:o}", "type", "image_url", "image_url", iu);
}

/* The content value for the text and image parts of m (NULL: none). */
static cg_status openai_content_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                    json_t *obj)
{
    size_t ntext = 0, nimage = 0, only = 0;
    for (size_t i = 0; i < m->n_parts; i++) {
        if (m->parts[i].kind == CG_PART_TEXT) {
            ntext++;
            only = i;
        } else if (m->parts[i].kind == CG_PART_IMAGE) {
            nimage++;
        }
    }
    /* The content's form is the input's only when writing the input's format. */
    cg_content_form form = w->same_origin ? m->form : CG_FORM_DEFAULT;
    bool as_string = nimage == 0 && ntext <= 1 && form != CG_FORM_PARTS &&
                     (ntext == 1 || form == CG_FORM_STRING) &&
                     (ntext == 0 || m->parts[only].extra.len == 0 || !w->same_origin);
    if (ntext + nimage == 0 && form != CG_FORM_STRING && form != CG_FORM_PARTS) {
        if (form == CG_FORM_ABSENT)
            return CG_OK;
        return json_object_set_new(obj, "content", json_null()) == 0 ? CG_OK : WOOM(w);
    }
    if (as_string) {
        struct cg_str empty = {"", 0};
        json_t *v = cg__cj_jstr(ntext == 1 ? &m->parts[only].u.text : &empty);
        if (v == NULL)
            return cg__cj_bad_utf8(w, mi, only, "text");
        return json_object_set_new(obj, "content", v) == 0 ? CG_OK : WOOM(w);
    }
    json_t *arr = json_array();
    if (arr == NULL || json_object_set_new(obj, "content", arr) != 0)
        return WOOM(w);
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        json_t *b = NULL;
        if (p->kind == CG_PART_TEXT) {
            json_t *t = cg__cj_jstr(&p->u.text);
            if (t == NULL)
                return cg__cj_bad_utf8(w, mi, i, "text");
            b = json_pack("{s:s, s:o}", "type", "text", "text", t);
        } else if (p->kind == CG_PART_IMAGE) {
            b = openai_image_block(&p->u.image);
            if (b == NULL)
                return cg__cj_wfail(
                    w, CG_INVALID_ARGUMENT,
                    "messages[%zu].parts[%zu].image: OpenAI JSON needs its URL or bytes", mi, i);
        } else {
            continue;
        }
        if (b == NULL || json_array_append_new(arr, b) != 0)
            return WOOM(w);
        cg__cj_merge_extra(w, b, &p->extra);
    }
    return CG_OK;
}

/* One tool message per tool_result part of m. */
static cg_status openai_results_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                    json_t *out, bool keep_message_keys)
{
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        if (p->kind != CG_PART_TOOL_RESULT)
            continue;
        const struct cg_tool_result *r = &p->u.tool_result;
        json_t *o = json_object();
        if (o == NULL || json_array_append_new(out, o) != 0)
            return WOOM(w);
        json_object_set_new(o, "role", json_string("tool"));
        if (!cg__cj_set_str(o, "tool_call_id", &r->tool_call_id))
            return cg__cj_bad_utf8(w, mi, i, "tool_result.tool_call_id");
        json_t *content = cg__cj_jstr(&r->content);
        if (content == NULL)
            return cg__cj_bad_utf8(w, mi, i, "tool_result.content");
        if (r->form == CG_FORM_PARTS && w->same_origin)
            content = json_pack("[{s:s, s:o}]", "type", "text", "text", content);
        if (content == NULL || json_object_set_new(o, "content", content) != 0)
            return WOOM(w);
        if (keep_message_keys && m->name.len > 0 && !cg__cj_set_str(o, "name", &m->name))
            return WOOM(w);
        if (keep_message_keys)
            cg__cj_merge_extra(w, o, &m->extra);
    }
    return CG_OK;
}

cg_status cg__cj_openai_message_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                    json_t *out)
{
    cg_status st;
    size_t nresults = 0, nother = 0;
    for (size_t i = 0; i < m->n_parts; i++) {
        if (m->parts[i].kind == CG_PART_TOOL_RESULT)
            nresults++;
        else
            nother++;
    }
    if (m->role == CG_ROLE_TOOL) {
        if (nother > 0 || nresults == 0)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "messages[%zu]: an OpenAI tool message holds exactly tool results",
                                mi);
        return openai_results_out(w, m, mi, out, true);
    }
    if (nresults > 0) {
        /* Anthropic-style results inside a user message: tool messages first. */
        if (m->role != CG_ROLE_USER)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "messages[%zu]: a %s message cannot hold tool results", mi,
                                cg_conv_role_name(m->role));
        if ((st = openai_results_out(w, m, mi, out, false)) != CG_OK)
            return st;
        if (nother == 0)
            return CG_OK;
    }
    json_t *o = json_object();
    if (o == NULL || json_array_append_new(out, o) != 0)
        return WOOM(w);
    json_object_set_new(o, "role", json_string(cg_conv_role_name(m->role)));
    if (m->name.len > 0 && !cg__cj_set_str(o, "name", &m->name))
        return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "messages[%zu].name: invalid UTF-8", mi);
    /* reasoning first, as the readers put it */
    size_t rlen = 0, nreason = 0;
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == CG_PART_REASONING && !m->parts[i].u.reasoning.redacted) {
            rlen += m->parts[i].u.reasoning.text.len;
            nreason++;
        }
    if (nreason > 0) {
        if (m->role != CG_ROLE_ASSISTANT)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                "messages[%zu]: only assistant messages carry reasoning", mi);
        char *buf = malloc(rlen + 1);
        if (buf == NULL)
            return WOOM(w);
        size_t at = 0;
        for (size_t i = 0; i < m->n_parts; i++)
            if (m->parts[i].kind == CG_PART_REASONING && !m->parts[i].u.reasoning.redacted) {
                memcpy(buf + at, m->parts[i].u.reasoning.text.ptr,
                       m->parts[i].u.reasoning.text.len);
                at += m->parts[i].u.reasoning.text.len;
            }
        json_t *v = json_stringn(buf, rlen);
        free(buf);
        if (v == NULL || json_object_set_new(o, "reasoning_content", v) != 0)
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "messages[%zu]: reasoning is not UTF-8",
                                mi);
    }
    if ((st = openai_content_out(w, m, mi, o)) != CG_OK)
        return st;
    json_t *calls = NULL;
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        if (p->kind != CG_PART_TOOL_CALL)
            continue;
        if (m->role != CG_ROLE_ASSISTANT)
            return cg__cj_wfail(
                w, CG_INVALID_ARGUMENT,
                "messages[%zu].parts[%zu]: only assistant messages carry tool calls", mi, i);
        if (calls == NULL &&
            ((calls = json_array()) == NULL || json_object_set_new(o, "tool_calls", calls) != 0))
            return WOOM(w);
        json_t *id = cg__cj_jstr(&p->u.tool_call.id), *name = cg__cj_jstr(&p->u.tool_call.name),
               *args = cg__cj_jstr(&p->u.tool_call.arguments);
        if (id == NULL || name == NULL || args == NULL) {
            json_decref(id);
            json_decref(name);
            json_decref(args);
            return cg__cj_bad_utf8(w, mi, i, "tool_call");
        }
        json_t *call = json_pack("{s:o, s:s, s:{s:o, s:o}}", "id", id, "type", "function",
                                 "function", "name", name, "arguments", args);
        if (call == NULL || json_array_append_new(calls, call) != 0)
            return WOOM(w);
        cg__cj_merge_extra(w, call, &p->extra);
    }
    cg__cj_merge_extra(w, o, &m->extra);
    return CG_OK;
}

cg_status cg__cj_openai_tools_out(struct wctx *w, json_t **out)
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
        bool function = t->type.len == 0 || strcmp(t->type.ptr, "function") == 0;
        if (!function) {
            cg__cj_set_str(o, "type", &t->type);
            if (t->name.len > 0)
                cg__cj_set_str(o, "name", &t->name);
            cg__cj_merge_extra(w, o, &t->extra);
            continue;
        }
        json_object_set_new(o, "type", json_string("function"));
        json_t *fn = json_object();
        if (fn == NULL || json_object_set_new(o, "function", fn) != 0 ||
            !cg__cj_set_str(fn, "name", &t->name))
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].name: invalid UTF-8", i);
        if (t->description.len > 0 && !cg__cj_set_str(fn, "description", &t->description))
            return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].description: invalid UTF-8", i);
        if (t->parameters.len > 0) {
            json_t *params = cg__cj_parse_object_or_empty(&t->parameters);
            if (params == NULL)
                return cg__cj_wfail(w, CG_INVALID_ARGUMENT,
                                    "tools[%zu].parameters_json: not a JSON object", i);
            json_object_set_new(fn, "parameters", params);
        }
        cg__cj_merge_extra(w, fn, &t->extra);
    }
    return CG_OK;
}

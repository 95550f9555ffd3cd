/* conv_json.c - the JSON conversions' dispatcher (see conv_json.h): the depth pre-scan and the
 * two entry points, which hand each message to its format (conv_json_openai.c,
 * conv_json_anthropic.c) or the whole document to it (conv_json_responses.c,
 * conv_json_gemini.c). The helpers all of them share are in conv_json_common.c. */
#include "core/conv_json_internal.h"
#include "core/json_fast.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------- structural pre-scan ---------- */

/* Walks the JSON text byte by byte (no values are decoded) keeping the path of the value
 * being read, up to `stop` bytes or until the nesting passes depth_max. Used to reject deep
 * input before jansson recurses into it and to name the path of a parse error at a byte
 * offset. Returns true when the depth cap was passed (path: where). */
struct frame {
    bool object;
    size_t index;
    const char *key;
    size_t key_len;
};

static bool scan(const char *s, size_t len, size_t stop, int depth_max, char *path, size_t pathsz)
{
    struct frame frames[CG_CONV_JSON_DEPTH_MAX + 1];
    int depth = 0;
    bool in_string = false, expect_key = false, too_deep = false;
    const char *string_start = NULL;
    size_t i = 0;
    if (depth_max > CG_CONV_JSON_DEPTH_MAX)
        depth_max = CG_CONV_JSON_DEPTH_MAX;
    for (; i < len && i < stop; i++) {
        char ch = s[i];
        if (in_string) {
            if (ch == '\\')
                i++;
            else if (ch == '"') {
                in_string = false;
                if (expect_key && depth > 0 && frames[depth - 1].object) {
                    frames[depth - 1].key = string_start;
                    frames[depth - 1].key_len = (size_t)(s + i - string_start);
                    expect_key = false;
                }
            }
            continue;
        }
        switch (ch) {
        case '"':
            in_string = true;
            string_start = s + i + 1;
            break;
        case '{':
        case '[':
            if (depth == depth_max) {
                too_deep = true;
                goto out;
            }
            frames[depth] = (struct frame){.object = ch == '{'};
            depth++;
            expect_key = ch == '{';
            break;
        case '}':
        case ']':
            if (depth > 0)
                depth--;
            expect_key = false;
            break;
        case ',':
            if (depth > 0) {
                frames[depth - 1].index++;
                expect_key = frames[depth - 1].object;
            }
            break;
        default:
            break;
        }
    }
out:;
    size_t n = (size_t)snprintf(path, pathsz, "$");
    for (int d = 0; d < depth && n + 1 < pathsz; d++) {
        if (d == 8 && depth > 10) {
            /* A deep path says where it starts and how deep it goes. */
            snprintf(path + n, pathsz - n, "... (%d levels)", depth);
            break;
        }
        if (frames[d].object) {
            if (frames[d].key == NULL)
                continue;
            char shown[KEY_SHOWN_MAX + 1];
            cg__cj_show_key(shown, sizeof shown, frames[d].key, frames[d].key_len);
            n += (size_t)snprintf(path + n, pathsz - n, ".%s", shown);
        } else {
            n += (size_t)snprintf(path + n, pathsz - n, "[%zu]", frames[d].index);
        }
    }
    return too_deep;
}

/* Parses with jansson after the depth pre-scan (json_fast.h first); errors carry the path of
 * the offending byte. */
static json_t *load(struct ctx *c, const char *text, size_t len)
{
    /* Text the fast reader takes within the depth cap passes the pre-scan: skip it. */
    size_t checked = c->conv->limits.utf8_checked ? CG_JSON_FAST_UTF8_CHECKED : 0;
    json_t *fast = cg_json_fast_load(text, len, JSON_ALLOW_NUL | JSON_DECODE_ANY | checked,
                                     CG_CONV_JSON_DEPTH_MAX);
    if (fast != NULL) {
        c->path_len = 0;
        c->path[0] = '\0';
        return fast;
    }
    if (scan(text, len, len, CG_CONV_JSON_DEPTH_MAX, c->path, sizeof c->path)) {
        c->path_len = strlen(c->path);
        cg__cj_fail(c, CG_INVALID_ARGUMENT, "nested deeper than %d levels", CG_CONV_JSON_DEPTH_MAX);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        size_t at = jerr.position > 0 ? (size_t)jerr.position : 0;
        scan(text, len, at, CG_CONV_JSON_DEPTH_MAX, c->path, sizeof c->path);
        c->path_len = strlen(c->path);
        if (json_error_code(&jerr) == json_error_invalid_utf8)
            cg__cj_fail(c, CG_INVALID_ARGUMENT, "invalid UTF-8 (%s, byte %zu)", jerr.text, at);
        else
            cg__cj_fail(c, CG_INVALID_ARGUMENT, "malformed JSON (%s, byte %zu)", jerr.text, at);
        return NULL;
    }
    c->path_len = 0;
    c->path[0] = '\0';
    return root;
}

bool cg_conv_json_is_valid(const char *text, size_t len, bool need_object)
{
    int fast = cg_json_fast_check(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, need_object,
                                  CG_CONV_JSON_DEPTH_MAX);
    if (fast != 0)
        return fast > 0;
    char path[PATH_MAX_BYTES];
    if (scan(text, len, len, CG_CONV_JSON_DEPTH_MAX, path, sizeof path))
        return false;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    bool ok = v != NULL && (!need_object || json_is_object(v));
    json_decref(v);
    return ok;
}

/* ------------------------------------------------------------------ read: top --------- */

/* One tool definition in c->format's dialect. */
static cg_status read_tool(void *arg, json_t *tool)
{
    struct ctx *c = arg;
    return c->format == CG_CONV_JSON_OPENAI ? cg__cj_openai_tool(c, tool)
                                            : cg__cj_anthropic_tool(c, tool);
}

/* The request's tools array, at path ".tools". */
static cg_status read_tools(struct ctx *c, json_t *tools)
{
    size_t saved = cg__cj_path_push(c, ".tools");
    cg_status st = cg__cj_each(c, tools, read_tool, c);
    if (st == CG_OK)
        cg__cj_path_pop(c, saved);
    return st;
}

/* A request object (not a bare messages array): its model, Anthropic's system, its tools,
 * and the other keys kept in order as the conversation's top_extra (with the model's own
 * keys as null placeholders); *messages gets its "messages" value. */
static cg_status read_top_object(struct ctx *c, json_t *root, json_t **messages)
{
    cg_conv_json_format format = c->format;
    cg_status st;
    c->conv->top_is_object = true;
    *messages = json_object_get(root, "messages");
    if (*messages == NULL)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "an object needs a \"messages\" array");
    if ((st = cg__cj_get_string(c, root, "model", false, &c->conv->model)) != CG_OK)
        return st;
    if (format == CG_CONV_JSON_ANTHROPIC) {
        json_t *system = json_object_get(root, "system");
        if (system != NULL && !json_is_null(system) &&
            (st = cg__cj_anthropic_system(c, system)) != CG_OK)
            return st;
    }
    json_t *tools = json_object_get(root, "tools");
    c->conv->has_tools_key = tools != NULL;
    if (tools != NULL && !json_is_null(tools) && (st = read_tools(c, tools)) != CG_OK)
        return st;
    /* The other keys, in order, with the model's own keys as null placeholders. */
    json_t *shallow = json_copy(root);
    if (shallow == NULL)
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
    static const char *const owned[] = {"messages", "tools", "model", "system"};
    size_t n_owned = format == CG_CONV_JSON_ANTHROPIC ? 4 : 3;
    for (size_t k = 0; k < n_owned; k++)
        if (json_object_get(shallow, owned[k]) != NULL)
            json_object_set_new(shallow, owned[k], json_null());
    st = cg__cj_dump_value(c, shallow, &c->conv->top_extra);
    json_decref(shallow);
    return st;
}

cg_status cg_conv_json_read(cg_conv_json_format format, const char *json, size_t len,
                            const struct cg_conv_limits *limits, struct cg_conv **out,
                            struct cg_err *err)
{
    *out = NULL;
    struct ctx c = {.err = err, .format = format, .path = "$", .path_len = 1};
    cg_status st = CG_OK;
    json_t *root = NULL;
    c.conv = cg_conv_new(limits);
    if (c.conv == NULL)
        return cg__cj_fail(&c, CG_RESOURCE_EXHAUSTED, "out of memory");
    if (cg_conv_json_origin(format) == CG_CONV_ORIGIN_STRUCTURED) {
        st = cg__cj_fail(&c, CG_INVALID_ARGUMENT, "unknown conversation format %d", (int)format);
        goto out;
    }
    if (len > c.conv->limits.max_bytes) {
        st = cg__cj_fail(&c, CG_RESOURCE_EXHAUSTED, "%zu bytes is over the limit of %zu", len,
                         c.conv->limits.max_bytes);
        goto out;
    }
    root = load(&c, json, len);
    if (root == NULL) {
        st = err != NULL ? err->code : CG_INVALID_ARGUMENT;
        goto out;
    }
    cg__cj_path_pop(&c, 0);
    cg__cj_path_push(&c, "$");
    c.conv->origin = cg_conv_json_origin(format);
    if (format == CG_CONV_JSON_RESPONSES || format == CG_CONV_JSON_GEMINI) {
        st = format == CG_CONV_JSON_RESPONSES ? cg__cj_responses_read(&c, root)
                                              : cg__cj_gemini_read(&c, root);
        goto out;
    }
    json_t *messages = root;
    if (json_is_object(root) && (st = read_top_object(&c, root, &messages)) != CG_OK)
        goto out;
    size_t saved = cg__cj_path_push(&c, "%s", json_is_object(root) ? ".messages" : "");
    if (!json_is_array(messages)) {
        st = cg__cj_fail(&c, CG_INVALID_ARGUMENT, "expected an array of messages, got %s",
                         cg__cj_type_name(messages));
        goto out;
    }
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        size_t s2 = cg__cj_path_push(&c, "[%zu]", i);
        st = format == CG_CONV_JSON_OPENAI ? cg__cj_openai_message(&c, msg)
                                           : cg__cj_anthropic_message(&c, msg);
        cg__cj_path_pop(&c, s2);
        if (st != CG_OK)
            goto out;
    }
    cg__cj_path_pop(&c, saved);
out:
    json_decref(root);
    if (st != CG_OK) {
        cg_conv_free(c.conv);
        return st;
    }
    *out = c.conv;
    return CG_OK;
}

cg_conv_origin cg_conv_json_origin(cg_conv_json_format format)
{
    switch (format) {
    case CG_CONV_JSON_OPENAI:
        return CG_CONV_ORIGIN_OPENAI;
    case CG_CONV_JSON_ANTHROPIC:
        return CG_CONV_ORIGIN_ANTHROPIC;
    case CG_CONV_JSON_RESPONSES:
        return CG_CONV_ORIGIN_RESPONSES;
    case CG_CONV_JSON_GEMINI:
        return CG_CONV_ORIGIN_GEMINI;
    }
    return CG_CONV_ORIGIN_STRUCTURED;
}

/* root as compact JSON text into *out / *out_len (malloc'd, NUL-terminated). */
static cg_status dump(struct wctx *w, json_t *root, char **out, size_t *out_len)
{
    size_t n = json_dumpb(root, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    char *buf = n > 0 ? malloc(n + 1) : NULL;
    if (buf == NULL)
        return WOOM(w);
    json_dumpb(root, buf, n, JSON_COMPACT | JSON_ENCODE_ANY);
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
    return CG_OK;
}

cg_status cg_conv_json_write(const struct cg_conv *conv, cg_conv_json_format format, char **out,
                             size_t *out_len, struct cg_err *err)
{
    *out = NULL;
    *out_len = 0;
    cg_conv_origin want = cg_conv_json_origin(format);
    struct wctx w = {.conv = conv, .err = err, .same_origin = conv->origin == want};
    if (want == CG_CONV_ORIGIN_STRUCTURED)
        return cg__cj_wfail(&w, CG_INVALID_ARGUMENT, "unknown conversation format %d", (int)format);
    json_t *messages = NULL, *tools = NULL, *system = NULL, *root = NULL;
    cg_status st;
    if (format == CG_CONV_JSON_RESPONSES || format == CG_CONV_JSON_GEMINI) {
        st = format == CG_CONV_JSON_RESPONSES ? cg__cj_responses_write(&w, &root)
                                              : cg__cj_gemini_write(&w, &root);
        if (st == CG_OK)
            st = dump(&w, root, out, out_len);
        json_decref(root);
        return st;
    }
    messages = json_array();
    st = messages != NULL ? CG_OK : WOOM(&w);
    size_t first = 0;
    if (st == CG_OK && format == CG_CONV_JSON_ANTHROPIC)
        st = cg__cj_anthropic_system_out(&w, &first, &system);
    for (size_t mi = first; st == CG_OK && format == CG_CONV_JSON_OPENAI && mi < conv->n_messages;
         mi++)
        st = cg__cj_openai_message_out(&w, &conv->messages[mi], mi, messages);
    if (st == CG_OK && format == CG_CONV_JSON_ANTHROPIC)
        st = cg__cj_anthropic_messages_out(&w, first, messages);
    bool want_tools =
        !conv->tools_external && (conv->n_tools > 0 || (conv->has_tools_key && w.same_origin));
    if (st == CG_OK && want_tools)
        st = format == CG_CONV_JSON_OPENAI ? cg__cj_openai_tools_out(&w, &tools)
                                           : cg__cj_anthropic_tools_out(&w, &tools);
    if (st != CG_OK)
        goto out;
    bool object = conv->top_is_object || tools != NULL || system != NULL;
    if (!object) {
        root = messages;
        messages = NULL;
    } else {
        root = w.same_origin && conv->top_extra.len > 0
                   ? cg_json_load(conv->top_extra.ptr, conv->top_extra.len, JSON_ALLOW_NUL, NULL)
                   : json_object();
        if (!json_is_object(root)) {
            json_decref(root);
            root = json_object();
        }
        if (root == NULL) {
            st = WOOM(&w);
            goto out;
        }
        if (conv->model.len > 0)
            cg__cj_set_str(root, "model", &conv->model);
        else
            json_object_del(root, "model");
        if (system != NULL)
            json_object_set(root, "system", system);
        else
            json_object_del(root, "system");
        json_object_set(root, "messages", messages);
        if (tools != NULL)
            json_object_set(root, "tools", tools);
        else
            json_object_del(root, "tools");
    }
    st = dump(&w, root, out, out_len);
out:
    json_decref(root);
    json_decref(messages);
    json_decref(tools);
    json_decref(system);
    return st;
}

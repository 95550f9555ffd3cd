/* conv_json.c - OpenAI and Anthropic JSON <-> the conversation model (see conv_json.h). */
#include "core/conv_json.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PATH_MAX_BYTES 200
#define KEY_SHOWN_MAX 40
#define SNIFF_BYTES 65536 /* base64-decoded prefix of a data: URL read for image dimensions */

/* ------------------------------------------------------------------ paths and errors -- */

struct ctx {
    struct cg_conv *conv;
    struct cg_err *err;
    char path[PATH_MAX_BYTES];
    size_t path_len;
    cg_conv_json_format format;
};

static size_t path_push(struct ctx *c, const char *fmt, ...) CG_PRINTF(2, 3);
static size_t path_push(struct ctx *c, const char *fmt, ...)
{
    size_t saved = c->path_len;
    if (c->path_len < sizeof c->path - 1) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(c->path + c->path_len, sizeof c->path - c->path_len, fmt, ap);
        va_end(ap);
        if (n > 0)
            c->path_len += (size_t)n < sizeof c->path - c->path_len
                               ? (size_t)n
                               : sizeof c->path - c->path_len - 1;
    }
    return saved;
}

static void path_pop(struct ctx *c, size_t saved)
{
    c->path_len = saved;
    c->path[saved] = '\0';
}

static cg_status fail(struct ctx *c, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);
static cg_status fail(struct ctx *c, cg_status code, const char *fmt, ...)
{
    if (c->err != NULL) {
        char what[CG_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        c->err->code = code;
        /* A long path keeps its tail, which names the field. */
        const char *path = c->path;
        size_t plen = strlen(path);
        const char *ellipsis = "";
        if (plen > 80) {
            path += plen - 77;
            ellipsis = "$...";
        }
        if (snprintf(c->err->msg, sizeof c->err->msg, "%s%.80s: %s", ellipsis, path, what) < 0)
            c->err->msg[0] = '\0';
    }
    return code;
}

/* Copies an error the conversation allocator filled in (it does not know the path). */
static cg_status fail_from(struct ctx *c, cg_status st)
{
    if (c->err == NULL)
        return st;
    char what[CG_ERR_MSG_MAX];
    snprintf(what, sizeof what, "%s", c->err->msg);
    return fail(c, st, "%s", what);
}

/* A key printable in a path: at most KEY_SHOWN_MAX bytes, control bytes and quotes as '?'. */
static void show_key(char *out, size_t outsz, const char *key, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && i < KEY_SHOWN_MAX && n + 1 < outsz; i++) {
        unsigned char ch = (unsigned char)key[i];
        out[n++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
    }
    out[n] = '\0';
}

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
            show_key(shown, sizeof shown, frames[d].key, frames[d].key_len);
            n += (size_t)snprintf(path + n, pathsz - n, ".%s", shown);
        } else {
            n += (size_t)snprintf(path + n, pathsz - n, "[%zu]", frames[d].index);
        }
    }
    return too_deep;
}

/* Parses with jansson after the depth pre-scan; errors carry the path of the offending byte. */
static json_t *load(struct ctx *c, const char *text, size_t len)
{
    if (scan(text, len, len, CG_CONV_JSON_DEPTH_MAX, c->path, sizeof c->path)) {
        c->path_len = strlen(c->path);
        fail(c, CG_INVALID_ARGUMENT, "nested deeper than %d levels", CG_CONV_JSON_DEPTH_MAX);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
    if (root == NULL) {
        size_t at = jerr.position > 0 ? (size_t)jerr.position : 0;
        scan(text, len, at, CG_CONV_JSON_DEPTH_MAX, c->path, sizeof c->path);
        c->path_len = strlen(c->path);
        if (json_error_code(&jerr) == json_error_invalid_utf8)
            fail(c, CG_INVALID_ARGUMENT, "invalid UTF-8 (%s, byte %zu)", jerr.text, at);
        else
            fail(c, CG_INVALID_ARGUMENT, "malformed JSON (%s, byte %zu)", jerr.text, at);
        return NULL;
    }
    c->path_len = 0;
    c->path[0] = '\0';
    return root;
}

bool cg_conv_json_is_valid(const char *text, size_t len, bool need_object)
{
    char path[PATH_MAX_BYTES];
    if (scan(text, len, len, CG_CONV_JSON_DEPTH_MAX, path, sizeof path))
        return false;
    json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    bool ok = v != NULL && (!need_object || json_is_object(v));
    json_decref(v);
    return ok;
}

/* --------------------------------------------------------------- reading helpers ------ */

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "a value";
}

/* obj[key] as a string into *out. Absent (or null when !required) leaves *out alone. */
static cg_status get_string(struct ctx *c, json_t *obj, const char *key, bool required,
                            struct cg_str *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || (json_is_null(v) && !required)) {
        if (required) {
            size_t saved = path_push(c, ".%s", key);
            cg_status st = fail(c, CG_INVALID_ARGUMENT, "required");
            path_pop(c, saved);
            return st;
        }
        return CG_OK;
    }
    if (!json_is_string(v)) {
        size_t saved = path_push(c, ".%s", key);
        cg_status st = fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", type_name(v));
        path_pop(c, saved);
        return st;
    }
    cg_status st = cg_conv_str(c->conv, json_string_value(v), json_string_length(v), out, c->err);
    return st == CG_OK ? CG_OK : fail_from(c, st);
}

/* A non-empty string of at most max bytes (ids and names). */
static cg_status get_id(struct ctx *c, json_t *obj, const char *key, struct cg_str *out)
{
    cg_status st = get_string(c, obj, key, true, out);
    if (st != CG_OK)
        return st;
    if (out->len == 0 || out->len > CG_CONV_ID_MAX) {
        size_t saved = path_push(c, ".%s", key);
        st = fail(c, CG_INVALID_ARGUMENT, "must be 1..%d bytes", CG_CONV_ID_MAX);
        path_pop(c, saved);
    }
    return st;
}

/* A value as compact JSON text (tool arguments, schemas). */
static cg_status dump_value(struct ctx *c, json_t *v, struct cg_str *out)
{
    size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    if (n == 0)
        return fail(c, CG_INVALID_ARGUMENT, "cannot be written back as JSON");
    char *buf = cg_conv_alloc(c->conv, n + 1, 1);
    if (buf == NULL)
        return fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
    json_dumpb(v, buf, n, JSON_COMPACT | JSON_ENCODE_ANY);
    buf[n] = '\0';
    *out = (struct cg_str){buf, n};
    return CG_OK;
}

/* The keys of obj not in known[] as compact JSON object text (empty when none). */
static cg_status keep_extra(struct ctx *c, json_t *obj, const char *const *known,
                            struct cg_str *out)
{
    json_t *extra = NULL;
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v)
    {
        bool is_known = false;
        for (const char *const *k = known; *k != NULL && !is_known; k++)
            is_known = strcmp(*k, key) == 0;
        if (is_known)
            continue;
        if (extra == NULL && (extra = json_object()) == NULL)
            return fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
        json_object_set(extra, key, v);
    }
    if (extra == NULL)
        return CG_OK;
    cg_status st = dump_value(c, extra, out);
    json_decref(extra);
    return st;
}

static cg_status add_part(struct ctx *c, struct cg_message *m, cg_part_kind kind,
                          struct cg_part **out)
{
    cg_status st = cg_conv_add_part(c->conv, m, kind, out, c->err);
    return st == CG_OK ? CG_OK : fail_from(c, st);
}

static cg_status expect_object(struct ctx *c, json_t *v)
{
    if (!json_is_object(v))
        return fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s", type_name(v));
    return CG_OK;
}

/* ------------------------------------------------------------------ base64 ------------ */

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+' || ch == '-')
        return 62;
    if (ch == '/' || ch == '_')
        return 63;
    return -1;
}

/* Decodes up to max_out bytes of base64 (standard or URL alphabet, padding and whitespace
 * ignored) into out. Returns the bytes written, or SIZE_MAX on a character outside base64. */
static size_t b64_decode(const char *in, size_t len, unsigned char *out, size_t max_out)
{
    uint32_t acc = 0;
    int bits = 0;
    size_t n = 0;
    for (size_t i = 0; i < len && n < max_out; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch == '=' || ch == '\n' || ch == '\r' || ch == ' ')
            continue;
        int v = b64_value(ch);
        if (v < 0)
            return SIZE_MAX;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

static char *b64_encode(const unsigned char *in, size_t len, size_t *out_len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (len > (SIZE_MAX - 4) / 4 * 3)
        return NULL;
    size_t n = (len + 2) / 3 * 4;
    char *out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    *out_len = o;
    return out;
}

/* Decoded size of a base64 text (padding and line breaks not counted). */
static int64_t b64_size(const char *s, size_t len)
{
    size_t chars = 0;
    for (size_t i = 0; i < len; i++)
        if (b64_value((unsigned char)s[i]) >= 0)
            chars++;
    return (int64_t)(chars / 4 * 3 + (chars % 4 == 3 ? 2 : chars % 4 == 2 ? 1 : 0));
}

/* Fills size and dimensions of an image given by a data: URL without decoding all of it. */
static void describe_data_url(struct cg_image *im)
{
    const char *u = im->url.ptr;
    size_t len = im->url.len;
    if (len < 5 || strncmp(u, "data:", 5) != 0)
        return;
    const char *comma = memchr(u, ',', len);
    if (comma == NULL)
        return;
    size_t head = (size_t)(comma - u);
    bool base64 = head >= 7 && memcmp(comma - 7, ";base64", 7) == 0;
    if (!base64)
        return;
    const char *payload = comma + 1;
    size_t plen = len - head - 1;
    im->size_bytes = b64_size(payload, plen);
    unsigned char *buf = malloc(SNIFF_BYTES);
    if (buf == NULL)
        return;
    size_t n = b64_decode(payload, plen, buf, SNIFF_BYTES);
    if (n != SIZE_MAX)
        cg_conv_image_sniff(buf, n, &im->width, &im->height);
    free(buf);
}

/* ------------------------------------------------------------------ OpenAI: read ------ */

static cg_status openai_image(struct ctx *c, json_t *block, struct cg_part *p)
{
    json_t *iu = json_object_get(block, "image_url");
    size_t saved = path_push(c, ".image_url");
    cg_status st = CG_OK;
    struct cg_image *im = &p->u.image;
    if (json_is_string(iu)) {
        st = cg_conv_str(c->conv, json_string_value(iu), json_string_length(iu), &im->url, c->err);
        if (st != CG_OK)
            st = fail_from(c, st);
    } else if (json_is_object(iu)) {
        if ((st = get_string(c, iu, "url", true, &im->url)) == CG_OK)
            st = get_string(c, iu, "detail", false, &im->detail);
    } else {
        st = fail(c, CG_INVALID_ARGUMENT, "expected an object with \"url\"");
    }
    path_pop(c, saved);
    if (st != CG_OK)
        return st;
    im->source = CG_IMAGE_SOURCE_URL;
    describe_data_url(im);
    /* The media type of a data: URL, for writers that need it (Anthropic). */
    if (im->url.len > 5 && strncmp(im->url.ptr, "data:", 5) == 0) {
        const char *semi = memchr(im->url.ptr + 5, ';', im->url.len - 5);
        const char *comma = memchr(im->url.ptr + 5, ',', im->url.len - 5);
        const char *end = semi != NULL && (comma == NULL || semi < comma) ? semi : comma;
        if (end != NULL && end - im->url.ptr - 5 <= 100) {
            st = cg_conv_str(c->conv, im->url.ptr + 5, (size_t)(end - im->url.ptr - 5),
                             &im->media_type, c->err);
            if (st != CG_OK)
                return fail_from(c, st);
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
    size_t saved = path_push(c, ".content");
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
            st = fail_from(c, st);
        } else if (result != NULL) {
            result->content = s;
            result->form = CG_FORM_STRING;
        } else {
            struct cg_part *p;
            if ((st = add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
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
            size_t s2 = path_push(c, "[%zu]", i);
            st = expect_object(c, block);
            const char *type = json_string_value(json_object_get(block, "type"));
            if (st == CG_OK && type == NULL)
                st = fail(c, CG_INVALID_ARGUMENT, "\"type\" is required");
            if (st == CG_OK && strcmp(type, "text") == 0) {
                json_t *tv = json_object_get(block, "text");
                struct cg_str text = {"", 0};
                if (result != NULL) {
                    if (json_is_string(tv))
                        joined += json_string_length(tv);
                    else
                        st = get_string(c, block, "text", true, &text); /* names the error */
                } else if ((st = get_string(c, block, "text", true, &text)) == CG_OK) {
                    struct cg_part *p;
                    if ((st = add_part(c, m, CG_PART_TEXT, &p)) == CG_OK) {
                        p->u.text = text;
                        st = keep_extra(c, block, openai_block_keys, &p->extra);
                    }
                }
            } else if (st == CG_OK && strcmp(type, "image_url") == 0 && result == NULL) {
                struct cg_part *p;
                if ((st = add_part(c, m, CG_PART_IMAGE, &p)) == CG_OK &&
                    (st = openai_image(c, block, p)) == CG_OK)
                    st = keep_extra(c, block, openai_block_keys, &p->extra);
            } else if (st == CG_OK) {
                char shown[KEY_SHOWN_MAX + 1];
                show_key(shown, sizeof shown, type, strlen(type));
                st = fail(c, CG_INVALID_ARGUMENT, "unknown content part type \"%s\"%s", shown,
                          result != NULL ? " (a tool message takes text parts)" : "");
            }
            path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
        if (st == CG_OK && result != NULL) {
            char *buf = cg_conv_alloc(c->conv, joined + 1, 1);
            if (buf == NULL)
                st = fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
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
        st = fail(c, CG_INVALID_ARGUMENT, "expected a string, an array of parts or null, got %s",
                  type_name(content));
    }
    path_pop(c, saved);
    return st;
}

static const char *const openai_call_keys[] = {"id", "type", "function", NULL};

static cg_status openai_tool_calls(struct ctx *c, json_t *calls, struct cg_message *m)
{
    size_t saved = path_push(c, ".tool_calls");
    cg_status st = CG_OK;
    if (!json_is_array(calls)) {
        st = fail(c, CG_INVALID_ARGUMENT, "expected an array, got %s", type_name(calls));
        path_pop(c, saved);
        return st;
    }
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
    {
        size_t s2 = path_push(c, "[%zu]", i);
        struct cg_part *p = NULL;
        if ((st = expect_object(c, call)) == CG_OK)
            st = add_part(c, m, CG_PART_TOOL_CALL, &p);
        const char *type = json_string_value(json_object_get(call, "type"));
        if (st == CG_OK && type != NULL && strcmp(type, "function") != 0) {
            size_t s3 = path_push(c, ".type");
            st = fail(c, CG_INVALID_ARGUMENT, "only \"function\" tool calls are supported");
            path_pop(c, s3);
        }
        if (st == CG_OK)
            st = get_id(c, call, "id", &p->u.tool_call.id);
        json_t *fn = json_object_get(call, "function");
        if (st == CG_OK) {
            size_t s3 = path_push(c, ".function");
            if (fn == NULL)
                st = fail(c, CG_INVALID_ARGUMENT, "required");
            else
                st = expect_object(c, fn);
            if (st == CG_OK)
                st = get_id(c, fn, "name", &p->u.tool_call.name);
            json_t *args = fn != NULL ? json_object_get(fn, "arguments") : NULL;
            if (st == CG_OK && args != NULL && !json_is_null(args)) {
                if (json_is_string(args)) {
                    st = get_string(c, fn, "arguments", true, &p->u.tool_call.arguments);
                } else if (json_is_object(args)) {
                    size_t s4 = path_push(c, ".arguments");
                    st = dump_value(c, args, &p->u.tool_call.arguments);
                    path_pop(c, s4);
                } else {
                    size_t s4 = path_push(c, ".arguments");
                    st = fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", type_name(args));
                    path_pop(c, s4);
                }
            }
            path_pop(c, s3);
        }
        if (st == CG_OK)
            st = keep_extra(c, call, openai_call_keys, &p->extra);
        path_pop(c, s2);
        if (st != CG_OK)
            break;
    }
    path_pop(c, saved);
    return st;
}

static const char *const openai_msg_keys[] = {
    "role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", NULL};

static cg_status parse_role(struct ctx *c, json_t *msg, bool anthropic, cg_role *role)
{
    json_t *r = json_object_get(msg, "role");
    size_t saved = path_push(c, ".role");
    cg_status st = CG_OK;
    const char *s = json_string_value(r);
    if (r == NULL)
        st = fail(c, CG_INVALID_ARGUMENT, "required");
    else if (s == NULL)
        st = fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", type_name(r));
    else if (strcmp(s, "user") == 0)
        *role = CG_ROLE_USER;
    else if (strcmp(s, "assistant") == 0)
        *role = CG_ROLE_ASSISTANT;
    else if (!anthropic && strcmp(s, "system") == 0)
        *role = CG_ROLE_SYSTEM;
    else if (!anthropic && strcmp(s, "developer") == 0)
        *role = CG_ROLE_DEVELOPER;
    else if (!anthropic && strcmp(s, "tool") == 0)
        *role = CG_ROLE_TOOL;
    else {
        char shown[KEY_SHOWN_MAX + 1];
        show_key(shown, sizeof shown, s, json_string_length(r));
        st = fail(c, CG_INVALID_ARGUMENT, "unknown role \"%s\"%s", shown,
                  anthropic ? " (Anthropic messages are user or assistant)" : "");
    }
    path_pop(c, saved);
    return st;
}

static cg_status openai_message(struct ctx *c, json_t *msg)
{
    cg_status st = expect_object(c, msg);
    cg_role role = CG_ROLE_USER;
    if (st == CG_OK)
        st = parse_role(c, msg, false, &role);
    if (st != CG_OK)
        return st;
    struct cg_message *m;
    if ((st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK)
        return fail_from(c, st);
    if ((st = get_string(c, msg, "name", false, &m->name)) != CG_OK)
        return st;
    if (m->name.len > CG_CONV_NAME_MAX) {
        size_t saved = path_push(c, ".name");
        st = fail(c, CG_INVALID_ARGUMENT, "longer than %d bytes", CG_CONV_NAME_MAX);
        path_pop(c, saved);
        return st;
    }
    json_t *reasoning = json_object_get(msg, "reasoning_content");
    if (reasoning != NULL && !json_is_null(reasoning)) {
        struct cg_part *p;
        if ((st = add_part(c, m, CG_PART_REASONING, &p)) != CG_OK ||
            (st = get_string(c, msg, "reasoning_content", true, &p->u.reasoning.text)) != CG_OK)
            return st;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    if (calls != NULL && !json_is_null(calls) && role != CG_ROLE_ASSISTANT) {
        size_t saved = path_push(c, ".tool_calls");
        st = fail(c, CG_INVALID_ARGUMENT, "only assistant messages have tool calls");
        path_pop(c, saved);
        return st;
    }
    if (role == CG_ROLE_TOOL) {
        struct cg_part *p;
        if ((st = add_part(c, m, CG_PART_TOOL_RESULT, &p)) != CG_OK ||
            (st = get_id(c, msg, "tool_call_id", &p->u.tool_result.tool_call_id)) != CG_OK ||
            (st = openai_content(c, msg, m, &p->u.tool_result)) != CG_OK)
            return st;
    } else if ((st = openai_content(c, msg, m, NULL)) != CG_OK) {
        return st;
    }
    if (calls != NULL && !json_is_null(calls) && (st = openai_tool_calls(c, calls, m)) != CG_OK)
        return st;
    return keep_extra(c, msg, openai_msg_keys, &m->extra);
}

static const char *const openai_fn_keys[] = {"name", "description", "parameters", NULL};

static cg_status openai_tool(struct ctx *c, json_t *tool)
{
    cg_status st = expect_object(c, tool);
    struct cg_tool_def *t;
    if (st == CG_OK && (st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return fail_from(c, st);
    if (st != CG_OK || (st = get_string(c, tool, "type", false, &t->type)) != CG_OK)
        return st;
    json_t *fn = json_object_get(tool, "function");
    if (fn == NULL && (t->type.len == 0 || strcmp(t->type.ptr, "function") == 0)) {
        size_t saved = path_push(c, ".function");
        st = fail(c, CG_INVALID_ARGUMENT, "required");
        path_pop(c, saved);
        return st;
    }
    if (fn == NULL) {
        /* A built-in tool type: counted by its name. */
        if ((st = get_string(c, tool, "name", false, &t->name)) != CG_OK)
            return st;
        static const char *const builtin_keys[] = {"type", "name", NULL};
        return keep_extra(c, tool, builtin_keys, &t->extra);
    }
    size_t saved = path_push(c, ".function");
    if ((st = expect_object(c, fn)) == CG_OK && (st = get_id(c, fn, "name", &t->name)) == CG_OK &&
        (st = get_string(c, fn, "description", false, &t->description)) == CG_OK) {
        json_t *params = json_object_get(fn, "parameters");
        if (params != NULL && !json_is_null(params)) {
            size_t s2 = path_push(c, ".parameters");
            st = json_is_object(params) ? dump_value(c, params, &t->parameters)
                                        : fail(c, CG_INVALID_ARGUMENT, "expected an object");
            path_pop(c, s2);
        }
    }
    if (st == CG_OK)
        st = keep_extra(c, fn, openai_fn_keys, &t->extra);
    path_pop(c, saved);
    return st;
}

/* ---------------------------------------------------------------- Anthropic: read ---- */

static cg_status anthropic_image(struct ctx *c, json_t *block, struct cg_image *im)
{
    json_t *src = json_object_get(block, "source");
    size_t saved = path_push(c, ".source");
    cg_status st = src == NULL ? fail(c, CG_INVALID_ARGUMENT, "required") : expect_object(c, src);
    const char *type = json_string_value(json_object_get(src, "type"));
    if (st == CG_OK && type != NULL && strcmp(type, "base64") == 0) {
        struct cg_str b64 = {"", 0};
        if ((st = get_string(c, src, "media_type", false, &im->media_type)) == CG_OK &&
            (st = get_string(c, src, "data", true, &b64)) == CG_OK) {
            size_t cap = b64.len / 4 * 3 + 3;
            unsigned char *bytes = cg_conv_alloc(c->conv, cap + 1, 1);
            size_t n = bytes != NULL ? b64_decode(b64.ptr, b64.len, bytes, cap) : 0;
            if (bytes == NULL)
                st = fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
            else if (n == SIZE_MAX)
                st = fail(c, CG_INVALID_ARGUMENT, "\"data\" is not base64");
            else {
                im->data = (struct cg_str){(const char *)bytes, n};
                im->source = CG_IMAGE_SOURCE_DATA;
                im->size_bytes = (int64_t)n;
                cg_conv_image_sniff(bytes, n, &im->width, &im->height);
            }
        }
    } else if (st == CG_OK && type != NULL && strcmp(type, "url") == 0) {
        if ((st = get_string(c, src, "url", true, &im->url)) == CG_OK) {
            im->source = CG_IMAGE_SOURCE_URL;
            describe_data_url(im);
        }
    } else if (st == CG_OK) {
        st = fail(c, CG_INVALID_ARGUMENT, "source type must be \"base64\" or \"url\"");
    }
    path_pop(c, saved);
    return st;
}

/* A tool_result's content: a string, or text and image blocks. */
static cg_status anthropic_result_content(struct ctx *c, json_t *block, struct cg_tool_result *r)
{
    json_t *content = json_object_get(block, "content");
    if (content == NULL || json_is_null(content))
        return CG_OK;
    size_t saved = path_push(c, ".content");
    cg_status st = CG_OK;
    if (json_is_string(content)) {
        r->form = CG_FORM_STRING;
        st = cg_conv_str(c->conv, json_string_value(content), json_string_length(content),
                         &r->content, c->err);
        if (st != CG_OK)
            st = fail_from(c, st);
    } else if (json_is_array(content)) {
        r->form = CG_FORM_PARTS;
        size_t i, joined = 0, images = 0;
        json_t *b;
        json_array_foreach(content, i, b)
        {
            size_t s2 = path_push(c, "[%zu]", i);
            const char *type = json_string_value(json_object_get(b, "type"));
            if ((st = expect_object(c, b)) == CG_OK && type != NULL && strcmp(type, "text") == 0) {
                json_t *t = json_object_get(b, "text");
                if (!json_is_string(t))
                    st = fail(c, CG_INVALID_ARGUMENT, "\"text\" must be a string");
                else
                    joined += json_string_length(t) + (joined > 0 ? 1 : 0);
            } else if (st == CG_OK && type != NULL && strcmp(type, "image") == 0) {
                images++;
            } else if (st == CG_OK) {
                st = fail(c, CG_INVALID_ARGUMENT, "a tool_result holds text and image blocks");
            }
            path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
        char *buf = st == CG_OK ? cg_conv_alloc(c->conv, joined + 1, 1) : NULL;
        r->images =
            st == CG_OK && images > 0 ? cg_conv_alloc(c->conv, images, sizeof *r->images) : NULL;
        if (st == CG_OK && (buf == NULL || (images > 0 && r->images == NULL)))
            st = fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
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
                size_t s2 = path_push(c, "[%zu]", i);
                struct cg_image *im = &r->images[r->n_images++];
                *im = (struct cg_image){
                    .media_type = {"", 0}, .data = {"", 0}, .url = {"", 0}, .detail = {"", 0}};
                st = anthropic_image(c, b, im);
                path_pop(c, s2);
            }
        }
        if (st == CG_OK)
            r->content = (struct cg_str){buf, joined};
    } else {
        st = fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of blocks, got %s",
                  type_name(content));
    }
    path_pop(c, saved);
    return st;
}

static const char *const thinking_keys[] = {"type", "thinking", "signature", NULL};
static const char *const redacted_keys[] = {"type", "data", NULL};

/* One content block into a part of m. */
static cg_status anthropic_block(struct ctx *c, json_t *b, struct cg_message *m)
{
    cg_status st = expect_object(c, b);
    if (st != CG_OK)
        return st;
    json_t *tv = json_object_get(b, "type");
    const char *type = json_string_value(tv);
    if (type == NULL) {
        size_t saved = path_push(c, ".type");
        st = fail(c, CG_INVALID_ARGUMENT, "%s", tv == NULL ? "required" : "expected a string");
        path_pop(c, saved);
        return st;
    }
    struct cg_part *p = NULL;
    if (strcmp(type, "text") == 0) {
        if ((st = add_part(c, m, CG_PART_TEXT, &p)) == CG_OK)
            st = get_string(c, b, "text", true, &p->u.text);
    } else if (strcmp(type, "image") == 0) {
        if ((st = add_part(c, m, CG_PART_IMAGE, &p)) == CG_OK)
            st = anthropic_image(c, b, &p->u.image);
    } else if (strcmp(type, "tool_use") == 0) {
        if ((st = add_part(c, m, CG_PART_TOOL_CALL, &p)) == CG_OK &&
            (st = get_id(c, b, "id", &p->u.tool_call.id)) == CG_OK &&
            (st = get_id(c, b, "name", &p->u.tool_call.name)) == CG_OK) {
            json_t *input = json_object_get(b, "input");
            size_t saved = path_push(c, ".input");
            if (input == NULL)
                st = fail(c, CG_INVALID_ARGUMENT, "required");
            else if (!json_is_object(input))
                st = fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s", type_name(input));
            else
                st = dump_value(c, input, &p->u.tool_call.arguments);
            path_pop(c, saved);
        }
    } else if (strcmp(type, "tool_result") == 0) {
        if ((st = add_part(c, m, CG_PART_TOOL_RESULT, &p)) == CG_OK &&
            (st = get_id(c, b, "tool_use_id", &p->u.tool_result.tool_call_id)) == CG_OK)
            st = anthropic_result_content(c, b, &p->u.tool_result);
        json_t *is_error = json_object_get(b, "is_error");
        if (st == CG_OK && is_error != NULL && !json_is_boolean(is_error) &&
            !json_is_null(is_error)) {
            size_t saved = path_push(c, ".is_error");
            st = fail(c, CG_INVALID_ARGUMENT, "expected a boolean");
            path_pop(c, saved);
        }
        if (st == CG_OK)
            p->u.tool_result.is_error = json_is_true(is_error);
    } else if (strcmp(type, "thinking") == 0) {
        if ((st = add_part(c, m, CG_PART_REASONING, &p)) == CG_OK &&
            (st = get_string(c, b, "thinking", true, &p->u.reasoning.text)) == CG_OK)
            st = get_string(c, b, "signature", false, &p->u.reasoning.signature);
    } else if (strcmp(type, "redacted_thinking") == 0) {
        if ((st = add_part(c, m, CG_PART_REASONING, &p)) == CG_OK &&
            (st = get_string(c, b, "data", true, &p->u.reasoning.text)) == CG_OK)
            p->u.reasoning.redacted = true;
    } else {
        char shown[KEY_SHOWN_MAX + 1];
        show_key(shown, sizeof shown, type, json_string_length(tv));
        size_t saved = path_push(c, ".type");
        st = fail(c, CG_INVALID_ARGUMENT, "unknown block type \"%s\"", shown);
        path_pop(c, saved);
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
    return keep_extra(c, b, keep, &p->extra);
}

static cg_status anthropic_content(struct ctx *c, json_t *content, struct cg_message *m,
                                   const char *segment)
{
    size_t saved = path_push(c, "%s", segment);
    cg_status st = CG_OK;
    if (content == NULL) {
        st = fail(c, CG_INVALID_ARGUMENT, "required");
    } else if (json_is_string(content)) {
        m->form = CG_FORM_STRING;
        struct cg_part *p;
        if ((st = add_part(c, m, CG_PART_TEXT, &p)) == CG_OK) {
            st = cg_conv_str(c->conv, json_string_value(content), json_string_length(content),
                             &p->u.text, c->err);
            if (st != CG_OK)
                st = fail_from(c, st);
        }
    } else if (json_is_array(content)) {
        m->form = CG_FORM_PARTS;
        size_t i;
        json_t *b;
        json_array_foreach(content, i, b)
        {
            size_t s2 = path_push(c, "[%zu]", i);
            st = anthropic_block(c, b, m);
            path_pop(c, s2);
            if (st != CG_OK)
                break;
        }
    } else {
        st = fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of blocks, got %s",
                  type_name(content));
    }
    path_pop(c, saved);
    return st;
}

static const char *const anthropic_msg_keys[] = {"role", "content", NULL};

static cg_status anthropic_message(struct ctx *c, json_t *msg)
{
    cg_status st = expect_object(c, msg);
    cg_role role = CG_ROLE_USER;
    if (st == CG_OK)
        st = parse_role(c, msg, true, &role);
    if (st != CG_OK)
        return st;
    struct cg_message *m;
    if ((st = cg_conv_add_message(c->conv, role, &m, c->err)) != CG_OK)
        return fail_from(c, st);
    if ((st = anthropic_content(c, json_object_get(msg, "content"), m, ".content")) != CG_OK)
        return st;
    return keep_extra(c, msg, anthropic_msg_keys, &m->extra);
}

static cg_status anthropic_system(struct ctx *c, json_t *system)
{
    size_t saved = path_push(c, ".system");
    cg_status st = CG_OK;
    struct cg_message *m;
    if (!json_is_string(system) && !json_is_array(system)) {
        st = fail(c, CG_INVALID_ARGUMENT, "expected a string or an array of text blocks, got %s",
                  type_name(system));
    } else if ((st = cg_conv_add_message(c->conv, CG_ROLE_SYSTEM, &m, c->err)) != CG_OK) {
        st = fail_from(c, st);
    } else {
        st = anthropic_content(c, system, m, "");
        c->conv->system_form = m->form;
        for (size_t i = 0; st == CG_OK && i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TEXT)
                st = fail(c, CG_INVALID_ARGUMENT, "[%zu]: system blocks must be text", i);
    }
    path_pop(c, saved);
    return st;
}

static const char *const anthropic_tool_keys[] = {"name", "description", "input_schema", "type",
                                                  NULL};

static cg_status anthropic_tool(struct ctx *c, json_t *tool)
{
    cg_status st = expect_object(c, tool);
    struct cg_tool_def *t;
    if (st == CG_OK && (st = cg_conv_add_tool(c->conv, &t, c->err)) != CG_OK)
        return fail_from(c, st);
    if (st != CG_OK || (st = get_id(c, tool, "name", &t->name)) != CG_OK ||
        (st = get_string(c, tool, "description", false, &t->description)) != CG_OK ||
        (st = get_string(c, tool, "type", false, &t->type)) != CG_OK)
        return st;
    json_t *schema = json_object_get(tool, "input_schema");
    if (schema != NULL && !json_is_null(schema)) {
        size_t saved = path_push(c, ".input_schema");
        st = json_is_object(schema) ? dump_value(c, schema, &t->parameters)
                                    : fail(c, CG_INVALID_ARGUMENT, "expected an object");
        path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    return keep_extra(c, tool, anthropic_tool_keys, &t->extra);
}

/* ------------------------------------------------------------------ read: top --------- */

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
        return fail(&c, CG_RESOURCE_EXHAUSTED, "out of memory");
    if (format != CG_CONV_JSON_OPENAI && format != CG_CONV_JSON_ANTHROPIC) {
        st = fail(&c, CG_INVALID_ARGUMENT, "unknown conversation format %d", (int)format);
        goto out;
    }
    if (len > c.conv->limits.max_bytes) {
        st = fail(&c, CG_RESOURCE_EXHAUSTED, "%zu bytes is over the limit of %zu", len,
                  c.conv->limits.max_bytes);
        goto out;
    }
    root = load(&c, json, len);
    if (root == NULL) {
        st = err != NULL ? err->code : CG_INVALID_ARGUMENT;
        goto out;
    }
    path_pop(&c, 0);
    path_push(&c, "$");
    c.conv->origin =
        format == CG_CONV_JSON_OPENAI ? CG_CONV_ORIGIN_OPENAI : CG_CONV_ORIGIN_ANTHROPIC;
    json_t *messages = root;
    if (json_is_object(root)) {
        c.conv->top_is_object = true;
        messages = json_object_get(root, "messages");
        if (messages == NULL) {
            st = fail(&c, CG_INVALID_ARGUMENT, "an object needs a \"messages\" array");
            goto out;
        }
        if ((st = get_string(&c, root, "model", false, &c.conv->model)) != CG_OK)
            goto out;
        if (format == CG_CONV_JSON_ANTHROPIC) {
            json_t *system = json_object_get(root, "system");
            if (system != NULL && !json_is_null(system) &&
                (st = anthropic_system(&c, system)) != CG_OK)
                goto out;
        }
        json_t *tools = json_object_get(root, "tools");
        c.conv->has_tools_key = tools != NULL;
        if (tools != NULL && !json_is_null(tools)) {
            size_t saved = path_push(&c, ".tools");
            if (!json_is_array(tools)) {
                st = fail(&c, CG_INVALID_ARGUMENT, "expected an array, got %s", type_name(tools));
                goto out;
            }
            size_t i;
            json_t *tool;
            json_array_foreach(tools, i, tool)
            {
                size_t s2 = path_push(&c, "[%zu]", i);
                st = format == CG_CONV_JSON_OPENAI ? openai_tool(&c, tool)
                                                   : anthropic_tool(&c, tool);
                path_pop(&c, s2);
                if (st != CG_OK)
                    goto out;
            }
            path_pop(&c, saved);
        }
        /* The other keys, in order, with the model's own keys as null placeholders. */
        json_t *shallow = json_copy(root);
        if (shallow == NULL) {
            st = fail(&c, CG_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        static const char *const owned[] = {"messages", "tools", "model", "system"};
        size_t n_owned = format == CG_CONV_JSON_ANTHROPIC ? 4 : 3;
        for (size_t k = 0; k < n_owned; k++)
            if (json_object_get(shallow, owned[k]) != NULL)
                json_object_set_new(shallow, owned[k], json_null());
        st = dump_value(&c, shallow, &c.conv->top_extra);
        json_decref(shallow);
        if (st != CG_OK)
            goto out;
    }
    size_t saved = path_push(&c, "%s", json_is_object(root) ? ".messages" : "");
    if (!json_is_array(messages)) {
        st = fail(&c, CG_INVALID_ARGUMENT, "expected an array of messages, got %s",
                  type_name(messages));
        goto out;
    }
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        size_t s2 = path_push(&c, "[%zu]", i);
        st = format == CG_CONV_JSON_OPENAI ? openai_message(&c, msg) : anthropic_message(&c, msg);
        path_pop(&c, s2);
        if (st != CG_OK)
            goto out;
    }
    path_pop(&c, saved);
out:
    json_decref(root);
    if (st != CG_OK) {
        cg_conv_free(c.conv);
        return st;
    }
    *out = c.conv;
    return CG_OK;
}

/* ------------------------------------------------------------------ writing ----------- */

struct wctx {
    const struct cg_conv *conv;
    struct cg_err *err;
    bool same_origin; /* extras are written back */
};

static cg_status wfail(struct wctx *w, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);
static cg_status wfail(struct wctx *w, cg_status code, const char *fmt, ...)
{
    if (w->err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err->msg, sizeof w->err->msg, fmt, ap);
        va_end(ap);
        w->err->code = code;
    }
    return code;
}

#define WOOM(w) wfail((w), CG_RESOURCE_EXHAUSTED, "out of memory writing JSON")

/* A string value; NULL when the bytes are not UTF-8 (or out of memory). */
static json_t *jstr(const struct cg_str *s)
{
    return json_stringn(s->ptr, s->len);
}

/* Sets obj[key] to a new string; false on invalid UTF-8 or out of memory. */
static bool set_str(json_t *obj, const char *key, const struct cg_str *s)
{
    json_t *v = jstr(s);
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

/* Merges an extra object text into obj without replacing keys obj already has. */
static bool merge_extra(struct wctx *w, json_t *obj, const struct cg_str *extra)
{
    if (!w->same_origin || extra->len == 0)
        return true;
    json_t *e = json_loadb(extra->ptr, extra->len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(e)) {
        json_decref(e);
        return true; /* not ours to fail on: extra is only ever written by the readers */
    }
    json_object_update_missing(obj, e);
    json_decref(e);
    return true;
}

static cg_status bad_utf8(struct wctx *w, size_t mi, size_t pi, const char *field)
{
    return wfail(w, CG_INVALID_ARGUMENT, "messages[%zu].parts[%zu].%s: invalid UTF-8", mi, pi,
                 field);
}

static json_t *image_url_for(const struct cg_image *im)
{
    if (im->source == CG_IMAGE_SOURCE_URL)
        return jstr(&im->url);
    if (im->source != CG_IMAGE_SOURCE_DATA)
        return NULL;
    size_t b64len;
    char *b64 = b64_encode((const unsigned char *)im->data.ptr, im->data.len, &b64len);
    if (b64 == NULL)
        return NULL;
    const char *mt = im->media_type.len > 0 ? im->media_type.ptr : "application/octet-stream";
    size_t need = strlen(mt) + b64len + 16;
    char *url = malloc(need);
    json_t *v = NULL;
    if (url != NULL) {
        int n = snprintf(url, need, "data:%s;base64,%s", mt, b64);
        v = n > 0 ? json_stringn(url, (size_t)n) : NULL;
    }
    free(url);
    free(b64);
    return v;
}

/* ---- OpenAI ---- */

static json_t *openai_image_block(const struct cg_image *im)
{
    json_t *url = image_url_for(im);
    if (url == NULL)
        return NULL;
    json_t *iu = json_object();
    json_object_set_new(iu, "url", url);
    if (im->detail.len > 0)
        json_object_set_new(iu, "detail", jstr(&im->detail));
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
        json_t *v = jstr(ntext == 1 ? &m->parts[only].u.text : &empty);
        if (v == NULL)
            return bad_utf8(w, mi, only, "text");
        return json_object_set_new(obj, "content", v) == 0 ? CG_OK : WOOM(w);
    }
    json_t *arr = json_array();
    if (arr == NULL || json_object_set_new(obj, "content", arr) != 0)
        return WOOM(w);
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        json_t *b = NULL;
        if (p->kind == CG_PART_TEXT) {
            json_t *t = jstr(&p->u.text);
            if (t == NULL)
                return bad_utf8(w, mi, i, "text");
            b = json_pack("{s:s, s:o}", "type", "text", "text", t);
        } else if (p->kind == CG_PART_IMAGE) {
            b = openai_image_block(&p->u.image);
            if (b == NULL)
                return wfail(w, CG_INVALID_ARGUMENT,
                             "messages[%zu].parts[%zu].image: OpenAI JSON needs its URL or bytes",
                             mi, i);
        } else {
            continue;
        }
        if (b == NULL || json_array_append_new(arr, b) != 0)
            return WOOM(w);
        merge_extra(w, b, &p->extra);
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
        if (!set_str(o, "tool_call_id", &r->tool_call_id))
            return bad_utf8(w, mi, i, "tool_result.tool_call_id");
        json_t *content = jstr(&r->content);
        if (content == NULL)
            return bad_utf8(w, mi, i, "tool_result.content");
        if (r->form == CG_FORM_PARTS && w->same_origin)
            content = json_pack("[{s:s, s:o}]", "type", "text", "text", content);
        if (content == NULL || json_object_set_new(o, "content", content) != 0)
            return WOOM(w);
        if (keep_message_keys && m->name.len > 0 && !set_str(o, "name", &m->name))
            return WOOM(w);
        if (keep_message_keys)
            merge_extra(w, o, &m->extra);
    }
    return CG_OK;
}

static cg_status openai_message_out(struct wctx *w, const struct cg_message *m, size_t mi,
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
            return wfail(w, CG_INVALID_ARGUMENT,
                         "messages[%zu]: an OpenAI tool message holds exactly tool results", mi);
        return openai_results_out(w, m, mi, out, true);
    }
    if (nresults > 0) {
        /* Anthropic-style results inside a user message: tool messages first. */
        if (m->role != CG_ROLE_USER)
            return wfail(w, CG_INVALID_ARGUMENT,
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
    if (m->name.len > 0 && !set_str(o, "name", &m->name))
        return wfail(w, CG_INVALID_ARGUMENT, "messages[%zu].name: invalid UTF-8", mi);
    /* reasoning first, as the readers put it */
    size_t rlen = 0, nreason = 0;
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == CG_PART_REASONING && !m->parts[i].u.reasoning.redacted) {
            rlen += m->parts[i].u.reasoning.text.len;
            nreason++;
        }
    if (nreason > 0) {
        if (m->role != CG_ROLE_ASSISTANT)
            return wfail(w, CG_INVALID_ARGUMENT,
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
            return wfail(w, CG_INVALID_ARGUMENT, "messages[%zu]: reasoning is not UTF-8", mi);
    }
    if ((st = openai_content_out(w, m, mi, o)) != CG_OK)
        return st;
    json_t *calls = NULL;
    for (size_t i = 0; i < m->n_parts; i++) {
        const struct cg_part *p = &m->parts[i];
        if (p->kind != CG_PART_TOOL_CALL)
            continue;
        if (m->role != CG_ROLE_ASSISTANT)
            return wfail(w, CG_INVALID_ARGUMENT,
                         "messages[%zu].parts[%zu]: only assistant messages carry tool calls", mi,
                         i);
        if (calls == NULL &&
            ((calls = json_array()) == NULL || json_object_set_new(o, "tool_calls", calls) != 0))
            return WOOM(w);
        json_t *id = jstr(&p->u.tool_call.id), *name = jstr(&p->u.tool_call.name),
               *args = jstr(&p->u.tool_call.arguments);
        if (id == NULL || name == NULL || args == NULL) {
            json_decref(id);
            json_decref(name);
            json_decref(args);
            return bad_utf8(w, mi, i, "tool_call");
        }
        json_t *call = json_pack("{s:o, s:s, s:{s:o, s:o}}", "id", id, "type", "function",
                                 "function", "name", name, "arguments", args);
        if (call == NULL || json_array_append_new(calls, call) != 0)
            return WOOM(w);
        merge_extra(w, call, &p->extra);
    }
    merge_extra(w, o, &m->extra);
    return CG_OK;
}

static json_t *parse_object_or_empty(const struct cg_str *s)
{
    if (s->len == 0)
        return json_object();
    json_t *v = json_loadb(s->ptr, s->len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

static cg_status openai_tools_out(struct wctx *w, json_t **out)
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
            set_str(o, "type", &t->type);
            if (t->name.len > 0)
                set_str(o, "name", &t->name);
            merge_extra(w, o, &t->extra);
            continue;
        }
        json_object_set_new(o, "type", json_string("function"));
        json_t *fn = json_object();
        if (fn == NULL || json_object_set_new(o, "function", fn) != 0 ||
            !set_str(fn, "name", &t->name))
            return wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].name: invalid UTF-8", i);
        if (t->description.len > 0 && !set_str(fn, "description", &t->description))
            return wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].description: invalid UTF-8", i);
        if (t->parameters.len > 0) {
            json_t *params = parse_object_or_empty(&t->parameters);
            if (params == NULL)
                return wfail(w, CG_INVALID_ARGUMENT,
                             "tools[%zu].parameters_json: not a JSON object", i);
            json_object_set_new(fn, "parameters", params);
        }
        merge_extra(w, fn, &t->extra);
    }
    return CG_OK;
}

/* ---- Anthropic ---- */

static json_t *anthropic_image_block(const struct cg_image *im)
{
    json_t *src = NULL;
    if (im->source == CG_IMAGE_SOURCE_DATA) {
        size_t n;
        char *b64 = b64_encode((const unsigned char *)im->data.ptr, im->data.len, &n);
        if (b64 == NULL)
            return NULL;
        json_t *mt = jstr(&im->media_type);
        src = json_pack("{s:s, s:o, s:s%}", "type", "base64", "media_type", mt, "data", b64, n);
        free(b64);
    } else if (im->source == CG_IMAGE_SOURCE_URL && im->url.len > 5 &&
               strncmp(im->url.ptr, "data:", 5) == 0) {
        /* A data: URL becomes a base64 source without decoding it. */
        const char *comma = memchr(im->url.ptr, ',', im->url.len);
        if (comma == NULL || comma - im->url.ptr < 12 || memcmp(comma - 7, ";base64", 7) != 0)
            return NULL;
        const char *mt = im->url.ptr + 5;
        const char *semi = memchr(mt, ';', (size_t)(comma - mt));
        src =
            json_pack("{s:s, s:s%, s:s%}", "type", "base64", "media_type", mt, (size_t)(semi - mt),
                      "data", comma + 1, im->url.len - (size_t)(comma + 1 - im->url.ptr));
    } else if (im->source == CG_IMAGE_SOURCE_URL) {
        src = json_pack("{s:s, s:o}", "type", "url", "url", jstr(&im->url));
    }
    if (src == NULL)
        return NULL;
    return json_pack("{s:s, s:o}", "type", "image", "source", src);
}

static void set_cache_control(struct wctx *w, json_t *b, const struct cg_part *p)
{
    merge_extra(w, b, &p->extra);
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
        json_t *t = jstr(&p->u.text);
        if (t == NULL)
            return bad_utf8(w, mi, pi, "text");
        b = json_pack("{s:s, s:o}", "type", "text", "text", t);
        break;
    }
    case CG_PART_IMAGE:
        b = anthropic_image_block(&p->u.image);
        if (b == NULL)
            return wfail(w, CG_INVALID_ARGUMENT,
                         "messages[%zu].parts[%zu].image: Anthropic JSON needs its bytes, a "
                         "base64 data: URL or an http(s) URL",
                         mi, pi);
        break;
    case CG_PART_TOOL_CALL: {
        json_t *input = parse_object_or_empty(&p->u.tool_call.arguments);
        if (input == NULL)
            return wfail(w, CG_INVALID_ARGUMENT,
                         "messages[%zu].parts[%zu].tool_call.arguments: not a JSON object "
                         "(Anthropic tool_use input must be one)",
                         mi, pi);
        json_t *id = jstr(&p->u.tool_call.id), *name = jstr(&p->u.tool_call.name);
        if (id == NULL || name == NULL) {
            json_decref(id);
            json_decref(name);
            json_decref(input);
            return bad_utf8(w, mi, pi, "tool_call");
        }
        b = json_pack("{s:s, s:o, s:o, s:o}", "type", "tool_use", "id", id, "name", name, "input",
                      input);
        break;
    }
    case CG_PART_TOOL_RESULT: {
        const struct cg_tool_result *r = &p->u.tool_result;
        json_t *id = jstr(&r->tool_call_id), *content = jstr(&r->content);
        if (id == NULL || content == NULL) {
            json_decref(id);
            json_decref(content);
            return bad_utf8(w, mi, pi, "tool_result");
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
                    return wfail(w, CG_INVALID_ARGUMENT,
                                 "messages[%zu].parts[%zu].tool_result.images[%zu]: no source", mi,
                                 pi, k);
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
        json_t *t = jstr(&r->text);
        if (t == NULL)
            return bad_utf8(w, mi, pi, "reasoning");
        if (r->redacted) {
            b = json_pack("{s:s, s:o}", "type", "redacted_thinking", "data", t);
        } else {
            b = json_pack("{s:s, s:o}", "type", "thinking", "thinking", t);
            if (b != NULL && (r->signature.len > 0 || w->same_origin))
                set_str(b, "signature", &r->signature);
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

static cg_status anthropic_messages_out(struct wctx *w, size_t first, json_t *arr)
{
    const struct cg_conv *conv = w->conv;
    json_t *open_results = NULL; /* the content array of the user message of tool results */
    for (size_t mi = first; mi < conv->n_messages; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        cg_status st;
        if (cg_conv_role_is_system(m->role))
            return wfail(w, CG_INVALID_ARGUMENT,
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
                    return wfail(w, CG_INVALID_ARGUMENT,
                                 "messages[%zu].parts[%zu]: a tool message holds tool results", mi,
                                 i);
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
            json_t *v = jstr(m->n_parts == 1 ? &m->parts[0].u.text : &empty);
            if (v == NULL)
                return bad_utf8(w, mi, 0, "text");
            json_object_set_new(o, "content", v);
        } else {
            json_t *blocks = json_array();
            if (blocks == NULL || json_object_set_new(o, "content", blocks) != 0)
                return WOOM(w);
            if ((st = anthropic_blocks_out(w, m, mi, blocks)) != CG_OK)
                return st;
        }
        merge_extra(w, o, &m->extra);
    }
    return CG_OK;
}

static cg_status anthropic_system_out(struct wctx *w, size_t *first, json_t **out)
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
        *out = jstr(&p0->u.text);
        return *out != NULL ? CG_OK : bad_utf8(w, 0, 0, "text");
    }
    json_t *arr = json_array();
    if (arr == NULL)
        return WOOM(w);
    *out = arr;
    for (size_t mi = 0; mi < n; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        for (size_t i = 0; i < m->n_parts; i++)
            if (m->parts[i].kind != CG_PART_TEXT)
                return wfail(w, CG_INVALID_ARGUMENT,
                             "messages[%zu].parts[%zu]: an Anthropic system prompt is text only",
                             mi, i);
        cg_status st = anthropic_blocks_out(w, m, mi, arr);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

static cg_status anthropic_tools_out(struct wctx *w, json_t **out)
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
        if (t->type.len > 0 && (builtin || w->same_origin))
            set_str(o, "type", &t->type);
        if (!set_str(o, "name", &t->name))
            return wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].name: invalid UTF-8", i);
        if (t->description.len > 0 && !set_str(o, "description", &t->description))
            return wfail(w, CG_INVALID_ARGUMENT, "tools[%zu].description: invalid UTF-8", i);
        if (!builtin) {
            json_t *schema = t->parameters.len > 0
                                 ? parse_object_or_empty(&t->parameters)
                                 : json_pack("{s:s, s:{}}", "type", "object", "properties");
            if (schema == NULL)
                return wfail(w, CG_INVALID_ARGUMENT,
                             "tools[%zu].parameters_json: not a JSON object", i);
            json_object_set_new(o, "input_schema", schema);
        }
        merge_extra(w, o, &t->extra);
    }
    return CG_OK;
}

cg_status cg_conv_json_write(const struct cg_conv *conv, cg_conv_json_format format, char **out,
                             size_t *out_len, struct cg_err *err)
{
    *out = NULL;
    *out_len = 0;
    cg_conv_origin want =
        format == CG_CONV_JSON_OPENAI ? CG_CONV_ORIGIN_OPENAI : CG_CONV_ORIGIN_ANTHROPIC;
    struct wctx w = {.conv = conv, .err = err, .same_origin = conv->origin == want};
    if (format != CG_CONV_JSON_OPENAI && format != CG_CONV_JSON_ANTHROPIC)
        return wfail(&w, CG_INVALID_ARGUMENT, "unknown conversation format %d", (int)format);
    json_t *messages = json_array(), *tools = NULL, *system = NULL, *root = NULL;
    cg_status st = messages != NULL ? CG_OK : WOOM(&w);
    size_t first = 0;
    if (st == CG_OK && format == CG_CONV_JSON_ANTHROPIC)
        st = anthropic_system_out(&w, &first, &system);
    for (size_t mi = first; st == CG_OK && format == CG_CONV_JSON_OPENAI && mi < conv->n_messages;
         mi++)
        st = openai_message_out(&w, &conv->messages[mi], mi, messages);
    if (st == CG_OK && format == CG_CONV_JSON_ANTHROPIC)
        st = anthropic_messages_out(&w, first, messages);
    bool want_tools =
        !conv->tools_external && (conv->n_tools > 0 || (conv->has_tools_key && w.same_origin));
    if (st == CG_OK && want_tools)
        st = format == CG_CONV_JSON_OPENAI ? openai_tools_out(&w, &tools)
                                           : anthropic_tools_out(&w, &tools);
    if (st != CG_OK)
        goto out;
    bool object = conv->top_is_object || tools != NULL || system != NULL;
    if (!object) {
        root = messages;
        messages = NULL;
    } else {
        root = w.same_origin && conv->top_extra.len > 0
                   ? json_loadb(conv->top_extra.ptr, conv->top_extra.len, JSON_ALLOW_NUL, NULL)
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
            set_str(root, "model", &conv->model);
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
    size_t n = json_dumpb(root, NULL, 0, JSON_COMPACT);
    char *buf = n > 0 ? malloc(n + 1) : NULL;
    if (buf == NULL) {
        st = WOOM(&w);
        goto out;
    }
    json_dumpb(root, buf, n, JSON_COMPACT);
    buf[n] = '\0';
    *out = buf;
    *out_len = n;
out:
    json_decref(root);
    json_decref(messages);
    json_decref(tools);
    json_decref(system);
    return st;
}

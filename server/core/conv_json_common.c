/* conv_json_common.c - what the JSON conversions share (conv_json_internal.h): JSON paths and
 * errors, reading and writing helpers, base64. The dispatcher (the depth pre-scan and the two
 * entry points) is conv_json.c; the formats live in conv_json_openai.c and
 * conv_json_anthropic.c, and all three call these helpers, which call none of them. */
#include "core/conv_json_internal.h"
#include "core/json_fast.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SNIFF_BYTES 65536 /* base64-decoded prefix of a data: URL read for image dimensions */

/* ------------------------------------------------------------------ paths and errors -- */

size_t cg__cj_path_push(struct ctx *c, const char *fmt, ...)
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

void cg__cj_path_pop(struct ctx *c, size_t saved)
{
    c->path_len = saved;
    c->path[saved] = '\0';
}

cg_status cg__cj_fail(struct ctx *c, cg_status code, const char *fmt, ...)
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
cg_status cg__cj_fail_from(struct ctx *c, cg_status st)
{
    if (c->err == NULL)
        return st;
    char what[CG_ERR_MSG_MAX];
    snprintf(what, sizeof what, "%s", c->err->msg);
    return cg__cj_fail(c, st, "%s", what);
}

/* A key printable in a path: at most KEY_SHOWN_MAX bytes, control bytes and quotes as '?'. */
void cg__cj_show_key(char *out, size_t outsz, const char *key, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && i < KEY_SHOWN_MAX && n + 1 < outsz; i++) {
        unsigned char ch = (unsigned char)key[i];
        out[n++] = (ch < 0x20 || ch == 0x7f || ch == '"' || ch == '\\') ? '?' : (char)ch;
    }
    out[n] = '\0';
}

/* --------------------------------------------------------------- reading helpers ------ */

const char *cg__cj_type_name(const json_t *v)
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
cg_status cg__cj_get_string(struct ctx *c, json_t *obj, const char *key, bool required,
                            struct cg_str *out)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || (json_is_null(v) && !required)) {
        if (required) {
            size_t saved = cg__cj_path_push(c, ".%s", key);
            cg_status st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
            cg__cj_path_pop(c, saved);
            return st;
        }
        return CG_OK;
    }
    if (!json_is_string(v)) {
        size_t saved = cg__cj_path_push(c, ".%s", key);
        cg_status st =
            cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", cg__cj_type_name(v));
        cg__cj_path_pop(c, saved);
        return st;
    }
    cg_status st = cg_conv_str(c->conv, json_string_value(v), json_string_length(v), out, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

/* A non-empty string of at most max bytes (ids and names). */
cg_status cg__cj_get_id(struct ctx *c, json_t *obj, const char *key, struct cg_str *out)
{
    cg_status st = cg__cj_get_string(c, obj, key, true, out);
    if (st != CG_OK)
        return st;
    if (out->len == 0 || out->len > CG_CONV_ID_MAX) {
        size_t saved = cg__cj_path_push(c, ".%s", key);
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "must be 1..%d bytes", CG_CONV_ID_MAX);
        cg__cj_path_pop(c, saved);
    }
    return st;
}

/* A value as compact JSON text (tool arguments, schemas). */
cg_status cg__cj_dump_value(struct ctx *c, json_t *v, struct cg_str *out)
{
    size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    if (n == 0)
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "cannot be written back as JSON");
    char *buf = cg_conv_alloc(c->conv, n + 1, 1);
    if (buf == NULL)
        return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "conversation too large");
    json_dumpb(v, buf, n, JSON_COMPACT | JSON_ENCODE_ANY);
    buf[n] = '\0';
    *out = (struct cg_str){buf, n};
    return CG_OK;
}

/* The keys of obj not in known[] as compact JSON object text (empty when none). */
cg_status cg__cj_keep_extra(struct ctx *c, json_t *obj, const char *const *known,
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
            return cg__cj_fail(c, CG_RESOURCE_EXHAUSTED, "out of memory");
        json_object_set(extra, key, v);
    }
    if (extra == NULL)
        return CG_OK;
    cg_status st = cg__cj_dump_value(c, extra, out);
    json_decref(extra);
    return st;
}

cg_status cg__cj_add_part(struct ctx *c, struct cg_message *m, cg_part_kind kind,
                          struct cg_part **out)
{
    cg_status st = cg_conv_add_part(c->conv, m, kind, out, c->err);
    return st == CG_OK ? CG_OK : cg__cj_fail_from(c, st);
}

cg_status cg__cj_expect_object(struct ctx *c, json_t *v)
{
    if (!json_is_object(v))
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an object, got %s",
                           cg__cj_type_name(v));
    return CG_OK;
}

cg_status cg__cj_parse_role(struct ctx *c, json_t *msg, bool anthropic, cg_role *role)
{
    json_t *r = json_object_get(msg, "role");
    size_t saved = cg__cj_path_push(c, ".role");
    cg_status st = CG_OK;
    const char *s = json_string_value(r);
    if (r == NULL)
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "required");
    else if (s == NULL)
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected a string, got %s", cg__cj_type_name(r));
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
        cg__cj_show_key(shown, sizeof shown, s, json_string_length(r));
        st = cg__cj_fail(c, CG_INVALID_ARGUMENT, "unknown role \"%s\"%s", shown,
                         anthropic ? " (Anthropic messages are user or assistant)" : "");
    }
    cg__cj_path_pop(c, saved);
    return st;
}

json_t *cg__cj_parse_object_or_empty(const struct cg_str *s)
{
    if (s->len == 0)
        return json_object();
    json_t *v = cg_json_load(s->ptr, s->len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
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
size_t cg__cj_b64_decode(const char *in, size_t len, unsigned char *out, size_t max_out)
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

bool cg__cj_data_url_base64(const struct cg_str *url, struct cg_str *media_type,
                            struct cg_str *payload)
{
    const char *u = url->ptr;
    const char *comma =
        url->len > 5 && strncmp(u, "data:", 5) == 0 ? memchr(u, ',', url->len) : NULL;
    if (comma == NULL || comma - u < 12 || memcmp(comma - 7, ";base64", 7) != 0)
        return false;
    const char *semi = memchr(u + 5, ';', (size_t)(comma - u - 5));
    *media_type = (struct cg_str){u + 5, (size_t)(semi - u - 5)};
    *payload = (struct cg_str){comma + 1, url->len - (size_t)(comma + 1 - u)};
    /* What cg__cj_b64_decode takes, so that a reader of the written bytes takes them too. */
    for (size_t i = 0; i < payload->len; i++) {
        unsigned char ch = (unsigned char)payload->ptr[i];
        if (b64_value(ch) < 0 && ch != '=' && ch != '\n' && ch != '\r' && ch != ' ')
            return false;
    }
    return true;
}

char *cg__cj_b64_encode(const unsigned char *in, size_t len, size_t *out_len)
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
void cg__cj_describe_data_url(struct cg_image *im)
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
    size_t n = cg__cj_b64_decode(payload, plen, buf, SNIFF_BYTES);
    if (n != SIZE_MAX)
        cg_conv_image_sniff(buf, n, &im->width, &im->height);
    free(buf);
}

/* ------------------------------------------------------------------ writing ----------- */

cg_status cg__cj_wfail(struct wctx *w, cg_status code, const char *fmt, ...)
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

/* A string value; NULL when the bytes are not UTF-8 (or out of memory). */
json_t *cg__cj_jstr(const struct cg_str *s)
{
    return json_stringn(s->ptr, s->len);
}

/* Sets obj[key] to a new string; false on invalid UTF-8 or out of memory. */
bool cg__cj_set_str(json_t *obj, const char *key, const struct cg_str *s)
{
    json_t *v = cg__cj_jstr(s);
    return v != NULL && json_object_set_new(obj, key, v) == 0;
}

/* Merges an extra object text into obj without replacing keys obj already has. */
bool cg__cj_merge_extra(struct wctx *w, json_t *obj, const struct cg_str *extra)
{
    if (!w->same_origin || extra->len == 0)
        return true;
    json_t *e = cg_json_load(extra->ptr, extra->len, JSON_ALLOW_NUL, NULL);
    if (!json_is_object(e)) {
        json_decref(e);
        return true; /* not ours to cg__cj_fail on: extra is only ever written by the readers */
    }
    json_object_update_missing(obj, e);
    json_decref(e);
    return true;
}

cg_status cg__cj_bad_utf8(struct wctx *w, size_t mi, size_t pi, const char *field)
{
    return cg__cj_wfail(w, CG_INVALID_ARGUMENT, "messages[%zu].parts[%zu].%s: invalid UTF-8", mi,
                        pi, field);
}

/* An image as OpenAI's image_url value: its URL, or a base64 data: URL of its bytes. */
json_t *cg__cj_image_url(const struct cg_image *im)
{
    if (im->source == CG_IMAGE_SOURCE_URL)
        return cg__cj_jstr(&im->url);
    if (im->source != CG_IMAGE_SOURCE_DATA)
        return NULL;
    size_t b64len;
    char *b64 = cg__cj_b64_encode((const unsigned char *)im->data.ptr, im->data.len, &b64len);
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

cg_status cg__cj_each(struct ctx *c, json_t *arr, cg_status (*fn)(void *arg, json_t *v), void *arg)
{
    if (!json_is_array(arr))
        return cg__cj_fail(c, CG_INVALID_ARGUMENT, "expected an array, got %s",
                           cg__cj_type_name(arr));
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        size_t saved = cg__cj_path_push(c, "[%zu]", i);
        cg_status st = fn(arg, v);
        cg__cj_path_pop(c, saved);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

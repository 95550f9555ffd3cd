/* conv_json_internal.h - what the files of the JSON conversions share (conv_json_common.c:
 * paths, errors, reading and writing helpers, base64; conv_json.c: the pre-scan and the two
 * entry points; conv_json_openai.c; conv_json_anthropic.c; conv_json_responses.c;
 * conv_json_gemini.c). Calls go one way: conv_json.c -> the formats -> conv_json_common.c. Internal
 * to core/conv_json*.c; see conv_json.h for the contract.
 */
#ifndef CG_CORE_CONV_JSON_INTERNAL_H
#define CG_CORE_CONV_JSON_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "core/conv_json.h"

#define PATH_MAX_BYTES 200
#define KEY_SHOWN_MAX 40

/* Reading: the conversation being built, the error to fill and the JSON path being read. */
struct ctx {
    struct cg_conv *conv;
    struct cg_err *err;
    char path[PATH_MAX_BYTES];
    size_t path_len;
    cg_conv_json_format format;
};

/* Writing: the conversation, the error, and whether unknown keys go back (same format). */
struct wctx {
    const struct cg_conv *conv;
    struct cg_err *err;
    bool same_origin; /* extras are written back */
};

#define WOOM(w) cg__cj_wfail((w), CG_RESOURCE_EXHAUSTED, "out of memory writing JSON")

/* Paths: push a segment (returns the length to pop back to), pop. */
size_t cg__cj_path_push(struct ctx *c, const char *fmt, ...) CG_PRINTF(2, 3);
void cg__cj_path_pop(struct ctx *c, size_t saved);

/* Errors: "<path>: <what>" into c->err (a long path keeps its tail); fail_from prefixes the path
 * to a message the conversation allocator wrote; wfail formats a writer's error. Each returns
 * code. */
cg_status cg__cj_fail(struct ctx *c, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);
cg_status cg__cj_fail_from(struct ctx *c, cg_status st);
cg_status cg__cj_wfail(struct wctx *w, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);

/* A key or value fit to show in a message (at most KEY_SHOWN_MAX bytes, quotes and control
 * bytes as '?'); "an object", "a string", ... for error texts. */
void cg__cj_show_key(char *out, size_t outsz, const char *key, size_t len);
const char *cg__cj_type_name(const json_t *v);

/* Reading fields: obj[key] as a string (absent or null: left alone unless required); an id or
 * name of 1..CG_CONV_ID_MAX bytes; a value as compact JSON text; the keys of obj not in known
 * (NULL-terminated) as a JSON object text; an object check; the role (Anthropic: user and
 * assistant only). Errors name the path. */
cg_status cg__cj_get_string(struct ctx *c, json_t *obj, const char *key, bool required,
                            struct cg_str *out);
cg_status cg__cj_get_id(struct ctx *c, json_t *obj, const char *key, struct cg_str *out);
cg_status cg__cj_dump_value(struct ctx *c, json_t *v, struct cg_str *out);
cg_status cg__cj_keep_extra(struct ctx *c, json_t *obj, const char *const *known,
                            struct cg_str *out);
cg_status cg__cj_expect_object(struct ctx *c, json_t *v);
cg_status cg__cj_parse_role(struct ctx *c, json_t *msg, bool anthropic, cg_role *role);

/* Calls fn(arg, element) for each element of arr with "[i]" on the path, stopping at the
 * first error; INVALID_ARGUMENT naming the path when arr is not an array. */
cg_status cg__cj_each(struct ctx *c, json_t *arr, cg_status (*fn)(void *arg, json_t *v), void *arg);

/* Appends a part to m, naming the path when a cap is reached. */
cg_status cg__cj_add_part(struct ctx *c, struct cg_message *m, cg_part_kind kind,
                          struct cg_part **out);

/* A JSON object from its text ("" gives {}); NULL when the text is not an object. */
json_t *cg__cj_parse_object_or_empty(const struct cg_str *s);

/* Base64 (standard or URL alphabet; decode ignores padding and line breaks and returns
 * SIZE_MAX on other bytes; encode returns malloc'd text or NULL), and the size and dimensions
 * of a base64 data: URL image read from its first bytes. */
size_t cg__cj_b64_decode(const char *in, size_t len, unsigned char *out, size_t max_out);
char *cg__cj_b64_encode(const unsigned char *in, size_t len, size_t *out_len);
void cg__cj_describe_data_url(struct cg_image *im);

/* Whether url is a "data:<media type>;base64,<payload>" URL whose payload is base64 (what
 * cg__cj_b64_decode takes); then *media_type and *payload point into it. */
bool cg__cj_data_url_base64(const struct cg_str *url, struct cg_str *media_type,
                            struct cg_str *payload);

/* An image as OpenAI's "image_url" value (chat and Responses): its URL, or a base64 data: URL
 * of its bytes; NULL when it has neither or out of memory. */
json_t *cg__cj_image_url(const struct cg_image *im);

/* Writing values: a string (NULL when not UTF-8); obj[key] = string (false when not UTF-8);
 * the unknown keys of a part or message merged back (same format only); the error for text
 * that is not UTF-8. */
json_t *cg__cj_jstr(const struct cg_str *s);
bool cg__cj_set_str(json_t *obj, const char *key, const struct cg_str *s);
bool cg__cj_merge_extra(struct wctx *w, json_t *obj, const struct cg_str *extra);
cg_status cg__cj_bad_utf8(struct wctx *w, size_t mi, size_t pi, const char *field);

/* conv_json_openai.c: one message or tool definition read into c->conv; one message of the
 * model appended to out as one or more OpenAI messages; the tools array. */
cg_status cg__cj_openai_message(struct ctx *c, json_t *msg);
cg_status cg__cj_openai_tool(struct ctx *c, json_t *tool);
cg_status cg__cj_openai_message_out(struct wctx *w, const struct cg_message *m, size_t mi,
                                    json_t *out);
cg_status cg__cj_openai_tools_out(struct wctx *w, json_t **out);

/* conv_json_anthropic.c: a message, the top-level system prompt (a leading system message)
 * and a tool definition read into c->conv; the leading system/developer messages as `system`
 * (*first: the first message after them; *out NULL when none), the messages from first on,
 * and the tools array. */
cg_status cg__cj_anthropic_message(struct ctx *c, json_t *msg);
cg_status cg__cj_anthropic_system(struct ctx *c, json_t *system);
cg_status cg__cj_anthropic_tool(struct ctx *c, json_t *tool);
cg_status cg__cj_anthropic_system_out(struct wctx *w, size_t *first, json_t **out);
cg_status cg__cj_anthropic_messages_out(struct wctx *w, size_t first, json_t *arr);
cg_status cg__cj_anthropic_tools_out(struct wctx *w, json_t **out);

/* conv_json_responses.c and conv_json_gemini.c: the whole document (root as parsed: for
 * Responses an array of items, a string, or an object with "input"; for Gemini an array of
 * contents or an object with "contents") read into c->conv, top-level keys included; and the
 * conversation written as a whole document (*out: the root value, a new reference). */
cg_status cg__cj_responses_read(struct ctx *c, json_t *root);
cg_status cg__cj_responses_write(struct wctx *w, json_t **out);
cg_status cg__cj_gemini_read(struct ctx *c, json_t *root);
cg_status cg__cj_gemini_write(struct wctx *w, json_t **out);

#endif

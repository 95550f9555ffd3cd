/* conv_json.h - conversations as OpenAI Chat Completions JSON and Anthropic Messages JSON, both
 * directions, with jansson (a pure parser: no I/O).
 *
 * Input: a bare array of messages, or an object with "messages" (and "tools", "model"; for
 * Anthropic "system", a string or text blocks that becomes a leading system message). Other
 * keys of the object, of each message and of each content block are kept as JSON text
 * (cg_conv `top_extra`, message/part `extra`) and written back when the output format is the
 * input's. Errors name the JSON path and the problem, e.g.
 *     $.messages[3].tool_calls[0].function.arguments: expected a string
 *     $.messages[2].content: invalid UTF-8 (unable to decode byte 0xff near '"')
 * Limits: the input's bytes (limits.max_bytes, RESOURCE_EXHAUSTED), nesting depth
 * CG_CONV_JSON_DEPTH_MAX (INVALID_ARGUMENT), and the conversation's own caps.
 *
 * What is normalized (everything else round-trips as read):
 * - OpenAI: a `tool` message's content array is joined into one text (written back as one
 *   text part); an arguments value that is an object instead of a string is kept as its compact
 *   JSON text; `reasoning_content` (DeepSeek/Kimi-style) becomes a reasoning part; legacy
 *   `function_call` and unknown keys stay in `extra`; keys of a tool call's `function` other
 *   than name and arguments, and keys of a tool definition beside `type` and `function`, are
 *   dropped.
 * - Anthropic: tool_use `input` is kept as its compact JSON text (number spellings may change);
 *   a tool_result's text blocks are joined with "\n"; base64 images are decoded to bytes and
 *   their width and height read from the header when it is PNG, GIF, JPEG or WebP.
 * - Between formats: OpenAI `tool` messages become Anthropic user messages of tool_result
 *   blocks (consecutive ones merged into one), Anthropic tool_result blocks become OpenAI
 *   `tool` messages before the rest of their user message; leading system/developer messages
 *   become Anthropic `system`; reasoning becomes `reasoning_content` for OpenAI (signatures and
 *   redacted blocks are not written there); unknown keys are not carried across formats. A
 *   bare array that must carry a system prompt or tools as Anthropic JSON becomes an object.
 * Thread-safe (jansson is, for distinct values).
 */
#ifndef CG_CORE_CONV_JSON_H
#define CG_CORE_CONV_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "core/conv.h"

#define CG_CONV_JSON_DEPTH_MAX 100

typedef enum {
    CG_CONV_JSON_OPENAI = 1,
    CG_CONV_JSON_ANTHROPIC = 2,
} cg_conv_json_format;

/* Reads json[0..len) in the given format into a new conversation (*out, the caller frees it
 * with cg_conv_free). limits may be NULL (the defaults). On error returns INVALID_ARGUMENT
 * (malformed JSON, invalid UTF-8, a wrong type, an unknown role or block type, too deep) or
 * RESOURCE_EXHAUSTED (a cap), err names the JSON path, and *out is NULL. */
cg_status cg_conv_json_read(cg_conv_json_format format, const char *json, size_t len,
                            const struct cg_conv_limits *limits, struct cg_conv **out,
                            struct cg_err *err) CG_MUST_CHECK;

/* Writes conv in the given format: *out is a NUL-terminated malloc'd text of *out_len bytes
 * that the caller frees with free(). On error (a message the format cannot carry, such as a
 * system message after the first turn in Anthropic JSON or a tool_call whose arguments are not
 * a JSON object there; out of memory) returns INVALID_ARGUMENT or RESOURCE_EXHAUSTED, err
 * names the message (`messages[3].parts[1].tool_call.arguments: ...`) and *out is NULL. */
cg_status cg_conv_json_write(const struct cg_conv *conv, cg_conv_json_format format, char **out,
                             size_t *out_len, struct cg_err *err) CG_MUST_CHECK;

/* Whether text[0..len) is one well-formed JSON value (an object when need_object) within
 * the depth cap. */
bool cg_conv_json_is_valid(const char *text, size_t len, bool need_object);

#endif

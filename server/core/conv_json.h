/* conv_json.h - conversations as OpenAI Chat Completions JSON, Anthropic Messages JSON, OpenAI
 * Responses API input items and Google Gemini contents, both directions, with jansson (a pure
 * parser: no I/O).
 *
 * Input: a bare array of messages (items, contents), or an object with "messages" (Responses
 * "input", which may also be a string; Gemini "contents") and "tools", "model", and the
 * top-level system prompt that becomes a leading system message (Anthropic "system", a string
 * or text blocks; Responses "instructions"; Gemini "systemInstruction"). A Responses document
 * may also be a bare string (one user message). Other keys of the object, of each message and
 * of each content block are kept as JSON text (cg_conv `top_extra`, message/part `extra`) and
 * written back when the output format is the input's. Errors name the JSON path and the
 * problem, e.g.
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
 * - Responses: consecutive reasoning, function_call and assistant message items make one
 *   assistant message (parts in order); function_call_output items are tool messages; other
 *   item types (web_search_call, item_reference, ...) are refused naming them. A
 *   function_call_output's array output has its input_text parts joined with "\n" (written
 *   back as one input_text part, then the images); null "model", "instructions" and "tools"
 *   are dropped; a reasoning part (summary texts joined, encrypted_content as its signature)
 *   whose text a layer changed is written as one summary_text, and kept output_text
 *   annotations that fall outside a changed text become []; the items of a turn whose
 *   reasoning a layer removed go without their ids (the API refuses an id whose reasoning
 *   item is missing).
 * - Into Responses from other formats: messages become role + content items (one text as a
 *   string; an assistant message with neither content nor calls has no item), output_text
 *   gets "annotations": [] and images "detail": "auto", function tools are flat with
 *   "strict": false unless the source said true; message names, is_error and reasoning
 *   (which needs the provider's own item id) are dropped; built-in tools of another format
 *   are refused. The leading system message goes back to "instructions" only when it
 *   was read from there.
 * - Gemini: a content with no role (or the legacy "function"/"tool") is a user message; text
 *   with "thought": true is reasoning (its thoughtSignature is the signature; on other parts
 *   it stays in `extra`); inlineData of any mime type is an image part of decoded bytes,
 *   fileData an image by URL; functionCall args are kept as compact JSON; a call or response
 *   without an id gets "ctxguard-gemini-<message>-<part>" (a response: the earliest
 *   unanswered call of its name), never written back (and refused in input); a response
 *   {"output"|"error": text} is read as that text (is_error), any other as its JSON text.
 *   Both key spellings (camelCase, snake_case) are read; the document is written in the first
 *   one it used. Code execution parts are refused.
 * - To Gemini: tool messages and the user message after them become one user content of
 *   functionResponse parts, text results {"output": text}, result images parts after them;
 *   schemas go under parametersJsonSchema; other formats' signatures, redacted reasoning,
 *   message names and image detail are dropped; their built-in tools are an error; the first
 *   function call of each model content of the current turn gets Google's documented
 *   "skip_thought_signature_validator" signature (Gemini 3 refuses it without one).
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
    CG_CONV_JSON_RESPONSES = 3, /* OpenAI Responses API input items */
    CG_CONV_JSON_GEMINI = 4,    /* Google Gemini contents */
} cg_conv_json_format;

/* The origin a conversation read in `format` gets (STRUCTURED for an unknown format). */
cg_conv_origin cg_conv_json_origin(cg_conv_json_format format);

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

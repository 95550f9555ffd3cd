/* conv.h - the conversation model every context feature works on: messages with roles and
 * typed parts (text, tool call, tool result, image, reasoning) and tool definitions. It carries
 * everything ctxguard.v1 Message / MessagePart / ToolDefinition carry, plus what a JSON round
 * trip needs (the content's original form, unknown keys as JSON text).
 *
 * Memory: a struct cg_conv owns everything reachable from it. Strings live in the conversation's
 * own block allocator (freed at once by cg_conv_free); the message array and each message's part
 * array are heap arrays that grow by doubling. Every allocation counts against the
 * conversation's byte cap (limits.max_bytes), so hostile input fails with RESOURCE_EXHAUSTED
 * instead of eating the machine. Strings are stored with their length and a terminating NUL;
 * they may hold NUL bytes (JSON "\u0000"), so use the lengths.
 *
 * Pure (no I/O, no globals); a conversation is not thread-safe, distinct ones are independent.
 */
#ifndef CG_CORE_CONV_H
#define CG_CORE_CONV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Values match ctxguard.v1.Role. DEVELOPER (OpenAI) is kept as such for round trips; every
 * rule for system messages applies to it too (cg_conv_role_is_system). */
typedef enum {
    CG_ROLE_SYSTEM = 1,
    CG_ROLE_USER = 2,
    CG_ROLE_ASSISTANT = 3,
    CG_ROLE_TOOL = 4,
    CG_ROLE_DEVELOPER = 5,
} cg_role;

/* Values match the field numbers of ctxguard.v1.MessagePart.kind. */
typedef enum {
    CG_PART_TEXT = 1,
    CG_PART_TOOL_CALL = 2,
    CG_PART_TOOL_RESULT = 3,
    CG_PART_IMAGE = 4,
    CG_PART_REASONING = 5,
} cg_part_kind;

/* Where a conversation came from; JSON writers give back unknown keys (`extra`) only to the
 * format they were read from. */
typedef enum {
    CG_CONV_ORIGIN_STRUCTURED = 0,
    CG_CONV_ORIGIN_OPENAI = 1,
    CG_CONV_ORIGIN_ANTHROPIC = 2,
    CG_CONV_ORIGIN_RESPONSES = 3, /* OpenAI Responses API input items */
    CG_CONV_ORIGIN_GEMINI = 4,    /* Google Gemini `contents` */
} cg_conv_origin;

/* How a message's content (or a tool result's content) was written, so that a round trip in
 * the same format gives the same shape. DEFAULT lets the writer choose. */
typedef enum {
    CG_FORM_DEFAULT = 0,
    CG_FORM_STRING, /* "content": "..." */
    CG_FORM_PARTS,  /* "content": [ ... ] */
    CG_FORM_NULL,   /* "content": null */
    CG_FORM_ABSENT, /* no "content" key */
} cg_content_form;

/* A byte string owned by the conversation: ptr is NUL-terminated, may contain NULs, and is
 * never NULL once set by cg_conv_str (an empty string is ""). */
struct cg_str {
    const char *ptr;
    size_t len;
};

typedef enum {
    CG_IMAGE_SOURCE_NONE = 0, /* only the description (media type, size) is kept */
    CG_IMAGE_SOURCE_DATA,     /* raw encoded bytes in `data` */
    CG_IMAGE_SOURCE_URL,      /* an http(s) or data: URL in `url` */
} cg_image_source;

struct cg_image {
    struct cg_str media_type; /* "image/png"; may be empty */
    uint32_t width, height;   /* pixels; 0 when unknown */
    int64_t size_bytes;       /* encoded size; 0 when unknown */
    cg_image_source source;
    struct cg_str data;   /* CG_IMAGE_SOURCE_DATA */
    struct cg_str url;    /* CG_IMAGE_SOURCE_URL */
    struct cg_str detail; /* OpenAI "", "auto", "low", "high" */
};

struct cg_tool_call {
    struct cg_str id;
    struct cg_str name;
    struct cg_str arguments; /* JSON text, kept byte for byte */
};

struct cg_tool_result {
    struct cg_str tool_call_id;
    struct cg_str content;
    bool is_error;
    cg_content_form form; /* string or an array of blocks */
    struct cg_str tool_name;
    struct cg_image *images; /* owned; n_images of them */
    size_t n_images;
};

struct cg_reasoning {
    struct cg_str text;      /* or the opaque data of a redacted block */
    struct cg_str signature; /* Anthropic's signature, sent back unchanged */
    bool redacted;
};

struct cg_part {
    cg_part_kind kind;
    bool cache_breakpoint; /* Anthropic cache_control on this block */
    union {
        struct cg_str text;
        struct cg_tool_call tool_call;
        struct cg_tool_result tool_result;
        struct cg_image image;
        struct cg_reasoning reasoning;
    } u;
    struct cg_str extra; /* unknown keys of the JSON block as a JSON object text, or empty */
};

struct cg_message {
    cg_role role;
    struct cg_str name; /* optional participant name; empty when absent */
    bool pinned;
    /* A layer removed this turn's reasoning: provider item ids that point at it no longer
     * stand (the Responses writer leaves out the ids of the turn's items). */
    bool lost_reasoning;
    cg_content_form form;
    struct cg_part *parts; /* owned; n_parts of them */
    size_t n_parts;
    size_t cap_parts;
    struct cg_str extra; /* unknown keys of the JSON message as a JSON object text, or empty */
};

struct cg_tool_def {
    struct cg_str name;
    struct cg_str description;
    struct cg_str parameters; /* JSON Schema text; empty means no parameters */
    struct cg_str type;       /* "" or "function" for ordinary tools */
    struct cg_str extra;      /* unknown keys of the JSON definition, or empty */
};

/* Caps on what one conversation may hold. 0 in a field means the default below. */
struct cg_conv_limits {
    size_t max_messages; /* CG_CONV_MAX_MESSAGES */
    size_t max_parts;    /* per message, CG_CONV_MAX_PARTS */
    size_t max_tools;    /* CG_CONV_MAX_TOOLS */
    size_t max_bytes;    /* everything the conversation allocates, CG_CONV_MAX_BYTES */
    bool utf8_checked;   /* not a cap: the JSON readers' input is known to be valid UTF-8 */
};

#define CG_CONV_MAX_MESSAGES 200000
#define CG_CONV_MAX_PARTS 10000
#define CG_CONV_MAX_TOOLS 1000
#define CG_CONV_MAX_BYTES ((size_t)256 << 20)
#define CG_CONV_ID_MAX 256   /* tool call ids and names, bytes */
#define CG_CONV_NAME_MAX 256 /* message names, bytes */

struct cg_conv {
    struct cg_message *messages; /* n_messages of them */
    size_t n_messages;
    size_t cap_messages;
    struct cg_tool_def *tools;
    size_t n_tools;
    size_t cap_tools;
    struct cg_str model;   /* the JSON form's "model", or empty */
    cg_conv_origin origin; /* set by the JSON readers */
    bool top_is_object;    /* the JSON form was an object (not a bare array) */
    bool has_tools_key;    /* the JSON object had a "tools" key */
    bool tools_external;   /* the tools came with the request, not in its JSON: JSON writers
                            * leave them out (the caller returns them beside the JSON) */
    /* The JSON object's other keys, in order, as a JSON object text in which the keys the model
     * owns (messages, tools, model, system) still appear with null values, so that writing back
     * in the same format keeps the key order. Empty for arrays. */
    struct cg_str top_extra;
    /* The top-level system prompt the leading system message was read from, so that it is
     * written back there: Anthropic `system` (STRING or PARTS), Responses `instructions`
     * (STRING), Gemini `systemInstruction` (PARTS); DEFAULT when none. */
    cg_content_form system_form;
    bool snake_keys; /* Gemini JSON read with snake_case keys (`inline_data`): written so */
    struct cg_conv_limits limits;
    struct cg__conv_mem *mem; /* private */
};

/* A new empty conversation with the given limits (NULL: the defaults). NULL when out of
 * memory. Free with cg_conv_free. */
struct cg_conv *cg_conv_new(const struct cg_conv_limits *limits);

/* Frees the conversation and everything it owns. NULL is a no-op. */
void cg_conv_free(struct cg_conv *conv);

/* Copies s[0..len) into the conversation and stores it in *out. On error (the byte cap or out
 * of memory) returns CG_RESOURCE_EXHAUSTED, fills err and leaves *out unchanged. */
cg_status cg_conv_str(struct cg_conv *conv, const char *s, size_t len, struct cg_str *out,
                      struct cg_err *err) CG_MUST_CHECK;

/* Raw bytes from the conversation's allocator (for arrays the caller fills), zeroed; NULL when
 * over the cap or out of memory. Freed with the conversation. */
void *cg_conv_alloc(struct cg_conv *conv, size_t n, size_t size);

/* Appends a message with the given role and no parts; *out points at it, valid until the next
 * cg_conv_add_message or cg_conv_free. CG_RESOURCE_EXHAUSTED past max_messages or the byte
 * cap (err says which). */
cg_status cg_conv_add_message(struct cg_conv *conv, cg_role role, struct cg_message **out,
                              struct cg_err *err) CG_MUST_CHECK;

/* Appends a zeroed part of the given kind to msg (a message of conv); *out valid until the
 * next part is added to msg. Strings of the part start empty (""), not NULL. */
cg_status cg_conv_add_part(struct cg_conv *conv, struct cg_message *msg, cg_part_kind kind,
                           struct cg_part **out, struct cg_err *err) CG_MUST_CHECK;

/* Appends a tool definition with empty strings; *out valid until the next one is added. */
cg_status cg_conv_add_tool(struct cg_conv *conv, struct cg_tool_def **out,
                           struct cg_err *err) CG_MUST_CHECK;

/* Appends a deep copy of src (a message of any conversation) to dst. */
cg_status cg_conv_copy_message(struct cg_conv *dst, const struct cg_message *src,
                               struct cg_err *err) CG_MUST_CHECK;

/* Whether role follows the rules of system messages (system and developer). */
bool cg_conv_role_is_system(cg_role role);

/* "system", "user", "assistant", "tool", "developer"; "unknown" otherwise. */
const char *cg_conv_role_name(cg_role role);

/* Whether role is one of cg_role's values. */
bool cg_conv_role_is_valid(int role);

/* Bytes of text the model reads in the part (text, arguments, content, reasoning; 0 for
 * images and redacted reasoning). */
size_t cg_conv_part_text_bytes(const struct cg_part *part);

/* Reads width and height from the header of an encoded PNG, GIF, JPEG or WebP image. Returns
 * false (and leaves the outputs alone) when the bytes are none of those or are cut short. */
bool cg_conv_image_sniff(const unsigned char *data, size_t len, uint32_t *width, uint32_t *height);

#endif

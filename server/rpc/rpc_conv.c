/* rpc_conv.c - Conversation messages in and out (see rpc_conv.h). */
#include "rpc/rpc_conv.h"
#include "rpc/rpc_handlers.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "core/conv_json.h"
#include "core/utf8.h"

/* The field path being checked, e.g. "conversation.messages[2].parts[0]". */
struct path {
    char text[160];
    size_t len;
};

static size_t push(struct path *p, const char *fmt, ...) CG_PRINTF(2, 3);
static size_t push(struct path *p, const char *fmt, ...)
{
    size_t saved = p->len;
    if (p->len < sizeof p->text - 1) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
        va_end(ap);
        if (n > 0)
            p->len += (size_t)n < sizeof p->text - p->len ? (size_t)n : sizeof p->text - p->len - 1;
    }
    return saved;
}

static void pop(struct path *p, size_t saved)
{
    p->len = saved;
    p->text[saved] = '\0';
}

static cg_status bad(struct cg_rpc_call *call, struct path *p, const char *leaf, const char *what)
{
    cg_err_set(&call->err, CG_INVALID_ARGUMENT, "%s%s: %s", p->text, leaf, what);
    cg_err_metaf(&call->err, "field", "%s%s", p->text, leaf);
    return CG_INVALID_ARGUMENT;
}

/* 1..max characters when required, 0..max otherwise. */
static cg_status check_chars(struct cg_rpc_call *call, struct path *p, const char *leaf,
                             const char *value, size_t max, bool required)
{
    size_t len = strlen(value);
    if (len == 0 && required) {
        char what[64];
        snprintf(what, sizeof what, "required (1..%zu characters)", max);
        return bad(call, p, leaf, what);
    }
    if (len > max && cg_utf8_length(value, len) > max) {
        char what[64];
        snprintf(what, sizeof what, "longer than %zu characters", max);
        return bad(call, p, leaf, what);
    }
    return CG_OK;
}

static cg_status str_in(struct cg_rpc_call *call, struct cg_conv *conv, const char *s,
                        struct cg_str *out)
{
    struct cg_err err;
    if (cg_conv_str(conv, s, strlen(s), out, &err) != CG_OK)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "%s", err.msg);
    return CG_OK;
}

static cg_status image_in(struct cg_rpc_call *call, struct cg_conv *conv, struct path *p,
                          const Ctxguard__V1__ImageContent *in, struct cg_image *im)
{
    cg_status st =
        check_chars(call, p, ".media_type", in->media_type, CG_RPC_CONV_MEDIA_TYPE_MAX, false);
    if (st != CG_OK)
        return st;
    if (in->width > CG_RPC_CONV_PIXELS_MAX || in->height > CG_RPC_CONV_PIXELS_MAX)
        return bad(call, p, in->width > CG_RPC_CONV_PIXELS_MAX ? ".width" : ".height",
                   "must be 0..100000 pixels");
    if (in->size_bytes < 0)
        return bad(call, p, ".size_bytes", "must not be negative");
    const char *d = in->detail;
    if (d[0] != '\0' && strcmp(d, "auto") != 0 && strcmp(d, "low") != 0 && strcmp(d, "high") != 0)
        return bad(call, p, ".detail", "must be \"\", \"auto\", \"low\" or \"high\"");
    if ((st = str_in(call, conv, in->media_type, &im->media_type)) != CG_OK ||
        (st = str_in(call, conv, in->detail, &im->detail)) != CG_OK)
        return st;
    im->width = in->width;
    im->height = in->height;
    im->size_bytes = in->size_bytes;
    if (in->source_case == CTXGUARD__V1__IMAGE_CONTENT__SOURCE_DATA) {
        struct cg_err err;
        if (cg_conv_str(conv, (const char *)in->data.data, in->data.len, &im->data, &err) != CG_OK)
            return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "%s", err.msg);
        im->source = CG_IMAGE_SOURCE_DATA;
        if (im->size_bytes == 0)
            im->size_bytes = (int64_t)in->data.len;
        if (im->width == 0 || im->height == 0)
            cg_conv_image_sniff(in->data.data, in->data.len, &im->width, &im->height);
    } else if (in->source_case == CTXGUARD__V1__IMAGE_CONTENT__SOURCE_URL) {
        if (strlen(in->url) > CG_RPC_CONV_URL_MAX)
            return bad(call, p, ".url", "longer than 8 KiB");
        if ((st = str_in(call, conv, in->url, &im->url)) != CG_OK)
            return st;
        im->source = CG_IMAGE_SOURCE_URL;
    }
    return CG_OK;
}

static cg_status part_in(struct cg_rpc_call *call, struct cg_conv *conv, struct path *p,
                         struct cg_message *m, const Ctxguard__V1__MessagePart *in)
{
    cg_part_kind kind;
    switch (in->kind_case) {
    case CTXGUARD__V1__MESSAGE_PART__KIND_TEXT:
        kind = CG_PART_TEXT;
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_CALL:
        kind = CG_PART_TOOL_CALL;
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_RESULT:
        kind = CG_PART_TOOL_RESULT;
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_IMAGE:
        kind = CG_PART_IMAGE;
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_REASONING:
        kind = CG_PART_REASONING;
        break;
    default:
        return bad(call, p, "",
                   "exactly one of text, tool_call, tool_result, image, reasoning "
                   "must be set");
    }
    struct cg_part *part;
    struct cg_err err;
    if (cg_conv_add_part(conv, m, kind, &part, &err) != CG_OK)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "%s: %s", p->text, err.msg);
    part->cache_breakpoint = in->cache_breakpoint;
    cg_status st = CG_OK;
    switch (kind) {
    case CG_PART_TEXT:
        st = str_in(call, conv, in->text, &part->u.text);
        break;
    case CG_PART_TOOL_CALL: {
        const Ctxguard__V1__ToolCall *tc = in->tool_call;
        if ((st = check_chars(call, p, ".tool_call.id", tc->id, CG_CONV_ID_MAX, true)) != CG_OK ||
            (st = check_chars(call, p, ".tool_call.name", tc->name, CG_CONV_ID_MAX, true)) != CG_OK)
            return st;
        if ((st = str_in(call, conv, tc->id, &part->u.tool_call.id)) == CG_OK &&
            (st = str_in(call, conv, tc->name, &part->u.tool_call.name)) == CG_OK)
            st = str_in(call, conv, tc->arguments_json, &part->u.tool_call.arguments);
        break;
    }
    case CG_PART_TOOL_RESULT: {
        const Ctxguard__V1__ToolResult *tr = in->tool_result;
        struct cg_tool_result *r = &part->u.tool_result;
        if ((st = check_chars(call, p, ".tool_result.tool_call_id", tr->tool_call_id,
                              CG_CONV_ID_MAX, true)) != CG_OK ||
            (st = check_chars(call, p, ".tool_result.tool_name", tr->tool_name, CG_CONV_ID_MAX,
                              false)) != CG_OK)
            return st;
        r->is_error = tr->is_error;
        if ((st = str_in(call, conv, tr->tool_call_id, &r->tool_call_id)) != CG_OK ||
            (st = str_in(call, conv, tr->content, &r->content)) != CG_OK ||
            (st = str_in(call, conv, tr->tool_name, &r->tool_name)) != CG_OK)
            return st;
        if (tr->n_images > 0) {
            r->images = cg_conv_alloc(conv, tr->n_images, sizeof *r->images);
            if (r->images == NULL)
                return cg_err_setr(&call->err, CG_RESOURCE_EXHAUSTED, CG_ERR_MESSAGE_TOO_LARGE,
                                   "conversation too large");
            for (size_t k = 0; k < tr->n_images && st == CG_OK; k++) {
                size_t saved = push(p, ".tool_result.images[%zu]", k);
                struct cg_str e = {"", 0};
                r->images[k] = (struct cg_image){.media_type = e, .data = e, .url = e, .detail = e};
                st = image_in(call, conv, p, tr->images[k], &r->images[k]);
                pop(p, saved);
                r->n_images++;
            }
        }
        break;
    }
    case CG_PART_IMAGE: {
        size_t saved = push(p, ".image");
        st = image_in(call, conv, p, in->image, &part->u.image);
        pop(p, saved);
        break;
    }
    case CG_PART_REASONING:
        part->u.reasoning.redacted = in->reasoning->redacted;
        if ((st = str_in(call, conv, in->reasoning->text, &part->u.reasoning.text)) == CG_OK)
            st = str_in(call, conv, in->reasoning->signature, &part->u.reasoning.signature);
        break;
    }
    return st;
}

static cg_status messages_in(struct cg_rpc_call *call, struct cg_conv *conv, struct path *p,
                             const Ctxguard__V1__MessageList *list)
{
    size_t n = list != NULL ? list->n_messages : 0;
    if (n > CG_CONV_MAX_MESSAGES)
        return bad(call, p, ".messages", "more than 200000 messages");
    for (size_t i = 0; i < n; i++) {
        const Ctxguard__V1__Message *in = list->messages[i];
        size_t saved = push(p, ".messages[%zu]", i);
        if (!cg_conv_role_is_valid((int)in->role))
            return bad(call, p, ".role",
                       in->role == 0 ? "required"
                                     : "unknown value (SYSTEM, USER, ASSISTANT, "
                                       "TOOL or DEVELOPER)");
        cg_status st = check_chars(call, p, ".name", in->name, CG_CONV_NAME_MAX, false);
        if (st != CG_OK)
            return st;
        struct cg_message *m;
        struct cg_err err;
        if (cg_conv_add_message(conv, (cg_role)in->role, &m, &err) != CG_OK)
            return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "%s: %s", p->text, err.msg);
        m->pinned = in->pinned;
        if ((st = str_in(call, conv, in->name, &m->name)) != CG_OK)
            return st;
        if (in->n_parts > conv->limits.max_parts)
            return bad(call, p, ".parts", "too many parts");
        for (size_t j = 0; j < in->n_parts; j++) {
            size_t s2 = push(p, ".parts[%zu]", j);
            if ((st = part_in(call, conv, p, m, in->parts[j])) != CG_OK)
                return st;
            pop(p, s2);
        }
        pop(p, saved);
    }
    return CG_OK;
}

static cg_status tools_in(struct cg_rpc_call *call, struct cg_conv *conv, struct path *p,
                          const Ctxguard__V1__Conversation *in)
{
    if (in->n_tools > CG_CONV_MAX_TOOLS)
        return bad(call, p, ".tools", "more than 1000 tool definitions");
    for (size_t i = 0; i < in->n_tools; i++) {
        const Ctxguard__V1__ToolDefinition *t = in->tools[i];
        size_t saved = push(p, ".tools[%zu]", i);
        cg_status st = check_chars(call, p, ".name", t->name, CG_CONV_ID_MAX, true);
        if (st == CG_OK && strlen(t->description) > CG_RPC_CONV_DESCRIPTION_MAX)
            st = bad(call, p, ".description", "longer than 64 KiB");
        if (st == CG_OK && t->parameters_json[0] != '\0' &&
            !cg_conv_json_is_valid(t->parameters_json, strlen(t->parameters_json), true))
            st = bad(call, p, ".parameters_json", "not a JSON object");
        if (st != CG_OK)
            return st;
        struct cg_tool_def *def;
        struct cg_err err;
        if (cg_conv_add_tool(conv, &def, &err) != CG_OK)
            return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "%s", err.msg);
        if ((st = str_in(call, conv, t->name, &def->name)) != CG_OK ||
            (st = str_in(call, conv, t->description, &def->description)) != CG_OK ||
            (st = str_in(call, conv, t->parameters_json, &def->parameters)) != CG_OK ||
            (st = str_in(call, conv, t->type, &def->type)) != CG_OK)
            return st;
        pop(p, saved);
    }
    return CG_OK;
}

static cg_status json_in(struct cg_rpc_call *call, struct path *p, const char *leaf,
                         cg_conv_json_format format, const char *json,
                         const struct cg_conv_limits *limits, struct cg_conv **out)
{
    size_t len = strlen(json);
    if (call->max_message_bytes > 0 && len > call->max_message_bytes)
        return cg_err_setr(&call->err, CG_RESOURCE_EXHAUSTED, CG_ERR_MESSAGE_TOO_LARGE,
                           "%s%s: %zu bytes is over the limit of %zu", p->text, leaf, len,
                           call->max_message_bytes);
    struct cg_err err = {0};
    cg_status st = cg_conv_json_read(format, json, len, limits, out, &err);
    if (st != CG_OK)
        return cg_err_set(&call->err, st, "%s%s: %s", p->text, leaf, err.msg);
    return CG_OK;
}

cg_status cg_rpc_conv_in(struct cg_rpc_call *call, const char *field,
                         const Ctxguard__V1__Conversation *in, struct cg_conv **out)
{
    *out = NULL;
    struct path p = {.len = 0};
    push(&p, "%s", field);
    if (in == NULL)
        return bad(call, &p, "", "required");
    /* The request's decoder checked every string field as UTF-8 (rpc.c): the JSON readers
     * need not check it again. */
    struct cg_conv_limits limits = {.utf8_checked = true};
    if (call->max_message_bytes > 0)
        limits.max_bytes = 4 * call->max_message_bytes;
    struct cg_conv *conv = NULL;
    cg_status st = CG_OK;
    switch (in->content_case) {
    case CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES:
        if ((conv = cg_conv_new(&limits)) == NULL)
            return OOM(call);
        st = messages_in(call, conv, &p, in->messages);
        break;
    case CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON:
        st =
            json_in(call, &p, ".openai_json", CG_CONV_JSON_OPENAI, in->openai_json, &limits, &conv);
        break;
    case CTXGUARD__V1__CONVERSATION__CONTENT_ANTHROPIC_JSON:
        st = json_in(call, &p, ".anthropic_json", CG_CONV_JSON_ANTHROPIC, in->anthropic_json,
                     &limits, &conv);
        break;
    case CTXGUARD__V1__CONVERSATION__CONTENT_RESPONSES_JSON:
        st = json_in(call, &p, ".responses_json", CG_CONV_JSON_RESPONSES, in->responses_json,
                     &limits, &conv);
        break;
    case CTXGUARD__V1__CONVERSATION__CONTENT_GEMINI_JSON:
        st =
            json_in(call, &p, ".gemini_json", CG_CONV_JSON_GEMINI, in->gemini_json, &limits, &conv);
        break;
    default:
        return bad(call, &p, "",
                   "exactly one of messages, openai_json, anthropic_json, responses_json, "
                   "gemini_json must be set");
    }
    if (st == CG_OK && in->n_tools > 0) {
        if (conv->n_tools > 0)
            st = bad(call, &p, ".tools", "given both in the JSON and as tool definitions");
        else if ((st = tools_in(call, conv, &p, in)) == CG_OK)
            conv->tools_external = true;
    }
    if (st != CG_OK) {
        cg_conv_free(conv);
        return st;
    }
    *out = conv;
    return CG_OK;
}

/* ------------------------------------------------------------------ out --------------- */

static char *str_out(struct cg_rpc_call *call, const struct cg_str *s, bool *oom)
{
    char *p = cg_arena_strndup(call->arena, s->ptr, strnlen(s->ptr, s->len));
    if (p == NULL)
        *oom = true;
    return p != NULL ? p : (char *)protobuf_c_empty_string;
}

static Ctxguard__V1__ImageContent *image_out(struct cg_rpc_call *call, const struct cg_image *im,
                                             bool *oom)
{
    Ctxguard__V1__ImageContent *o = cg_arena_alloc(call->arena, sizeof *o);
    if (o == NULL) {
        *oom = true;
        return NULL;
    }
    ctxguard__v1__image_content__init(o);
    o->media_type = str_out(call, &im->media_type, oom);
    o->width = im->width;
    o->height = im->height;
    o->size_bytes = im->size_bytes;
    o->detail = str_out(call, &im->detail, oom);
    if (im->source == CG_IMAGE_SOURCE_DATA) {
        o->source_case = CTXGUARD__V1__IMAGE_CONTENT__SOURCE_DATA;
        o->data.len = im->data.len;
        o->data.data = cg_arena_alloc(call->arena, im->data.len ? im->data.len : 1);
        if (o->data.data == NULL)
            *oom = true;
        else
            memcpy(o->data.data, im->data.ptr, im->data.len);
    } else if (im->source == CG_IMAGE_SOURCE_URL) {
        o->source_case = CTXGUARD__V1__IMAGE_CONTENT__SOURCE_URL;
        o->url = str_out(call, &im->url, oom);
    }
    return o;
}

static Ctxguard__V1__MessagePart *part_out(struct cg_rpc_call *call, const struct cg_part *p,
                                           bool *oom)
{
    struct cg_arena *a = call->arena;
    Ctxguard__V1__MessagePart *o = cg_arena_alloc(a, sizeof *o);
    if (o == NULL) {
        *oom = true;
        return NULL;
    }
    ctxguard__v1__message_part__init(o);
    o->cache_breakpoint = p->cache_breakpoint;
    switch (p->kind) {
    case CG_PART_TEXT:
        o->kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TEXT;
        o->text = str_out(call, &p->u.text, oom);
        break;
    case CG_PART_TOOL_CALL: {
        Ctxguard__V1__ToolCall *tc = cg_arena_alloc(a, sizeof *tc);
        if (tc == NULL)
            break;
        ctxguard__v1__tool_call__init(tc);
        tc->id = str_out(call, &p->u.tool_call.id, oom);
        tc->name = str_out(call, &p->u.tool_call.name, oom);
        tc->arguments_json = str_out(call, &p->u.tool_call.arguments, oom);
        o->kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_CALL;
        o->tool_call = tc;
        break;
    }
    case CG_PART_TOOL_RESULT: {
        const struct cg_tool_result *r = &p->u.tool_result;
        Ctxguard__V1__ToolResult *tr = cg_arena_alloc(a, sizeof *tr);
        if (tr == NULL)
            break;
        ctxguard__v1__tool_result__init(tr);
        tr->tool_call_id = str_out(call, &r->tool_call_id, oom);
        tr->content = str_out(call, &r->content, oom);
        tr->is_error = r->is_error;
        tr->tool_name = str_out(call, &r->tool_name, oom);
        if (r->n_images > 0) {
            tr->images = cg_arena_calloc(a, r->n_images, sizeof *tr->images);
            if (tr->images == NULL)
                break;
            for (size_t k = 0; k < r->n_images; k++)
                if ((tr->images[k] = image_out(call, &r->images[k], oom)) != NULL)
                    tr->n_images++;
        }
        o->kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_RESULT;
        o->tool_result = tr;
        break;
    }
    case CG_PART_IMAGE:
        o->kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_IMAGE;
        o->image = image_out(call, &p->u.image, oom);
        break;
    case CG_PART_REASONING: {
        Ctxguard__V1__ReasoningContent *rc = cg_arena_alloc(a, sizeof *rc);
        if (rc == NULL)
            break;
        ctxguard__v1__reasoning_content__init(rc);
        rc->text = str_out(call, &p->u.reasoning.text, oom);
        rc->signature = str_out(call, &p->u.reasoning.signature, oom);
        rc->redacted = p->u.reasoning.redacted;
        o->kind_case = CTXGUARD__V1__MESSAGE_PART__KIND_REASONING;
        o->reasoning = rc;
        break;
    }
    }
    if (o->kind_case == CTXGUARD__V1__MESSAGE_PART__KIND__NOT_SET)
        *oom = true;
    return o;
}

static Ctxguard__V1__Message *message_out(struct cg_rpc_call *call, const struct cg_message *m,
                                          bool *oom)
{
    struct cg_arena *a = call->arena;
    Ctxguard__V1__Message *o = cg_arena_alloc(a, sizeof *o);
    if (o == NULL)
        return NULL;
    ctxguard__v1__message__init(o);
    o->role = (Ctxguard__V1__Role)m->role;
    o->name = str_out(call, &m->name, oom);
    o->pinned = m->pinned;
    if (m->n_parts > 0) {
        o->parts = cg_arena_calloc(a, m->n_parts, sizeof *o->parts);
        if (o->parts == NULL)
            return NULL;
    }
    for (size_t j = 0; j < m->n_parts && !*oom; j++)
        o->parts[o->n_parts++] = part_out(call, &m->parts[j], oom);
    return *oom ? NULL : o;
}

const ProtobufCMessage *cg_rpc_conv_message_out(struct cg_rpc_call *call,
                                                const struct cg_conv *conv, size_t index)
{
    bool oom = false;
    Ctxguard__V1__Message *o = message_out(call, &conv->messages[index], &oom);
    return o != NULL ? &o->base : NULL;
}

Ctxguard__V1__MessageList *cg_rpc_conv_messages_out(struct cg_rpc_call *call,
                                                    const struct cg_conv *conv)
{
    struct cg_arena *a = call->arena;
    bool oom = false;
    Ctxguard__V1__MessageList *list = cg_arena_alloc(a, sizeof *list);
    if (list == NULL)
        return NULL;
    ctxguard__v1__message_list__init(list);
    if (conv->n_messages > 0) {
        list->messages = cg_arena_calloc(a, conv->n_messages, sizeof *list->messages);
        if (list->messages == NULL)
            return NULL;
    }
    for (size_t i = 0; i < conv->n_messages && !oom; i++) {
        Ctxguard__V1__Message *o = message_out(call, &conv->messages[i], &oom);
        if (o == NULL)
            return NULL;
        list->messages[list->n_messages++] = o;
    }
    return oom ? NULL : list;
}

static Ctxguard__V1__ToolDefinition **tools_out(struct cg_rpc_call *call,
                                                const struct cg_conv *conv, bool *oom)
{
    Ctxguard__V1__ToolDefinition **tools =
        cg_arena_calloc(call->arena, conv->n_tools, sizeof *tools);
    if (tools == NULL) {
        *oom = true;
        return NULL;
    }
    for (size_t i = 0; i < conv->n_tools && !*oom; i++) {
        const struct cg_tool_def *t = &conv->tools[i];
        Ctxguard__V1__ToolDefinition *o = cg_arena_alloc(call->arena, sizeof *o);
        if (o == NULL) {
            *oom = true;
            break;
        }
        ctxguard__v1__tool_definition__init(o);
        o->name = str_out(call, &t->name, oom);
        o->description = str_out(call, &t->description, oom);
        o->parameters_json = str_out(call, &t->parameters, oom);
        o->type = str_out(call, &t->type, oom);
        tools[i] = o;
    }
    return tools;
}

cg_status cg_rpc_conv_out(struct cg_rpc_call *call, const struct cg_conv *conv, int format,
                          Ctxguard__V1__Conversation **out)
{
    return cg_rpc_conv_out_rendered(call, conv, format, NULL, 0, out);
}

/* The ConversationFormat a conversation read from origin answers in by default. */
static int format_of_origin(cg_conv_origin origin)
{
    switch (origin) {
    case CG_CONV_ORIGIN_OPENAI:
        return CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_OPENAI_CHAT;
    case CG_CONV_ORIGIN_ANTHROPIC:
        return CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_ANTHROPIC_MESSAGES;
    case CG_CONV_ORIGIN_RESPONSES:
        return CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_OPENAI_RESPONSES;
    case CG_CONV_ORIGIN_GEMINI:
        return CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_GEMINI_CONTENTS;
    case CG_CONV_ORIGIN_STRUCTURED:
        break;
    }
    return CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED;
}

/* A JSON ConversationFormat's core format and where its text goes in o; false for the others. */
static bool json_slot(Ctxguard__V1__Conversation *o, int format, cg_conv_json_format *jf,
                      char ***slot)
{
    switch (format) {
    case CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_OPENAI_CHAT:
        *jf = CG_CONV_JSON_OPENAI;
        o->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
        *slot = &o->openai_json;
        return true;
    case CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_ANTHROPIC_MESSAGES:
        *jf = CG_CONV_JSON_ANTHROPIC;
        o->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_ANTHROPIC_JSON;
        *slot = &o->anthropic_json;
        return true;
    case CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_OPENAI_RESPONSES:
        *jf = CG_CONV_JSON_RESPONSES;
        o->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_RESPONSES_JSON;
        *slot = &o->responses_json;
        return true;
    case CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_GEMINI_CONTENTS:
        *jf = CG_CONV_JSON_GEMINI;
        o->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_GEMINI_JSON;
        *slot = &o->gemini_json;
        return true;
    default:
        return false;
    }
}

cg_status cg_rpc_conv_out_rendered(struct cg_rpc_call *call, const struct cg_conv *conv, int format,
                                   const char *rendered, size_t rendered_len,
                                   Ctxguard__V1__Conversation **out)
{
    *out = NULL;
    if (format == CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_UNSPECIFIED)
        format = format_of_origin(conv->origin);
    Ctxguard__V1__Conversation *o = cg_arena_alloc(call->arena, sizeof *o);
    if (o == NULL)
        return OOM(call);
    ctxguard__v1__conversation__init(o);
    bool oom = false, tools_beside = true;
    cg_conv_json_format jf;
    char **slot;
    if (format == CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED) {
        o->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
        if ((o->messages = cg_rpc_conv_messages_out(call, conv)) == NULL)
            return OOM(call);
    } else if (json_slot(o, format, &jf, &slot)) {
        char *json = (char *)rendered;
        size_t len = rendered_len;
        if (rendered == NULL) {
            struct cg_err err = {0};
            cg_status st = cg_conv_json_write(conv, jf, &json, &len, &err);
            if (st != CG_OK)
                return cg_err_set(&call->err, st, "conversation: %s", err.msg);
        }
        char *copy = cg_arena_strndup(call->arena, json, len);
        if (rendered == NULL)
            free(json);
        if (copy == NULL)
            return OOM(call);
        *slot = copy;
        tools_beside = conv->tools_external;
    } else {
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'response_format': unknown value %d", format);
    }
    if (tools_beside && conv->n_tools > 0) {
        o->tools = tools_out(call, conv, &oom);
        o->n_tools = oom ? 0 : conv->n_tools;
    }
    if (oom)
        return OOM(call);
    *out = o;
    return CG_OK;
}

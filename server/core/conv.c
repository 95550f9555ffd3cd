/* conv.c - the conversation model: its allocator, builders and small queries. */
#include "core/conv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_MIN 16384

/* One block of the string allocator; big strings get a block of their own. */
struct block {
    struct block *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

struct cg__conv_mem {
    struct block *head;
    size_t total; /* bytes counted against limits.max_bytes */
};

static const char empty_string[1] = "";

static cg_status exhausted(struct cg_err *err, const char *what)
{
    if (err != NULL) {
        err->code = CG_RESOURCE_EXHAUSTED;
        snprintf(err->msg, sizeof err->msg, "conversation too large: %s", what);
    }
    return CG_RESOURCE_EXHAUSTED;
}

static bool charge(struct cg_conv *conv, size_t bytes)
{
    if (bytes > conv->limits.max_bytes || conv->mem->total > conv->limits.max_bytes - bytes)
        return false;
    conv->mem->total += bytes;
    return true;
}

struct cg_conv *cg_conv_new(const struct cg_conv_limits *limits)
{
    struct cg_conv *conv = calloc(1, sizeof *conv);
    if (conv == NULL)
        return NULL;
    conv->mem = calloc(1, sizeof *conv->mem);
    if (conv->mem == NULL) {
        free(conv);
        return NULL;
    }
    if (limits != NULL)
        conv->limits = *limits;
    if (conv->limits.max_messages == 0)
        conv->limits.max_messages = CG_CONV_MAX_MESSAGES;
    if (conv->limits.max_parts == 0)
        conv->limits.max_parts = CG_CONV_MAX_PARTS;
    if (conv->limits.max_tools == 0)
        conv->limits.max_tools = CG_CONV_MAX_TOOLS;
    if (conv->limits.max_bytes == 0)
        conv->limits.max_bytes = CG_CONV_MAX_BYTES;
    conv->model = (struct cg_str){empty_string, 0};
    conv->top_extra = (struct cg_str){empty_string, 0};
    return conv;
}

void cg_conv_free(struct cg_conv *conv)
{
    if (conv == NULL)
        return;
    for (size_t i = 0; i < conv->n_messages; i++)
        free(conv->messages[i].parts);
    free(conv->messages);
    free(conv->tools);
    struct block *b = conv->mem->head;
    while (b != NULL) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    free(conv->mem);
    free(conv);
}

void *cg_conv_alloc(struct cg_conv *conv, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = (n * size + 15) & ~(size_t)15;
    if (bytes == 0)
        bytes = 16;
    struct block *b = conv->mem->head;
    if (b == NULL || b->size - b->used < bytes) {
        size_t want = bytes > BLOCK_MIN / 2 ? bytes : BLOCK_MIN;
        if (!charge(conv, want + sizeof *b))
            return NULL;
        struct block *nb = malloc(sizeof *nb + want);
        if (nb == NULL)
            return NULL;
        nb->size = want;
        nb->used = 0;
        if (b != NULL && want != BLOCK_MIN) {
            /* A big string's own block goes behind the current one, which keeps serving
             * small strings. */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            conv->mem->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    memset(p, 0, bytes);
    return p;
}

cg_status cg_conv_str(struct cg_conv *conv, const char *s, size_t len, struct cg_str *out,
                      struct cg_err *err)
{
    if (len == 0) {
        *out = (struct cg_str){empty_string, 0};
        return CG_OK;
    }
    if (len == SIZE_MAX)
        return exhausted(err, "string too long");
    char *p = cg_conv_alloc(conv, len + 1, 1);
    if (p == NULL)
        return exhausted(err, "over the byte limit");
    memcpy(p, s, len);
    p[len] = '\0';
    *out = (struct cg_str){p, len};
    return CG_OK;
}

/* Grows a heap array to hold one more element, charging the growth to the byte cap. */
static bool grow(struct cg_conv *conv, void **array, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t ncap = *cap ? *cap * 2 : 8;
    if (ncap > SIZE_MAX / elem)
        return false;
    if (!charge(conv, (ncap - *cap) * elem))
        return false;
    void *p = realloc(*array, ncap * elem);
    if (p == NULL)
        return false;
    *array = p;
    *cap = ncap;
    return true;
}

cg_status cg_conv_add_message(struct cg_conv *conv, cg_role role, struct cg_message **out,
                              struct cg_err *err)
{
    if (conv->n_messages >= conv->limits.max_messages)
        return exhausted(err, "more messages than allowed");
    if (!grow(conv, (void **)&conv->messages, &conv->cap_messages, conv->n_messages,
              sizeof *conv->messages))
        return exhausted(err, "over the byte limit");
    struct cg_message *m = &conv->messages[conv->n_messages++];
    memset(m, 0, sizeof *m);
    m->role = role;
    m->name = (struct cg_str){empty_string, 0};
    m->extra = (struct cg_str){empty_string, 0};
    *out = m;
    return CG_OK;
}

cg_status cg_conv_add_part(struct cg_conv *conv, struct cg_message *msg, cg_part_kind kind,
                           struct cg_part **out, struct cg_err *err)
{
    if (msg->n_parts >= conv->limits.max_parts)
        return exhausted(err, "more parts in one message than allowed");
    if (!grow(conv, (void **)&msg->parts, &msg->cap_parts, msg->n_parts, sizeof *msg->parts))
        return exhausted(err, "over the byte limit");
    struct cg_part *p = &msg->parts[msg->n_parts++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    struct cg_str e = {empty_string, 0};
    p->extra = e;
    switch (kind) {
    case CG_PART_TEXT:
        p->u.text = e;
        break;
    case CG_PART_TOOL_CALL:
        p->u.tool_call = (struct cg_tool_call){e, e, e};
        break;
    case CG_PART_TOOL_RESULT:
        p->u.tool_result.tool_call_id = e;
        p->u.tool_result.content = e;
        p->u.tool_result.tool_name = e;
        break;
    case CG_PART_IMAGE:
        p->u.image = (struct cg_image){.media_type = e, .data = e, .url = e, .detail = e};
        break;
    case CG_PART_REASONING:
        p->u.reasoning = (struct cg_reasoning){.text = e, .signature = e};
        break;
    }
    *out = p;
    return CG_OK;
}

cg_status cg_conv_add_tool(struct cg_conv *conv, struct cg_tool_def **out, struct cg_err *err)
{
    if (conv->n_tools >= conv->limits.max_tools)
        return exhausted(err, "more tool definitions than allowed");
    if (!grow(conv, (void **)&conv->tools, &conv->cap_tools, conv->n_tools, sizeof *conv->tools))
        return exhausted(err, "over the byte limit");
    struct cg_tool_def *t = &conv->tools[conv->n_tools++];
    struct cg_str e = {empty_string, 0};
    *t = (struct cg_tool_def){e, e, e, e, e};
    *out = t;
    return CG_OK;
}

static cg_status copy_str(struct cg_conv *dst, struct cg_str *s, struct cg_err *err)
{
    return cg_conv_str(dst, s->ptr, s->len, s, err);
}

static cg_status copy_image(struct cg_conv *dst, struct cg_image *im, struct cg_err *err)
{
    cg_status st = copy_str(dst, &im->media_type, err);
    if (st == CG_OK)
        st = copy_str(dst, &im->data, err);
    if (st == CG_OK)
        st = copy_str(dst, &im->url, err);
    if (st == CG_OK)
        st = copy_str(dst, &im->detail, err);
    return st;
}

cg_status cg_conv_copy_message(struct cg_conv *dst, const struct cg_message *src,
                               struct cg_err *err)
{
    /* src may live in dst's own message array, which adding a message may move. */
    const struct cg_message s = *src;
    src = &s;
    struct cg_message *m;
    cg_status st = cg_conv_add_message(dst, src->role, &m, err);
    if (st != CG_OK)
        return st;
    m->pinned = src->pinned;
    m->lost_reasoning = src->lost_reasoning;
    m->form = src->form;
    m->name = src->name;
    m->extra = src->extra;
    if ((st = copy_str(dst, &m->name, err)) != CG_OK || (st = copy_str(dst, &m->extra, err)))
        return st;
    for (size_t i = 0; i < src->n_parts; i++) {
        struct cg_part *p;
        if ((st = cg_conv_add_part(dst, m, src->parts[i].kind, &p, err)) != CG_OK)
            return st;
        *p = src->parts[i];
        if ((st = copy_str(dst, &p->extra, err)) != CG_OK)
            return st;
        switch (p->kind) {
        case CG_PART_TEXT:
            st = copy_str(dst, &p->u.text, err);
            break;
        case CG_PART_TOOL_CALL:
            if ((st = copy_str(dst, &p->u.tool_call.id, err)) == CG_OK &&
                (st = copy_str(dst, &p->u.tool_call.name, err)) == CG_OK)
                st = copy_str(dst, &p->u.tool_call.arguments, err);
            break;
        case CG_PART_TOOL_RESULT: {
            struct cg_tool_result *r = &p->u.tool_result;
            if ((st = copy_str(dst, &r->tool_call_id, err)) == CG_OK &&
                (st = copy_str(dst, &r->content, err)) == CG_OK)
                st = copy_str(dst, &r->tool_name, err);
            if (st == CG_OK && r->n_images > 0) {
                struct cg_image *imgs = cg_conv_alloc(dst, r->n_images, sizeof *imgs);
                if (imgs == NULL)
                    return exhausted(err, "over the byte limit");
                memcpy(imgs, r->images, r->n_images * sizeof *imgs);
                r->images = imgs;
                for (size_t k = 0; k < r->n_images && st == CG_OK; k++)
                    st = copy_image(dst, &imgs[k], err);
            }
            break;
        }
        case CG_PART_IMAGE:
            st = copy_image(dst, &p->u.image, err);
            break;
        case CG_PART_REASONING:
            if ((st = copy_str(dst, &p->u.reasoning.text, err)) == CG_OK)
                st = copy_str(dst, &p->u.reasoning.signature, err);
            break;
        }
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

bool cg_conv_role_is_system(cg_role role)
{
    return role == CG_ROLE_SYSTEM || role == CG_ROLE_DEVELOPER;
}

bool cg_conv_role_is_valid(int role)
{
    return role >= CG_ROLE_SYSTEM && role <= CG_ROLE_DEVELOPER;
}

const char *cg_conv_role_name(cg_role role)
{
    switch (role) {
    case CG_ROLE_SYSTEM:
        return "system";
    case CG_ROLE_USER:
        return "user";
    case CG_ROLE_ASSISTANT:
        return "assistant";
    case CG_ROLE_TOOL:
        return "tool";
    case CG_ROLE_DEVELOPER:
        return "developer";
    }
    return "unknown";
}

size_t cg_conv_part_text_bytes(const struct cg_part *part)
{
    switch (part->kind) {
    case CG_PART_TEXT:
        return part->u.text.len;
    case CG_PART_TOOL_CALL:
        return part->u.tool_call.name.len + part->u.tool_call.arguments.len;
    case CG_PART_TOOL_RESULT:
        return part->u.tool_result.content.len;
    case CG_PART_REASONING:
        return part->u.reasoning.redacted ? 0 : part->u.reasoning.text.len;
    case CG_PART_IMAGE:
        return 0;
    }
    return 0;
}

static uint32_t be16(const unsigned char *p)
{
    return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[1] << 8 | p[0];
}

static uint32_t le24(const unsigned char *p)
{
    return (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

/* JPEG: the frame header (SOF0..SOF15 but DHT, JPG and DAC) holds the size; walk segments. */
static bool sniff_jpeg(const unsigned char *d, size_t len, uint32_t *w, uint32_t *h)
{
    size_t i = 2;
    while (i + 4 <= len) {
        if (d[i] != 0xFF)
            return false;
        unsigned char marker = d[i + 1];
        if (marker == 0xFF) {
            i++;
            continue;
        }
        if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
            i += 2;
            continue;
        }
        size_t seglen = be16(d + i + 2);
        if (seglen < 2)
            return false;
        if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 &&
            marker != 0xCC) {
            if (i + 9 > len)
                return false;
            *h = be16(d + i + 5);
            *w = be16(d + i + 7);
            return true;
        }
        i += 2 + seglen;
    }
    return false;
}

bool cg_conv_image_sniff(const unsigned char *d, size_t len, uint32_t *width, uint32_t *height)
{
    uint32_t w = 0, h = 0;
    bool ok = false;
    if (len >= 24 && memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0 && memcmp(d + 12, "IHDR", 4) == 0) {
        w = be32(d + 16);
        h = be32(d + 20);
        ok = true;
    } else if (len >= 10 && (memcmp(d, "GIF87a", 6) == 0 || memcmp(d, "GIF89a", 6) == 0)) {
        w = le16(d + 6);
        h = le16(d + 8);
        ok = true;
    } else if (len >= 4 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) {
        ok = sniff_jpeg(d, len, &w, &h);
    } else if (len >= 30 && memcmp(d, "RIFF", 4) == 0 && memcmp(d + 8, "WEBP", 4) == 0) {
        if (memcmp(d + 12, "VP8 ", 4) == 0) {
            w = le16(d + 26) & 0x3FFF;
            h = le16(d + 28) & 0x3FFF;
            ok = true;
        } else if (memcmp(d + 12, "VP8L", 4) == 0 && d[20] == 0x2F) {
            uint32_t bits = (uint32_t)d[21] | (uint32_t)d[22] << 8 | (uint32_t)d[23] << 16 |
                            (uint32_t)d[24] << 24;
            w = (bits & 0x3FFF) + 1;
            h = ((bits >> 14) & 0x3FFF) + 1;
            ok = true;
        } else if (memcmp(d + 12, "VP8X", 4) == 0) {
            w = le24(d + 24) + 1;
            h = le24(d + 27) + 1;
            ok = true;
        }
    }
    if (!ok || w == 0 || h == 0)
        return false;
    *width = w;
    *height = h;
    return true;
}

/* pb_json.c - protobuf-c messages as JSON by walking their descriptors (mapping in pb_json.h).
 *
 * Walking the descriptor instead of writing one printer per message means a new RPC's
 * answer prints with --json without any code here.
 */
#include "rpc/pb_json.h"
#include "rpc/pb_pack.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static cg_status put(FILE *out, const char *s)
{
    return fputs(s, out) < 0 ? CG_IO : CG_OK;
}

/* Length of the valid UTF-8 sequence at s (at most len bytes), or 0 when it is not one.
 * Overlong forms, surrogates and code points above U+10FFFF are invalid. */
static size_t utf8_sequence_length(const unsigned char *s, size_t len)
{
    unsigned char c = s[0];
    size_t need;
    uint32_t cp;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((need == 3 && cp < 0x800) || (need == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need;
}

cg_status cg_json_write_string(FILE *out, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    if (fputc('"', out) == EOF)
        return CG_IO;
    while (i < len) {
        unsigned char c = p[i];
        int rc;
        if (c == '"' || c == '\\') {
            rc = fprintf(out, "\\%c", c);
            i++;
        } else if (c == '\n') {
            rc = fputs("\\n", out);
            i++;
        } else if (c == '\t') {
            rc = fputs("\\t", out);
            i++;
        } else if (c == '\r') {
            rc = fputs("\\r", out);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            rc = fprintf(out, "\\u%04x", c);
            i++;
        } else {
            size_t n = utf8_sequence_length(p + i, len - i);
            if (n == 0) {
                rc = fputs("\\ufffd", out);
                i++;
            } else {
                rc = fwrite(p + i, 1, n, out) == n ? 0 : -1;
                i += n;
            }
        }
        if (rc < 0)
            return CG_IO;
    }
    return fputc('"', out) == EOF ? CG_IO : CG_OK;
}

static cg_status write_base64(FILE *out, const uint8_t *data, size_t len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char quad[5];

    if (fputc('"', out) == EOF)
        return CG_IO;
    quad[4] = '\0';
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len)
            v |= data[i + 2];
        quad[0] = alphabet[(v >> 18) & 0x3f];
        quad[1] = alphabet[(v >> 12) & 0x3f];
        quad[2] = i + 1 < len ? alphabet[(v >> 6) & 0x3f] : '=';
        quad[3] = i + 2 < len ? alphabet[v & 0x3f] : '=';
        if (fputs(quad, out) < 0)
            return CG_IO;
    }
    return fputc('"', out) == EOF ? CG_IO : CG_OK;
}

static cg_status write_double(FILE *out, double v, int digits)
{
    if (isnan(v))
        return put(out, "\"NaN\"");
    if (isinf(v))
        return put(out, v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    return fprintf(out, "%.*g", digits, v) < 0 ? CG_IO : CG_OK;
}

static cg_status write_message(FILE *out, const ProtobufCMessage *msg, int depth);

/* Writes one value of field f stored at p (an element, for repeated fields). */
static cg_status write_value(FILE *out, const ProtobufCFieldDescriptor *f, const void *p, int depth)
{
    int n = 0;

    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        n = fprintf(out, "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        n = fprintf(out, "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        n = fprintf(out, "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        n = fprintf(out, "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        return write_double(out, *(const float *)p, 9);
    case PROTOBUF_C_TYPE_DOUBLE:
        return write_double(out, *(const double *)p, 17);
    case PROTOBUF_C_TYPE_BOOL:
        return put(out, *(const protobuf_c_boolean *)p ? "true" : "false");
    case PROTOBUF_C_TYPE_ENUM: {
        int value = *(const int *)p;
        const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(
            (const ProtobufCEnumDescriptor *)f->descriptor, value);
        if (ev != NULL)
            return cg_json_write_string(out, ev->name, strlen(ev->name));
        n = fprintf(out, "%d", value);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return cg_json_write_string(out, s, s != NULL ? strlen(s) : 0);
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = p;
        return write_base64(out, b->data, b->len);
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
        if (m == NULL)
            return put(out, "null");
        return write_message(out, m, depth + 1);
    }
    default:
        return put(out, "null");
    }
    return n < 0 ? CG_IO : CG_OK;
}

static bool is_pointer_type(ProtobufCType type)
{
    return type == PROTOBUF_C_TYPE_STRING || type == PROTOBUF_C_TYPE_MESSAGE;
}

/* Whether field f of msg is to be printed: all fields are, except unset oneof members and
 * unset explicit-presence (proto2 / proto3 `optional`) fields. */
static bool field_is_printed(const ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
    const char *base = (const char *)msg;

    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        return *(const uint32_t *)(base + f->quantifier_offset) == f->id;
    if (f->label == PROTOBUF_C_LABEL_OPTIONAL) {
        if (is_pointer_type(f->type)) {
            const void *ptr = *(void *const *)(base + f->offset);
            return ptr != NULL && (f->default_value == NULL || ptr != f->default_value);
        }
        return *(const protobuf_c_boolean *)(base + f->quantifier_offset);
    }
    return true;
}

static cg_status write_message(FILE *out, const ProtobufCMessage *msg, int depth)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    bool first = true;
    cg_status rc = CG_OK;

    if (depth > CG_JSON_MAX_DEPTH)
        return CG_INVALID_ARGUMENT;
    rc = put(out, "{");
    if (rc)
        goto out;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->label != PROTOBUF_C_LABEL_REPEATED && !field_is_printed(msg, f))
            continue;
        rc = put(out, first ? "" : ",");
        if (rc)
            goto out;
        first = false;
        rc = cg_json_write_string(out, f->name, strlen(f->name));
        if (rc)
            goto out;
        rc = put(out, ":");
        if (rc)
            goto out;
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            rc = write_value(out, f, base + f->offset, depth);
            if (rc)
                goto out;
            continue;
        }
        size_t count = *(const size_t *)(base + f->quantifier_offset);
        const char *items = *(char *const *)(base + f->offset);
        size_t size = cg_pb_element_size(f->type);
        rc = put(out, "[");
        if (rc)
            goto out;
        for (size_t j = 0; j < count && items != NULL; j++) {
            if (j > 0) {
                rc = put(out, ",");
                if (rc)
                    goto out;
            }
            rc = write_value(out, f, items + j * size, depth);
            if (rc)
                goto out;
        }
        rc = put(out, "]");
        if (rc)
            goto out;
    }
    rc = put(out, "}");
out:
    return rc;
}

cg_status cg_json_write_message(FILE *out, const ProtobufCMessage *msg)
{
    return write_message(out, msg, 0);
}

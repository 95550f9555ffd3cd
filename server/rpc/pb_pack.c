/* pb_pack.c - protobuf-c messages to bytes, each message sized once (see pb_pack.h).
 *
 * The rules are protobuf-c 1.4's, field by field in descriptor order: a required field is
 * always written; a oneof member when its case names it; an optional scalar when its has_
 * flag is set; an optional string or message when not NULL (nor its default); a proto3
 * field (no label) when not zero (0, 0.0 or -0.0, false, NULL or "" strings, empty bytes,
 * NULL messages); a repeated field element by element, or as one length-delimited run when
 * packed. A NULL string is written as ""; a NULL message as an empty one.
 */
#include "rpc/pb_pack.h"

#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pb_pack.c writes fixed-width fields in the host's byte order: little-endian only"
#endif

enum { WIRE_VARINT = 0, WIRE_64 = 1, WIRE_LEN = 2, WIRE_32 = 5 };

static size_t varint_size(uint64_t v)
{
    size_t n = 1;
    for (; v >= 0x80; v >>= 7)
        n++;
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    for (; v >= 0x80; v >>= 7)
        *p++ = (uint8_t)(v | 0x80);
    *p++ = (uint8_t)v;
    return p;
}

size_t cg_pb_element_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
        return sizeof(uint64_t);
    case PROTOBUF_C_TYPE_DOUBLE:
        return sizeof(double);
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    default: /* the 32-bit ones, float and enums */
        return sizeof(uint32_t);
    }
}

/* A value (not a message) as it goes on the wire: a varint, 4 or 8 bytes (bits), or a
 * length and bytes; zero when proto3 leaves it out. */
struct value {
    int wire;
    bool zero;
    uint64_t bits;
    const void *data;
    size_t len;
};

/* The value at v of type t (one switch: this runs for every field of every answer). int32
 * and enums are sign-extended, as protobuf-c does (a negative one takes ten bytes); a NULL
 * string is "". Zero: 0, 0.0 and -0.0, false, "", empty bytes. */
static inline __attribute__((always_inline)) struct value value_of(ProtobufCType t, const void *v)
{
    struct value r = {WIRE_VARINT, false, 0, NULL, 0};
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_ENUM:
        r.bits = (uint64_t)(int64_t) * (const int32_t *)v;
        break;
    case PROTOBUF_C_TYPE_SINT32: {
        int32_t x = *(const int32_t *)v;
        r.bits = x < 0 ? (-(uint32_t)x) * 2 - 1 : (uint32_t)x * 2;
        break;
    }
    case PROTOBUF_C_TYPE_UINT32:
        r.bits = *(const uint32_t *)v;
        break;
    case PROTOBUF_C_TYPE_SINT64: {
        int64_t x = *(const int64_t *)v;
        r.bits = x < 0 ? (-(uint64_t)x) * 2 - 1 : (uint64_t)x * 2;
        break;
    }
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_UINT64:
        r.bits = *(const uint64_t *)v;
        break;
    case PROTOBUF_C_TYPE_BOOL:
        r.bits = *(const protobuf_c_boolean *)v ? 1 : 0;
        break;
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_FIXED32:
        r.wire = WIRE_32;
        r.bits = *(const uint32_t *)v;
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        r.wire = WIRE_32;
        r.bits = *(const uint32_t *)v;
        r.zero = *(const float *)v == 0;
        return r;
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
        r.wire = WIRE_64;
        r.bits = *(const uint64_t *)v;
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        r.wire = WIRE_64;
        memcpy(&r.bits, v, 8);
        r.zero = *(const double *)v == 0;
        return r;
    case PROTOBUF_C_TYPE_STRING:
        r.wire = WIRE_LEN;
        r.data = *(const char *const *)v;
        r.len = r.data != NULL ? strlen(r.data) : 0;
        r.zero = r.len == 0;
        return r;
    default: /* bytes (messages are walked, never valued) */
        r.wire = WIRE_LEN;
        r.data = ((const ProtobufCBinaryData *)v)->data;
        r.len = ((const ProtobufCBinaryData *)v)->len;
        r.zero = r.len == 0;
        return r;
    }
    r.zero = r.bits == 0;
    return r;
}

static inline __attribute__((always_inline)) size_t value_size(const struct value *v)
{
    switch (v->wire) {
    case WIRE_VARINT:
        return varint_size(v->bits);
    case WIRE_64:
        return 8;
    case WIRE_32:
        return 4;
    default:
        return varint_size(v->len) + v->len;
    }
}

static inline __attribute__((always_inline)) uint8_t *put_value(uint8_t *p, const struct value *v)
{
    switch (v->wire) {
    case WIRE_VARINT:
        return put_varint(p, v->bits);
    case WIRE_64:
        memcpy(p, &v->bits, 8);
        return p + 8;
    case WIRE_32: {
        uint32_t b = (uint32_t)v->bits;
        memcpy(p, &b, 4);
        return p + 4;
    }
    default:
        p = put_varint(p, v->len);
        if (v->len > 0)
            memcpy(p, v->data, v->len);
        return p + v->len;
    }
}

/* Whether the (not repeated) field f of the message at base is written, but for a proto3
 * scalar's zero, which the caller checks (struct value). */
static inline __attribute__((always_inline)) bool present(const ProtobufCFieldDescriptor *f,
                                                          const char *base)
{
    const void *member = base + f->offset;
    const void *q = base + f->quantifier_offset;
    bool pointer = f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE;
    if (f->label == PROTOBUF_C_LABEL_REQUIRED)
        return true;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        if (*(const uint32_t *)q != f->id)
            return false;
    } else if (f->label == PROTOBUF_C_LABEL_NONE) {
        return f->type != PROTOBUF_C_TYPE_MESSAGE || *(const void *const *)member != NULL;
    } else if (!pointer) {
        return *(const protobuf_c_boolean *)q;
    }
    if (pointer) {
        const void *p = *(const void *const *)member;
        return p != NULL && p != f->default_value;
    }
    return true;
}

/* Whether f is a proto3 field whose zero is not written. */
static inline __attribute__((always_inline)) bool proto3(const ProtobufCFieldDescriptor *f)
{
    return f->label == PROTOBUF_C_LABEL_NONE && !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF);
}

/* Whether the proto3 scalar at member (not a message) is its zero, which is not written: read
 * by its width alone, before the type's switch (most fields of an answer are zero). */
static inline __attribute__((always_inline)) bool zero3(const ProtobufCFieldDescriptor *f,
                                                        const void *member)
{
    switch (cg_pb_element_size(f->type)) {
    case 8: {
        uint64_t b;
        memcpy(&b, member, 8);
        /* a double's -0.0 is zero too (value_of) */
        return (f->type == PROTOBUF_C_TYPE_DOUBLE ? b << 1 : b) == 0;
    }
    case 4: {
        uint32_t b;
        memcpy(&b, member, 4);
        return (f->type == PROTOBUF_C_TYPE_FLOAT ? b << 1 : b) == 0;
    }
    default:
        return false; /* strings and bytes: value_of says */
    }
}

/* ---------------------------------------------------------------- sizing ---------- */

static bool size_message(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint64_t *out);

/* The bytes of sub-message sub with its length prefix into *len; its size kept in the
 * next slot of s (taken before its own sub-messages': the order the writer reads). */
static bool size_sub(const ProtobufCMessage *sub, struct cg_pb_sizes *s, uint64_t *len)
{
    if (sub == NULL) {
        *len = 1;
        return true;
    }
    if (s->n >= CG_PB_SUBMESSAGES_MAX)
        return false;
    uint32_t slot = s->n++;
    uint64_t n;
    if (!size_message(sub, s, &n) || n > UINT32_MAX)
        return false;
    s->size[slot] = (uint32_t)n;
    *len = varint_size(n) + n;
    return true;
}

static bool size_message(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint64_t *out)
{
    if (m->n_unknown_fields != 0)
        return false;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    uint64_t total = 0, len;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        size_t tag = varint_size((uint64_t)f->id << 3);
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t count = *(const size_t *)(const void *)(base + f->quantifier_offset);
            const char *array = *(const char *const *)member;
            uint64_t payload = 0;
            size_t step = cg_pb_element_size(f->type);
            for (size_t k = 0; k < count; k++) {
                struct value v;
                if (f->type != PROTOBUF_C_TYPE_MESSAGE)
                    len = value_size((v = value_of(f->type, array + k * step), &v));
                else if (!size_sub(((const ProtobufCMessage *const *)(const void *)array)[k], s,
                                   &len))
                    return false;
                payload += len;
            }
            if (count > 0)
                total += (f->flags & PROTOBUF_C_FIELD_FLAG_PACKED)
                             ? tag + varint_size(payload) + payload
                             : tag * count + payload;
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (!present(f, base))
                continue;
            if (!size_sub(*(const ProtobufCMessage *const *)member, s, &len))
                return false;
            total += tag + len;
        } else if (proto3(f) ? !zero3(f, member) : present(f, base)) { /* a oneof's other
                                                                          members: not read */
            struct value v = value_of(f->type, member);
            if (!(proto3(f) && v.zero))
                total += tag + value_size(&v);
        }
    }
    *out = total;
    return true;
}

bool cg_pb_size(const ProtobufCMessage *m, struct cg_pb_sizes *s, size_t *size)
{
    s->n = 0;
    s->next = 0;
    uint64_t n;
    if (!size_message(m, s, &n) || n > UINT32_MAX)
        return false;
    *size = (size_t)n;
    return true;
}

/* ---------------------------------------------------------------- writing --------- */

static uint8_t *write_message(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint8_t *p);

/* Writes sub-message sub with its length prefix (its size from the next slot of s);
 * NULL when what it writes does not match that size. */
static uint8_t *write_sub(const ProtobufCMessage *sub, struct cg_pb_sizes *s, uint8_t *p)
{
    if (sub == NULL) {
        *p++ = 0;
        return p;
    }
    if (s->next >= s->n)
        return NULL;
    uint32_t n = s->size[s->next++];
    p = put_varint(p, n);
    uint8_t *end = write_message(sub, s, p);
    return end == p + n ? end : NULL;
}

static uint8_t *write_message(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint8_t *p)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields && p != NULL; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        uint64_t key = (uint64_t)f->id << 3;
        if (f->type == PROTOBUF_C_TYPE_MESSAGE && f->label != PROTOBUF_C_LABEL_REPEATED) {
            if (present(f, base))
                p = write_sub(*(const ProtobufCMessage *const *)member, s,
                              put_varint(p, key | WIRE_LEN));
            continue;
        }
        if (f->label != PROTOBUF_C_LABEL_REPEATED) {
            if (proto3(f) ? zero3(f, member) : !present(f, base))
                continue;
            struct value v = value_of(f->type, member);
            if (!(proto3(f) && v.zero))
                p = put_value(put_varint(p, key | (uint64_t)v.wire), &v);
            continue;
        }
        size_t count = *(const size_t *)(const void *)(base + f->quantifier_offset);
        const char *array = *(const char *const *)member;
        size_t step = cg_pb_element_size(f->type);
        if (count > 0 && (f->flags & PROTOBUF_C_FIELD_FLAG_PACKED)) {
            uint64_t payload = 0;
            for (size_t k = 0; k < count; k++) {
                struct value v = value_of(f->type, array + k * step);
                payload += value_size(&v);
            }
            p = put_varint(put_varint(p, key | WIRE_LEN), payload);
            for (size_t k = 0; k < count; k++) {
                struct value v = value_of(f->type, array + k * step);
                p = put_value(p, &v);
            }
            continue;
        }
        for (size_t k = 0; k < count && p != NULL; k++) {
            if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                p = write_sub(((const ProtobufCMessage *const *)(const void *)array)[k], s,
                              put_varint(p, key | WIRE_LEN));
            } else {
                struct value v = value_of(f->type, array + k * step);
                p = put_value(put_varint(p, key | (uint64_t)v.wire), &v);
            }
        }
    }
    return p;
}

size_t cg_pb_write(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint8_t *out)
{
    s->next = 0;
    uint8_t *end = write_message(m, s, out);
    return end != NULL && s->next == s->n ? (size_t)(end - out) : 0;
}

/* ---------------------------------------------------------------- backward -------- */

/* The writer of one walk: fields last to first, each value then its key, written down from
 * the end of a buffer, so that a sub-message's length is known when its prefix is written.
 * Every step checks room: NULL once the buffer is too small. */

static inline uint8_t *back_bytes(uint8_t *lo, uint8_t *p, const void *data, size_t n)
{
    if (p == NULL || (size_t)(p - lo) < n)
        return NULL;
    p -= n;
    if (n > 0)
        memcpy(p, data, n);
    return p;
}

/* A varint written in place (no copy: a memcpy of a length known only at run time is a call
 * to libc, which cost more than the varint). */
static inline uint8_t *back_varint(uint8_t *lo, uint8_t *p, uint64_t v)
{
    size_t n = varint_size(v);
    if (p == NULL || (size_t)(p - lo) < n)
        return NULL;
    p -= n;
    put_varint(p, v);
    return p;
}

static inline uint8_t *back_fixed(uint8_t *lo, uint8_t *p, uint64_t bits, size_t n)
{
    if (p == NULL || (size_t)(p - lo) < n)
        return NULL;
    p -= n;
    if (n == 8) {
        memcpy(p, &bits, 8);
    } else {
        uint32_t b = (uint32_t)bits;
        memcpy(p, &b, 4);
    }
    return p;
}

static inline __attribute__((always_inline)) uint8_t *back_value(uint8_t *lo, uint8_t *p,
                                                                 const struct value *v)
{
    switch (v->wire) {
    case WIRE_VARINT:
        return back_varint(lo, p, v->bits);
    case WIRE_64:
        return back_fixed(lo, p, v->bits, 8);
    case WIRE_32:
        return back_fixed(lo, p, v->bits, 4);
    default:
        return back_varint(lo, back_bytes(lo, p, v->data, v->len), v->len);
    }
}

static uint8_t *back_message(const ProtobufCMessage *m, uint8_t *lo, uint8_t *p);

/* Sub-message sub (NULL: an empty one) with its length prefix and key, ending at p. */
static uint8_t *back_sub(const ProtobufCMessage *sub, uint64_t key, uint8_t *lo, uint8_t *p)
{
    uint8_t *end = p;
    if (sub != NULL)
        p = back_message(sub, lo, p);
    if (p == NULL)
        return NULL;
    return back_varint(lo, back_varint(lo, p, (uint64_t)(end - p)), key | WIRE_LEN);
}

/* The elements of the repeated field f, last to first. */
static uint8_t *back_repeated(const ProtobufCFieldDescriptor *f, const char *base, uint64_t key,
                              uint8_t *lo, uint8_t *p)
{
    size_t count = *(const size_t *)(const void *)(base + f->quantifier_offset);
    if (count == 0)
        return p;
    const char *array = *(const char *const *)(const void *)(base + f->offset);
    size_t step = cg_pb_element_size(f->type);
    bool packed = (f->flags & PROTOBUF_C_FIELD_FLAG_PACKED) != 0;
    uint8_t *end = p;
    for (size_t k = count; k-- > 0 && p != NULL;) {
        if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            p = back_sub(((const ProtobufCMessage *const *)(const void *)array)[k], key, lo, p);
            continue;
        }
        struct value v = value_of(f->type, array + k * step);
        p = back_value(lo, p, &v);
        if (!packed)
            p = back_varint(lo, p, key | (uint64_t)v.wire);
    }
    if (packed && p != NULL)
        p = back_varint(lo, back_varint(lo, p, (uint64_t)(end - p)), key | WIRE_LEN);
    return p;
}

static uint8_t *back_message(const ProtobufCMessage *m, uint8_t *lo, uint8_t *p)
{
    if (m->n_unknown_fields != 0)
        return NULL;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = d->n_fields; i-- > 0 && p != NULL;) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        uint64_t key = (uint64_t)f->id << 3;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            p = back_repeated(f, base, key, lo, p);
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (present(f, base))
                p = back_sub(*(const ProtobufCMessage *const *)member, key, lo, p);
        } else if (proto3(f) ? !zero3(f, member) : present(f, base)) {
            struct value v = value_of(f->type, member);
            if (!(proto3(f) && v.zero))
                p = back_varint(lo, back_value(lo, p, &v), key | (uint64_t)v.wire);
        }
    }
    return p;
}

uint8_t *cg_pb_write_back(const ProtobufCMessage *m, uint8_t *buf, size_t cap, size_t *len)
{
    uint8_t *start = cg_pb_write_back_check(m, buf, cap, len);
    if (start != NULL)
        return start;
    start = back_message(m, buf, buf + cap);
    *len = start != NULL ? (size_t)(buf + cap - start) : 0;
    return start;
}

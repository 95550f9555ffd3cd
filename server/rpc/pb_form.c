/* pb_form.c - protobuf-c messages from text fields (pb_form.h). */
#include "rpc/pb_form.h"
#include "rpc/pb_pack.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 256

ProtobufCMessage *cg_pb_form_new(struct cg_arena *arena, const ProtobufCMessageDescriptor *desc)
{
    ProtobufCMessage *m = cg_arena_alloc(arena, desc->sizeof_message);
    if (m != NULL)
        desc->message_init(m);
    return m;
}

static cg_status bad(struct cg_err *err, const char *name, const char *why)
{
    return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s': %s", name, why);
}

static bool parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (s[0] == '\0' || *end != '\0' || errno != 0 || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_u64(const char *s, uint64_t max, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    if (s[0] < '0' || s[0] > '9')
        return false; /* no sign, no space: strtoull would take "-1" */
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0' || errno != 0 || v > max)
        return false;
    *out = v;
    return true;
}

/* The value of one scalar field, parsed as its type, into buf (8 bytes suffice; strings
 * are a pointer into the arena). */
static cg_status scalar(struct cg_arena *arena, const ProtobufCFieldDescriptor *f, const char *name,
                        const char *value, void *buf, struct cg_err *err)
{
    int64_t i;
    uint64_t u;
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        if (!parse_i64(value, INT32_MIN, INT32_MAX, &i))
            return bad(err, name, "not a 32-bit integer");
        *(int32_t *)buf = (int32_t)i;
        return CG_OK;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        if (!parse_i64(value, INT64_MIN, INT64_MAX, &i))
            return bad(err, name, "not a 64-bit integer");
        *(int64_t *)buf = i;
        return CG_OK;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        if (!parse_u64(value, UINT32_MAX, &u))
            return bad(err, name, "not an unsigned 32-bit integer");
        *(uint32_t *)buf = (uint32_t)u;
        return CG_OK;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        if (!parse_u64(value, UINT64_MAX, &u))
            return bad(err, name, "not an unsigned 64-bit integer");
        *(uint64_t *)buf = u;
        return CG_OK;
    case PROTOBUF_C_TYPE_BOOL:
        if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0)
            *(protobuf_c_boolean *)buf = 1;
        else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0)
            *(protobuf_c_boolean *)buf = 0;
        else
            return bad(err, name, "not true or false");
        return CG_OK;
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE: {
        char *end = NULL;
        double d = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || !isfinite(d))
            return bad(err, name, "not a number");
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)buf = (float)d;
        else
            *(double *)buf = d;
        return CG_OK;
    }
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *e = f->descriptor;
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(e, value);
        if (v == NULL && parse_i64(value, INT32_MIN, INT32_MAX, &i))
            v = protobuf_c_enum_descriptor_get_value(e, (int)i);
        if (v == NULL)
            return bad(err, name, "not a value of its enum");
        *(int *)buf = v->value;
        return CG_OK;
    }
    case PROTOBUF_C_TYPE_STRING: {
        char *s = cg_arena_strdup(arena, value);
        if (s == NULL)
            return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        *(char **)buf = s;
        return CG_OK;
    }
    default:
        return bad(err, name, "cannot be set here");
    }
}

/* Marks a singular field set where protobuf-c keeps that (has_ flag, oneof case). */
static void mark_present(ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f)
{
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)((char *)msg + f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0)
        *(protobuf_c_boolean *)((char *)msg + f->quantifier_offset) = 1;
}

/* Appends one element (elem, of the field's size) to a repeated field. */
static cg_status append(struct cg_arena *arena, ProtobufCMessage *msg,
                        const ProtobufCFieldDescriptor *f, const char *name, const void *elem,
                        struct cg_err *err)
{
    size_t *n = (size_t *)((char *)msg + f->quantifier_offset);
    void **arr = (void **)((char *)msg + f->offset);
    size_t size = cg_pb_element_size(f->type);
    if (*n >= CG_PB_FORM_MAX_REPEATED)
        return bad(err, name, "too many elements");
    char *grown = cg_arena_alloc(arena, (*n + 1) * size);
    if (grown == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    if (*n > 0)
        memcpy(grown, *arr, *n * size);
    memcpy(grown + *n * size, elem, size);
    *arr = grown;
    (*n)++;
    return CG_OK;
}

/* The message field f of msg, made when it is not there yet. */
static ProtobufCMessage *sub_message(struct cg_arena *arena, ProtobufCMessage *msg,
                                     const ProtobufCFieldDescriptor *f)
{
    ProtobufCMessage **slot = (ProtobufCMessage **)((char *)msg + f->offset);
    if (*slot == NULL && (*slot = cg_pb_form_new(arena, f->descriptor)) != NULL)
        mark_present(msg, f);
    return *slot;
}

static cg_status set_path(struct cg_arena *arena, ProtobufCMessage *msg, const char *full,
                          const char *path, const char *value, int depth, struct cg_err *err)
{
    if (depth > CG_PB_FORM_MAX_DEPTH)
        return bad(err, full, "nested too deep");
    const char *dot = strchr(path, '.');
    size_t len = dot ? (size_t)(dot - path) : strlen(path);
    char head[NAME_MAX_BYTES];
    if (len == 0 || len >= sizeof head)
        return bad(err, full, "not a field name");
    memcpy(head, path, len);
    head[len] = '\0';
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(msg->descriptor, head);
    if (f == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s': %s has no field '%s'", full,
                          msg->descriptor->short_name, head);
    if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (dot == NULL || f->label == PROTOBUF_C_LABEL_REPEATED)
            return bad(err, full, "a message: name one of its fields (a.b=...)");
        ProtobufCMessage *sub = sub_message(arena, msg, f);
        if (sub == NULL)
            return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        return set_path(arena, sub, full, dot + 1, value, depth + 1, err);
    }
    if (dot != NULL)
        return bad(err, full, "not a message");
    uint64_t buf[1] = {0};
    cg_status st = scalar(arena, f, full, value, buf, err);
    if (st != CG_OK)
        return st;
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        return append(arena, msg, f, full, buf, err);
    memcpy((char *)msg + f->offset, buf, cg_pb_element_size(f->type));
    mark_present(msg, f);
    return CG_OK;
}

cg_status cg_pb_form_set(struct cg_arena *arena, ProtobufCMessage *msg, const char *name,
                         const char *value, struct cg_err *err)
{
    return set_path(arena, msg, name, name, value, 0, err);
}

/* ---------------------------------------------------------------- JSON ------------ */

/* A JSON scalar as the text set_path takes; false for what is not one. */
static bool scalar_text(const json_t *v, char *buf, size_t cap, const char **out)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        *out = json_string_value(v);
        return true;
    case JSON_INTEGER:
        snprintf(buf, cap, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        *out = buf;
        return true;
    case JSON_REAL:
        snprintf(buf, cap, "%.17g", json_real_value(v));
        *out = buf;
        return true;
    case JSON_TRUE:
    case JSON_FALSE:
        *out = json_is_true(v) ? "true" : "false";
        return true;
    default:
        return false;
    }
}

static cg_status set_json(struct cg_arena *arena, ProtobufCMessage *msg, const char *prefix,
                          const json_t *obj, int depth, struct cg_err *err);

/* One member: a scalar, an array of scalars (or of objects for a repeated message field:
 * not taken), or an object for a message field. name is its dotted path. */
static cg_status set_member(struct cg_arena *arena, ProtobufCMessage *root, const char *name,
                            const json_t *v, int depth, struct cg_err *err)
{
    char num[48];
    const char *text;
    if (json_is_null(v))
        return CG_OK; /* as if absent */
    if (json_is_object(v))
        return set_json(arena, root, name, v, depth + 1, err);
    if (json_is_array(v)) {
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!scalar_text(e, num, sizeof num, &text))
                return bad(err, name, "an array of numbers, strings or booleans only");
            cg_status st = cg_pb_form_set(arena, root, name, text, err);
            if (st != CG_OK)
                return st;
        }
        return CG_OK;
    }
    if (!scalar_text(v, num, sizeof num, &text))
        return bad(err, name, "not a value");
    return cg_pb_form_set(arena, root, name, text, err);
}

static cg_status set_json(struct cg_arena *arena, ProtobufCMessage *root, const char *prefix,
                          const json_t *obj, int depth, struct cg_err *err)
{
    if (depth > CG_PB_FORM_MAX_DEPTH)
        return bad(err, prefix[0] ? prefix : "(body)", "nested too deep");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        char name[NAME_MAX_BYTES];
        int n = snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "." : "", key);
        if (n < 0 || (size_t)n >= sizeof name)
            return bad(err, prefix[0] ? prefix : "(body)", "a member name is too long");
        cg_status st = set_member(arena, root, name, v, depth, err);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

cg_status cg_pb_form_json(struct cg_arena *arena, ProtobufCMessage *msg, const char *json,
                          size_t len, struct cg_err *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "the body is not JSON: %s (line %d)", jerr.text,
                          jerr.line);
    cg_status st = json_is_object(root)
                       ? set_json(arena, msg, "", root, 0, err)
                       : cg_err_set(err, CG_INVALID_ARGUMENT, "the body must be a JSON object");
    json_decref(root);
    return st;
}

/* status_details.c - packs the google.rpc.Status of an error reply (status_details.h).
 *
 * Every message is built on the stack or in the call's arena and packed there: nothing
 * outlives the call, nothing is freed by hand. Any.value holds the packed detail, with the
 * type URL prefix "type.googleapis.com/" that every gRPC library's unpack expects.
 */
#include "transport/status_details.h"

#include <stdio.h>
#include <string.h>

#include "core/utf8.h"
#include "google/protobuf/any.pb-c.h"
#include "google/protobuf/duration.pb-c.h"
#include "google/rpc/error_details.pb-c.h"
#include "google/rpc/status.pb-c.h"

#define TYPE_URL_PREFIX "type.googleapis.com/"
#define MAX_DETAILS 3

/* s as valid UTF-8: s itself when it is, else a copy in arena with each invalid byte replaced
 * by '?'. proto3 strings must be UTF-8 (clients refuse to parse the Status otherwise), and a
 * message may hold bytes that are not: an unknown method's path, or a message cut at its
 * buffer's end inside a character. NULL when the arena is full. */
static char *valid_utf8(struct cg_arena *arena, const char *s)
{
    size_t len = strlen(s);
    size_t bad;
    if (cg_utf8_valid(s, len, &bad))
        return (char *)s;
    char *copy = cg_arena_strndup(arena, s, len);
    if (copy == NULL)
        return NULL;
    size_t from = 0;
    while (!cg_utf8_valid(copy + from, len - from, &bad)) {
        copy[from + bad] = '?';
        from += bad + 1;
    }
    return copy;
}

/* Packs msg into arena as an Any. Returns NULL when the arena is full. */
static Google__Protobuf__Any *pack_any(struct cg_arena *arena, const ProtobufCMessage *msg)
{
    Google__Protobuf__Any *any = cg_arena_alloc(arena, sizeof *any);
    size_t size = protobuf_c_message_get_packed_size(msg);
    uint8_t *bytes = cg_arena_alloc(arena, size > 0 ? size : 1);
    char *type_url = cg_arena_sprintf(arena, TYPE_URL_PREFIX "%s", msg->descriptor->name);
    if (any == NULL || bytes == NULL || type_url == NULL)
        return NULL;
    google__protobuf__any__init(any);
    protobuf_c_message_pack(msg, bytes);
    any->type_url = type_url;
    any->value.data = bytes;
    any->value.len = size;
    return any;
}

cg_status cg_status_details_pack(const struct cg_err *err, cg_status st, const char *message,
                                 struct cg_arena *arena, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    /* A copy so that the field read from the message joins the metadata without changing
     * the caller's error; only the site's own facts count when the error is this status's. */
    struct cg_err *facts = cg_arena_alloc(arena, sizeof *facts);
    if (facts == NULL)
        return CG_NOMEM;
    if (err != NULL && err->code == st)
        *facts = *err;
    else
        cg_err_clear(facts);
    facts->code = st;
    if (message == NULL)
        message = cg_status_str(st);
    snprintf(facts->msg, sizeof facts->msg, "%s", message);
    if ((message = valid_utf8(arena, message)) == NULL)
        return CG_NOMEM;
    cg_error_reason reason = cg_err_reason(err, st);
    cg_err_field_from_message(facts);
    const char *field = cg_err_meta_get(facts, "field");
    if (field != NULL && (field = valid_utf8(arena, field)) == NULL)
        return CG_NOMEM;

    Google__Protobuf__Any *details[MAX_DETAILS];
    size_t ndetails = 0;

    Google__Rpc__ErrorInfo info;
    google__rpc__error_info__init(&info);
    info.reason = (char *)cg_error_reason_name(reason);
    info.domain = CG_ERROR_DOMAIN;
    Google__Rpc__ErrorInfo__MetadataEntry entries[CG_ERR_META_MAX];
    Google__Rpc__ErrorInfo__MetadataEntry *entry_ptrs[CG_ERR_META_MAX];
    for (unsigned i = 0; i < facts->nmeta; i++) {
        google__rpc__error_info__metadata_entry__init(&entries[i]);
        entries[i].key = (char *)facts->meta[i].key;
        entries[i].value = valid_utf8(arena, facts->meta_buf + facts->meta[i].offset);
        if (entries[i].value == NULL)
            return CG_NOMEM;
        entry_ptrs[i] = &entries[i];
    }
    info.n_metadata = facts->nmeta;
    info.metadata = entry_ptrs;
    if ((details[ndetails++] = pack_any(arena, &info.base)) == NULL)
        return CG_NOMEM;

    Google__Rpc__BadRequest bad;
    Google__Rpc__BadRequest__FieldViolation violation;
    Google__Rpc__BadRequest__FieldViolation *violations[1] = {&violation};
    if ((st == CG_INVALID_ARGUMENT || st == CG_OUT_OF_RANGE) && field != NULL) {
        google__rpc__bad_request__init(&bad);
        google__rpc__bad_request__field_violation__init(&violation);
        violation.field = (char *)field;
        violation.description = (char *)message;
        bad.n_field_violations = 1;
        bad.field_violations = violations;
        if ((details[ndetails++] = pack_any(arena, &bad.base)) == NULL)
            return CG_NOMEM;
    }

    unsigned retry_ms = cg_error_reason_retry_ms(reason);
    if (retry_ms > 0) {
        Google__Protobuf__Duration delay;
        google__protobuf__duration__init(&delay);
        delay.seconds = retry_ms / 1000;
        delay.nanos = (int32_t)(retry_ms % 1000) * 1000000;
        Google__Rpc__RetryInfo retry;
        google__rpc__retry_info__init(&retry);
        retry.retry_delay = &delay;
        if ((details[ndetails++] = pack_any(arena, &retry.base)) == NULL)
            return CG_NOMEM;
    }

    Google__Rpc__Status status;
    google__rpc__status__init(&status);
    status.code = cg_status_grpc_code(st);
    status.message = (char *)message;
    status.n_details = ndetails;
    status.details = details;
    size_t size = protobuf_c_message_get_packed_size(&status.base);
    uint8_t *bytes = cg_arena_alloc(arena, size > 0 ? size : 1);
    if (bytes == NULL)
        return CG_NOMEM;
    protobuf_c_message_pack(&status.base, bytes);
    *out = bytes;
    *len = size;
    return CG_OK;
}

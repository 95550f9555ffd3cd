/* status.c - names, texts and gRPC codes generated from the CG_STATUS table. */
#include "base/status.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
#define XX(name, code, text, reason) #name,
    CG_STATUS(XX)
#undef XX
};

static const char *const status_texts[] = {
#define XX(name, code, text, reason) text,
    CG_STATUS(XX)
#undef XX
};

static const int status_codes[] = {
#define XX(name, code, text, reason) code,
    CG_STATUS(XX)
#undef XX
};

static const cg_error_reason status_reasons[] = {
#define XX(name, code, text, reason) CG_ERR_##reason,
    CG_STATUS(XX)
#undef XX
};

static const char *const reason_names[] = {
#define XX(name, retry_ms) #name,
    CG_ERROR_REASON(XX)
#undef XX
};

static const unsigned reason_retry_ms[] = {
#define XX(name, retry_ms) retry_ms,
    CG_ERROR_REASON(XX)
#undef XX
};

static const char *const grpc_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

static int in_range(cg_status st)
{
    return (int)st >= 0 && st < CG__STATUS_COUNT;
}

const char *cg_status_name(cg_status st)
{
    return in_range(st) ? status_names[st] : "UNKNOWN_STATUS";
}

const char *cg_status_str(cg_status st)
{
    return in_range(st) ? status_texts[st] : "unknown status";
}

int cg_status_grpc_code(cg_status st)
{
    return in_range(st) ? status_codes[st] : 2;
}

const char *cg_grpc_code_name(int grpc_code)
{
    if (grpc_code < 0 || grpc_code > 16)
        return "UNKNOWN";
    return grpc_names[grpc_code];
}

static void reset_details(struct cg_err *err)
{
    err->reason = CG_ERR_NONE;
    err->nmeta = 0;
    err->meta_used = 0;
}

static void set_message(struct cg_err *err, const char *fmt, va_list ap)
{
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    if (n < 0)
        err->msg[0] = '\0';
}

cg_status cg_err_set(struct cg_err *err, cg_status code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    reset_details(err);
    va_list ap;
    va_start(ap, fmt);
    set_message(err, fmt, ap);
    va_end(ap);
    return code;
}

cg_status cg_err_setr(struct cg_err *err, cg_status code, cg_error_reason reason, const char *fmt,
                      ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    reset_details(err);
    err->reason = reason;
    va_list ap;
    va_start(ap, fmt);
    set_message(err, fmt, ap);
    va_end(ap);
    return code;
}

/* Length of value cut to at most max bytes without splitting a UTF-8 sequence. */
static size_t cut_utf8(const char *value, size_t max)
{
    size_t len = strnlen(value, max + 1);
    if (len <= max)
        return len;
    len = max;
    while (len > 0 && ((unsigned char)value[len] & 0xC0) == 0x80)
        len--;
    return len;
}

static void remove_meta(struct cg_err *err, const char *key)
{
    for (unsigned i = 0; i < err->nmeta; i++) {
        if (strcmp(err->meta[i].key, key) != 0)
            continue;
        /* The value's bytes stay used in meta_buf: replacing a key is rare and the buffer is
         * sized for every entry at its cap's average. */
        memmove(&err->meta[i], &err->meta[i + 1], (err->nmeta - i - 1) * sizeof err->meta[0]);
        err->nmeta--;
        return;
    }
}

void cg_err_meta(struct cg_err *err, const char *key, const char *value)
{
    if (err == NULL || key == NULL || value == NULL)
        return;
    remove_meta(err, key);
    if (err->nmeta >= CG_ERR_META_MAX || err->meta_used >= CG_ERR_META_BYTES)
        return;
    size_t room = CG_ERR_META_BYTES - err->meta_used - 1; /* the NUL */
    size_t max = room < CG_ERR_META_VALUE_MAX ? room : CG_ERR_META_VALUE_MAX;
    size_t len = cut_utf8(value, max);
    if (len == 0 && value[0] != '\0')
        return; /* no room for any of it */
    struct cg_err_meta *m = &err->meta[err->nmeta++];
    m->key = key;
    m->offset = err->meta_used;
    m->len = (unsigned short)len;
    memcpy(err->meta_buf + m->offset, value, len);
    err->meta_buf[m->offset + len] = '\0';
    err->meta_used = (unsigned short)(err->meta_used + len + 1);
}

void cg_err_metaf(struct cg_err *err, const char *key, const char *fmt, ...)
{
    if (err == NULL)
        return;
    char value[CG_ERR_META_VALUE_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    cg_err_meta(err, key, value);
}

void cg_err_meta_i64(struct cg_err *err, const char *key, long long value)
{
    cg_err_metaf(err, key, "%lld", value);
}

const char *cg_err_meta_get(const struct cg_err *err, const char *key)
{
    if (err == NULL)
        return NULL;
    for (unsigned i = 0; i < err->nmeta; i++)
        if (strcmp(err->meta[i].key, key) == 0)
            return err->meta_buf + err->meta[i].offset;
    return NULL;
}

void cg_err_clear(struct cg_err *err)
{
    if (err == NULL)
        return;
    err->code = CG_OK;
    err->msg[0] = '\0';
    reset_details(err);
}

const char *cg_err_text(const struct cg_err *err)
{
    if (err->msg[0] != '\0')
        return err->msg;
    return cg_status_str(err->code);
}

cg_error_reason cg_err_reason(const struct cg_err *err, cg_status st)
{
    if (err != NULL && err->code == st && err->reason > CG_ERR_NONE &&
        err->reason < CG__ERR_REASON_COUNT)
        return err->reason;
    return in_range(st) ? status_reasons[st] : CG_ERR_INTERNAL;
}

const char *cg_error_reason_name(cg_error_reason reason)
{
    if ((int)reason < 0 || reason >= CG__ERR_REASON_COUNT)
        return "NONE";
    return reason_names[reason];
}

unsigned cg_error_reason_retry_ms(cg_error_reason reason)
{
    if ((int)reason < 0 || reason >= CG__ERR_REASON_COUNT)
        return 0;
    return reason_retry_ms[reason];
}

static bool is_path_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' ||
           ch == '[' || ch == ']';
}

void cg_err_field_from_message(struct cg_err *err)
{
    if (err == NULL || cg_err_meta_get(err, "field") != NULL)
        return;
    char field[CG_ERR_MSG_MAX];
    const char *msg = err->msg;
    static const char quoted[] = "field '";
    const char *start = strstr(msg, quoted);
    if (start != NULL) {
        start += sizeof quoted - 1;
        const char *end = strchr(start, '\'');
        if (end == NULL || end == start)
            return;
        size_t len = (size_t)(end - start);
        memcpy(field, start, len);
        field[len] = '\0';
        cg_err_meta(err, "field", field);
        return;
    }
    if (err->code != CG_INVALID_ARGUMENT && err->code != CG_OUT_OF_RANGE &&
        err->code != CG_NOT_FOUND && err->code != CG_ALREADY_EXISTS)
        return;
    size_t len = 0;
    while (is_path_char(msg[len]))
        len++;
    if (len == 0 || msg[len] != ':' || msg[len + 1] != ' ')
        return;
    memcpy(field, msg, len);
    field[len] = '\0';
    cg_err_meta(err, "field", field);
}

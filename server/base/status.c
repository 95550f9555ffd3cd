/* status.c - names, texts and gRPC codes generated from the CG_STATUS table. */
#include "base/status.h"

#include <stdio.h>
#include <string.h>

static const char *const status_names[] = {
#define XX(name, code, text) #name,
    CG_STATUS(XX)
#undef XX
};

static const char *const status_texts[] = {
#define XX(name, code, text) text,
    CG_STATUS(XX)
#undef XX
};

static const int status_codes[] = {
#define XX(name, code, text) code,
    CG_STATUS(XX)
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

cg_status cg_err_set(struct cg_err *err, cg_status code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    return code;
}

void cg_err_clear(struct cg_err *err)
{
    if (err == NULL)
        return;
    err->code = CG_OK;
    err->msg[0] = '\0';
}

const char *cg_err_text(const struct cg_err *err)
{
    if (err->msg[0] != '\0')
        return err->msg;
    return cg_status_str(err->code);
}

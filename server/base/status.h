/* status.h - the one table of status codes, their names, texts and gRPC codes.
 *
 * Every fallible function in ctxguard returns a cg_status and may fill a
 * struct cg_err whose message a client will see (it names the field and the
 * problem; SQL text and SQLSTATEs never go there, only to the log).
 * The gRPC code numbers are the stable ones from the gRPC protocol
 * (doc/statuscodes.md), so this header needs no gRPC include.
 */
#ifndef CG_BASE_STATUS_H
#define CG_BASE_STATUS_H

#include <stdarg.h>
#include <stdbool.h>

#define CG_MUST_CHECK __attribute__((warn_unused_result))
#define CG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* XX(name, grpc_code, text, default error reason (CG_ERROR_REASON below)) */
#define CG_STATUS(XX)                                                                              \
    XX(OK, 0, "ok", NONE)                                                                          \
    XX(CANCELLED, 1, "cancelled by the caller", CANCELLED)                                         \
    XX(UNKNOWN, 2, "unknown error", INTERNAL)                                                      \
    XX(INVALID_ARGUMENT, 3, "invalid argument", INVALID_ARGUMENT)                                  \
    XX(DEADLINE_EXCEEDED, 4, "deadline exceeded", DEADLINE_EXCEEDED)                               \
    XX(NOT_FOUND, 5, "not found", NOT_FOUND)                                                       \
    XX(ALREADY_EXISTS, 6, "already exists", ALREADY_EXISTS)                                        \
    XX(PERMISSION_DENIED, 7, "permission denied", PERMISSION_DENIED)                               \
    XX(RESOURCE_EXHAUSTED, 8, "resource exhausted", RESOURCE_EXHAUSTED)                            \
    XX(FAILED_PRECONDITION, 9, "failed precondition", FAILED_PRECONDITION)                         \
    XX(ABORTED, 10, "aborted", CONFLICT)                                                           \
    XX(OUT_OF_RANGE, 11, "out of range", OUT_OF_RANGE)                                             \
    XX(UNIMPLEMENTED, 12, "not implemented", UNIMPLEMENTED)                                        \
    XX(INTERNAL, 13, "internal error", INTERNAL)                                                   \
    XX(UNAVAILABLE, 14, "unavailable", STORE_UNAVAILABLE)                                          \
    XX(DATA_LOSS, 15, "data loss", INTERNAL)                                                       \
    XX(UNAUTHENTICATED, 16, "unauthenticated", UNAUTHENTICATED)                                    \
    /* internal codes: never leave the process as such, mapped to a gRPC code */                   \
    XX(NOMEM, 8, "out of memory", RESOURCE_EXHAUSTED)                                              \
    XX(CONFIG, 3, "invalid configuration", INVALID_ARGUMENT)                                       \
    XX(IO, 13, "input/output error", INTERNAL)

/* The machine-readable reason of an error (google.rpc.ErrorInfo.reason, proto/ctxguard/v1/
 * errors.proto ErrorReason: the same names in the same order, so CG_ERR_x == ERROR_REASON_x).
 * XX(name, retry_after_ms): retry_after_ms > 0 puts a google.rpc.RetryInfo with that delay in
 * the error's details (retrying later helps); 0: none. A reason named like a gRPC code is the
 * fallback when nothing more precise is known. */
#define CG_ERROR_REASON(XX)                                                                        \
    XX(NONE, 0)                                                                                    \
    XX(BUDGET_EXHAUSTED, 0)                                                                        \
    XX(BUDGET_NOT_FOUND, 0)                                                                        \
    XX(SCOPE_NOT_FOUND, 0)                                                                         \
    XX(SCOPE_CLOSED, 0)                                                                            \
    XX(RESERVATION_NOT_FOUND, 0)                                                                   \
    XX(RESERVATION_EXPIRED, 0)                                                                     \
    XX(RESERVATION_SETTLED, 0)                                                                     \
    XX(APPROVAL_NOT_FOUND, 0)                                                                      \
    XX(APPROVAL_DENIED, 0)                                                                         \
    XX(APPROVAL_RESOLVED, 0)                                                                       \
    XX(ARTIFACT_NOT_FOUND, 0)                                                                      \
    XX(SESSION_NOT_FOUND, 0)                                                                       \
    XX(TENANT_NOT_FOUND, 0)                                                                        \
    XX(API_KEY_NOT_FOUND, 0)                                                                       \
    XX(SERVICE_NOT_FOUND, 0)                                                                       \
    XX(NOT_FOUND, 0)                                                                               \
    XX(INVALID_ARGUMENT, 0)                                                                        \
    XX(OUT_OF_RANGE, 0)                                                                            \
    XX(MESSAGE_TOO_LARGE, 0)                                                                       \
    XX(ALREADY_EXISTS, 0)                                                                          \
    XX(CONFLICT, 100)                                                                              \
    XX(VERSION_MISMATCH, 0)                                                                        \
    XX(FAILED_PRECONDITION, 0)                                                                     \
    XX(UNAUTHENTICATED, 0)                                                                         \
    XX(PERMISSION_DENIED, 0)                                                                       \
    XX(STORE_UNAVAILABLE, 1000)                                                                    \
    XX(LLM_UNAVAILABLE, 1000)                                                                      \
    XX(LLM_NOT_CONFIGURED, 0)                                                                      \
    XX(TOKENIZER_NOT_LOADED, 0)                                                                    \
    XX(SERVER_OVERLOADED, 1000)                                                                    \
    XX(SERVER_SHUTTING_DOWN, 1000)                                                                 \
    XX(RESOURCE_EXHAUSTED, 0)                                                                      \
    XX(DEADLINE_EXCEEDED, 0)                                                                       \
    XX(CANCELLED, 0)                                                                               \
    XX(UNIMPLEMENTED, 0)                                                                           \
    XX(INTERNAL, 0)                                                                                \
    XX(IDEMPOTENCY_KEY_REUSED, 0)                                                                  \
    XX(ROLE_NOT_ALLOWED, 0)                                                                        \
    XX(SELF_APPROVAL, 0)                                                                           \
    XX(API_KEY_EXPIRED, 0)                                                                         \
    XX(CALL_TOKENS_ABOVE_LIMIT, 0)                                                                 \
    XX(SCOPE_REQUIRED, 0)

typedef enum {
#define CG_ERROR_REASON_ENUM(name, retry_ms) CG_ERR_##name,
    CG_ERROR_REASON(CG_ERROR_REASON_ENUM)
#undef CG_ERROR_REASON_ENUM
        CG__ERR_REASON_COUNT
} cg_error_reason;

typedef enum {
#define CG_STATUS_ENUM(name, code, text, reason) CG_##name,
    CG_STATUS(CG_STATUS_ENUM)
#undef CG_STATUS_ENUM
        CG__STATUS_COUNT
} cg_status;

#define CG_ERR_MSG_MAX 160
/* Bounds of an error's metadata (what ErrorInfo.metadata carries): at most CG_ERR_META_MAX
 * entries, each value cut to CG_ERR_META_VALUE_MAX bytes, all values together within
 * CG_ERR_META_BYTES (a value is cut to the room left; dropped when none is left). A struct
 * cg_err is copied whole (call->err = serr): whoever declares one clears or sets it first. */
#define CG_ERR_META_MAX 8
#define CG_ERR_META_VALUE_MAX 256
#define CG_ERR_META_BYTES 1024

/* One metadata entry: key is a static string (borrowed, never freed), the value lies at
 * meta_buf + offset, len bytes, NUL-terminated. */
struct cg_err_meta {
    const char *key;
    unsigned short offset;
    unsigned short len;
};

/* An error: a code, a fixed message buffer and what a program needs to act on it (a reason
 * and a few key/value facts). Filling it never allocates. */
struct cg_err {
    cg_status code;
    char msg[CG_ERR_MSG_MAX];
    cg_error_reason reason; /* CG_ERR_NONE: the code's default (cg_err_reason) */
    unsigned char nmeta;
    unsigned short meta_used; /* bytes of meta_buf in use */
    struct cg_err_meta meta[CG_ERR_META_MAX];
    char meta_buf[CG_ERR_META_BYTES];
};

/* Name of a status ("INVALID_ARGUMENT"); "UNKNOWN_STATUS" for values out of range. */
const char *cg_status_name(cg_status st);

/* Default text of a status ("invalid argument"). */
const char *cg_status_str(cg_status st);

/* The gRPC status code a status is answered with (0..16). */
int cg_status_grpc_code(cg_status st);

/* Canonical gRPC name of a gRPC code number ("NOT_FOUND"); "UNKNOWN" outside 0..16. */
const char *cg_grpc_code_name(int grpc_code);

/* Sets err (when not NULL) to code and a formatted message, truncated to fit, with no reason
 * and no metadata (what an earlier error left is dropped).
 * Returns code, so that `return cg_err_set(err, CG_NOT_FOUND, "...")` reads well. */
cg_status cg_err_set(struct cg_err *err, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);

/* cg_err_set with a reason. Returns code. */
cg_status cg_err_setr(struct cg_err *err, cg_status code, cg_error_reason reason, const char *fmt,
                      ...) CG_PRINTF(4, 5);

/* Adds key = value to err's metadata (err may be NULL). key must be a static string; value is
 * copied, cut to CG_ERR_META_VALUE_MAX bytes (at a UTF-8 boundary). A key already present is
 * replaced. Dropped when err has CG_ERR_META_MAX entries or no room left. Never allocates. */
void cg_err_meta(struct cg_err *err, const char *key, const char *value);

/* cg_err_meta with a formatted value. */
void cg_err_metaf(struct cg_err *err, const char *key, const char *fmt, ...) CG_PRINTF(3, 4);

/* cg_err_meta with a decimal integer. */
void cg_err_meta_i64(struct cg_err *err, const char *key, long long value);

/* The value of key in err's metadata (borrowed, valid while err is unchanged), or NULL. */
const char *cg_err_meta_get(const struct cg_err *err, const char *key);

/* Clears err to CG_OK, an empty message, no reason and no metadata. err may be NULL. */
void cg_err_clear(struct cg_err *err);

/* The message of err, or the status text when the message is empty. */
const char *cg_err_text(const struct cg_err *err);

/* The reason an error answered with status st carries: err's own when err is not NULL, its
 * code is st and it set one; otherwise st's default (the CG_STATUS table). */
cg_error_reason cg_err_reason(const struct cg_err *err, cg_status st);

/* The name of a reason ("BUDGET_EXHAUSTED"), as in ErrorInfo.reason; "NONE" out of range. */
const char *cg_error_reason_name(cg_error_reason reason);

/* The delay after which retrying helps for a reason, in ms; 0: retrying does not help. */
unsigned cg_error_reason_retry_ms(cg_error_reason reason);

/* Fills err's metadata "field" (when absent) from its message, when the message names the
 * field in the house forms: "field 'x' ..." (any code), or "x: ..." with x a field path of
 * lowercase letters, digits, '_', '.', '[', ']' (INVALID_ARGUMENT, OUT_OF_RANGE, NOT_FOUND
 * and ALREADY_EXISTS only: other messages use that form for other things). */
void cg_err_field_from_message(struct cg_err *err);

#endif

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

#define CG_MUST_CHECK __attribute__((warn_unused_result))
#define CG_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* XX(name, grpc_code, text) */
#define CG_STATUS(XX)                                                                              \
    XX(OK, 0, "ok")                                                                                \
    XX(CANCELLED, 1, "cancelled by the caller")                                                    \
    XX(UNKNOWN, 2, "unknown error")                                                                \
    XX(INVALID_ARGUMENT, 3, "invalid argument")                                                    \
    XX(DEADLINE_EXCEEDED, 4, "deadline exceeded")                                                  \
    XX(NOT_FOUND, 5, "not found")                                                                  \
    XX(ALREADY_EXISTS, 6, "already exists")                                                        \
    XX(PERMISSION_DENIED, 7, "permission denied")                                                  \
    XX(RESOURCE_EXHAUSTED, 8, "resource exhausted")                                                \
    XX(FAILED_PRECONDITION, 9, "failed precondition")                                              \
    XX(ABORTED, 10, "aborted")                                                                     \
    XX(OUT_OF_RANGE, 11, "out of range")                                                           \
    XX(UNIMPLEMENTED, 12, "not implemented")                                                       \
    XX(INTERNAL, 13, "internal error")                                                             \
    XX(UNAVAILABLE, 14, "unavailable")                                                             \
    XX(DATA_LOSS, 15, "data loss")                                                                 \
    XX(UNAUTHENTICATED, 16, "unauthenticated")                                                     \
    /* internal codes: never leave the process as such, mapped to a gRPC code */                   \
    XX(NOMEM, 8, "out of memory")                                                                  \
    XX(CONFIG, 3, "invalid configuration")                                                         \
    XX(IO, 13, "input/output error")                                                               \
    /* a handler handed its call on; answered later (rpc.h cg_rpc_complete) */                     \
    XX(DEFERRED, 13, "deferred")

typedef enum {
#define CG_STATUS_ENUM(name, code, text) CG_##name,
    CG_STATUS(CG_STATUS_ENUM)
#undef CG_STATUS_ENUM
        CG__STATUS_COUNT
} cg_status;

#define CG_ERR_MSG_MAX 160

/* An error: a code and a fixed message buffer. Filling it never allocates. */
struct cg_err {
    cg_status code;
    char msg[CG_ERR_MSG_MAX];
};

/* Name of a status ("INVALID_ARGUMENT"); "UNKNOWN_STATUS" for values out of range. */
const char *cg_status_name(cg_status st);

/* Default text of a status ("invalid argument"). */
const char *cg_status_str(cg_status st);

/* The gRPC status code a status is answered with (0..16). */
int cg_status_grpc_code(cg_status st);

/* Canonical gRPC name of a gRPC code number ("NOT_FOUND"); "UNKNOWN" outside 0..16. */
const char *cg_grpc_code_name(int grpc_code);

/* Sets err (when not NULL) to code and a formatted message, truncated to fit.
 * Returns code, so that `return cg_err_set(err, CG_NOT_FOUND, "...")` reads well. */
cg_status cg_err_set(struct cg_err *err, cg_status code, const char *fmt, ...) CG_PRINTF(3, 4);

/* Clears err to CG_OK and an empty message. err may be NULL. */
void cg_err_clear(struct cg_err *err);

/* The message of err, or the status text when the message is empty. */
const char *cg_err_text(const struct cg_err *err);

#endif

/* status_details.h - the google.rpc.Status an error reply carries in its trailing metadata
 * (`grpc-status-details-bin`), built from the status, its message and the struct cg_err.
 *
 * No gRPC header: the bytes are handed to server.c, which attaches them. Kept apart so that
 * the packing can be tested without a server (tests/unit/test_status_details.c).
 */
#ifndef CG_TRANSPORT_STATUS_DETAILS_H
#define CG_TRANSPORT_STATUS_DETAILS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/arena.h"
#include "base/status.h"

/* The domain of every ErrorInfo this server sends. */
#define CG_ERROR_DOMAIN "ctxguard"

/* Packs a google.rpc.Status {code: st's gRPC code, message, details} into arena, where
 * details are:
 *   - always an ErrorInfo {reason: cg_err_reason(err, st) by name, domain "ctxguard",
 *     metadata: err's (when err->code is st), plus "field" read from the message when the
 *     site named none (cg_err_field_from_message)};
 *   - a BadRequest with one FieldViolation {field, message} for INVALID_ARGUMENT and
 *     OUT_OF_RANGE when a field is known;
 *   - a RetryInfo {retry_delay} when the reason has a retry delay.
 * err may be NULL or hold another code (then only the defaults of st apply); it is not
 * changed. Strings that are not valid UTF-8 go out with '?' for each invalid byte. message is what
 * grpc-message says (NULL: st's text). st must not be CG_OK. On success *out
 * (in arena) and *len are set; CG_NOMEM when the arena is full. Thread-compatible (touches only its
 * arguments). */
cg_status cg_status_details_pack(const struct cg_err *err, cg_status st, const char *message,
                                 struct cg_arena *arena, uint8_t **out, size_t *len) CG_MUST_CHECK;

#endif

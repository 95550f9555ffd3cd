/* pb_json.h - any protobuf-c message as JSON, driven by its descriptor (for ctxguardctl --json
 * and for the JSON API on the HTTP listener, transport/http_api.c).
 *
 * Mapping: proto3 JSON with the proto field names (snake_case) and every field printed,
 * defaults included, so that a reader never has to know the defaults:
 * - integers are JSON numbers (64-bit ones too; they are exact up to 2^53 in most readers);
 * - enums are their value names ("KIND_TENANT"), or the number when the name is unknown;
 * - bytes are base64 strings; strings are escaped, invalid UTF-8 becomes U+FFFD;
 * - an unset message field is null; a oneof prints only its set member;
 * - NaN and infinities are the strings "NaN", "Infinity", "-Infinity".
 * Output is one line, no trailing newline. Functions are thread-safe (no shared state).
 */
#ifndef CG_RPC_PB_JSON_H
#define CG_RPC_PB_JSON_H

#include <stddef.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

#include "base/status.h"

/* Deeper nesting than this is refused rather than followed. */
#define CG_JSON_MAX_DEPTH 64

/* Writes msg as a JSON object to out. Returns CG_OK; CG_IO when writing failed;
 * CG_INVALID_ARGUMENT when msg nests deeper than CG_JSON_MAX_DEPTH (out then holds a
 * partial object). msg is borrowed. */
CG_MUST_CHECK cg_status cg_json_write_message(FILE *out, const ProtobufCMessage *msg);

/* Writes len bytes of s as a quoted JSON string (escaped; invalid UTF-8 becomes U+FFFD).
 * s may be NULL when len is 0. Returns CG_OK or CG_IO. */
CG_MUST_CHECK cg_status cg_json_write_string(FILE *out, const char *s, size_t len);

#endif

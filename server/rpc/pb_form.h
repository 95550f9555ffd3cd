/* pb_form.h - a protobuf-c message built from text fields, driven by its descriptor: the
 * query arguments of an HTTP request (name=value; nested fields dotted, scope.session_id=s1;
 * a repeated field repeated) or the members of a JSON object (a nested object for a message
 * field, an array for a repeated one). For the JSON API (transport/http_api.c): the message
 * is then encoded and handed to the RPC's own decoder and handler, which check it as they
 * check any gRPC request, so this only has to get the types right.
 *
 * Values: integers in decimal within their type's range; bool true/false/1/0; enums by value
 * name (USAGE_RESOLUTION_HOUR) or number; double decimal; string as given. bytes fields are
 * not settable. Everything lives in the arena. Errors are CG_INVALID_ARGUMENT naming the
 * field as the request gave it. Thread-safe (no shared state).
 */
#ifndef CG_RPC_PB_FORM_H
#define CG_RPC_PB_FORM_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

#include "base/arena.h"
#include "base/status.h"

#define CG_PB_FORM_MAX_DEPTH 8       /* nested messages a name or object may reach */
#define CG_PB_FORM_MAX_REPEATED 1000 /* elements of one repeated field */

/* A new message of desc (its defaults) in arena; NULL when the arena is full. */
ProtobufCMessage *cg_pb_form_new(struct cg_arena *arena, const ProtobufCMessageDescriptor *desc);

/* Sets the field `name` (dotted for nested messages) of msg from value; appends to a
 * repeated field. */
cg_status cg_pb_form_set(struct cg_arena *arena, ProtobufCMessage *msg, const char *name,
                         const char *value, struct cg_err *err) CG_MUST_CHECK;

/* Sets the fields of msg from a JSON object (json, len bytes). */
cg_status cg_pb_form_json(struct cg_arena *arena, ProtobufCMessage *msg, const char *json,
                          size_t len, struct cg_err *err) CG_MUST_CHECK;

#endif

/* reflection.h - the gRPC server reflection service (grpc.reflection.v1 and v1alpha).
 *
 * Serves the descriptors compiled into the binary (protoc --include_imports, embedded at
 * build time as cg_descriptor_set) so that generic tools can list the services and call
 * them. Built once at start-up; immutable and thread-safe afterwards.
 */
#ifndef CG_RPC_REFLECTION_H
#define CG_RPC_REFLECTION_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "rpc/rpc.h"

/* The embedded FileDescriptorSet (generated: build/gen/descriptor_set.c). */
extern const unsigned char cg_descriptor_set[];
extern const unsigned long cg_descriptor_set_len;

/* Parses a serialized FileDescriptorSet and indexes its files and symbols; `services`
 * (n names, borrowed for the lifetime of the object) are what ListServices answers.
 * NULL with err filled when the set cannot be parsed. */
struct cg_reflection *cg_reflection_new(const uint8_t *set, size_t len, const char *const *services,
                                        size_t n, struct cg_err *err);

/* Frees it. NULL is a no-op. */
void cg_reflection_free(struct cg_reflection *r);

/* Handler for ServerReflectionInfo (both v1 and v1alpha: their messages are identical on
 * the wire, so the v1 descriptors serve both): one response per request. */
cg_status cg_rpc_reflection_info(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                 const ProtobufCMessage *request, ProtobufCMessage **response);

#endif

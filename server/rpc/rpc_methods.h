/* rpc_methods.h - the method table's data, generated at build time (build/gen/rpc_methods_gen.c,
 * by cmake/gen_methods.py) from the .proto files: each ctxguard RPC's rule is its
 * (ctxguard.v1.rule) option (proto/ctxguard/v1/options.proto). Internal to rpc/: everyone
 * else reads the table through rpc.h (cg_rpc_methods, cg_rpc_find, cg_rpc_services). */
#ifndef CG_RPC_RPC_METHODS_H
#define CG_RPC_RPC_METHODS_H

#include "rpc/rpc.h"

/* Every RPC the server answers, health and reflection first, then the services of
 * proto/ctxguard/v1 in the order of their files and declarations. */
extern const struct cg_rpc_method cg_rpc_method_table[];
extern const size_t cg_rpc_method_count;

/* The distinct services of the table, in table order (build/gen/rpc_services_gen.c, a file
 * of their own: it names no handler). */
extern const char *const cg_rpc_service_names[];
extern const size_t cg_rpc_service_count;

#endif

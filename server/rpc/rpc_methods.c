/* rpc_methods.c - lookups in the method table: every RPC the server answers, who may call it
 * (the one role table: README "Roles and keys") and its handler. The table itself is
 * generated from the .proto files at build time (rpc_methods.h).
 */
#include "rpc/rpc_methods.h"

#include <string.h>

const struct cg_rpc_method *cg_rpc_methods(size_t *count)
{
    *count = cg_rpc_method_count;
    return cg_rpc_method_table;
}

const struct cg_rpc_method *cg_rpc_find(const char *path)
{
    for (size_t i = 0; i < cg_rpc_method_count; i++)
        if (strcmp(cg_rpc_method_table[i].path, path) == 0)
            return &cg_rpc_method_table[i];
    return NULL;
}

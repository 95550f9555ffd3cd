/* rpc_services.c - the distinct services of the method table, for reflection and the Health
 * service. The names are generated into a file of their own (build/gen/rpc_services_gen.c):
 * the table's file names every handler, the Health ones included, so reading the names
 * through it would be a circle (rpc_health.c -> the table -> rpc_health.c). */
#include "rpc/rpc_methods.h"

const char *const *cg_rpc_services(size_t *count)
{
    *count = cg_rpc_service_count;
    return cg_rpc_service_names;
}

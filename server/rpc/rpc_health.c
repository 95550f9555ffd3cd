/* rpc_health.c - grpc.health.v1.Health: Check and Watch over the shared serving state.
 *
 * The server is SERVING when PostgreSQL answered the last probe and it is not draining.
 * Service names: "" (the whole server) and every service of the method table answer the
 * same state; "liveness" answers SERVING while the process runs and is not draining, even
 * when PostgreSQL is down (for a Kubernetes liveness probe: a database outage must not
 * restart every replica); any other name is NOT_FOUND for Check and SERVICE_UNKNOWN for
 * Watch, as the health protocol says.
 */
#include "rpc/rpc_handlers.h"

#include <string.h>

#include "grpc/health/v1/health.pb-c.h"

#define LIVENESS "liveness"

static bool known_service(const char *name)
{
    if (name == NULL || name[0] == '\0' || strcmp(name, LIVENESS) == 0)
        return true;
    size_t n;
    const char *const *services = cg_rpc_services(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(services[i], name) == 0)
            return true;
    return false;
}

static Grpc__Health__V1__HealthCheckResponse *
new_response(struct cg_rpc_call *call, Grpc__Health__V1__HealthCheckResponse__ServingStatus s)
{
    Grpc__Health__V1__HealthCheckResponse *r = cg_arena_alloc(call->arena, sizeof *r);
    if (r == NULL)
        return NULL;
    grpc__health__v1__health_check_response__init(r);
    r->status = s;
    return r;
}

static Grpc__Health__V1__HealthCheckResponse__ServingStatus current(const struct cg_rpc_env *env,
                                                                    const char *service)
{
    bool up = strcmp(service, LIVENESS) == 0 ? !atomic_load(&env->svc.health->draining)
                                             : cg_health_is_serving(env->svc.health);
    return up ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
              : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
}

cg_status cg_rpc_health_check(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Grpc__Health__V1__HealthCheckRequest *req =
        (const Grpc__Health__V1__HealthCheckRequest *)request;
    if (!known_service(req->service))
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_SERVICE_NOT_FOUND,
                           "unknown service '%.80s'", req->service);
    Grpc__Health__V1__HealthCheckResponse *r = new_response(call, current(env, req->service));
    if (r == NULL)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    *response = &r->base;
    return CG_OK;
}

cg_status cg_rpc_health_watch(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                              ProtobufCMessage **response, bool *finished)
{
    const Grpc__Health__V1__HealthCheckRequest *req =
        (const Grpc__Health__V1__HealthCheckRequest *)request;
    unsigned *version = &stream->version;
    *response = NULL;
    *finished = false;
    /* *version holds 1 + the serving state last sent (0: nothing sent yet), so an update
     * goes out only when what the watcher sees would change. */
    Grpc__Health__V1__HealthCheckResponse__ServingStatus s =
        known_service(req->service)
            ? current(env, req->service)
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVICE_UNKNOWN;
    if (*version == (unsigned)s + 1)
        return CG_OK;
    Grpc__Health__V1__HealthCheckResponse *r = new_response(call, s);
    if (r == NULL)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    *version = (unsigned)s + 1;
    *response = &r->base;
    return CG_OK;
}

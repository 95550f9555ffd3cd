/* health.h - the PostgreSQL probe behind the serving state (base/health.h): what the monitor
 * thread runs every health_interval_ms. The Health RPCs that read the state are
 * rpc/rpc_health.c.
 */
#ifndef CG_SERVICE_HEALTH_H
#define CG_SERVICE_HEALTH_H

#include <stdbool.h>

#include "service/service.h"

/* Pings PostgreSQL through env->store (bounded by the store's deadline, which the caller
 * sets) and records the result in env->health, logging a change once. Returns whether the
 * serving state changed (the caller then wakes the Health.Watch streams). Not thread-safe
 * for one env: env->store is the calling thread's. */
bool cg_health_probe(const struct cg_svc_env *env);

#endif

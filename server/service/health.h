/* health.h - the PostgreSQL probe behind the serving state (base/health.h): what the health
 * thread (transport/server.c) runs every health_interval_ms on a connection of its own. The
 * Health RPCs that read the state are rpc/rpc_health.c.
 */
#ifndef CG_SERVICE_HEALTH_H
#define CG_SERVICE_HEALTH_H

#include <stdbool.h>

#include "service/service.h"

/* Pings PostgreSQL through env->store, giving it timeout_ms to answer (strictly: no answer
 * by then counts as down and drops the connection), and records the result in env->health,
 * logging a change once. Leaves the store without a deadline. Returns whether the serving
 * state changed (the caller then wakes the Health.Watch streams). Not thread-safe for one
 * env: env->store is the calling thread's. */
bool cg_health_probe(const struct cg_svc_env *env, int timeout_ms);

#endif

/* health.c - the PostgreSQL probe (health.h): one ping, its result in the serving state. */
#include "service/health.h"

#include "base/log.h"

bool cg_health_probe(const struct cg_svc_env *env)
{
    struct cg_err err;
    cg_err_clear(&err);
    cg_status st = cg_store_ping(env->store, &err);
    bool changed = cg_health_set_store_ok(env->health, st == CG_OK);
    if (changed) {
        if (st == CG_OK)
            cg_log(CG_LOG_INFO, "health", NULL, "PostgreSQL reachable: SERVING");
        else
            cg_log(CG_LOG_WARN, "health", NULL, "PostgreSQL unreachable: NOT_SERVING (%s)",
                   cg_err_text(&err));
    }
    return changed;
}

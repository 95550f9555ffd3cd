/* health.c - the PostgreSQL probe (health.h): one ping with a strict deadline, its result in
 * the serving state. */
#include "service/health.h"

#include "base/clock.h"
#include "base/log.h"

bool cg_health_probe(const struct cg_svc_env *env, int timeout_ms)
{
    struct cg_err err;
    cg_err_clear(&err);
    /* The ping's deadline is strict (store.h cg_store_ping): a server that accepts the
     * connection but does not answer (frozen: its sockets stay open) is down after
     * timeout_ms, not after the statement timeout. */
    cg_store_set_deadline(env->store, cg_mono_ms() + timeout_ms);
    cg_status st = cg_store_ping(env->store, &err);
    cg_store_set_deadline(env->store, 0);
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

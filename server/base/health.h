/* health.h - the serving state shared by the transport, the health service and the
 * PostgreSQL probe. Lock-free: readers see a consistent serving flag and a version
 * that grows on every change, so watchers know when to send an update.
 * Thread-safe.
 */
#ifndef CG_BASE_HEALTH_H
#define CG_BASE_HEALTH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct cg_health {
    atomic_bool draining; /* shutdown started */
    atomic_int store_ok;  /* the last PostgreSQL probe: 1 answered, 0 failed, -1 none yet */
    atomic_uint version;  /* bumped on every change of the two above */
    /* How long an answered probe counts (ms; 0: until the next probe says otherwise) and
     * when (cg_mono_ms) the last one answered: a probe stuck past that age reads as down,
     * whoever asks, without waiting for the prober. */
    atomic_llong fresh_ms;
    atomic_llong last_ok_ms;
};

/* Starts not draining, store not yet known to be up (NOT_SERVING until the first probe). */
void cg_health_init(struct cg_health *h);

/* Whether the server should be reported SERVING: not draining, and the last probe
 * answered less than fresh_ms ago (cg_health_set_fresh_ms). */
bool cg_health_is_serving(const struct cg_health *h);

/* Setters; each returns true when the value changed (and the version was bumped). The
 * first store result always counts as a change, so its outcome gets logged. A store
 * result of true also restarts the freshness clock (cg_health_set_fresh_ms). */
bool cg_health_set_draining(struct cg_health *h, bool draining);
bool cg_health_set_store_ok(struct cg_health *h, bool ok);

/* How long (ms) an answered probe keeps the store counted up; 0 (the default): until the
 * next probe's result. Set once before probing starts. */
void cg_health_set_fresh_ms(struct cg_health *h, int64_t fresh_ms);

/* The change counter. */
unsigned cg_health_version(const struct cg_health *h);

#endif

/* health.h - the serving state shared by the transport, the health service and the
 * PostgreSQL probe. Lock-free: readers see a consistent serving flag and a version
 * that grows on every change, so watchers know when to send an update.
 * Thread-safe.
 */
#ifndef CG_BASE_HEALTH_H
#define CG_BASE_HEALTH_H

#include <stdatomic.h>
#include <stdbool.h>

struct cg_health {
    atomic_bool draining; /* shutdown started */
    atomic_int store_ok;  /* the last PostgreSQL probe: 1 answered, 0 failed, -1 none yet */
    atomic_uint version;  /* bumped on every change of the two above */
};

/* Starts not draining, store not yet known to be up (NOT_SERVING until the first probe). */
void cg_health_init(struct cg_health *h);

/* Whether the server should be reported SERVING. */
bool cg_health_is_serving(const struct cg_health *h);

/* Setters; each returns true when the value changed (and the version was bumped). The
 * first store result always counts as a change, so its outcome gets logged. */
bool cg_health_set_draining(struct cg_health *h, bool draining);
bool cg_health_set_store_ok(struct cg_health *h, bool ok);

/* The change counter. */
unsigned cg_health_version(const struct cg_health *h);

#endif

/* health.c - atomic serving state. */
#include "base/health.h"

#include "base/clock.h"

void cg_health_init(struct cg_health *h)
{
    atomic_init(&h->draining, false);
    atomic_init(&h->store_ok, -1);
    atomic_init(&h->version, 0);
    atomic_init(&h->fresh_ms, 0);
    atomic_init(&h->last_ok_ms, 0);
}

void cg_health_set_fresh_ms(struct cg_health *h, int64_t fresh_ms)
{
    atomic_store(&h->fresh_ms, fresh_ms > 0 ? fresh_ms : 0);
}

bool cg_health_is_serving(const struct cg_health *h)
{
    if (atomic_load(&h->draining) || atomic_load(&h->store_ok) != 1)
        return false;
    /* A prober stuck in a call that does not return in time must not keep the last
     * answer alive: past its freshness the answer is too old to count. */
    int64_t fresh = atomic_load(&h->fresh_ms);
    return fresh == 0 || cg_mono_ms() - atomic_load(&h->last_ok_ms) <= fresh;
}

static bool set_flag(struct cg_health *h, atomic_bool *flag, bool value)
{
    bool old = atomic_exchange(flag, value);
    if (old == value)
        return false;
    atomic_fetch_add(&h->version, 1);
    return true;
}

bool cg_health_set_draining(struct cg_health *h, bool draining)
{
    return set_flag(h, &h->draining, draining);
}

bool cg_health_set_store_ok(struct cg_health *h, bool ok)
{
    if (ok)
        atomic_store(&h->last_ok_ms, cg_mono_ms());
    int old = atomic_exchange(&h->store_ok, ok ? 1 : 0);
    if (old == (ok ? 1 : 0))
        return false;
    atomic_fetch_add(&h->version, 1);
    return true;
}

unsigned cg_health_version(const struct cg_health *h)
{
    return atomic_load(&h->version);
}

/* budget_events.c - WatchUsage's events of the budget writes: what a change of a path's
 * counters or of a budget is worth (core/budget_events.c), appended in the transaction of
 * the change (store.h, "events"), so that they commit or roll back with it.
 */
#include "service/budget_events.h"

#include <string.h>

#include "base/clock.h"
#include "core/budget_events.h"
#include "service/budget_path.h"

/* The events of each level of rows from before to after, tenant first, into events
 * (cap entries, *count advanced); false when they do not fit. extra_type (0: none) is an
 * event of the last level put before its own. */
static bool collect_levels(const struct cg_budget_row *before, const struct cg_budget_row *after,
                           int n, int extra_type, struct cg_event_in *events, int cap,
                           int *count_io)
{
    int count = *count_io;
    for (int i = 0; i < n; i++) {
        struct cg_budget_level b, a;
        cg_budget_row_level(&before[i], &b);
        cg_budget_row_level(&after[i], &a);
        struct cg_level_event le[CG_LEVEL_EVENTS_MAX];
        int k = cg_budget_level_events(&b, &a, le);
        if (count + k + 1 > cap)
            return false;
        if (extra_type != 0 && i == n - 1) {
            struct cg_event_in *e = &events[count++];
            memset(e, 0, sizeof *e);
            e->ids = after[i].ids;
            e->type = extra_type;
            e->fields.delay_ms = cg_budget_level_delay(&a);
        }
        for (int j = 0; j < k; j++) {
            struct cg_event_in *e = &events[count++];
            memset(e, 0, sizeof *e);
            e->ids = after[i].ids;
            e->type = (int)le[j].type;
            e->fields.threshold_ratio = le[j].threshold_ratio;
            e->fields.falling = le[j].falling;
            e->fields.delay_ms = le[j].delay_ms;
        }
    }
    *count_io = count;
    return true;
}

bool cg_budget_events_collect(const struct cg_budget_row *before, const struct cg_budget_row *after,
                              int n, struct cg_event_in *out, int cap, int *count)
{
    return collect_levels(before, after, n, 0, out, cap, count);
}

int cg_budget_events_of_path(void *ctx, const struct cg_budget_row *before,
                             const struct cg_budget_row *after, int n, struct cg_event_in *out,
                             int cap)
{
    (void)ctx;
    int count = 0;
    return cg_budget_events_collect(before, after, n, out, cap, &count) ? count : -1;
}

/* Appends the events of each level of rows from before to after, tenant first. */
static cg_status append_levels(const struct cg_svc_env *env, const char *tenant_id,
                               const struct cg_budget_row *before,
                               const struct cg_budget_row *after, int n, int extra_type,
                               struct cg_err *serr)
{
    struct cg_event_in events[CG_PATH_MAX * CG_LEVEL_EVENTS_MAX + 1];
    int count = 0;
    if (!collect_levels(before, after, n, extra_type, events, (int)(sizeof events / sizeof *events),
                        &count))
        return cg_err_set(serr, CG_INTERNAL, "too many events");
    if (count == 0)
        return CG_OK;
    return cg_store_events_append(env->store, tenant_id, events, count, cg_wall_ms(), serr);
}

cg_status cg_budget_emit_path(const struct cg_svc_env *env, const char *tenant_id,
                              const struct cg_budget_row *path, int n, int64_t used_delta,
                              int64_t cache_read_delta, int64_t reserved_delta, struct cg_err *serr)
{
    struct cg_budget_row before[CG_PATH_MAX];
    if (n < 1 || n > CG_PATH_MAX)
        return CG_OK;
    /* path_add keeps counters >= 0; a clamp there (a caller's bug) only blurs a crossing. */
    for (int i = 0; i < n; i++) {
        before[i] = path[i];
        before[i].used_tokens -=
            used_delta - (path[i].exclude_cache_read_tokens ? cache_read_delta : 0);
        before[i].reserved_tokens -= reserved_delta;
        if (before[i].used_tokens < 0)
            before[i].used_tokens = 0;
        if (before[i].reserved_tokens < 0)
            before[i].reserved_tokens = 0;
    }
    /* path[] holds the parents' allocated_tokens as the allocation trigger left them: the
     * change of each allocated child's share is taken back out of its parent. */
    for (int i = n - 1; i >= 1; i--) {
        int64_t moved = cg_store_alloc_share(&path[i]) - cg_store_alloc_share(&before[i]);
        int64_t a = before[i - 1].allocated_tokens - moved;
        before[i - 1].allocated_tokens = a < 0 ? 0 : a;
    }
    return append_levels(env, tenant_id, before, path, n, 0, serr);
}

cg_status cg_budget_emit_budget(const struct cg_svc_env *env, const char *tenant_id,
                                const struct cg_budget_row *before,
                                const struct cg_budget_row *after, struct cg_err *serr)
{
    struct cg_budget_row none;
    if (before == NULL) {
        none = *after;
        none.has_budget = false;
        before = &none;
    }
    return append_levels(env, tenant_id, before, after, 1, 9 /* BUDGET_CHANGED */, serr);
}

cg_status cg_budget_emit_share(const struct cg_svc_env *env, const char *tenant_id,
                               const struct cg_budget_row *parent,
                               const struct cg_budget_row *before,
                               const struct cg_budget_row *after, struct cg_err *serr)
{
    if (parent == NULL)
        return CG_OK;
    /* What migration 0013's trigger did to the parent (cg_store_alloc_mirror's rule). */
    int64_t share_before = cg_store_alloc_share(before);
    int64_t share_after = cg_store_alloc_share(after);
    if (share_after == share_before)
        return CG_OK;
    struct cg_budget_row moved = *parent;
    int64_t delta = share_after - share_before;
    int64_t a = delta > 0 && parent->allocated_tokens > INT64_MAX - delta
                    ? INT64_MAX
                    : parent->allocated_tokens + delta;
    moved.allocated_tokens = a < 0 ? 0 : a;
    return append_levels(env, tenant_id, parent, &moved, 1, 0, serr);
}

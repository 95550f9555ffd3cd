/* watch.h - WatchUsage's fan-out in domain types: the process's hub (per watched tenant a
 * bounded ring of its committed events, store.h struct cg_event), the events thread's step
 * that fills it, and one watcher's reads from it. No protobuf: rpc/rpc_watch.c validates a
 * WatchUsage request, opens a watcher here and encodes what its polls return.
 *
 * Threads: the hub is made once by the application object and shared by every thread;
 * cg_events_step runs on the one events thread; a watcher is opened on a thread with a store (the
 * open lane) and read by its stream's polls (one thread at a time, any completion-queue thread).
 */
#ifndef CG_SERVICE_WATCH_H
#define CG_SERVICE_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store.h"

struct cg_watch_hub;
struct cg_watcher;

/* The process's hub (env->watch_hub). Thread-safe; freed after the events thread and every
 * watcher are gone (feeds still joined are freed with it). NULL when out of memory. */
struct cg_watch_hub *cg_watch_hub_new(void);
void cg_watch_hub_free(struct cg_watch_hub *hub);

/* One step of the events thread, which owns listener and feeds env->watch_hub (never NULL
 * here; one thread per hub): waits up to timeout_ms for notifications of committed events
 * (cg_events) and of changed API keys (cg_keys); drops the announced budget rows and keys
 * from the process cache (env->cache); fetches the new events of the tenants watched in
 * this process into the hub (after a reconnection: catches up from the table); and wakes
 * the streams through env->wake_streams, also when nothing arrived (heartbeats are due by
 * time). Logs store trouble and returns false when PostgreSQL is away, so that the caller
 * pauses (for timeout_ms) before the next step; the caller loops until it stops. */
bool cg_events_step(const struct cg_svc_env *env, struct cg_store_listener *listener,
                    int timeout_ms);

/* What one watcher wants, validated by the caller. */
struct cg_watch_spec {
    struct cg_scope_ids ids; /* the watched scope (it exists: the caller read its path) */
    int level;               /* its level, 1..4 */
    bool descendants;        /* also the events of the scopes below it */
    unsigned types;          /* bit t: event type t wanted; 0: all */
    /* Approval mode ("" none; lower case): only the decision of this approval of the
     * tenant, after which the stream ends. */
    char approval_id[CG_UUID_LEN + 1];
    int64_t heartbeat_ms; /* a heartbeat after this long without a message */
    int64_t update_ms;    /* USAGE_CHANGED of one scope at most this often (0: all) */
    bool send_snapshot;   /* read the scope's usage as the first message */
    /* Resume (not in approval mode): before the feed's events, the stored ones of the
     * watched scopes that occurred at or after this time (unix ms; 0: none), oldest first,
     * of the wanted types, only the latest USAGE_CHANGED of each scope, the newest
     * CG_STORE_PAGE_MAX at most (when older ones were left out, the first one's *missed is
     * CG_WATCH_MISSED_UNKNOWN); the feed's copies of them are not sent again. */
    int64_t resume_from_ms;
};

/* What a watcher has to say first, read when it opened. */
struct cg_watch_first {
    /* send_snapshot: the scope's usage, children to depth 1 with descendants (the caller
     * frees it with cg_watch_first_cleanup once encoded). */
    bool has_snapshot;
    struct cg_usage_tree snapshot;
    /* Approval mode with an approval decided before the open: its decision, the stream's
     * only message. */
    bool has_decision;
    struct cg_event decision;
};

/* Opens a watcher of the principal's tenant on env->watch_hub: checks that the scope exists
 * (the path read of service/budget_path.h; NOT_FOUND naming the id), joins the tenant's feed
 * (before anything is read, so that no event falls between the reads and the feed), reads
 * the scope's last sequence number (earlier events of the scope are not news), then the
 * snapshot and, in approval mode, the approval (which must be the tenant's and inside a
 * scope-bound key's subtree). Needs env->store (not on a completion-queue thread). Wakes the
 * streams on success. On success *out is the caller's (cg_watcher_free) and *first filled. Errors,
 * with op->err naming the problem: UNAVAILABLE without a hub; RESOURCE_EXHAUSTED
 * (SERVER_OVERLOADED) when too many tenants are watched; NOT_FOUND (APPROVAL_NOT_FOUND) for an
 * unknown approval; the store's errors. On error nothing is left joined and *out is NULL. */
cg_status cg_watch_open(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_watch_spec *spec, struct cg_watcher **out,
                        struct cg_watch_first *first) CG_MUST_CHECK;

/* Frees what cg_watch_open put in *first (the snapshot). */
void cg_watch_first_cleanup(struct cg_watch_first *first);

/* Leaves the feed and frees the watcher. NULL is a no-op. */
void cg_watcher_free(struct cg_watcher *w);

/* cg_watcher_next's *missed when some events were lost, how many not known (a resume's
 * replay that left older ones out). */
#define CG_WATCH_MISSED_UNKNOWN UINT64_MAX

/* What a watcher's poll has to send. */
typedef enum {
    CG_WATCH_NOTHING = 0, /* nothing now: wait for the next wake */
    CG_WATCH_EVENT,       /* *event, with the count of events this watcher lost before it */
    CG_WATCH_HEARTBEAT,   /* nothing happened for heartbeat_ms */
} cg_watch_next;

/* The watcher's next message at now_ms (cg_mono_ms), without blocking: a USAGE_CHANGED held
 * back by the update interval whose time has come, else the next matching event of the
 * feed (USAGE_CHANGED of a scope sent less than update_ms ago is held back, the latest one
 * kept), else a heartbeat when due. A watcher that fell more than a ring behind skips
 * ahead; *missed then says how many events it lost (0 otherwise). Counts what it returns
 * as sent. Not thread-safe for one watcher (its stream polls one at a time). */
cg_watch_next cg_watcher_next(struct cg_watcher *w, int64_t now_ms, struct cg_event *event,
                              uint64_t *missed);

/* Tells the watcher that a message of the caller's own (the snapshot) went out at now_ms
 * (cg_mono_ms): the heartbeat is due heartbeat_ms later. */
void cg_watcher_sent(struct cg_watcher *w, int64_t now_ms);

#endif

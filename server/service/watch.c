/* watch.c - WatchUsage's fan-out in domain types (watch.h): the process's hub (struct
 * cg_watch_hub, made once by the application object), the events thread's step, and the
 * watchers that the streams open (on the pool) and read (on a completion-queue thread).
 *
 * Events are durable in PostgreSQL (store.h, "events"). Each server process has one LISTEN
 * connection (the transport's events thread calls cg_events_step in a loop); on a
 * notification it reads the announced events of the tenants watched here and appends
 * them to that tenant's feed in the hub: a bounded ring (FEED_RING events) under the hub's
 * mutex. Each stream keeps a position in its tenant's feed; its poll takes the next
 * matching event without blocking. A stream that falls more than FEED_RING events behind skips
 * ahead and says so in the next event's message; the per-scope sequence numbers show the gap too.
 * After a reconnection of the LISTEN connection the step catches up from the table
 * (events of the last minute before the connection was lost that this process has not
 * seen, per scope by sequence), so no committed event is lost while the table keeps it.
 * Heartbeats: the step wakes every stream at least every tick (250 ms), so a stream whose
 * heartbeat is due sends it without a timer of its own.
 */
#include "service/watch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/budget_events.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/op_err.h"

#define MOD "watch"
#define FEED_RING 1024    /* events buffered per watched tenant */
#define FEEDS_MAX 1024    /* tenants watched at once in one process */
#define SCOPES_MAX 4096   /* per-feed scopes whose last seq is remembered (hash slots) */
#define NOTICES_MAX 256   /* notifications handled per step */
#define FETCH_MAX 1000    /* events read per statement */
#define THROTTLE_SLOTS 32 /* per-stream scopes whose USAGE_CHANGED are coalesced */
#define CATCHUP_MARGIN_MS 60000
#define REPLAY_MAX CG_STORE_PAGE_MAX /* stored events a resuming watcher reads */
#define REPLAY_SLOTS 2048            /* its scopes' replayed sequences (hash slots, 2^k) */
#define HEARTBEAT_DEFAULT_MS 15000
#define UPDATE_DEFAULT_MS 1000

/* ---------------------------------------------------------------- feeds ----------- */

struct scope_seq {
    bool used;
    struct cg_scope_ids ids;
    int64_t seq;
};

struct feed {
    char tenant_id[CG_UUID_LEN + 1];
    int watchers;
    uint64_t head; /* position of the next event; event p is ring[p % FEED_RING] */
    struct cg_event ring[FEED_RING];
    struct scope_seq *scopes; /* SCOPES_MAX slots, open addressing; listener thread only */
    int nscopes;
};

/* The process's fan-out (watch.h cg_watch_hub_new): the feeds of the watched tenants under
 * one mutex, and what the events thread keeps between and during its steps. */
struct cg_watch_hub {
    pthread_mutex_t lock;
    struct feed *feeds[FEEDS_MAX];
    /* The events thread's own, untouched by the streams: when the LISTEN connection was
     * last known good (cg_wall_ms; 0 before the first) and the step's buffers (too large
     * for its stack). */
    int64_t listen_ok_ms;
    struct cg_event_notice notices[NOTICES_MAX];
    struct cg_event fetched[FETCH_MAX];
    struct cg_event_want wants[NOTICES_MAX];
    int order[NOTICES_MAX]; /* the step's notices by tenant, scope and sequence number */
    char tenants[FEEDS_MAX][CG_UUID_LEN + 1];
};

struct cg_watch_hub *cg_watch_hub_new(void)
{
    struct cg_watch_hub *hub = calloc(1, sizeof *hub);
    if (hub != NULL && pthread_mutex_init(&hub->lock, NULL) != 0) {
        free(hub);
        hub = NULL;
    }
    return hub;
}

void cg_watch_hub_free(struct cg_watch_hub *hub)
{
    if (hub == NULL)
        return;
    for (int i = 0; i < FEEDS_MAX; i++)
        if (hub->feeds[i] != NULL) {
            free(hub->feeds[i]->scopes);
            free(hub->feeds[i]);
        }
    pthread_mutex_destroy(&hub->lock);
    free(hub);
}

/* Under hub->lock. */
static struct feed *feed_find(struct cg_watch_hub *hub, const char *tenant_id)
{
    for (int i = 0; i < FEEDS_MAX; i++)
        if (hub->feeds[i] != NULL && strcmp(hub->feeds[i]->tenant_id, tenant_id) == 0)
            return hub->feeds[i];
    return NULL;
}

/* A watcher joins the tenant's feed; *position gets where it starts. false when full. */
static bool feed_join(struct cg_watch_hub *hub, const char *tenant_id, uint64_t *position)
{
    pthread_mutex_lock(&hub->lock);
    struct feed *f = feed_find(hub, tenant_id);
    for (int i = 0; f == NULL && i < FEEDS_MAX; i++) {
        if (hub->feeds[i] != NULL)
            continue;
        f = calloc(1, sizeof *f);
        if (f != NULL && (f->scopes = calloc(SCOPES_MAX, sizeof *f->scopes)) == NULL) {
            free(f);
            f = NULL;
        }
        if (f == NULL)
            break;
        snprintf(f->tenant_id, sizeof f->tenant_id, "%s", tenant_id);
        hub->feeds[i] = f;
    }
    if (f != NULL) {
        f->watchers++;
        *position = f->head;
    }
    pthread_mutex_unlock(&hub->lock);
    return f != NULL;
}

static void feed_leave(struct cg_watch_hub *hub, const char *tenant_id)
{
    pthread_mutex_lock(&hub->lock);
    for (int i = 0; i < FEEDS_MAX; i++) {
        struct feed *f = hub->feeds[i];
        if (f == NULL || strcmp(f->tenant_id, tenant_id) != 0)
            continue;
        if (--f->watchers == 0) {
            hub->feeds[i] = NULL;
            free(f->scopes);
            free(f);
        }
        break;
    }
    pthread_mutex_unlock(&hub->lock);
}

static uint64_t ids_hash(const struct cg_scope_ids *ids)
{
    uint64_t h = 1469598103934665603ULL;
    const char *parts[] = {ids->session_id, ids->task_id, ids->agent_id};
    for (int i = 0; i < 3; i++) {
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++)
            h = (h ^ *p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;
    }
    return h;
}

static bool ids_equal(const struct cg_scope_ids *a, const struct cg_scope_ids *b)
{
    return strcmp(a->session_id, b->session_id) == 0 && strcmp(a->task_id, b->task_id) == 0 &&
           strcmp(a->agent_id, b->agent_id) == 0;
}

/* qsort_r order of notice indexes (arg: the notices): tenant, scope, sequence number. */
static int notice_order(const void *x, const void *y, void *arg)
{
    const struct cg_event_notice *notices = arg;
    const struct cg_event_notice *a = &notices[*(const int *)x], *b = &notices[*(const int *)y];
    int c = strcmp(a->tenant_id, b->tenant_id);
    if (c == 0)
        c = strcmp(a->ids.session_id, b->ids.session_id);
    if (c == 0)
        c = strcmp(a->ids.task_id, b->ids.task_id);
    if (c == 0)
        c = strcmp(a->ids.agent_id, b->ids.agent_id);
    if (c == 0)
        c = (a->seq > b->seq) - (a->seq < b->seq);
    return c;
}

/* The slot of ids in f's scope table (used or the free one where it goes). When the table
 * is three quarters full it is cleared: duplicates after a catch-up are then possible. */
static struct scope_seq *scope_slot(struct feed *f, const struct cg_scope_ids *ids)
{
    if (f->nscopes >= SCOPES_MAX * 3 / 4) {
        memset(f->scopes, 0, SCOPES_MAX * sizeof *f->scopes);
        f->nscopes = 0;
    }
    size_t i = ids_hash(ids) % SCOPES_MAX;
    while (f->scopes[i].used && !ids_equal(&f->scopes[i].ids, ids))
        i = (i + 1) % SCOPES_MAX;
    return &f->scopes[i];
}

/* Appends fetched events to the tenant's feed, skipping any already there. Under the lock. */
static int feed_append(struct cg_watch_hub *hub, const char *tenant_id, const struct cg_event *ev,
                       int n)
{
    int added = 0;
    pthread_mutex_lock(&hub->lock);
    struct feed *f = feed_find(hub, tenant_id);
    for (int i = 0; f != NULL && i < n; i++) {
        struct scope_seq *s = scope_slot(f, &ev[i].ids);
        if (s->used && ev[i].seq <= s->seq)
            continue;
        if (!s->used) {
            s->used = true;
            s->ids = ev[i].ids;
            f->nscopes++;
        }
        s->seq = ev[i].seq;
        f->ring[f->head % FEED_RING] = ev[i];
        f->head++;
        added++;
    }
    pthread_mutex_unlock(&hub->lock);
    return added;
}

/* ---------------------------------------------------------------- delivery -------- */

/* The watched tenants (copied under the lock), at most max. */
static int watched_tenants(struct cg_watch_hub *hub, char (*out)[CG_UUID_LEN + 1], int max)
{
    int n = 0;
    pthread_mutex_lock(&hub->lock);
    for (int i = 0; i < FEEDS_MAX && n < max; i++)
        if (hub->feeds[i] != NULL)
            snprintf(out[n++], CG_UUID_LEN + 1, "%s", hub->feeds[i]->tenant_id);
    pthread_mutex_unlock(&hub->lock);
    return n;
}

static cg_status fetch_into_feed(struct cg_watch_hub *hub, struct cg_store_listener *l,
                                 const char *tenant_id, const struct cg_event_want *wants,
                                 int nwants, int64_t since_ms, struct cg_event *buf,
                                 struct cg_err *err)
{
    int count = 0;
    cg_status st =
        cg_store_listener_fetch(l, tenant_id, wants, nwants, since_ms, buf, FETCH_MAX, &count, err);
    if (st == CG_OK && count > 0)
        feed_append(hub, tenant_id, buf, count);
    if (st == CG_OK && count == FETCH_MAX)
        cg_log(CG_LOG_WARN, MOD, NULL, "tenant %s: more than %d events at once; watchers see a gap",
               tenant_id, FETCH_MAX);
    return st;
}

/* Revoked, changed and deleted keys (cg_keys, migrations/0017) leave the process's key
 * cache at once: the next call with one reads PostgreSQL. */
static void drop_announced_keys(const struct cg_svc_env *env, struct cg_store_listener *listener)
{
    struct cg_key_notice keys[CG_STORE_KEY_NOTICES_MAX];
    int nkeys = 0;
    if (cg_store_listener_keys(listener, keys, CG_STORE_KEY_NOTICES_MAX, &nkeys)) {
        cg_cache_key_drop_all(env->cache);
        cg_log(CG_LOG_INFO, MOD, NULL, "every cached API key dropped (cg_keys)");
        return;
    }
    for (int i = 0; i < nkeys; i++) {
        cg_cache_key_drop(env->cache, keys[i].tenant_id, keys[i].key_id);
        cg_log(CG_LOG_DEBUG, MOD, NULL, "API key %s of tenant %s dropped (cg_keys)", keys[i].key_id,
               keys[i].tenant_id);
    }
}

/* Rows a replica committed (cg_rows, sent by the NOTIFY after its COMMIT) leave the
 * process's row cache unless it holds them at that version already (its own writes); a
 * whole tenant announced (sweeper, CloseScope, approvals: cg_cache_dropped) drops the
 * tenant's rows. */
static void drop_announced_rows(const struct cg_svc_env *env, struct cg_store_listener *listener)
{
    int n = 0;
    const struct cg_row_notice *rows = cg_store_listener_rows(listener, &n);
    for (int i = 0; i < n; i++) {
        if (rows[i].whole_tenant)
            cg_cache_drop_tenant(env->cache, rows[i].tenant_id);
        else
            (void)cg_cache_row_announced(env->cache, rows[i].tenant_id, &rows[i].ids,
                                         rows[i].row_version);
    }
}

bool cg_events_step(const struct cg_svc_env *env, struct cg_store_listener *listener,
                    int timeout_ms)
{
    struct cg_watch_hub *hub = env->watch_hub;
    struct cg_event_notice *notices = hub->notices;
    struct cg_event *fetched = hub->fetched;
    struct cg_event_want *wants = hub->wants;
    struct cg_err err;
    cg_err_clear(&err);
    int count = 0;
    bool relistened = false;
    cg_status st = cg_store_listener_wait(listener, timeout_ms, notices, NOTICES_MAX, &count,
                                          &relistened, &err);
    if (st != CG_OK) {
        /* Writes of other replicas go unheard: the process's cache stops serving rows. */
        cg_cache_set_live(env->cache, false);
        /* PostgreSQL away: the streams still get their heartbeats; the caller pauses. */
        if (env->wake_streams)
            env->wake_streams(env->wake_ctx);
        return false;
    }
    /* The cache hears of other replicas' writes here (service/cache.h): after a (re)connection
     * it forgets what it had, then each row announced on cg_rows (with its row_version, by
     * the same NOTIFY as the events of its write) drops the older copy. The events
     * themselves drop nothing: they name the same rows without a version, and would drop
     * this process's own writes too. */
    if (relistened)
        cg_cache_set_live(env->cache, false);
    cg_cache_set_live(env->cache, true);
    drop_announced_rows(env, listener);
    drop_announced_keys(env, listener);
    if (relistened) {
        /* Notifications sent while nobody listened are lost: read what the table has. */
        int64_t since = hub->listen_ok_ms > 0 ? hub->listen_ok_ms - CATCHUP_MARGIN_MS : 0;
        int nt = since > 0 ? watched_tenants(hub, hub->tenants, FEEDS_MAX) : 0;
        for (int i = 0; i < nt && st == CG_OK; i++)
            st = fetch_into_feed(hub, listener, hub->tenants[i], NULL, 0, since, fetched, &err);
    }
    /* The announced events, grouped by tenant (one read per watched tenant and step) and
     * by scope (one range of sequence numbers per scope): sorted, so that a step of many
     * tenants' notices costs n log n, not n squared. */
    int *order = hub->order;
    for (int i = 0; i < count; i++)
        order[i] = i;
    qsort_r(order, (size_t)count, sizeof *order, notice_order, notices);
    for (int i = 0; i < count && st == CG_OK;) {
        const char *tenant = notices[order[i]].tenant_id;
        int end = i + 1;
        while (end < count && strcmp(notices[order[end]].tenant_id, tenant) == 0)
            end++;
        pthread_mutex_lock(&hub->lock);
        bool watched = feed_find(hub, tenant) != NULL;
        pthread_mutex_unlock(&hub->lock);
        int nw = 0;
        for (int j = i; watched && j < end; j++) {
            const struct cg_event_notice *n = &notices[order[j]];
            if (nw > 0 && ids_equal(&wants[nw - 1].ids, &n->ids)) {
                wants[nw - 1].upto_seq = n->seq; /* sorted by seq within the scope */
                continue;
            }
            wants[nw].ids = n->ids;
            wants[nw].after_seq = n->seq - 1;
            wants[nw].upto_seq = n->seq;
            nw++;
        }
        if (nw > 0)
            st = fetch_into_feed(hub, listener, tenant, wants, nw, 0, fetched, &err);
        i = end;
    }
    if (st == CG_OK)
        hub->listen_ok_ms = cg_wall_ms();
    else
        cg_log(CG_LOG_WARN, MOD, NULL, "reading events failed: %s", cg_err_text(&err));
    if (env->wake_streams)
        env->wake_streams(env->wake_ctx);
    return st == CG_OK; /* a failed read: pause, then catch up */
}

/* ---------------------------------------------------------------- watchers -------- */

struct throttle {
    bool used;
    struct cg_scope_ids ids;
    int64_t last_sent_ms; /* cg_mono_ms */
    bool pending;
    struct cg_event event; /* the latest one held back */
};

/* A scope's highest sequence number sent by the replay (open addressing on ids_hash; two
 * scopes with one 64-bit hash would share a slot: harmless, a repeat or a skip of a
 * duplicate at worst). */
struct replayed {
    uint64_t hash; /* 0: free */
    int64_t seq;
    bool usage_kept; /* while the replay is read: its latest USAGE_CHANGED is kept */
};

struct cg_watcher {
    struct cg_watch_hub *hub; /* the process's (env->watch_hub), joined at the open */
    char tenant_id[CG_UUID_LEN + 1];
    struct cg_watch_spec spec;
    uint64_t position;
    int64_t start_seq;    /* the scope's events up to this one came before the stream */
    int64_t last_sent_ms; /* cg_mono_ms */
    uint64_t missed;      /* events lost to an overflow, not yet told */
    struct throttle throttle[THROTTLE_SLOTS];
    /* Resuming (spec.resume_from_ms): the stored events to send before the feed's, and per
     * scope the last sequence they hold, so that the feed's copies are not sent again. */
    struct cg_event *replay;
    int nreplay, replay_next;
    uint64_t replay_left_out;  /* CG_WATCH_MISSED_UNKNOWN: older events left out, told first */
    struct replayed *replayed; /* REPLAY_SLOTS, or NULL */
};

void cg_watch_first_cleanup(struct cg_watch_first *first)
{
    if (first->has_snapshot)
        cg_usage_tree_cleanup(&first->snapshot);
    first->has_snapshot = false;
}

void cg_watcher_free(struct cg_watcher *w)
{
    if (w == NULL)
        return;
    feed_leave(w->hub, w->tenant_id);
    free(w->replay);
    free(w->replayed);
    free(w);
}

static uint64_t replay_key(const struct cg_scope_ids *ids)
{
    uint64_t h = ids_hash(ids);
    return h != 0 ? h : 1;
}

/* The slot of ids in w->replayed: its own, or the free one where it goes (taken when add).
 * Never full: at most REPLAY_MAX scopes are added, in twice as many slots. */
static struct replayed *replayed_slot(struct cg_watcher *w, const struct cg_scope_ids *ids,
                                      bool add)
{
    uint64_t h = replay_key(ids);
    size_t i = (size_t)(h & (REPLAY_SLOTS - 1));
    while (w->replayed[i].hash != 0 && w->replayed[i].hash != h)
        i = (i + 1) & (REPLAY_SLOTS - 1);
    if (add)
        w->replayed[i].hash = h;
    return &w->replayed[i];
}

/* Whether the replay already sent this event (or a later one of its scope). */
static bool replay_covers(struct cg_watcher *w, const struct cg_event *e)
{
    return w->replayed != NULL && e->seq <= replayed_slot(w, &e->ids, false)->seq;
}

static bool matches(const struct cg_watcher *w, const struct cg_event *e)
{
    const struct cg_watch_spec *s = &w->spec;
    /* An approval the stream can name was requested before it opened (its REQUESTED event is
     * history, which the delivery thread may still bring after the open): only its decision
     * is news. */
    if (s->approval_id[0] != '\0')
        return e->type == CG_EVENT_APPROVAL_DECIDED &&
               strcmp(e->fields.ref_id, s->approval_id) == 0;
    if (s->types != 0 && !(s->types & (1u << e->type)))
        return false;
    /* The watched scope's events committed before the stream opened are not news (the
     * delivery thread may fetch them after the stream joined the tenant's feed). Scopes
     * below it may still show a few such events; their sequence numbers tell. */
    if (ids_equal(&s->ids, &e->ids))
        return e->seq > w->start_seq;
    if (!s->descendants)
        return false;
    const char *mine[] = {s->ids.session_id, s->ids.task_id, s->ids.agent_id};
    const char *theirs[] = {e->ids.session_id, e->ids.task_id, e->ids.agent_id};
    for (int i = 0; i < s->level - 1; i++)
        if (strcmp(mine[i], theirs[i]) != 0)
            return false;
    return true;
}

static struct throttle *throttle_slot(struct cg_watcher *w, const struct cg_scope_ids *ids)
{
    struct throttle *free_slot = NULL;
    for (int i = 0; i < THROTTLE_SLOTS; i++) {
        if (w->throttle[i].used && ids_equal(&w->throttle[i].ids, ids))
            return &w->throttle[i];
        if (!w->throttle[i].used && free_slot == NULL)
            free_slot = &w->throttle[i];
    }
    if (free_slot != NULL) {
        free_slot->used = true;
        free_slot->ids = *ids;
        free_slot->last_sent_ms = 0;
        free_slot->pending = false;
    }
    return free_slot; /* NULL: too many scopes; not throttled */
}

/* A USAGE_CHANGED held back by the throttle whose time has come, into *e. */
static bool throttled_due(struct cg_watcher *w, int64_t now, struct cg_event *e)
{
    for (int i = 0; i < THROTTLE_SLOTS; i++) {
        struct throttle *t = &w->throttle[i];
        if (t->used && t->pending && now - t->last_sent_ms >= w->spec.update_ms) {
            *e = t->event;
            t->pending = false;
            t->last_sent_ms = now;
            return true;
        }
    }
    return false;
}

/* The next event of the feed that the watcher wants now, into *e. */
static bool feed_next(struct cg_watcher *w, int64_t now, struct cg_event *e)
{
    for (;;) {
        pthread_mutex_lock(&w->hub->lock);
        struct feed *f = feed_find(w->hub, w->tenant_id);
        bool have = f != NULL && w->position < f->head;
        if (have) {
            if (f->head - w->position > FEED_RING) {
                w->missed += f->head - FEED_RING - w->position;
                w->position = f->head - FEED_RING;
            }
            *e = f->ring[w->position % FEED_RING];
            w->position++;
        }
        pthread_mutex_unlock(&w->hub->lock);
        if (!have)
            return false;
        if (!matches(w, e) || replay_covers(w, e))
            continue;
        if (e->type == CG_EVENT_USAGE_CHANGED && w->spec.update_ms > 0) {
            struct throttle *t = throttle_slot(w, &e->ids);
            if (t != NULL && now - t->last_sent_ms < w->spec.update_ms) {
                t->pending = true;
                t->event = *e;
                continue;
            }
            if (t != NULL) {
                t->pending = false;
                t->last_sent_ms = now;
            }
        }
        return true;
    }
}

cg_watch_next cg_watcher_next(struct cg_watcher *w, int64_t now_ms, struct cg_event *event,
                              uint64_t *missed)
{
    *missed = 0;
    if (w->replay_next < w->nreplay) {
        *event = w->replay[w->replay_next++];
        *missed = w->replay_next == 1 ? w->replay_left_out : 0;
        if (w->replay_next == w->nreplay) {
            free(w->replay);
            w->replay = NULL;
            w->nreplay = w->replay_next = 0;
        }
        w->last_sent_ms = now_ms;
        return CG_WATCH_EVENT;
    }
    if (throttled_due(w, now_ms, event) || feed_next(w, now_ms, event)) {
        *missed = w->missed;
        w->missed = 0;
        w->last_sent_ms = now_ms;
        return CG_WATCH_EVENT;
    }
    if (now_ms - w->last_sent_ms >= w->spec.heartbeat_ms) {
        w->last_sent_ms = now_ms;
        return CG_WATCH_HEARTBEAT;
    }
    return CG_WATCH_NOTHING;
}

void cg_watcher_sent(struct cg_watcher *w, int64_t now_ms)
{
    w->last_sent_ms = now_ms;
}

/* Approval mode: the approval must be the tenant's (a watcher of a typo would wait
 * forever); one decided before the stream opened is its only message, at once. */
static cg_status decision_in(const struct cg_svc_env *env, const struct cg_op *op,
                             const struct cg_watcher *w, struct cg_watch_first *first)
{
    struct cg_approval a;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_approval_get(env->store, w->tenant_id, w->spec.approval_id,
                                         cg_wall_ms(), &a, &serr);
    /* One outside a scope-bound key's subtree is as unknown as another tenant's. */
    const struct cg_principal *p = op->principal;
    if (st == CG_NOT_FOUND ||
        (st == CG_OK &&
         !cg_scope_within(p->scope_session_id, p->scope_task_id, a.ids.session_id, a.ids.task_id)))
        return cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_APPROVAL_NOT_FOUND,
                           "field 'approval_id': no such approval");
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    if (a.state == CG_APPROVAL_PENDING)
        return CG_OK;
    struct cg_event *e = &first->decision;
    memset(e, 0, sizeof *e);
    snprintf(e->tenant_id, sizeof e->tenant_id, "%s", w->tenant_id);
    e->ids = a.ids;
    e->level = a.level;
    e->type = CG_EVENT_APPROVAL_DECIDED;
    e->occurred_at_ms = a.decided_at_ms ? a.decided_at_ms : a.expires_at_ms;
    snprintf(e->fields.ref_id, sizeof e->fields.ref_id, "%s", a.approval_id);
    e->fields.ref_tokens = a.granted_tokens;
    e->fields.ref_state = a.state;
    first->has_decision = true;
    return CG_OK;
}

/* Resuming: the stored events of the watched scopes since spec.resume_from_ms, of the wanted
 * types, only the latest USAGE_CHANGED of each scope, oldest first; and per scope the last
 * sequence number they hold (the feed's copies of them are skipped). */
static cg_status replay_in(const struct cg_svc_env *env, const struct cg_op *op,
                           struct cg_watcher *w)
{
    const struct cg_watch_spec *s = &w->spec;
    w->replay = calloc(REPLAY_MAX, sizeof *w->replay);
    w->replayed = calloc(REPLAY_SLOTS, sizeof *w->replayed);
    if (w->replay == NULL || w->replayed == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    int n = 0;
    bool more = false;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_events_since(env->store, w->tenant_id, &s->ids, s->level, s->descendants,
                              s->resume_from_ms, REPLAY_MAX, w->replay, &n, &more, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    w->replay_left_out = more ? CG_WATCH_MISSED_UNKNOWN : 0;
    /* Newest first: each scope's sequence, and its latest USAGE_CHANGED kept. */
    bool *keep = calloc((size_t)n + 1, sizeof *keep);
    if (keep == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    for (int i = n - 1; i >= 0; i--) {
        const struct cg_event *e = &w->replay[i];
        struct replayed *r = replayed_slot(w, &e->ids, true);
        if (e->seq > r->seq)
            r->seq = e->seq;
        if (s->types != 0 && !(s->types & (1u << e->type)))
            continue;
        if (e->type == CG_EVENT_USAGE_CHANGED) {
            keep[i] = !r->usage_kept;
            r->usage_kept = true;
        } else {
            keep[i] = true;
        }
    }
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (keep[i])
            w->replay[kept++] = w->replay[i];
    free(keep);
    w->nreplay = kept;
    /* Only what is kept stays (a reader of a quiet tenant holds none of the 1,000 slots). */
    if (kept == 0) {
        free(w->replay);
        w->replay = NULL;
    } else {
        struct cg_event *fit = realloc(w->replay, (size_t)kept * sizeof *fit);
        if (fit != NULL)
            w->replay = fit;
    }
    return CG_OK;
}

/* What the watcher reads once joined: the scope's last sequence number, the snapshot (the
 * scope's usage, children to depth 1 with descendants) and the approval's decision. */
static cg_status first_reads(const struct cg_svc_env *env, const struct cg_op *op,
                             struct cg_watcher *w, struct cg_watch_first *first)
{
    const struct cg_watch_spec *s = &w->spec;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_event_seq(env->store, w->tenant_id, &s->ids, &w->start_seq, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    if (s->send_snapshot) {
        if (cg_store_usage_tree(env->store, w->tenant_id, &s->ids,
                                s->descendants && s->level < 4 ? 1 : 0, CG_STORE_PAGE_MAX, false,
                                &first->snapshot, &serr) != CG_OK)
            return cg_op_store_error(op, &serr);
        first->has_snapshot = true;
    }
    if (s->resume_from_ms > 0) {
        cg_status st = replay_in(env, op, w);
        if (st != CG_OK)
            return st;
    }
    if (s->approval_id[0] != '\0')
        return decision_in(env, op, w, first);
    return CG_OK;
}

cg_status cg_watch_open(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_watch_spec *spec, struct cg_watcher **out,
                        struct cg_watch_first *first)
{
    *out = NULL;
    memset(first, 0, sizeof *first);
    /* The scope must exist (NOT_FOUND naming the id otherwise): a watcher of a typo would
     * wait forever. Only its existence is read here, before the join: what is news to the
     * watcher (the start sequence, the snapshot, the approval) is read after it. */
    struct cg_budget_row path[CG_PATH_MAX];
    int n = 0;
    cg_status st = cg_budget_read_path(env, op, &spec->ids, path, &n);
    if (st != CG_OK)
        return st;
    if (env->watch_hub == NULL)
        return cg_err_set(op->err, CG_UNAVAILABLE, "WatchUsage is not served by this process");
    struct cg_watcher *w = calloc(1, sizeof *w);
    if (w == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", op->principal->tenant_id);
    w->spec = *spec;
    w->last_sent_ms = cg_mono_ms();
    w->hub = env->watch_hub;
    /* Joined before anything is read, so nothing falls between the reads and the feed. */
    if (!feed_join(w->hub, w->tenant_id, &w->position)) {
        free(w);
        return cg_err_setr(op->err, CG_RESOURCE_EXHAUSTED, CG_ERR_SERVER_OVERLOADED,
                           "too many tenants are watched on this server; retry on another");
    }
    st = first_reads(env, op, w, first);
    if (st != CG_OK) {
        if (first->has_snapshot)
            cg_usage_tree_cleanup(&first->snapshot);
        memset(first, 0, sizeof *first);
        cg_watcher_free(w);
        return st;
    }
    /* Delivery may not be running yet in a process that just started; it catches up. */
    if (env->wake_streams)
        env->wake_streams(env->wake_ctx);
    *out = w;
    return CG_OK;
}

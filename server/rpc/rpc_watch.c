/* rpc_watch.c - WatchUsage: the process's fan-out (struct cg_watch_hub, made once by the
 * application object), its delivery thread's step, and the stream's open (on the pool) and
 * poll (on a completion-queue thread).
 *
 * Events are durable in PostgreSQL (store.h, "events"). Each server process has one LISTEN
 * connection (the transport's events thread calls cg_rpc_events_step in a loop); on a
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
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/budget_events.h"
#include "rpc/rpc_budget.h"
#include "service/cache.h"

#define MOD "watch"
#define FEED_RING 1024    /* events buffered per watched tenant */
#define FEEDS_MAX 1024    /* tenants watched at once in one process */
#define SCOPES_MAX 4096   /* per-feed scopes whose last seq is remembered (hash slots) */
#define NOTICES_MAX 256   /* notifications handled per step */
#define FETCH_MAX 1000    /* events read per statement */
#define THROTTLE_SLOTS 32 /* per-stream scopes whose USAGE_CHANGED are coalesced */
#define CATCHUP_MARGIN_MS 60000
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

/* The process's fan-out (rpc.h cg_watch_hub_new): the feeds of the watched tenants under
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
static void drop_announced_keys(const struct cg_rpc_env *env, struct cg_store_listener *listener)
{
    struct cg_key_notice keys[CG_STORE_KEY_NOTICES_MAX];
    int nkeys = 0;
    if (cg_store_listener_keys(listener, keys, CG_STORE_KEY_NOTICES_MAX, &nkeys)) {
        cg_cache_key_drop_all(env->svc.cache);
        cg_log(CG_LOG_INFO, MOD, NULL, "every cached API key dropped (cg_keys)");
        return;
    }
    for (int i = 0; i < nkeys; i++) {
        cg_cache_key_drop(env->svc.cache, keys[i].tenant_id, keys[i].key_id);
        cg_log(CG_LOG_DEBUG, MOD, NULL, "API key %s of tenant %s dropped (cg_keys)", keys[i].key_id,
               keys[i].tenant_id);
    }
}

bool cg_rpc_events_step(const struct cg_rpc_env *env, struct cg_store_listener *listener,
                        int timeout_ms)
{
    struct cg_watch_hub *hub = env->svc.watch_hub;
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
        cg_cache_set_live(env->svc.cache, false);
        /* PostgreSQL away: the streams still get their heartbeats; the caller pauses. */
        if (env->svc.wake_streams)
            env->svc.wake_streams(env->svc.wake_ctx);
        return false;
    }
    /* The cache hears of other replicas' writes here (service/cache.h): after a (re)connection
     * it forgets what it had, then each notice drops the rows of its path. */
    if (relistened)
        cg_cache_set_live(env->svc.cache, false);
    cg_cache_set_live(env->svc.cache, true);
    for (int i = 0; i < count; i++)
        cg_cache_drop_path(env->svc.cache, notices[i].tenant_id, &notices[i].ids);
    drop_announced_keys(env, listener);
    if (relistened) {
        /* Notifications sent while nobody listened are lost: read what the table has. */
        int64_t since = hub->listen_ok_ms > 0 ? hub->listen_ok_ms - CATCHUP_MARGIN_MS : 0;
        int nt = since > 0 ? watched_tenants(hub, hub->tenants, FEEDS_MAX) : 0;
        for (int i = 0; i < nt && st == CG_OK; i++)
            st = fetch_into_feed(hub, listener, hub->tenants[i], NULL, 0, since, fetched, &err);
    }
    /* The announced events, grouped by tenant: one read per tenant and step. */
    bool done[NOTICES_MAX] = {false};
    for (int i = 0; i < count && st == CG_OK; i++) {
        if (done[i])
            continue;
        pthread_mutex_lock(&hub->lock);
        bool watched = feed_find(hub, notices[i].tenant_id) != NULL;
        pthread_mutex_unlock(&hub->lock);
        int nw = 0;
        for (int j = i; j < count; j++) {
            if (done[j] || strcmp(notices[j].tenant_id, notices[i].tenant_id) != 0)
                continue;
            done[j] = true;
            if (!watched)
                continue;
            int k = 0;
            while (k < nw && !ids_equal(&wants[k].ids, &notices[j].ids))
                k++;
            if (k == nw) {
                wants[nw].ids = notices[j].ids;
                wants[nw].after_seq = notices[j].seq - 1;
                wants[nw].upto_seq = notices[j].seq;
                nw++;
            } else {
                if (notices[j].seq - 1 < wants[k].after_seq)
                    wants[k].after_seq = notices[j].seq - 1;
                if (notices[j].seq > wants[k].upto_seq)
                    wants[k].upto_seq = notices[j].seq;
            }
        }
        if (nw > 0)
            st = fetch_into_feed(hub, listener, notices[i].tenant_id, wants, nw, 0, fetched, &err);
    }
    if (st == CG_OK)
        hub->listen_ok_ms = cg_wall_ms();
    else
        cg_log(CG_LOG_WARN, MOD, NULL, "reading events failed: %s", cg_err_text(&err));
    if (env->svc.wake_streams)
        env->svc.wake_streams(env->svc.wake_ctx);
    return st == CG_OK; /* a failed read: pause, then catch up */
}

/* ---------------------------------------------------------------- streams --------- */

struct throttle {
    bool used;
    struct cg_scope_ids ids;
    int64_t last_sent_ms; /* cg_mono_ms */
    bool pending;
    struct cg_event event; /* the latest one held back */
};

struct watch {
    struct cg_watch_hub *hub; /* the process's (env->svc.watch_hub), joined at the open */
    char tenant_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    int level;
    bool descendants;
    unsigned types; /* bit t: type t wanted; 0: all */
    char approval_id[CG_UUID_LEN + 1];
    int64_t heartbeat_ms, update_ms;
    uint64_t position;
    int64_t start_seq;          /* the scope's events up to this one came before the stream */
    int64_t last_sent_ms;       /* cg_mono_ms */
    uint64_t missed;            /* events lost to an overflow, not yet told */
    bool decided;               /* approval_id mode: its decision was sent; the stream ends */
    ProtobufCMessage *snapshot; /* in the call's arena; sent first */
    ProtobufCMessage *decision; /* approval_id mode, decided before the stream opened: the
                                 * only message (in the call's arena) */
    struct throttle throttle[THROTTLE_SLOTS];
};

static void watch_free(void *p)
{
    struct watch *w = p;
    if (w == NULL)
        return;
    feed_leave(w->hub, w->tenant_id);
    free(w);
}

static bool matches(const struct watch *w, const struct cg_event *e)
{
    /* An approval the stream can name was requested before it opened (its REQUESTED event is
     * history, which the delivery thread may still bring after the open): only its decision
     * is news. */
    if (w->approval_id[0] != '\0')
        return e->type == CG_EVENT_APPROVAL_DECIDED &&
               strcmp(e->fields.ref_id, w->approval_id) == 0;
    if (w->types != 0 && !(w->types & (1u << e->type)))
        return false;
    /* The watched scope's events committed before the stream opened are not news (the
     * delivery thread may fetch them after the stream joined the tenant's feed). Scopes
     * below it may still show a few such events; their sequence numbers tell. */
    if (ids_equal(&w->ids, &e->ids))
        return e->seq > w->start_seq;
    if (!w->descendants)
        return false;
    const char *mine[] = {w->ids.session_id, w->ids.task_id, w->ids.agent_id};
    const char *theirs[] = {e->ids.session_id, e->ids.task_id, e->ids.agent_id};
    for (int i = 0; i < w->level - 1; i++)
        if (strcmp(mine[i], theirs[i]) != 0)
            return false;
    return true;
}

static const char *type_name(int t)
{
    static const char *const names[] = {
        "",          "snapshot",       "usage changed",      "threshold crossed",
        "warning",   "exhausted",      "approval requested", "approval decided",
        "reset",     "budget changed", "scope closed",       "reservation expired",
        "heartbeat", "overrun"};
    return t >= 0 && t <= CG_EVENT_TYPE_MAX ? names[t] : "event";
}

static Ctxguard__V1__UsageEvent *event_out(struct cg_rpc_call *call, const struct cg_event *e,
                                           uint64_t missed)
{
    Ctxguard__V1__UsageEvent *m =
        NEW(call, Ctxguard__V1__UsageEvent, ctxguard__v1__usage_event__init);
    if (m == NULL)
        return NULL;
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    row.ids = e->ids;
    row.level = e->level;
    row.has_budget = e->has_budget;
    row.mode = e->mode;
    row.limit_tokens = e->limit_tokens;
    row.limit_cost_micros = e->limit_cost_micros;
    row.warning_ratio = e->warning_ratio;
    row.used_tokens = e->used_tokens;
    row.reserved_tokens = e->reserved_tokens;
    row.used_cost_micros = e->used_cost_micros;
    row.reserved_cost_micros = e->reserved_cost_micros;
    row.allocated_tokens = e->allocated_tokens;
    row.approved_extra_tokens = e->approved_extra_tokens;
    row.closed_at_ms = e->closed ? e->occurred_at_ms : 0;
    /* The ratio and remaining as a decision counts them: used + reserved + allocated over
     * limit + approved extra (core/budget.h), saturating. */
    struct cg_level_verdict v;
    memset(&v, 0, sizeof v);
    v.decision = CG_DECISION_ALLOW;
    if (e->has_budget && e->limit_tokens > 0) {
        struct cg_budget_level l;
        cg_rpc_level_from_row(&row, &l);
        l.closed = false; /* the state, not a request: no refusal to mind */
        struct cg_budget_result r;
        cg_budget_decide(&l, 1, 0, 0, &r);
        v.usage_ratio = r.levels[0].usage_ratio;
        v.projected_ratio = v.usage_ratio;
        v.remaining_tokens = r.levels[0].remaining_tokens;
    }
    v.delay_ms = e->fields.delay_ms;
    if ((m->event_id = cg_arena_strdup(call->arena, e->event_id)) == NULL ||
        (m->scope = cg_rpc_scope_out(call, &row)) == NULL ||
        (m->status = cg_rpc_level_status(call, &row, &v)) == NULL)
        return NULL;
    m->type = (Ctxguard__V1__UsageEventType)e->type;
    m->level = (Ctxguard__V1__ScopeLevel)e->level;
    m->sequence = e->seq;
    m->occurred_at_unix_ms = e->occurred_at_ms;
    m->threshold_ratio = e->fields.threshold_ratio;
    m->falling = e->fields.falling;
    m->backpressure_delay_ms = e->fields.delay_ms;
    m->period_start_unix_ms = e->fields.period_start_ms;
    if (e->type == CG_EVENT_RESERVATION_EXPIRED || e->type == CG_EVENT_OVERRUN) {
        Ctxguard__V1__Reservation *r =
            NEW(call, Ctxguard__V1__Reservation, ctxguard__v1__reservation__init);
        if (r == NULL ||
            (r->reservation_id = cg_arena_strdup(call->arena, e->fields.ref_id)) == NULL ||
            (r->scope = cg_rpc_scope_out(call, &row)) == NULL)
            return NULL;
        r->tokens = e->fields.ref_tokens;
        r->state = (Ctxguard__V1__ReservationState)e->fields.ref_state;
        /* OVERRUN: what the Commit recorded, beyond the tokens held. */
        if (e->type == CG_EVENT_OVERRUN &&
            (r->committed_usage = cg_rpc_usage_out(call, &e->fields.ref_usage)) == NULL)
            return NULL;
        m->reservation = r;
    }
    if (e->type == CG_EVENT_APPROVAL_REQUESTED || e->type == CG_EVENT_APPROVAL_DECIDED) {
        Ctxguard__V1__Approval *a = NEW(call, Ctxguard__V1__Approval, ctxguard__v1__approval__init);
        if (a == NULL ||
            (a->approval_id = cg_arena_strdup(call->arena, e->fields.ref_id)) == NULL ||
            (a->scope = cg_rpc_scope_out(call, &row)) == NULL)
            return NULL;
        a->state = (Ctxguard__V1__ApprovalState)e->fields.ref_state;
        m->approval = a;
    }
    if (e->type == CG_EVENT_BUDGET_CHANGED && e->has_budget) {
        row.version = 1;
        if ((m->budget = cg_rpc_budget_out(call, &row)) == NULL)
            return NULL;
    }
    char text[256];
    if (missed > 0)
        snprintf(text, sizeof text,
                 "%s (%llu earlier events were dropped for this watcher: read "
                 "GetUsage)",
                 e->fields.message[0] ? e->fields.message : type_name(e->type),
                 (unsigned long long)missed);
    else
        snprintf(text, sizeof text, "%s",
                 e->fields.message[0] ? e->fields.message : type_name(e->type));
    if ((m->message = cg_arena_strdup(call->arena, text)) == NULL)
        return NULL;
    return m;
}

static struct throttle *throttle_slot(struct watch *w, const struct cg_scope_ids *ids)
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

cg_status cg_rpc_watch_poll(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                            ProtobufCMessage **response, bool *finished)
{
    (void)env;
    (void)request;
    struct watch *w = stream->state;
    *response = NULL;
    *finished = w->decided; /* already over (the transport ends it after the message) */
    if (w->decided)
        return CG_OK;
    int64_t now = cg_mono_ms();
    if (w->snapshot != NULL) {
        *response = w->snapshot;
        w->snapshot = NULL;
        w->last_sent_ms = now;
        return CG_OK;
    }
    if (w->decision != NULL) {
        *response = w->decision;
        w->decision = NULL;
        w->decided = true;
        *finished = true;
        return CG_OK;
    }
    struct cg_event e;
    bool found = false;
    /* USAGE_CHANGED held back by the throttle whose time has come. */
    for (int i = 0; i < THROTTLE_SLOTS && !found; i++) {
        struct throttle *t = &w->throttle[i];
        if (t->used && t->pending && now - t->last_sent_ms >= w->update_ms) {
            e = t->event;
            t->pending = false;
            t->last_sent_ms = now;
            found = true;
        }
    }
    while (!found) {
        pthread_mutex_lock(&w->hub->lock);
        struct feed *f = feed_find(w->hub, w->tenant_id);
        bool have = f != NULL && w->position < f->head;
        if (have) {
            if (f->head - w->position > FEED_RING) {
                w->missed += f->head - FEED_RING - w->position;
                w->position = f->head - FEED_RING;
            }
            e = f->ring[w->position % FEED_RING];
            w->position++;
        }
        pthread_mutex_unlock(&w->hub->lock);
        if (!have)
            break;
        if (!matches(w, &e))
            continue;
        if (e.type == CG_EVENT_USAGE_CHANGED && w->update_ms > 0) {
            struct throttle *t = throttle_slot(w, &e.ids);
            if (t != NULL && now - t->last_sent_ms < w->update_ms) {
                t->pending = true;
                t->event = e;
                continue;
            }
            if (t != NULL) {
                t->pending = false;
                t->last_sent_ms = now;
            }
        }
        found = true;
    }
    if (found) {
        Ctxguard__V1__UsageEvent *m = event_out(call, &e, w->missed);
        if (m == NULL)
            return OOM(call);
        w->missed = 0;
        w->last_sent_ms = now;
        *response = &m->base;
        /* In approval_id mode the decision is the last message: the stream ends with OK
         * once it is out. */
        w->decided = w->approval_id[0] != '\0' && e.type == CG_EVENT_APPROVAL_DECIDED;
        *finished = w->decided;
        return CG_OK;
    }
    if (now - w->last_sent_ms >= w->heartbeat_ms) {
        Ctxguard__V1__UsageEvent *m =
            NEW(call, Ctxguard__V1__UsageEvent, ctxguard__v1__usage_event__init);
        if (m == NULL)
            return OOM(call);
        m->type = CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_HEARTBEAT;
        m->occurred_at_unix_ms = cg_wall_ms();
        m->event_id = "";
        m->message = "heartbeat";
        w->last_sent_ms = now;
        *response = &m->base;
    }
    return CG_OK;
}

/* approval_id mode: the approval must be the tenant's (a watcher of a typo would wait
 * forever); one decided before the stream opened is its only message, at once. */
static cg_status decision_in(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             struct watch *w)
{
    struct cg_approval a;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_approval_get(env->svc.store, w->tenant_id, w->approval_id, cg_wall_ms(),
                                         &a, &serr);
    /* One outside a scope-bound key's subtree is as unknown as another tenant's. */
    if (st == CG_NOT_FOUND ||
        (st == CG_OK && !cg_rpc_scope_reachable(&call->principal, a.ids.session_id, a.ids.task_id)))
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_APPROVAL_NOT_FOUND,
                           "field 'approval_id': no such approval");
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    if (a.state == CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_PENDING)
        return CG_OK;
    struct cg_event e;
    memset(&e, 0, sizeof e);
    snprintf(e.tenant_id, sizeof e.tenant_id, "%s", w->tenant_id);
    e.ids = a.ids;
    e.level = a.level;
    e.type = CG_EVENT_APPROVAL_DECIDED;
    e.occurred_at_ms = a.decided_at_ms ? a.decided_at_ms : a.expires_at_ms;
    snprintf(e.fields.ref_id, sizeof e.fields.ref_id, "%s", a.approval_id);
    e.fields.ref_tokens = a.granted_tokens;
    e.fields.ref_state = a.state;
    Ctxguard__V1__UsageEvent *m = event_out(call, &e, 0);
    if (m == NULL)
        return OOM(call);
    w->decision = &m->base;
    return CG_OK;
}

/* SNAPSHOT: the scope's usage (children to depth 1 with descendants), in the call arena. */
static cg_status snapshot_in(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             struct watch *w)
{
    struct cg_usage_tree tree;
    memset(&tree, 0, sizeof tree);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_usage_tree(env->svc.store, w->tenant_id, &w->ids,
                                       w->descendants && w->level < 4 ? 1 : 0, CG_STORE_PAGE_MAX,
                                       false, &tree, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    Ctxguard__V1__UsageEvent *m =
        NEW(call, Ctxguard__V1__UsageEvent, ctxguard__v1__usage_event__init);
    Ctxguard__V1__ScopeUsage *root = m ? cg_rpc_scope_usage_out(call, &tree.nodes[0]) : NULL;
    if (root != NULL && tree.count > 1) {
        root->children =
            cg_arena_alloc(call->arena, sizeof *root->children * (size_t)(tree.count - 1));
        for (int i = 1; root->children != NULL && i < tree.count; i++) {
            if ((root->children[root->n_children] = cg_rpc_scope_usage_out(call, &tree.nodes[i])) ==
                NULL) {
                root = NULL;
                break;
            }
            root->n_children++;
        }
        if (root != NULL && root->children == NULL)
            root = NULL;
    }
    if (root == NULL || (m->scope = cg_rpc_scope_out(call, &tree.nodes[0].row)) == NULL) {
        cg_usage_tree_cleanup(&tree);
        return OOM(call);
    }
    m->type = CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_SNAPSHOT;
    m->level = (Ctxguard__V1__ScopeLevel)w->level;
    m->occurred_at_unix_ms = cg_wall_ms();
    m->event_id = "";
    m->message = "snapshot";
    m->snapshot = root;
    m->backpressure_delay_ms = root->backpressure_delay_ms;
    cg_usage_tree_cleanup(&tree);
    w->snapshot = &m->base;
    return CG_OK;
}

cg_status cg_rpc_watch_open(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream)
{
    const Ctxguard__V1__WatchUsageRequest *req = (const Ctxguard__V1__WatchUsageRequest *)request;
    struct watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return OOM(call);
    /* approval_id mode names no scope (the approval has one): a scope-bound key then
     * watches from its own subtree, where the approval must be (decision_in). */
    const Ctxguard__V1__Scope *scope = req->scope;
    Ctxguard__V1__Scope bound = CTXGUARD__V1__SCOPE__INIT;
    if (scope == NULL && req->approval_id[0] != '\0' &&
        call->principal.scope_session_id[0] != '\0') {
        bound.session_id = call->principal.scope_session_id;
        bound.task_id = call->principal.scope_task_id;
        scope = &bound;
    }
    cg_status st = cg_rpc_scope_in(call, scope, &w->ids, &w->level);
    for (size_t i = 0; st == CG_OK && i < req->n_event_types; i++) {
        if (!cg_event_type_filterable((int)req->event_types[i]))
            st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                            "field 'event_types[%zu]' must be a type from USAGE_CHANGED to "
                            "RESERVATION_EXPIRED, or OVERRUN (SNAPSHOT and HEARTBEAT have their "
                            "own fields)",
                            i);
        else
            w->types |= 1u << req->event_types[i];
    }
    if (st == CG_OK && req->heartbeat_interval_ms != 0 &&
        (req->heartbeat_interval_ms < 1000 || req->heartbeat_interval_ms > 300000))
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'heartbeat_interval_ms' must be 0 or between 1000 and 300000");
    if (st == CG_OK && req->min_update_interval_ms > 60000)
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'min_update_interval_ms' must be between 0 and 60000");
    if (st == CG_OK && req->approval_id[0] != '\0')
        st = cg_rpc_check_uuid(call, "approval_id", req->approval_id);
    if (st != CG_OK) {
        free(w);
        return st;
    }
    snprintf(w->tenant_id, sizeof w->tenant_id, "%s", call->principal.tenant_id);
    snprintf(w->approval_id, sizeof w->approval_id, "%s", req->approval_id);
    for (char *p = w->approval_id; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    w->descendants = req->include_descendants;
    w->heartbeat_ms =
        req->heartbeat_interval_ms ? req->heartbeat_interval_ms : HEARTBEAT_DEFAULT_MS;
    w->update_ms = req->min_update_interval_ms ? req->min_update_interval_ms : UPDATE_DEFAULT_MS;
    w->last_sent_ms = cg_mono_ms();
    /* The scope must exist (NOT_FOUND naming the id otherwise): a watcher of a typo would
     * wait forever. Joined before the snapshot is read, so nothing falls between them. */
    struct cg_budget_row path[CG_PATH_MAX];
    int n = 0;
    if (env->svc.watch_hub == NULL) {
        free(w);
        return cg_err_set(&call->err, CG_UNAVAILABLE, "WatchUsage is not served by this process");
    }
    w->hub = env->svc.watch_hub;
    if (!feed_join(w->hub, w->tenant_id, &w->position)) {
        free(w);
        return cg_err_setr(&call->err, CG_RESOURCE_EXHAUSTED, CG_ERR_SERVER_OVERLOADED,
                           "too many tenants are watched on this server; retry on another");
    }
    stream->state = w;
    stream->state_free = watch_free;
    if ((st = cg_rpc_read_path(call, env, &w->ids, path, &n)) != CG_OK)
        return st;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_event_seq(env->svc.store, w->tenant_id, &w->ids, &w->start_seq, &serr) != CG_OK)
        return cg_rpc_store_error(call, &serr);
    if (req->send_snapshot && (st = snapshot_in(call, env, w)) != CG_OK)
        return st;
    if (w->approval_id[0] != '\0' && (st = decision_in(call, env, w)) != CG_OK)
        return st;
    /* Delivery may not be running yet in a process that just started; it catches up. */
    if (env->svc.wake_streams)
        env->svc.wake_streams(env->svc.wake_ctx);
    return CG_OK;
}

/* rpc_watch.c - WatchUsage: the stream's open (on the open lane of transport/server.c, apart
 * from the pool's blocking work: decode, validate, open a watcher through service/watch.h, encode
 * its snapshot or decision) and poll (on a completion-queue thread: the watcher's next event or
 * heartbeat, encoded). The fan-out itself, the events thread's step and what a watcher matches live
 * in service/watch.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/budget_events.h"
#include "rpc/rpc_budget.h"
#include "service/budget_path.h"
#include "service/watch.h"

#define HEARTBEAT_DEFAULT_MS 15000
#define UPDATE_DEFAULT_MS 1000

/* A stream's state: its watcher and what it sends before the watcher's events. */
struct watch {
    struct cg_watcher *watcher;
    bool approval_mode;         /* the stream ends after the approval's decision */
    bool decided;               /* approval mode: its decision was sent; the stream ends */
    ProtobufCMessage *snapshot; /* in the call's arena; sent first */
    ProtobufCMessage *decision; /* approval mode, decided before the stream opened: the
                                 * only message (in the call's arena) */
};

static void watch_free(void *p)
{
    struct watch *w = p;
    if (w == NULL)
        return;
    cg_watcher_free(w->watcher);
    free(w);
}

static const char *type_name(int t)
{
    static const char *const names[] = {
        "",          "snapshot",       "usage changed",      "threshold crossed",
        "warning",   "exhausted",      "approval requested", "approval decided",
        "reset",     "budget changed", "scope closed",       "reservation expired",
        "heartbeat", "overrun",        "forecast exhaustion"};
    return t >= 0 && t <= CG_EVENT_TYPE_MAX ? names[t] : "event";
}

/* A FORECAST_EXHAUSTION event's forecast: migration 0025 keeps the rate in ref_tokens and
 * the exhaustion time in period_start_ms. */
static Ctxguard__V1__SpendForecast *forecast_out(struct cg_rpc_call *call, const struct cg_event *e)
{
    Ctxguard__V1__SpendForecast *f =
        NEW(call, Ctxguard__V1__SpendForecast, ctxguard__v1__spend_forecast__init);
    if (f == NULL)
        return NULL;
    f->tokens_per_minute = (double)e->fields.ref_tokens;
    f->exhaustion_unix_ms = e->fields.period_start_ms;
    if (e->fields.period_start_ms > e->occurred_at_ms)
        f->seconds_to_exhaustion = (double)(e->fields.period_start_ms - e->occurred_at_ms) / 1000.0;
    return f;
}

/* The event's message (its own, or its type's name), saying what the watcher lost before it
 * (watch.h cg_watcher_next's *missed), in the call's arena. */
static char *message_out(struct cg_rpc_call *call, const struct cg_event *e, uint64_t missed)
{
    const char *what = e->fields.message[0] ? e->fields.message : type_name(e->type);
    char text[256];
    if (missed == CG_WATCH_MISSED_UNKNOWN)
        snprintf(text, sizeof text,
                 "%s (older stored events were left out of this resume: read GetUsage)", what);
    else if (missed > 0)
        snprintf(text, sizeof text,
                 "%s (%llu earlier events were dropped for this watcher: read GetUsage)", what,
                 (unsigned long long)missed);
    else
        snprintf(text, sizeof text, "%s", what);
    return cg_arena_strdup(call->arena, text);
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
        cg_budget_row_level(&row, &l);
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
    if (e->type == CG_EVENT_FORECAST_EXHAUSTION) {
        if ((m->forecast = forecast_out(call, e)) == NULL)
            return NULL;
        m->period_start_unix_ms = 0;
    }
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
    if ((m->message = message_out(call, e, missed)) == NULL)
        return NULL;
    return m;
}

static ProtobufCMessage *heartbeat_out(struct cg_rpc_call *call)
{
    Ctxguard__V1__UsageEvent *m =
        NEW(call, Ctxguard__V1__UsageEvent, ctxguard__v1__usage_event__init);
    if (m == NULL)
        return NULL;
    m->type = CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_HEARTBEAT;
    m->occurred_at_unix_ms = cg_wall_ms();
    m->event_id = "";
    m->message = "heartbeat";
    return &m->base;
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
        cg_watcher_sent(w->watcher, now);
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
    uint64_t missed = 0;
    switch (cg_watcher_next(w->watcher, now, &e, &missed)) {
    case CG_WATCH_EVENT: {
        Ctxguard__V1__UsageEvent *m = event_out(call, &e, missed);
        if (m == NULL)
            return OOM(call);
        *response = &m->base;
        /* In approval mode the decision is the last message: the stream ends with OK once
         * it is out. */
        w->decided = w->approval_mode && e.type == CG_EVENT_APPROVAL_DECIDED;
        *finished = w->decided;
        return CG_OK;
    }
    case CG_WATCH_HEARTBEAT:
        if ((*response = heartbeat_out(call)) == NULL)
            return OOM(call);
        return CG_OK;
    case CG_WATCH_NOTHING:
        break;
    }
    return CG_OK;
}

/* SNAPSHOT: the scope's usage (children to depth 1 with descendants), in the call arena. */
static ProtobufCMessage *snapshot_out(struct cg_rpc_call *call, const struct cg_usage_tree *tree,
                                      int level)
{
    Ctxguard__V1__UsageEvent *m =
        NEW(call, Ctxguard__V1__UsageEvent, ctxguard__v1__usage_event__init);
    Ctxguard__V1__ScopeUsage *root = m ? cg_rpc_scope_usage_out(call, &tree->nodes[0]) : NULL;
    if (root != NULL && tree->count > 1) {
        root->children =
            cg_arena_alloc(call->arena, sizeof *root->children * (size_t)(tree->count - 1));
        for (int i = 1; root->children != NULL && i < tree->count; i++) {
            if ((root->children[root->n_children] =
                     cg_rpc_scope_usage_out(call, &tree->nodes[i])) == NULL) {
                root = NULL;
                break;
            }
            root->n_children++;
        }
        if (root != NULL && root->children == NULL)
            root = NULL;
    }
    if (root == NULL || (m->scope = cg_rpc_scope_out(call, &tree->nodes[0].row)) == NULL)
        return NULL;
    m->type = CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_SNAPSHOT;
    m->level = (Ctxguard__V1__ScopeLevel)level;
    m->occurred_at_unix_ms = cg_wall_ms();
    m->event_id = "";
    m->message = "snapshot";
    m->snapshot = root;
    m->backpressure_delay_ms = root->backpressure_delay_ms;
    return &m->base;
}

/* The request's fields into *spec, each checked (errors name the field). */
static cg_status spec_in(struct cg_rpc_call *call, const Ctxguard__V1__WatchUsageRequest *req,
                         struct cg_watch_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    /* Approval mode names no scope (the approval has one): a scope-bound key then
     * watches from its own subtree, where the approval must be (service/watch.c). */
    const Ctxguard__V1__Scope *scope = req->scope;
    Ctxguard__V1__Scope bound = CTXGUARD__V1__SCOPE__INIT;
    if (scope == NULL && req->approval_id[0] != '\0' &&
        call->principal.scope_session_id[0] != '\0') {
        bound.session_id = call->principal.scope_session_id;
        bound.task_id = call->principal.scope_task_id;
        scope = &bound;
    }
    cg_status st = cg_rpc_scope_in(call, scope, &spec->ids, &spec->level);
    for (size_t i = 0; st == CG_OK && i < req->n_event_types; i++) {
        if (!cg_event_type_filterable((int)req->event_types[i]))
            st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                            "field 'event_types[%zu]' must be a type from USAGE_CHANGED to "
                            "RESERVATION_EXPIRED, or OVERRUN (SNAPSHOT and HEARTBEAT have their "
                            "own fields)",
                            i);
        else
            spec->types |= 1u << req->event_types[i];
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
    if (st == CG_OK && req->resume_from_unix_ms < 0)
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'resume_from_unix_ms' must be 0 or a time in unix milliseconds");
    if (st == CG_OK && req->resume_from_unix_ms > 0 && req->approval_id[0] != '\0')
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'resume_from_unix_ms' cannot be set with 'approval_id' (an "
                        "approval's stream is its one decision)");
    if (st != CG_OK)
        return st;
    snprintf(spec->approval_id, sizeof spec->approval_id, "%s", req->approval_id);
    for (char *p = spec->approval_id; *p; p++)
        if (*p >= 'A' && *p <= 'F')
            *p = (char)(*p - 'A' + 'a');
    spec->descendants = req->include_descendants;
    spec->heartbeat_ms =
        req->heartbeat_interval_ms ? req->heartbeat_interval_ms : HEARTBEAT_DEFAULT_MS;
    spec->update_ms = req->min_update_interval_ms ? req->min_update_interval_ms : UPDATE_DEFAULT_MS;
    spec->send_snapshot = req->send_snapshot;
    spec->resume_from_ms = req->resume_from_unix_ms;
    return CG_OK;
}

/* The first messages of the stream, encoded into the call's arena. */
static cg_status first_out(struct cg_rpc_call *call, const struct cg_watch_spec *spec,
                           const struct cg_watch_first *first, struct watch *w)
{
    if (first->has_snapshot &&
        (w->snapshot = snapshot_out(call, &first->snapshot, spec->level)) == NULL)
        return OOM(call);
    if (first->has_decision) {
        Ctxguard__V1__UsageEvent *m = event_out(call, &first->decision, 0);
        if (m == NULL)
            return OOM(call);
        w->decision = &m->base;
    }
    return CG_OK;
}

cg_status cg_rpc_watch_open(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream)
{
    const Ctxguard__V1__WatchUsageRequest *req = (const Ctxguard__V1__WatchUsageRequest *)request;
    struct cg_watch_spec spec;
    cg_status st = spec_in(call, req, &spec);
    if (st != CG_OK)
        return st;
    struct watch *w = calloc(1, sizeof *w);
    if (w == NULL)
        return OOM(call);
    w->approval_mode = spec.approval_id[0] != '\0';
    stream->state = w;
    stream->state_free = watch_free;
    struct cg_op op = cg_rpc_op(call);
    struct cg_watch_first first;
    if ((st = cg_watch_open(&env->svc, &op, &spec, &w->watcher, &first)) != CG_OK)
        return st;
    st = first_out(call, &spec, &first, w);
    cg_watch_first_cleanup(&first);
    return st;
}

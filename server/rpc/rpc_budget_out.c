/* rpc_budget_out.c - BudgetService's answers: store rows, core decisions, reservations and
 * approvals as proto messages in the call's arena (rpc_budget.h), and the refusals that name
 * the level that refused. Encoders only: they call no handler.
 */
#include "rpc/rpc_budget.h"

#include <stdio.h>
#include <string.h>

#include "core/budget.h"
#include "ctxguard/v1/budget.pb-c.h"

/* ---------------------------------------------------------------- conversions ----- */

/* id in the call's arena: the level above's copy when it is the same (the levels of a path
 * share their ids), protobuf-c's empty string when empty. */
static char *id_out(struct cg_rpc_call *call, const char *id, char *above)
{
    if (id[0] == '\0')
        return (char *)protobuf_c_empty_string;
    if (above != NULL && strcmp(above, id) == 0)
        return above;
    return cg_arena_strdup(call->arena, id);
}

/* The Scope message of a path level, its ids shared with the Scope of the level above when
 * given (NULL: none). */
static Ctxguard__V1__Scope *scope_below(struct cg_rpc_call *call, const struct cg_budget_row *row,
                                        const Ctxguard__V1__Scope *above)
{
    Ctxguard__V1__Scope *s = NEW(call, Ctxguard__V1__Scope, ctxguard__v1__scope__init);
    if (s == NULL)
        return NULL;
    s->session_id = id_out(call, row->ids.session_id, above ? above->session_id : NULL);
    s->task_id = id_out(call, row->ids.task_id, above ? above->task_id : NULL);
    s->agent_id = id_out(call, row->ids.agent_id, above ? above->agent_id : NULL);
    return s->session_id && s->task_id && s->agent_id ? s : NULL;
}

/* The Scope message of a path level: the ids down to that level. */
Ctxguard__V1__Scope *cg_rpc_scope_out(struct cg_rpc_call *call, const struct cg_budget_row *row)
{
    return scope_below(call, row, NULL);
}

static Ctxguard__V1__BudgetSettings *settings_out(struct cg_rpc_call *call,
                                                  const struct cg_budget_row *row)
{
    Ctxguard__V1__BudgetSettings *s =
        NEW(call, Ctxguard__V1__BudgetSettings, ctxguard__v1__budget_settings__init);
    if (s == NULL)
        return NULL;
    s->limit_tokens = row->limit_tokens;
    s->limit_cost_micros = row->limit_cost_micros;
    s->mode = (Ctxguard__V1__BudgetMode)row->mode;
    s->warning_ratio = row->warning_ratio;
    s->backpressure_disabled = row->backpressure_disabled;
    s->exclude_cache_read_tokens = row->exclude_cache_read_tokens;
    s->allocate_from_parent = row->allocate_from_parent;
    /* Defaults are shown as what applies. */
    struct cg_tier tiers[CG_TIERS_MAX];
    int n = row->ntiers;
    for (int i = 0; i < n; i++)
        tiers[i] = (struct cg_tier){row->tier_ratio[i], row->tier_delay_ms[i]};
    if (n == 0 && !row->backpressure_disabled)
        cg_budget_default_tiers(tiers, &n);
    s->backpressure_tiers = cg_arena_calloc(call->arena, (size_t)n + 1, sizeof(void *));
    if (s->backpressure_tiers == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        Ctxguard__V1__BackpressureTier *t =
            NEW(call, Ctxguard__V1__BackpressureTier, ctxguard__v1__backpressure_tier__init);
        if (t == NULL)
            return NULL;
        t->threshold_ratio = tiers[i].ratio;
        t->delay_ms = tiers[i].delay_ms;
        s->backpressure_tiers[i] = t;
    }
    s->n_backpressure_tiers = (size_t)n;
    s->on_store_failure = (Ctxguard__V1__OnStoreFailure)row->on_store_failure;
    s->local_allowance_tokens = row->local_allowance_tokens;
    s->reset_period = (Ctxguard__V1__ResetPeriod)row->reset_period;
    s->reservation_ttl_ms = row->reservation_ttl_ms;
    s->approval_ttl_ms = row->approval_ttl_ms;
    s->description = cg_arena_strdup(call->arena, row->description);
    return s->description ? s : NULL;
}

Ctxguard__V1__Budget *cg_rpc_budget_out(struct cg_rpc_call *call, const struct cg_budget_row *row)
{
    Ctxguard__V1__Budget *b = NEW(call, Ctxguard__V1__Budget, ctxguard__v1__budget__init);
    if (b == NULL || (b->scope = cg_rpc_scope_out(call, row)) == NULL)
        return NULL;
    b->level = (Ctxguard__V1__ScopeLevel)row->level;
    if (row->has_budget && (b->settings = settings_out(call, row)) == NULL)
        return NULL;
    b->version = row->version;
    b->created_at_unix_ms = row->created_at_ms;
    b->updated_at_unix_ms = row->updated_at_ms;
    b->updated_by_key_id = cg_arena_strdup(call->arena, row->updated_by_key_id);
    b->state = row->closed_at_ms ? CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED
                                 : CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_OPEN;
    b->closed_at_unix_ms = row->closed_at_ms;
    b->period_start_unix_ms = row->period_start_ms;
    b->next_reset_unix_ms = row->next_reset_ms;
    return b->updated_by_key_id ? b : NULL;
}

/* A level's status, its Scope's ids shared with above (NULL: none). */
static Ctxguard__V1__LevelStatus *level_below(struct cg_rpc_call *call,
                                              const struct cg_budget_row *row,
                                              const struct cg_level_verdict *v,
                                              const Ctxguard__V1__Scope *above)
{
    Ctxguard__V1__LevelStatus *l =
        NEW(call, Ctxguard__V1__LevelStatus, ctxguard__v1__level_status__init);
    if (l == NULL || (l->scope = scope_below(call, row, above)) == NULL)
        return NULL;
    l->level = (Ctxguard__V1__ScopeLevel)row->level;
    l->has_budget = row->has_budget;
    l->mode = (Ctxguard__V1__BudgetMode)(row->has_budget ? row->mode : 0);
    l->limit_tokens = row->limit_tokens;
    l->used_tokens = row->used_tokens;
    l->reserved_tokens = row->reserved_tokens;
    l->approved_extra_tokens = row->approved_extra_tokens;
    l->allocated_tokens = row->allocated_tokens;
    l->remaining_tokens = v->remaining_tokens;
    l->usage_ratio = v->usage_ratio;
    l->projected_ratio = v->projected_ratio;
    l->limit_cost_micros = row->limit_cost_micros;
    l->used_cost_micros = row->used_cost_micros;
    l->reserved_cost_micros = row->reserved_cost_micros;
    l->decision = (Ctxguard__V1__Decision)v->decision;
    l->backpressure_delay_ms = v->delay_ms;
    l->warning_ratio = row->warning_ratio;
    l->state = row->closed_at_ms ? CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED
                                 : CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_OPEN;
    return l;
}

Ctxguard__V1__LevelStatus *cg_rpc_level_status(struct cg_rpc_call *call,
                                               const struct cg_budget_row *row,
                                               const struct cg_level_verdict *v)
{
    return level_below(call, row, v, NULL);
}

/* levels[] and their count for a reply, from rows and a result. */
cg_status cg_rpc_levels_out(struct cg_rpc_call *call, const struct cg_budget_row *rows, int n,
                            const struct cg_budget_result *r, Ctxguard__V1__LevelStatus ***out,
                            size_t *nout)
{
    *out = cg_arena_calloc(call->arena, (size_t)n + 1, sizeof **out);
    if (*out == NULL)
        return OOM(call);
    for (int i = 0; i < n; i++)
        if (((*out)[i] = level_below(call, &rows[i], &r->levels[i],
                                     i > 0 ? (*out)[i - 1]->scope : NULL)) == NULL)
            return OOM(call);
    *nout = (size_t)n;
    return CG_OK;
}

static const struct {
    unsigned bit;
    Ctxguard__V1__ReasonCode code;
    const char *text;
} reason_table[] = {
    {CG_REASON_CLOSED, CTXGUARD__V1__REASON_CODE__REASON_CODE_SCOPE_CLOSED, "the scope is closed"},
    {CG_REASON_TOKEN_LIMIT, CTXGUARD__V1__REASON_CODE__REASON_CODE_TOKEN_LIMIT,
     "the request would pass the token limit"},
    {CG_REASON_COST_LIMIT, CTXGUARD__V1__REASON_CODE__REASON_CODE_COST_LIMIT,
     "the request would pass the cost limit"},
    {CG_REASON_WARNING, CTXGUARD__V1__REASON_CODE__REASON_CODE_WARNING_THRESHOLD,
     "usage at or over the warning ratio"},
    {CG_REASON_BACKPRESSURE, CTXGUARD__V1__REASON_CODE__REASON_CODE_BACKPRESSURE,
     "a backpressure tier is reached"},
};

cg_status cg_rpc_reasons_out(struct cg_rpc_call *call, const struct cg_budget_row *rows, int n,
                             const struct cg_budget_result *r, Ctxguard__V1__DecisionReason ***out,
                             size_t *nout)
{
    /* Room for one APPROVED_EXTENSION per level and an approval reason (rpc_budget_approvals.c). */
    size_t count = 0, cap = (size_t)n * (sizeof reason_table / sizeof reason_table[0] + 1) + 1;
    *out = cg_arena_calloc(call->arena, cap + 1, sizeof **out);
    if (*out == NULL)
        return OOM(call);
    for (int i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof reason_table / sizeof reason_table[0]; k++) {
            if (!(r->levels[i].reasons & reason_table[k].bit))
                continue;
            Ctxguard__V1__DecisionReason *d =
                NEW(call, Ctxguard__V1__DecisionReason, ctxguard__v1__decision_reason__init);
            if (d == NULL)
                return OOM(call);
            d->code = reason_table[k].code;
            d->level = (Ctxguard__V1__ScopeLevel)rows[i].level;
            /* A cost reason speaks of money: what is used and held against the cost limit. */
            if (reason_table[k].bit == CG_REASON_COST_LIMIT)
                d->message = cg_arena_sprintf(
                    call->arena, "%s: %s ($%.6f used and reserved of $%.6f)",
                    cg_level_name((cg_level)rows[i].level), reason_table[k].text,
                    (double)(rows[i].used_cost_micros + rows[i].reserved_cost_micros) / 1e6,
                    (double)rows[i].limit_cost_micros / 1e6);
            else
                d->message =
                    cg_arena_sprintf(call->arena, "%s: %s (%.3f of %lld tokens)",
                                     cg_level_name((cg_level)rows[i].level), reason_table[k].text,
                                     r->levels[i].projected_ratio, (long long)rows[i].limit_tokens);
            if (d->message == NULL)
                return OOM(call);
            (*out)[count++] = d;
        }
    }
    *nout = count;
    return cg_rpc_extension_reasons(call, rows, n, r, *out, nout);
}

/* ---------------------------------------------------------------- replies --------- */

/* Holds the reply for the backpressure delay unless the caller asked for RETURN_ONLY. */
uint32_t cg_rpc_hold(struct cg_rpc_call *call, int delay_mode, uint32_t delay_ms)
{
    if (delay_mode == CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY)
        return 0;
    call->reply_delay_ms = delay_ms;
    return delay_ms;
}

Ctxguard__V1__TokenUsage *cg_rpc_usage_out(struct cg_rpc_call *call, const struct cg_usage *u)
{
    Ctxguard__V1__TokenUsage *t =
        NEW(call, Ctxguard__V1__TokenUsage, ctxguard__v1__token_usage__init);
    if (t == NULL)
        return NULL;
    t->input_tokens = u->input_tokens;
    t->output_tokens = u->output_tokens;
    t->cache_read_tokens = u->cache_read_tokens;
    t->cache_write_tokens = u->cache_write_tokens;
    t->cost_micros = u->cost_micros;
    return t;
}

Ctxguard__V1__Reservation *cg_rpc_reservation_out(struct cg_rpc_call *call,
                                                  const struct cg_reservation *res)
{
    Ctxguard__V1__Reservation *r =
        NEW(call, Ctxguard__V1__Reservation, ctxguard__v1__reservation__init);
    if (r == NULL)
        return NULL;
    struct cg_budget_row ids_row;
    memset(&ids_row, 0, sizeof ids_row);
    ids_row.ids = res->ids;
    r->reservation_id = cg_arena_strdup(call->arena, res->reservation_id);
    r->scope = cg_rpc_scope_out(call, &ids_row);
    r->tokens = res->tokens;
    r->estimated_cost_micros = res->cost_micros;
    r->model = cg_arena_strdup(call->arena, res->model);
    r->estimate_id = cg_arena_strdup(call->arena, res->estimate_id);
    r->state = (Ctxguard__V1__ReservationState)res->state;
    r->created_at_unix_ms = res->created_at_ms;
    r->expires_at_unix_ms = res->expires_at_ms;
    r->settled_at_unix_ms = res->settled_at_ms;
    if (res->state == CTXGUARD__V1__RESERVATION_STATE__RESERVATION_STATE_COMMITTED &&
        (r->committed_usage = cg_rpc_usage_out(call, &res->committed)) == NULL)
        return NULL;
    if (!r->reservation_id || !r->scope || !r->model || !r->estimate_id)
        return NULL;
    return r;
}

/* ---------------------------------------------------------------- approvals ------- */

cg_status cg_rpc_approval_reason(struct cg_rpc_call *call,
                                 const struct cg_budget_approval_gate *gate,
                                 Ctxguard__V1__DecisionReason **reasons, size_t *nreasons)
{
    if (!gate->involved)
        return CG_OK;
    Ctxguard__V1__DecisionReason *d =
        NEW(call, Ctxguard__V1__DecisionReason, ctxguard__v1__decision_reason__init);
    if (d == NULL)
        return OOM(call);
    const struct cg_approval *a = &gate->approval;
    const char *level = cg_level_name((cg_level)a->level);
    d->level = (Ctxguard__V1__ScopeLevel)a->level;
    switch (gate->outcome) {
    case CG_APPROVAL_OPENED:
        d->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_APPROVAL_REQUESTED;
        d->message = cg_arena_sprintf(call->arena,
                                      "%s: approval %s opened for %lld tokens; retry once it is "
                                      "approved",
                                      level, a->approval_id, (long long)a->requested_tokens);
        break;
    case CG_APPROVAL_STILL_PENDING:
        d->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_APPROVAL_PENDING;
        d->message =
            cg_arena_sprintf(call->arena, "%s: approval %s is pending", level, a->approval_id);
        break;
    default:
        d->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_APPROVAL_DENIED;
        d->message = cg_arena_sprintf(call->arena,
                                      "%s: approval %s was denied; the limit stands until the "
                                      "budget changes",
                                      level, a->approval_id);
        break;
    }
    if (d->message == NULL)
        return OOM(call);
    reasons[(*nreasons)++] = d;
    return CG_OK;
}

cg_status cg_rpc_extension_reasons(struct cg_rpc_call *call, const struct cg_budget_row *rows,
                                   int n, const struct cg_budget_result *r,
                                   Ctxguard__V1__DecisionReason **reasons, size_t *nreasons)
{
    for (int i = 0; i < n; i++) {
        const struct cg_level_verdict *v = &r->levels[i];
        const struct cg_budget_row *row = &rows[i];
        if (!row->has_budget || row->approved_extra_tokens <= 0 ||
            v->decision == CG_DECISION_DENY || v->decision == CG_DECISION_REQUIRE_APPROVAL)
            continue;
        /* Over the limit as set, within it as extended. */
        double effective = (double)row->limit_tokens + (double)row->approved_extra_tokens;
        if (v->projected_ratio * effective <= (double)row->limit_tokens)
            continue;
        Ctxguard__V1__DecisionReason *d =
            NEW(call, Ctxguard__V1__DecisionReason, ctxguard__v1__decision_reason__init);
        if (d == NULL)
            return OOM(call);
        d->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_APPROVED_EXTENSION;
        d->level = (Ctxguard__V1__ScopeLevel)row->level;
        d->message = cg_arena_sprintf(
            call->arena, "%s: within the limit of %lld tokens thanks to %lld approved",
            cg_level_name((cg_level)row->level), (long long)row->limit_tokens,
            (long long)row->approved_extra_tokens);
        if (d->message == NULL)
            return OOM(call);
        reasons[(*nreasons)++] = d;
    }
    return CG_OK;
}

Ctxguard__V1__Approval *cg_rpc_approval_out(struct cg_rpc_call *call, const struct cg_approval *a)
{
    Ctxguard__V1__Approval *m = NEW(call, Ctxguard__V1__Approval, ctxguard__v1__approval__init);
    if (m == NULL)
        return NULL;
    struct cg_budget_row ids_row;
    memset(&ids_row, 0, sizeof ids_row);
    ids_row.ids = a->ids;
    m->approval_id = cg_arena_strdup(call->arena, a->approval_id);
    m->scope = cg_rpc_scope_out(call, &ids_row);
    m->level = (Ctxguard__V1__ScopeLevel)a->level;
    m->state = (Ctxguard__V1__ApprovalState)a->state;
    m->requested_tokens = a->requested_tokens;
    m->overage_tokens = a->overage_tokens;
    m->granted_tokens = a->granted_tokens;
    m->limit_tokens = a->limit_tokens;
    m->used_tokens = a->used_tokens;
    m->reserved_tokens = a->reserved_tokens;
    m->model = cg_arena_strdup(call->arena, a->model);
    m->estimated_cost_micros = a->estimated_cost_micros;
    m->reason = cg_arena_strdup(call->arena, a->reason);
    m->requested_at_unix_ms = a->requested_at_ms;
    m->expires_at_unix_ms = a->expires_at_ms;
    m->decided_at_unix_ms = a->decided_at_ms;
    m->decided_by = cg_arena_strdup(call->arena, a->decided_by);
    m->decided_by_key_id = cg_arena_strdup(call->arena, a->decided_by_key_id);
    m->decision_note = cg_arena_strdup(call->arena, a->decision_note);
    m->requested_by_key_id = cg_arena_strdup(call->arena, a->requested_by_key_id);
    if (!m->approval_id || !m->scope || !m->model || !m->reason || !m->decided_by ||
        !m->decided_by_key_id || !m->decision_note || !m->requested_by_key_id)
        return NULL;
    return m;
}

/* ---------------------------------------------------------------- Reserve / Commit - */

cg_status cg_rpc_reserve_reply(struct cg_rpc_call *call, int delay_mode,
                               const struct cg_budget_row *path, int n,
                               const struct cg_budget_result *decided,
                               const struct cg_reservation *res, ProtobufCMessage **response)
{
    Ctxguard__V1__ReserveResponse *resp =
        NEW(call, Ctxguard__V1__ReserveResponse, ctxguard__v1__reserve_response__init);
    if (resp == NULL)
        return OOM(call);
    cg_status st;
    resp->decision = (Ctxguard__V1__Decision)decided->decision;
    resp->backpressure_delay_ms = decided->delay_ms;
    resp->delay_held_ms = cg_rpc_hold(call, delay_mode, decided->delay_ms);
    call->decision = (int)resp->decision;
    call->decision_delay_ms = decided->delay_ms;
    if ((st = cg_rpc_reasons_out(call, path, n, decided, &resp->reasons, &resp->n_reasons)) !=
        CG_OK)
        return st;
    if (decided->tightest >= 0) {
        resp->tightest_level = (Ctxguard__V1__ScopeLevel)path[decided->tightest].level;
        resp->tightest_ratio = decided->tightest_ratio;
    }
    /* Levels after the hold. */
    struct cg_budget_result r;
    cg_budget_path_decide(path, n, 0, 0, &r);
    if ((resp->reservation = cg_rpc_reservation_out(call, res)) == NULL)
        return OOM(call);
    if ((st = cg_rpc_levels_out(call, path, n, &r, &resp->levels, &resp->n_levels)) != CG_OK)
        return st;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_commit_finish(struct cg_rpc_call *call, Ctxguard__V1__CommitResponse *resp,
                               const struct cg_reservation *res, const struct cg_usage *usage,
                               bool price_known, const struct cg_budget_row *path, int n,
                               ProtobufCMessage **response)
{
    struct cg_budget_result r;
    cg_budget_path_decide(path, n, 0, 0, &r);
    if ((resp->reservation = cg_rpc_reservation_out(call, res)) == NULL ||
        (resp->recorded_usage = cg_rpc_usage_out(call, usage)) == NULL)
        return OOM(call);
    resp->price_known = price_known;
    if (!resp->calibration_updated)
        resp->calibration_factor = 1.0;
    cg_status st = cg_rpc_levels_out(call, path, n, &r, &resp->levels, &resp->n_levels);
    if (st != CG_OK)
        return st;
    *response = &resp->base;
    return CG_OK;
}

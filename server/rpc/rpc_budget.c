/* rpc_budget.c - BudgetService: SetBudget, GetBudget, CheckBudget, Reserve, Commit, Release,
 * RecordUsage.
 *
 * Every write runs in one PostgreSQL transaction that locks the rows of the scope's path,
 * tenant first (store.h), so no interleaving of callers on any number of replicas can act
 * on stale counters; core/budget decides on what the transaction read. A success reply
 * means the transaction committed. Allocation from the parent (allocate_from_parent) is
 * kept by PostgreSQL (migration 0013's trigger); here SetBudget checks that the parent has
 * the share free, and decisions count it (core/budget.h).
 */
#include "rpc/rpc_budget.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/budget.h"
#include "core/budget_events.h"
#include "core/preset.h"
#include "core/price.h"
#include "core/utf8.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "service/budget.h"
#include "service/cache.h"
#include "service/budget_reserve.h"
#include "service/budget_set.h"

#define DEFAULT_WARNING 0.8
#define RESERVATION_TTL_MIN_MS 1000u
#define RESERVATION_TTL_MAX_MS 3600000u
/* How far in the future a RecordUsage time may be: the caller's clock may run ahead. */
#define OCCURRED_AT_SKEW_MS 60000
#define LOCAL_ALLOWANCE_MAX 10000000LL

/* ---------------------------------------------------------------- SetBudget ------- */

/* The token limit of settings: the one given, else the preset's for the level (the
 * request's preset, else the server's default_preset). */
static cg_status limit_in(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                          const Ctxguard__V1__BudgetSettings *s, int level, int64_t *limit)
{
    *limit = s->limit_tokens;
    const struct cg_preset *p = s->preset ? cg_preset_get((int)s->preset)
                                          : cg_preset_by_name(env->svc.config->default_preset);
    if (s->preset != 0 && p == NULL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.preset': unknown value %d", (int)s->preset);
    if (s->limit_tokens != 0)
        return CG_OK;
    if ((*limit = cg_preset_budget(p, level)) == 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.limit_tokens' is required: preset %s gives no "
                          "budget to a %s",
                          p ? p->name : "(none)", cg_level_name((cg_level)level));
    return CG_OK;
}

/* settings.on_store_failure and the local allowance it may need. */
static cg_status check_store_failure(struct cg_rpc_call *call,
                                     const Ctxguard__V1__BudgetSettings *s)
{
    if (s->on_store_failure > CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_LOCAL_ALLOWANCE ||
        s->on_store_failure < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.on_store_failure': unknown value %d",
                          s->on_store_failure);
    bool allowance =
        s->on_store_failure == CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_LOCAL_ALLOWANCE;
    if (allowance &&
        (s->local_allowance_tokens < 1 || s->local_allowance_tokens > LOCAL_ALLOWANCE_MAX))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.local_allowance_tokens' must be between 1 and %lld "
                          "with on_store_failure LOCAL_ALLOWANCE",
                          (long long)LOCAL_ALLOWANCE_MAX);
    if (!allowance && s->local_allowance_tokens != 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.local_allowance_tokens' needs on_store_failure "
                          "LOCAL_ALLOWANCE");
    return CG_OK;
}

/* settings.reset_period: a known value, and a period for tenant budgets only. */
static cg_status check_reset_period(struct cg_rpc_call *call, const Ctxguard__V1__BudgetSettings *s,
                                    int level)
{
    if (s->reset_period < 0 || s->reset_period > CTXGUARD__V1__RESET_PERIOD__RESET_PERIOD_MONTHLY)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.reset_period': unknown value %d", s->reset_period);
    if (s->reset_period > CTXGUARD__V1__RESET_PERIOD__RESET_PERIOD_NONE) {
        if (level != CG_LEVEL_TENANT)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'settings.reset_period' is for tenant budgets only");
    }
    return CG_OK;
}

/* settings.approval_ttl_ms: with mode APPROVAL only, within its bounds. */
static cg_status check_approval_ttl(struct cg_rpc_call *call, const Ctxguard__V1__BudgetSettings *s)
{
    bool approval_mode = s->mode == CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_APPROVAL;
    if (s->approval_ttl_ms != 0 && !approval_mode)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.approval_ttl_ms' needs mode APPROVAL");
    if (s->approval_ttl_ms != 0 && (s->approval_ttl_ms < CG_APPROVAL_TTL_MIN_MS ||
                                    s->approval_ttl_ms > CG_APPROVAL_TTL_MAX_MS))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.approval_ttl_ms' must be between %u and %u",
                          CG_APPROVAL_TTL_MIN_MS, CG_APPROVAL_TTL_MAX_MS);
    return CG_OK;
}

/* The backpressure tiers, the reservation TTL, the description and the mode. */
static cg_status check_other_fields(struct cg_rpc_call *call, const Ctxguard__V1__BudgetSettings *s)
{
    if (s->backpressure_disabled && s->n_backpressure_tiers > 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.backpressure_tiers' must be empty with "
                          "backpressure_disabled");
    if (s->reservation_ttl_ms != 0 && (s->reservation_ttl_ms < RESERVATION_TTL_MIN_MS ||
                                       s->reservation_ttl_ms > RESERVATION_TTL_MAX_MS))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.reservation_ttl_ms' must be between %u and %u",
                          RESERVATION_TTL_MIN_MS, RESERVATION_TTL_MAX_MS);
    cg_status st =
        cg_rpc_check_name(call, "settings.description", s->description, CG_NAME_MAX, false);
    if (st != CG_OK)
        return st;
    if (s->n_backpressure_tiers > CG_TIERS_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.backpressure_tiers' has more than %d tiers",
                          CG_TIERS_MAX);
    if (s->mode < 0 || s->mode > CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_APPROVAL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.mode': unknown value %d", s->mode);
    return CG_OK;
}

/* The settings as the core level they decide with, checked as a whole by core/budget.h
 * (cg_budget_check_settings; its message prefixed with "settings."). */
static cg_status level_in(struct cg_rpc_call *call, const Ctxguard__V1__BudgetSettings *s,
                          int level, int64_t limit_tokens, struct cg_budget_level *l)
{
    memset(l, 0, sizeof *l);
    l->level = (cg_level)level;
    l->has_budget = true;
    l->mode = s->mode ? (cg_budget_mode)s->mode : CG_MODE_HARD;
    l->limit_tokens = limit_tokens;
    l->limit_cost_micros = s->limit_cost_micros;
    l->warning_ratio = s->warning_ratio != 0 ? s->warning_ratio : DEFAULT_WARNING;
    l->backpressure_disabled = s->backpressure_disabled;
    l->ntiers = (int)s->n_backpressure_tiers;
    for (int i = 0; i < l->ntiers; i++) {
        l->tiers[i].ratio = s->backpressure_tiers[i]->threshold_ratio;
        l->tiers[i].delay_ms = s->backpressure_tiers[i]->delay_ms;
    }
    struct cg_err cerr;
    cg_err_clear(&cerr);
    if (cg_budget_check_settings(l, &cerr) != CG_OK)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "settings.%s", cerr.msg);
    return CG_OK;
}

/* The budget row of checked settings (their defaults filled in). */
static void row_in(const Ctxguard__V1__BudgetSettings *s, const struct cg_budget_level *l,
                   int level, struct cg_budget_row *row)
{
    bool approval_mode = s->mode == CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_APPROVAL;
    row->level = level;
    row->has_budget = true;
    row->exclude_cache_read_tokens = s->exclude_cache_read_tokens;
    row->allocate_from_parent = s->allocate_from_parent;
    row->mode = l->mode;
    row->limit_tokens = l->limit_tokens;
    row->limit_cost_micros = l->limit_cost_micros;
    row->warning_ratio = l->warning_ratio;
    row->backpressure_disabled = l->backpressure_disabled;
    row->ntiers = l->ntiers;
    for (int i = 0; i < l->ntiers; i++) {
        row->tier_ratio[i] = l->tiers[i].ratio;
        row->tier_delay_ms[i] = l->tiers[i].delay_ms;
    }
    row->on_store_failure = s->on_store_failure
                                ? s->on_store_failure
                                : CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_FAIL_CLOSED;
    row->local_allowance_tokens = s->local_allowance_tokens;
    row->reset_period =
        s->reset_period ? s->reset_period : CTXGUARD__V1__RESET_PERIOD__RESET_PERIOD_NONE;
    row->reservation_ttl_ms =
        s->reservation_ttl_ms ? s->reservation_ttl_ms : CG_RESERVATION_TTL_DEFAULT_MS;
    snprintf(row->description, sizeof row->description, "%s", s->description);
    row->approval_ttl_ms = !approval_mode       ? 0
                           : s->approval_ttl_ms ? s->approval_ttl_ms
                                                : CG_APPROVAL_TTL_DEFAULT_MS;
}

/* SetBudget's settings into *row, each field checked in turn (errors name the field). */
static cg_status settings_in(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const Ctxguard__V1__BudgetSettings *s, int level,
                             struct cg_budget_row *row)
{
    if (s == NULL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'settings' is required");
    int64_t limit_tokens;
    cg_status st = limit_in(call, env, s, level, &limit_tokens);
    if (st != CG_OK)
        return st;
    if (s->allocate_from_parent && level == CG_LEVEL_TENANT)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'settings.allocate_from_parent': the tenant has no parent to "
                          "allocate from");
    struct cg_budget_level l;
    if ((st = check_store_failure(call, s)) != CG_OK ||
        (st = check_reset_period(call, s, level)) != CG_OK ||
        (st = check_approval_ttl(call, s)) != CG_OK ||
        (st = check_other_fields(call, s)) != CG_OK ||
        (st = level_in(call, s, level, limit_tokens, &l)) != CG_OK)
        return st;
    row_in(s, &l, level, row);
    return CG_OK;
}

cg_status cg_rpc_budget_set(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__SetBudgetRequest *req = (const Ctxguard__V1__SetBudgetRequest *)request;
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &row.ids, &level);
    if (st == CG_OK)
        st = settings_in(call, env, req->settings, level, &row);
    if (st == CG_OK && req->expected_version < 0)
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'expected_version' must not be negative");
    if (st != CG_OK)
        return st;

    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_budget_set_request in = {
        .row = &row,
        .level = level,
        .expected_version = req->expected_version,
        .audit = &audit,
    };
    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_row stored;
    bool created = false;
    if ((st = cg_budget_set(&env->svc, &op, &in, &stored, &created)) != CG_OK)
        return st;
    Ctxguard__V1__SetBudgetResponse *resp =
        NEW(call, Ctxguard__V1__SetBudgetResponse, ctxguard__v1__set_budget_response__init);
    if (resp == NULL || (resp->budget = cg_rpc_budget_out(call, &stored)) == NULL)
        return OOM(call);
    resp->created = created;
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- reads ----------- */

cg_status cg_rpc_budget_get(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetBudgetRequest *req = (const Ctxguard__V1__GetBudgetRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st != CG_OK)
        return st;
    struct cg_budget_row path[CG_PATH_MAX];
    int n = 0;
    struct cg_budget_result r;
    struct cg_op op = cg_rpc_op(call);
    if ((st = cg_budget_get(&env->svc, &op, &ids, level, path, &n, &r)) != CG_OK)
        return st;
    const struct cg_budget_row *row = &path[n - 1];

    Ctxguard__V1__GetBudgetResponse *resp =
        NEW(call, Ctxguard__V1__GetBudgetResponse, ctxguard__v1__get_budget_response__init);
    Ctxguard__V1__ScopeUsage *u =
        NEW(call, Ctxguard__V1__ScopeUsage, ctxguard__v1__scope_usage__init);
    if (resp == NULL || u == NULL || (resp->budget = cg_rpc_budget_out(call, row)) == NULL ||
        (u->scope = cg_rpc_scope_out(call, row)) == NULL)
        return OOM(call);
    u->level = (Ctxguard__V1__ScopeLevel)row->level;
    u->has_budget = true;
    u->used_tokens = row->used_tokens;
    u->reserved_tokens = row->reserved_tokens;
    u->approved_extra_tokens = row->approved_extra_tokens;
    u->allocated_tokens = row->allocated_tokens;
    u->remaining_tokens = r.levels[n - 1].remaining_tokens;
    u->usage_ratio = r.levels[n - 1].usage_ratio;
    u->reserved_cost_micros = row->reserved_cost_micros;
    if (row->limit_cost_micros > 0)
        u->cost_ratio = (double)(row->used_cost_micros + row->reserved_cost_micros) /
                        (double)row->limit_cost_micros;
    u->backpressure_delay_ms = r.levels[n - 1].delay_ms;
    resp->usage = u;
    *response = &resp->base;
    return CG_OK;
}

_Static_assert((int)CG_BUDGET_SOURCE_CACHE == CTXGUARD__V1__BUDGET_SOURCE__BUDGET_SOURCE_CACHE &&
                   (int)CG_BUDGET_SOURCE_DATABASE ==
                       CTXGUARD__V1__BUDGET_SOURCE__BUDGET_SOURCE_DATABASE &&
                   (int)CG_BUDGET_SOURCE_STORE_FAILURE_POLICY ==
                       CTXGUARD__V1__BUDGET_SOURCE__BUDGET_SOURCE_STORE_FAILURE_POLICY,
               "cg_budget_source follows the API's BudgetSource");
_Static_assert((int)CG_STORE_FAILURE_FAIL_CLOSED ==
                       CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_FAIL_CLOSED &&
                   (int)CG_STORE_FAILURE_FAIL_OPEN ==
                       CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_FAIL_OPEN &&
                   (int)CG_STORE_FAILURE_LOCAL_ALLOWANCE ==
                       CTXGUARD__V1__ON_STORE_FAILURE__ON_STORE_FAILURE_LOCAL_ALLOWANCE,
               "cg_store_failure_policy follows the API's OnStoreFailure");

/* The answer of the on_store_failure policy (PostgreSQL out of reach): FAIL_OPEN allows with
 * a warning, LOCAL_ALLOWANCE allows or denies by this replica's allowance; one reason says
 * which. */
static cg_status store_failure_reply(struct cg_rpc_call *call,
                                     const struct cg_budget_check_result *res,
                                     Ctxguard__V1__CheckBudgetResponse *resp)
{
    Ctxguard__V1__DecisionReason *why =
        NEW(call, Ctxguard__V1__DecisionReason, ctxguard__v1__decision_reason__init);
    resp->reasons = cg_arena_calloc(call->arena, 2, sizeof *resp->reasons);
    if (why == NULL || resp->reasons == NULL)
        return OOM(call);
    if (res->policy == CG_STORE_FAILURE_FAIL_OPEN) {
        resp->decision = CTXGUARD__V1__DECISION__DECISION_ALLOW_WITH_WARNING;
        why->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_STORE_UNAVAILABLE;
        why->message = "the store is unreachable; allowed by on_store_failure FAIL_OPEN";
    } else {
        bool allow = res->local_allowed;
        resp->decision =
            allow ? CTXGUARD__V1__DECISION__DECISION_ALLOW : CTXGUARD__V1__DECISION__DECISION_DENY;
        why->code = CTXGUARD__V1__REASON_CODE__REASON_CODE_LOCAL_ALLOWANCE;
        why->level = (Ctxguard__V1__ScopeLevel)res->refused_level;
        why->message = allow
                           ? "the store is unreachable; allowed from this replica's local allowance"
                           : cg_arena_sprintf(call->arena,
                                              "the store is unreachable and this replica's local "
                                              "allowance of the %s is spent",
                                              cg_level_name((cg_level)res->refused_level));
        if (why->message == NULL)
            return OOM(call);
    }
    resp->reasons[0] = why;
    resp->n_reasons = 1;
    return CG_OK;
}

/* The answer of a decision over the path: the decision, its delay (held unless
 * RETURN_ONLY), reasons, and the approval that answers it when the gate opened or found
 * one. */
static cg_status decision_reply(struct cg_rpc_call *call, int delay_mode,
                                const struct cg_budget_check_result *res,
                                Ctxguard__V1__CheckBudgetResponse *resp)
{
    const struct cg_budget_result *r = &res->decision;
    cg_status st;
    resp->decision = (Ctxguard__V1__Decision)r->decision;
    resp->backpressure_delay_ms = r->delay_ms;
    resp->delay_held_ms = cg_rpc_hold(call, delay_mode, r->delay_ms);
    if ((st = cg_rpc_reasons_out(call, res->path, res->n, r, &resp->reasons, &resp->n_reasons)) !=
        CG_OK)
        return st;
    call->decision = (int)resp->decision;
    call->decision_delay_ms = r->delay_ms;
    if (!res->gate.involved)
        return CG_OK;
    if (res->gate.outcome == CG_APPROVAL_WAS_DENIED)
        resp->decision = CTXGUARD__V1__DECISION__DECISION_DENY;
    call->decision = (int)resp->decision;
    resp->approval_id = cg_arena_strdup(call->arena, res->gate.approval.approval_id);
    resp->approval_state = (Ctxguard__V1__ApprovalState)res->gate.approval.state;
    if (resp->approval_id == NULL)
        return OOM(call);
    return cg_rpc_approval_reason(call, &res->gate, resp->reasons, &resp->n_reasons);
}

cg_status cg_rpc_budget_check(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, ProtobufCMessage **response,
                              cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    const Ctxguard__V1__CheckBudgetRequest *req = (const Ctxguard__V1__CheckBudgetRequest *)request;
    struct cg_budget_check_request in;
    int level;
    cg_status st = cg_rpc_scope_required(call, req->scope);
    if (st == CG_OK)
        st = cg_rpc_scope_in(call, req->scope, &in.ids, &level);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "estimated_tokens", req->estimated_tokens,
                                CG_TOKENS_PER_CALL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "estimated_output_tokens", req->estimated_output_tokens,
                                req->estimated_tokens);
    if (st == CG_OK)
        st = cg_rpc_check_text(call, "model", req->model, CG_MODEL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_delay_mode(call, req->delay_mode);
    if (st != CG_OK)
        return st;
    in.estimated_tokens = req->estimated_tokens;
    in.estimated_output_tokens = req->estimated_output_tokens;
    in.model = req->model;
    in.dry_run = req->dry_run;
    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_check_result res;
    if ((st = cg_budget_check(&env->svc, &op, &in, &res, fate)) != CG_OK || *fate != CG_OP_DONE)
        return st;

    Ctxguard__V1__CheckBudgetResponse *resp =
        NEW(call, Ctxguard__V1__CheckBudgetResponse, ctxguard__v1__check_budget_response__init);
    if (resp == NULL)
        return OOM(call);
    resp->estimated_cost_micros = res.estimated_cost_micros;
    if ((st = cg_rpc_levels_out(call, res.path, res.n, &res.decision, &resp->levels,
                                &resp->n_levels)) != CG_OK)
        return st;
    st = res.source == CG_BUDGET_SOURCE_STORE_FAILURE_POLICY
             ? store_failure_reply(call, &res, resp)
             : decision_reply(call, req->delay_mode, &res, resp);
    if (st != CG_OK)
        return st;
    call->decision = (int)resp->decision;
    const struct cg_budget_result *r = &res.decision;
    if (r->tightest >= 0) {
        resp->tightest_level = (Ctxguard__V1__ScopeLevel)res.path[r->tightest].level;
        resp->tightest_ratio = r->tightest_ratio;
    }
    resp->available_tokens = r->available_tokens;
    if (res.source != CG_BUDGET_SOURCE_STORE_FAILURE_POLICY)
        resp->compress_to_tokens =
            cg_budget_compress_to(r, res.n, req->estimated_tokens, req->estimated_output_tokens);
    resp->source = (Ctxguard__V1__BudgetSource)res.source;
    resp->evaluated_at_unix_ms = cg_wall_ms();
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- reservations ---- */

cg_status cg_rpc_budget_reserve(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response,
                                cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    const Ctxguard__V1__ReserveRequest *req = (const Ctxguard__V1__ReserveRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_required(call, req->scope);
    if (st == CG_OK)
        st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st == CG_OK && (req->tokens < 1 || req->tokens > CG_TOKENS_PER_CALL_MAX))
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'tokens' must be between 1 and %lld (got %lld)",
                        (long long)CG_TOKENS_PER_CALL_MAX, (long long)req->tokens);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "estimated_output_tokens", req->estimated_output_tokens,
                                req->tokens);
    if (st == CG_OK)
        st = cg_rpc_check_text(call, "model", req->model, CG_MODEL_MAX);
    if (st == CG_OK && req->ttl_ms != 0 &&
        (req->ttl_ms < RESERVATION_TTL_MIN_MS || req->ttl_ms > RESERVATION_TTL_MAX_MS))
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'ttl_ms' must be between %u and %u",
                        RESERVATION_TTL_MIN_MS, RESERVATION_TTL_MAX_MS);
    if (st == CG_OK)
        st = cg_rpc_check_key(call, "idempotency_key", req->idempotency_key, false);
    if (st == CG_OK)
        st = cg_rpc_check_key(call, "estimate_id", req->estimate_id, false);
    if (st == CG_OK)
        st = cg_rpc_check_delay_mode(call, req->delay_mode);
    if (st != CG_OK)
        return st;
    struct cg_budget_reserve_request in = {
        .ids = ids,
        .tokens = req->tokens,
        .estimated_output_tokens = req->estimated_output_tokens,
        .model = req->model,
        .estimate_id = req->estimate_id,
        .idempotency_key = req->idempotency_key,
        .ttl_ms = req->ttl_ms,
    };
    struct cg_op op = cg_rpc_op(call);
    if (cg_rpc_batch_can_defer(call, env))
        return cg_budget_batch_submit(&env->svc, &op, &in, NULL, cg_rpc_batch_done, call, fate);
    if (env->svc.store == NULL) {
        *fate = CG_OP_NEEDS_STORE;
        return CG_OK;
    }
    struct cg_budget_reserve_result out;
    if ((st = cg_budget_reserve(&env->svc, &op, &in, &out)) != CG_OK)
        return st;
    return cg_rpc_reserve_answer(call, req->delay_mode, &out, response);
}

static cg_status check_reservation_id(struct cg_rpc_call *call, const char *id)
{
    if (id[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'reservation_id' is required");
    return cg_rpc_check_text(call, "reservation_id", id, CG_UUID_LEN);
}

cg_status cg_rpc_budget_release(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__ReleaseRequest *req = (const Ctxguard__V1__ReleaseRequest *)request;
    cg_status st = check_reservation_id(call, req->reservation_id);
    if (st != CG_OK)
        return st;
    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_release_result res;
    if ((st = cg_budget_release(&env->svc, &op, req->reservation_id, &res)) != CG_OK)
        return st;
    Ctxguard__V1__ReleaseResponse *resp =
        NEW(call, Ctxguard__V1__ReleaseResponse, ctxguard__v1__release_response__init);
    if (resp == NULL ||
        (resp->reservation = cg_rpc_reservation_out(call, &res.reservation)) == NULL)
        return OOM(call);
    resp->released_tokens = res.released_tokens;
    resp->replayed = res.replayed;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_commit(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                               const ProtobufCMessage *request, ProtobufCMessage **response,
                               cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    const Ctxguard__V1__CommitRequest *req = (const Ctxguard__V1__CommitRequest *)request;
    struct cg_budget_commit_request in = {
        .reservation_id = req->reservation_id,
        .model = req->model,
        .estimate_id = req->estimate_id,
        .provider_input_tokens = req->provider_input_tokens,
        .record_if_expired = req->record_if_expired,
    };
    cg_status st = check_reservation_id(call, req->reservation_id);
    if (st == CG_OK)
        st = cg_rpc_usage_in(call, req->usage, &in.usage);
    if (st == CG_OK)
        st = cg_rpc_check_text(call, "model", req->model, CG_MODEL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_key(call, "estimate_id", req->estimate_id, false);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "provider_input_tokens", req->provider_input_tokens,
                                CG_TOKENS_PER_CALL_MAX * 3);
    if (st != CG_OK)
        return st;
    struct cg_op op = cg_rpc_op(call);
    if (cg_rpc_batch_can_defer(call, env))
        return cg_budget_batch_submit(&env->svc, &op, NULL, &in, cg_rpc_batch_done, call, fate);
    if (env->svc.store == NULL) {
        *fate = CG_OP_NEEDS_STORE;
        return CG_OK;
    }
    struct cg_budget_commit_result out;
    if ((st = cg_budget_commit(&env->svc, &op, &in, &out)) != CG_OK)
        return st;
    return cg_rpc_commit_answer(call, &out, response);
}

cg_status cg_rpc_budget_record_usage(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__RecordUsageRequest *req = (const Ctxguard__V1__RecordUsageRequest *)request;
    struct cg_scope_ids ids;
    int level;
    struct cg_usage usage;
    cg_status st = cg_rpc_scope_required(call, req->scope);
    if (st == CG_OK)
        st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st == CG_OK)
        st = cg_rpc_usage_in(call, req->usage, &usage);
    if (st == CG_OK)
        st = cg_rpc_check_text(call, "model", req->model, CG_MODEL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_key(call, "idempotency_key", req->idempotency_key, true);
    if (st == CG_OK && strncmp(req->idempotency_key, "reservation:", 12) == 0)
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'idempotency_key': the prefix 'reservation:' is reserved");
    if (st == CG_OK)
        st = cg_rpc_check_key(call, "estimate_id", req->estimate_id, false);
    int64_t now_ms = cg_wall_ms();
    if (st == CG_OK &&
        (req->occurred_at_unix_ms < 0 || req->occurred_at_unix_ms > now_ms + OCCURRED_AT_SKEW_MS))
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                        "field 'occurred_at_unix_ms' must not be in the future (%lld > now %lld)",
                        (long long)req->occurred_at_unix_ms, (long long)now_ms);
    if (st != CG_OK)
        return st;

    struct cg_budget_record_request in = {
        .ids = ids,
        .usage = usage,
        .model = req->model,
        .idempotency_key = req->idempotency_key,
        .estimate_id = req->estimate_id,
        .provider_input_tokens = req->provider_input_tokens,
        .occurred_at_ms = req->occurred_at_unix_ms,
        .now_ms = now_ms,
    };
    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_record_result out;
    if ((st = cg_budget_record_usage(&env->svc, &op, &in, &out)) != CG_OK)
        return st;
    struct cg_budget_result r;
    cg_budget_path_decide(out.rec.path, out.rec.n, 0, 0, &r);
    Ctxguard__V1__RecordUsageResponse *resp =
        NEW(call, Ctxguard__V1__RecordUsageResponse, ctxguard__v1__record_usage_response__init);
    if (resp == NULL || (resp->recorded_usage = cg_rpc_usage_out(call, &out.rec.usage)) == NULL ||
        (resp->ledger_entry_id = cg_arena_strdup(call->arena, out.rec.ledger_entry_id)) == NULL)
        return OOM(call);
    resp->replayed = out.replayed;
    resp->price_known = out.rec.price_known;
    resp->calibration_updated = out.rec.calibration_updated;
    resp->calibration_factor = out.rec.calibration_factor;
    if ((st = cg_rpc_levels_out(call, out.rec.path, out.rec.n, &r, &resp->levels,
                                &resp->n_levels)) != CG_OK)
        return st;
    *response = &resp->base;
    return CG_OK;
}

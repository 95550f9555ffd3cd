/* budget_reserve.c - the budget writes of one request: Reserve, Commit, Release and
 * RecordUsage (service/budget_reserve.h).
 *
 * Every write runs in one PostgreSQL transaction that locks the rows of the scope's path,
 * tenant first (store.h), so no interleaving of callers on any number of replicas can act
 * on stale counters; core/budget decides on what the transaction read. Success means the
 * transaction committed; the rows it wrote then go to the caches (cg_cache_written).
 */
#include "service/budget_reserve.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "core/budget_events.h"
#include "core/keyrole.h"
#include "core/price.h"
#include "service/budget.h"
#include "service/budget_events.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/calibration.h"
#include "service/meters.h"
#include "service/op_err.h"

/* ---------------------------------------------------------------- helpers --------- */

bool cg_budget_price_usage(const struct cg_svc_env *env, const char *model, struct cg_usage *u)
{
    if (u->cost_micros > 0)
        return true;
    const struct cg_price *p = env->prices ? cg_price_lookup(env->prices, model) : NULL;
    if (p == NULL)
        return false;
    u->cost_micros = cg_price_cost(p, u->input_tokens, u->output_tokens, u->cache_read_tokens,
                                   u->cache_write_tokens);
    return true;
}

int64_t cg_budget_usage_tokens(const struct cg_usage *u)
{
    return u->input_tokens + u->output_tokens + u->cache_read_tokens + u->cache_write_tokens;
}

int64_t cg_budget_provider_input_tokens(int64_t provider_input_tokens, const struct cg_usage *u)
{
    if (provider_input_tokens > 0)
        return provider_input_tokens;
    return u->input_tokens + u->cache_read_tokens + u->cache_write_tokens;
}

uint32_t cg_budget_reserve_ttl(uint32_t ttl_ms, const struct cg_budget_row *scope_row)
{
    uint32_t ttl = ttl_ms ? ttl_ms : scope_row->reservation_ttl_ms;
    return ttl ? ttl : CG_RESERVATION_TTL_DEFAULT_MS;
}

static bool same_usage(const struct cg_usage *a, const struct cg_usage *b)
{
    return a->input_tokens == b->input_tokens && a->output_tokens == b->output_tokens &&
           a->cache_read_tokens == b->cache_read_tokens &&
           a->cache_write_tokens == b->cache_write_tokens &&
           (a->cost_micros == 0 || a->cost_micros == b->cost_micros);
}

/* An idempotency key used before for something else (what: "another scope", ...):
 * ALREADY_EXISTS naming the first use, which was at first_ms (unix ms) on first_ids and made
 * id_name = first_id. Nothing was recorded: a silent replay would drop the usage. */
static cg_status key_reused(const struct cg_op *op, const char *key,
                            const struct cg_scope_ids *first_ids, int64_t first_ms,
                            const char *id_name, const char *first_id, const char *what)
{
    /* A first use outside a scope-bound key's subtree is not named (nor its entry or
     * reservation): the key learns only that the idempotency key is taken. */
    const struct cg_principal *p = op->principal;
    bool named = cg_scope_within(p->scope_session_id, p->scope_task_id, first_ids->session_id,
                                 first_ids->task_id);
    char scope[3 * CG_SCOPE_ID_MAX + 32];
    if (!named)
        snprintf(scope, sizeof scope, "a scope outside this key's subtree");
    else if (first_ids->session_id[0] == '\0')
        snprintf(scope, sizeof scope, "the tenant");
    else if (first_ids->task_id[0] == '\0')
        snprintf(scope, sizeof scope, "session %s", first_ids->session_id);
    else if (first_ids->agent_id[0] == '\0')
        snprintf(scope, sizeof scope, "session %s/task %s", first_ids->session_id,
                 first_ids->task_id);
    else
        snprintf(scope, sizeof scope, "session %s/task %s/agent %s", first_ids->session_id,
                 first_ids->task_id, first_ids->agent_id);
    char when[40] = "?";
    time_t secs = (time_t)(first_ms / 1000);
    struct tm tm;
    if (gmtime_r(&secs, &tm) != NULL) {
        size_t len = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when + len, sizeof when - len, ".%03dZ", (int)(first_ms % 1000));
    }
    cg_err_setr(op->err, CG_ALREADY_EXISTS, CG_ERR_IDEMPOTENCY_KEY_REUSED,
                "idempotency_key '%s' was first used for %s at %s with %s", key, scope, when, what);
    cg_err_meta(op->err, "field", "idempotency_key");
    cg_err_meta(op->err, "idempotency_key", key);
    if (!named)
        return CG_ALREADY_EXISTS;
    struct cg_err path;
    cg_err_clear(&path);
    cg_store_err_scope(&path, first_ids);
    cg_err_meta(op->err, "first_scope", cg_err_meta_get(&path, "scope"));
    cg_err_meta(op->err, id_name, first_id);
    return CG_ALREADY_EXISTS;
}

/* ---------------------------------------------------------------- Reserve --------- */

/* A Reserve whose decision was REQUIRE_APPROVAL (the reservation just inserted already
 * rolled back): the approval step in a transaction of its own. */
static cg_status reserve_approval(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_budget_reserve_request *req,
                                  struct cg_budget_reserve_result *out)
{
    struct cg_budget_approval_gate *gate = &out->gate;
    struct cg_budget_result *r = &out->decision;
    cg_status st = cg_budget_approval_gate(env, op, &req->ids, req->tokens, req->model, out->path,
                                           &out->n, r, gate);
    if (st != CG_OK)
        return st;
    if (gate->involved && gate->outcome == CG_APPROVAL_WAS_DENIED) {
        cg_err_setr(op->err, CG_RESOURCE_EXHAUSTED, CG_ERR_APPROVAL_DENIED,
                    "APPROVAL token limit of the %s: approval %s was denied",
                    cg_level_name((cg_level)gate->approval.level), gate->approval.approval_id);
        cg_store_err_scope(op->err, &gate->approval.ids);
        cg_err_meta(op->err, "level", cg_level_name((cg_level)gate->approval.level));
        cg_err_meta(op->err, "approval_id", gate->approval.approval_id);
        return CG_RESOURCE_EXHAUSTED;
    }
    if (r->decision == CG_DECISION_DENY)
        return cg_budget_deny(op->err, out->path, out->n, r, req->tokens,
                              req->estimated_output_tokens);
    if (!gate->involved)
        return cg_err_set(op->err, CG_ABORTED,
                          "the budget changed while this Reserve was decided; retry");
    out->outcome = CG_RESERVE_APPROVAL;
    return CG_OK;
}

cg_status cg_budget_reserve(const struct cg_svc_env *env, const struct cg_op *op,
                            const struct cg_budget_reserve_request *req,
                            struct cg_budget_reserve_result *out)
{
    const char *tenant = op->principal->tenant_id;
    struct cg_budget_row *path = out->path;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_budget_tx_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    out->n = 0;
    st = cg_store_path_read(env->store, tenant, &req->ids, true, false, cg_wall_ms(), path, &out->n,
                            &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    int n = out->n;

    uint32_t ttl = cg_budget_reserve_ttl(req->ttl_ms, &path[n - 1]);
    /* The hold is priced as well, so that cost limits see it. */
    int64_t hold_cost =
        cg_budget_price_estimate(env, req->model, req->tokens, req->estimated_output_tokens);
    struct cg_reservation *res = &out->reservation;
    st = cg_store_reservation_insert(env->store, tenant, &req->ids, req->tokens, hold_cost,
                                     req->model, req->estimate_id, req->idempotency_key, ttl, res,
                                     &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);

    if (res->replayed) {
        /* The first Reserve with this key already held the tokens: answer it again, if this
         * is a retry of it; the key reused for another hold holds nothing. */
        const char *other = !cg_scope_equal(&req->ids, &res->ids) ? "another scope"
                            : req->tokens != res->tokens          ? "other tokens"
                            : strcmp(req->model, res->model) != 0 ? "another model"
                                                                  : NULL;
        if (other != NULL) {
            cg_store_rollback(env->store);
            return key_reused(op, req->idempotency_key, &res->ids, res->created_at_ms,
                              "first_reservation_id", res->reservation_id, other);
        }
        if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
            return st;
        cg_cache_written(env, tenant, path, n);
        cg_budget_path_decide(path, n, 0, 0, &out->decision);
        out->outcome = CG_RESERVE_REPLAYED;
        return CG_OK;
    }
    cg_budget_path_decide(path, n, req->tokens, hold_cost, &out->decision);
    if (out->decision.decision == CG_DECISION_REQUIRE_APPROVAL) {
        /* REQUIRE_APPROVAL holds nothing: the reservation just inserted goes with the
         * rollback, and the approval step runs in a transaction of its own. */
        cg_store_rollback(env->store);
        return reserve_approval(env, op, req, out);
    }
    if (out->decision.decision == CG_DECISION_DENY) {
        cg_store_rollback(env->store);
        return cg_budget_deny(op->err, path, n, &out->decision, req->tokens,
                              req->estimated_output_tokens);
    }
    st = cg_store_path_add(env->store, tenant, path, n, 0, req->tokens, 0, hold_cost, &serr);
    if (st == CG_OK)
        st = cg_budget_emit_path(env, tenant, path, n, 0, 0, req->tokens, &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, path, n);
    cg_svc_meters_reservations(env->meters, env->metrics_slot, CG_SVC_RES_CREATED, 1);
    out->outcome = CG_RESERVE_HELD;
    return CG_OK;
}

/* ---------------------------------------------------------------- settling -------- */

/* FAILED_PRECONDITION for a reservation past its ACTIVE state, with its facts. */
static cg_status reservation_settled(const struct cg_op *op, cg_error_reason reason,
                                     const struct cg_reservation *res, const char *state,
                                     const char *fmt, ...) CG_PRINTF(5, 6);

static cg_status reservation_settled(const struct cg_op *op, cg_error_reason reason,
                                     const struct cg_reservation *res, const char *state,
                                     const char *fmt, ...)
{
    char msg[CG_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cg_err_setr(op->err, CG_FAILED_PRECONDITION, reason, "%s", msg);
    cg_err_meta(op->err, "reservation_id", res->reservation_id);
    cg_err_meta(op->err, "state", state);
    cg_store_err_scope(op->err, &res->ids);
    return CG_FAILED_PRECONDITION;
}

/* Whether a reservation still holds its tokens: ACTIVE, or ACTIVE past its expiry and not
 * yet settled by the sweeper (EXPIRED with no settled time). */
static bool holds_tokens(const struct cg_reservation *res)
{
    return res->state == CG_RESERVATION_ACTIVE ||
           (res->state == CG_RESERVATION_EXPIRED && res->settled_at_ms == 0);
}

/* Gives back what res holds on its path (read and locked into path, *n), with the events,
 * and settles it as settled_state. */
static cg_status unhold(const struct cg_svc_env *env, const char *tenant,
                        const struct cg_reservation *res, int settled_state,
                        struct cg_budget_row *path, int *n, struct cg_err *serr)
{
    cg_status st =
        cg_store_path_read(env->store, tenant, &res->ids, true, false, cg_wall_ms(), path, n, serr);
    if (st == CG_OK)
        st = cg_store_path_add(env->store, tenant, path, *n, 0, -res->tokens, 0, -res->cost_micros,
                               serr);
    if (st == CG_OK)
        st = cg_budget_emit_path(env, tenant, path, *n, 0, 0, -res->tokens, serr);
    if (st == CG_OK)
        st = cg_store_reservation_settle(env->store, tenant, res->reservation_id, settled_state,
                                         NULL, serr);
    return st;
}

/* Opens the transaction of a Commit or Release and locks the reservation (first: the lock
 * order of store.h). One outside a scope-bound key's subtree is NOT_FOUND in the words of
 * an unknown id (cg_store_reservation_lock). On error the transaction is rolled back and
 * op->err filled. */
static cg_status begin_with_reservation(const struct cg_svc_env *env, const struct cg_op *op,
                                        const char *reservation_id, struct cg_reservation *res,
                                        struct cg_err *serr)
{
    const struct cg_principal *p = op->principal;
    cg_status st = cg_budget_tx_begin(env, op, serr);
    if (st != CG_OK)
        return st;
    st = cg_store_reservation_lock(env->store, p->tenant_id, reservation_id, res, serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, serr);
    if (!cg_scope_within(p->scope_session_id, p->scope_task_id, res->ids.session_id,
                         res->ids.task_id)) {
        cg_store_rollback(env->store);
        return cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                           "reservation_id: no such reservation");
    }
    return CG_OK;
}

cg_status cg_budget_release(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *reservation_id, struct cg_budget_release_result *out)
{
    const char *tenant = op->principal->tenant_id;
    struct cg_reservation *res = &out->reservation;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = begin_with_reservation(env, op, reservation_id, res, &serr);
    if (st != CG_OK)
        return st;
    out->replayed = false;
    out->released_tokens = 0;
    struct cg_budget_row path[CG_PATH_MAX];
    int n = 0;
    int settled = 0; /* the state this Release settles the reservation in, if any */
    if (holds_tokens(res)) {
        /* ACTIVE, or ACTIVE past its expiry: the tokens go back to the pool now. */
        settled =
            res->state == CG_RESERVATION_ACTIVE ? CG_RESERVATION_RELEASED : CG_RESERVATION_EXPIRED;
        if ((st = unhold(env, tenant, res, settled, path, &n, &serr)) != CG_OK)
            return cg_budget_tx_fail(env, op, &serr);
        out->released_tokens = res->tokens;
        out->replayed = res->state == CG_RESERVATION_EXPIRED;
        res->state = settled;
        res->settled_at_ms = cg_wall_ms();
    } else if (res->state == CG_RESERVATION_COMMITTED) {
        cg_store_rollback(env->store);
        return reservation_settled(op, CG_ERR_RESERVATION_SETTLED, res, "committed",
                                   "reservation %s is already committed", res->reservation_id);
    } else {
        out->replayed = true; /* released or expired before */
    }
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, path, n);
    if (settled != 0)
        cg_svc_meters_reservations(
            env->meters, env->metrics_slot,
            settled == CG_RESERVATION_RELEASED ? CG_SVC_RES_RELEASED : CG_SVC_RES_EXPIRED, 1);
    return CG_OK;
}

/* ---------------------------------------------------------------- Commit ---------- */

/* Inside the Commit's transaction, after its spend: the OVERRUN event of a Commit that
 * recorded more than its reservation held (the spend counts in full; watchers learn both
 * figures). */
static cg_status emit_overrun(const struct cg_svc_env *env, const char *tenant,
                              const struct cg_reservation *res, const struct cg_usage *usage,
                              struct cg_err *serr)
{
    struct cg_event_fields f;
    memset(&f, 0, sizeof f);
    snprintf(f.ref_id, sizeof f.ref_id, "%s", res->reservation_id);
    f.ref_tokens = res->tokens;
    f.ref_state = CG_RESERVATION_COMMITTED;
    f.ref_usage = *usage;
    snprintf(f.message, sizeof f.message, "reservation %s held %lld tokens; %lld committed",
             res->reservation_id, (long long)res->tokens, (long long)cg_budget_usage_tokens(usage));
    return cg_store_event_append(env->store, tenant, &res->ids, CG_EVENT_OVERRUN, &f, cg_wall_ms(),
                                 serr);
}

/* A Commit of a reservation committed before (its transaction rolled back): the same usage
 * is a retry, answered again; another one a mistake. */
static cg_status commit_replay(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_budget_commit_request *req,
                               struct cg_budget_commit_result *out)
{
    const struct cg_reservation *res = &out->reservation;
    if (!same_usage(&req->usage, &res->committed))
        return reservation_settled(op, CG_ERR_RESERVATION_SETTLED, res, "committed",
                                   "reservation %s was already committed with another usage",
                                   res->reservation_id);
    out->replayed = true;
    out->rec.usage = res->committed;
    out->rec.price_known = out->rec.usage.cost_micros > 0;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_ledger_entry_of(env->store, op->principal->tenant_id, res->reservation_id,
                                 out->rec.ledger_entry_id, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    return cg_budget_read_path(env, op, &res->ids, out->rec.path, &out->rec.n);
}

/* A Commit of a reservation released, or past its expiry, without record_if_expired:
 * nothing recorded; an ACTIVE one found past its expiry still returns its tokens. */
static cg_status commit_refused(const struct cg_svc_env *env, const struct cg_op *op,
                                struct cg_budget_commit_result *out, struct cg_err *serr)
{
    const struct cg_reservation *res = &out->reservation;
    if (holds_tokens(res)) {
        const char *tenant = op->principal->tenant_id;
        if (unhold(env, tenant, res, CG_RESERVATION_EXPIRED, out->rec.path, &out->rec.n, serr) !=
            CG_OK)
            return cg_budget_tx_fail(env, op, serr);
        cg_status st = cg_budget_tx_commit(env, op, serr);
        if (st != CG_OK)
            return st;
        cg_cache_written(env, tenant, out->rec.path, out->rec.n);
        cg_svc_meters_reservations(env->meters, env->metrics_slot, CG_SVC_RES_EXPIRED, 1);
    } else {
        cg_store_rollback(env->store);
    }
    bool released = res->state == CG_RESERVATION_RELEASED;
    return reservation_settled(
        op, released ? CG_ERR_RESERVATION_SETTLED : CG_ERR_RESERVATION_EXPIRED, res,
        released ? "released" : "expired",
        "reservation %s is %s; nothing recorded (set record_if_expired to record the usage "
        "anyway)",
        res->reservation_id, released ? "released" : "expired");
}

/* The Commit's writes in its open transaction (the reservation locked): the spend on the
 * path, what the hold gives back, the events, the settlement and the ledger entry. */
static cg_status commit_write(const struct cg_svc_env *env, const struct cg_op *op,
                              const struct cg_budget_commit_request *req,
                              struct cg_budget_commit_result *out, struct cg_err *serr)
{
    const char *tenant = op->principal->tenant_id;
    const struct cg_reservation *res = &out->reservation;
    const char *model = req->model[0] ? req->model : res->model;
    bool expired = res->state != CG_RESERVATION_ACTIVE;
    cg_status st = cg_store_path_read(env->store, tenant, &res->ids, true, false, cg_wall_ms(),
                                      out->rec.path, &out->rec.n, serr);
    if (st != CG_OK)
        return st;
    out->rec.price_known = cg_budget_price_usage(env, model, &out->rec.usage);
    const struct cg_usage *usage = &out->rec.usage;
    int64_t spent = cg_budget_usage_tokens(usage);
    /* An expired hold still holding tokens (found past its expiry) gives them back too. */
    int64_t unhold_tokens = holds_tokens(res) ? res->tokens : 0;
    int64_t unhold_cost = holds_tokens(res) ? res->cost_micros : 0;
    char key[CG_IDEMPOTENCY_MAX + 1];
    snprintf(key, sizeof key, "reservation:%s", res->reservation_id);
    st = cg_store_path_spend(env->store, tenant, out->rec.path, out->rec.n, usage, -unhold_tokens,
                             -unhold_cost, serr);
    if (st == CG_OK)
        st = cg_budget_emit_path(env, tenant, out->rec.path, out->rec.n, spent,
                                 usage->cache_read_tokens, -unhold_tokens, serr);
    if (st == CG_OK && !expired && spent > res->tokens)
        st = emit_overrun(env, tenant, res, usage, serr);
    /* ACTIVE -> COMMITTED; found past its expiry -> EXPIRED; RELEASED stays so. */
    int settled = res->state == CG_RESERVATION_ACTIVE ? CG_RESERVATION_COMMITTED
                  : holds_tokens(res)                 ? CG_RESERVATION_EXPIRED
                                                      : 0;
    if (st == CG_OK && settled != 0)
        st = cg_store_reservation_settle(env->store, tenant, res->reservation_id, settled,
                                         settled == CG_RESERVATION_COMMITTED ? usage : NULL, serr);
    if (st == CG_OK)
        st = cg_store_ledger_append(env->store, tenant, &res->ids, usage, model, key,
                                    res->reservation_id, out->rec.ledger_entry_id, NULL, serr);
    return st;
}

cg_status cg_budget_commit(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_budget_commit_request *req,
                           struct cg_budget_commit_result *out)
{
    const char *tenant = op->principal->tenant_id;
    struct cg_reservation *res = &out->reservation;
    out->replayed = false;
    out->reservation_expired = false;
    out->rec.usage = req->usage;
    out->rec.price_known = false;
    out->rec.ledger_entry_id[0] = '\0';
    out->released_tokens = 0;
    out->overrun_tokens = 0;
    out->rec.calibration_updated = false;
    out->rec.calibration_factor = 1.0;
    out->rec.n = 0;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = begin_with_reservation(env, op, req->reservation_id, res, &serr);
    if (st != CG_OK)
        return st;
    if (res->state == CG_RESERVATION_COMMITTED) {
        cg_store_rollback(env->store);
        return commit_replay(env, op, req, out);
    }
    bool expired = res->state != CG_RESERVATION_ACTIVE;
    if (expired && !req->record_if_expired)
        return commit_refused(env, op, out, &serr);
    /* An expired hold that still held tokens is settled EXPIRED by the write. */
    bool settles_expired = expired && holds_tokens(res);
    if ((st = commit_write(env, op, req, out, &serr)) != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, out->rec.path, out->rec.n);
    if (!expired || settles_expired)
        cg_svc_meters_reservations(env->meters, env->metrics_slot,
                                   expired ? CG_SVC_RES_EXPIRED : CG_SVC_RES_COMMITTED, 1);
    cg_svc_meters_usage(env->meters, env->metrics_slot, &out->rec.usage);
    int64_t spent = cg_budget_usage_tokens(&out->rec.usage);
    out->released_tokens = expired ? 0 : (res->tokens > spent ? res->tokens - spent : 0);
    out->overrun_tokens = expired ? 0 : (spent > res->tokens ? spent - res->tokens : 0);
    out->reservation_expired = expired;
    if (!expired) {
        res->state = CG_RESERVATION_COMMITTED;
        res->committed = out->rec.usage;
        res->settled_at_ms = cg_wall_ms();
    }
    /* Committed: now the calibration, best effort. */
    struct cg_calibration_sample cal = {
        .estimate_id = req->estimate_id[0] ? req->estimate_id : res->estimate_id,
        .provider_tokens =
            cg_budget_provider_input_tokens(req->provider_input_tokens, &out->rec.usage),
    };
    cg_calibration_apply(env, tenant, op->request_id, &cal, 1);
    out->rec.calibration_updated = cal.updated;
    out->rec.calibration_factor = cal.factor;
    return CG_OK;
}

/* ---------------------------------------------------------------- RecordUsage ----- */

/* RecordUsage's transaction: the path locked, the ledger entry (or the first one with the
 * key: *replay, the transaction rolled back), the spend and its events, COMMIT. asked is
 * what the caller sent, for comparing a retry. */
static cg_status record_write(const struct cg_svc_env *env, const struct cg_op *op,
                              const struct cg_budget_record_request *req,
                              struct cg_budget_record_result *out, struct cg_ledger_first *first,
                              bool *replay)
{
    const char *tenant = op->principal->tenant_id;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_budget_tx_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    st = cg_store_path_read(env->store, tenant, &req->ids, true, false, req->now_ms, out->rec.path,
                            &out->rec.n, &serr);
    /* Spend before the tenant's current period would count in a period that is over. */
    if (st == CG_OK && req->occurred_at_ms != 0 && out->rec.path[0].period_start_ms != 0 &&
        req->occurred_at_ms < out->rec.path[0].period_start_ms) {
        cg_store_rollback(env->store);
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "field 'occurred_at_unix_ms' is before the current period, which "
                          "started at %lld",
                          (long long)out->rec.path[0].period_start_ms);
    }
    /* What is recorded carries a price. */
    out->rec.price_known = cg_budget_price_usage(env, req->model, &out->rec.usage);
    if (st == CG_OK)
        st = cg_store_ledger_append_at(env->store, tenant, &req->ids, &out->rec.usage, req->model,
                                       req->idempotency_key, NULL, req->occurred_at_ms,
                                       out->rec.ledger_entry_id, first, &serr);
    if (st == CG_ALREADY_EXISTS) {
        cg_store_rollback(env->store);
        *replay = true;
        return CG_OK;
    }
    if (st == CG_OK)
        st = cg_store_path_spend(env->store, tenant, out->rec.path, out->rec.n, &out->rec.usage, 0,
                                 0, &serr);
    if (st == CG_OK)
        st = cg_budget_emit_path(env, tenant, out->rec.path, out->rec.n,
                                 cg_budget_usage_tokens(&out->rec.usage),
                                 out->rec.usage.cache_read_tokens, 0, &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, out->rec.path, out->rec.n);
    cg_svc_meters_usage(env->meters, env->metrics_slot, &out->rec.usage);
    return CG_OK;
}

cg_status cg_budget_record_usage(const struct cg_svc_env *env, const struct cg_op *op,
                                 const struct cg_budget_record_request *req,
                                 struct cg_budget_record_result *out)
{
    out->replayed = false;
    out->rec.usage = req->usage;
    out->rec.ledger_entry_id[0] = '\0';
    out->rec.n = 0;
    struct cg_ledger_first first;
    bool replay = false;
    cg_status st = record_write(env, op, req, out, &first, &replay);
    if (st != CG_OK)
        return st;
    if (replay) {
        /* A retry repeats the first request; anything else must not pass as one. */
        const char *other = !cg_scope_equal(&req->ids, &first.ids)   ? "another scope"
                            : !same_usage(&req->usage, &first.usage) ? "other usage"
                            : strcmp(req->model, first.model) != 0   ? "another model"
                                                                     : NULL;
        if (other != NULL)
            return key_reused(op, req->idempotency_key, &first.ids, first.created_at_ms,
                              "first_ledger_entry_id", out->rec.ledger_entry_id, other);
        out->replayed = true;
        out->rec.usage = first.usage;
        out->rec.price_known = out->rec.usage.cost_micros > 0;
        if ((st = cg_budget_read_path(env, op, &req->ids, out->rec.path, &out->rec.n)) != CG_OK)
            return st;
    }
    /* Committed (a replay calibrated the first time, if at all): best effort. */
    struct cg_calibration_sample cal = {
        .estimate_id = out->replayed ? "" : req->estimate_id,
        .provider_tokens =
            cg_budget_provider_input_tokens(req->provider_input_tokens, &out->rec.usage),
    };
    cg_calibration_apply(env, op->principal->tenant_id, op->request_id, &cal, 1);
    out->rec.calibration_updated = cal.updated;
    out->rec.calibration_factor = cal.factor;
    return CG_OK;
}

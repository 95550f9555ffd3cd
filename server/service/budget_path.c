/* budget_path.c - the rows of a budget path as core levels, the decision over them, the
 * steps of a budget transaction and the read of a path (service/budget_path.h).
 */
#include "service/budget_path.h"
#include "service/op_err.h"

#include <string.h>

#include "base/clock.h"

void cg_budget_row_level(const struct cg_budget_row *row, struct cg_budget_level *out)
{
    memset(out, 0, sizeof *out);
    out->level = (cg_level)row->level;
    out->has_budget = row->has_budget;
    out->closed = row->closed_at_ms != 0;
    out->mode = (cg_budget_mode)row->mode;
    /* Approvals extend the limit until the next SetBudget or reset (store.h, "approvals"). */
    out->limit_tokens = row->approved_extra_tokens > INT64_MAX - row->limit_tokens
                            ? INT64_MAX
                            : row->limit_tokens + row->approved_extra_tokens;
    out->limit_cost_micros = row->limit_cost_micros;
    out->warning_ratio = row->warning_ratio;
    out->backpressure_disabled = row->backpressure_disabled;
    out->ntiers = row->ntiers;
    for (int i = 0; i < row->ntiers && i < CG_TIERS_MAX; i++) {
        out->tiers[i].ratio = row->tier_ratio[i];
        out->tiers[i].delay_ms = row->tier_delay_ms[i];
    }
    out->used_tokens = row->used_tokens;
    out->reserved_tokens = row->reserved_tokens;
    out->used_cost_micros = row->used_cost_micros;
    out->reserved_cost_micros = row->reserved_cost_micros;
    out->allocated = row->allocate_from_parent;
    out->share_limit_tokens = row->limit_tokens; /* a share does not grow with approvals */
    out->allocated_tokens = row->allocated_tokens;
}

void cg_budget_path_decide(const struct cg_budget_row *rows, int n, int64_t tokens, int64_t cost,
                           struct cg_budget_result *out)
{
    struct cg_budget_level levels[CG_PATH_MAX];
    for (int i = 0; i < n; i++)
        cg_budget_row_level(&rows[i], &levels[i]);
    cg_budget_decide(levels, n, tokens, cost, out);
}

/* ---------------------------------------------------------------- refusals -------- */

/* The facts of a refusal at rows[i] (ErrorInfo metadata): where, which level, its figures. */
void cg_budget_deny_facts(struct cg_err *err, const struct cg_budget_row *row, int64_t requested)
{
    cg_store_err_scope(err, &row->ids);
    cg_err_meta(err, "level", cg_level_name((cg_level)row->level));
    cg_err_meta_i64(err, "limit_tokens", (long long)row->limit_tokens);
    cg_err_meta_i64(err, "used_tokens", (long long)row->used_tokens);
    cg_err_meta_i64(err, "reserved_tokens", (long long)row->reserved_tokens);
    cg_err_meta_i64(err, "requested_tokens", (long long)requested);
    if (row->allocated_tokens > 0)
        cg_err_meta_i64(err, "allocated_tokens", (long long)row->allocated_tokens);
}

/* A RESOURCE_EXHAUSTED message naming the level that refused (BUDGET_EXHAUSTED, with its
 * figures), or FAILED_PRECONDITION for a closed scope (SCOPE_CLOSED). */
static cg_status deny(struct cg_err *err, const struct cg_budget_row *rows, int n,
                      const struct cg_budget_result *r, int64_t tokens);

cg_status cg_budget_deny(struct cg_err *err, const struct cg_budget_row *rows, int n,
                         const struct cg_budget_result *r, int64_t tokens, int64_t output_tokens)
{
    cg_status st = deny(err, rows, n, r, tokens);
    int64_t fit = cg_budget_compress_to(r, n, tokens, output_tokens);
    if (st == CG_RESOURCE_EXHAUSTED && fit > 0)
        cg_err_meta_i64(err, "compress_to_tokens", (long long)fit);
    return st;
}

static cg_status deny(struct cg_err *err, const struct cg_budget_row *rows, int n,
                      const struct cg_budget_result *r, int64_t tokens)
{
    for (int i = n - 1; i >= 0; i--) {
        const struct cg_level_verdict *v = &r->levels[i];
        if (v->decision != CG_DECISION_DENY)
            continue;
        const char *what = cg_level_name((cg_level)rows[i].level);
        if (v->reasons & CG_REASON_CLOSED) {
            cg_err_setr(err, CG_FAILED_PRECONDITION, CG_ERR_SCOPE_CLOSED, "the %s scope is closed",
                        what);
            cg_store_err_scope(err, &rows[i].ids);
            cg_err_meta(err, "level", what);
            return CG_FAILED_PRECONDITION;
        }
        if (v->reasons & CG_REASON_COST_LIMIT && !(v->reasons & CG_REASON_TOKEN_LIMIT)) {
            cg_err_setr(err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                        "HARD cost limit of the %s: %lld micros used and reserved of %lld", what,
                        (long long)(rows[i].used_cost_micros + rows[i].reserved_cost_micros),
                        (long long)rows[i].limit_cost_micros);
            cg_store_err_scope(err, &rows[i].ids);
            cg_err_meta(err, "level", what);
            cg_err_meta(err, "limit", "cost");
            cg_err_meta_i64(err, "limit_cost_micros", (long long)rows[i].limit_cost_micros);
            cg_err_meta_i64(err, "used_cost_micros", (long long)rows[i].used_cost_micros);
            cg_err_meta_i64(err, "reserved_cost_micros", (long long)rows[i].reserved_cost_micros);
            return CG_RESOURCE_EXHAUSTED;
        }
        if (rows[i].allocated_tokens > 0 || v->requested_tokens != tokens) {
            cg_err_setr(err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                        "HARD token limit of the %s: %lld used and reserved + %lld "
                        "allocated to children + %lld requested > %lld",
                        what, (long long)(rows[i].used_tokens + rows[i].reserved_tokens),
                        (long long)rows[i].allocated_tokens, (long long)v->requested_tokens,
                        (long long)rows[i].limit_tokens);
            cg_budget_deny_facts(err, &rows[i], v->requested_tokens);
            return CG_RESOURCE_EXHAUSTED;
        }
        cg_err_setr(err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                    "HARD token limit of the %s: %lld used and reserved + %lld requested > %lld",
                    what, (long long)(rows[i].used_tokens + rows[i].reserved_tokens),
                    (long long)tokens, (long long)rows[i].limit_tokens);
        cg_budget_deny_facts(err, &rows[i], tokens);
        return CG_RESOURCE_EXHAUSTED;
    }
    return cg_err_setr(err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED, "budget exhausted");
}

/* ---------------------------------------------------------------- transactions ---- */

cg_status cg_budget_tx_fail(const struct cg_svc_env *env, const struct cg_op *op,
                            const struct cg_err *serr)
{
    cg_store_rollback(env->store);
    return cg_op_store_error(op, serr);
}

cg_status cg_budget_tx_begin(const struct cg_svc_env *env, const struct cg_op *op,
                             struct cg_err *serr)
{
    cg_err_clear(serr);
    cg_status st = cg_store_begin(env->store, serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, serr);
}

cg_status cg_budget_tx_commit(const struct cg_svc_env *env, const struct cg_op *op,
                              struct cg_err *serr)
{
    cg_status st = cg_store_commit(env->store, serr);
    return st == CG_OK ? CG_OK : cg_budget_tx_fail(env, op, serr);
}

/* ---------------------------------------------------------------- reads ----------- */

cg_status cg_budget_read_path(const struct cg_svc_env *env, const struct cg_op *op,
                              const struct cg_scope_ids *ids, struct cg_budget_row *path, int *n)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    int64_t now = cg_wall_ms();
    const char *tenant = op->principal->tenant_id;
    /* Usually one statement; a transaction only when the read must write first. */
    bool need_tx = false;
    cg_status st = cg_store_path_peek(env->store, tenant, ids, now, path, n, &need_tx, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    if (!need_tx)
        return CG_OK;
    st = cg_budget_tx_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    st = cg_store_path_read(env->store, tenant, ids, false, false, now, path, n, &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    return cg_budget_tx_commit(env, op, &serr);
}

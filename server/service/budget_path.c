/* budget_path.c - the rows of a budget path as core levels, the decision over them, the
 * steps of a budget transaction and the read of a path (service/budget_path.h).
 */
#include "service/budget_path.h"

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

/* ---------------------------------------------------------------- transactions ---- */

cg_status cg_budget_store_error(const struct cg_op *op, const struct cg_err *serr)
{
    *op->err = *serr;
    if (op->err->msg[0] == '\0')
        cg_err_set(op->err, serr->code, "%s", cg_status_str(serr->code));
    return serr->code;
}

cg_status cg_budget_store_fail(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_err *serr)
{
    cg_store_rollback(env->store);
    return cg_budget_store_error(op, serr);
}

cg_status cg_budget_begin(const struct cg_svc_env *env, const struct cg_op *op, struct cg_err *serr)
{
    cg_err_clear(serr);
    cg_status st = cg_store_begin(env->store, serr);
    return st == CG_OK ? CG_OK : cg_budget_store_error(op, serr);
}

cg_status cg_budget_commit(const struct cg_svc_env *env, const struct cg_op *op,
                           struct cg_err *serr)
{
    cg_status st = cg_store_commit(env->store, serr);
    return st == CG_OK ? CG_OK : cg_budget_store_fail(env, op, serr);
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
        return cg_budget_store_error(op, &serr);
    if (!need_tx)
        return CG_OK;
    st = cg_budget_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    st = cg_store_path_read(env->store, tenant, ids, false, false, now, path, n, &serr);
    if (st != CG_OK)
        return cg_budget_store_fail(env, op, &serr);
    return cg_budget_commit(env, op, &serr);
}

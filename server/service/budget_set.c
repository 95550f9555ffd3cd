/* budget_set.c - SetBudget in the budget service (service/budget_set.h): the nesting and
 * allocation checks on the locked path, the write, its events, and the caches after COMMIT.
 */
#include "service/budget_set.h"

#include "base/clock.h"
#include "service/budget_events.h"
#include "service/budget_path.h"
#include "service/cache.h"

/* allocate_from_parent: the new share must fit in what the parent has free (limit +
 * approved extensions - used - reserved - allocated), counting the share the scope already
 * holds; a parent without a budget has nothing to allocate. Rolls back on refusal. */
static cg_status check_allocation(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_budget_row *path, int level,
                                  const struct cg_budget_row *existing,
                                  const struct cg_budget_row *row)
{
    if (!row->allocate_from_parent || level < 2)
        return CG_OK;
    const struct cg_budget_row *parent = &path[level - 2];
    const char *parent_name = cg_level_name((cg_level)parent->level);
    const char *parent_id = level == 2   ? ""
                            : level == 3 ? parent->ids.session_id
                                         : parent->ids.task_id;
    const char *parent_field = level == 2   ? "scope"
                               : level == 3 ? "scope.session_id"
                                            : "scope.task_id";
    if (!parent->has_budget) {
        cg_store_rollback(env->store);
        cg_err_setr(op->err, CG_FAILED_PRECONDITION, CG_ERR_BUDGET_NOT_FOUND,
                    "field 'settings.allocate_from_parent': the %s (%s '%s') has no "
                    "budget to allocate from",
                    parent_name, parent_field, parent_id);
        cg_store_err_scope(op->err, &parent->ids);
        cg_err_meta(op->err, "level", parent_name);
        return CG_FAILED_PRECONDITION;
    }
    struct cg_budget_row next = *row;
    next.used_tokens = existing ? existing->used_tokens : 0;
    next.reserved_tokens = existing ? existing->reserved_tokens : 0;
    next.closed_at_ms = existing ? existing->closed_at_ms : 0;
    int64_t need = cg_store_alloc_share(&next) - cg_store_alloc_share(existing);
    struct cg_budget_level p;
    cg_budget_row_level(parent, &p);
    struct cg_budget_result r;
    cg_budget_decide(&p, 1, 0, 0, &r);
    int64_t free_tokens = r.levels[0].remaining_tokens;
    if (need <= 0 || need <= free_tokens)
        return CG_OK;
    cg_store_rollback(env->store);
    /* Counters last: a long id may cut the message at the end of struct cg_err. */
    cg_err_setr(op->err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                "field 'settings.allocate_from_parent': the share needs %lld more tokens, "
                "the %s has %lld free (%s '%s')",
                (long long)need, parent_name, (long long)(free_tokens > 0 ? free_tokens : 0),
                parent_field, parent_id);
    cg_budget_deny_facts(op->err, parent, need);
    cg_err_meta(op->err, "field", "settings.allocate_from_parent");
    return CG_RESOURCE_EXHAUSTED;
}

/* Nesting: not over the nearest budgeted ancestor's limit, and not under the limit of any
 * budget below (the path lock holds the parent rows every child SetBudget locks). On a
 * refusal the transaction is rolled back and op->err says why. */
static cg_status check_nesting(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_budget_row *row, int level,
                               const struct cg_budget_row *path, struct cg_err *serr)
{
    const char *tenant = op->principal->tenant_id;
    struct cg_budget_level mine, parent;
    cg_budget_row_level(row, &mine);
    int parent_index = level - 2; /* path[level-1] is this scope when it exists */
    for (int i = parent_index; i >= 0; i--) {
        if (!path[i].has_budget)
            continue;
        cg_budget_row_level(&path[i], &parent);
        if (cg_budget_check_nesting(&parent, &mine, op->err) != CG_OK) {
            cg_store_rollback(env->store);
            op->err->code = CG_INVALID_ARGUMENT;
            return CG_INVALID_ARGUMENT;
        }
        break;
    }
    int64_t below_tokens = 0, below_cost = 0;
    cg_status st = cg_store_subtree_max_limits(env->store, tenant, &row->ids, &below_tokens,
                                               &below_cost, serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, serr);
    if (row->limit_tokens < below_tokens ||
        (row->limit_cost_micros > 0 && row->limit_cost_micros < below_cost)) {
        cg_store_rollback(env->store);
        bool tokens = row->limit_tokens < below_tokens;
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "%s %lld of the %s is below the %s %lld of a scope under it",
                          tokens ? "limit_tokens" : "limit_cost_micros",
                          (long long)(tokens ? row->limit_tokens : row->limit_cost_micros),
                          cg_level_name((cg_level)level),
                          tokens ? "limit_tokens" : "limit_cost_micros",
                          (long long)(tokens ? below_tokens : below_cost));
    }
    return CG_OK;
}

/* After COMMIT: a share that changed moved the parent's allocated_tokens (migration 0013's
 * trigger): the caches learn the scope's row and the parent as the trigger left it. */
static void caches_after(const struct cg_svc_env *env, const char *tenant,
                         const struct cg_budget_row *path, int level,
                         const struct cg_budget_row *existing, const struct cg_budget_row *stored)
{
    struct cg_budget_row written[2];
    int64_t share_before[2];
    int nwritten = 0;
    if (level >= 2) {
        share_before[nwritten] = cg_store_alloc_share(&path[level - 2]);
        written[nwritten++] = path[level - 2];
    }
    share_before[nwritten] = cg_store_alloc_share(existing);
    written[nwritten++] = *stored;
    cg_store_alloc_mirror(written, nwritten, share_before, true);
    /* The parent is written only when the trigger changed it (its row_version moved). */
    if (nwritten == 2 && written[0].row_version == path[level - 2].row_version)
        cg_cache_written(env, tenant, &written[1], 1);
    else
        cg_cache_written(env, tenant, written, nwritten);
}

cg_status cg_budget_set(const struct cg_svc_env *env, const struct cg_op *op,
                        const struct cg_budget_set_request *req, struct cg_budget_row *stored,
                        bool *created)
{
    const char *tenant = op->principal->tenant_id;
    const struct cg_budget_row *row = req->row;
    int level = req->level;
    cg_status st;
    struct cg_err serr;
    cg_err_clear(&serr);
    if ((st = cg_budget_tx_begin(env, op, &serr)) != CG_OK)
        return st;
    struct cg_budget_row path[CG_PATH_MAX];
    int n = 0;
    st = cg_store_path_read(env->store, tenant, &row->ids, true, true, cg_wall_ms(), path, &n,
                            &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);

    if ((st = check_nesting(env, op, row, level, path, &serr)) != CG_OK)
        return st;
    const struct cg_budget_row *existing = n == level ? &path[n - 1] : NULL;
    if ((st = check_allocation(env, op, path, level, existing, row)) != CG_OK)
        return st;

    st = cg_store_budget_put(env->store, tenant, row, req->expected_version, op->principal->key_id,
                             cg_wall_ms(), req->audit, stored, created, &serr);
    if (st == CG_OK) /* WatchUsage: BUDGET_CHANGED and the crossings a new limit makes */
        st = cg_budget_emit_budget(env, tenant, existing, stored, &serr);
    if (st == CG_OK) /* and the parent's, when the scope's share of it moved */
        st = cg_budget_emit_share(env, tenant, level >= 2 ? &path[level - 2] : NULL, existing,
                                  stored, &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    caches_after(env, tenant, path, level, existing, stored);
    return CG_OK;
}

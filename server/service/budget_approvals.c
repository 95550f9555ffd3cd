/* budget_approvals.c - the approval gate of the budget service: what a CheckBudget or a
 * Reserve whose decision is REQUIRE_APPROVAL does (service/budget_approvals.h).
 *
 * The state machine lives in the store (store.h, "approvals"): PENDING -> APPROVED |
 * DENIED | EXPIRED, with who and when. Approving extends the level's limit by the granted
 * tokens until the next SetBudget or reset; the waiting caller just retries. Every time
 * here is cg_wall_ms(), passed down so that tests of the store can move the clock.
 */
#include "service/budget_approvals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "core/keyrole.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/op_err.h"

/* The APPROVAL level that asks for the approval: the one with the highest projected ratio
 * among those answering REQUIRE_APPROVAL; -1 when none does. */
static int approval_level(const struct cg_budget_result *r, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (r->levels[i].decision != CG_DECISION_REQUIRE_APPROVAL)
            continue;
        if (best < 0 || r->levels[i].projected_ratio > r->levels[best].projected_ratio)
            best = i;
    }
    return best;
}

cg_status cg_budget_approval_gate(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_scope_ids *ids, int64_t tokens, const char *model,
                                  struct cg_budget_row *path, int *n, struct cg_budget_result *r,
                                  struct cg_budget_approval_gate *gate)
{
    memset(gate, 0, sizeof *gate);
    const char *tenant = op->principal->tenant_id;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_budget_tx_begin(env, op, &serr);
    if (st != CG_OK)
        return st;
    int64_t now = cg_wall_ms();
    /* Locked, so that concurrent requests of the scope find each other's approval. */
    st = cg_store_path_read(env->store, tenant, ids, true, false, now, path, n, &serr);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    cg_budget_path_decide(path, *n, tokens, 0, r);
    int at = r->decision == CG_DECISION_REQUIRE_APPROVAL ? approval_level(r, *n) : -1;
    if (at < 0) { /* the budget moved meanwhile: the new decision stands */
        if ((st = cg_budget_tx_commit(env, op, &serr)) == CG_OK)
            cg_cache_written(env, tenant, path, *n);
        return st;
    }

    const struct cg_budget_row *level = &path[at];
    int64_t effective = level->limit_tokens + level->approved_extra_tokens;
    /* What the level judged: its allocated children's shares are held, and the share of
     * its allocated child on the path covers part of the request (core/budget.h). */
    int64_t projected = level->used_tokens + level->reserved_tokens + level->allocated_tokens +
                        r->levels[at].requested_tokens;
    struct cg_approval *request = calloc(1, sizeof *request);
    if (request == NULL) {
        cg_store_rollback(env->store);
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    request->requested_tokens = tokens;
    request->overage_tokens = projected > effective ? projected - effective : 0;
    snprintf(request->model, sizeof request->model, "%s", model ? model : "");
    snprintf(request->requested_by_key_id, sizeof request->requested_by_key_id, "%s",
             op->principal->key_id);
    snprintf(request->reason, sizeof request->reason,
             "%s: %lld used and reserved + %lld requested > %lld tokens (APPROVAL)",
             cg_level_name((cg_level)level->level),
             (long long)(level->used_tokens + level->reserved_tokens), (long long)tokens,
             (long long)effective);
    uint32_t ttl = level->approval_ttl_ms ? level->approval_ttl_ms : CG_APPROVAL_TTL_DEFAULT_MS;
    st = cg_store_approval_request(env->store, tenant, ids, path, *n, at, request, ttl, now,
                                   &gate->approval, &gate->outcome, &serr);
    free(request);
    if (st != CG_OK)
        return cg_budget_tx_fail(env, op, &serr);
    if ((st = cg_budget_tx_commit(env, op, &serr)) != CG_OK)
        return st;
    cg_cache_written(env, tenant, path, *n);
    gate->involved = true;
    return CG_OK;
}

cg_status cg_budget_approval_get(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *approval_id, struct cg_approval *a)
{
    const struct cg_principal *p = op->principal;
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_approval_get(env->store, p->tenant_id, approval_id, cg_wall_ms(), a, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    if (!cg_scope_within(p->scope_session_id, p->scope_task_id, a->ids.session_id, a->ids.task_id))
        return cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_APPROVAL_NOT_FOUND,
                           "approval_id: no such approval");
    return CG_OK;
}

cg_status cg_budget_approval_resolve(const struct cg_svc_env *env, const struct cg_op *op,
                                     const struct cg_budget_approval_decision *d,
                                     struct cg_approval *a, bool *replayed)
{
    const struct cg_principal *p = op->principal;
    /* Who may decide it is a property of the approval that never changes (its scope and
     * the key that opened it), so reading it before the resolve's own transaction is safe. */
    cg_status st = cg_budget_approval_get(env, op, d->approval_id, a);
    if (st != CG_OK)
        return st;
    if (a->requested_by_key_id[0] != '\0' && strcmp(a->requested_by_key_id, p->key_id) == 0) {
        cg_err_setr(op->err, CG_PERMISSION_DENIED, CG_ERR_SELF_APPROVAL,
                    "approval %s was opened by this key; another key must decide it",
                    a->approval_id);
        cg_err_meta(op->err, "approval_id", a->approval_id);
        cg_err_meta(op->err, "key_id", p->key_id);
        return CG_PERMISSION_DENIED;
    }
    struct cg_err serr;
    cg_err_clear(&serr);
    *replayed = false;
    st = cg_store_approval_resolve(env->store, p->tenant_id, d->approval_id, d->decision,
                                   d->granted_tokens, d->decided_by, p->key_id, d->note,
                                   cg_wall_ms(), d->audit, a, replayed, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    if (!*replayed) /* an approval moves approved_extra_tokens of its scope's row */
        cg_cache_dropped(env, p->tenant_id);
    return CG_OK;
}

cg_status cg_budget_approval_list(const struct cg_svc_env *env, const struct cg_op *op,
                                  const struct cg_scope_ids *ids, bool include_descendants,
                                  unsigned states_mask, const struct cg_approval_cursor *after,
                                  int limit, struct cg_budget_approval_page *out)
{
    memset(out, 0, sizeof *out);
    if ((out->rows = calloc((size_t)limit, sizeof *out->rows)) == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_approval_list(
        env->store, op->principal->tenant_id, ids, include_descendants, states_mask, after, limit,
        cg_wall_ms(), out->rows, &out->count, &out->more, &out->next, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

void cg_budget_approval_page_cleanup(struct cg_budget_approval_page *page)
{
    free(page->rows);
    page->rows = NULL;
    page->count = 0;
}

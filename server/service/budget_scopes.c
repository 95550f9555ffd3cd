/* budget_scopes.c - the scope tree in the budget service: CloseScope and GetUsage
 * (service/budget_scopes.h).
 */
#include "service/budget_scopes.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "service/budget_events.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/forecast.h"
#include "service/meters.h"
#include "service/op_err.h"

cg_status cg_budget_close_scope(const struct cg_svc_env *env, const struct cg_op *op,
                                const struct cg_scope_ids *ids, const struct cg_audit *audit,
                                struct cg_scope_close *out, int64_t *returned_tokens)
{
    *returned_tokens = 0;
    const char *tenant = op->principal->tenant_id;
    struct cg_err serr;
    cg_err_clear(&serr);
    /* The close, its SCOPE_CLOSED event and its audit row commit together (store_scopes.c). */
    cg_status st = cg_store_scope_close_events(env->store, tenant, ids,
                                               /* what the close did to the path (released
                                                * holds, a share returned) is worth the
                                                * events of any write */
                                               cg_budget_events_of_path, NULL, audit, out, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    cg_cache_dropped(env, tenant);
    /* The holds the close settled (as released; one already past its expiry as well). */
    cg_svc_meters_reservations(env->meters, env->metrics_slot, CG_SVC_RES_RELEASED,
                               out->released_reservations);
    /* An allocated scope gives its parent back the share it held when it closed: its limit
     * less what it used and what stays reserved (a hold a concurrent Commit or Release
     * settles itself). Closing it again returns nothing. */
    struct cg_budget_row open_row = out->usage.row;
    open_row.closed_at_ms = 0;
    *returned_tokens = out->already_closed ? 0 : cg_store_alloc_share(&open_row);
    return CG_OK;
}

/* The usage by model of every node of the tree (include_by_model). */
static cg_status by_model(const struct cg_svc_env *env, const struct cg_op *op,
                          struct cg_budget_usage *u)
{
    const struct cg_usage_tree *tree = &u->tree;
    if (tree->count > CG_STORE_USAGE_NODES_MAX)
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "field 'include_by_model': at most %d nodes (this tree has %d; lower "
                          "depth or max_children)",
                          CG_STORE_USAGE_NODES_MAX, tree->count);
    int cap = tree->count * CG_BY_MODEL_PER_NODE;
    if ((u->by_model = calloc((size_t)cap, sizeof *u->by_model)) == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_usage_by_model(env->store, op->principal->tenant_id, tree->nodes, tree->count,
                                CG_BY_MODEL_PER_NODE, u->by_model, cap, &u->n_by_model, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_budget_usage(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_budget_usage_request *req, struct cg_budget_usage *out)
{
    memset(out, 0, sizeof *out);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_usage_tree(env->store, op->principal->tenant_id, &req->ids, req->depth,
                                       req->max_children, req->include_closed, &out->tree, &serr);
    if (st != CG_OK) {
        memset(out, 0, sizeof *out);
        return cg_op_store_error(op, &serr);
    }
    if (req->include_by_model && (st = by_model(env, op, out)) != CG_OK) {
        cg_budget_usage_cleanup(out);
        return st;
    }
    /* Forecasts for the nodes one statement takes (the rest read as none). */
    int n = out->tree.count;
    if ((out->forecasts = calloc((size_t)n + 1, sizeof *out->forecasts)) == NULL) {
        cg_budget_usage_cleanup(out);
        return cg_op_oom(op);
    }
    cg_err_clear(&serr);
    if ((st = cg_forecast_nodes(env, op->principal->tenant_id, out->tree.nodes,
                                n < CG_STORE_USAGE_NODES_MAX ? n : CG_STORE_USAGE_NODES_MAX,
                                cg_wall_ms(), out->forecasts, &serr)) != CG_OK) {
        cg_budget_usage_cleanup(out);
        return cg_op_store_error(op, &serr);
    }
    return CG_OK;
}

void cg_budget_usage_cleanup(struct cg_budget_usage *u)
{
    cg_usage_tree_cleanup(&u->tree);
    free(u->by_model);
    free(u->forecasts);
    memset(u, 0, sizeof *u);
}

cg_status cg_budget_scope_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_scope_ids *parent, int level, bool include_closed,
                               int order, const struct cg_scope_cursor *after, int limit,
                               struct cg_budget_scope_page *out)
{
    memset(out, 0, sizeof *out);
    if ((out->rows = calloc((size_t)limit, sizeof *out->rows)) == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_scope_list(env->store, op->principal->tenant_id, parent, level,
                                       include_closed, order, after, limit, out->rows, &out->count,
                                       &out->more, &out->next, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

void cg_budget_scope_page_cleanup(struct cg_budget_scope_page *page)
{
    free(page->rows);
    page->rows = NULL;
    page->count = 0;
}

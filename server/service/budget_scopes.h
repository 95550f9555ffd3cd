/* budget_scopes.h - the scope tree in the budget service (service/budget_scopes.c):
 * CloseScope (the close with its events, then the caches), GetUsage (the usage tree, and
 * the usage by model of its nodes) and ListScopes (a page of scopes). On the calling
 * thread's store (env->store).
 */
#ifndef CG_SERVICE_BUDGET_SCOPES_H
#define CG_SERVICE_BUDGET_SCOPES_H

#include <stdbool.h>
#include <stdint.h>

#include "core/history.h"
#include "service/service.h"
#include "store/store.h"

/* Models listed per node with include_by_model, most used first. */
#define CG_BY_MODEL_PER_NODE 20

/* CloseScope of ids (a session, task or agent of op's tenant), checked by the caller: the
 * close, its SCOPE_CLOSED event, the events of what it did to the path (released holds, a
 * share returned) and its audit row (audit, borrowed) commit together
 * (cg_store_scope_close_events); then the tenant's cached rows go. *returned_tokens gets
 * the share an allocated scope gave its parent back (0 when it was closed already). On error
 * op->err is set. */
cg_status cg_budget_close_scope(const struct cg_svc_env *env, const struct cg_op *op,
                                const struct cg_scope_ids *ids, const struct cg_audit *audit,
                                struct cg_scope_close *out, int64_t *returned_tokens) CG_MUST_CHECK;

/* One GetUsage, checked by the caller (depth 0..3, max_children 1..page max). */
struct cg_budget_usage_request {
    struct cg_scope_ids ids;
    int depth;
    int max_children;
    bool include_closed;
    bool include_by_model; /* at most CG_STORE_USAGE_NODES_MAX nodes */
};

/* What GetUsage read: the tree (store.h) and, with include_by_model, the usage by model of
 * its nodes (by_model[0..n_by_model), each naming its node, at most CG_BY_MODEL_PER_NODE a
 * node). Freed with cg_budget_usage_cleanup. */
struct cg_budget_usage {
    struct cg_usage_tree tree;
    struct cg_model_usage *by_model;
    int n_by_model;
    /* Per node of the tree (forecasts[i] for tree.nodes[i]): when its budget runs out at the
     * recent spend rate (service/forecast.h); zero for nodes without a budget. */
    struct cg_forecast *forecasts;
};

/* GetUsage: the tree under req->ids of op's tenant, and with include_by_model its usage by
 * model (INVALID_ARGUMENT naming include_by_model when the tree has more nodes than that
 * allows). On error op->err is set and *out holds nothing to free. */
cg_status cg_budget_usage(const struct cg_svc_env *env, const struct cg_op *op,
                          const struct cg_budget_usage_request *req,
                          struct cg_budget_usage *out) CG_MUST_CHECK;

/* Frees what cg_budget_usage filled. */
void cg_budget_usage_cleanup(struct cg_budget_usage *u);

/* One page of ListScopes. */
struct cg_budget_scope_page {
    struct cg_scope_usage *rows; /* count rows (malloc'd): cg_budget_scope_page_cleanup */
    int count;
    bool more; /* another page follows, from next */
    struct cg_scope_cursor next;
};

/* ListScopes, checked by the caller: one page of op's tenant's scopes at level under parent
 * as cg_store_scope_list reads it (after NULL: the first page; limit 1..CG_STORE_PAGE_MAX).
 * On error op->err is set as the store said it (a missing parent names its first unknown
 * id as "scope.<field>"). out needs cg_budget_scope_page_cleanup after success and after
 * failure alike. */
cg_status cg_budget_scope_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const struct cg_scope_ids *parent, int level, bool include_closed,
                               int order, const struct cg_scope_cursor *after, int limit,
                               struct cg_budget_scope_page *out) CG_MUST_CHECK;

/* Frees the rows of a page (a zeroed page too). */
void cg_budget_scope_page_cleanup(struct cg_budget_scope_page *page);

#endif

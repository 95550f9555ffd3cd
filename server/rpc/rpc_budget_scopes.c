/* rpc_budget_scopes.c - BudgetService: CloseScope, GetUsage, ListScopes.
 *
 * validate -> one service call (service/budget_scopes.h: CloseScope, GetUsage) or one store
 * call (ListScopes; store.h "scopes: close, usage tree, listing": one transaction per
 * call) -> reply. allocated_tokens is the row's (kept by migration 0013's trigger);
 * CloseScope's returned_tokens is the share the closed scope held of its parent when it was
 * closed. What this version does not keep is answered honestly: ScopeUsage.pending_approvals
 * is not counted yet (0: list them with ListApprovals). ScopeUsage.usage and last_activity_unix_ms
 * come from the scope's spent_* counters and last activity (migration 0011), by_model from the
 * ledger.
 */
#include "rpc/rpc_budget.h"
#include "service/budget_scopes.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "ctxguard/v1/budget.pb-c.h"

#define USAGE_DEPTH_MAX 3
#define CHILDREN_DEFAULT 100
#define PAGE_DEFAULT 100
#define PAGE_MAX CG_STORE_PAGE_MAX
#define TOKEN_MAX 1024

/* ---------------------------------------------------------------- messages -------- */

/* One ScopeUsage without children. Ratios, remaining tokens and the backpressure delay
 * are the scope's own level's (as GetBudget reports them). */
static Ctxguard__V1__ScopeUsage *usage_out(struct cg_rpc_call *call,
                                           const struct cg_scope_usage *node)
{
    const struct cg_budget_row *row = &node->row;
    Ctxguard__V1__ScopeUsage *u =
        NEW(call, Ctxguard__V1__ScopeUsage, ctxguard__v1__scope_usage__init);
    if (u == NULL || (u->scope = cg_rpc_scope_out(call, row)) == NULL)
        return NULL;
    u->level = (Ctxguard__V1__ScopeLevel)row->level;
    u->has_budget = row->has_budget;
    if (row->has_budget && (u->budget = cg_rpc_budget_out(call, row)) == NULL)
        return NULL;
    struct cg_budget_result r;
    cg_budget_path_decide(row, 1, 0, 0, &r);
    u->used_tokens = row->used_tokens;
    u->reserved_tokens = row->reserved_tokens;
    u->approved_extra_tokens = row->approved_extra_tokens;
    u->allocated_tokens = row->allocated_tokens;
    u->remaining_tokens = r.levels[0].remaining_tokens;
    u->usage_ratio = r.levels[0].usage_ratio;
    u->reserved_cost_micros = row->reserved_cost_micros;
    if (row->has_budget && row->limit_cost_micros > 0)
        u->cost_ratio = (double)row->used_cost_micros / (double)row->limit_cost_micros;
    u->backpressure_delay_ms = row->has_budget ? r.levels[0].delay_ms : 0;
    u->open_reservations = node->open_reservations;
    u->state = row->closed_at_ms ? CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED
                                 : CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_OPEN;
    /* A tenant row that only counts usage was not created by a SetBudget. */
    u->created_at_unix_ms = row->version > 0 || row->level > 1 ? row->created_at_ms : 0;
    u->child_count = node->child_count;
    u->last_activity_unix_ms = row->last_activity_ms;
    struct cg_usage spent = {.input_tokens = row->spent_input_tokens,
                             .output_tokens = row->spent_output_tokens,
                             .cache_read_tokens = row->spent_cache_read_tokens,
                             .cache_write_tokens = row->spent_cache_write_tokens,
                             .cost_micros = row->used_cost_micros};
    if ((u->usage = cg_rpc_usage_out(call, &spent)) == NULL)
        return NULL;
    return u;
}

Ctxguard__V1__ScopeUsage *cg_rpc_scope_usage_out(struct cg_rpc_call *call,
                                                 const struct cg_scope_usage *node)
{
    return usage_out(call, node);
}

static Ctxguard__V1__SpendForecast *forecast_out(struct cg_rpc_call *call,
                                                 const struct cg_forecast *f)
{
    Ctxguard__V1__SpendForecast *m =
        NEW(call, Ctxguard__V1__SpendForecast, ctxguard__v1__spend_forecast__init);
    if (m == NULL)
        return NULL;
    m->tokens_per_minute = f->tokens_per_minute;
    m->exhaustion_unix_ms = f->exhaustion_ms;
    m->seconds_to_exhaustion = f->exhaustion_ms ? f->seconds : 0;
    return m;
}

/* ---------------------------------------------------------------- CloseScope ------ */

cg_status cg_rpc_budget_close_scope(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__CloseScopeRequest *req = (const Ctxguard__V1__CloseScopeRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st != CG_OK)
        return st;
    if (level == CG_LEVEL_TENANT)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'scope' must name a session, task or agent: the tenant scope"
                          " cannot be closed");

    struct cg_scope_close closed;
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_op op = cg_rpc_op(call);
    int64_t returned_tokens;
    if ((st = cg_budget_close_scope(&env->svc, &op, &ids, &audit, &closed, &returned_tokens)) !=
        CG_OK)
        return st;

    Ctxguard__V1__CloseScopeResponse *resp =
        NEW(call, Ctxguard__V1__CloseScopeResponse, ctxguard__v1__close_scope_response__init);
    if (resp == NULL || (resp->usage = usage_out(call, &closed.usage)) == NULL)
        return OOM(call);
    resp->released_reservations = closed.released_reservations;
    resp->released_tokens = closed.released_tokens;
    resp->returned_tokens = returned_tokens;
    resp->expired_approvals = closed.expired_approvals;
    resp->closed_scopes = closed.closed_scopes;
    resp->already_closed = closed.already_closed;
    *response = &resp->base;
    return CG_OK;
}

/* ---------------------------------------------------------------- GetUsage -------- */

/* Fills by_model on the nodes of the tree from what GetUsage read (include_by_model). */
static cg_status by_model_out(struct cg_rpc_call *call, const struct cg_budget_usage *usage,
                              Ctxguard__V1__ScopeUsage **nodes)
{
    const struct cg_model_usage *m = usage->by_model;
    for (int i = 0; i < usage->n_by_model; i++) {
        if (m[i].node < 0 || m[i].node >= usage->tree.count)
            continue;
        Ctxguard__V1__ScopeUsage *u = nodes[m[i].node];
        if (u->by_model == NULL && (u->by_model = cg_arena_calloc(call->arena, CG_BY_MODEL_PER_NODE,
                                                                  sizeof(void *))) == NULL)
            return OOM(call);
        if (u->n_by_model >= CG_BY_MODEL_PER_NODE)
            continue;
        Ctxguard__V1__ModelUsage *mu =
            NEW(call, Ctxguard__V1__ModelUsage, ctxguard__v1__model_usage__init);
        if (mu == NULL || (mu->model = cg_arena_strdup(call->arena, m[i].model)) == NULL ||
            (mu->usage = cg_rpc_usage_out(call, &m[i].usage)) == NULL)
            return OOM(call);
        mu->calls = m[i].calls;
        u->by_model[u->n_by_model++] = mu;
    }
    return CG_OK;
}

cg_status cg_rpc_budget_get_usage(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetUsageRequest *req = (const Ctxguard__V1__GetUsageRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st != CG_OK)
        return st;
    if (req->depth > USAGE_DEPTH_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'depth' must be 0..%d, not %u",
                          USAGE_DEPTH_MAX, req->depth);
    if (req->max_children > PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'max_children' must be 1..%d (0 means %d), not %u", PAGE_MAX,
                          CHILDREN_DEFAULT, req->max_children);
    int max_children = req->max_children ? (int)req->max_children : CHILDREN_DEFAULT;

    struct cg_budget_usage_request in = {
        .ids = ids,
        .depth = (int)req->depth,
        .max_children = max_children,
        .include_closed = req->include_closed,
        .include_by_model = req->include_by_model,
    };
    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_usage usage;
    if ((st = cg_budget_usage(&env->svc, &op, &in, &usage)) != CG_OK)
        return st;
    const struct cg_usage_tree *tree = &usage.tree;

    Ctxguard__V1__GetUsageResponse *resp =
        NEW(call, Ctxguard__V1__GetUsageResponse, ctxguard__v1__get_usage_response__init);
    Ctxguard__V1__ScopeUsage **nodes =
        cg_arena_calloc(call->arena, (size_t)tree->count + 1, sizeof *nodes);
    if (resp == NULL || nodes == NULL)
        goto oom;
    for (int i = 0; i < tree->count; i++) {
        const struct cg_scope_usage *node = &tree->nodes[i];
        if ((nodes[i] = usage_out(call, node)) == NULL)
            goto oom;
        if (node->row.has_budget &&
            (nodes[i]->forecast = forecast_out(call, &usage.forecasts[i])) == NULL)
            goto oom;
        if (node->nchildren > 0) {
            nodes[i]->children =
                cg_arena_calloc(call->arena, (size_t)node->nchildren, sizeof(void *));
            if (nodes[i]->children == NULL)
                goto oom;
        }
        /* Children were asked for above the requested depth only. */
        bool wanted = node->row.level - level < (int)req->depth;
        nodes[i]->children_truncated = wanted && (uint32_t)node->nchildren < node->child_count;
        if (node->parent >= 0) {
            Ctxguard__V1__ScopeUsage *parent = nodes[node->parent];
            parent->children[parent->n_children++] = nodes[i];
        }
    }
    resp->root = nodes[0];
    if ((st = by_model_out(call, &usage, nodes)) != CG_OK) {
        cg_budget_usage_cleanup(&usage);
        return st;
    }

    /* The ancestors, judged as a request's path would be (no estimate). */
    if (tree->npath > 1) {
        struct cg_budget_result r;
        cg_budget_path_decide(tree->path, tree->npath, 0, 0, &r);
        resp->path = cg_arena_calloc(call->arena, (size_t)tree->npath, sizeof *resp->path);
        if (resp->path == NULL)
            goto oom;
        for (int i = 0; i < tree->npath - 1; i++)
            if ((resp->path[i] = cg_rpc_level_status(call, &tree->path[i], &r.levels[i])) == NULL)
                goto oom;
        resp->n_path = (size_t)tree->npath - 1;
    }
    resp->evaluated_at_unix_ms = cg_wall_ms();
    cg_budget_usage_cleanup(&usage);
    *response = &resp->base;
    return CG_OK;
oom:
    cg_budget_usage_cleanup(&usage);
    return OOM(call);
}

/* ---------------------------------------------------------------- ListScopes ------ */

/* The filters a page token belongs to. */
struct list_filters {
    struct cg_scope_ids parent;
    int level;
    bool include_closed;
    int order;
};

/* FNV-1a over the filters: a token is only valid with the ones it was issued for. */
static uint64_t filters_hash(const struct list_filters *f)
{
    uint64_t h = 1469598103934665603ULL;
    char head[32];
    snprintf(head, sizeof head, "%d/%d/%d/", f->level, f->include_closed ? 1 : 0, f->order);
    const char *parts[] = {head, f->parent.session_id, "/", f->parent.task_id,
                           "/",  f->parent.agent_id};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p != '\0'; p++) {
            h ^= *p;
            h *= 1099511628211ULL;
        }
    return h;
}

static void hex_encode(const char *s, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (; *s != '\0'; s++) {
        *out++ = digits[(unsigned char)*s >> 4];
        *out++ = digits[(unsigned char)*s & 15];
    }
    *out = '\0';
}

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes len hex digits into out (cap bytes with the NUL); false when malformed. */
static bool hex_decode(const char *s, size_t len, char *out, size_t cap)
{
    if (len % 2 != 0 || len / 2 >= cap)
        return false;
    for (size_t i = 0; i < len; i += 2) {
        int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
            return false;
        out[i / 2] = (char)(hi << 4 | lo);
    }
    out[len / 2] = '\0';
    return true;
}

/* "1.<filters hash>.<sort key>.<created us>.<session hex>.<task hex>.<agent hex>" */
static char *token_out(struct cg_rpc_call *call, const struct list_filters *f,
                       const struct cg_scope_cursor *c)
{
    char s[2 * CG_SCOPE_ID_MAX + 1], t[2 * CG_SCOPE_ID_MAX + 1], a[2 * CG_SCOPE_ID_MAX + 1];
    hex_encode(c->ids.session_id, s);
    hex_encode(c->ids.task_id, t);
    hex_encode(c->ids.agent_id, a);
    char buf[TOKEN_MAX];
    snprintf(buf, sizeof buf, "1.%016" PRIx64 ".%" PRId64 ".%" PRId64 ".%s.%s.%s", filters_hash(f),
             c->sort_key, c->created_at_us, s, t, a);
    return cg_arena_strdup(call->arena, buf);
}

static bool parse_i64_field(const char *s, size_t len, int64_t *out)
{
    char buf[24];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end = NULL;
    long long v = strtoll(buf, &end, 10);
    if (*end != '\0' || v < 0)
        return false;
    *out = v;
    return true;
}

static cg_status token_in(struct cg_rpc_call *call, const char *token, const struct list_filters *f,
                          struct cg_scope_cursor *out)
{
    memset(out, 0, sizeof *out);
    const char *fields[7];
    size_t lens[7];
    int n = 0;
    const char *p = token;
    if (strlen(token) >= TOKEN_MAX)
        goto bad;
    while (n < 7) {
        const char *dot = strchr(p, '.');
        fields[n] = p;
        lens[n] = dot ? (size_t)(dot - p) : strlen(p);
        n++;
        if (dot == NULL)
            break;
        p = dot + 1;
    }
    if (n != 7 || strchr(fields[6], '.') != NULL || lens[0] != 1 || fields[0][0] != '1' ||
        lens[1] != 16)
        goto bad;
    char hash[17];
    memcpy(hash, fields[1], 16);
    hash[16] = '\0';
    char *end = NULL;
    uint64_t h = strtoull(hash, &end, 16);
    if (*end != '\0' || !parse_i64_field(fields[2], lens[2], &out->sort_key) ||
        !parse_i64_field(fields[3], lens[3], &out->created_at_us) ||
        !hex_decode(fields[4], lens[4], out->ids.session_id, sizeof out->ids.session_id) ||
        !hex_decode(fields[5], lens[5], out->ids.task_id, sizeof out->ids.task_id) ||
        !hex_decode(fields[6], lens[6], out->ids.agent_id, sizeof out->ids.agent_id))
        goto bad;
    if (h != filters_hash(f))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' was issued for other filters (parent, level,"
                          " include_closed, order)");
    return CG_OK;
bad:
    return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                      "field 'page_token' is not a token this server issued");
}

/* The checks and the store name a Scope's fields `scope.*`; in ListScopes it is `parent`. */
static cg_status name_parent(struct cg_rpc_call *call, cg_status st)
{
    char msg[sizeof call->err.msg];
    const char *at = strstr(call->err.msg, "scope.");
    if (st != CG_OK && at != NULL) {
        snprintf(msg, sizeof msg, "%.*sparent.%s", (int)(at - call->err.msg), call->err.msg,
                 at + strlen("scope."));
        snprintf(call->err.msg, sizeof call->err.msg, "%s", msg);
    }
    return st;
}

static cg_status parent_in(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope,
                           struct cg_scope_ids *ids, int *level)
{
    return name_parent(call, cg_rpc_scope_in(call, scope, ids, level));
}

/* ListScopes' answer for one page. */
static cg_status list_scopes_out(struct cg_rpc_call *call, const struct list_filters *f,
                                 const struct cg_budget_scope_page *page,
                                 ProtobufCMessage **response)
{
    Ctxguard__V1__ListScopesResponse *resp =
        NEW(call, Ctxguard__V1__ListScopesResponse, ctxguard__v1__list_scopes_response__init);
    if (resp == NULL || (resp->scopes = cg_arena_calloc(call->arena, (size_t)page->count + 1,
                                                        sizeof(void *))) == NULL)
        return OOM(call);
    for (int i = 0; i < page->count; i++)
        if ((resp->scopes[i] = usage_out(call, &page->rows[i])) == NULL)
            return OOM(call);
    resp->n_scopes = (size_t)page->count;
    if (page->more && (resp->next_page_token = token_out(call, f, &page->next)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_list_scopes(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__ListScopesRequest *req = (const Ctxguard__V1__ListScopesRequest *)request;
    struct list_filters f;
    memset(&f, 0, sizeof f);
    int parent_level;
    cg_status st = parent_in(call, req->parent, &f.parent, &parent_level);
    if (st != CG_OK)
        return st;
    if ((int)req->level < 0 || req->level > CTXGUARD__V1__SCOPE_LEVEL__SCOPE_LEVEL_AGENT)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'level': unknown value %d",
                          (int)req->level);
    if (parent_level == CG_LEVEL_AGENT)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'level': an agent has no scopes below it (parent is an agent)");
    f.level = req->level ? (int)req->level : parent_level + 1;
    if (f.level <= parent_level)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'level' must be below the parent's level (%s)",
                          cg_level_name((cg_level)parent_level));
    switch (req->order) {
    case CTXGUARD__V1__SCOPE_ORDER__SCOPE_ORDER_UNSPECIFIED:
    case CTXGUARD__V1__SCOPE_ORDER__SCOPE_ORDER_CREATED_ASC:
        f.order = 1;
        break;
    case CTXGUARD__V1__SCOPE_ORDER__SCOPE_ORDER_USED_TOKENS_DESC:
        f.order = 3;
        break;
    case CTXGUARD__V1__SCOPE_ORDER__SCOPE_ORDER_LAST_ACTIVITY_DESC:
        f.order = 2;
        break;
    default:
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'order': unknown value %d",
                          (int)req->order);
    }
    if (req->page_size > PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_size' must be 1..%d (0 means %d), not %u", PAGE_MAX,
                          PAGE_DEFAULT, req->page_size);
    f.include_closed = req->include_closed;
    struct cg_scope_cursor after;
    bool has_after = req->page_token[0] != '\0';
    if (has_after && (st = token_in(call, req->page_token, &f, &after)) != CG_OK)
        return st;
    int limit = req->page_size ? (int)req->page_size : PAGE_DEFAULT;

    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_scope_page page;
    st = cg_budget_scope_list(&env->svc, &op, &f.parent, f.level, f.include_closed, f.order,
                              has_after ? &after : NULL, limit, &page);
    if (st == CG_OK)
        st = list_scopes_out(call, &f, &page, response);
    else
        st = name_parent(call, st);
    cg_budget_scope_page_cleanup(&page);
    return st;
}

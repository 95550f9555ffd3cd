/* rpc_budget_approvals.c - BudgetService approvals: the approval step of CheckBudget and
 * Reserve in APPROVAL mode, ResolveApproval, GetApproval and ListApprovals.
 *
 * The state machine lives in the store (store.h, "approvals"): PENDING -> APPROVED |
 * DENIED | EXPIRED, with who and when. Approving extends the level's limit by the granted
 * tokens until the next SetBudget or reset; the waiting caller just retries. Every time
 * here is cg_wall_ms(), passed down so that tests of the store can move the clock.
 */
#include "service/cache.h"
#include "rpc/rpc_budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"

#define GRANTED_MAX 1000000000000000LL
#define PAGE_DEFAULT 100

/* ---------------------------------------------------------------- the approval step - */

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

/* ---------------------------------------------------------------- handlers -------- */

/* approval_id: required, at most a UUID's length, no control characters. Ids that are not
 * UUIDs are unknown (NOT_FOUND from the store), like any other unknown id. */
static cg_status check_approval_id(struct cg_rpc_call *call, const char *id)
{
    if (id[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'approval_id' is required");
    return cg_rpc_check_text(call, "approval_id", id, CG_UUID_LEN);
}

/* The approval approval_id into *a, as the caller may see it: one outside a scope-bound
 * key's subtree is NOT_FOUND in the words of an unknown id (store_approvals.c). */
static cg_status approval_read(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                               const char *approval_id, struct cg_approval *a)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_approval_get(env->svc.store, call->principal.tenant_id, approval_id,
                                         cg_wall_ms(), a, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    if (!cg_rpc_scope_reachable(&call->principal, a->ids.session_id, a->ids.task_id))
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_APPROVAL_NOT_FOUND,
                           "approval_id: no such approval");
    return CG_OK;
}

cg_status cg_rpc_budget_resolve_approval(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                         const ProtobufCMessage *request,
                                         ProtobufCMessage **response)
{
    const Ctxguard__V1__ResolveApprovalRequest *req =
        (const Ctxguard__V1__ResolveApprovalRequest *)request;
    cg_status st = check_approval_id(call, req->approval_id);
    if (st != CG_OK)
        return st;
    if (req->decision != CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_APPROVED &&
        req->decision != CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_DENIED)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'decision' must be APPROVAL_STATE_APPROVED or "
                          "APPROVAL_STATE_DENIED (got %d)",
                          req->decision);
    if (req->granted_tokens < 0 || req->granted_tokens > GRANTED_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'granted_tokens' must be between 0 and %lld (got %lld)",
                          (long long)GRANTED_MAX, (long long)req->granted_tokens);
    if (req->decision == CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_DENIED &&
        req->granted_tokens != 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'granted_tokens' must be 0 with APPROVAL_STATE_DENIED");
    if ((st = cg_rpc_check_name(call, "decided_by", req->decided_by, CG_NAME_MAX, false)) !=
            CG_OK ||
        (st = cg_rpc_check_name(call, "note", req->note, CG_APPROVAL_NOTE_MAX, false)) != CG_OK)
        return st;

    struct cg_approval *a = cg_arena_alloc(call->arena, sizeof *a);
    if (a == NULL)
        return OOM(call);
    struct cg_err serr;
    cg_err_clear(&serr);
    /* Who may decide it is a property of the approval that never changes (its scope and
     * the key that opened it), so reading it before the resolve's own transaction is safe. */
    if ((st = approval_read(call, env, req->approval_id, a)) != CG_OK)
        return st;
    if (a->requested_by_key_id[0] != '\0' &&
        strcmp(a->requested_by_key_id, call->principal.key_id) == 0) {
        cg_err_setr(&call->err, CG_PERMISSION_DENIED, CG_ERR_SELF_APPROVAL,
                    "approval %s was opened by this key; another key must decide it",
                    a->approval_id);
        cg_err_meta(&call->err, "approval_id", a->approval_id);
        cg_err_meta(&call->err, "key_id", call->principal.key_id);
        return CG_PERMISSION_DENIED;
    }
    bool replayed = false;
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    st = cg_store_approval_resolve(env->svc.store, call->principal.tenant_id, req->approval_id,
                                   (int)req->decision, req->granted_tokens, req->decided_by,
                                   call->principal.key_id, req->note, cg_wall_ms(), &audit, a,
                                   &replayed, &serr);
    if (st != CG_OK)
        return cg_rpc_store_error(call, &serr);
    if (!replayed) /* an approval moves approved_extra_tokens of its scope's row */
        cg_cache_dropped(&env->svc, call->principal.tenant_id);
    Ctxguard__V1__ResolveApprovalResponse *resp = NEW(
        call, Ctxguard__V1__ResolveApprovalResponse, ctxguard__v1__resolve_approval_response__init);
    if (resp == NULL || (resp->approval = cg_rpc_approval_out(call, a)) == NULL)
        return OOM(call);
    resp->replayed = replayed;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_get_approval(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetApprovalRequest *req = (const Ctxguard__V1__GetApprovalRequest *)request;
    cg_status st = check_approval_id(call, req->approval_id);
    if (st != CG_OK)
        return st;
    struct cg_approval *a = cg_arena_alloc(call->arena, sizeof *a);
    if (a == NULL)
        return OOM(call);
    if ((st = approval_read(call, env, req->approval_id, a)) != CG_OK)
        return st;
    Ctxguard__V1__GetApprovalResponse *resp =
        NEW(call, Ctxguard__V1__GetApprovalResponse, ctxguard__v1__get_approval_response__init);
    if (resp == NULL || (resp->approval = cg_rpc_approval_out(call, a)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

/* Page tokens: "<requested_at_us>.<approval_id>.<filters hash>", so that a token is only
 * accepted by the listing it came from. */
static uint32_t filters_hash(const struct cg_scope_ids *ids, bool descendants, unsigned mask)
{
    uint32_t h = 2166136261u;
    const char *parts[] = {ids->session_id, "\x1f", ids->task_id, "\x1f", ids->agent_id, "\x1f"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++)
            h = (h ^ *p) * 16777619u;
    h = (h ^ (descendants ? 1u : 0u)) * 16777619u;
    h = (h ^ mask) * 16777619u;
    return h;
}

static cg_status token_in(struct cg_rpc_call *call, const char *token, uint32_t hash,
                          struct cg_approval_cursor *out)
{
    memset(out, 0, sizeof *out);
    long long us = 0;
    char id[CG_UUID_LEN + 1] = "";
    unsigned h = 0;
    int used = 0;
    if (strlen(token) > 80 || sscanf(token, "%lld.%36[0-9a-f-].%8x%n", &us, id, &h, &used) != 3 ||
        token[used] != '\0' || us <= 0 || strlen(id) != CG_UUID_LEN)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' is not a token of ListApprovals");
    if (h != hash)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' belongs to a listing with other filters");
    out->requested_at_us = us;
    memcpy(out->approval_id, id, sizeof out->approval_id);
    return CG_OK;
}

cg_status cg_rpc_budget_list_approvals(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                       const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__ListApprovalsRequest *req =
        (const Ctxguard__V1__ListApprovalsRequest *)request;
    struct cg_scope_ids ids;
    int level;
    cg_status st = cg_rpc_scope_in(call, req->scope, &ids, &level);
    if (st != CG_OK)
        return st;
    unsigned mask = 0;
    for (size_t i = 0; i < req->n_states; i++) {
        int state = req->states[i];
        if (state < 0 || state > CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_EXPIRED)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'states[%zu]': unknown value %d", i, state);
        if (state == 0) { /* "any state" */
            mask = 0;
            break;
        }
        mask |= 1u << state;
    }
    if (req->page_size > CG_STORE_PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_size' must be between 1 and %d (0: %d)", CG_STORE_PAGE_MAX,
                          PAGE_DEFAULT);
    int limit = req->page_size ? (int)req->page_size : PAGE_DEFAULT;
    uint32_t hash = filters_hash(&ids, req->include_descendants, mask);
    struct cg_approval_cursor after, next;
    bool paged = req->page_token[0] != '\0';
    if (paged && (st = token_in(call, req->page_token, hash, &after)) != CG_OK)
        return st;

    struct cg_approval *page = calloc((size_t)limit, sizeof *page);
    if (page == NULL)
        return OOM(call);
    int count = 0;
    bool more = false;
    struct cg_err serr;
    cg_err_clear(&serr);
    st = cg_store_approval_list(env->svc.store, call->principal.tenant_id, &ids,
                                req->include_descendants, mask, paged ? &after : NULL, limit,
                                cg_wall_ms(), page, &count, &more, &next, &serr);
    if (st != CG_OK) {
        free(page);
        return cg_rpc_store_error(call, &serr);
    }
    Ctxguard__V1__ListApprovalsResponse *resp =
        NEW(call, Ctxguard__V1__ListApprovalsResponse, ctxguard__v1__list_approvals_response__init);
    if (resp == NULL || (resp->approvals = cg_arena_calloc(call->arena, (size_t)count + 1,
                                                           sizeof(void *))) == NULL) {
        free(page);
        return OOM(call);
    }
    for (int i = 0; i < count; i++) {
        if ((resp->approvals[i] = cg_rpc_approval_out(call, &page[i])) == NULL) {
            free(page);
            return OOM(call);
        }
    }
    free(page);
    resp->n_approvals = (size_t)count;
    resp->next_page_token =
        more ? cg_arena_sprintf(call->arena, "%lld.%s.%08x", (long long)next.requested_at_us,
                                next.approval_id, hash)
             : cg_arena_strdup(call->arena, "");
    if (resp->next_page_token == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

/* rpc_budget_approvals.c - BudgetService approvals: ResolveApproval, GetApproval and
 * ListApprovals (the approval gate of CheckBudget and Reserve, what ResolveApproval does and
 * the page ListApprovals reads are service/budget_approvals.c; the Approval message is
 * rpc_budget_out.c).
 *
 * The state machine lives in the store (store.h, "approvals"): PENDING -> APPROVED |
 * DENIED | EXPIRED, with who and when.
 */
#include "rpc/rpc_budget.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRANTED_MAX 1000000000000000LL
#define PAGE_DEFAULT 100

/* ---------------------------------------------------------------- handlers -------- */

/* approval_id: required, at most a UUID's length, no control characters. Ids that are not
 * UUIDs are unknown (NOT_FOUND from the store), like any other unknown id. */
static cg_status check_approval_id(struct cg_rpc_call *call, const char *id)
{
    if (id[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'approval_id' is required");
    return cg_rpc_check_text(call, "approval_id", id, CG_UUID_LEN);
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
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_budget_approval_decision d = {
        .approval_id = req->approval_id,
        .decision = (int)req->decision,
        .granted_tokens = req->granted_tokens,
        .decided_by = req->decided_by,
        .note = req->note,
        .audit = &audit,
    };
    struct cg_op op = cg_rpc_op(call);
    bool replayed = false;
    if ((st = cg_budget_approval_resolve(&env->svc, &op, &d, a, &replayed)) != CG_OK)
        return st;
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
    struct cg_op op = cg_rpc_op(call);
    if ((st = cg_budget_approval_get(&env->svc, &op, req->approval_id, a)) != CG_OK)
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

/* ListApprovals' answer for one page (hash: the filters', for the next page's token). */
static cg_status list_approvals_out(struct cg_rpc_call *call,
                                    const struct cg_budget_approval_page *page, uint32_t hash,
                                    ProtobufCMessage **response)
{
    Ctxguard__V1__ListApprovalsResponse *resp =
        NEW(call, Ctxguard__V1__ListApprovalsResponse, ctxguard__v1__list_approvals_response__init);
    if (resp == NULL || (resp->approvals = cg_arena_calloc(call->arena, (size_t)page->count + 1,
                                                           sizeof(void *))) == NULL)
        return OOM(call);
    for (int i = 0; i < page->count; i++)
        if ((resp->approvals[i] = cg_rpc_approval_out(call, &page->rows[i])) == NULL)
            return OOM(call);
    resp->n_approvals = (size_t)page->count;
    resp->next_page_token = page->more ? cg_arena_sprintf(call->arena, "%lld.%s.%08x",
                                                          (long long)page->next.requested_at_us,
                                                          page->next.approval_id, hash)
                                       : cg_arena_strdup(call->arena, "");
    if (resp->next_page_token == NULL)
        return OOM(call);
    *response = &resp->base;
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
    struct cg_approval_cursor after;
    bool paged = req->page_token[0] != '\0';
    if (paged && (st = token_in(call, req->page_token, hash, &after)) != CG_OK)
        return st;

    struct cg_op op = cg_rpc_op(call);
    struct cg_budget_approval_page page;
    st = cg_budget_approval_list(&env->svc, &op, &ids, req->include_descendants, mask,
                                 paged ? &after : NULL, limit, &page);
    if (st == CG_OK)
        st = list_approvals_out(call, &page, hash, response);
    cg_budget_approval_page_cleanup(&page);
    return st;
}

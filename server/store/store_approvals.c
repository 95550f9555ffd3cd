/* store_approvals.c - the facade of approvals: argument checks and the deadline, then
 * PostgreSQL (store_pg_approvals.c). Contracts in store.h ("approvals"). */
#include "store/store_internal.h"

#include <stdio.h>
#include <string.h>

/* Defined in store_pg_approvals.c; contracts in store.h. */
cg_status cg_pg_approval_request(struct cg_pg *pg, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_budget_row *level,
                                 const struct cg_approval *request, uint32_t ttl_ms, int64_t now_ms,
                                 struct cg_approval *out, cg_approval_outcome *outcome,
                                 struct cg_err *err);
cg_status cg_pg_approval_resolve(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                                 int decision, int64_t granted_tokens, const char *decided_by,
                                 const char *key_id, const char *note, int64_t now_ms,
                                 const struct cg_audit *audit, struct cg_approval *out,
                                 bool *replayed, struct cg_err *err);
cg_status cg_pg_approval_get(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                             int64_t now_ms, struct cg_approval *out, struct cg_err *err);
cg_status cg_pg_approval_list(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, bool include_descendants,
                              unsigned states_mask, const struct cg_approval_cursor *after,
                              int limit, int64_t now_ms, struct cg_approval *out, int *count,
                              bool *more, struct cg_approval_cursor *next, struct cg_err *err);
cg_status cg_pg_approvals_expire(struct cg_pg *pg, const char *tenant_id, int64_t now_ms, int limit,
                                 int *expired, struct cg_err *err);

#define GRANTED_MAX 1000000000000000LL /* 10^15 */

/* An approval id: a canonical UUID (either case) into id, else CG_NOT_FOUND as an unknown
 * one (there is no approval with an id that is not a UUID). */
static cg_status approval_id_in(const char *approval_id, char id[CG_UUID_LEN + 1],
                                struct cg_err *err)
{
    if (approval_id == NULL || approval_id[0] == '\0')
        return cg_err_set(err, CG_INVALID_ARGUMENT, "approval_id: required");
    if (!cg__store_normalize_uuid(approval_id, id))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_APPROVAL_NOT_FOUND,
                           "approval_id: no such approval");
    return CG_OK;
}

/* The level-th row of a path ids names: its ids are the prefix of ids'. */
static bool row_on_path(const struct cg_budget_row *row, int level, const struct cg_scope_ids *ids)
{
    return (level < 2 || strcmp(row->ids.session_id, ids->session_id) == 0) &&
           (level < 3 || strcmp(row->ids.task_id, ids->task_id) == 0) &&
           (level < 4 || strcmp(row->ids.agent_id, ids->agent_id) == 0);
}

cg_status cg_store_approval_request(struct cg_store *store, const char *tenant_id,
                                    const struct cg_scope_ids *ids,
                                    const struct cg_budget_row *rows, int n, int level_index,
                                    const struct cg_approval *request, uint32_t ttl_ms,
                                    int64_t now_ms, struct cg_approval *out,
                                    cg_approval_outcome *outcome, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    *outcome = CG_APPROVAL_STILL_PENDING;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (rows == NULL || n < 1 || n > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: must be 1..4 rows of a path");
    if (level_index < 0 || level_index >= n || rows[level_index].level != level_index + 1 ||
        !row_on_path(&rows[level_index], level_index + 1, ids))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "level_index: not a row of the scope's path");
    if (ttl_ms == 0 || ttl_ms > INT32_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "ttl_ms: must be 1..%d", INT32_MAX);
    if (request == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "request: missing");
    if (request->requested_tokens < 0 || request->overage_tokens < 0 ||
        request->estimated_cost_micros < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "request: amounts must not be negative");
    rc = cg__store_check_text(request->model, sizeof request->model, 0, CG_MODEL_MAX, "model", err);
    if (rc == CG_OK)
        rc = cg__store_check_text(request->reason, sizeof request->reason, 0,
                                  CG_APPROVAL_REASON_MAX, "reason", err);
    if (rc == CG_OK && request->requested_by_key_id[0] != '\0' &&
        !cg__store_key_id_valid(request->requested_by_key_id))
        rc = cg_err_set(err, CG_INVALID_ARGUMENT, "requested_by_key_id: not a key id");
    if (rc != CG_OK)
        return rc;
    return cg_pg_approval_request(store->pg, id, ids, &rows[level_index], request, ttl_ms, now_ms,
                                  out, outcome, err);
}

cg_status cg_store_approval_resolve(struct cg_store *store, const char *tenant_id,
                                    const char *approval_id, int decision, int64_t granted_tokens,
                                    const char *decided_by, const char *key_id, const char *note,
                                    int64_t now_ms, const struct cg_audit *audit,
                                    struct cg_approval *out, bool *replayed, struct cg_err *err)
{
    *replayed = false;
    /* approval_id may point into *out (a re-read): copied before out is cleared. */
    char id[CG_UUID_LEN + 1], approval[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = approval_id_in(approval_id, approval, err);
    memset(out, 0, sizeof *out);
    if (rc != CG_OK)
        return rc;
    if (decision != CG_APPROVAL_APPROVED && decision != CG_APPROVAL_DENIED)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "decision: must be APPROVED or DENIED");
    if (granted_tokens < 0 || granted_tokens > GRANTED_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "granted_tokens: must be 0..%lld",
                          (long long)GRANTED_MAX);
    if (decision == CG_APPROVAL_DENIED && granted_tokens != 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "granted_tokens: must be 0 with DENIED");
    if (decided_by == NULL)
        decided_by = "";
    if (note == NULL)
        note = "";
    if (key_id == NULL)
        key_id = "";
    rc = cg__store_check_text(decided_by, 0, 0, CG_NAME_MAX, "decided_by", err);
    if (rc == CG_OK)
        rc = cg__store_check_text(note, 0, 0, CG_APPROVAL_NOTE_MAX, "note", err);
    if (rc == CG_OK && key_id[0] != '\0' && !cg__store_key_id_valid(key_id))
        rc = cg_err_set(err, CG_INVALID_ARGUMENT, "key_id: not a key id");
    if (rc != CG_OK)
        return rc;
    return cg_pg_approval_resolve(store->pg, id, approval, decision, granted_tokens, decided_by,
                                  key_id, note, now_ms, audit, out, replayed, err);
}

cg_status cg_store_approval_get(struct cg_store *store, const char *tenant_id,
                                const char *approval_id, int64_t now_ms, struct cg_approval *out,
                                struct cg_err *err)
{
    /* approval_id may point into *out (a re-read): copied before out is cleared. */
    char id[CG_UUID_LEN + 1], approval[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = approval_id_in(approval_id, approval, err);
    memset(out, 0, sizeof *out);
    if (rc != CG_OK)
        return rc;
    return cg_pg_approval_get(store->pg, id, approval, now_ms, out, err);
}

cg_status cg_store_approval_list(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, bool include_descendants,
                                 unsigned states_mask, const struct cg_approval_cursor *after,
                                 int limit, int64_t now_ms, struct cg_approval *out, int *count,
                                 bool *more, struct cg_approval_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (limit < 1 || limit > CG_STORE_PAGE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_STORE_PAGE_MAX);
    if (out == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "out: missing");
    struct cg_approval_cursor cursor;
    if (after != NULL) {
        memset(&cursor, 0, sizeof cursor);
        cursor.requested_at_us = after->requested_at_us;
        if (!cg__store_normalize_uuid(after->approval_id, cursor.approval_id))
            return cg_err_set(err, CG_INVALID_ARGUMENT, "after: not a cursor of this listing");
        after = &cursor;
    }
    return cg_pg_approval_list(store->pg, id, ids, include_descendants, states_mask, after, limit,
                               now_ms, out, count, more, next, err);
}

cg_status cg_store_approvals_expire(struct cg_store *store, const char *tenant_id, int64_t now_ms,
                                    int limit, int *expired, struct cg_err *err)
{
    *expired = 0;
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    if (limit < 1 || limit > CG_SWEEP_BATCH_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_SWEEP_BATCH_MAX);
    char id[CG_UUID_LEN + 1];
    if (tenant_id == NULL || !cg__store_normalize_uuid(tenant_id, id))
        return CG_OK;
    return cg_pg_approvals_expire(store->pg, id, now_ms, limit, expired, err);
}

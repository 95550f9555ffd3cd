/* store_budget.c - the facade of budgets: checks, deadline, then PostgreSQL (store_pg_budget.c). */
#include "store/store_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

/* ------------------------------------------------------------------ budgets --- */

/* Checks a text argument: valid UTF-8, at most max_bytes bytes (when > 0) and max_chars
 * characters (when > 0). cap is the size of the buffer it lives in, if any (0: a plain
 * string), so that an unterminated fixed array is caught too. */

static cg_status check_usage(const struct cg_usage *usage, struct cg_err *err)
{
    if (usage == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "usage: missing");
    const struct {
        int64_t value;
        const char *field;
    } amounts[] = {
        {usage->input_tokens, "usage.input_tokens"},
        {usage->output_tokens, "usage.output_tokens"},
        {usage->cache_read_tokens, "usage.cache_read_tokens"},
        {usage->cache_write_tokens, "usage.cache_write_tokens"},
        {usage->cost_micros, "usage.cost_micros"},
    };
    for (size_t i = 0; i < sizeof amounts / sizeof amounts[0]; i++) {
        if (amounts[i].value < 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT, "%s: must not be negative",
                              amounts[i].field);
    }
    return CG_OK;
}

/* The checks the table's constraints would make, with the field named. The detailed
 * rules (tiers ascending, bounds from the API) are core/budget's; these keep the row
 * storable. */
static cg_status check_settings(const struct cg_budget_row *row, int level, struct cg_err *err)
{
    if (row->mode < 1 || row->mode > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.mode: must be 1 HARD, 2 SOFT or 3 APPROVAL");
    if (row->limit_tokens <= 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.limit_tokens: must be positive");
    if (row->limit_cost_micros < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.limit_cost_micros: must not be negative");
    if (!isfinite(row->warning_ratio) || row->warning_ratio <= 0 || row->warning_ratio > 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.warning_ratio: must be in (0, 1]");
    if (row->ntiers < 0 || row->ntiers > CG_TIERS_STORE_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.backpressure_tiers: at most %d tiers",
                          CG_TIERS_STORE_MAX);
    for (int i = 0; i < row->ntiers; i++) {
        if (!isfinite(row->tier_ratio[i]) || row->tier_ratio[i] <= 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "settings.backpressure_tiers[%d].threshold_ratio: must be a"
                              " positive number",
                              i);
        if (row->tier_delay_ms[i] > INT32_MAX)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "settings.backpressure_tiers[%d].delay_ms: too large", i);
    }
    if (row->on_store_failure < 1 || row->on_store_failure > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.on_store_failure: must be 1 FAIL_CLOSED, 2 FAIL_OPEN or 3"
                          " LOCAL_ALLOWANCE");
    if (row->local_allowance_tokens < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.local_allowance_tokens: must not be negative");
    if (row->reset_period < 1 || row->reset_period > 3)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.reset_period: must be 1 NONE, 2 DAILY or 3 MONTHLY");
    if (row->reset_period != 1 && level != 1)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.reset_period: only a tenant budget resets");
    if (row->reservation_ttl_ms > INT32_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings.reservation_ttl_ms: too large");
    return CG_OK;
}

cg_status cg_store_begin(struct cg_store *store, struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_begin(store->pg, err);
}

cg_status cg_store_commit(struct cg_store *store, struct cg_err *err)
{
    /* Past the deadline nothing is sent: the transaction stays open for the caller's
     * rollback, and the caller answers DEADLINE_EXCEEDED with nothing written. */
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_commit(store->pg, err);
}

void cg_store_rollback(struct cg_store *store)
{
    cg_pg_rollback(store->pg);
}

cg_status cg_store_path_read(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool lock, bool allow_missing_last,
                             int64_t now_ms, struct cg_budget_row out[4], int *n,
                             struct cg_err *err)
{
    *n = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_path_read(store->pg, id, ids, lock, allow_missing_last, now_ms, out, n, err);
}

cg_status cg_store_budget_put(struct cg_store *store, const char *tenant_id,
                              const struct cg_budget_row *row, int64_t expected_version,
                              const char *key_id, int64_t now_ms, const struct cg_audit *audit,
                              struct cg_budget_row *out, bool *created, struct cg_err *err)
{
    *created = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (row == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "settings: missing");
    rc = cg__store_check_ids(&row->ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (expected_version < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "expected_version: must not be negative");
    if (key_id != NULL && key_id[0] != '\0' && !cg__store_key_id_valid(key_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "key_id: must be 1..%d characters of A-Z a-z 0-9 _ -", CG_KEY_ID_LEN);
    rc = cg__store_check_text(row->description, sizeof row->description, 0, CG_NAME_MAX,
                              "settings.description", err);
    if (rc != CG_OK)
        return rc;

    /* The level follows from the ids; a row without a budget keeps neutral settings, so
     * that what it stores never depends on fields that mean nothing. */
    struct cg_budget_row stored = *row;
    stored.level = cg_scope_level(&row->ids);
    if (stored.has_budget) {
        rc = check_settings(&stored, stored.level, err);
        if (rc != CG_OK)
            return rc;
    } else {
        stored.mode = 1;
        stored.limit_tokens = 0;
        stored.limit_cost_micros = 0;
        stored.warning_ratio = 0.8;
        stored.backpressure_disabled = false;
        stored.ntiers = 0;
        stored.on_store_failure = 1;
        stored.local_allowance_tokens = 0;
        stored.reset_period = 1;
        stored.reservation_ttl_ms = 0;
        stored.allocate_from_parent = false;
    }
    if (stored.allocate_from_parent && stored.level < 2)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "settings.allocate_from_parent: the tenant has no parent");
    return cg_pg_budget_put(store->pg, id, &stored, expected_version, key_id, now_ms, audit, out,
                            created, err);
}

/* rows[0..n) must be the rows of one path, tenant first. */
static cg_status check_path_rows(const struct cg_budget_row *rows, int n, struct cg_err *err)
{
    if (rows == NULL || n < 1 || n > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: must be 1..4 rows of a path");
    cg_status rc = cg__store_check_ids(&rows[n - 1].ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (cg_scope_level(&rows[n - 1].ids) != n)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: does not match the path in rows");
    return CG_OK;
}

cg_status cg_store_path_add(struct cg_store *store, const char *tenant_id,
                            struct cg_budget_row *rows, int n, int64_t used_tokens,
                            int64_t reserved_tokens, int64_t used_cost_micros,
                            int64_t reserved_cost_micros, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if ((rc = check_path_rows(rows, n, err)) != CG_OK)
        return rc;
    return cg_pg_path_add(store->pg, id, rows, n, used_tokens, reserved_tokens, used_cost_micros,
                          reserved_cost_micros, err);
}

cg_status cg_store_path_spend(struct cg_store *store, const char *tenant_id,
                              struct cg_budget_row *rows, int n, const struct cg_usage *spent,
                              int64_t reserved_tokens, int64_t reserved_cost_micros,
                              struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if ((rc = check_path_rows(rows, n, err)) != CG_OK || (rc = check_usage(spent, err)) != CG_OK)
        return rc;
    return cg_pg_path_change(store->pg, id, rows, n, spent, 0, reserved_tokens, 0,
                             reserved_cost_micros, err);
}

cg_status cg_store_reservation_insert(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids, int64_t tokens,
                                      int64_t cost_micros, const char *model,
                                      const char *estimate_id, const char *idempotency_key,
                                      uint32_t ttl_ms, struct cg_reservation *out,
                                      struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    if (tokens < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "tokens: must not be negative");
    if (cost_micros < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "cost_micros: must not be negative");
    if (ttl_ms == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "ttl_ms: must be positive");
    model = model ? model : "";
    estimate_id = estimate_id ? estimate_id : "";
    idempotency_key = idempotency_key ? idempotency_key : "";
    rc = cg__store_check_text(model, 0, 0, CG_MODEL_MAX, "model", err);
    if (rc == CG_OK)
        rc = cg__store_check_text(estimate_id, 0, CG_IDEMPOTENCY_MAX, 0, "estimate_id", err);
    if (rc == CG_OK)
        rc =
            cg__store_check_text(idempotency_key, 0, CG_IDEMPOTENCY_MAX, 0, "idempotency_key", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_reservation_insert(store->pg, id, ids, tokens, cost_micros, model, estimate_id,
                                    idempotency_key, ttl_ms, out, err);
}

cg_status cg_store_reservation_lock(struct cg_store *store, const char *tenant_id,
                                    const char *reservation_id, struct cg_reservation *out,
                                    struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1], rid[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id) || !cg__store_normalize_uuid(reservation_id, rid))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                           "reservation_id: no such reservation");
    return cg_pg_reservation_lock(store->pg, id, rid, out, err);
}

cg_status cg_store_reservation_settle(struct cg_store *store, const char *tenant_id,
                                      const char *reservation_id, int state,
                                      const struct cg_usage *usage, struct cg_err *err)
{
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    char id[CG_UUID_LEN + 1], rid[CG_UUID_LEN + 1];
    if (!cg__store_normalize_uuid(tenant_id, id) || !cg__store_normalize_uuid(reservation_id, rid))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                           "reservation_id: no such reservation");
    if (state < 2 || state > 4)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "state: must be 2 COMMITTED, 3 RELEASED or 4 EXPIRED");
    if (state == 2) {
        cg_status rc = check_usage(usage, err);
        if (rc != CG_OK)
            return rc;
    }
    /* Only a commit records usage; the others settle with none. */
    return cg_pg_reservation_settle(store->pg, id, rid, state, state == 2 ? usage : NULL, err);
}

cg_status cg_store_ledger_append(struct cg_store *store, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_usage *usage,
                                 const char *model, const char *idempotency_key,
                                 const char *reservation_id, char *entry_id,
                                 struct cg_ledger_first *first, struct cg_err *err)
{
    return cg_store_ledger_append_at(store, tenant_id, ids, usage, model, idempotency_key,
                                     reservation_id, 0, entry_id, first, err);
}

cg_status cg_store_ledger_append_at(struct cg_store *store, const char *tenant_id,
                                    const struct cg_scope_ids *ids, const struct cg_usage *usage,
                                    const char *model, const char *idempotency_key,
                                    const char *reservation_id, int64_t occurred_at_ms,
                                    char *entry_id, struct cg_ledger_first *first,
                                    struct cg_err *err)
{
    if (entry_id != NULL)
        entry_id[0] = '\0';
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (entry_id == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "entry_id: missing");
    rc = cg__store_check_ids(ids, "scope", err);
    if (rc == CG_OK)
        rc = check_usage(usage, err);
    model = model ? model : "";
    idempotency_key = idempotency_key ? idempotency_key : "";
    if (rc == CG_OK)
        rc = cg__store_check_text(model, 0, 0, CG_MODEL_MAX, "model", err);
    if (rc == CG_OK)
        rc =
            cg__store_check_text(idempotency_key, 0, CG_IDEMPOTENCY_MAX, 0, "idempotency_key", err);
    if (rc != CG_OK)
        return rc;
    char rid[CG_UUID_LEN + 1] = "";
    if (reservation_id != NULL && reservation_id[0] != '\0' &&
        !cg__store_normalize_uuid(reservation_id, rid))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                           "reservation_id: no such reservation");
    if (occurred_at_ms < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "occurred_at_ms: must not be negative");
    return cg_pg_ledger_append(store->pg, id, ids, usage, model, idempotency_key, rid,
                               occurred_at_ms, entry_id, first, err);
}

cg_status cg_store_subtree_max_limits(struct cg_store *store, const char *tenant_id,
                                      const struct cg_scope_ids *ids, int64_t *max_tokens,
                                      int64_t *max_cost_micros, struct cg_err *err)
{
    *max_tokens = 0;
    *max_cost_micros = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_subtree_max_limits(store->pg, id, ids, max_tokens, max_cost_micros, err);
}

cg_status cg_store_path_peek(struct cg_store *store, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t now_ms,
                             struct cg_budget_row out[4], int *n, bool *need_tx, struct cg_err *err)
{
    *n = 0;
    *need_tx = false;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc == CG_OK)
        rc = cg__store_check_ids(ids, "scope", err);
    if (rc != CG_OK)
        return rc;
    return cg_pg_path_peek(store->pg, id, ids, now_ms, out, n, need_tx, err);
}

cg_status cg_store_ledger_entry_of(struct cg_store *store, const char *tenant_id,
                                   const char *reservation_id, char *entry_id, struct cg_err *err)
{
    entry_id[0] = '\0';
    char id[CG_UUID_LEN + 1], rid[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (!cg__store_normalize_uuid(reservation_id, rid))
        return cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                           "reservation_id: no such reservation");
    return cg_pg_ledger_entry_of(store->pg, id, rid, entry_id, err);
}

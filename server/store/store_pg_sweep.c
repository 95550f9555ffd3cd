/* store_pg_sweep.c - the sweeper's SQL: expired reservations settled and their holds
 * returned, calendar resets of tenant budgets applied (the reset itself: store_pg_reset.c,
 * shared with the budget reads). See store.h ("sweeper and resets")
 * for the contract and store_pg.c for how statements run.
 *
 * Everything here works tenant by tenant through keys and indexes that start with
 * tenant_id (the tenant row's primary key, reservations_expiry), so that it keeps working
 * on a database distributed by tenant, except two reads that find the tenants to visit:
 * the cursor over all tenants (the retention walk) and the tenants with work due (a range
 * of a partial index per kind of work, keyed by the due time). The boundaries of periods are
 * computed by the functions of migrations/0004_resets.sql, on the tenant's wall clock.
 */
#include "store/store_pg_sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store_pg_events.h"
#include "store/store_pg_internal.h"
#include "store/store_pg_reset.h"

/* The caller's clock comes in as unix ms and is used as to_timestamp(ms / 1e3): float8
 * seconds, which to_timestamp rounds to the microsecond, so every millisecond is exact. */

static cg_status inside_tx(struct cg_pg *pg, const char *what, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "%s called inside a transaction", what);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

cg_status cg_pg_sweep_tenants(struct cg_pg *pg, const char *after_id, int limit,
                              char (*ids)[CG_UUID_LEN + 1], int *count, struct cg_err *err)
{
    *count = 0;
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {after_id, limit_text};
    PGresult *res = NULL;
    /* By primary key: a page boundary never skips or repeats a tenant, even when tenants
     * are created meanwhile. */
    cg_status rc = cg__pg_run(pg, "sweep_tenants",
                              "SELECT tenant_id::text FROM tenants"
                              " WHERE $1::text = '' OR tenant_id > NULLIF($1::text, '')::uuid"
                              " ORDER BY tenant_id LIMIT $2::int",
                              2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: not a tenant id");
        goto out;
    }
    int rows = PQntuples(res);
    for (int i = 0; i < rows && i < limit; i++)
        cg__pg_copy_str(ids[i], sizeof ids[i], PQgetvalue(res, i, 0));
    *count = rows < limit ? rows : limit;
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_sweep_due(struct cg_pg *pg, int64_t now_ms, int limit, struct cg_sweep_due *out,
                          int *count, bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char now_text[24], limit_text[16];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {now_text, limit_text};
    PGresult *res = NULL;
    /* Each arm is a range of a partial index whose key is the due time (scopes_reset_due,
     * reservations_due, approvals_due): it reads the rows due, never every tenant. The
     * last row says whether an arm found limit rows, so that *more is known. */
    cg_status rc = cg__pg_run(
        pg, "sweep_due",
        "WITH r AS (SELECT tenant_id FROM scopes"
        "  WHERE session_id = '' AND task_id = '' AND agent_id = ''"
        "  AND next_reset_at IS NOT NULL AND next_reset_at <= to_timestamp($1::int8 / 1e3)"
        "  ORDER BY next_reset_at LIMIT $2::int),"
        " x AS (SELECT tenant_id FROM reservations"
        "  WHERE state = 1 AND expires_at <= to_timestamp($1::int8 / 1e3)"
        "  ORDER BY expires_at LIMIT $2::int),"
        " a AS (SELECT tenant_id FROM approvals"
        "  WHERE state = 1 AND expires_at <= to_timestamp($1::int8 / 1e3)"
        "  ORDER BY expires_at LIMIT $2::int)"
        " SELECT t::text, bool_or(k = 1), bool_or(k = 2), bool_or(k = 3) FROM ("
        "  SELECT tenant_id, 1 FROM r UNION ALL SELECT tenant_id, 2 FROM x"
        "  UNION ALL SELECT tenant_id, 3 FROM a) AS d(t, k) GROUP BY t"
        " UNION ALL SELECT NULL, (SELECT count(*) FROM r) >= $2::int,"
        "  (SELECT count(*) FROM x) >= $2::int, (SELECT count(*) FROM a) >= $2::int"
        " ORDER BY 1 NULLS LAST",
        2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        goto out;
    int rows = PQntuples(res);
    for (int i = 0; i < rows; i++) {
        bool k1 = PQgetvalue(res, i, 1)[0] == 't', k2 = PQgetvalue(res, i, 2)[0] == 't',
             k3 = PQgetvalue(res, i, 3)[0] == 't';
        if (PQgetisnull(res, i, 0)) {
            *more = *more || k1 || k2 || k3;
        } else if (*count < limit) {
            struct cg_sweep_due *d = &out[(*count)++];
            cg__pg_copy_str(d->tenant_id, sizeof d->tenant_id, PQgetvalue(res, i, 0));
            d->reset = k1;
            d->expired = k2;
            d->approvals = k3;
        } else {
            *more = true; /* up to 3 * limit tenants: the rest next time */
        }
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_reset_apply(struct cg_pg *pg, const char *tenant_id, int64_t now_ms, bool *reset,
                            struct cg_err *err)
{
    *reset = false;
    if (pg->in_tx)
        return inside_tx(pg, "reset_apply", err);
    /* Only the tenant row is locked (by the update), so this cannot deadlock with a path
     * lock: those take the tenant row first too. */
    cg_status rc = cg_pg_begin(pg, err);
    if (rc != CG_OK)
        return rc;
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    bool applied = false;
    rc = cg__pg_reset_if_due(pg, tenant_id, now_ms, &row, &applied, err);
    if (rc == CG_OK)
        rc = cg_pg_commit(pg, err);
    if (rc != CG_OK) {
        cg_pg_rollback(pg);
        return rc;
    }
    *reset = applied;
    return CG_OK;
}

/* One expired reservation, as much of it as settling needs. */
struct expiring {
    char reservation_id[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    int64_t tokens;
    int64_t cost_micros;
};

/* Locks up to limit expired ACTIVE reservations of the tenant, skipping those another
 * transaction holds. *list (malloc'ed, the caller frees) gets them, *n how many. */
static cg_status lock_expired(struct cg_pg *pg, const char *tenant_id, const char *now_text,
                              int limit, struct expiring **list, int *n, struct cg_err *err)
{
    *list = NULL;
    *n = 0;
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenant_id, now_text, limit_text};
    /* reservations_expiry (tenant_id, expires_at) WHERE state = 1 serves both the filter and the
     * order. SKIP LOCKED: a reservation that a Commit, a Release or another replica's sweep
     * holds is theirs to settle; waiting for it would only serialise the replicas. */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "expired_lock",
                              "SELECT reservation_id::text, session_id, task_id, agent_id, tokens,"
                              " cost_micros FROM reservations"
                              " WHERE tenant_id = $1::uuid AND state = 1"
                              "  AND expires_at <= to_timestamp($2::int8 / 1e3)"
                              " ORDER BY expires_at LIMIT $3::int FOR NO KEY UPDATE SKIP LOCKED",
                              3, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    int rows = PQntuples(res);
    if (rows == 0)
        goto out;
    *list = calloc((size_t)rows, sizeof **list);
    if (*list == NULL) {
        rc = cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (int i = 0; i < rows; i++) {
        struct expiring *e = &(*list)[i];
        cg__pg_copy_str(e->reservation_id, sizeof e->reservation_id, PQgetvalue(res, i, 0));
        cg__pg_copy_str(e->ids.session_id, sizeof e->ids.session_id, PQgetvalue(res, i, 1));
        cg__pg_copy_str(e->ids.task_id, sizeof e->ids.task_id, PQgetvalue(res, i, 2));
        cg__pg_copy_str(e->ids.agent_id, sizeof e->ids.agent_id, PQgetvalue(res, i, 3));
        e->tokens = cg__pg_parse_i64(PQgetvalue(res, i, 4));
        e->cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, 5));
    }
    *n = rows;
out:
    PQclear(res);
    return rc;
}

/* Moves the locked reservations of list to EXPIRED, settled at now. */
static cg_status settle_expired(struct cg_pg *pg, const char *tenant_id, const char *now_text,
                                const struct expiring *list, int n, struct cg_err *err)
{
    /* "{id,id,...}": uuids only, so no quoting is needed. */
    size_t cap = (size_t)n * (CG_UUID_LEN + 1) + 3;
    char *array = malloc(cap);
    if (array == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    size_t used = 0;
    array[used++] = '{';
    for (int i = 0; i < n; i++) {
        if (i > 0)
            array[used++] = ',';
        size_t len = strlen(list[i].reservation_id);
        memcpy(array + used, list[i].reservation_id, len);
        used += len;
    }
    array[used++] = '}';
    array[used] = '\0';
    const char *values[] = {tenant_id, now_text, array};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "expired_settle",
                              "UPDATE reservations SET state = 4,"
                              " settled_at = to_timestamp($2::int8 / 1e3)"
                              " WHERE tenant_id = $1::uuid AND reservation_id = ANY($3::uuid[])"
                              "  AND state = 1",
                              3, values, NULL, NULL, 0, &res, err);
    free(array);
    if (rc == CG_OK && cg__pg_parse_i64(PQcmdTuples(res)) != n) {
        /* The rows are locked and were ACTIVE: anything else is a bug, and the holds must
         * not be returned for reservations that did not move. */
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "expired_settle: %s of %d reservations moved",
               PQcmdTuples(res), n);
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
    }
    PQclear(res);
    return rc;
}

#define EXPIRED_EVENTS_MAX 64 /* per expired hold: its path's events and RESERVATION_EXPIRED */

/* WatchUsage: the events of the path's change (from `events`: USAGE_CHANGED and the
 * crossings as the usage falls; without it USAGE_CHANGED on every level), then
 * RESERVATION_EXPIRED on the reservation's scope, in the transaction that settles it. */
static cg_status expired_events(struct cg_pg *pg, const char *tenant_id, const struct expiring *e,
                                const struct cg_budget_row *before,
                                const struct cg_budget_row *rows, int depth,
                                cg_path_events_fn events, void *ctx, int64_t now_ms,
                                struct cg_err *err)
{
    struct cg_event_in ev[EXPIRED_EVENTS_MAX];
    memset(ev, 0, sizeof ev);
    int n = 0;
    if (events != NULL) {
        n = events(ctx, before, rows, depth, ev, EXPIRED_EVENTS_MAX - 1);
        if (n < 0)
            return cg_err_set(err, CG_INTERNAL, "too many events for one expired reservation");
    } else {
        for (; n < depth; n++) {
            ev[n].ids = rows[n].ids;
            ev[n].type = 2; /* USAGE_CHANGED */
        }
    }
    ev[n].ids = e->ids;
    ev[n].type = 11; /* RESERVATION_EXPIRED */
    cg__pg_copy_str(ev[n].fields.ref_id, sizeof ev[n].fields.ref_id, e->reservation_id);
    ev[n].fields.ref_tokens = e->tokens;
    ev[n].fields.ref_state = 4;
    return cg__pg_events_append(pg, tenant_id, ev, n + 1, now_ms, err);
}

cg_status cg_pg_reservations_expire(struct cg_pg *pg, const char *tenant_id, int64_t now_ms,
                                    int limit, cg_path_events_fn events, void *ctx, int *expired,
                                    struct cg_err *err)
{
    *expired = 0;
    if (pg->in_tx)
        return inside_tx(pg, "reservations_expire", err);
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    cg_status rc = cg_pg_begin(pg, err);
    if (rc != CG_OK)
        return rc;
    struct expiring *list = NULL;
    int n = 0;
    rc = lock_expired(pg, tenant_id, now_text, limit, &list, &n, err);
    /* The lock order of Commit and Release: the reservation rows (above), then each path,
     * tenant first (cg_pg_path_read). Paths repeat across a batch; the rows stay locked by
     * this transaction, so locking them again costs a lookup, not a wait. */
    for (int i = 0; rc == CG_OK && i < n; i++) {
        struct cg_budget_row rows[4], before[4];
        int depth = 0;
        rc = cg_pg_path_read(pg, tenant_id, &list[i].ids, true, false, now_ms, rows, &depth, err);
        if (rc == CG_OK) {
            memcpy(before, rows, (size_t)depth * sizeof *rows);
            rc = cg_pg_path_add(pg, tenant_id, rows, depth, 0, -list[i].tokens, 0,
                                -list[i].cost_micros, err);
        }
        if (rc == CG_OK)
            rc = expired_events(pg, tenant_id, &list[i], before, rows, depth, events, ctx, now_ms,
                                err);
    }
    if (rc == CG_OK && n > 0)
        rc = settle_expired(pg, tenant_id, now_text, list, n, err);
    if (rc == CG_OK)
        rc = cg_pg_commit(pg, err);
    free(list);
    if (rc != CG_OK) {
        cg_pg_rollback(pg);
        return rc;
    }
    *expired = n;
    return CG_OK;
}

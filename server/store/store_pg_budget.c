/* store_pg_budget.c - scopes (budgets and counters), reservations and the usage ledger in
 * PostgreSQL. See store_pg.c for how statements run. */
#include "store/store_pg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store_pg_reset.h"

/* ------------------------------------------------------------------ scopes --- */

/* The rows of a path, tenant first: ('', '', ''), (s, '', ''), (s, t, ''), (s, t, a). For
 * shorter paths the tuples repeat, which selects nothing more. Each tuple is a primary key
 * lookup. */
#define PATH_WHERE                                                                                 \
    " WHERE tenant_id = $1::uuid AND (session_id, task_id, agent_id) IN (('', '', ''),"            \
    " ($2::text, '', ''), ($2::text, $3::text, ''), ($2::text, $3::text, $4::text))"

const char *const cg__pg_no_such_scope[4] = {
    "tenant_id: no such tenant",
    "scope.session_id: no such session",
    "scope.task_id: no such task",
    "scope.agent_id: no such agent",
};

cg_status cg__pg_scope_missing(struct cg_err *err, int index)
{
    if (index < 0 || index > 3)
        index = 0;
    return cg_err_setr(err, CG_NOT_FOUND,
                       index == 0 ? CG_ERR_TENANT_NOT_FOUND : CG_ERR_SCOPE_NOT_FOUND, "%s",
                       cg__pg_no_such_scope[index]);
}

double cg__pg_parse_double(const char *s)
{
    char *end = NULL;
    double v = strtod(s, &end);
    return end == s ? 0 : v;
}

bool cg__pg_is_true(const char *s)
{
    return s[0] == 't';
}

/* Parses the comma-separated tier columns (float8 output is exact: the shortest text that
 * reads back as the same double). */
bool cg__pg_parse_tiers(const char *ratios, const char *delays, struct cg_budget_row *out)
{
    int n = 0;
    while (*ratios != '\0' || *delays != '\0') {
        if (n == CG_TIERS_STORE_MAX)
            return false;
        char *end = NULL;
        double ratio = strtod(ratios, &end);
        if (end == ratios || (*end != ',' && *end != '\0'))
            return false;
        ratios = *end == ',' ? end + 1 : end;
        errno = 0;
        long long delay = strtoll(delays, &end, 10);
        if (errno != 0 || end == delays || (*end != ',' && *end != '\0') || delay < 0 ||
            delay > UINT32_MAX)
            return false;
        delays = *end == ',' ? end + 1 : end;
        out->tier_ratio[n] = ratio;
        out->tier_delay_ms[n] = (uint32_t)delay;
        n++;
    }
    out->ntiers = n;
    return true;
}

bool cg__pg_read_scope(PGresult *res, int row, struct cg_budget_row *out)
{
    memset(out, 0, sizeof *out);
    cg__pg_copy_str(out->ids.session_id, sizeof out->ids.session_id, PQgetvalue(res, row, 0));
    cg__pg_copy_str(out->ids.task_id, sizeof out->ids.task_id, PQgetvalue(res, row, 1));
    cg__pg_copy_str(out->ids.agent_id, sizeof out->ids.agent_id, PQgetvalue(res, row, 2));
    out->level = (int)cg__pg_parse_i64(PQgetvalue(res, row, 3));
    out->has_budget = cg__pg_is_true(PQgetvalue(res, row, 4));
    out->mode = (int)cg__pg_parse_i64(PQgetvalue(res, row, 5));
    out->limit_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 6));
    out->limit_cost_micros = cg__pg_parse_i64(PQgetvalue(res, row, 7));
    out->warning_ratio = cg__pg_parse_double(PQgetvalue(res, row, 8));
    out->backpressure_disabled = cg__pg_is_true(PQgetvalue(res, row, 9));
    bool tiers_ok = cg__pg_parse_tiers(PQgetvalue(res, row, 10), PQgetvalue(res, row, 11), out);
    out->on_store_failure = (int)cg__pg_parse_i64(PQgetvalue(res, row, 12));
    out->local_allowance_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 13));
    out->reset_period = (int)cg__pg_parse_i64(PQgetvalue(res, row, 14));
    out->reservation_ttl_ms = (uint32_t)cg__pg_parse_i64(PQgetvalue(res, row, 15));
    cg__pg_copy_str(out->description, sizeof out->description, PQgetvalue(res, row, 16));
    out->used_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 17));
    out->reserved_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 18));
    out->used_cost_micros = cg__pg_parse_i64(PQgetvalue(res, row, 19));
    out->reserved_cost_micros = cg__pg_parse_i64(PQgetvalue(res, row, 20));
    out->version = cg__pg_parse_i64(PQgetvalue(res, row, 21));
    out->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 22));
    out->updated_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 23));
    out->closed_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 24));
    cg__pg_copy_str(out->updated_by_key_id, sizeof out->updated_by_key_id,
                    PQgetvalue(res, row, 25));
    out->period_start_ms = cg__pg_parse_i64(PQgetvalue(res, row, 26));
    out->next_reset_ms = cg__pg_parse_i64(PQgetvalue(res, row, 27));
    out->approval_ttl_ms = (uint32_t)cg__pg_parse_i64(PQgetvalue(res, row, 28));
    out->approved_extra_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 29));
    out->row_version = cg__pg_parse_i64(PQgetvalue(res, row, 30));
    out->exclude_cache_read_tokens = cg__pg_is_true(PQgetvalue(res, row, 31));
    out->spent_input_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 32));
    out->spent_output_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 33));
    out->spent_cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 34));
    out->spent_cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 35));
    out->last_activity_ms = cg__pg_parse_i64(PQgetvalue(res, row, 36));
    out->allocate_from_parent = cg__pg_is_true(PQgetvalue(res, row, 37));
    out->allocated_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 38));
    return tiers_ok && out->level >= 1 && out->level <= 4;
}

static cg_status bad_row(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "%s: a stored row does not parse", label);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

/* Reads the rows of the path into found[level - 1]; *present gets a bit per level found. */
static cg_status select_path(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool lock,
                             struct cg_budget_row found[4], unsigned *present, struct cg_err *err)
{
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    /* LockRows runs above the sort, so the rows are locked in level order: every
     * transaction takes the tenant first, then the session, task and agent, and two of
     * them can wait for each other but never deadlock. */
    const char *sql = lock ? "SELECT " SCOPE_COLUMNS " FROM scopes" PATH_WHERE
                             " ORDER BY level FOR NO KEY UPDATE"
                           : "SELECT " SCOPE_COLUMNS " FROM scopes" PATH_WHERE " ORDER BY level";
    const char *label = lock ? "path_lock" : "path_read";
    PGresult *res = NULL;
    *present = 0;
    cg_status rc = cg__pg_run(pg, label, sql, 4, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_budget_row row;
        if (!cg__pg_read_scope(res, i, &row)) {
            rc = bad_row(pg, label, err);
            goto out;
        }
        found[row.level - 1] = row;
        *present |= 1u << (row.level - 1);
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_path_read(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          bool lock, bool allow_missing_last, int64_t now_ms,
                          struct cg_budget_row out[4], int *n, struct cg_err *err)
{
    *n = 0;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "path_read", err);
    unsigned present = 0;
    cg_status rc = select_path(pg, tenant_id, ids, lock, out, &present, err);
    if (rc != CG_OK)
        return rc;
    if (!(present & 1u)) {
        /* The tenant's row is made on first use. Inserting it only when the read missed
         * it keeps the usual path to one statement; a concurrent insert of the same row
         * makes this one wait for it and then do nothing. No row below it can exist
         * (scopes_parent), so the read locked nothing that would now be held out of
         * order while this waits. */
        if (present != 0) {
            cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg),
                   "path_read: scopes below a missing tenant row");
            return cg_err_set(err, CG_INTERNAL, "storage error");
        }
        const char *values[] = {tenant_id};
        PGresult *res = NULL;
        rc = cg__pg_run(pg, "tenant_scope_create",
                        "INSERT INTO scopes (tenant_id, session_id, task_id, agent_id, level)"
                        " VALUES ($1::uuid, '', '', '', 1) ON CONFLICT DO NOTHING",
                        1, values, NULL, NULL, 0, &res, err);
        PQclear(res);
        if (rc != CG_OK) {
            if (cg__pg_sqlstate_is(pg, "23503"))
                rc = cg__pg_scope_missing(err, 0);
            return rc;
        }
        rc = select_path(pg, tenant_id, ids, lock, out, &present, err);
        if (rc != CG_OK)
            return rc;
        if (!(present & 1u)) {
            cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "path_read: the tenant row is still missing");
            return cg_err_set(err, CG_INTERNAL, "storage error");
        }
    }
    if (out[0].next_reset_ms != 0 && out[0].next_reset_ms <= now_ms) {
        /* The period ended: the caller decides on the new one. With the path locked the
         * tenant row is ours and the reset applies; without, the update waits for whoever
         * holds the row, and when that one applied the reset first, a second read shows
         * it. */
        bool applied = false;
        rc = cg__pg_reset_if_due(pg, tenant_id, now_ms, &out[0], &applied, err);
        if (rc == CG_OK && !applied)
            rc = select_path(pg, tenant_id, ids, lock, out, &present, err);
        if (rc != CG_OK)
            return rc;
    }
    int depth = cg_scope_level(ids);
    for (int level = 2; level <= depth; level++) {
        if (present & (1u << (level - 1)))
            continue;
        if (level == depth && allow_missing_last) {
            *n = depth - 1;
            return CG_OK;
        }
        return cg__pg_scope_missing(err, level - 1);
    }
    *n = depth;
    return CG_OK;
}

/* "{r1,r2,...}" and "{d1,d2,...}": array literals made from numbers only. */
static void format_tiers(const struct cg_budget_row *row, char *ratios, size_t ratios_cap,
                         char *delays, size_t delays_cap)
{
    size_t r = 0, d = 0;
    ratios[r++] = '{';
    delays[d++] = '{';
    for (int i = 0; i < row->ntiers && i < CG_TIERS_STORE_MAX; i++) {
        const char *sep = i > 0 ? "," : "";
        r += (size_t)snprintf(ratios + r, ratios_cap - r, "%s%.17g", sep, row->tier_ratio[i]);
        d += (size_t)snprintf(delays + d, delays_cap - d, "%s%u", sep,
                              (unsigned)row->tier_delay_ms[i]);
    }
    snprintf(ratios + r, ratios_cap - r, "}");
    snprintf(delays + d, delays_cap - d, "}");
}

/* After an upsert that stored nothing: tells a version mismatch from a missing parent. */
static cg_status explain_put_refusal(struct cg_pg *pg, const char *tenant_id,
                                     const struct cg_budget_row *row, int64_t expected_version,
                                     struct cg_err *err)
{
    const char *values[] = {tenant_id, row->ids.session_id, row->ids.task_id, row->ids.agent_id};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "budget_put_check",
                   "SELECT (SELECT version FROM scopes WHERE tenant_id = $1::uuid"
                   "  AND session_id = $2::text AND task_id = $3::text AND agent_id = $4::text),"
                   " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
                   "  AND session_id = $2::text AND task_id = '' AND agent_id = ''),"
                   " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
                   "  AND session_id = $2::text AND task_id = $3::text AND agent_id = '')",
                   4, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    bool exists = !PQgetisnull(res, 0, 0);
    int64_t stored = exists ? cg__pg_parse_i64(PQgetvalue(res, 0, 0)) : 0;
    if (exists && expected_version > 0 && stored != expected_version) {
        rc = cg_err_setr(err, CG_ABORTED, CG_ERR_VERSION_MISMATCH,
                         "expected_version %lld does not match the stored version %lld",
                         (long long)expected_version, (long long)stored);
        cg_err_meta(err, "field", "expected_version");
        cg_err_meta_i64(err, "expected_version", (long long)expected_version);
        cg_err_meta_i64(err, "stored_version", (long long)stored);
    } else if (row->level >= 3 && !cg__pg_is_true(PQgetvalue(res, 0, 1))) {
        rc = cg__pg_scope_missing(err, 1);
    } else if (row->level == 4 && !cg__pg_is_true(PQgetvalue(res, 0, 2))) {
        rc = cg__pg_scope_missing(err, 2);
    } else if (!exists && expected_version > 0) {
        rc = cg_err_setr(err, CG_ABORTED, CG_ERR_VERSION_MISMATCH,
                         "expected_version %lld does not match the stored version 0 (no budget)",
                         (long long)expected_version);
        cg_err_meta(err, "field", "expected_version");
        cg_err_meta_i64(err, "expected_version", (long long)expected_version);
        cg_err_meta_i64(err, "stored_version", 0);
    } else {
        cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "budget_put stored nothing for no visible reason");
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
    }
out:
    PQclear(res);
    return rc;
}

/* The budget before (old, o) and as stored (put, p) in budget_put's audit row. */
#define BUDGET_JSON_OLD AUDIT_BUDGET_JSON("o")
#define BUDGET_JSON_PUT AUDIT_BUDGET_JSON("p")

/* The statement of cg_pg_budget_put ($1 tenant, $2..$4 ids, $5 level, $6..$18 the settings,
 * $19 key id, $20..$21 the parent, $22 expected version, $23 now, $24..$26 settings, $27..$29
 * the actor).
 * One statement: the SELECT's WHERE refuses a missing parent, and a missing row when a
 * version is expected (no insert is even tried); the DO UPDATE's WHERE refuses a
 * stored version other than the expected one. Either way no row comes back and
 * explain_put_refusal() says which. A session's parent, the tenant's row, is made
 * here when missing (scopes_parent requires it; the foreign key check at the end of
 * the statement sees it). A reset period counts from the period containing now_ms ($23)
 * in the tenant's time zone when it is new or changed, and keeps its period otherwise
 * (cg_period_start/next are NULL for period 1, none).
 * The audit row is written by the same statement, from the rows themselves: `old` reads
 * the statement's snapshot, which is the row as it was (the caller holds it locked since
 * cg_store_path_read), `put` is the row as stored; no row comes back, none is written. */
static const char budget_put_sql[] =
    "WITH tenant_scope AS (INSERT INTO scopes (tenant_id, session_id, task_id, agent_id, level)"
    "  SELECT $1::uuid, '', '', '', 1 WHERE $5::int2 >= 2 ON CONFLICT DO NOTHING),"
    " old AS (SELECT * FROM scopes o WHERE o.tenant_id = $1::uuid AND o.session_id = $2::text"
    "  AND o.task_id = $3::text AND o.agent_id = $4::text AND o.has_budget),"
    " put AS (INSERT INTO scopes AS s (tenant_id, session_id, task_id, agent_id, level, "
    "has_budget,"
    " mode, limit_tokens, limit_cost_micros, warning_ratio, backpressure_disabled,"
    " tier_ratio, tier_delay_ms, on_store_failure, local_allowance_tokens, reset_period,"
    " reservation_ttl_ms, description, version, updated_by_key_id, period_start, next_reset_at,"
    " approval_ttl_ms, exclude_cache_read_tokens, allocate_from_parent)"
    " SELECT $1::uuid, $2::text, $3::text, $4::text, $5::int2, $6::boolean, $7::int2,"
    "  $8::int8, $9::int8, $10::float8, $11::boolean, $12::float8[], $13::int4[], $14::int2,"
    "  $15::int8, $16::int2, $17::int4, $18::text, 1, $19::text,"
    "  cg_period_start($16::int2, tz.time_zone, to_timestamp($23::int8 / 1000.0)),"
    "  cg_period_next($16::int2, tz.time_zone, to_timestamp($23::int8 / 1000.0)), $24::int4,"
    "  $25::boolean, $26::boolean"
    " FROM (SELECT (SELECT time_zone FROM tenants WHERE tenant_id = $1::uuid) AS time_zone) tz"
    " WHERE ($5::int2 <= 2 OR EXISTS (SELECT 1 FROM scopes p WHERE p.tenant_id = $1::uuid"
    "   AND p.session_id = $20::text AND p.task_id = $21::text AND p.agent_id = ''))"
    "  AND ($22::int8 = 0 OR EXISTS (SELECT 1 FROM scopes c WHERE c.tenant_id = $1::uuid"
    "   AND c.session_id = $2::text AND c.task_id = $3::text AND c.agent_id = $4::text))"
    " ON CONFLICT (tenant_id, session_id, task_id, agent_id) DO UPDATE SET"
    "  has_budget = excluded.has_budget, mode = excluded.mode,"
    "  limit_tokens = excluded.limit_tokens, limit_cost_micros = excluded.limit_cost_micros,"
    "  warning_ratio = excluded.warning_ratio,"
    "  backpressure_disabled = excluded.backpressure_disabled,"
    "  tier_ratio = excluded.tier_ratio, tier_delay_ms = excluded.tier_delay_ms,"
    "  on_store_failure = excluded.on_store_failure,"
    "  local_allowance_tokens = excluded.local_allowance_tokens,"
    "  reset_period = excluded.reset_period,"
    "  period_start = CASE WHEN s.reset_period = excluded.reset_period THEN s.period_start"
    "   ELSE excluded.period_start END,"
    "  next_reset_at = CASE WHEN s.reset_period = excluded.reset_period THEN s.next_reset_at"
    "   ELSE excluded.next_reset_at END,"
    "  reservation_ttl_ms = excluded.reservation_ttl_ms,"
    /* A new budget ends the approved extensions of the old one. */
    "  approval_ttl_ms = excluded.approval_ttl_ms, approved_extra_tokens = 0,"
    "  description = excluded.description, version = s.version + 1, updated_at = now(),"
    /* A row that existed only to count usage (the tenant's) gets its budget now. */
    "  created_at = CASE WHEN s.version = 0 THEN now() ELSE s.created_at END,"
    "  updated_by_key_id = excluded.updated_by_key_id,"
    /* used_tokens is what the limit sees: a budget that starts or stops leaving cache
     * reads out takes them out of it or puts them back (spent_cache_read_tokens counts
     * the same period). */
    "  exclude_cache_read_tokens = excluded.exclude_cache_read_tokens,"
    "  allocate_from_parent = excluded.allocate_from_parent,"
    "  used_tokens = CASE WHEN s.exclude_cache_read_tokens = excluded.exclude_cache_read_tokens"
    "   THEN s.used_tokens WHEN excluded.exclude_cache_read_tokens"
    "   THEN greatest(0, s.used_tokens - s.spent_cache_read_tokens)"
    "   ELSE s.used_tokens + s.spent_cache_read_tokens END"
    " WHERE $22::int8 = 0 OR s.version = $22::int8"
    " RETURNING s.*),"
    " audit AS (" AUDIT_INSERT " SELECT p.tenant_id, $27::text, $28::int2, 'budget_set',"
    "  p.session_id, p.task_id, p.agent_id, '', (SELECT " BUDGET_JSON_OLD " FROM old o),"
    "  " BUDGET_JSON_PUT ", $29::text FROM put p)"
    " SELECT " SCOPE_COLUMNS " FROM put";

cg_status cg_pg_budget_put(struct cg_pg *pg, const char *tenant_id, const struct cg_budget_row *row,
                           int64_t expected_version, const char *key_id, int64_t now_ms,
                           const struct cg_audit *audit, struct cg_budget_row *out, bool *created,
                           struct cg_err *err)
{
    *created = false;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "budget_put", err);
    char level[8], mode[8], limit[24], cost[24], warning[32], ratios[256], delays[128];
    char on_failure[8], allowance[24], reset[8], ttl[16], expected[24], now_text[24];
    char approval_ttl[16];
    snprintf(approval_ttl, sizeof approval_ttl, "%u", (unsigned)row->approval_ttl_ms);
    snprintf(level, sizeof level, "%d", row->level);
    snprintf(mode, sizeof mode, "%d", row->mode);
    snprintf(limit, sizeof limit, "%lld", (long long)row->limit_tokens);
    snprintf(cost, sizeof cost, "%lld", (long long)row->limit_cost_micros);
    snprintf(warning, sizeof warning, "%.17g", row->warning_ratio);
    format_tiers(row, ratios, sizeof ratios, delays, sizeof delays);
    snprintf(on_failure, sizeof on_failure, "%d", row->on_store_failure);
    snprintf(allowance, sizeof allowance, "%lld", (long long)row->local_allowance_tokens);
    snprintf(reset, sizeof reset, "%d", row->reset_period);
    snprintf(ttl, sizeof ttl, "%u", (unsigned)row->reservation_ttl_ms);
    snprintf(expected, sizeof expected, "%lld", (long long)expected_version);
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    /* The parent of a task is its session's row, of an agent its task's. */
    const char *parent_session = row->level >= 3 ? row->ids.session_id : "";
    const char *parent_task = row->level == 4 ? row->ids.task_id : "";
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id,
                            row->ids.session_id,
                            row->ids.task_id,
                            row->ids.agent_id,
                            level,
                            row->has_budget ? "t" : "f",
                            mode,
                            limit,
                            cost,
                            warning,
                            row->backpressure_disabled ? "t" : "f",
                            ratios,
                            delays,
                            on_failure,
                            allowance,
                            reset,
                            ttl,
                            row->description,
                            key_id ? key_id : "",
                            parent_session,
                            parent_task,
                            expected,
                            now_text,
                            approval_ttl,
                            row->exclude_cache_read_tokens ? "t" : "f",
                            row->has_budget && row->allocate_from_parent ? "t" : "f",
                            actor.key_id,
                            actor.role,
                            actor.request_id};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "budget_put", budget_put_sql, 29, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        /* scopes_parent only fires for a parent made missing meanwhile (the WHERE checks
         * first); the tenants foreign key for a tenant that does not exist. */
        if (cg__pg_sqlstate_is(pg, "23503") && strcmp(pg->constraint, "scopes_parent") == 0)
            rc = cg__pg_scope_missing(err, row->level >= 2 ? row->level - 2 : 0);
        else if (cg__pg_sqlstate_is(pg, "23503") || cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "settings: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        rc = explain_put_refusal(pg, tenant_id, row, expected_version, err);
        goto out;
    }
    if (!cg__pg_read_scope(res, 0, out)) {
        rc = bad_row(pg, "budget_put", err);
        goto out;
    }
    *created = out->version == 1;
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_path_add(struct cg_pg *pg, const char *tenant_id, struct cg_budget_row *rows, int n,
                         int64_t used_tokens, int64_t reserved_tokens, int64_t used_cost_micros,
                         int64_t reserved_cost_micros, struct cg_err *err)
{
    return cg_pg_path_change(pg, tenant_id, rows, n, NULL, used_tokens, reserved_tokens,
                             used_cost_micros, reserved_cost_micros, err);
}

cg_status cg_pg_path_change(struct cg_pg *pg, const char *tenant_id, struct cg_budget_row *rows,
                            int n, const struct cg_usage *spent, int64_t used_tokens,
                            int64_t reserved_tokens, int64_t used_cost_micros,
                            int64_t reserved_cost_micros, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "path_add", err);
    static const struct cg_usage none;
    const struct cg_usage *k = spent ? spent : &none;
    if (spent == NULL && used_tokens == 0 && reserved_tokens == 0 && used_cost_micros == 0 &&
        reserved_cost_micros == 0)
        return CG_OK;
    bool activity = spent != NULL || used_tokens > 0 || reserved_tokens > 0;
    const struct cg_scope_ids *ids = &rows[n - 1].ids;
    int64_t nums[9] = {used_tokens,          reserved_tokens,       used_cost_micros,
                       reserved_cost_micros, k->input_tokens,       k->output_tokens,
                       k->cache_read_tokens, k->cache_write_tokens, k->cost_micros};
    char text[9][24];
    for (int i = 0; i < 9; i++)
        snprintf(text[i], sizeof text[i], "%lld", (long long)nums[i]);
    const char *values[] = {tenant_id,    ids->session_id,
                            ids->task_id, ids->agent_id,
                            text[0],      text[1],
                            text[2],      text[3],
                            text[4],      text[5],
                            text[6],      text[7],
                            text[8],      activity ? "t" : "f"};
    /* The rows are already locked (cg_pg_path_read), so the order in which this UPDATE
     * visits them cannot deadlock. A negative delta larger than the counter (a release
     * after a reset, say) stops at 0. What was spent counts against each level's limit,
     * but for cache reads on a level that leaves them out (migration 0011). */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "path_add",
        "UPDATE scopes SET"
        " used_tokens = greatest(0, used_tokens + $5::int8 + $9::int8 + $10::int8 + $11::int8"
        "  + $12::int8 - CASE WHEN exclude_cache_read_tokens THEN $11::int8 ELSE 0 END),"
        " reserved_tokens = greatest(0, reserved_tokens + $6::int8),"
        " used_cost_micros = greatest(0, used_cost_micros + $7::int8 + $13::int8),"
        " reserved_cost_micros = greatest(0, reserved_cost_micros + $8::int8),"
        " spent_input_tokens = spent_input_tokens + $9::int8,"
        " spent_output_tokens = spent_output_tokens + $10::int8,"
        " spent_cache_read_tokens = spent_cache_read_tokens + $11::int8,"
        " spent_cache_write_tokens = spent_cache_write_tokens + $12::int8,"
        " last_activity_at = CASE WHEN $14::boolean THEN now() ELSE last_activity_at END" PATH_WHERE
        " RETURNING " SCOPE_COLUMNS,
        14, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22003"))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "tokens: a counter would leave its range");
        else if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        goto out;
    }
    struct cg_budget_row updated[4];
    unsigned present = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_budget_row row;
        if (!cg__pg_read_scope(res, i, &row) || row.level > n) {
            rc = bad_row(pg, "path_add", err);
            goto out;
        }
        updated[row.level - 1] = row;
        present |= 1u << (row.level - 1);
    }
    for (int level = 1; level <= n; level++) {
        if (!(present & (1u << (level - 1)))) {
            rc = cg__pg_scope_missing(err, level - 1);
            goto out;
        }
    }
    /* The allocation trigger (migration 0013) moved the parents' allocated_tokens after
     * the RETURNING above was made: rows[] get the same numbers. */
    int64_t share_before[4];
    for (int i = 0; i < n; i++)
        share_before[i] = cg_store_alloc_share(&rows[i]);
    cg_store_alloc_mirror(updated, n, share_before, true);
    memcpy(rows, updated, (size_t)n * sizeof *rows);
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ reservations --- */

void cg__pg_read_reservation(PGresult *res, int row, struct cg_reservation *out)
{
    memset(out, 0, sizeof *out);
    cg__pg_copy_str(out->reservation_id, sizeof out->reservation_id, PQgetvalue(res, row, 0));
    cg__pg_copy_str(out->ids.session_id, sizeof out->ids.session_id, PQgetvalue(res, row, 1));
    cg__pg_copy_str(out->ids.task_id, sizeof out->ids.task_id, PQgetvalue(res, row, 2));
    cg__pg_copy_str(out->ids.agent_id, sizeof out->ids.agent_id, PQgetvalue(res, row, 3));
    out->tokens = cg__pg_parse_i64(PQgetvalue(res, row, 4));
    out->cost_micros = cg__pg_parse_i64(PQgetvalue(res, row, 5));
    cg__pg_copy_str(out->model, sizeof out->model, PQgetvalue(res, row, 6));
    cg__pg_copy_str(out->estimate_id, sizeof out->estimate_id, PQgetvalue(res, row, 7));
    out->state = (int)cg__pg_parse_i64(PQgetvalue(res, row, 8));
    out->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 9));
    out->expires_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 10));
    out->settled_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 11));
    out->committed.input_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 12));
    out->committed.output_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 13));
    out->committed.cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 14));
    out->committed.cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 15));
    out->committed.cost_micros = cg__pg_parse_i64(PQgetvalue(res, row, 16));
}

cg_status cg_pg_reservation_insert(struct cg_pg *pg, const char *tenant_id,
                                   const struct cg_scope_ids *ids, int64_t tokens,
                                   int64_t cost_micros, const char *model, const char *estimate_id,
                                   const char *idempotency_key, uint32_t ttl_ms,
                                   struct cg_reservation *out, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "reservation_insert", err);
    char tokens_text[24], cost_text[24], ttl_text[16];
    snprintf(tokens_text, sizeof tokens_text, "%lld", (long long)tokens);
    snprintf(cost_text, sizeof cost_text, "%lld", (long long)cost_micros);
    snprintf(ttl_text, sizeof ttl_text, "%u", (unsigned)ttl_ms);
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id,   tokens_text,
                            cost_text, model,           estimate_id,  idempotency_key, ttl_text};
    /* A key used before makes this insert do nothing (after waiting for a concurrent
     * transaction that holds the same key, if any); the earlier reservation is read next.
     * A unique violation would abort the caller's transaction instead. */
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "reservation_insert",
                   "INSERT INTO reservations (tenant_id, session_id, task_id, agent_id, tokens,"
                   " cost_micros, model, estimate_id, idempotency_key, expires_at)"
                   " VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int8, $6::int8,"
                   " $7::text, $8::text, NULLIF($9::text, ''),"
                   " now() + $10::int8 * interval '1 millisecond')"
                   " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
                   " RETURNING " RESERVATION_COLUMNS,
                   10, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23503") || cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, cg_scope_level(ids) - 1);
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "reservation: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1) {
        cg__pg_read_reservation(res, 0, out);
        goto out;
    }
    PQclear(res);
    res = NULL;
    const char *key_values[] = {tenant_id, idempotency_key};
    rc = cg__pg_run(pg, "reservation_replay",
                    "SELECT " RESERVATION_COLUMNS " FROM reservations"
                    " WHERE tenant_id = $1::uuid AND idempotency_key = $2::text",
                    2, key_values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) != 1) {
        /* Only a key released between the two statements gets here: not possible while
         * rows are never deleted, but not worth a crash. */
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
        goto out;
    }
    cg__pg_read_reservation(res, 0, out);
    out->replayed = true;
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_reservation_lock(struct cg_pg *pg, const char *tenant_id,
                                 const char *reservation_id, struct cg_reservation *out,
                                 struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "reservation_lock", err);
    const char *values[] = {tenant_id, reservation_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run_one(pg, "reservation_lock",
                                  "SELECT " RESERVATION_COLUMNS " FROM reservations"
                                  " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid"
                                  " FOR NO KEY UPDATE",
                                  2, values, 0, "reservation_id: no such reservation", &res, err);
    if (rc == CG_OK)
        cg__pg_read_reservation(res, 0, out);
    PQclear(res);
    return rc;
}

static const char *state_name(int state)
{
    switch (state) {
    case 1:
        return "active";
    case 2:
        return "committed";
    case 3:
        return "released";
    case 4:
        return "expired";
    default:
        return "settled";
    }
}

cg_status cg_pg_reservation_settle(struct cg_pg *pg, const char *tenant_id,
                                   const char *reservation_id, int state,
                                   const struct cg_usage *usage, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "reservation_settle", err);
    static const struct cg_usage none;
    if (usage == NULL)
        usage = &none;
    char state_text[8], amounts[5][24];
    snprintf(state_text, sizeof state_text, "%d", state);
    snprintf(amounts[0], sizeof amounts[0], "%lld", (long long)usage->input_tokens);
    snprintf(amounts[1], sizeof amounts[1], "%lld", (long long)usage->output_tokens);
    snprintf(amounts[2], sizeof amounts[2], "%lld", (long long)usage->cache_read_tokens);
    snprintf(amounts[3], sizeof amounts[3], "%lld", (long long)usage->cache_write_tokens);
    snprintf(amounts[4], sizeof amounts[4], "%lld", (long long)usage->cost_micros);
    const char *values[] = {tenant_id,  reservation_id, state_text, amounts[0],
                            amounts[1], amounts[2],     amounts[3], amounts[4]};
    /* Only an ACTIVE reservation moves: settling twice would return its tokens twice. */
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "reservation_settle",
                   "UPDATE reservations SET state = $3::int2, settled_at = now(),"
                   " committed_input_tokens = $4::int8, committed_output_tokens = $5::int8,"
                   " committed_cache_read_tokens = $6::int8,"
                   " committed_cache_write_tokens = $7::int8, committed_cost_micros = $8::int8"
                   " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid AND state = 1"
                   " RETURNING 1",
                   8, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                             "reservation_id: no such reservation");
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "usage: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1)
        goto out;
    PQclear(res);
    res = NULL;
    rc = cg__pg_run_one(pg, "reservation_state",
                        "SELECT state FROM reservations"
                        " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid",
                        2, values, 0, "reservation_id: no such reservation", &res, err);
    if (rc == CG_OK) {
        int stored = (int)cg__pg_parse_i64(PQgetvalue(res, 0, 0));
        rc = cg_err_setr(err, CG_FAILED_PRECONDITION,
                         stored == 4 ? CG_ERR_RESERVATION_EXPIRED : CG_ERR_RESERVATION_SETTLED,
                         "reservation_id: already %s", state_name(stored));
        cg_err_meta(err, "state", state_name(stored));
    }
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ ledger --- */

cg_status cg_pg_ledger_append(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, const struct cg_usage *usage,
                              const char *model, const char *idempotency_key,
                              const char *reservation_id, int64_t occurred_at_ms, char *entry_id,
                              struct cg_ledger_first *first, struct cg_err *err)
{
    entry_id[0] = '\0';
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "ledger_append", err);
    char amounts[5][24];
    snprintf(amounts[0], sizeof amounts[0], "%lld", (long long)usage->input_tokens);
    snprintf(amounts[1], sizeof amounts[1], "%lld", (long long)usage->output_tokens);
    snprintf(amounts[2], sizeof amounts[2], "%lld", (long long)usage->cache_read_tokens);
    snprintf(amounts[3], sizeof amounts[3], "%lld", (long long)usage->cache_write_tokens);
    snprintf(amounts[4], sizeof amounts[4], "%lld", (long long)usage->cost_micros);
    char occurred[24];
    snprintf(occurred, sizeof occurred, "%lld", (long long)occurred_at_ms);
    const char *values[] = {tenant_id,  ids->session_id, ids->task_id,    ids->agent_id,
                            amounts[0], amounts[1],      amounts[2],      amounts[3],
                            amounts[4], model,           idempotency_key, reservation_id,
                            occurred};
    /* ON CONFLICT DO NOTHING rather than a unique violation, which would abort the
     * caller's transaction: a repeated key is an answer (the first entry), not a failure. */
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "ledger_append",
                   "INSERT INTO ledger (tenant_id, session_id, task_id, agent_id, input_tokens,"
                   " output_tokens, cache_read_tokens, cache_write_tokens, cost_micros, model,"
                   " idempotency_key, reservation_id, created_at)"
                   " VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int8, $6::int8,"
                   " $7::int8, $8::int8, $9::int8, $10::text, NULLIF($11::text, ''),"
                   " NULLIF($12::text, '')::uuid,"
                   " CASE WHEN $13::int8 = 0 THEN now() ELSE to_timestamp($13::int8 / 1000.0) END)"
                   " ON CONFLICT (tenant_id, idempotency_key) DO NOTHING"
                   " RETURNING entry_id::text",
                   13, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23505") && strcmp(pg->constraint, "ledger_reservation") == 0)
            rc = cg_err_setr(err, CG_FAILED_PRECONDITION, CG_ERR_RESERVATION_SETTLED,
                             "reservation_id: its usage is already in the ledger");
        else if (cg__pg_sqlstate_is(pg, "23503") &&
                 strcmp(pg->constraint, "ledger_reservation_exists") == 0)
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                             "reservation_id: no such reservation");
        else if (cg__pg_sqlstate_is(pg, "23503"))
            rc = cg__pg_scope_missing(err, cg_scope_level(ids) - 1);
        else if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND,
                             "tenant_id or reservation_id: not found");
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "usage: invalid value");
        goto out;
    }
    if (PQntuples(res) == 1) {
        cg__pg_copy_str(entry_id, CG_UUID_LEN + 1, PQgetvalue(res, 0, 0));
        goto out;
    }
    PQclear(res);
    res = NULL;
    const char *key_values[] = {tenant_id, idempotency_key};
    rc = cg__pg_run(pg, "ledger_previous",
                    "SELECT entry_id::text, input_tokens, output_tokens, cache_read_tokens,"
                    " cache_write_tokens, cost_micros, model, session_id, task_id, agent_id,"
                    " (extract(epoch FROM created_at) * 1000)::int8 FROM ledger"
                    " WHERE tenant_id = $1::uuid AND idempotency_key = $2::text",
                    2, key_values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent change; retry");
        goto out;
    }
    cg__pg_copy_str(entry_id, CG_UUID_LEN + 1, PQgetvalue(res, 0, 0));
    if (first != NULL) {
        memset(first, 0, sizeof *first);
        first->usage.input_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
        first->usage.output_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 2));
        first->usage.cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 3));
        first->usage.cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 4));
        first->usage.cost_micros = cg__pg_parse_i64(PQgetvalue(res, 0, 5));
        cg__pg_copy_str(first->model, sizeof first->model, PQgetvalue(res, 0, 6));
        cg__pg_copy_str(first->ids.session_id, sizeof first->ids.session_id, PQgetvalue(res, 0, 7));
        cg__pg_copy_str(first->ids.task_id, sizeof first->ids.task_id, PQgetvalue(res, 0, 8));
        cg__pg_copy_str(first->ids.agent_id, sizeof first->ids.agent_id, PQgetvalue(res, 0, 9));
        first->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 10));
    }
    rc = cg_err_set(err, CG_ALREADY_EXISTS, "idempotency_key: already used");
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_subtree_max_limits(struct cg_pg *pg, const char *tenant_id,
                                   const struct cg_scope_ids *ids, int64_t *max_tokens,
                                   int64_t *max_cost_micros, struct cg_err *err)
{
    *max_tokens = 0;
    *max_cost_micros = 0;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "subtree_max_limits", err);
    int depth = cg_scope_level(ids);
    if (depth == 4)
        return CG_OK; /* an agent has nothing under it */
    char depth_text[4];
    snprintf(depth_text, sizeof depth_text, "%d", depth);
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, depth_text};
    PGresult *res = NULL;
    /* The scopes below: deeper levels whose ids start with ids' (a primary key prefix). */
    cg_status rc = cg__pg_run(
        pg, "subtree_max_limits",
        "SELECT coalesce(max(limit_tokens), 0),"
        " coalesce(max(limit_cost_micros) FILTER (WHERE limit_cost_micros > 0), 0)"
        " FROM scopes WHERE tenant_id = $1::uuid AND has_budget AND level > $4::int"
        " AND ($4::int < 2 OR session_id = $2::text) AND ($4::int < 3 OR task_id = $3::text)",
        4, values, NULL, NULL, RUN_PINNED, &res, err);
    if (rc == CG_OK && PQntuples(res) == 1) {
        *max_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
        *max_cost_micros = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_path_peek(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          int64_t now_ms, struct cg_budget_row out[4], int *n, bool *need_tx,
                          struct cg_err *err)
{
    *n = 0;
    *need_tx = false;
    unsigned present = 0;
    cg_status rc = select_path(pg, tenant_id, ids, false, out, &present, err);
    if (rc != CG_OK)
        return rc;
    /* A missing tenant row or a due reset needs writes, which commit with their events:
     * the caller reads again inside a transaction (cg_pg_path_read). */
    if (!(present & 1u) || (out[0].next_reset_ms != 0 && out[0].next_reset_ms <= now_ms)) {
        *need_tx = true;
        return CG_OK;
    }
    int depth = cg_scope_level(ids);
    for (int level = 2; level <= depth; level++)
        if (!(present & (1u << (level - 1))))
            return cg__pg_scope_missing(err, level - 1);
    *n = depth;
    return CG_OK;
}

cg_status cg_pg_ledger_entry_of(struct cg_pg *pg, const char *tenant_id, const char *reservation_id,
                                char *entry_id, struct cg_err *err)
{
    entry_id[0] = '\0';
    const char *values[] = {tenant_id, reservation_id};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run_one(pg, "ledger_entry_of",
                       "SELECT entry_id::text FROM ledger"
                       " WHERE tenant_id = $1::uuid AND reservation_id = $2::uuid",
                       2, values, RUN_READ, "reservation_id: not in the ledger", &res, err);
    if (rc == CG_OK)
        cg__pg_copy_str(entry_id, CG_UUID_LEN + 1, PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

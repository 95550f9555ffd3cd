/* store_pg_history.c - spend history in PostgreSQL: the rollups of migration 0022 summed
 * into a chart's steps, and their retention. Contracts in store.h ("spend history"). */
#include "store/store_pg_internal.h"
#include "store/store_pg_history.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The levels of the path to ids that exist (bit level - 1), closed ones included. */
static cg_status path_present(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, unsigned *present, struct cg_err *err)
{
    *present = 1u; /* the tenant level reads as empty until it is used */
    if (ids->session_id[0] == '\0')
        return CG_OK;
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "history_path",
                              "SELECT level FROM scopes WHERE tenant_id = $1::uuid"
                              " AND (session_id, task_id, agent_id) IN (($2::text, '', ''),"
                              " ($2::text, $3::text, ''), ($2::text, $3::text, $4::text))",
                              4, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        PQclear(res);
        return rc;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        int64_t level = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        if (level >= 1 && level <= 4)
            *present |= 1u << (level - 1);
    }
    PQclear(res);
    int depth = cg_scope_level(ids);
    for (int level = 2; level <= depth; level++)
        if (!(*present & (1u << (level - 1))))
            return cg__pg_scope_missing(err, level - 1);
    return CG_OK;
}

cg_status cg_pg_usage_history(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, int resolution, int64_t from_ms,
                              int64_t to_ms, int64_t step_ms, struct cg_usage_point *out, int cap,
                              int *count, struct cg_err *err)
{
    *count = 0;
    unsigned present;
    cg_status rc = path_present(pg, tenant_id, ids, &present, err);
    if (rc != CG_OK)
        return rc;
    char res_text[8], from_text[24], to_text[24], step_text[24], limit_text[16];
    snprintf(res_text, sizeof res_text, "%d", resolution);
    snprintf(from_text, sizeof from_text, "%lld", (long long)from_ms);
    snprintf(to_text, sizeof to_text, "%lld", (long long)to_ms);
    snprintf(step_text, sizeof step_text, "%lld", (long long)step_ms);
    snprintf(limit_text, sizeof limit_text, "%d", cap + 1);
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id, res_text,
                            from_text, to_text,         step_text,    limit_text};
    PGresult *res = NULL;
    /* Through the primary key: one scope, one resolution, a range of buckets. A step that
     * is the bucket itself needs no binning; date_bin from the epoch otherwise. */
    rc =
        cg__pg_run(pg, "usage_history",
                   "SELECT floor(extract(epoch FROM date_bin($8::int8 * interval '1 millisecond',"
                   " bucket_start, 'epoch'::timestamptz)) * 1000)::int8 AS step,"
                   " sum(input_tokens)::int8, sum(output_tokens)::int8,"
                   " sum(cache_read_tokens)::int8, sum(cache_write_tokens)::int8,"
                   " sum(cost_micros)::int8, sum(entries)::int8"
                   " FROM usage_rollups WHERE tenant_id = $1::uuid AND session_id = $2::text"
                   " AND task_id = $3::text AND agent_id = $4::text AND resolution = $5::int2"
                   " AND bucket_start >= 'epoch'::timestamptz + $6::int8 * interval '1 millisecond'"
                   " AND bucket_start < 'epoch'::timestamptz + $7::int8 * interval '1 millisecond'"
                   " GROUP BY 1 ORDER BY 1 LIMIT $9::int4",
                   9, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        PQclear(res);
        return rc;
    }
    int rows = PQntuples(res);
    if (rows > cap) {
        PQclear(res);
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "cap: more than %d steps hold usage; ask for fewer steps", cap);
    }
    for (int i = 0; i < rows; i++) {
        struct cg_usage_point *p = &out[i];
        p->start_ms = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        p->usage.input_tokens = cg__pg_parse_i64(PQgetvalue(res, i, 1));
        p->usage.output_tokens = cg__pg_parse_i64(PQgetvalue(res, i, 2));
        p->usage.cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, i, 3));
        p->usage.cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, i, 4));
        p->usage.cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, 5));
        p->entries = cg__pg_parse_i64(PQgetvalue(res, i, 6));
    }
    *count = rows;
    PQclear(res);
    return CG_OK;
}

cg_status cg_pg_rollups_expire(struct cg_pg *pg, const char *tenants, int resolution,
                               int64_t before_ms, int limit, int *deleted, struct cg_err *err)
{
    *deleted = 0;
    char res_text[8], before_text[24], limit_text[16];
    snprintf(res_text, sizeof res_text, "%d", resolution);
    snprintf(before_text, sizeof before_text, "%lld", (long long)before_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenants, res_text, before_text, limit_text};
    PGresult *res = NULL;
    /* Through usage_rollups_by_age; bounded so that one statement stays short after a long
     * outage of the sweeper (the next pass goes on). */
    cg_status rc =
        cg__pg_run(pg, "rollups_expire",
                   "DELETE FROM usage_rollups WHERE (tenant_id, session_id, task_id, agent_id,"
                   " resolution, bucket_start) IN (SELECT tenant_id, session_id, task_id, agent_id,"
                   " resolution, bucket_start FROM usage_rollups WHERE tenant_id = ANY($1::uuid[])"
                   " AND resolution = $2::int2"
                   " AND bucket_start < 'epoch'::timestamptz + $3::int8 * interval '1 millisecond'"
                   " LIMIT $4::int4)",
                   4, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK)
        *deleted = (int)cg__pg_parse_i64(PQcmdTuples(res));
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ forecasts --- */

/* The ids of n scopes as three text array literals (lits[0..2], malloc'd; free with
 * free_arrays). False when memory runs out. */
static bool id_arrays(const struct cg_scope_ids *ids, int n, char *lits[3])
{
    size_t cap = (size_t)n * (2 * (CG_SCOPE_ID_MAX + 1) + 4) + 4;
    const char **cols[3] = {calloc((size_t)n + 1, sizeof(char *)),
                            calloc((size_t)n + 1, sizeof(char *)),
                            calloc((size_t)n + 1, sizeof(char *))};
    bool ok = cols[0] && cols[1] && cols[2];
    for (int c = 0; c < 3; c++)
        lits[c] = ok ? malloc(cap) : NULL;
    ok = ok && lits[0] && lits[1] && lits[2];
    for (int i = 0; ok && i < n; i++) {
        cols[0][i] = ids[i].session_id;
        cols[1][i] = ids[i].task_id;
        cols[2][i] = ids[i].agent_id;
    }
    for (int c = 0; ok && c < 3; c++)
        ok = cg__pg_text_array(cols[c], n, lits[c], cap);
    for (int c = 0; c < 3; c++)
        free(cols[c]);
    return ok;
}

static void free_arrays(char *lits[3])
{
    for (int c = 0; c < 3; c++)
        free(lits[c]);
}

/* The minute buckets of the last window_ms, the current one included. */
#define WINDOW_START                                                                               \
    "date_trunc('minute', now()) - (ceil($2::int8 / 60000.0) - 1) * interval '1 minute'"

cg_status cg_pg_spend_in_window(struct cg_pg *pg, const char *tenant_id,
                                const struct cg_scope_ids *ids, const bool *exclude_cache_read,
                                int n, int64_t window_ms, int64_t *spent, struct cg_err *err)
{
    char *lits[3] = {NULL, NULL, NULL};
    char *excl = malloc((size_t)n * 2 + 3);
    if (!id_arrays(ids, n, lits) || excl == NULL) {
        free_arrays(lits);
        free(excl);
        return cg_err_set(err, CG_NOMEM, "out of memory");
    }
    size_t k = 0;
    excl[k++] = '{';
    for (int i = 0; i < n; i++) {
        if (i)
            excl[k++] = ',';
        excl[k++] = exclude_cache_read[i] ? 't' : 'f';
    }
    excl[k++] = '}';
    excl[k] = '\0';
    char window[24];
    snprintf(window, sizeof window, "%lld", (long long)window_ms);
    const char *values[] = {tenant_id, window, lits[0], lits[1], lits[2], excl};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "spend_in_window",
        "SELECT n.idx, coalesce(sum(r.input_tokens + r.output_tokens + r.cache_write_tokens"
        " + CASE WHEN n.x THEN 0 ELSE r.cache_read_tokens END), 0)::int8"
        " FROM unnest($3::text[], $4::text[], $5::text[], $6::boolean[]) WITH ORDINALITY"
        " AS n(s, t, a, x, idx)"
        " LEFT JOIN usage_rollups r ON r.tenant_id = $1::uuid AND r.session_id = n.s"
        " AND r.task_id = n.t AND r.agent_id = n.a AND r.resolution = 1"
        " AND r.bucket_start >= " WINDOW_START " GROUP BY n.idx",
        6, values, NULL, NULL, RUN_READ, &res, err);
    free_arrays(lits);
    free(excl);
    if (rc == CG_OK) {
        for (int i = 0; i < n; i++)
            spent[i] = 0;
        for (int r = 0; r < PQntuples(res); r++) {
            int64_t idx = cg__pg_parse_i64(PQgetvalue(res, r, 0));
            if (idx >= 1 && idx <= n)
                spent[idx - 1] = cg__pg_parse_i64(PQgetvalue(res, r, 1));
        }
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_forecast_tenants(struct cg_pg *pg, int64_t window_ms, const char *after_id,
                                 int limit, char (*ids)[CG_UUID_LEN + 1], int *count,
                                 struct cg_err *err)
{
    *count = 0;
    char window[24], limit_text[16];
    snprintf(window, sizeof window, "%lld", (long long)window_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {after_id, window, limit_text};
    PGresult *res = NULL;
    /* The window's minute buckets through usage_rollups_recent (0027), whatever the number
     * of tenants, and the marked scopes, which may need their re-arm after their spend left
     * the window. By id, so that pages never skip or repeat a tenant. */
    cg_status rc = cg__pg_run(
        pg, "forecast_tenants",
        "SELECT t::text FROM (SELECT tenant_id AS t FROM usage_rollups"
        " WHERE resolution = 1 AND bucket_start >= " WINDOW_START
        " UNION SELECT tenant_id FROM forecast_alerts) u"
        " WHERE $1::text = '' OR t > NULLIF($1::text, '')::uuid ORDER BY t LIMIT $3::int",
        3, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK) {
        int rows = PQntuples(res);
        for (int i = 0; i < rows && i < limit; i++)
            cg__pg_copy_str(ids[i], sizeof ids[i], PQgetvalue(res, i, 0));
        *count = rows < limit ? rows : limit;
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_forecast_candidates(struct cg_pg *pg, const char *tenant_id, int64_t window_ms,
                                    struct cg_forecast_candidate *out, int cap, int *count,
                                    struct cg_err *err)
{
    *count = 0;
    char window[24], limit[16];
    snprintf(window, sizeof window, "%lld", (long long)window_ms);
    snprintf(limit, sizeof limit, "%d", cap);
    const char *values[] = {tenant_id, window, limit};
    PGresult *res = NULL;
    /* The window's minute buckets through usage_rollups_by_age, then each scope's row. */
    cg_status rc = cg__pg_run(
        pg, "forecast_candidates",
        "WITH spend AS (SELECT session_id, task_id, agent_id,"
        " sum(input_tokens + output_tokens + cache_write_tokens) AS base,"
        " sum(cache_read_tokens) AS cr FROM usage_rollups"
        " WHERE tenant_id = $1::uuid AND resolution = 1 AND bucket_start >= " WINDOW_START
        " GROUP BY 1, 2, 3)"
        " SELECT s.session_id, s.task_id, s.agent_id,"
        " (s.limit_tokens::numeric + s.approved_extra_tokens - s.used_tokens - s.reserved_tokens"
        "  - s.allocated_tokens)::int8,"
        " (sp.base + CASE WHEN s.exclude_cache_read_tokens THEN 0 ELSE sp.cr END)::int8,"
        " a.tenant_id IS NOT NULL"
        " FROM spend sp JOIN scopes s ON s.tenant_id = $1::uuid AND s.session_id = sp.session_id"
        " AND s.task_id = sp.task_id AND s.agent_id = sp.agent_id"
        " LEFT JOIN forecast_alerts a ON a.tenant_id = s.tenant_id"
        " AND a.session_id = s.session_id AND a.task_id = s.task_id AND a.agent_id = s.agent_id"
        " WHERE s.has_budget AND s.closed_at IS NULL"
        " ORDER BY s.level, s.session_id, s.task_id, s.agent_id LIMIT $3::int4",
        3, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK) {
        for (int i = 0; i < PQntuples(res) && i < cap; i++) {
            struct cg_forecast_candidate *c = &out[i];
            memset(c, 0, sizeof *c);
            cg_scope_ids_set(&c->ids, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
                             PQgetvalue(res, i, 2));
            c->remaining = cg__pg_parse_i64(PQgetvalue(res, i, 3));
            c->spent = cg__pg_parse_i64(PQgetvalue(res, i, 4));
            c->alerted = PQgetvalue(res, i, 5)[0] == 't';
            *count = i + 1;
        }
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_forecast_mark(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, bool *marked, struct cg_err *err)
{
    *marked = false;
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "forecast_mark",
                              "INSERT INTO forecast_alerts (tenant_id, session_id, task_id,"
                              " agent_id) VALUES ($1::uuid, $2::text, $3::text, $4::text)"
                              " ON CONFLICT DO NOTHING",
                              4, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK)
        *marked = cg__pg_parse_i64(PQcmdTuples(res)) == 1;
    PQclear(res);
    return rc;
}

cg_status cg_pg_forecast_rearm(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_scope_ids *under, int n, int *rearmed,
                               struct cg_err *err)
{
    *rearmed = 0;
    char *lits[3] = {NULL, NULL, NULL};
    if (!id_arrays(under, n, lits)) {
        free_arrays(lits);
        return cg_err_set(err, CG_NOMEM, "out of memory");
    }
    const char *values[] = {tenant_id, lits[0], lits[1], lits[2]};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "forecast_rearm",
                   "DELETE FROM forecast_alerts a WHERE a.tenant_id = $1::uuid AND NOT EXISTS ("
                   " SELECT 1 FROM unnest($2::text[], $3::text[], $4::text[]) AS u(s, t, x)"
                   " WHERE u.s = a.session_id AND u.t = a.task_id AND u.x = a.agent_id)",
                   4, values, NULL, NULL, 0, &res, err);
    free_arrays(lits);
    if (rc == CG_OK)
        *rearmed = (int)cg__pg_parse_i64(PQcmdTuples(res));
    PQclear(res);
    return rc;
}

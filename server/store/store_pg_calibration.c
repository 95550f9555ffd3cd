/* store_pg_calibration.c - estimates issued by CountTokens and the per-tenant, per-model
 * calibration factors learned from providers' counts (migrations/0009). Each operation is
 * one statement. Contracts in store.h ("calibration").
 */
#include "store/store_pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Defined here; the facade (store_calibration.c) declares them. */
cg_status cg_pg_estimate_record(struct cg_pg *pg, const char *tenant_id, const char *estimate_id,
                                const char *model, int64_t raw_tokens, struct cg_calibration *out,
                                struct cg_err *err);
cg_status cg_pg_calibrate(struct cg_pg *pg, const char *tenant_id,
                          struct cg_calibration_sample *samples, int n, struct cg_err *err);

static void calibration_read(PGresult *res, int row, int first_col, struct cg_calibration *out)
{
    out->factor = cg__pg_parse_double(PQgetvalue(res, row, first_col));
    out->samples = cg__pg_parse_i64(PQgetvalue(res, row, first_col + 1));
    out->updated_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, first_col + 2));
}

cg_status cg_pg_estimate_record(struct cg_pg *pg, const char *tenant_id, const char *estimate_id,
                                const char *model, int64_t raw_tokens, struct cg_calibration *out,
                                struct cg_err *err)
{
    char raw[24];
    snprintf(raw, sizeof raw, "%lld", (long long)raw_tokens);
    const char *values[] = {tenant_id, estimate_id, model, raw};
    PGresult *res = NULL;
    /* The insert, a bounded clean-up of the tenant's expired estimates and the read of the
     * factor in one round trip; data-modifying CTEs run whether or not they are read. */
    cg_status rc = cg__pg_run(
        pg, "estimate_record",
        "WITH ins AS (INSERT INTO token_estimates (tenant_id, estimate_id, model, raw_tokens)"
        "             VALUES ($1::uuid, $2, $3, $4::int8)),"
        " old AS (DELETE FROM token_estimates WHERE tenant_id = $1::uuid AND ctid IN"
        "         (SELECT ctid FROM token_estimates WHERE tenant_id = $1::uuid"
        "          AND created_at < now() - interval '24 hours' LIMIT 100))"
        " SELECT factor, samples, floor(extract(epoch FROM updated_at) * 1000)::int8"
        " FROM token_calibrations WHERE tenant_id = $1::uuid AND model = $3",
        4, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23503"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND,
                             "tenant_id: no such tenant");
        else if (cg__pg_sqlstate_is(pg, "23505"))
            rc = cg_err_set(err, CG_ALREADY_EXISTS, "estimate_id: already recorded");
        return rc;
    }
    out->factor = 1.0;
    out->samples = 0;
    out->updated_at_ms = 0;
    if (PQntuples(res) == 1)
        calibration_read(res, 0, 0, out);
    PQclear(res);
    return CG_OK;
}

/* A "{...}" text array literal of the samples' estimate ids (quoted) or provider counts. */
static char *literal(const struct cg_calibration_sample *samples, int n, bool ids)
{
    size_t cap = 3 + (size_t)n * (2 * CG_IDEMPOTENCY_MAX + 24);
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    size_t len = 0;
    buf[len++] = '{';
    for (int i = 0; i < n; i++) {
        if (i > 0)
            buf[len++] = ',';
        if (!ids) {
            len += (size_t)snprintf(buf + len, cap - len, "%lld",
                                    (long long)samples[i].provider_tokens);
            continue;
        }
        buf[len++] = '"';
        for (const char *p = samples[i].estimate_id;
             *p && p - samples[i].estimate_id < CG_IDEMPOTENCY_MAX; p++) {
            if (*p == '"' || *p == '\\')
                buf[len++] = '\\';
            buf[len++] = *p;
        }
        buf[len++] = '"';
    }
    buf[len++] = '}';
    buf[len] = '\0';
    return buf;
}

cg_status cg_pg_calibrate(struct cg_pg *pg, const char *tenant_id,
                          struct cg_calibration_sample *samples, int n, struct cg_err *err)
{
    char *ids = literal(samples, n, true), *counts = literal(samples, n, false);
    if (ids == NULL || counts == NULL) {
        free(ids);
        free(counts);
        return cg_err_set(err, CG_NOMEM, "out of memory");
    }
    const char *values[] = {tenant_id, ids, counts};
    PGresult *res = NULL;
    /* Each estimate is used once (used_at), within its 24 hours. The samples of one model
     * are averaged into one step (ON CONFLICT may touch a row once per statement); the step
     * weight is 1/(samples+1) at first (a running mean) and never below 0.2 (exponential
     * decay toward recent ratios). Both the ratio and the factor stay within 0.25..4. */
    cg_status rc = cg__pg_run(
        pg, "calibrate",
        "WITH req AS (SELECT * FROM unnest($2::text[], $3::int8[]) AS r(estimate_id, provider)),"
        " used AS (UPDATE token_estimates e SET used_at = now() FROM req"
        "          WHERE e.tenant_id = $1::uuid AND e.estimate_id = req.estimate_id"
        "          AND e.used_at IS NULL AND e.raw_tokens > 0 AND req.provider > 0"
        "          AND e.created_at > now() - interval '24 hours'"
        "          RETURNING e.estimate_id, e.model,"
        "          least(4, greatest(0.25, req.provider::float8 / e.raw_tokens)) AS ratio),"
        " agg AS (SELECT model, avg(ratio) AS ratio, count(*) AS n FROM used GROUP BY model),"
        " up AS (INSERT INTO token_calibrations AS c (tenant_id, model, factor, samples)"
        "        SELECT $1::uuid, model, ratio, n FROM agg"
        "        ON CONFLICT (tenant_id, model) DO UPDATE SET"
        "        factor = least(4, greatest(0.25, c.factor + greatest(1.0 / (c.samples + 1), 0.2)"
        "                 * (EXCLUDED.factor - c.factor))),"
        "        samples = c.samples + EXCLUDED.samples, updated_at = now()"
        "        RETURNING model, factor)"
        " SELECT used.estimate_id, up.factor FROM used JOIN up USING (model)",
        3, values, NULL, NULL, 0, &res, err);
    free(ids);
    free(counts);
    for (int i = 0; i < n; i++) {
        samples[i].updated = false;
        samples[i].factor = 1.0;
    }
    if (rc != CG_OK)
        return rc;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *id = PQgetvalue(res, r, 0);
        double factor = cg__pg_parse_double(PQgetvalue(res, r, 1));
        for (int i = 0; i < n; i++)
            if (strcmp(samples[i].estimate_id, id) == 0) {
                samples[i].updated = true;
                samples[i].factor = factor;
            }
    }
    PQclear(res);
    return CG_OK;
}

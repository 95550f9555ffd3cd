/* store_pg_gauges.c - the metrics' figures in PostgreSQL (store_gauges.h): one read-only
 * statement over every tenant.
 *
 * Both parts run on partial indexes, so their cost grows with what they report, not with the
 * tables: the approvals in state 1 (PENDING) are those of approvals_one_pending, and the
 * budgeted, open tenant and session rows those of scopes_budgeted_upper (migration 0024),
 * whose columns and predicate are none that a budget write changes (the counter writes stay
 * HOT updates, migration 0014). The ratio reads used_tokens from the rows themselves.
 */
#include "store/store_gauges.h"
#include "store/store_pg_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"

cg_status cg_pg_gauges_read(struct cg_pg *pg, int64_t now_ms, int top_n,
                            struct cg_budget_ratio *top, int *count, struct cg_store_gauges *out,
                            struct cg_err *err);

/* The pending approvals' count and oldest request (one row, always), joined with the top
 * ratios (none when there are no budgets or $2 is 0). The limit is a float8 sum: no
 * overflow, and never 0 (limit_tokens > 0, approved_extra_tokens >= 0). */
static const char GAUGES_SQL[] =
    "WITH pending AS ("
    " SELECT count(*)::int8 AS n,"
    " coalesce(floor(extract(epoch FROM min(a.requested_at)) * 1000)::int8, 0) AS oldest"
    " FROM approvals a"
    " WHERE a.state = 1 AND a.expires_at > to_timestamp($1::int8 / 1e3)),"
    " top AS ("
    " SELECT s.tenant_id, s.level,"
    " max(s.used_tokens::float8 / (s.limit_tokens::float8 + s.approved_extra_tokens)) AS ratio"
    " FROM scopes s"
    " WHERE s.has_budget AND s.limit_tokens > 0 AND s.task_id = '' AND s.closed_at IS NULL"
    " GROUP BY s.tenant_id, s.level"
    " ORDER BY ratio DESC, s.tenant_id, s.level LIMIT $2::int)"
    " SELECT p.n, p.oldest, t.tenant_id::text, t.level, t.ratio"
    " FROM pending p LEFT JOIN top t ON true"
    " ORDER BY t.ratio DESC NULLS LAST, t.tenant_id, t.level";

cg_status cg_pg_gauges_read(struct cg_pg *pg, int64_t now_ms, int top_n,
                            struct cg_budget_ratio *top, int *count, struct cg_store_gauges *out,
                            struct cg_err *err)
{
    char now_text[24], top_text[16];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    snprintf(top_text, sizeof top_text, "%d", top_n);
    const char *values[] = {now_text, top_text};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "gauges_read", GAUGES_SQL, 2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    int rows = PQntuples(res);
    if (rows < 1) {
        PQclear(res);
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "gauges_read: no row");
        return cg_err_set(err, CG_INTERNAL, "storage error");
    }
    out->approvals_pending = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    out->oldest_pending_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
    for (int i = 0; i < rows && *count < top_n; i++) {
        if (PQgetisnull(res, i, 2))
            break; /* no budgets: the one row of the pending figures */
        struct cg_budget_ratio *r = &top[(*count)++];
        cg__pg_copy_str(r->tenant_id, sizeof r->tenant_id, PQgetvalue(res, i, 2));
        r->level = (int)cg__pg_parse_i64(PQgetvalue(res, i, 3));
        r->ratio = cg__pg_parse_double(PQgetvalue(res, i, 4));
    }
    PQclear(res);
    return CG_OK;
}

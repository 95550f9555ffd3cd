/* store_pg_scopes.c - CloseScope, the usage tree and the paged scope listing in PostgreSQL.
 * See store_pg.c for how statements run, and store.h ("scopes: close, usage tree,
 * listing") for the contracts. The facade (store_scopes.c) checks the arguments and owns the
 * transaction; these functions run inside it.
 *
 * Every statement is keyed by tenant_id first (DESIGN.md section 5).
 */
#include "store/store_pg_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Declared here rather than in store_pg.h (another module's header): the facade in
 * store_scopes.c repeats these prototypes. */
cg_status cg_pg_scope_close(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                            struct cg_scope_close *out, struct cg_err *err);
cg_status cg_pg_usage_tree(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                           int depth, int max_children, bool include_closed,
                           struct cg_usage_tree *out, struct cg_err *err);
cg_status cg_pg_scope_list(struct cg_pg *pg, const char *tenant_id,
                           const struct cg_scope_ids *parent, int level, bool include_closed,
                           int order, const struct cg_scope_cursor *after, int limit,
                           struct cg_scope_usage *out, int *count, bool *more,
                           struct cg_scope_cursor *next, struct cg_err *err);

/* A tenant budget whose reset is due (its period ended and neither a request nor the sweeper
 * has applied the reset yet) reads as the new period: these reads are read-only, so they show
 * what the reset will store (0 used, the period containing now) instead of writing it. */
#define DUE_OR(due, otherwise)                                                                     \
    "CASE WHEN s.next_reset_at <= now() THEN " due " ELSE " otherwise " END"
#define TENANT_TZ "(SELECT t.time_zone FROM tenants t WHERE t.tenant_id = $1::uuid)"

/* A scope's last activity in microseconds (0: never): ListScopes' LAST_ACTIVITY_DESC key. */
#define ACTIVITY_US "coalesce((extract(epoch FROM s.last_activity_at) * 1000000)::int8, 0)"

/* The columns read_node() expects, in order, for a scopes row aliased `s`; $1 is the tenant
 * and $2 whether closed children count. The two counts are index lookups: children by the
 * primary key prefix (or scopes_level_created for the tenant's sessions), open reservations
 * by the partial index reservations_active_scope. */
#define NODE_COLUMNS_0003                                                                          \
    "s.session_id, s.task_id, s.agent_id, s.level, s.has_budget, s.mode, s.limit_tokens,"          \
    " s.limit_cost_micros, s.warning_ratio, s.backpressure_disabled,"                              \
    " array_to_string(s.tier_ratio, ','), array_to_string(s.tier_delay_ms, ','),"                  \
    " s.on_store_failure, s.local_allowance_tokens, s.reset_period, s.reservation_ttl_ms,"         \
    " s.description, " DUE_OR(                                                                     \
        "0", "s.used_tokens") ", s.reserved_tokens,"                                               \
                              " " DUE_OR(                                                          \
                                  "0",                                                             \
                                  "s.used_cost_micros") ","                                        \
                                                        " s.reserved_cost_micros, s.version,"      \
                                                        " floor(extract(epoch FROM s.created_at) " \
                                                        "* 1000)::int8,"                           \
                                                        " floor(extract(epoch FROM s.updated_at) " \
                                                        "* 1000)::int8,"                           \
                                                        " coalesce(floor(extract(epoch FROM "      \
                                                        "s.closed_at) * 1000)::int8, 0), "         \
                                                        "s.updated_by_key_id,"                     \
                                                        " (extract(epoch FROM s.created_at) * "    \
                                                        "1000000)::int8,"                          \
                                                        " (SELECT count(*) FROM reservations r "   \
                                                        "WHERE r.tenant_id = $1::uuid AND "        \
                                                        "r.state = 1"                              \
                                                        "   AND r.expires_at > now() AND "         \
                                                        "(s.level = 1 OR r.session_id = "          \
                                                        "s.session_id)"                            \
                                                        "   AND (s.level <= 2 OR r.task_id = "     \
                                                        "s.task_id) AND (s.level <= 3 OR "         \
                                                        "r.agent_id = "                            \
                                                        "s.agent_id)),"                            \
                                                        " (SELECT count(*) FROM scopes c WHERE "   \
                                                        "c.tenant_id = $1::uuid AND c.level = "    \
                                                        "s.level + 1"                              \
                                                        "   AND (s.level = 1 OR c.session_id = "   \
                                                        "s.session_id) AND (s.level <= 2 OR "      \
                                                        "c.task_id = "                             \
                                                        "s.task_id)"                               \
                                                        "   AND ($2::boolean OR c.closed_at IS "   \
                                                        "NULL)),"                                  \
                                                        " coalesce(floor(extract(epoch "           \
                                                        "FROM " DUE_OR(                            \
                                                            "cg_period_start(s.reset_period,"      \
                                                            " " TENANT_TZ ", now())",              \
                                                            "s.period_start") ") * 1000)::int8, "  \
                                                                              "0),"                \
                                                                              " coalesce(floor("   \
                                                                              "extract(epoch "     \
                                                                              "FROM " DUE_OR(      \
                                                                                  "cg_period_"     \
                                                                                  "next(s.reset_"  \
                                                                                  "period,"        \
                                                                                  " " TENANT_TZ    \
                                                                                  ", now())",      \
                                                                                  "s.next_reset_"  \
                                                                                  "at") ") * "     \
                                                                                        "1000)::"  \
                                                                                        "int8, 0)"
/* ... and what later migrations added (0005: approvals). */
#define NODE_COLUMNS_0011                                                                          \
    NODE_COLUMNS_0003                                                                              \
    ", " DUE_OR("0", "s.approved_extra_tokens") ", s.exclude_cache_read_tokens, " DUE_OR(          \
        "0",                                                                                       \
        "s."                                                                                       \
        "sp"                                                                                       \
        "en"                                                                                       \
        "t_"                                                                                       \
        "in"                                                                                       \
        "pu"                                                                                       \
        "t_"                                                                                       \
        "to"                                                                                       \
        "ke"                                                                                       \
        "n"                                                                                        \
        "s") ", " DUE_OR("0",                                                                      \
                         "s.spent_output_tokens") ", " DUE_OR("0",                                 \
                                                              "s.spent_cache_read_"                \
                                                              "tokens") ", " DUE_OR("0",           \
                                                                                    "s."           \
                                                                                    "sp"           \
                                                                                    "en"           \
                                                                                    "t_"           \
                                                                                    "ca"           \
                                                                                    "ch"           \
                                                                                    "e_"           \
                                                                                    "wr"           \
                                                                                    "it"           \
                                                                                    "e_"           \
                                                                                    "to"           \
                                                                                    "ke"           \
                                                                                    "n"            \
                                                                                    "s") ","       \
                                                                                         " "       \
                                                                                         "c"       \
                                                                                         "o"       \
                                                                                         "a"       \
                                                                                         "l"       \
                                                                                         "e"       \
                                                                                         "s"       \
                                                                                         "c"       \
                                                                                         "e"       \
                                                                                         "("       \
                                                                                         "f"       \
                                                                                         "l"       \
                                                                                         "o"       \
                                                                                         "o"       \
                                                                                         "r"       \
                                                                                         "("       \
                                                                                         "e"       \
                                                                                         "x"       \
                                                                                         "t"       \
                                                                                         "r"       \
                                                                                         "a"       \
                                                                                         "c"       \
                                                                                         "t"       \
                                                                                         "("       \
                                                                                         "e"       \
                                                                                         "p"       \
                                                                                         "o"       \
                                                                                         "c"       \
                                                                                         "h"       \
                                                                                         " "       \
                                                                                         "F"       \
                                                                                         "R"       \
                                                                                         "O"       \
                                                                                         "M"       \
                                                                                         " "       \
                                                                                         "s"       \
                                                                                         "."       \
                                                                                         "l"       \
                                                                                         "a"       \
                                                                                         "s"       \
                                                                                         "t"       \
                                                                                         "_"       \
                                                                                         "a"       \
                                                                                         "c"       \
                                                                                         "t"       \
                                                                                         "i"       \
                                                                                         "v"       \
                                                                                         "i"       \
                                                                                         "t"       \
                                                                                         "y"       \
                                                                                         "_"       \
                                                                                         "a"       \
                                                                                         "t"       \
                                                                                         ")"       \
                                                                                         " "       \
                                                                                         "*"       \
                                                                                         " "       \
                                                                                         "1"       \
                                                                                         "0"       \
                                                                                         "0"       \
                                                                                         "0"       \
                                                                                         ")"       \
                                                                                         ":"       \
                                                                                         ":"       \
                                                                                         "i"       \
                                                                                         "n"       \
                                                                                         "t"       \
                                                                                         "8"       \
                                                                                         ","       \
                                                                                         " "       \
                                                                                         "0"       \
                                                                                         ")"       \
                                                                                         ","       \
                                                                                         " " ACTIVITY_US
/* ... and 0013: allocation from the parent. */
#define NODE_COLUMNS NODE_COLUMNS_0011 ", s.allocate_from_parent, s.allocated_tokens"
#define NODE_NCOLUMNS 41

/* The rows of a path, tenant first (as in store_pg_budget.c): $3..$5 the ids. */
#define PATH_TUPLES                                                                                \
    "(s.session_id, s.task_id, s.agent_id) IN (('', '', ''), ($3::text, '', ''),"                  \
    " ($3::text, $4::text, ''), ($3::text, $4::text, $5::text))"

/* The subtree of a session, task or agent: $3..$5 the ids ($3 never empty). */
#define SUBTREE(alias)                                                                             \
    alias ".session_id = $3::text AND ($4::text = '' OR " alias ".task_id = $4::text)"             \
          " AND ($5::text = '' OR " alias ".agent_id = $5::text)"

/* Reads NODE_COLUMNS starting at column `first` of row. */
static bool read_node(PGresult *res, int row, int first, struct cg_scope_usage *out)
{
    memset(out, 0, sizeof *out);
    struct cg_budget_row *b = &out->row;
#define COL(i) PQgetvalue(res, row, first + (i))
    cg__pg_copy_str(b->ids.session_id, sizeof b->ids.session_id, COL(0));
    cg__pg_copy_str(b->ids.task_id, sizeof b->ids.task_id, COL(1));
    cg__pg_copy_str(b->ids.agent_id, sizeof b->ids.agent_id, COL(2));
    b->level = (int)cg__pg_parse_i64(COL(3));
    b->has_budget = cg__pg_is_true(COL(4));
    b->mode = (int)cg__pg_parse_i64(COL(5));
    b->limit_tokens = cg__pg_parse_i64(COL(6));
    b->limit_cost_micros = cg__pg_parse_i64(COL(7));
    b->warning_ratio = cg__pg_parse_double(COL(8));
    b->backpressure_disabled = cg__pg_is_true(COL(9));
    bool tiers_ok = cg__pg_parse_tiers(COL(10), COL(11), b);
    b->on_store_failure = (int)cg__pg_parse_i64(COL(12));
    b->local_allowance_tokens = cg__pg_parse_i64(COL(13));
    b->reset_period = (int)cg__pg_parse_i64(COL(14));
    b->reservation_ttl_ms = (uint32_t)cg__pg_parse_i64(COL(15));
    cg__pg_copy_str(b->description, sizeof b->description, COL(16));
    b->used_tokens = cg__pg_parse_i64(COL(17));
    b->reserved_tokens = cg__pg_parse_i64(COL(18));
    b->used_cost_micros = cg__pg_parse_i64(COL(19));
    b->reserved_cost_micros = cg__pg_parse_i64(COL(20));
    b->version = cg__pg_parse_i64(COL(21));
    b->created_at_ms = cg__pg_parse_i64(COL(22));
    b->updated_at_ms = cg__pg_parse_i64(COL(23));
    b->closed_at_ms = cg__pg_parse_i64(COL(24));
    cg__pg_copy_str(b->updated_by_key_id, sizeof b->updated_by_key_id, COL(25));
    out->created_at_us = cg__pg_parse_i64(COL(26));
    out->open_reservations = (uint32_t)cg__pg_parse_i64(COL(27));
    out->child_count = (uint32_t)cg__pg_parse_i64(COL(28));
    b->period_start_ms = cg__pg_parse_i64(COL(29));
    b->next_reset_ms = cg__pg_parse_i64(COL(30));
    b->approved_extra_tokens = cg__pg_parse_i64(COL(31));
    b->exclude_cache_read_tokens = cg__pg_is_true(COL(32));
    b->spent_input_tokens = cg__pg_parse_i64(COL(33));
    b->spent_output_tokens = cg__pg_parse_i64(COL(34));
    b->spent_cache_read_tokens = cg__pg_parse_i64(COL(35));
    b->spent_cache_write_tokens = cg__pg_parse_i64(COL(36));
    b->last_activity_ms = cg__pg_parse_i64(COL(37));
    out->last_activity_us = cg__pg_parse_i64(COL(38));
    b->allocate_from_parent = cg__pg_is_true(COL(39));
    b->allocated_tokens = cg__pg_parse_i64(COL(40));
#undef COL
    out->parent = -1;
    return tiers_ok && b->level >= 1 && b->level <= 4;
}

static cg_status bad_row(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "%s: a stored row does not parse", label);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

/* Reads the path to ids as usage nodes (found[level - 1]); *present gets a bit per level. */
static cg_status select_path(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_scope_ids *ids, bool include_closed,
                             struct cg_scope_usage found[4], unsigned *present, struct cg_err *err)
{
    const char *values[] = {tenant_id, include_closed ? "t" : "f", ids->session_id, ids->task_id,
                            ids->agent_id};
    PGresult *res = NULL;
    *present = 0;
    cg_status rc = cg__pg_run(pg, "scope_path",
                              "SELECT " NODE_COLUMNS " FROM scopes s WHERE s.tenant_id = $1::uuid"
                              " AND " PATH_TUPLES " ORDER BY s.level",
                              5, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        goto out;
    }
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_scope_usage node;
        if (!read_node(res, i, 0, &node)) {
            rc = bad_row(pg, "scope_path", err);
            goto out;
        }
        found[node.row.level - 1] = node;
        *present |= 1u << (node.row.level - 1);
    }
out:
    PQclear(res);
    return rc;
}

/* CG_NOT_FOUND naming the first level of the path to ids that is missing from present. */
static cg_status check_path(const struct cg_scope_ids *ids, unsigned present, struct cg_err *err)
{
    int depth = cg_scope_level(ids);
    for (int level = 2; level <= depth; level++)
        if (!(present & (1u << (level - 1))))
            return cg__pg_scope_missing(err, level - 1);
    return CG_OK;
}

/* A tenant row that was never used: what it would read as. */
static void empty_tenant(struct cg_scope_usage *out)
{
    memset(out, 0, sizeof *out);
    out->row.level = 1;
    out->row.mode = 1;
    out->row.warning_ratio = 0.8;
    out->row.on_store_failure = 1;
    out->row.reset_period = 1;
    out->parent = -1;
}

/* ------------------------------------------------------------------ close --- */

/* Runs a statement of the close that returns counts; *res is the caller's to PQclear. */
static cg_status run_close_step(struct cg_pg *pg, const char *label, const char *sql,
                                const char *const *values, PGresult **res, struct cg_err *err)
{
    cg_status rc = cg__pg_run(pg, label, sql, 5, values, NULL, NULL, 0, res, err);
    if (rc != CG_OK && cg__pg_sqlstate_is(pg, "22P02"))
        rc = cg__pg_scope_missing(err, 0);
    return rc;
}

/* Step 2 of a close: locks the path and the subtree's scope rows, level by level, tenant
 * first: the order of every path lock (the tenant's row first), so no cycle with Reserve,
 * Commit or SetBudget. Nothing can be reserved in the subtree from here on. NOT_FOUND naming
 * the first missing level of the path; out->already_closed says whether the scope was. */
static cg_status close_lock_scopes(struct cg_pg *pg, const struct cg_scope_ids *ids,
                                   const char *const *values, struct cg_scope_close *out,
                                   struct cg_err *err)
{
    PGresult *res = NULL;
    cg_status rc = run_close_step(
        pg, "scope_close_lock_scopes",
        "SELECT s.level, s.session_id, s.task_id, s.agent_id,"
        " s.closed_at IS NOT NULL FROM scopes s"
        " WHERE s.tenant_id = $1::uuid AND $2::boolean AND (" PATH_TUPLES
        "  OR (" SUBTREE("s") "))"
                              " ORDER BY s.level, s.session_id, s.task_id, s.agent_id"
                              " FOR NO KEY UPDATE OF s",
        values, &res, err);
    if (rc != CG_OK)
        goto out;
    int depth = cg_scope_level(ids);
    unsigned present = 0;
    for (int i = 0; i < PQntuples(res); i++) {
        int level = (int)cg__pg_parse_i64(PQgetvalue(res, i, 0));
        if (level < 1 || level > 4) {
            rc = bad_row(pg, "scope_close_lock_scopes", err);
            goto out;
        }
        bool on_path = level <= depth && strcmp(PQgetvalue(res, i, 1), ids->session_id) == 0 &&
                       (level < 3 || strcmp(PQgetvalue(res, i, 2), ids->task_id) == 0) &&
                       (level < 4 || strcmp(PQgetvalue(res, i, 3), ids->agent_id) == 0);
        if (level == 1 || on_path)
            present |= 1u << (level - 1);
        if (level == depth && on_path)
            out->already_closed = cg__pg_is_true(PQgetvalue(res, i, 4));
    }
    rc = check_path(ids, present, err);
out:
    PQclear(res);
    return rc;
}

/* Step 3 of a close: releases what is still ACTIVE in the subtree (out->released_*). */
static cg_status close_release(struct cg_pg *pg, const char *const *values,
                               struct cg_scope_close *out, struct cg_err *err)
{
    PGresult *res = NULL;
    /* 3. Release what is still ACTIVE in the subtree: the reservations locked in step 1
     * and any made between the steps. One of those that a concurrent Commit or Release
     * holds is skipped (waiting for it here, with the scope rows held, is the cycle the
     * lock order forbids); that call settles it after this commits. Each released
     * reservation's tokens leave every level of its path; all those rows are locked. */
    cg_status rc = run_close_step(
        pg, "scope_close_release",
        "WITH released AS ("
        "  UPDATE reservations r SET settled_at = now(),"
        "   state = CASE WHEN r.expires_at <= now() THEN 4 ELSE 3 END"
        "  WHERE r.tenant_id = $1::uuid AND r.state = 1 AND r.reservation_id IN ("
        "   SELECT q.reservation_id FROM reservations q WHERE q.tenant_id = $1::uuid"
        "    AND q.state = 1 AND $2::boolean AND " SUBTREE(
            "q") "    FOR NO KEY UPDATE OF q SKIP LOCKED)"
                 "  RETURNING r.session_id, r.task_id, r.agent_id, r.tokens, r.cost_micros),"
                 " per_scope AS ("
                 "  SELECT p.session_id, p.task_id, p.agent_id, sum(x.tokens) AS tokens,"
                 "   sum(x.cost_micros) AS cost_micros FROM released x CROSS JOIN LATERAL ("
                 "    SELECT DISTINCT * FROM (VALUES ('', '', ''), (x.session_id, '', ''),"
                 "     (x.session_id, x.task_id, ''), (x.session_id, x.task_id, x.agent_id))"
                 "     AS v (session_id, task_id, agent_id)) p"
                 "  GROUP BY p.session_id, p.task_id, p.agent_id),"
                 " returned AS ("
                 "  UPDATE scopes c SET"
                 "   reserved_tokens = greatest(0, c.reserved_tokens - per_scope.tokens)::int8,"
                 "   reserved_cost_micros = greatest(0, c.reserved_cost_micros - "
                 "per_scope.cost_micros)::int8"
                 "  FROM per_scope WHERE c.tenant_id = $1::uuid AND c.session_id = "
                 "per_scope.session_id"
                 "   AND c.task_id = per_scope.task_id AND c.agent_id = per_scope.agent_id "
                 "RETURNING 1)"
                 " SELECT (SELECT count(*) FROM released), (SELECT coalesce(sum(tokens), 0)::int8"
                 "  FROM released), (SELECT coalesce(sum(cost_micros), 0)::int8 FROM released),"
                 " (SELECT count(*) FROM returned), (SELECT count(*) FROM per_scope)",
        values, &res, err);
    if (rc != CG_OK)
        goto out;
    out->released_reservations = (uint32_t)cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    out->released_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
    out->released_cost_micros = cg__pg_parse_i64(PQgetvalue(res, 0, 2));
    if (cg__pg_parse_i64(PQgetvalue(res, 0, 3)) != cg__pg_parse_i64(PQgetvalue(res, 0, 4))) {
        /* A reservation whose path row is missing: scopes_parent and reservations_scope
         * make that impossible; counting it anyway would lose tokens silently. */
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "scope_close: a released path row is missing");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_scope_close(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                            struct cg_scope_close *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "scope_close", err);
    /* $2 (closed children count) is for NODE_COLUMNS; the other statements ignore it. */
    const char *values[] = {tenant_id, "t", ids->session_id, ids->task_id, ids->agent_id};
    PGresult *res = NULL;

    /* 1. The subtree's ACTIVE reservations, in id order. Commit and Release lock a
     * reservation before its path, so taking these before any scope row keeps the one
     * order every transaction follows: a reservation being settled makes this wait for
     * that call to finish, and it then no longer matches (READ COMMITTED re-checks). */
    cg_status rc = run_close_step(
        pg, "scope_close_lock_reservations",
        "SELECT r.reservation_id FROM reservations r"
        " WHERE r.tenant_id = $1::uuid AND r.state = 1"
        " AND $2::boolean AND " SUBTREE("r") " ORDER BY r.reservation_id FOR NO KEY UPDATE OF r",
        values, &res, err);
    PQclear(res);
    res = NULL;
    if (rc != CG_OK)
        return rc;

    /* 2. The path and the subtree's scope rows, in the order of every path lock. */
    if ((rc = close_lock_scopes(pg, ids, values, out, err)) != CG_OK)
        return rc;
    int depth = cg_scope_level(ids);

    /* 2b. The path as locked, before the close changes it (for its events). */
    struct cg_scope_usage found[4];
    unsigned present = 0;
    if ((rc = select_path(pg, tenant_id, ids, false, found, &present, err)) != CG_OK)
        goto out;
    for (int level = 1; level <= depth; level++)
        out->path_before[level - 1] = found[level - 1].row;

    /* 3. Release what is still ACTIVE in the subtree. */
    if ((rc = close_release(pg, values, out, err)) != CG_OK)
        goto out;

    /* 4. Close what is open. A scope created after this transaction began may be newer
     * than now(): its closed_at is then its created_at (scopes_closed_after_created). */
    rc = run_close_step(pg, "scope_close_mark",
                        "UPDATE scopes s SET closed_at = greatest(statement_timestamp(),"
                        " s.created_at) WHERE s.tenant_id = $1::uuid AND $2::boolean"
                        " AND s.closed_at IS NULL AND " SUBTREE("s") " RETURNING 1",
                        values, &res, err);
    if (rc != CG_OK)
        goto out;
    out->closed_scopes = (uint32_t)PQntuples(res);
    PQclear(res);
    res = NULL;

    /* 4b. The subtree's PENDING approvals expire with it (approval rows after scope rows:
     * the order of Reserve and ResolveApproval). */
    rc = run_close_step(pg, "scope_close_approvals",
                        "UPDATE approvals a SET state = 4, decided_at = statement_timestamp()"
                        " WHERE a.tenant_id = $1::uuid AND $2::boolean AND a.state = 1"
                        " AND " SUBTREE("a") " RETURNING 1",
                        values, &res, err);
    if (rc != CG_OK)
        goto out;
    out->expired_approvals = (uint32_t)PQntuples(res);
    cg__pg_count(pg, CG_PG_COUNT_APPROVAL_EXPIRED, out->expired_approvals);
    PQclear(res);
    res = NULL;

    /* 5. The scope and its path as they are now. */
    present = 0;
    rc = select_path(pg, tenant_id, ids, true, found, &present, err);
    if (rc == CG_OK && !(present & (1u << (depth - 1))))
        rc = check_path(ids, present, err);
    if (rc == CG_OK) {
        out->usage = found[depth - 1];
        for (int level = 1; level <= depth; level++)
            out->path_after[level - 1] = found[level - 1].row;
        out->npath = depth;
    }
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ usage tree --- */

/* Appends s to buf (cap bytes, *len used) as a quoted element of an array literal. */
static bool append_element(char *buf, size_t cap, size_t *len, const char *s, bool first)
{
    size_t n = *len;
    if (!first) {
        if (n + 1 >= cap)
            return false;
        buf[n++] = ',';
    }
    if (n + 1 >= cap)
        return false;
    buf[n++] = '"';
    for (; *s != '\0'; s++) {
        if (n + 3 >= cap)
            return false;
        if (*s == '"' || *s == '\\')
            buf[n++] = '\\';
        buf[n++] = *s;
    }
    if (n + 2 >= cap)
        return false;
    buf[n++] = '"';
    buf[n] = '\0';
    *len = n;
    return true;
}

/* The children of nodes[lo..hi) (all at one level), oldest first per parent, appended to
 * tree->nodes up to cap nodes in all. */
static cg_status add_children(struct cg_pg *pg, const char *tenant_id, bool include_closed,
                              int max_children, struct cg_usage_tree *tree, int lo, int hi, int cap,
                              struct cg_err *err)
{
    int parent_level = tree->nodes[lo].row.level;
    int room = cap - tree->count;
    if (room <= 0 || parent_level >= 4 || hi <= lo)
        return CG_OK;
    /* Array literals of the parents' ids: at most 2 + 2 * 128 bytes per element. */
    size_t array_cap = (size_t)(hi - lo) * (2 * CG_SCOPE_ID_MAX + 4) + 3;
    char *sessions = malloc(array_cap), *tasks = malloc(array_cap);
    cg_status rc = CG_OK;
    PGresult *res = NULL;
    if (sessions == NULL || tasks == NULL) {
        rc = cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    size_t ls = 1, lt = 1;
    sessions[0] = tasks[0] = '{';
    for (int i = lo; i < hi; i++) {
        if (!append_element(sessions, array_cap, &ls, tree->nodes[i].row.ids.session_id, i == lo) ||
            !append_element(tasks, array_cap, &lt, tree->nodes[i].row.ids.task_id, i == lo)) {
            rc = cg_err_set(err, CG_INTERNAL, "storage error");
            goto out;
        }
    }
    snprintf(sessions + ls, array_cap - ls, "}");
    snprintf(tasks + lt, array_cap - lt, "}");
    char per_parent[16], limit[16];
    snprintf(per_parent, sizeof per_parent, "%d", max_children);
    snprintf(limit, sizeof limit, "%d", room);
    const char *values[] = {tenant_id, include_closed ? "t" : "f", sessions, tasks, per_parent,
                            limit};
    /* One statement per level of the tree: each parent's children through the primary
     * key prefix (the tenant's sessions through scopes_level_created), oldest first. */
    const char *which = parent_level == 1   ? "s.level = 2"
                        : parent_level == 2 ? "s.level = 3 AND s.session_id = p.session_id"
                                            : "s.level = 4 AND s.session_id = p.session_id"
                                              " AND s.task_id = p.task_id";
    char sql[4096];
    snprintf(sql, sizeof sql,
             "SELECT p.idx, " NODE_COLUMNS " FROM unnest($3::text[], $4::text[])"
             " WITH ORDINALITY AS p (session_id, task_id, idx) CROSS JOIN LATERAL ("
             "  SELECT * FROM scopes s WHERE s.tenant_id = $1::uuid AND %s"
             "   AND ($2::boolean OR s.closed_at IS NULL)"
             "  ORDER BY s.created_at, s.session_id, s.task_id, s.agent_id LIMIT $5::int4) s"
             " ORDER BY p.idx, s.created_at, s.session_id, s.task_id, s.agent_id LIMIT $6::int4",
             which);
    rc = cg__pg_run(pg, "usage_tree_children", sql, 6, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK)
        goto out;
    for (int i = 0; i < PQntuples(res); i++) {
        struct cg_scope_usage *node = &tree->nodes[tree->count];
        if (!read_node(res, i, 1, node)) {
            rc = bad_row(pg, "usage_tree_children", err);
            goto out;
        }
        long idx = (long)cg__pg_parse_i64(PQgetvalue(res, i, 0));
        if (idx < 1 || idx > hi - lo) {
            rc = bad_row(pg, "usage_tree_children", err);
            goto out;
        }
        node->parent = lo + (int)idx - 1;
        tree->nodes[node->parent].nchildren++;
        tree->count++;
    }
    if (tree->count == cap) {
        /* Full: were there more? Any parent short of its children says so. */
        for (int i = lo; i < hi; i++) {
            uint32_t wanted = tree->nodes[i].child_count < (uint32_t)max_children
                                  ? tree->nodes[i].child_count
                                  : (uint32_t)max_children;
            if ((uint32_t)tree->nodes[i].nchildren < wanted)
                tree->truncated = true;
        }
    }
out:
    PQclear(res);
    free(sessions);
    free(tasks);
    return rc;
}

cg_status cg_pg_usage_tree(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                           int depth, int max_children, bool include_closed,
                           struct cg_usage_tree *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "usage_tree", err);
    /* One snapshot for the whole tree; the transaction writes nothing. SET commands take
     * no snapshot, so this still counts as first even after a statement_timeout SET. */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "usage_tree_snapshot",
                              "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", 0, NULL,
                              NULL, NULL, 0, &res, err);
    PQclear(res);
    if (rc != CG_OK)
        return rc;

    struct cg_scope_usage found[4];
    unsigned present = 0;
    rc = select_path(pg, tenant_id, ids, include_closed, found, &present, err);
    if (rc != CG_OK)
        return rc;
    if (!(present & 1u)) {
        /* No scope of this tenant was ever used: nothing below it exists either. */
        if (cg_scope_level(ids) > 1)
            return cg__pg_scope_missing(err, 1);
        empty_tenant(&found[0]);
        present = 1u;
    }
    if ((rc = check_path(ids, present, err)) != CG_OK)
        return rc;
    int root_level = cg_scope_level(ids);
    for (int i = 0; i < root_level; i++)
        out->path[i] = found[i].row;
    out->npath = root_level;

    /* Nodes: at most what the levels below can hold, never more than the cap. */
    long cap = 1, level_width = 1;
    for (int d = 1; d <= depth && root_level + d <= 4; d++) {
        level_width *= max_children;
        cap += level_width;
        if (cap >= CG_USAGE_TREE_MAX) {
            cap = CG_USAGE_TREE_MAX;
            break;
        }
    }
    out->nodes = calloc((size_t)cap, sizeof *out->nodes);
    if (out->nodes == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    out->nodes[0] = found[root_level - 1];
    out->count = 1;
    int lo = 0, hi = 1;
    for (int d = 1; d <= depth && root_level + d <= 4 && hi > lo; d++) {
        rc = add_children(pg, tenant_id, include_closed, max_children, out, lo, hi, (int)cap, err);
        if (rc != CG_OK)
            break;
        lo = hi;
        hi = out->count;
    }
    if (rc != CG_OK) {
        free(out->nodes);
        memset(out, 0, sizeof *out);
    }
    return rc;
}

/* ------------------------------------------------------------------ listing --- */

cg_status cg_pg_scope_list(struct cg_pg *pg, const char *tenant_id,
                           const struct cg_scope_ids *parent, int level, bool include_closed,
                           int order, const struct cg_scope_cursor *after, int limit,
                           struct cg_scope_usage *out, int *count, bool *more,
                           struct cg_scope_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "scope_list", err);
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "scope_list_snapshot",
                              "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", 0, NULL,
                              NULL, NULL, 0, &res, err);
    PQclear(res);
    res = NULL;
    if (rc != CG_OK)
        return rc;
    int parent_level = cg_scope_level(parent);
    if (parent_level > 1) {
        struct cg_scope_usage found[4];
        unsigned present = 0;
        rc = select_path(pg, tenant_id, parent, include_closed, found, &present, err);
        if (rc == CG_OK)
            rc = check_path(parent, present, err);
        if (rc != CG_OK)
            return rc;
    }

    char level_text[8], limit_text[16], used[24], created[24];
    snprintf(level_text, sizeof level_text, "%d", level);
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    snprintf(used, sizeof used, "%lld", after ? (long long)after->sort_key : 0LL);
    snprintf(created, sizeof created, "%lld", after ? (long long)after->created_at_us : 0LL);
    const char *values[] = {tenant_id,
                            include_closed ? "t" : "f",
                            parent->session_id,
                            parent->task_id,
                            level_text,
                            limit_text,
                            after ? "t" : "f",
                            used,
                            created,
                            after ? after->ids.session_id : "",
                            after ? after->ids.task_id : "",
                            after ? after->ids.agent_id : ""};
    const char *under = parent_level == 1 ? " AND $3::text = '' AND $4::text = ''"
                        : parent_level == 2
                            ? " AND s.session_id = $3::text AND $4::text = ''"
                            : " AND s.session_id = $3::text AND s.task_id = $4::text";
    /* Keyset paging: the row after the cursor in the page's order, never an offset. Every
     * parameter appears in every variant (PostgreSQL must infer each one's type). */
#define AFTER_CREATED                                                                              \
    "(s.created_at, s.session_id, s.task_id, s.agent_id) > ('epoch'::timestamptz"                  \
    " + $9::int8 * interval '1 microsecond', $10::text, $11::text, $12::text)"
    const char *position =
        order == 1   ? " AND (NOT $7::boolean OR ($8::int8 IS NOT NULL AND " AFTER_CREATED "))"
        : order == 2 ? " AND (NOT $7::boolean OR " ACTIVITY_US " < $8::int8"
                       " OR (" ACTIVITY_US " = $8::int8 AND " AFTER_CREATED "))"
                     : " AND (NOT $7::boolean OR s.used_tokens < $8::int8"
                       " OR (s.used_tokens = $8::int8 AND " AFTER_CREATED "))";
#undef AFTER_CREATED
    const char *sort = order == 1   ? " ORDER BY s.created_at, s.session_id, s.task_id, s.agent_id"
                       : order == 2 ? " ORDER BY " ACTIVITY_US " DESC, s.created_at, s.session_id,"
                                      " s.task_id, s.agent_id"
                                    : " ORDER BY s.used_tokens DESC, s.created_at, s.session_id,"
                                      " s.task_id, s.agent_id";
    char sql[4096];
    snprintf(sql, sizeof sql,
             "SELECT " NODE_COLUMNS " FROM scopes s WHERE s.tenant_id = $1::uuid"
             " AND s.level = $5::int2%s AND ($2::boolean OR s.closed_at IS NULL)%s%s"
             " LIMIT $6::int4",
             under, position, sort);
    rc = cg__pg_run(pg, "scope_list", sql, 12, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
        goto out;
    }
    int rows = PQntuples(res);
    for (int i = 0; i < rows && i < limit; i++) {
        if (!read_node(res, i, 0, &out[i])) {
            rc = bad_row(pg, "scope_list", err);
            goto out;
        }
        *count = i + 1;
    }
    if (rows > limit && *count > 0) {
        const struct cg_scope_usage *last = &out[*count - 1];
        *more = true;
        memset(next, 0, sizeof *next);
        next->sort_key = order == 2 ? last->last_activity_us : last->row.used_tokens;
        next->created_at_us = last->created_at_us;
        next->ids = last->row.ids;
    }
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ by model --- */

/* Text array literal of n strings (quoted, backslash and quote escaped) into buf; false when
 * it does not fit. */
bool cg__pg_text_array(const char *const *items, int n, char *buf, size_t cap)
{
    size_t k = 0;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (k + 2 > cap)                                                                           \
            return false;                                                                          \
        buf[k++] = (c);                                                                            \
    } while (0)
    PUT('{');
    for (int i = 0; i < n; i++) {
        if (i)
            PUT(',');
        PUT('"');
        for (const char *p = items[i]; *p; p++) {
            if (*p == '"' || *p == '\\')
                PUT('\\');
            PUT(*p);
        }
        PUT('"');
    }
    PUT('}');
#undef PUT
    buf[k] = '\0';
    return true;
}

cg_status cg_pg_usage_by_model(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_scope_usage *nodes, int n, int per_node,
                               struct cg_model_usage *out, int cap, int *count, struct cg_err *err)
{
    *count = 0;
    const char **cols[4];
    char(*since)[24] = calloc((size_t)n, sizeof *since);
    for (int c = 0; c < 4; c++)
        cols[c] = calloc((size_t)n, sizeof(char *));
    size_t lit_cap = (size_t)n * (2 * (CG_SCOPE_ID_MAX + 1) + 4) + 4;
    char *lits[4];
    for (int c = 0; c < 4; c++)
        lits[c] = malloc(lit_cap);
    cg_status rc = CG_OK;
    PGresult *res = NULL;
    if (since == NULL || !cols[0] || !cols[1] || !cols[2] || !cols[3] || !lits[0] || !lits[1] ||
        !lits[2] || !lits[3]) {
        rc = cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const struct cg_budget_row *r = &nodes[i].row;
        cols[0][i] = r->ids.session_id;
        cols[1][i] = r->ids.task_id;
        cols[2][i] = r->ids.agent_id;
        snprintf(since[i], sizeof since[i], "%lld",
                 (long long)(r->level == 1 ? r->period_start_ms : 0));
        cols[3][i] = since[i];
    }
    for (int c = 0; c < 4; c++) {
        if (!cg__pg_text_array(cols[c], n, lits[c], lit_cap)) {
            rc = cg_err_set(err, CG_INTERNAL, "by_model: arrays too long");
            goto out;
        }
    }
    char per_text[16];
    snprintf(per_text, sizeof per_text, "%d", per_node);
    const char *values[] = {tenant_id, lits[0], lits[1], lits[2], lits[3], per_text};
    /* Each node's subtree through the ledger's (tenant, session, task, agent, time) index. */
    rc = cg__pg_run(pg, "usage_by_model",
                    "SELECT idx, model, i, o, cr, cw, cost, calls FROM ("
                    " SELECT n.idx, g.model, sum(g.input_tokens) AS i,"
                    "  sum(g.output_tokens) AS o, sum(g.cache_read_tokens) AS cr,"
                    "  sum(g.cache_write_tokens) AS cw, sum(g.cost_micros) AS cost,"
                    "  count(*) AS calls, row_number() OVER (PARTITION BY n.idx ORDER BY"
                    "  sum(g.input_tokens + g.output_tokens + g.cache_read_tokens"
                    "  + g.cache_write_tokens) DESC, g.model) AS rank"
                    " FROM unnest($2::text[], $3::text[], $4::text[], $5::int8[])"
                    "  WITH ORDINALITY AS n(s, t, a, since, idx)"
                    " JOIN ledger g ON g.tenant_id = $1::uuid"
                    "  AND (n.s = '' OR g.session_id = n.s) AND (n.t = '' OR g.task_id = n.t)"
                    "  AND (n.a = '' OR g.agent_id = n.a)"
                    "  AND g.created_at >= to_timestamp(n.since / 1000.0)"
                    " GROUP BY n.idx, g.model) m"
                    " WHERE rank <= $6::int8 ORDER BY idx, rank",
                    6, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        goto out;
    for (int r = 0; r < PQntuples(res) && *count < cap; r++) {
        struct cg_model_usage *m = &out[(*count)++];
        memset(m, 0, sizeof *m);
        m->node = (int)cg__pg_parse_i64(PQgetvalue(res, r, 0)) - 1;
        cg__pg_copy_str(m->model, sizeof m->model, PQgetvalue(res, r, 1));
        m->usage.input_tokens = cg__pg_parse_i64(PQgetvalue(res, r, 2));
        m->usage.output_tokens = cg__pg_parse_i64(PQgetvalue(res, r, 3));
        m->usage.cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, r, 4));
        m->usage.cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, r, 5));
        m->usage.cost_micros = cg__pg_parse_i64(PQgetvalue(res, r, 6));
        m->calls = cg__pg_parse_i64(PQgetvalue(res, r, 7));
    }
out:
    PQclear(res);
    free(since);
    for (int c = 0; c < 4; c++) {
        free(cols[c]);
        free(lits[c]);
    }
    return rc;
}

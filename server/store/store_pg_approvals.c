/* store_pg_approvals.c - approvals in PostgreSQL: opened by requests that would cross an
 * APPROVAL-mode limit, decided by ResolveApproval, expired by the sweeper. See store.h
 * ("approvals") for the contract and store_pg.c for how statements run.
 *
 * Every statement is keyed by tenant_id and served by an index that starts with it
 * (migrations/0005_approvals.sql). The caller's clock comes in as unix ms ($now) and is used
 * as to_timestamp(ms / 1e3), as in store_pg_sweep.c. A PENDING approval past its expiry is
 * read as EXPIRED (decided at its expiry) by every read, so that no answer depends on when
 * the sweeper last ran.
 */
#include "store/store_pg_events.h"
#include "store/store_pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* Defined here, declared in store_approvals.c (the facade): contracts in store.h. */
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

#define NOW(p) "to_timestamp(" p "::int8 / 1e3)"
#define MS(x) "coalesce(floor(extract(epoch FROM " x ") * 1000)::int8, 0)"

/* The columns read_approval() expects, for approvals aliased `a`, with `now` the SQL text of
 * the caller's clock: expiry is applied as it is read. */
#define APPROVAL_COLUMNS(now)                                                                      \
    "a.approval_id::text, a.session_id, a.task_id, a.agent_id, a.level,"                           \
    " CASE WHEN a.state = 1 AND a.expires_at <= " now " THEN 4 ELSE a.state END,"                  \
    " a.requested_tokens, a.overage_tokens, a.granted_tokens, a.limit_tokens, a.used_tokens,"      \
    " a.reserved_tokens, a.budget_version, " MS(                                                   \
        "a.period_start") ", a.model,"                                                             \
                          " a.estimated_cost_micros, a.reason, a.requested_by_key_id, " MS(        \
                              "a.requested_at") ","                                                \
                                                " " MS("a.expires_at") ","                         \
                                                                       " " MS(                     \
                                                                           "CASE WHEN a.state = "  \
                                                                           "1 AND a.expires_at "   \
                                                                           "<= " now               \
                                                                           " THEN a.expires_at"    \
                                                                           " ELSE a.decided_at "   \
                                                                           "END") ","              \
                                                                                  " a.decided_by," \
                                                                                  " a.decided_by_" \
                                                                                  "key_id, "       \
                                                                                  "a.decision_"    \
                                                                                  "note,"          \
                                                                                  " (extract("     \
                                                                                  "epoch FROM "    \
                                                                                  "a.requested_"   \
                                                                                  "at) * "         \
                                                                                  "1000000)::int8"
#define APPROVAL_NCOLUMNS 25

static void read_approval(PGresult *res, int row, struct cg_approval *out)
{
    memset(out, 0, sizeof *out);
#define COL(i) PQgetvalue(res, row, (i))
    cg__pg_copy_str(out->approval_id, sizeof out->approval_id, COL(0));
    cg__pg_copy_str(out->ids.session_id, sizeof out->ids.session_id, COL(1));
    cg__pg_copy_str(out->ids.task_id, sizeof out->ids.task_id, COL(2));
    cg__pg_copy_str(out->ids.agent_id, sizeof out->ids.agent_id, COL(3));
    out->level = (int)cg__pg_parse_i64(COL(4));
    out->state = (int)cg__pg_parse_i64(COL(5));
    out->requested_tokens = cg__pg_parse_i64(COL(6));
    out->overage_tokens = cg__pg_parse_i64(COL(7));
    out->granted_tokens = cg__pg_parse_i64(COL(8));
    out->limit_tokens = cg__pg_parse_i64(COL(9));
    out->used_tokens = cg__pg_parse_i64(COL(10));
    out->reserved_tokens = cg__pg_parse_i64(COL(11));
    out->budget_version = cg__pg_parse_i64(COL(12));
    out->period_start_ms = cg__pg_parse_i64(COL(13));
    cg__pg_copy_str(out->model, sizeof out->model, COL(14));
    out->estimated_cost_micros = cg__pg_parse_i64(COL(15));
    cg__pg_copy_str(out->reason, sizeof out->reason, COL(16));
    cg__pg_copy_str(out->requested_by_key_id, sizeof out->requested_by_key_id, COL(17));
    out->requested_at_ms = cg__pg_parse_i64(COL(18));
    out->expires_at_ms = cg__pg_parse_i64(COL(19));
    out->decided_at_ms = cg__pg_parse_i64(COL(20));
    cg__pg_copy_str(out->decided_by, sizeof out->decided_by, COL(21));
    cg__pg_copy_str(out->decided_by_key_id, sizeof out->decided_by_key_id, COL(22));
    cg__pg_copy_str(out->decision_note, sizeof out->decision_note, COL(23));
#undef COL
}

static const char *state_name(int state)
{
    switch (state) {
    case CG_APPROVAL_PENDING:
        return "pending";
    case CG_APPROVAL_APPROVED:
        return "approved";
    case CG_APPROVAL_DENIED:
        return "denied";
    case CG_APPROVAL_EXPIRED:
        return "expired";
    default:
        return "decided";
    }
}

/* Stores a PENDING approval that is past its expiry as EXPIRED, decided at its expiry. */
static cg_status store_expired(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                               struct cg_err *err)
{
    const char *values[] = {tenant_id, approval_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "approval_expire_one",
                              "UPDATE approvals SET state = 4, decided_at = expires_at"
                              " WHERE tenant_id = $1::uuid AND approval_id = $2::uuid"
                              " AND state = 1",
                              2, values, NULL, NULL, 0, &res, err);
    /* Counted when it was still stored PENDING (not when the sweeper got there first). */
    if (rc == CG_OK)
        cg__pg_count(pg, CG_PG_COUNT_APPROVAL_EXPIRED,
                     (uint64_t)cg__pg_parse_i64(PQcmdTuples(res)));
    PQclear(res);
    return rc;
}

/* The audit row of a decision, from the approval as decide() stored it, in its transaction:
 * before is the PENDING request, after the decision. */
static cg_status approval_audit(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                                const struct cg_audit *audit, struct cg_err *err)
{
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id, approval_id, actor.key_id, actor.role, actor.request_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "approval_audit",
        AUDIT_INSERT " SELECT a.tenant_id, $3::text, $4::int2,"
                     " CASE a.state WHEN 2 THEN 'approval_approved' ELSE 'approval_denied' END,"
                     " a.session_id, a.task_id, a.agent_id, a.approval_id::text,"
                     " jsonb_build_object('state', 'PENDING', 'level', a.level,"
                     "  'requested_tokens', a.requested_tokens, 'overage_tokens',"
                     "  a.overage_tokens, 'limit_tokens', a.limit_tokens, 'reason', a.reason,"
                     "  'requested_by_key_id', a.requested_by_key_id),"
                     " jsonb_build_object('state', CASE a.state WHEN 2 THEN 'APPROVED'"
                     "  ELSE 'DENIED' END, 'granted_tokens', a.granted_tokens, 'decided_by',"
                     "  a.decided_by, 'note', a.decision_note),"
                     " $5::text FROM approvals a"
                     " WHERE a.tenant_id = $1::uuid AND a.approval_id = $2::uuid"
                     " AND a.state IN (2, 3)",
        5, values, NULL, NULL, 0, &res, err);
    PQclear(res);
    return rc;
}

/* WatchUsage: an approval's event, committed with the change it reports (the path is
 * locked by then, as events_append needs). */
static cg_status approval_event(struct cg_pg *pg, const char *tenant_id,
                                const struct cg_approval *a, int type, int64_t now_ms,
                                struct cg_err *err)
{
    struct cg_event_in ev;
    memset(&ev, 0, sizeof ev);
    ev.ids = a->ids;
    ev.type = type;
    cg__pg_copy_str(ev.fields.ref_id, sizeof ev.fields.ref_id, a->approval_id);
    ev.fields.ref_tokens =
        type == 7 && a->state == CG_APPROVAL_APPROVED ? a->granted_tokens : a->requested_tokens;
    ev.fields.ref_state = a->state;
    return cg__pg_events_append(pg, tenant_id, &ev, 1, now_ms, err);
}

/* Step 2 of a request: the last denial of the same limit (any scope under the level, the
 * level's budget version and period unchanged since) into *res (0 or 1 row, the caller's to
 * PQclear). */
static cg_status select_denial(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_budget_row *level, const char *level_text,
                               const char *version, const char *period, const char *now_text,
                               PGresult **res, struct cg_err *err)
{
    const char *denied_values[] = {tenant_id,
                                   level->ids.session_id,
                                   level->ids.task_id,
                                   level->ids.agent_id,
                                   level_text,
                                   version,
                                   period,
                                   now_text};
    return cg__pg_run(
        pg, "approval_denied",
        "SELECT " APPROVAL_COLUMNS(
            NOW("$8")) " FROM approvals a"
                       " WHERE a.tenant_id = $1::uuid AND a.state = 3 AND a.level = $5::int2"
                       " AND ($5::int2 = 1 OR a.session_id = $2::text)"
                       " AND ($5::int2 <= 2 OR a.task_id = $3::text)"
                       " AND ($5::int2 <= 3 OR a.agent_id = $4::text)"
                       " AND a.budget_version = $6::int8"
                       " AND " MS("a.period_start") " = $7::int8"
                                                    " ORDER BY a.requested_at DESC LIMIT 1",
        8, denied_values, NULL, NULL, 0, res, err);
}

/* Step 3 of a request: inserts a new PENDING approval (texts: now, level, budget version,
 * period start) into *res: its row, or none when a concurrent request of the scope got
 * there first (the caller's to PQclear). NOT_FOUND for a missing scope. */
static cg_status insert_approval(struct cg_pg *pg, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_budget_row *level,
                                 const struct cg_approval *request, uint32_t ttl_ms,
                                 const char *const texts[4], PGresult **res, struct cg_err *err)
{
    const char *now_text = texts[0], *level_text = texts[1], *version = texts[2],
               *period = texts[3];
    char amounts[8][24], ttl_text[16];
    snprintf(amounts[0], sizeof amounts[0], "%lld", (long long)request->requested_tokens);
    snprintf(amounts[1], sizeof amounts[1], "%lld", (long long)request->overage_tokens);
    snprintf(amounts[2], sizeof amounts[2], "%lld", (long long)level->limit_tokens);
    snprintf(amounts[3], sizeof amounts[3], "%lld", (long long)level->used_tokens);
    snprintf(amounts[4], sizeof amounts[4], "%lld", (long long)level->reserved_tokens);
    snprintf(amounts[5], sizeof amounts[5], "%lld", (long long)request->estimated_cost_micros);
    snprintf(ttl_text, sizeof ttl_text, "%u", (unsigned)ttl_ms);
    const char *insert_values[] = {
        tenant_id,      ids->session_id, ids->task_id,    ids->agent_id,
        level_text,     amounts[0],      amounts[1],      amounts[2],
        amounts[3],     amounts[4],      version,         period,
        request->model, amounts[5],      request->reason, request->requested_by_key_id,
        now_text,       ttl_text};
    cg_status rc = cg__pg_run(
        pg, "approval_open",
        "INSERT INTO approvals AS a (tenant_id, session_id, task_id, agent_id, level,"
        " requested_tokens, overage_tokens, limit_tokens, used_tokens,"
        " reserved_tokens, budget_version, period_start, model,"
        " estimated_cost_micros, reason, requested_by_key_id, requested_at,"
        " expires_at)"
        " VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::int2, $6::int8,"
        " $7::int8, $8::int8, $9::int8, $10::int8, $11::int8,"
        " CASE WHEN $12::int8 = 0 THEN NULL ELSE " NOW(
            "$12") " END, $13::text,"
                   " $14::int8, $15::text, $16::text, " NOW(
                       "$17") ","
                              " " NOW("$17") " + $18::int8 * interval '1 millisecond')"
                                             " ON CONFLICT (tenant_id, session_id, task_id, "
                                             "agent_id) WHERE state = 1"
                                             " DO NOTHING RETURNING " APPROVAL_COLUMNS(NOW("$17")),
        18, insert_values, NULL, NULL, 0, res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23503") || cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND, "scope: no such scope");
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "approval: invalid value");
    }
    return rc;
}

cg_status cg_pg_approval_request(struct cg_pg *pg, const char *tenant_id,
                                 const struct cg_scope_ids *ids, const struct cg_budget_row *level,
                                 const struct cg_approval *request, uint32_t ttl_ms, int64_t now_ms,
                                 struct cg_approval *out, cg_approval_outcome *outcome,
                                 struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "approval_request", err);
    char now_text[24], level_text[8], version[24], period[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    snprintf(level_text, sizeof level_text, "%d", level->level);
    snprintf(version, sizeof version, "%lld", (long long)level->version);
    snprintf(period, sizeof period, "%lld", (long long)level->period_start_ms);
    PGresult *res = NULL;

    /* 1. The scope's PENDING approval, locked: a concurrent ResolveApproval holds the path
     * first (as this caller does), so the lock here never waits in the wrong order. */
    const char *pending_values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id,
                                    now_text};
    static const char pending_sql[] = "SELECT " APPROVAL_COLUMNS(NOW(
        "$5")) " FROM approvals a"
               " WHERE a.tenant_id = $1::uuid AND a.session_id = $2::text AND a.task_id = $3::text"
               " AND a.agent_id = $4::text AND a.state = 1 FOR UPDATE";
    cg_status rc = cg__pg_run(pg, "approval_pending", pending_sql, 5, pending_values, NULL, NULL, 0,
                              &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) == 1) {
        read_approval(res, 0, out);
        if (out->state == CG_APPROVAL_PENDING) {
            *outcome = CG_APPROVAL_STILL_PENDING;
            goto out;
        }
        /* Past its expiry: stored so, and a new one may be opened below. */
        if ((rc = store_expired(pg, tenant_id, out->approval_id, err)) != CG_OK)
            goto out;
    }
    PQclear(res);
    res = NULL;

    /* 2. A denial of the same limit: any scope under the level, the level's budget version
     * and period unchanged since. */
    rc = select_denial(pg, tenant_id, level, level_text, version, period, now_text, &res, err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) == 1) {
        read_approval(res, 0, out);
        *outcome = CG_APPROVAL_WAS_DENIED;
        goto out;
    }
    PQclear(res);
    res = NULL;

    /* 3. A new one. A concurrent request of the same scope that got here first makes this
     * insert wait for it and then do nothing (approvals_one_pending); its approval is the
     * answer. */
    const char *texts[] = {now_text, level_text, version, period};
    if ((rc = insert_approval(pg, tenant_id, ids, level, request, ttl_ms, texts, &res, err)) !=
        CG_OK)
        goto out;
    if (PQntuples(res) == 1) {
        read_approval(res, 0, out);
        *outcome = CG_APPROVAL_OPENED;
        cg__pg_count(pg, CG_PG_COUNT_APPROVAL_REQUESTED, 1);
        cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg),
               "approval opened: tenant=%s approval_id=%s level=%d requested_tokens=%lld",
               tenant_id, out->approval_id, out->level, (long long)out->requested_tokens);
        PQclear(res);
        res = NULL;
        rc = approval_event(pg, tenant_id, out, 6 /* APPROVAL_REQUESTED */, now_ms, err);
        goto out;
    }
    PQclear(res);
    res = NULL;
    rc = cg__pg_run(pg, "approval_pending", pending_sql, 5, pending_values, NULL, NULL, 0, &res,
                    err);
    if (rc != CG_OK)
        goto out;
    if (PQntuples(res) != 1) {
        /* Decided between the two statements: the caller may simply retry. */
        rc = cg_err_set(err, CG_ABORTED, "conflict with a concurrent approval; retry");
        goto out;
    }
    read_approval(res, 0, out);
    *outcome = CG_APPROVAL_STILL_PENDING;
out:
    PQclear(res);
    return rc;
}

/* Inside the resolve transaction: the decision itself on a locked PENDING approval. */
static cg_status decide(struct cg_pg *pg, const char *tenant_id, struct cg_approval *a,
                        int decision, int64_t granted_tokens, const char *decided_by,
                        const char *key_id, const char *note, const char *now_text,
                        struct cg_err *err)
{
    int64_t granted = 0;
    if (decision == CG_APPROVAL_APPROVED)
        granted = granted_tokens > 0 ? granted_tokens : a->requested_tokens;
    char state_text[8], granted_text[24];
    snprintf(state_text, sizeof state_text, "%d", decision);
    snprintf(granted_text, sizeof granted_text, "%lld", (long long)granted);
    const char *values[] = {tenant_id,  a->approval_id, state_text, granted_text,
                            decided_by, key_id,         note,       now_text};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "approval_decide",
        "UPDATE approvals a SET state = $3::int2, granted_tokens = $4::int8,"
        " decided_at = " NOW(
            "$8") ", decided_by = coalesce(nullif($5::text, ''), $6::text),"
                  " decided_by_key_id = $6::text, decision_note = $7::text"
                  " WHERE a.tenant_id = $1::uuid AND a.approval_id = $2::uuid AND a.state = 1"
                  " RETURNING " APPROVAL_COLUMNS(NOW("$8")),
        8, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "approval: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "approval_decide: the locked row did not move");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
    read_approval(res, 0, a);
    PQclear(res);
    res = NULL;
    cg__pg_count(pg,
                 decision == CG_APPROVAL_APPROVED ? CG_PG_COUNT_APPROVAL_APPROVED
                                                  : CG_PG_COUNT_APPROVAL_DENIED,
                 1);
    if (granted > 0) {
        struct cg_scope_ids row;
        cg_scope_prefix(&a->ids, a->level, &row);
        const char *extra_values[] = {tenant_id, row.session_id, row.task_id, row.agent_id,
                                      granted_text};
        rc = cg__pg_run(pg, "approval_extend",
                        "UPDATE scopes SET approved_extra_tokens = approved_extra_tokens + $5::int8"
                        " WHERE tenant_id = $1::uuid AND session_id = $2::text"
                        " AND task_id = $3::text AND agent_id = $4::text",
                        5, extra_values, NULL, NULL, 0, &res, err);
        if (rc != CG_OK && cg__pg_sqlstate_is(pg, "22003"))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT,
                            "granted_tokens: the level's approved extension would overflow");
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_approval_resolve(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                                 int decision, int64_t granted_tokens, const char *decided_by,
                                 const char *key_id, const char *note, int64_t now_ms,
                                 const struct cg_audit *audit, struct cg_approval *out,
                                 bool *replayed, struct cg_err *err)
{
    *replayed = false;
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    const char *values[] = {tenant_id, approval_id, now_text};
    static const char select_sql[] = "SELECT " APPROVAL_COLUMNS(
        NOW("$3")) " FROM approvals a"
                   " WHERE a.tenant_id = $1::uuid AND a.approval_id = $2::uuid";
    static const char lock_sql[] = "SELECT " APPROVAL_COLUMNS(
        NOW("$3")) " FROM approvals a"
                   " WHERE a.tenant_id = $1::uuid AND a.approval_id = $2::uuid"
                   " FOR UPDATE";
    static const char missing[] = "approval_id: no such approval";
    cg_status rc = cg_pg_begin(pg, err);
    if (rc != CG_OK)
        return rc;
    PGresult *res = NULL;
    bool commit_then_refuse = false;
    /* The lock order of every request: the path's scope rows, tenant first, then the
     * approval. Its scope is read first without a lock (it never changes). */
    rc = cg__pg_run_one(pg, "approval_read", select_sql, 3, values, 0, missing, &res, err);
    if (rc != CG_OK)
        goto out;
    read_approval(res, 0, out);
    PQclear(res);
    res = NULL;
    struct cg_budget_row path[4];
    int n = 0;
    rc = cg_pg_path_read(pg, tenant_id, &out->ids, true, false, now_ms, path, &n, err);
    if (rc != CG_OK)
        goto out;
    rc = cg__pg_run_one(pg, "approval_lock", lock_sql, 3, values, 0, missing, &res, err);
    if (rc != CG_OK)
        goto out;
    read_approval(res, 0, out);
    PQclear(res);
    res = NULL;
    if (out->state == CG_APPROVAL_PENDING) {
        rc = decide(pg, tenant_id, out, decision, granted_tokens, decided_by, key_id, note,
                    now_text, err);
        if (rc == CG_OK)
            rc = approval_event(pg, tenant_id, out, 7 /* APPROVAL_DECIDED */, now_ms, err);
        if (rc == CG_OK)
            rc = approval_audit(pg, tenant_id, out->approval_id, audit, err);
    } else if (out->state == decision) {
        *replayed = true;
    } else {
        /* Expired (stored so now, when only the clock said it) or decided otherwise. */
        rc = store_expired(pg, tenant_id, out->approval_id, err);
        commit_then_refuse = true;
    }
    if (rc == CG_OK)
        rc = cg_pg_commit(pg, err);
    if (rc == CG_OK && commit_then_refuse) {
        rc = cg_err_setr(err, CG_FAILED_PRECONDITION, CG_ERR_APPROVAL_RESOLVED,
                         "approval_id %s: already %s", out->approval_id, state_name(out->state));
        cg_err_meta(err, "approval_id", out->approval_id);
        cg_err_meta(err, "state", state_name(out->state));
    }
    if (rc == CG_OK && !*replayed)
        cg_log(CG_LOG_INFO, MOD, cg__pg_rid(pg),
               "approval decided: tenant=%s approval_id=%s state=%s granted_tokens=%lld", tenant_id,
               out->approval_id, state_name(out->state), (long long)out->granted_tokens);
out:
    PQclear(res);
    if (rc != CG_OK && pg->in_tx)
        cg_pg_rollback(pg);
    return rc;
}

cg_status cg_pg_approval_get(struct cg_pg *pg, const char *tenant_id, const char *approval_id,
                             int64_t now_ms, struct cg_approval *out, struct cg_err *err)
{
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    const char *values[] = {tenant_id, approval_id, now_text};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run_one(pg, "approval_get",
                       "SELECT " APPROVAL_COLUMNS(
                           NOW("$3")) " FROM approvals a"
                                      " WHERE a.tenant_id = $1::uuid AND a.approval_id = $2::uuid",
                       3, values, RUN_READ, "approval_id: no such approval", &res, err);
    if (rc == CG_OK)
        read_approval(res, 0, out);
    PQclear(res);
    return rc;
}

cg_status cg_pg_approval_list(struct cg_pg *pg, const char *tenant_id,
                              const struct cg_scope_ids *ids, bool include_descendants,
                              unsigned states_mask, const struct cg_approval_cursor *after,
                              int limit, int64_t now_ms, struct cg_approval *out, int *count,
                              bool *more, struct cg_approval_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    PGresult *res = NULL;
    cg_status rc = CG_OK;
    if (ids->session_id[0] != '\0') {
        /* The scope must exist (the tenant's always does, as far as listing goes). */
        const char *scope_values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
        rc = cg__pg_run(pg, "approval_list_scope",
                        "SELECT EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
                        "  AND session_id = $2::text AND task_id = '' AND agent_id = ''),"
                        " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
                        "  AND session_id = $2::text AND task_id = $3::text AND agent_id = ''),"
                        " EXISTS (SELECT 1 FROM scopes WHERE tenant_id = $1::uuid"
                        "  AND session_id = $2::text AND task_id = $3::text"
                        "  AND agent_id = $4::text)",
                        4, scope_values, NULL, NULL, RUN_READ, &res, err);
        if (rc != CG_OK) {
            if (cg__pg_sqlstate_is(pg, "22P02"))
                rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND,
                                 "tenant_id: no such tenant");
            goto out;
        }
        if (PQgetvalue(res, 0, 0)[0] != 't')
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND,
                             "scope.session_id: no such session");
        else if (ids->task_id[0] != '\0' && PQgetvalue(res, 0, 1)[0] != 't')
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND,
                             "scope.task_id: no such task");
        else if (ids->agent_id[0] != '\0' && PQgetvalue(res, 0, 2)[0] != 't')
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND,
                             "scope.agent_id: no such agent");
        if (rc != CG_OK)
            goto out;
        PQclear(res);
        res = NULL;
    }
    char now_text[24], mask_text[16], after_us[24], limit_text[16];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    snprintf(mask_text, sizeof mask_text, "%u", states_mask);
    snprintf(after_us, sizeof after_us, "%lld", (long long)(after ? after->requested_at_us : 0));
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    const char *values[] = {tenant_id,
                            ids->session_id,
                            ids->task_id,
                            ids->agent_id,
                            include_descendants ? "t" : "f",
                            mask_text,
                            after ? "t" : "f",
                            after_us,
                            after ? after->approval_id : "00000000-0000-0000-0000-000000000000",
                            limit_text,
                            now_text};
    rc = cg__pg_run(
        pg, "approval_list",
        "SELECT " APPROVAL_COLUMNS(NOW(
            "$11")) " FROM approvals a"
                    " WHERE a.tenant_id = $1::uuid"
                    " AND (CASE WHEN $5::boolean THEN ($2::text = '' OR a.session_id = $2::text)"
                    "   AND ($3::text = '' OR a.task_id = $3::text) AND ($4::text = '' OR "
                    "a.agent_id = $4::text)"
                    "  ELSE a.session_id = $2::text AND a.task_id = $3::text AND a.agent_id = "
                    "$4::text END)"
                    " AND ($6::int4 = 0 OR ($6::int4 >> (CASE WHEN a.state = 1 AND a.expires_at "
                    "<= " NOW(
                        "$11") " THEN 4 ELSE a.state END)) & 1 = 1)"
                               " AND (NOT $7::boolean OR (a.requested_at, a.approval_id) <"
                               "  (timestamptz 'epoch' + $8::int8 * interval '1 microsecond', "
                               "$9::uuid))"
                               " ORDER BY a.requested_at DESC, a.approval_id DESC LIMIT $10::int",
        11, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "page_token: not a page of this listing");
        goto out;
    }
    int rows = PQntuples(res);
    int n = rows < limit ? rows : limit;
    for (int i = 0; i < n; i++)
        read_approval(res, i, &out[i]);
    *count = n;
    *more = rows > limit;
    if (*more && next != NULL) {
        memset(next, 0, sizeof *next);
        next->requested_at_us = cg__pg_parse_i64(PQgetvalue(res, n - 1, APPROVAL_NCOLUMNS - 1));
        cg__pg_copy_str(next->approval_id, sizeof next->approval_id, out[n - 1].approval_id);
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_approvals_expire(struct cg_pg *pg, const char *tenant_id, int64_t now_ms, int limit,
                                 int *expired, struct cg_err *err)
{
    *expired = 0;
    if (pg->in_tx) {
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "approvals_expire called inside a transaction");
        return cg_err_set(err, CG_INTERNAL, "storage error");
    }
    char now_text[24], limit_text[16];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenant_id, now_text, limit_text};
    /* approvals_expiry_due serves the filter and the order. SKIP LOCKED: one that a request
     * or a ResolveApproval holds is theirs (they store the expiry themselves). Nothing else
     * moves: an expired approval held no tokens. */
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "approvals_expire",
                   "UPDATE approvals a SET state = 4, decided_at = a.expires_at"
                   " WHERE a.tenant_id = $1::uuid AND a.state = 1"
                   " AND a.approval_id IN (SELECT q.approval_id FROM approvals q"
                   "  WHERE q.tenant_id = $1::uuid AND q.state = 1"
                   "  AND q.expires_at <= " NOW("$2") " ORDER BY q.expires_at"
                                                      "  LIMIT $3::int FOR UPDATE SKIP LOCKED)"
                                                      " RETURNING 1",
                   3, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK) {
        *expired = PQntuples(res);
        cg__pg_count(pg, CG_PG_COUNT_APPROVAL_EXPIRED, (uint64_t)*expired); /* committed */
    } else if (cg__pg_sqlstate_is(pg, "22P02"))
        rc = CG_OK; /* not a tenant id: nothing to expire */
    PQclear(res);
    return rc;
}

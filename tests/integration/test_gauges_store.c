/* test_gauges_store.c - what the metrics read from and count in PostgreSQL, against a real
 * one: the figures of store_gauges.h (approvals pending and the oldest one's request, the
 * budgets nearest their limit by tenant and level, in order, with closed, task-level and
 * limitless budgets left out), and the approvals a store counts (cg_store_meters): each
 * opening, decision and expiry, by every path that stores one, when its transaction
 * commits and never when it rolls back.
 *
 * Each test gets its own schema (tests/support/pgtest.h), so the "every tenant" figures are
 * those of the test's tenants. Counters the tests set directly go through an administrative
 * connection.
 */
#include <criterion/criterion.h>

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/metrics.h"
#include "pgtest.h"
#include "store/store.h"
#include "store/store_gauges.h"
#include "storetest.h"

static struct cg_pgtest T;

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

/* 2023-06-15 12:00:00 UTC: the injected "now" of the approvals. */
#define T0 1686830400000LL
#define MINUTE 60000LL

/* Sets used_tokens (and approved_extra_tokens) of one scope row. */
static void set_used(PGconn *admin, const char *tenant_id, const char *session_id,
                     const char *task_id, long long used, long long extra)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE scopes SET used_tokens = %lld, approved_extra_tokens = %lld"
             " WHERE tenant_id = '%s' AND session_id = '%s' AND task_id = '%s' AND agent_id = ''",
             used, extra, tenant_id, session_id, task_id);
    cg_pgtest_exec(admin, sql);
}

static struct cg_budget_row budget(const char *session_id, const char *task_id, int64_t limit)
{
    return cg_storetest_budget(session_id, task_id, "", limit);
}

static void put(struct cg_store *s, const char *tenant_id, struct cg_budget_row row)
{
    (void)cg_storetest_put(s, tenant_id, &row);
}

static int read_top(struct cg_store *s, int top_n, struct cg_budget_ratio *top,
                    struct cg_store_gauges *g)
{
    int count = -1;
    struct cg_err err;
    cg_err_clear(&err);
    cg_status rc = cg_store_gauges_read(s, T0, top_n, top, &count, g, &err);
    cr_assert_eq(rc, CG_OK, "gauges_read: %s %s", cg_status_name(rc), err.msg);
    return count;
}

static void assert_ratio(const struct cg_budget_ratio *r, const char *tenant_id, int level,
                         double ratio)
{
    cr_assert_str_eq(r->tenant_id, tenant_id);
    cr_assert_eq(r->level, level, "%s: level %d", tenant_id, r->level);
    cr_assert_float_eq(r->ratio, ratio, 1e-12, "%s level %d: %g", tenant_id, level, r->ratio);
}

Test(gauges, an_empty_database_has_nothing_pending_and_nothing_ranked, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_budget_ratio top[5];
    struct cg_store_gauges g;
    cr_assert_eq(read_top(s, 5, top, &g), 0);
    cr_assert_eq(g.approvals_pending, 0);
    cr_assert_eq(g.oldest_pending_ms, 0);
    /* A tenant with no budget ranks nothing either. */
    cg_storetest_tenant(s, "acme", NULL);
    cr_assert_eq(read_top(s, 5, top, &g), 0);
    struct cg_err err;
    int count = 0;
    cr_assert_eq(cg_store_gauges_read(s, T0, CG_STORE_GAUGES_TOP_MAX + 1, top, &count, &g, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "top_n") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_gauges_read(s, T0, -1, top, &count, &g, &err), CG_INVALID_ARGUMENT);
    cg_store_free(s);
}

Test(gauges, budgets_rank_by_used_over_limit_per_tenant_and_level, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    PGconn *admin = cg_pgtest_connect(&T);
    struct cg_tenant a = cg_storetest_tenant(s, "a", NULL);
    struct cg_tenant b = cg_storetest_tenant(s, "b", NULL);
    struct cg_tenant c = cg_storetest_tenant(s, "c", NULL);

    /* a: its own budget at 0.5; sessions at 0.9 and 0.1 (the level shows the highest); a
     * task at 1.0, below the ranked levels. */
    put(s, a.tenant_id, budget("", "", 1000));
    put(s, a.tenant_id, budget("s1", "", 100));
    put(s, a.tenant_id, budget("s2", "", 100));
    put(s, a.tenant_id, budget("s1", "t1", 10));
    set_used(admin, a.tenant_id, "", "", 500, 0);
    set_used(admin, a.tenant_id, "s1", "", 90, 0);
    set_used(admin, a.tenant_id, "s2", "", 10, 0);
    set_used(admin, a.tenant_id, "s1", "t1", 10, 0);
    /* b: no budget of its own; a session at 150 of 100 + 100 approved (0.75), one at 0.25, a
     * closed one at 1.0 and one whose budget was removed (has_budget false): neither of the
     * last two counts. */
    put(s, b.tenant_id, budget("s1", "", 100));
    put(s, b.tenant_id, budget("s2", "", 200));
    put(s, b.tenant_id, budget("closed", "", 10));
    put(s, b.tenant_id, budget("unbudgeted", "", 10));
    set_used(admin, b.tenant_id, "s1", "", 150, 100);
    set_used(admin, b.tenant_id, "s2", "", 50, 0);
    set_used(admin, b.tenant_id, "closed", "", 10, 0);
    set_used(admin, b.tenant_id, "unbudgeted", "", 999, 0);
    cg_pgtest_exec(admin, "UPDATE scopes SET has_budget = false WHERE session_id = 'unbudgeted'");
    struct cg_scope_close *closed = calloc(1, sizeof *closed);
    struct cg_err err;
    struct cg_scope_ids gone = cg_storetest_scope("closed", "", "");
    cr_assert_eq(cg_store_scope_close(s, b.tenant_id, &gone, closed, &err), CG_OK, "%s", err.msg);
    free(closed);
    /* c: over its own limit. */
    put(s, c.tenant_id, budget("", "", 100));
    set_used(admin, c.tenant_id, "", "", 120, 0);

    struct cg_budget_ratio top[20];
    struct cg_store_gauges g;
    cr_assert_eq(read_top(s, 20, top, &g), 4);
    assert_ratio(&top[0], c.tenant_id, 1, 1.2);
    assert_ratio(&top[1], a.tenant_id, 2, 0.9);
    assert_ratio(&top[2], b.tenant_id, 2, 0.75);
    assert_ratio(&top[3], a.tenant_id, 1, 0.5);

    /* The top 2 only; 0 ranks none (the pending figures are read all the same). */
    cr_assert_eq(read_top(s, 2, top, &g), 2);
    assert_ratio(&top[0], c.tenant_id, 1, 1.2);
    assert_ratio(&top[1], a.tenant_id, 2, 0.9);
    cr_assert_eq(read_top(s, 0, NULL, &g), 0);
    cr_assert_eq(g.approvals_pending, 0);

    /* A budget that moves moves in the ranking. */
    set_used(admin, a.tenant_id, "", "", 1000, 0);
    cr_assert_eq(read_top(s, 1, top, &g), 1);
    assert_ratio(&top[0], c.tenant_id, 1, 1.2);
    set_used(admin, a.tenant_id, "", "", 1300, 0);
    cr_assert_eq(read_top(s, 1, top, &g), 1);
    assert_ratio(&top[0], a.tenant_id, 1, 1.3);
    PQfinish(admin);
    cg_store_free(s);
}

/* ------------------------------------------------------------------- approvals ----- */

/* An APPROVAL-mode session budget (limit 1000, approvals live 10 minutes) at T0. */
static void approval_budget(struct cg_store *s, const char *tenant_id, const char *session_id)
{
    struct cg_budget_row row = budget(session_id, "", 1000);
    row.mode = 3;
    row.approval_ttl_ms = 10 * MINUTE;
    put(s, tenant_id, row);
}

/* A Reserve's approval step for session_id over its limit at now_ms: path locked, approval
 * requested, then committed (or rolled back). */
static cg_approval_outcome request(struct cg_store *s, const char *tenant_id,
                                   const char *session_id, int64_t now_ms, bool commit,
                                   struct cg_approval *out)
{
    struct cg_scope_ids ids = cg_storetest_scope(session_id, "", "");
    struct cg_err err;
    cg_storetest_begin(s);
    struct cg_budget_row path[4];
    int n = 0;
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, false, now_ms, path, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    struct cg_approval *req = calloc(1, sizeof *req);
    req->requested_tokens = 1500;
    req->overage_tokens = 500;
    snprintf(req->reason, sizeof req->reason, "over the limit");
    snprintf(req->requested_by_key_id, sizeof req->requested_by_key_id, "agentkey");
    cg_approval_outcome outcome = 0;
    rc = cg_store_approval_request(s, tenant_id, &ids, path, n, 1, req, 10 * MINUTE, now_ms, out,
                                   &outcome, &err);
    free(req);
    cr_assert_eq(rc, CG_OK, "approval_request: %s %s", cg_status_name(rc), err.msg);
    if (commit)
        cg_storetest_commit(s);
    else
        cg_store_rollback(s);
    return outcome;
}

static cg_status resolve(struct cg_store *s, const char *tenant_id, const char *approval_id,
                         int decision, int64_t now_ms)
{
    struct cg_approval *out = calloc(1, sizeof *out);
    bool replayed = false;
    struct cg_err err;
    cg_status rc = cg_store_approval_resolve(s, tenant_id, approval_id, decision, 0, "alice",
                                             "opkey", "", now_ms, NULL, out, &replayed, &err);
    free(out);
    return rc;
}

static struct cg_approval A, B; /* big structs: kept off the stack */

Test(gauges, pending_approvals_of_every_tenant_and_the_oldest_request, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t1 = cg_storetest_tenant(s, "one", NULL);
    struct cg_tenant t2 = cg_storetest_tenant(s, "two", NULL);
    approval_budget(s, t1.tenant_id, "s1");
    approval_budget(s, t2.tenant_id, "s1");
    cr_assert_eq(request(s, t1.tenant_id, "s1", T0, true, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(request(s, t2.tenant_id, "s1", T0 + MINUTE, true, &B), CG_APPROVAL_OPENED);

    struct cg_store_gauges g;
    int count = 0;
    struct cg_err err;
    cr_assert_eq(cg_store_gauges_read(s, T0 + 2 * MINUTE, 0, NULL, &count, &g, &err), CG_OK);
    cr_assert_eq(g.approvals_pending, 2);
    cr_assert_eq(g.oldest_pending_ms, T0);
    /* The oldest decided: the other is the oldest now. */
    cr_assert_eq(resolve(s, t1.tenant_id, A.approval_id, CG_APPROVAL_DENIED, T0 + 3 * MINUTE),
                 CG_OK);
    cr_assert_eq(cg_store_gauges_read(s, T0 + 3 * MINUTE, 0, NULL, &count, &g, &err), CG_OK);
    cr_assert_eq(g.approvals_pending, 1);
    cr_assert_eq(g.oldest_pending_ms, T0 + MINUTE);
    /* Past its expiry it is not pending, even before the sweeper stores it so. */
    cr_assert_eq(cg_store_gauges_read(s, T0 + 11 * MINUTE, 0, NULL, &count, &g, &err), CG_OK);
    cr_assert_eq(g.approvals_pending, 0);
    cr_assert_eq(g.oldest_pending_ms, 0);
    cg_store_free(s);
}

/* A store whose approval changes count into the four counters of a registry. */
struct counted {
    struct cg_metrics *reg;
    struct cg_metric *requested, *approved, *denied, *expired;
    struct cg_store *store;
};

static void counted_store(struct counted *c)
{
    c->reg = cg_metrics_new(1);
    struct cg_metric_family *f =
        cg_metrics_counter_family(c->reg, "approvals_total", "a", CG_LABELS("event"), 4, NULL);
    c->requested = cg_metric_get(f, CG_LABELS("requested"));
    c->approved = cg_metric_get(f, CG_LABELS("approved"));
    c->denied = cg_metric_get(f, CG_LABELS("denied"));
    c->expired = cg_metric_get(f, CG_LABELS("expired"));
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    opts.meters.approvals_requested = c->requested;
    opts.meters.approvals_approved = c->approved;
    opts.meters.approvals_denied = c->denied;
    opts.meters.approvals_expired = c->expired;
    c->store = cg_store_new(&opts);
    cr_assert_not_null(c->store);
    cg_store_set_metrics_slot(c->store, 0);
}

static void assert_counts(const struct counted *c, int requested, int approved, int denied,
                          int expired)
{
    cr_assert_eq(cg_metric_value(c->requested), requested, "requested %g",
                 cg_metric_value(c->requested));
    cr_assert_eq(cg_metric_value(c->approved), approved, "approved %g",
                 cg_metric_value(c->approved));
    cr_assert_eq(cg_metric_value(c->denied), denied, "denied %g", cg_metric_value(c->denied));
    cr_assert_eq(cg_metric_value(c->expired), expired, "expired %g", cg_metric_value(c->expired));
}

Test(gauges, approvals_count_when_the_transaction_that_wrote_them_commits, .init = setup,
     .fini = teardown, .timeout = 60)
{
    struct counted c;
    counted_store(&c);
    struct cg_store *s = c.store;
    struct cg_tenant t = cg_storetest_tenant(s, "acme", NULL);
    const char *sessions[] = {"s1", "s2", "s3", "s4", "s5"};
    for (size_t i = 0; i < sizeof sessions / sizeof *sessions; i++)
        approval_budget(s, t.tenant_id, sessions[i]);
    assert_counts(&c, 0, 0, 0, 0);

    /* Opened and rolled back: nothing happened. Opened and committed: requested. */
    cr_assert_eq(request(s, t.tenant_id, "s1", T0, false, &A), CG_APPROVAL_OPENED);
    assert_counts(&c, 0, 0, 0, 0);
    cr_assert_eq(request(s, t.tenant_id, "s1", T0, true, &A), CG_APPROVAL_OPENED);
    assert_counts(&c, 1, 0, 0, 0);
    /* Asking again finds it: no new request. */
    cr_assert_eq(request(s, t.tenant_id, "s1", T0 + 1000, true, &B), CG_APPROVAL_STILL_PENDING);
    assert_counts(&c, 1, 0, 0, 0);
    /* Decided once; the same decision again is a replay, not counted twice. */
    cr_assert_eq(resolve(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, T0 + MINUTE), CG_OK);
    cr_assert_eq(resolve(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, T0 + MINUTE), CG_OK);
    assert_counts(&c, 1, 1, 0, 0);
    cr_assert_eq(request(s, t.tenant_id, "s2", T0, true, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(resolve(s, t.tenant_id, A.approval_id, CG_APPROVAL_DENIED, T0 + MINUTE), CG_OK);
    assert_counts(&c, 2, 1, 1, 0);

    /* Expired by the sweeper, once. */
    cr_assert_eq(request(s, t.tenant_id, "s3", T0, true, &A), CG_APPROVAL_OPENED);
    int n = 0;
    struct cg_err err;
    cr_assert_eq(cg_store_approvals_expire(s, t.tenant_id, T0 + 11 * MINUTE, 10, &n, &err), CG_OK);
    cr_assert_eq(n, 1);
    assert_counts(&c, 3, 1, 1, 1);
    /* Expired by a ResolveApproval that came too late (stored so, then refused); the
     * sweeper after it finds nothing more. */
    cr_assert_eq(request(s, t.tenant_id, "s4", T0, true, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(resolve(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, T0 + 11 * MINUTE),
                 CG_FAILED_PRECONDITION);
    assert_counts(&c, 4, 1, 1, 2);
    cr_assert_eq(cg_store_approvals_expire(s, t.tenant_id, T0 + 12 * MINUTE, 10, &n, &err), CG_OK);
    cr_assert_eq(n, 0);
    assert_counts(&c, 4, 1, 1, 2);
    /* Expired by the next request of its scope, which opens a new one; rolled back, neither
     * counts. */
    cr_assert_eq(request(s, t.tenant_id, "s5", T0, true, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(request(s, t.tenant_id, "s5", T0 + 11 * MINUTE, false, &B), CG_APPROVAL_OPENED);
    assert_counts(&c, 5, 1, 1, 2);
    cr_assert_eq(request(s, t.tenant_id, "s5", T0 + 11 * MINUTE, true, &B), CG_APPROVAL_OPENED);
    assert_counts(&c, 6, 1, 1, 3);
    /* Expired by CloseScope (it runs on the database's clock: a pending approval of now). */
    cr_assert_eq(request(s, t.tenant_id, "s1", cg_wall_ms(), true, &A), CG_APPROVAL_OPENED);
    assert_counts(&c, 7, 1, 1, 3);
    struct cg_scope_close *closed = calloc(1, sizeof *closed);
    struct cg_scope_ids s1 = cg_storetest_scope("s1", "", "");
    cr_assert_eq(cg_store_scope_close(s, t.tenant_id, &s1, closed, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(closed->expired_approvals, 1);
    free(closed);
    assert_counts(&c, 7, 1, 1, 4);
    cg_store_free(s);
    cg_metrics_free(c.reg);
}

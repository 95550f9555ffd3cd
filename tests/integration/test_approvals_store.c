/* test_approvals_store.c - the approval state machine (store.h, "approvals") against a real
 * PostgreSQL, with an injected clock: PENDING -> APPROVED / DENIED / EXPIRED with who and
 * when, one PENDING approval per scope even under concurrent requests, the approved
 * extension of a limit and its end at SetBudget and at a reset, expiry by the clock, by the
 * sweeper and by CloseScope, listing and tenant isolation.
 *
 * Each test gets its own schema (tests/support/pgtest.h). Checks of what was stored go
 * through a separate administrative connection where the store's own answer is not enough.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "pgtest.h"
#include "storetest.h"
#include "rpc/rpc.h"
#include "store/store.h"

static struct cg_pgtest T;

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

static struct cg_store *test_store(void)
{
    return cg_storetest_store(&T);
}

static struct cg_tenant make_tenant(struct cg_store *s, const char *name)
{
    return cg_storetest_tenant(s, name, NULL);
}

/* 2023-06-15 12:00:00 UTC: the injected "now" of every test. */
#define T0 1686830400000LL
#define MINUTE 60000LL

/* An APPROVAL-mode budget (mode 3) of limit tokens on ids, stored at now_ms. reset_period
 * 2 (daily) only for the tenant. */
static struct cg_budget_row put_approval_budget(struct cg_store *s, const char *tenant_id,
                                                struct cg_scope_ids ids, int64_t limit,
                                                int reset_period, int64_t now_ms)
{
    struct cg_budget_row row, out;
    memset(&row, 0, sizeof row);
    row.ids = ids;
    row.has_budget = true;
    row.mode = 3;
    row.limit_tokens = limit;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = reset_period;
    row.reservation_ttl_ms = 300000;
    row.approval_ttl_ms = 10 * MINUTE;
    bool created = false;
    struct cg_err err;
    cg_storetest_begin(s);
    int n = 0;
    struct cg_budget_row path[4];
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, true, now_ms, path, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    rc = cg_store_budget_put(s, tenant_id, &row, 0, "k1", now_ms, NULL, &out, &created, &err);
    cr_assert_eq(rc, CG_OK, "budget_put: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return out;
}

/* Reads the path to ids at now_ms (no lock) in a transaction of its own. */
static int read_at(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                   int64_t now_ms, struct cg_budget_row rows[4])
{
    int n = 0;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, false, false, now_ms, rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return n;
}

/* What a request of `tokens` over the limit of level (1-based) of ids' path does, as
 * Reserve runs it: path locked, approval step, commit. */
static cg_approval_outcome request_at(struct cg_store *s, const char *tenant_id,
                                      struct cg_scope_ids ids, int level, int64_t tokens,
                                      int64_t now_ms, struct cg_approval *out)
{
    struct cg_err err;
    cg_storetest_begin(s);
    struct cg_budget_row path[4];
    int n = 0;
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, false, now_ms, path, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    static struct cg_approval request; /* large; tests are single-threaded here */
    memset(&request, 0, sizeof request);
    request.requested_tokens = tokens;
    request.overage_tokens = 1;
    snprintf(request.model, sizeof request.model, "gpt-4o");
    snprintf(request.reason, sizeof request.reason, "over the limit");
    snprintf(request.requested_by_key_id, sizeof request.requested_by_key_id, "agentkey");
    cg_approval_outcome outcome = 0;
    rc = cg_store_approval_request(s, tenant_id, &ids, path, n, level - 1, &request,
                                   path[level - 1].approval_ttl_ms, now_ms, out, &outcome, &err);
    cr_assert_eq(rc, CG_OK, "approval_request: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return outcome;
}

static cg_status resolve_at(struct cg_store *s, const char *tenant_id, const char *approval_id,
                            int decision, int64_t granted, int64_t now_ms, struct cg_approval *out,
                            bool *replayed, struct cg_err *err)
{
    return cg_store_approval_resolve(s, tenant_id, approval_id, decision, granted, "alice", "opkey",
                                     "ok by me", now_ms, NULL, out, replayed, err);
}

static struct cg_approval A, B; /* big structs: kept off the stack */

Test(approvals, open_pending_approve_extends_the_level_with_who_and_when, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids sess = cg_storetest_scope("s1", "", "");
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0);

    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(A.state, CG_APPROVAL_PENDING);
    cr_assert_eq(A.level, 2);
    cr_assert_eq(A.requested_tokens, 1500);
    cr_assert_eq(A.limit_tokens, 1000);
    cr_assert_eq(A.requested_at_ms, T0);
    cr_assert_eq(A.expires_at_ms, T0 + 10 * MINUTE);
    cr_assert_str_eq(A.requested_by_key_id, "agentkey");
    cr_assert_str_eq(A.model, "gpt-4o");

    /* The same scope asks again: the same approval, still pending. */
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0 + 1000, &B),
                 CG_APPROVAL_STILL_PENDING);
    cr_assert_str_eq(B.approval_id, A.approval_id);

    bool replayed = true;
    struct cg_err err;
    cg_status rc = resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 0,
                              T0 + 2 * MINUTE, &B, &replayed, &err);
    cr_assert_eq(rc, CG_OK, "resolve: %s %s", cg_status_name(rc), err.msg);
    cr_assert_not(replayed);
    cr_assert_eq(B.state, CG_APPROVAL_APPROVED);
    cr_assert_eq(B.granted_tokens, 1500, "0 grants the requested tokens");
    cr_assert_eq(B.decided_at_ms, T0 + 2 * MINUTE);
    cr_assert_str_eq(B.decided_by, "alice");
    cr_assert_str_eq(B.decided_by_key_id, "opkey");
    cr_assert_str_eq(B.decision_note, "ok by me");

    struct cg_budget_row rows[4];
    int n = read_at(s, t.tenant_id, sess, T0 + 3 * MINUTE, rows);
    cr_assert_eq(n, 2);
    cr_assert_eq(rows[1].approved_extra_tokens, 1500);
    cr_assert_eq(rows[0].approved_extra_tokens, 0, "only the approval's level grows");

    /* The same decision again is a replay; the extension is not added twice. */
    rc = resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 0, T0 + 4 * MINUTE, &B,
                    &replayed, &err);
    cr_assert_eq(rc, CG_OK);
    cr_assert(replayed);
    cr_assert_eq(B.decided_at_ms, T0 + 2 * MINUTE, "the recorded decision");
    read_at(s, t.tenant_id, sess, T0 + 5 * MINUTE, rows);
    cr_assert_eq(rows[1].approved_extra_tokens, 1500);

    /* Another decision on a decided approval names it. */
    rc = resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_DENIED, 0, T0 + 5 * MINUTE, &B,
                    &replayed, &err);
    cr_assert_eq(rc, CG_FAILED_PRECONDITION);
    cr_assert(strstr(err.msg, A.approval_id) != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "approved") != NULL, "%s", err.msg);
    cg_store_free(s);
}

Test(approvals, a_denial_refuses_the_same_limit_until_the_budget_changes, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids sess = cg_storetest_scope("s1", "", "");
    struct cg_scope_ids task = cg_storetest_scope("s1", "t1", "");
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0);
    put_approval_budget(s, t.tenant_id, task, 500, 1, T0);

    /* The task's request crosses the session's limit (level 2). */
    cr_assert_eq(request_at(s, t.tenant_id, task, 2, 1200, T0, &A), CG_APPROVAL_OPENED);
    bool replayed = false;
    struct cg_err err;
    cg_status rc = resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_DENIED, 0, T0 + MINUTE, &B,
                              &replayed, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(B.state, CG_APPROVAL_DENIED);
    cr_assert_eq(B.granted_tokens, 0);

    /* The task again, and the session itself: the same limit, denied. */
    cr_assert_eq(request_at(s, t.tenant_id, task, 2, 1200, T0 + 2 * MINUTE, &B),
                 CG_APPROVAL_WAS_DENIED);
    cr_assert_str_eq(B.approval_id, A.approval_id);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1200, T0 + 2 * MINUTE, &B),
                 CG_APPROVAL_WAS_DENIED);
    /* The task's own limit is another limit. */
    cr_assert_eq(request_at(s, t.tenant_id, task, 3, 600, T0 + 2 * MINUTE, &B), CG_APPROVAL_OPENED);

    /* A new budget version of the session: a new approval may be opened. */
    put_approval_budget(s, t.tenant_id, sess, 1100, 1, T0 + 3 * MINUTE);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1200, T0 + 4 * MINUTE, &B),
                 CG_APPROVAL_OPENED);
    cr_assert_str_neq(B.approval_id, A.approval_id);
    cg_store_free(s);
}

Test(approvals, a_pending_approval_past_its_expiry_reads_expired_and_cannot_be_decided,
     .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids sess = cg_storetest_scope("s1", "", "");
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0, &A), CG_APPROVAL_OPENED);

    struct cg_err err;
    cr_assert_eq(
        cg_store_approval_get(s, t.tenant_id, A.approval_id, T0 + 10 * MINUTE - 1, &B, &err),
        CG_OK);
    cr_assert_eq(B.state, CG_APPROVAL_PENDING, "a millisecond before its expiry");
    cr_assert_eq(cg_store_approval_get(s, t.tenant_id, A.approval_id, T0 + 10 * MINUTE, &B, &err),
                 CG_OK);
    cr_assert_eq(B.state, CG_APPROVAL_EXPIRED, "at its expiry");
    cr_assert_eq(B.decided_at_ms, T0 + 10 * MINUTE);

    bool replayed = false;
    cg_status rc = resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 0,
                              T0 + 11 * MINUTE, &B, &replayed, &err);
    cr_assert_eq(rc, CG_FAILED_PRECONDITION);
    cr_assert(strstr(err.msg, "expired") != NULL, "%s", err.msg);
    PGconn *admin = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(admin, "SELECT state FROM approvals WHERE approval_id = $1",
                                     A.approval_id),
                 4, "the refusal stored the expiry");
    struct cg_budget_row rows[4];
    read_at(s, t.tenant_id, sess, T0 + 12 * MINUTE, rows);
    cr_assert_eq(rows[1].approved_extra_tokens, 0);

    /* The next request that needs one opens a new approval. */
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0 + 12 * MINUTE, &B),
                 CG_APPROVAL_OPENED);
    cr_assert_str_neq(B.approval_id, A.approval_id);
    PQfinish(admin);
    cg_store_free(s);
}

Test(approvals, a_request_after_expiry_replaces_the_expired_one, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids sess = cg_storetest_scope("s1", "", "");
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0 + 10 * MINUTE, &B),
                 CG_APPROVAL_OPENED);
    cr_assert_str_neq(B.approval_id, A.approval_id);
    PGconn *admin = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(admin,
                                     "SELECT state * 1000 + (decided_at = expires_at)::int"
                                     " FROM approvals WHERE approval_id = $1",
                                     A.approval_id),
                 4001, "stored EXPIRED, decided at its expiry");
    PQfinish(admin);
    cg_store_free(s);
}

Test(approvals, the_sweeper_expires_due_approvals_and_only_those, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 1000, 1, T0);
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s2", "", ""), 1000, 1, T0);
    cr_assert_eq(request_at(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 2, 1500, T0, &A),
                 CG_APPROVAL_OPENED);
    cr_assert_eq(
        request_at(s, t.tenant_id, cg_storetest_scope("s2", "", ""), 2, 1500, T0 + 5 * MINUTE, &B),
        CG_APPROVAL_OPENED);

    struct cg_rpc_env env = {.svc = {.store = s}};
    int expired = 0;
    cr_assert(cg_rpc_sweep(&env, T0 + 12 * MINUTE, &expired));
    PGconn *admin = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(admin, "SELECT state FROM approvals WHERE approval_id = $1",
                                     A.approval_id),
                 4);
    cr_assert_eq(cg_pgtest_query_int(admin, "SELECT state FROM approvals WHERE approval_id = $1",
                                     B.approval_id),
                 1, "not due until T0 + 15 min");
    int n = 0;
    struct cg_err err;
    cr_assert_eq(cg_store_approvals_expire(s, t.tenant_id, T0 + 15 * MINUTE, 10, &n, &err), CG_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(cg_store_approvals_expire(s, t.tenant_id, T0 + 15 * MINUTE, 10, &n, &err), CG_OK);
    cr_assert_eq(n, 0, "each expires once");
    PQfinish(admin);
    cg_store_free(s);
}

Test(approvals, set_budget_and_a_tenant_reset_end_approved_extensions, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids tenant = cg_storetest_scope("", "", "");
    struct cg_scope_ids sess = cg_storetest_scope("s1", "", "");
    put_approval_budget(s, t.tenant_id, tenant, 1000, 2 /* daily */, T0);
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0);

    bool replayed;
    struct cg_err err;
    cr_assert_eq(request_at(s, t.tenant_id, sess, 1, 1500, T0, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 700, T0 + MINUTE,
                            &B, &replayed, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(B.granted_tokens, 700);
    cr_assert_eq(request_at(s, t.tenant_id, sess, 2, 1500, T0 + MINUTE, &A), CG_APPROVAL_OPENED);
    cr_assert_eq(resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 300,
                            T0 + 2 * MINUTE, &B, &replayed, &err),
                 CG_OK, "%s", err.msg);
    struct cg_budget_row rows[4];
    read_at(s, t.tenant_id, sess, T0 + 3 * MINUTE, rows);
    cr_assert_eq(rows[0].approved_extra_tokens, 700);
    cr_assert_eq(rows[1].approved_extra_tokens, 300);

    /* SetBudget of the session ends its extension, not the tenant's. */
    put_approval_budget(s, t.tenant_id, sess, 1000, 1, T0 + 4 * MINUTE);
    read_at(s, t.tenant_id, sess, T0 + 5 * MINUTE, rows);
    cr_assert_eq(rows[0].approved_extra_tokens, 700);
    cr_assert_eq(rows[1].approved_extra_tokens, 0);

    /* Midnight UTC: the tenant's period resets, and its extension with it. */
    int64_t next_day = T0 + 12 * 60 * MINUTE + MINUTE;
    read_at(s, t.tenant_id, sess, next_day, rows);
    cr_assert_eq(rows[0].approved_extra_tokens, 0);
    cg_store_free(s);
}

Test(approvals, a_denial_at_the_tenant_level_ends_with_the_period, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_scope_ids tenant = cg_storetest_scope("", "", "");
    put_approval_budget(s, t.tenant_id, tenant, 1000, 2 /* daily */, T0);
    cr_assert_eq(request_at(s, t.tenant_id, tenant, 1, 1500, T0, &A), CG_APPROVAL_OPENED);
    bool replayed;
    struct cg_err err;
    cr_assert_eq(resolve_at(s, t.tenant_id, A.approval_id, CG_APPROVAL_DENIED, 0, T0 + MINUTE, &B,
                            &replayed, &err),
                 CG_OK);
    cr_assert_eq(request_at(s, t.tenant_id, tenant, 1, 1500, T0 + 2 * MINUTE, &B),
                 CG_APPROVAL_WAS_DENIED);
    int64_t next_day = T0 + 12 * 60 * MINUTE + MINUTE;
    cr_assert_eq(request_at(s, t.tenant_id, tenant, 1, 1500, next_day, &B), CG_APPROVAL_OPENED);
    cg_store_free(s);
}

Test(approvals, close_scope_expires_the_subtrees_pending_approvals, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 1000, 1, T0);
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s1", "t1", ""), 1000, 1, T0);
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s2", "", ""), 1000, 1, T0);
    int64_t now = cg_wall_ms(); /* CloseScope runs on the database's clock */
    cr_assert_eq(request_at(s, t.tenant_id, cg_storetest_scope("s1", "t1", ""), 3, 1500, now, &A),
                 CG_APPROVAL_OPENED);
    cr_assert_eq(request_at(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 2, 1500, now, &B),
                 CG_APPROVAL_OPENED);
    cr_assert_eq(request_at(s, t.tenant_id, cg_storetest_scope("s2", "", ""), 2, 1500, now, &B),
                 CG_APPROVAL_OPENED);
    struct cg_scope_close *closed = calloc(1, sizeof *closed);
    struct cg_err err;
    struct cg_scope_ids s1 = cg_storetest_scope("s1", "", "");
    cr_assert_eq(cg_store_scope_close(s, t.tenant_id, &s1, closed, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(closed->expired_approvals, 2);
    cr_assert_eq(cg_store_approval_get(s, t.tenant_id, A.approval_id, now, &A, &err), CG_OK);
    cr_assert_eq(A.state, CG_APPROVAL_EXPIRED);
    cr_assert_eq(cg_store_approval_get(s, t.tenant_id, B.approval_id, now, &B, &err), CG_OK);
    cr_assert_eq(B.state, CG_APPROVAL_PENDING, "s2 is not in the subtree");
    cr_assert_eq(cg_store_scope_close(s, t.tenant_id, &s1, closed, &err), CG_OK);
    cr_assert_eq(closed->expired_approvals, 0, "idempotent");
    free(closed);
    cg_store_free(s);
}

Test(approvals, listing_pages_newest_first_and_filters_by_state_and_scope, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    char ids[5][CG_UUID_LEN + 1];
    for (int i = 0; i < 5; i++) {
        char sid[16];
        snprintf(sid, sizeof sid, "s%d", i);
        put_approval_budget(s, t.tenant_id, cg_storetest_scope(sid, "", ""), 1000, 1, T0);
        cr_assert_eq(
            request_at(s, t.tenant_id, cg_storetest_scope(sid, "", ""), 2, 1500, T0 + i * 1000, &A),
            CG_APPROVAL_OPENED);
        memcpy(ids[i], A.approval_id, sizeof ids[i]);
    }
    bool replayed;
    struct cg_err err;
    cr_assert_eq(
        resolve_at(s, t.tenant_id, ids[1], CG_APPROVAL_DENIED, 0, T0 + MINUTE, &A, &replayed, &err),
        CG_OK);
    struct cg_approval *page = calloc(2, sizeof *page);
    struct cg_approval_cursor next;
    int count = 0;
    bool more = false;
    struct cg_scope_ids all = cg_storetest_scope("", "", "");
    int64_t now = T0 + 2 * MINUTE;
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, true, 0, NULL, 2, now, page, &count,
                                        &more, &next, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(count, 2);
    cr_assert(more);
    cr_assert_str_eq(page[0].approval_id, ids[4]);
    cr_assert_str_eq(page[1].approval_id, ids[3]);
    struct cg_approval_cursor after = next;
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, true, 0, &after, 2, now, page, &count,
                                        &more, &next, &err),
                 CG_OK);
    cr_assert_eq(count, 2);
    cr_assert_str_eq(page[0].approval_id, ids[2]);
    cr_assert_str_eq(page[1].approval_id, ids[1]);
    after = next;
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, true, 0, &after, 2, now, page, &count,
                                        &more, &next, &err),
                 CG_OK);
    cr_assert_eq(count, 1);
    cr_assert_not(more);
    cr_assert_str_eq(page[0].approval_id, ids[0]);

    /* Only DENIED; only the tenant's own scope (none were opened there). */
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, true, 1u << CG_APPROVAL_DENIED, NULL,
                                        2, now, page, &count, &more, &next, &err),
                 CG_OK);
    cr_assert_eq(count, 1);
    cr_assert_str_eq(page[0].approval_id, ids[1]);
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, false, 0, NULL, 2, now, page, &count,
                                        &more, &next, &err),
                 CG_OK);
    cr_assert_eq(count, 0);
    /* EXPIRED by the clock counts as EXPIRED in the filter. */
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &all, true, 1u << CG_APPROVAL_EXPIRED, NULL,
                                        2, T0 + 60 * MINUTE, page, &count, &more, &next, &err),
                 CG_OK);
    cr_assert_eq(count, 2);
    cr_assert(more);
    struct cg_scope_ids missing = cg_storetest_scope("nope", "", "");
    cr_assert_eq(cg_store_approval_list(s, t.tenant_id, &missing, true, 0, NULL, 2, now, page,
                                        &count, &more, &next, &err),
                 CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "scope.session_id") != NULL, "%s", err.msg);
    free(page);
    cg_store_free(s);
}

Test(approvals, another_tenants_approval_is_not_found, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant a = make_tenant(s, "a");
    struct cg_tenant b = make_tenant(s, "b");
    put_approval_budget(s, a.tenant_id, cg_storetest_scope("s1", "", ""), 1000, 1, T0);
    cr_assert_eq(request_at(s, a.tenant_id, cg_storetest_scope("s1", "", ""), 2, 1500, T0, &A),
                 CG_APPROVAL_OPENED);
    struct cg_err err;
    bool replayed;
    cr_assert_eq(cg_store_approval_get(s, b.tenant_id, A.approval_id, T0, &B, &err), CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "approval_id") != NULL, "%s", err.msg);
    cr_assert_eq(
        resolve_at(s, b.tenant_id, A.approval_id, CG_APPROVAL_APPROVED, 0, T0, &B, &replayed, &err),
        CG_NOT_FOUND);
    cr_assert_eq(cg_store_approval_get(s, a.tenant_id, "not-a-uuid", T0, &B, &err), CG_NOT_FOUND);
    cr_assert_eq(resolve_at(s, a.tenant_id, A.approval_id, 4, 0, T0, &B, &replayed, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "decision") != NULL, "%s", err.msg);
    cr_assert_eq(
        resolve_at(s, a.tenant_id, A.approval_id, CG_APPROVAL_DENIED, 5, T0, &B, &replayed, &err),
        CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "granted_tokens") != NULL, "%s", err.msg);
    cg_store_free(s);
}

/* ---- concurrency: N requests of one scope over one APPROVAL limit, each in its own store. */

#define RACERS 8

struct racer {
    const char *tenant_id;
    pthread_barrier_t *barrier;
    cg_approval_outcome outcome;
    char approval_id[CG_UUID_LEN + 1];
    cg_status rc;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    struct cg_store *s = test_store();
    struct cg_approval *out = calloc(1, sizeof *out);
    struct cg_approval *request = calloc(1, sizeof *request);
    request->requested_tokens = 1500;
    struct cg_scope_ids ids = cg_storetest_scope("s1", "t1", "");
    struct cg_err err;
    struct cg_budget_row path[4];
    int n = 0;
    pthread_barrier_wait(r->barrier);
    r->rc = cg_store_begin(s, &err);
    if (r->rc == CG_OK)
        r->rc = cg_store_path_read(s, r->tenant_id, &ids, true, false, T0, path, &n, &err);
    if (r->rc == CG_OK)
        r->rc = cg_store_approval_request(s, r->tenant_id, &ids, path, n, 1, request, 600000, T0,
                                          out, &r->outcome, &err);
    if (r->rc == CG_OK)
        r->rc = cg_store_commit(s, &err);
    else
        cg_store_rollback(s);
    memcpy(r->approval_id, out->approval_id, sizeof r->approval_id);
    free(out);
    free(request);
    cg_store_free(s);
    return NULL;
}

Test(approvals, concurrent_requests_over_one_limit_open_exactly_one_approval, .init = setup,
     .fini = teardown, .timeout = 60)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 1000, 1, T0);
    put_approval_budget(s, t.tenant_id, cg_storetest_scope("s1", "t1", ""), 1000, 1, T0);
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, RACERS);
    struct racer racers[RACERS];
    pthread_t threads[RACERS];
    for (int i = 0; i < RACERS; i++) {
        racers[i] = (struct racer){.tenant_id = t.tenant_id, .barrier = &barrier};
        cr_assert_eq(pthread_create(&threads[i], NULL, race, &racers[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(threads[i], NULL);
    int opened = 0;
    for (int i = 0; i < RACERS; i++) {
        cr_assert_eq(racers[i].rc, CG_OK, "racer %d: %s", i, cg_status_name(racers[i].rc));
        opened += racers[i].outcome == CG_APPROVAL_OPENED;
        cr_assert_str_eq(racers[i].approval_id, racers[0].approval_id, "all share one approval");
    }
    cr_assert_eq(opened, 1);
    PGconn *admin = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(admin, "SELECT count(*) FROM approvals", NULL), 1);
    PQfinish(admin);
    pthread_barrier_destroy(&barrier);
    cg_store_free(s);
}

/* test_scopes_store.c - store.h "scopes: close, usage tree, listing" against a real
 * PostgreSQL: closing a subtree releases its reservations on every level, idempotently and
 * without deadlocks against concurrent Commits; the usage tree; keyset paging.
 *
 * Each test gets its own schema (tests/support/pgtest.h). What was stored is checked through
 * a separate administrative connection, never through the store under test.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "pgtest.h"
#include "storetest.h"
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

/* SetBudget's store steps: a HARD budget of limit tokens on ids (created when new). */
static void set_budget(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                       int64_t limit)
{
    struct cg_budget_row row, path[4], stored;
    memset(&row, 0, sizeof row);
    row.ids = ids;
    row.has_budget = true;
    row.mode = 1;
    row.limit_tokens = limit;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = 1;
    row.reservation_ttl_ms = 300000;
    struct cg_err err;
    int n = 0;
    bool created = false;
    cr_assert_eq(cg_store_begin(s, &err), CG_OK, "%s", err.msg);
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, true, cg_wall_ms(), path, &n, &err);
    if (rc == CG_OK)
        rc = cg_store_budget_put(s, tenant_id, &row, 0, "", cg_wall_ms(), NULL, &stored, &created,
                                 &err);
    if (rc == CG_OK)
        rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_OK, "set_budget: %s %s", cg_status_name(rc), err.msg);
}

/* Reserve's store steps: hold tokens on the path of ids. Returns the reservation. */
static struct cg_reservation reserve(struct cg_store *s, const char *tenant_id,
                                     struct cg_scope_ids ids, int64_t tokens, uint32_t ttl_ms)
{
    struct cg_budget_row path[4];
    struct cg_reservation res;
    struct cg_err err;
    int n = 0;
    cr_assert_eq(cg_store_begin(s, &err), CG_OK, "%s", err.msg);
    cg_status rc =
        cg_store_path_read(s, tenant_id, &ids, true, false, cg_wall_ms(), path, &n, &err);
    if (rc == CG_OK)
        rc = cg_store_path_add(s, tenant_id, path, n, 0, tokens, 0, 0, &err);
    if (rc == CG_OK)
        rc = cg_store_reservation_insert(s, tenant_id, &ids, tokens, 0, "m", "", "", ttl_ms, &res,
                                         &err);
    if (rc == CG_OK)
        rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_OK, "reserve: %s %s", cg_status_name(rc), err.msg);
    return res;
}

/* Commit's store steps (reservation row first, then the path). Returns whether the
 * reservation was still ACTIVE and is now committed with `spent` input tokens; a
 * reservation that a close released is left alone (rolled back, nothing recorded). */
static bool commit_reservation(struct cg_store *s, const char *tenant_id, const char *rid,
                               int64_t spent, cg_status *failure)
{
    struct cg_reservation res;
    struct cg_budget_row path[4];
    struct cg_usage usage = {.input_tokens = spent};
    struct cg_err err;
    char entry[CG_UUID_LEN + 1];
    int n = 0;
    *failure = CG_OK;
    cg_status rc = cg_store_begin(s, &err);
    if (rc == CG_OK)
        rc = cg_store_reservation_lock(s, tenant_id, rid, &res, &err);
    if (rc == CG_OK && res.state != 1) {
        cg_store_rollback(s);
        return false;
    }
    if (rc == CG_OK)
        rc = cg_store_path_read(s, tenant_id, &res.ids, true, false, cg_wall_ms(), path, &n, &err);
    if (rc == CG_OK)
        rc = cg_store_path_add(s, tenant_id, path, n, spent, -res.tokens, 0, 0, &err);
    if (rc == CG_OK)
        rc = cg_store_reservation_settle(s, tenant_id, rid, 2, &usage, &err);
    if (rc == CG_OK)
        rc =
            cg_store_ledger_append(s, tenant_id, &res.ids, &usage, "m", "", rid, entry, NULL, &err);
    if (rc == CG_OK)
        rc = cg_store_commit(s, &err);
    if (rc != CG_OK) {
        cg_store_rollback(s);
        *failure = rc;
        return false;
    }
    return true;
}

static long long admin_int(PGconn *db, const char *sql, const char *param)
{
    return cg_pgtest_query_int(db, sql, param);
}

/* reserved_tokens of one scope row, through the admin connection. */
static long long reserved_of(PGconn *db, const char *tenant_id, const char *s, const char *t,
                             const char *a)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid AND session_id = '%s'"
             " AND task_id = '%s' AND agent_id = '%s'",
             s, t, a);
    return admin_int(db, sql, tenant_id);
}

/* A tenant with budgets on tenant -> s1 -> {t1 -> {a1, a2}, t2}. */
static struct cg_tenant make_tree(struct cg_store *s)
{
    struct cg_tenant t = make_tenant(s, "scopes");
    set_budget(s, t.tenant_id, cg_storetest_scope("", "", ""), 100000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s1", "", ""), 10000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s1", "t1", ""), 5000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s1", "t1", "a1"), 1000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s1", "t1", "a2"), 1000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s1", "t2", ""), 5000);
    return t;
}

/* ------------------------------------------------------------------ close --- */

Test(scopes_store, close_releases_the_subtree_on_every_level_and_closes_descendants, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tree(s);
    (void)reserve(s, t.tenant_id, cg_storetest_scope("s1", "t1", "a1"), 100, 600000);
    (void)reserve(s, t.tenant_id, cg_storetest_scope("s1", "t1", "a2"), 30, 600000);
    (void)reserve(s, t.tenant_id, cg_storetest_scope("s1", "t1", ""), 7, 600000);
    (void)reserve(s, t.tenant_id, cg_storetest_scope("s1", "t2", ""), 50, 600000);

    struct cg_scope_close out;
    struct cg_err err;
    struct cg_scope_ids task = cg_storetest_scope("s1", "t1", "");
    cg_status rc = cg_store_scope_close(s, t.tenant_id, &task, &out, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(out.released_reservations, 3);
    cr_assert_eq(out.released_tokens, 137);
    cr_assert_eq(out.closed_scopes, 3, "the task and its two agents");
    cr_assert_not(out.already_closed);
    cr_assert_eq(out.usage.row.level, 3);
    cr_assert_neq(out.usage.row.closed_at_ms, 0);
    cr_assert_eq(out.usage.row.reserved_tokens, 0);
    cr_assert_eq(out.usage.open_reservations, 0);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(reserved_of(db, t.tenant_id, "", "", ""), 50, "t2's hold stays");
    cr_assert_eq(reserved_of(db, t.tenant_id, "s1", "", ""), 50);
    cr_assert_eq(reserved_of(db, t.tenant_id, "s1", "t1", ""), 0);
    cr_assert_eq(reserved_of(db, t.tenant_id, "s1", "t1", "a1"), 0);
    cr_assert_eq(reserved_of(db, t.tenant_id, "s1", "t2", ""), 50);
    cr_assert_eq(admin_int(db,
                           "SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid"
                           " AND closed_at IS NOT NULL",
                           t.tenant_id),
                 3);
    cr_assert_eq(admin_int(db,
                           "SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid"
                           " AND state = 3",
                           t.tenant_id),
                 3);
    cr_assert_eq(admin_int(db,
                           "SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid"
                           " AND state = 1 AND task_id = 't2'",
                           t.tenant_id),
                 1);

    /* Again: nothing more to do. */
    rc = cg_store_scope_close(s, t.tenant_id, &task, &out, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert(out.already_closed);
    cr_assert_eq(out.released_reservations, 0);
    cr_assert_eq(out.released_tokens, 0);
    cr_assert_eq(out.closed_scopes, 0);

    /* Closing the session closes t2 and releases its hold; t1 keeps its closed_at. */
    long long t1_closed = admin_int(db,
                                    "SELECT (extract(epoch FROM closed_at) * 1000000)::int8 FROM"
                                    " scopes WHERE tenant_id = $1::uuid AND task_id = 't1'"
                                    " AND agent_id = ''",
                                    t.tenant_id);
    struct cg_scope_ids session = cg_storetest_scope("s1", "", "");
    rc = cg_store_scope_close(s, t.tenant_id, &session, &out, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(out.closed_scopes, 2, "the session and t2");
    cr_assert_eq(out.released_tokens, 50);
    cr_assert_eq(reserved_of(db, t.tenant_id, "", "", ""), 0);
    cr_assert_eq(admin_int(db,
                           "SELECT (extract(epoch FROM closed_at) * 1000000)::int8 FROM"
                           " scopes WHERE tenant_id = $1::uuid AND task_id = 't1'"
                           " AND agent_id = ''",
                           t.tenant_id),
                 t1_closed);
    PQfinish(db);
    cg_store_free(s);
}

Test(scopes_store, close_settles_an_expired_hold_as_expired, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tree(s);
    struct cg_reservation res =
        reserve(s, t.tenant_id, cg_storetest_scope("s1", "t2", ""), 40, 1000);
    PGconn *db = cg_pgtest_connect(&T);
    /* Age it past its expiry instead of waiting. */
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE reservations SET expires_at = now() - interval '1 second',"
             " created_at = now() - interval '2 seconds' WHERE reservation_id = '%s'",
             res.reservation_id);
    cg_pgtest_exec(db, sql);

    struct cg_scope_close out;
    struct cg_err err;
    struct cg_scope_ids task = cg_storetest_scope("s1", "t2", "");
    cg_status rc = cg_store_scope_close(s, t.tenant_id, &task, &out, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(out.released_reservations, 1);
    cr_assert_eq(out.released_tokens, 40);
    cr_assert_eq(reserved_of(db, t.tenant_id, "", "", ""), 0);
    cr_assert_eq(admin_int(db, "SELECT state FROM reservations WHERE reservation_id = $1::uuid",
                           res.reservation_id),
                 4);
    PQfinish(db);
    cg_store_free(s);
}

Test(scopes_store, close_refuses_the_tenant_and_unknown_or_foreign_scopes, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant a = make_tree(s);
    struct cg_tenant b = make_tenant(s, "other");
    struct cg_scope_close out;
    struct cg_err err;

    struct cg_scope_ids tenant = cg_storetest_scope("", "", "");
    cr_assert_eq(cg_store_scope_close(s, a.tenant_id, &tenant, &out, &err), CG_INVALID_ARGUMENT);
    cr_assert(strncmp(err.msg, "scope", 5) == 0, "%s", err.msg);

    struct cg_scope_ids unknown_task = cg_storetest_scope("s1", "nope", "");
    cr_assert_eq(cg_store_scope_close(s, a.tenant_id, &unknown_task, &out, &err), CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "scope.task_id") != NULL, "%s", err.msg);

    struct cg_scope_ids session = cg_storetest_scope("s1", "", "");
    cr_assert_eq(cg_store_scope_close(s, b.tenant_id, &session, &out, &err), CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "scope.session_id") != NULL, "%s", err.msg);

    struct cg_scope_ids orphan = cg_storetest_scope("", "t1", "");
    cr_assert_eq(cg_store_scope_close(s, a.tenant_id, &orphan, &out, &err), CG_INVALID_ARGUMENT);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(admin_int(db, "SELECT count(*) FROM scopes WHERE closed_at IS NOT NULL", NULL), 0,
                 "nothing was closed");
    PQfinish(db);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ concurrency --- */

#define COMMITTERS 8
#define HOLDS_PER_COMMITTER 25
#define HOLD_TOKENS 10
#define SPENT_TOKENS 7

struct committer {
    pthread_barrier_t *start;
    const char *tenant_id;
    char rids[HOLDS_PER_COMMITTER][CG_UUID_LEN + 1];
    int committed;
    int failures;
    cg_status first_failure;
};

static void *commit_thread(void *arg)
{
    struct committer *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    pthread_barrier_wait(job->start);
    for (int i = 0; s != NULL && i < HOLDS_PER_COMMITTER; i++) {
        cg_status failure;
        if (commit_reservation(s, job->tenant_id, job->rids[i], SPENT_TOKENS, &failure))
            job->committed++;
        else if (failure != CG_OK && job->failures++ == 0)
            job->first_failure = failure;
    }
    if (s == NULL)
        job->failures++;
    cg_store_free(s);
    return NULL;
}

struct closer {
    pthread_barrier_t *start;
    const char *tenant_id;
    cg_status rc;
    struct cg_scope_close out;
    char msg[CG_ERR_MSG_MAX];
};

static void *close_thread(void *arg)
{
    struct closer *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    pthread_barrier_wait(job->start);
    /* Let some commits land first, then close in the middle of the rest. */
    int64_t deadline = cg_mono_ms() + 10000;
    PGconn *db = cg_pgtest_connect(&T);
    while (cg_mono_ms() < deadline &&
           cg_pgtest_query_int(db,
                               "SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid"
                               " AND state = 2",
                               job->tenant_id) < COMMITTERS * 2)
        ;
    PQfinish(db);
    struct cg_err err;
    struct cg_scope_ids session = cg_storetest_scope("s1", "", "");
    job->rc = s ? cg_store_scope_close(s, job->tenant_id, &session, &job->out, &err) : CG_NOMEM;
    snprintf(job->msg, sizeof job->msg, "%s", job->rc == CG_OK ? "" : err.msg);
    cg_store_free(s);
    return NULL;
}

Test(scopes_store, closing_a_session_while_its_task_commits_loses_nothing, .init = setup,
     .fini = teardown, .timeout = 120)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tree(s);
    struct cg_scope_ids task = cg_storetest_scope("s1", "t1", "");
    static struct committer jobs[COMMITTERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, COMMITTERS + 1);
    for (int i = 0; i < COMMITTERS; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].start = &start;
        jobs[i].tenant_id = t.tenant_id;
        for (int j = 0; j < HOLDS_PER_COMMITTER; j++) {
            struct cg_scope_ids where =
                j % 2 ? cg_storetest_scope("s1", "t1", i % 2 ? "a1" : "a2") : task;
            struct cg_reservation res = reserve(s, t.tenant_id, where, HOLD_TOKENS, 600000);
            snprintf(jobs[i].rids[j], sizeof jobs[i].rids[j], "%s", res.reservation_id);
        }
    }
    struct closer closer = {.start = &start, .tenant_id = t.tenant_id};
    pthread_t threads[COMMITTERS], close_tid;
    for (int i = 0; i < COMMITTERS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, commit_thread, &jobs[i]), 0);
    cr_assert_eq(pthread_create(&close_tid, NULL, close_thread, &closer), 0);
    for (int i = 0; i < COMMITTERS; i++)
        pthread_join(threads[i], NULL);
    pthread_join(close_tid, NULL);
    pthread_barrier_destroy(&start);

    cr_assert_eq(closer.rc, CG_OK, "close: %s %s", cg_status_name(closer.rc), closer.msg);
    int committed = 0;
    for (int i = 0; i < COMMITTERS; i++) {
        cr_assert_eq(jobs[i].failures, 0, "committer %d: %s", i,
                     cg_status_name(jobs[i].first_failure));
        committed += jobs[i].committed;
    }
    int total = COMMITTERS * HOLDS_PER_COMMITTER;
    cr_log_info("close released %u holds; %d were committed", closer.out.released_reservations,
                committed);
    cr_assert_eq((int)closer.out.released_reservations + committed, total,
                 "every hold is either committed or released: %u released, %d committed",
                 closer.out.released_reservations, committed);
    cr_assert_eq(closer.out.released_tokens,
                 (int64_t)closer.out.released_reservations * HOLD_TOKENS);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(admin_int(db,
                           "SELECT coalesce(sum(reserved_tokens), 0) FROM scopes"
                           " WHERE tenant_id = $1::uuid",
                           t.tenant_id),
                 0, "no tokens stay reserved anywhere");
    cr_assert_eq(admin_int(db,
                           "SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid"
                           " AND state = 1",
                           t.tenant_id),
                 0);
    cr_assert_eq(reserved_of(db, t.tenant_id, "", "", ""), 0);
    cr_assert_eq(admin_int(db,
                           "SELECT used_tokens FROM scopes WHERE tenant_id = $1::uuid"
                           " AND session_id = 's1' AND task_id = ''",
                           t.tenant_id),
                 (long long)committed * SPENT_TOKENS, "every commit counted once");
    cr_assert_eq(
        admin_int(db, "SELECT count(*) FROM ledger WHERE tenant_id = $1::uuid", t.tenant_id),
        committed);
    PQfinish(db);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ usage tree --- */

Test(scopes_store, the_usage_tree_has_the_path_children_and_counts, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tree(s);
    (void)reserve(s, t.tenant_id, cg_storetest_scope("s1", "t1", "a1"), 100, 600000);
    struct cg_usage_tree tree;
    struct cg_err err;

    struct cg_scope_ids session = cg_storetest_scope("s1", "", "");
    cg_status rc = cg_store_usage_tree(s, t.tenant_id, &session, 3, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(tree.npath, 2);
    cr_assert_eq(tree.path[0].level, 1);
    cr_assert_eq(tree.path[0].reserved_tokens, 100);
    cr_assert_eq(tree.count, 5, "s1, t1, t2, a1, a2");
    cr_assert_str_eq(tree.nodes[0].row.ids.session_id, "s1");
    cr_assert_eq(tree.nodes[0].child_count, 2);
    cr_assert_eq(tree.nodes[0].nchildren, 2);
    cr_assert_eq(tree.nodes[0].open_reservations, 1);
    cr_assert_str_eq(tree.nodes[1].row.ids.task_id, "t1", "oldest first");
    cr_assert_str_eq(tree.nodes[2].row.ids.task_id, "t2");
    cr_assert_eq(tree.nodes[3].parent, 1);
    cr_assert_str_eq(tree.nodes[3].row.ids.agent_id, "a1");
    cr_assert_eq(tree.nodes[3].row.reserved_tokens, 100);
    cr_assert_eq(tree.nodes[4].parent, 1);
    cr_assert_not(tree.truncated);
    cg_usage_tree_cleanup(&tree);

    /* One child per node; depth 0 is the root alone. */
    rc = cg_store_usage_tree(s, t.tenant_id, &session, 3, 1, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(tree.count, 3, "s1, t1, a1");
    cg_usage_tree_cleanup(&tree);
    rc = cg_store_usage_tree(s, t.tenant_id, &session, 0, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(tree.count, 1);
    cg_usage_tree_cleanup(&tree);

    /* Closed children only when asked for. */
    struct cg_scope_ids t2 = cg_storetest_scope("s1", "t2", "");
    struct cg_scope_close closed;
    cr_assert_eq(cg_store_scope_close(s, t.tenant_id, &t2, &closed, &err), CG_OK, "%s", err.msg);
    rc = cg_store_usage_tree(s, t.tenant_id, &session, 1, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(tree.count, 2);
    cr_assert_eq(tree.nodes[0].child_count, 1);
    cg_usage_tree_cleanup(&tree);
    rc = cg_store_usage_tree(s, t.tenant_id, &session, 1, 100, true, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(tree.count, 3);
    cr_assert_eq(tree.nodes[0].child_count, 2);
    cg_usage_tree_cleanup(&tree);

    /* The tenant of a new tenant exists, empty; its sessions do not. */
    struct cg_tenant fresh = make_tenant(s, "fresh");
    struct cg_scope_ids root = cg_storetest_scope("", "", "");
    rc = cg_store_usage_tree(s, fresh.tenant_id, &root, 3, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert_eq(tree.count, 1);
    cr_assert_not(tree.nodes[0].row.has_budget);
    cg_usage_tree_cleanup(&tree);
    rc = cg_store_usage_tree(s, fresh.tenant_id, &session, 3, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "scope.session_id") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_usage_tree(s, t.tenant_id, &session, 4, 100, false, &tree, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "depth") != NULL, "%s", err.msg);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ listing --- */

/* Pages through the listing with `limit` per page; ids of the deepest level into names. */
static int list_all(struct cg_store *s, const char *tenant_id, struct cg_scope_ids parent,
                    int level, bool include_closed, int order, int limit, char names[][16], int max)
{
    struct cg_scope_usage *page = calloc((size_t)limit, sizeof *page);
    cr_assert(page != NULL);
    struct cg_scope_cursor cursor, next;
    bool has_cursor = false, more = true;
    int total = 0;
    for (int pages = 0; more && pages < 100; pages++) {
        int count = 0;
        struct cg_err err;
        cg_status rc = cg_store_scope_list(s, tenant_id, &parent, level, include_closed, order,
                                           has_cursor ? &cursor : NULL, limit, page, &count, &more,
                                           &next, &err);
        cr_assert_eq(rc, CG_OK, "list: %s %s", cg_status_name(rc), err.msg);
        for (int i = 0; i < count && total < max; i++) {
            const struct cg_scope_ids *ids = &page[i].row.ids;
            snprintf(names[total++], 16, "%.15s",
                     ids->agent_id[0]  ? ids->agent_id
                     : ids->task_id[0] ? ids->task_id
                                       : ids->session_id);
        }
        cursor = next;
        has_cursor = true;
    }
    free(page);
    return total;
}

Test(scopes_store, listing_pages_by_creation_and_by_use, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "lister");
    set_budget(s, t.tenant_id, cg_storetest_scope("", "", ""), 1000000);
    set_budget(s, t.tenant_id, cg_storetest_scope("s", "", ""), 100000);
    char id[16];
    for (int i = 0; i < 7; i++) {
        snprintf(id, sizeof id, "t%d", i);
        set_budget(s, t.tenant_id, cg_storetest_scope("s", id, ""), 10000);
        set_budget(s, t.tenant_id, cg_storetest_scope("s", id, "a"), 1000);
    }
    /* Used tokens: t3 most, then t5; the rest none. */
    PGconn *db = cg_pgtest_connect(&T);
    cg_pgtest_exec(db,
                   "UPDATE scopes SET used_tokens = 500 WHERE task_id = 't3' AND agent_id = ''");
    cg_pgtest_exec(db,
                   "UPDATE scopes SET used_tokens = 200 WHERE task_id = 't5' AND agent_id = ''");
    PQfinish(db);

    char names[32][16];
    struct cg_scope_ids session = cg_storetest_scope("s", "", "");
    int n = list_all(s, t.tenant_id, session, 3, false, 1, 3, names, 32);
    cr_assert_eq(n, 7);
    for (int i = 0; i < 7; i++) {
        snprintf(id, sizeof id, "t%d", i);
        cr_assert_str_eq(names[i], id, "page order at %d", i);
    }
    n = list_all(s, t.tenant_id, session, 3, false, 3, 2, names, 32);
    cr_assert_eq(n, 7);
    cr_assert_str_eq(names[0], "t3");
    cr_assert_str_eq(names[1], "t5");
    cr_assert_str_eq(names[2], "t0", "then oldest first");

    /* Every agent of the session, one level further down; closed ones only when asked. */
    struct cg_scope_ids t1 = cg_storetest_scope("s", "t1", "");
    struct cg_scope_close closed;
    struct cg_err err;
    cr_assert_eq(cg_store_scope_close(s, t.tenant_id, &t1, &closed, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(list_all(s, t.tenant_id, session, 4, false, 1, 100, names, 32), 6);
    cr_assert_eq(list_all(s, t.tenant_id, session, 4, true, 1, 100, names, 32), 7);
    cr_assert_eq(
        list_all(s, t.tenant_id, cg_storetest_scope("", "", ""), 2, false, 1, 100, names, 32), 1);

    /* Bad arguments name themselves; a foreign or unknown parent is not found. */
    struct cg_scope_usage page[2];
    int count = 0;
    bool more = false;
    struct cg_scope_cursor next;
    cr_assert_eq(cg_store_scope_list(s, t.tenant_id, &session, 2, false, 1, NULL, 2, page, &count,
                                     &more, &next, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "level") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_scope_list(s, t.tenant_id, &session, 3, false, 4, NULL, 2, page, &count,
                                     &more, &next, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "order") != NULL, "%s", err.msg);
    struct cg_tenant other = make_tenant(s, "other");
    cr_assert_eq(cg_store_scope_list(s, other.tenant_id, &session, 3, false, 1, NULL, 2, page,
                                     &count, &more, &next, &err),
                 CG_NOT_FOUND);
    cr_assert_eq(cg_store_scope_list(s, other.tenant_id, &(struct cg_scope_ids){0}, 2, false, 1,
                                     NULL, 2, page, &count, &more, &next, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(count, 0, "another tenant sees none of them");
    cg_store_free(s);
}

Test(scopes_store, a_due_tenant_reset_reads_as_the_new_period, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tree(s);
    PGconn *db = cg_pgtest_connect(&T);
    /* A daily tenant budget with usage, whose period ended a minute ago and was not reset. */
    cg_pgtest_exec(db, "UPDATE scopes SET reset_period = 2, used_tokens = 700,"
                       " period_start = now() - interval '1 day 1 minute',"
                       " next_reset_at = now() - interval '1 minute' WHERE level = 1");
    struct cg_usage_tree tree;
    struct cg_err err;
    struct cg_scope_ids root = cg_storetest_scope("", "", "");
    cg_status rc = cg_store_usage_tree(s, t.tenant_id, &root, 0, 100, false, &tree, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(tree.nodes[0].row.used_tokens, 0, "the new period has spent nothing");
    cr_assert_gt(tree.nodes[0].row.next_reset_ms, cg_wall_ms());
    cr_assert_leq(tree.nodes[0].row.period_start_ms, cg_wall_ms());
    cg_usage_tree_cleanup(&tree);
    cr_assert_eq(admin_int(db, "SELECT used_tokens FROM scopes WHERE level = 1", NULL), 700,
                 "a read writes nothing");
    PQfinish(db);
    cg_store_free(s);
}

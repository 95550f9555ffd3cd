/* test_pg_session.c - the store's PostgreSQL session after a statement failed: the prepared
 * statements it believes it has are the ones the session has, so the calls after a
 * statement timeout (a row locked by another session, PostgreSQL frozen, ...) succeed,
 * and never fail with INTERNAL ("prepared statement ... already exists").
 */
#include <criterion/criterion.h>

#include <string.h>

#include "base/clock.h"
#include "pgtest.h"
#include "store/store.h"
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

/* A store whose statements time out after 300 ms. */
static struct cg_store *quick_store(void)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    opts.pg_statement_timeout_ms = 300;
    struct cg_store *s = cg_store_new(&opts);
    cr_assert(s != NULL, "cg_store_new failed");
    return s;
}

/* Begins a transaction and reads (with lock) the tenant's path: the transaction's first
 * statement, which carries its BEGIN and, the first time on a connection, its PREPARE.
 * Rolls back. Returns the status, err filled. */
static cg_status locked_read(struct cg_store *s, const char *tenant_id, struct cg_err *err)
{
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    struct cg_budget_row rows[4];
    int n = 0;
    cg_status rc = cg_store_begin(s, err);
    if (rc == CG_OK)
        rc = cg_store_path_read(s, tenant_id, &ids, true, false, cg_wall_ms(), rows, &n, err);
    cg_store_rollback(s);
    return rc;
}

/* Locks the row the path read locks from the locker's session (its transaction left open
 * until the caller's ROLLBACK). */
static void lock_tenant_row(PGconn *locker, const char *tenant_id)
{
    cg_pgtest_exec(locker, "BEGIN");
    cr_assert_eq(cg_pgtest_query_int(locker,
                                     "SELECT count(*) FROM (SELECT 1 FROM scopes WHERE tenant_id ="
                                     " $1::uuid AND level = 1 FOR UPDATE) AS locked",
                                     tenant_id),
                 1, "the tenant row is locked");
}

Test(pg_session, the_calls_after_a_statement_timeout_succeed, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *setup_store = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(setup_store, "timeouts", NULL);
    struct cg_err err;
    /* The tenant's row exists before the lock (a first use would insert it). */
    struct cg_budget_row row = cg_storetest_budget("", "", "", 1000000);
    (void)cg_storetest_put(setup_store, t.tenant_id, &row);
    cg_store_free(setup_store);

    /* A new connection: its first transaction prepares the path read in the same round
     * trip as the BEGIN; the PREPARE succeeds, the read waits on the lock and times out. */
    struct cg_store *s = quick_store();
    PGconn *locker = cg_pgtest_connect(&T);
    lock_tenant_row(locker, t.tenant_id);
    cg_status rc = locked_read(s, t.tenant_id, &err);
    cr_assert(rc == CG_DEADLINE_EXCEEDED || rc == CG_UNAVAILABLE,
              "a statement timeout is DEADLINE_EXCEEDED or UNAVAILABLE, got %s %s",
              cg_status_name(rc), err.msg);
    cg_pgtest_exec(locker, "ROLLBACK");

    /* The next calls on the same store succeed: no "already exists", no INTERNAL. */
    for (int i = 0; i < 3; i++) {
        rc = locked_read(s, t.tenant_id, &err);
        cr_assert_eq(rc, CG_OK, "call %d after the timeout: %s %s", i + 1, cg_status_name(rc),
                     err.msg);
    }

    /* And again with the statement already prepared: a timeout then a success. */
    lock_tenant_row(locker, t.tenant_id);
    rc = locked_read(s, t.tenant_id, &err);
    cr_assert(rc == CG_DEADLINE_EXCEEDED || rc == CG_UNAVAILABLE, "%s %s", cg_status_name(rc),
              err.msg);
    cg_pgtest_exec(locker, "ROLLBACK");
    rc = locked_read(s, t.tenant_id, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_eq(cg_store_ping(s, &err), CG_OK, "%s", err.msg);

    PQfinish(locker);
    cg_store_free(s);
}

/* test_pg_commit.c - the store's COMMIT, which carries the NOTIFY of the transaction's
 * events in the same round trip (store_pg.c commit_notify): a COMMIT that fails (here a
 * deferred constraint trigger that raises at commit) is reported as a failure, its events
 * are neither stored nor announced, and the commits after it announce theirs (the
 * PREPARE of the NOTIFY skipped with the failed COMMIT is not counted as prepared).
 */
#include <criterion/criterion.h>

#include <poll.h>
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

/* Makes every transaction that stored an event of session "doomed" fail at its COMMIT. */
static void doom_at_commit(PGconn *admin)
{
    cg_pgtest_exec(admin, "CREATE FUNCTION cg_test_fail_at_commit() RETURNS trigger"
                          " LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'doomed at commit';"
                          " END$$");
    cg_pgtest_exec(admin, "CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON scope_events"
                          " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW"
                          " WHEN (NEW.session_id = 'doomed')"
                          " EXECUTE FUNCTION cg_test_fail_at_commit()");
}

/* One transaction that appends a USAGE_CHANGED event to the session's scope; returns the
 * COMMIT's status. */
static cg_status append_and_commit(struct cg_store *s, const char *tenant_id, const char *session,
                                   struct cg_err *err)
{
    struct cg_scope_ids ids = cg_storetest_scope(session, "", "");
    cg_storetest_begin(s);
    cg_status rc =
        cg_store_event_append(s, tenant_id, &ids, 2 /* USAGE_CHANGED */, NULL, cg_wall_ms(), err);
    cr_assert_eq(rc, CG_OK, "event_append: %s %s", cg_status_name(rc), err->msg);
    rc = cg_store_commit(s, err);
    if (rc != CG_OK)
        cg_store_rollback(s);
    return rc;
}

/* Waits (10 s at most: a loaded machine) for the listener's next cg_events notification
 * about tenant_id and copies its session id into session. Fails the test on a timeout. */
static void next_session_announced(PGconn *listener, const char *tenant_id, char *session,
                                   size_t cap)
{
    int64_t until = cg_mono_ms() + 10000;
    for (;;) {
        PGnotify *n;
        while ((n = PQnotifies(listener)) != NULL) {
            /* "<tenant> <seq> <session> <task> <agent>"; other tests' tenants are skipped. */
            bool ours = strcmp(n->relname, "cg_events") == 0 &&
                        strncmp(n->extra, tenant_id, strlen(tenant_id)) == 0;
            const char *p = ours ? strchr(n->extra, ' ') : NULL;
            p = p != NULL ? strchr(p + 1, ' ') : NULL;
            if (p != NULL) {
                const char *end = strchr(p + 1, ' ');
                size_t len = end != NULL ? (size_t)(end - p - 1) : strlen(p + 1);
                cr_assert_lt(len, cap);
                memcpy(session, p + 1, len);
                session[len] = '\0';
                PQfreemem(n);
                return;
            }
            PQfreemem(n);
        }
        int64_t left = until - cg_mono_ms();
        cr_assert_gt(left, 0, "no notification about the tenant within 10 s");
        struct pollfd pfd = {.fd = PQsocket(listener), .events = POLLIN};
        (void)poll(&pfd, 1, (int)left);
        cr_assert(PQconsumeInput(listener), "listener: %s", PQerrorMessage(listener));
    }
}

Test(pg_commit, a_failed_commit_is_reported_and_not_announced, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(s, "commit", NULL);
    struct cg_budget_row row = cg_storetest_budget("", "", "", 1000000);
    (void)cg_storetest_put(s, t.tenant_id, &row);
    row = cg_storetest_budget("doomed", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &row);
    row = cg_storetest_budget("fine", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &row);
    PGconn *admin = cg_pgtest_connect(&T);
    doom_at_commit(admin);
    /* The puts' own notifications come before the LISTEN: not seen. */
    PGconn *listener = cg_pgtest_connect(&T);
    cg_pgtest_exec(listener, "LISTEN cg_events");

    /* Twice: first on a store whose connection has not prepared the NOTIFY yet (its PREPARE
     * travels with the failing COMMIT and is skipped), then with it prepared. */
    struct cg_store *fresh = cg_storetest_store(&T);
    for (int round = 0; round < 2; round++) {
        struct cg_err err;
        cg_status rc = append_and_commit(fresh, t.tenant_id, "doomed", &err);
        cr_assert_eq(rc, CG_INTERNAL, "round %d: a COMMIT that fails is INTERNAL, got %s %s", round,
                     cg_status_name(rc), err.msg);
        rc = append_and_commit(fresh, t.tenant_id, "fine", &err);
        cr_assert_eq(rc, CG_OK, "round %d: %s %s", round, cg_status_name(rc), err.msg);
        /* Notifications arrive in commit order: a NOTIFY of the failed transaction would
         * come before the committed one's. */
        char session[64];
        next_session_announced(listener, t.tenant_id, session, sizeof session);
        cr_assert_str_eq(session, "fine", "round %d: announced %s before the committed one", round,
                         session);
    }
    cr_assert_eq(cg_pgtest_query_int(
                     admin, "SELECT count(*) FROM scope_events WHERE session_id = 'doomed'", NULL),
                 0, "the failed transactions stored no event");
    cr_assert_eq(cg_pgtest_query_int(admin,
                                     "SELECT count(*) FROM scope_events WHERE session_id = 'fine'"
                                     " AND type = 2",
                                     NULL),
                 2, "the committed ones did");
    struct cg_err err;
    cr_assert_eq(cg_store_ping(fresh, &err), CG_OK, "%s", err.msg);

    PQfinish(listener);
    PQfinish(admin);
    cg_store_free(fresh);
    cg_store_free(s);
}

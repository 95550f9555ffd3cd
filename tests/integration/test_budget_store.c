/* test_budget_store.c - the budget side of the store (store.h, "budgets (scopes)") against a
 * real PostgreSQL: paths, budgets and versions, counters, reservations, the ledger, and
 * transactions under concurrency and failure.
 *
 * Each test gets its own schema (tests/support/pgtest.h). Checks of what was stored go
 * through a separate administrative connection, never through the store under test.
 */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Reads (with lock) the path to ids in a transaction the caller ends. */
static int read_path(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                     struct cg_budget_row rows[4])
{
    int n = -1;
    struct cg_err err;
    cg_status rc =
        cg_store_path_read(s, tenant_id, &ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    return n;
}

/* What the administrative connection sees, as one integer. */
static long long db_int(const char *sql, const char *param)
{
    PGconn *db = cg_pgtest_connect(&T);
    long long v = cg_pgtest_query_int(db, sql, param);
    PQfinish(db);
    return v;
}

static void sleep_ms(long ms)
{
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* ------------------------------------------------------------------ paths --- */

Test(budget_store, the_tenant_row_is_made_on_first_use_without_a_budget, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row rows[4];

    cg_storetest_begin(s);
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("", "", ""), rows), 1);
    cg_storetest_commit(s);
    cr_assert_eq(rows[0].level, 1);
    cr_assert_not(rows[0].has_budget);
    cr_assert_eq(rows[0].version, 0);
    cr_assert_eq(rows[0].used_tokens, 0);
    cr_assert_str_empty(rows[0].ids.session_id);
    cr_assert_gt(rows[0].created_at_ms, 0);

    /* A second read (also without a lock) finds the same row, and makes no other. */
    cg_storetest_begin(s);
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    int n = 0;
    struct cg_err err;
    cr_assert_eq(
        cg_store_path_read(s, t.tenant_id, &ids, false, false, cg_wall_ms(), rows, &n, &err), CG_OK,
        "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(n, 1);
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 1);
    cg_store_free(s);
}

Test(budget_store, put_then_read_a_whole_path, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");

    struct cg_budget_row session = cg_storetest_budget("s-1", "", "", 100000);
    session.mode = 2;
    session.limit_cost_micros = 5000000;
    session.warning_ratio = 0.75;
    session.ntiers = 3;
    session.tier_ratio[0] = 0.8;
    session.tier_ratio[1] = 0.85;
    session.tier_ratio[2] = 0.9 + 1.0 / 30.0; /* not short in decimal: must round-trip */
    session.tier_delay_ms[0] = 50;
    session.tier_delay_ms[1] = 300;
    session.tier_delay_ms[2] = 60000;
    session.on_store_failure = 3;
    session.local_allowance_tokens = 777;
    session.reservation_ttl_ms = 12345;
    snprintf(session.description, sizeof session.description, "nightly run — ünïcode");
    struct cg_budget_row stored = cg_storetest_put(s, t.tenant_id, &session);
    cr_assert_eq(stored.level, 2);
    cr_assert_eq(stored.version, 1);
    cr_assert_str_eq(stored.updated_by_key_id, "ci-key");

    struct cg_budget_row task = cg_storetest_budget("s-1", "t-1", "", 50000);
    task.mode = 3;
    task.backpressure_disabled = true;
    (void)cg_storetest_put(s, t.tenant_id, &task);
    struct cg_budget_row agent = cg_storetest_budget("s-1", "t-1", "a-1", 1000);
    agent.warning_ratio = 1;
    agent.on_store_failure = 2;
    (void)cg_storetest_put(s, t.tenant_id, &agent);

    struct cg_budget_row rows[4];
    cg_storetest_begin(s);
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), rows), 4);
    cg_storetest_commit(s);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rows[i].level, i + 1, "rows[%d] has level %d", i, rows[i].level);
    cr_assert_not(rows[0].has_budget);
    cr_assert_str_empty(rows[0].ids.session_id);

    const struct cg_budget_row *r = &rows[1];
    cr_assert_str_eq(r->ids.session_id, "s-1");
    cr_assert_str_empty(r->ids.task_id);
    cr_assert(r->has_budget);
    cr_assert_eq(r->mode, 2);
    cr_assert_eq(r->limit_tokens, 100000);
    cr_assert_eq(r->limit_cost_micros, 5000000);
    cr_assert_eq(r->warning_ratio, 0.75);
    cr_assert_not(r->backpressure_disabled);
    cr_assert_eq(r->ntiers, 3);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(r->tier_ratio[i], session.tier_ratio[i], "tier %d: %.17g", i,
                     r->tier_ratio[i]);
        cr_assert_eq(r->tier_delay_ms[i], session.tier_delay_ms[i]);
    }
    cr_assert_eq(r->on_store_failure, 3);
    cr_assert_eq(r->local_allowance_tokens, 777);
    cr_assert_eq(r->reset_period, 1);
    cr_assert_eq(r->reservation_ttl_ms, 12345);
    cr_assert_str_eq(r->description, "nightly run — ünïcode");
    cr_assert_eq(r->version, 1);
    cr_assert_eq(r->closed_at_ms, 0);
    cr_assert(r->created_at_ms > 0 && r->updated_at_ms >= r->created_at_ms);

    cr_assert_str_eq(rows[2].ids.task_id, "t-1");
    cr_assert_eq(rows[2].mode, 3);
    cr_assert(rows[2].backpressure_disabled);
    cr_assert_eq(rows[2].ntiers, 0);
    cr_assert_str_eq(rows[3].ids.agent_id, "a-1");
    cr_assert_eq(rows[3].limit_tokens, 1000);
    cr_assert_eq(rows[3].on_store_failure, 2);

    /* A shorter path reads only its own levels. */
    cg_storetest_begin(s);
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), rows), 2);
    cg_storetest_commit(s);
    cr_assert_str_eq(rows[1].ids.session_id, "s-1");
    cg_store_free(s);
}

static void expect_read_error(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                              bool allow_missing_last, cg_status want, const char *message)
{
    struct cg_budget_row rows[4];
    int n = -1;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, allow_missing_last, cg_wall_ms(),
                                      rows, &n, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, want, "%s/%s/%s: %s %s", ids.session_id, ids.task_id, ids.agent_id,
                 cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, message);
    cr_assert_eq(n, 0);
}

Test(budget_store, a_missing_level_is_not_found_naming_its_field, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);

    expect_read_error(s, t.tenant_id, cg_storetest_scope("nope", "", ""), false, CG_NOT_FOUND,
                      "scope.session_id: no such session");
    expect_read_error(s, t.tenant_id, cg_storetest_scope("nope", "t", ""), false, CG_NOT_FOUND,
                      "scope.session_id: no such session");
    expect_read_error(s, t.tenant_id, cg_storetest_scope("s", "t", ""), false, CG_NOT_FOUND,
                      "scope.task_id: no such task");
    expect_read_error(s, t.tenant_id, cg_storetest_scope("s", "t", "a"), false, CG_NOT_FOUND,
                      "scope.task_id: no such task");
    /* Only the last level may be missing, and only when asked. */
    expect_read_error(s, t.tenant_id, cg_storetest_scope("s", "t", "a"), true, CG_NOT_FOUND,
                      "scope.task_id: no such task");
    struct cg_budget_row rows[4];
    struct cg_scope_ids ids = cg_storetest_scope("s", "t", "");
    int n = -1;
    struct cg_err err;
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_path_read(s, t.tenant_id, &ids, true, true, cg_wall_ms(), rows, &n, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(n, 2, "the missing task is left out: n = %d", n);

    struct cg_budget_row task = cg_storetest_budget("s", "t", "", 500);
    (void)cg_storetest_put(s, t.tenant_id, &task);
    expect_read_error(s, t.tenant_id, cg_storetest_scope("s", "t", "a"), false, CG_NOT_FOUND,
                      "scope.agent_id: no such agent");

    /* SetBudget under a missing parent names the parent and writes nothing. */
    struct cg_budget_row orphan = cg_storetest_budget("nope", "t", "", 10);
    struct cg_budget_row out;
    bool created = true;
    cg_storetest_begin(s);
    cg_status rc = cg_store_budget_put(s, t.tenant_id, &orphan, 0, NULL, cg_wall_ms(), NULL, &out,
                                       &created, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, "scope.session_id: no such session");
    cr_assert_not(created);
    orphan = cg_storetest_budget("s", "nope", "a", 10);
    cg_storetest_begin(s);
    rc = cg_store_budget_put(s, t.tenant_id, &orphan, 0, NULL, cg_wall_ms(), NULL, &out, &created,
                             &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, "scope.task_id: no such task");
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 3);

    /* A tenant that does not exist, or is not even a UUID. */
    expect_read_error(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", cg_storetest_scope("", "", ""),
                      false, CG_NOT_FOUND, "tenant_id: no such tenant");
    expect_read_error(s, "not-a-uuid", cg_storetest_scope("s", "", ""), false, CG_NOT_FOUND,
                      "tenant_id: no such tenant");
    cg_store_free(s);
}

Test(budget_store, another_tenants_scopes_are_not_found, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant a = make_tenant(s, "a");
    struct cg_tenant b = make_tenant(s, "b");
    struct cg_budget_row session = cg_storetest_budget("shared-name", "", "", 1000);
    (void)cg_storetest_put(s, a.tenant_id, &session);
    expect_read_error(s, b.tenant_id, cg_storetest_scope("shared-name", "", ""), false,
                      CG_NOT_FOUND, "scope.session_id: no such session");

    struct cg_reservation res, got;
    struct cg_err err;
    struct cg_scope_ids ids = cg_storetest_scope("shared-name", "", "");
    cg_storetest_begin(s);
    cr_assert_eq(
        cg_store_reservation_insert(s, a.tenant_id, &ids, 10, 0, "m", "", "", 60000, &res, &err),
        CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cg_storetest_begin(s);
    cg_status rc = cg_store_reservation_lock(s, b.tenant_id, res.reservation_id, &got, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "reservation_id: no such reservation");
    cg_store_free(s);
}

Test(budget_store, bad_arguments_are_invalid_argument_naming_the_field, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_err err;
    struct cg_budget_row out;
    bool created;

    expect_read_error(s, t.tenant_id, cg_storetest_scope("", "t", ""), false, CG_INVALID_ARGUMENT,
                      "scope.task_id: needs a scope.session_id");
    expect_read_error(s, t.tenant_id, cg_storetest_scope("s", "", "a"), false, CG_INVALID_ARGUMENT,
                      "scope.agent_id: needs a scope.task_id");
    struct cg_scope_ids bad = cg_storetest_scope("\xff\xfe", "", "");
    expect_read_error(s, t.tenant_id, bad, false, CG_INVALID_ARGUMENT,
                      "scope.session_id: not valid UTF-8");
    /* An id that fills its array without a terminator. */
    memset(bad.session_id, 'x', sizeof bad.session_id);
    expect_read_error(s, t.tenant_id, bad, false, CG_INVALID_ARGUMENT,
                      "scope.session_id: longer than 128 bytes");

    struct cg_budget_row row = cg_storetest_budget("s", "", "", 1000);
    row.reset_period = 2;
    cg_storetest_begin(s);
    cg_status rc = cg_store_budget_put(s, t.tenant_id, &row, 0, NULL, cg_wall_ms(), NULL, &out,
                                       &created, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "settings.reset_period: only a tenant budget resets");

    row = cg_storetest_budget("s", "", "", 0);
    cg_storetest_begin(s);
    rc = cg_store_budget_put(s, t.tenant_id, &row, 0, NULL, cg_wall_ms(), NULL, &out, &created,
                             &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "settings.limit_tokens: must be positive");

    row = cg_storetest_budget("s", "", "", 10);
    row.mode = 7;
    cg_storetest_begin(s);
    rc = cg_store_budget_put(s, t.tenant_id, &row, 0, NULL, cg_wall_ms(), NULL, &out, &created,
                             &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert(strncmp(err.msg, "settings.mode:", 14) == 0, "%s", err.msg);

    row = cg_storetest_budget("s", "", "", 10);
    cg_storetest_begin(s);
    rc = cg_store_budget_put(s, t.tenant_id, &row, -1, NULL, cg_wall_ms(), NULL, &out, &created,
                             &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "expected_version: must not be negative");

    struct cg_reservation res;
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    cg_storetest_begin(s);
    rc = cg_store_reservation_insert(s, t.tenant_id, &ids, -1, 0, "", "", "", 1000, &res, &err);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "tokens: must not be negative");
    rc = cg_store_reservation_settle(s, t.tenant_id, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", 1,
                                     NULL, &err);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    struct cg_usage negative = {.output_tokens = -5};
    char entry[CG_UUID_LEN + 1];
    rc = cg_store_ledger_append(s, t.tenant_id, &ids, &negative, "", "", NULL, entry, NULL, &err);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "usage.output_tokens: must not be negative");
    cg_store_rollback(s);

    /* Nothing was written by any of them (not even the tenant's row). */
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 0);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ versions --- */

Test(budget_store, versions_and_expected_version, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row row = cg_storetest_budget("s", "", "", 1000);
    struct cg_budget_row out;
    bool created = false;
    struct cg_err err;

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &row, 0, "k1", cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert(created);
    cr_assert_eq(out.version, 1);
    int64_t created_at = out.created_at_ms;

    row.limit_tokens = 2000;
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &row, 0, "k2", cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_not(created);
    cr_assert_eq(out.version, 2);
    cr_assert_eq(out.limit_tokens, 2000);
    cr_assert_str_eq(out.updated_by_key_id, "k2");
    cr_assert_eq(out.created_at_ms, created_at);

    /* A stale version is refused and changes nothing. */
    row.limit_tokens = 3000;
    cg_storetest_begin(s);
    cg_status rc = cg_store_budget_put(s, t.tenant_id, &row, 1, "k3", cg_wall_ms(), NULL, &out,
                                       &created, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_ABORTED, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "expected_version 1 does not match the stored version 2");
    cr_assert_eq(db_int("SELECT limit_tokens FROM scopes WHERE session_id = $1", "s"), 2000);

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &row, 2, "k3", cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(out.version, 3);
    cr_assert_eq(out.limit_tokens, 3000);

    /* An expected version for a scope that has none yet is refused too. */
    struct cg_budget_row fresh = cg_storetest_budget("s2", "", "", 10);
    cg_storetest_begin(s);
    rc = cg_store_budget_put(s, t.tenant_id, &fresh, 4, NULL, cg_wall_ms(), NULL, &out, &created,
                             &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_ABORTED, "%s", cg_status_name(rc));
    cr_assert(strstr(err.msg, "expected_version 4 does not match the stored version 0") != NULL,
              "%s", err.msg);
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE session_id = $1", "s2"), 0);

    /* The tenant's row, made without a budget, gets its first one: that is "created". */
    struct cg_budget_row rows[4];
    cg_storetest_begin(s);
    (void)read_path(s, t.tenant_id, cg_storetest_scope("", "", ""), rows);
    cg_storetest_commit(s);
    struct cg_budget_row tenant = cg_storetest_budget("", "", "", 1000000);
    tenant.reset_period = 3;
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &tenant, 0, NULL, cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert(created);
    cr_assert_eq(out.version, 1);
    cr_assert_eq(out.level, 1);
    cr_assert_eq(out.reset_period, 3);
    cr_assert_str_empty(out.updated_by_key_id);

    /* The same for a tenant whose row was never read: it is made by the put. */
    struct cg_tenant fresh_tenant = make_tenant(s, "fresh");
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, fresh_tenant.tenant_id, &tenant, 0, NULL, cg_wall_ms(),
                                     NULL, &out, &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert(created);
    cr_assert_eq(out.version, 1);

    /* A tenant that does not exist gets nothing, at any level. */
    const char *ghost = "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00";
    struct cg_budget_row ghost_rows[] = {cg_storetest_budget("", "", "", 10),
                                         cg_storetest_budget("s", "", "", 10),
                                         cg_storetest_budget("s", "t", "", 10)};
    for (size_t i = 0; i < sizeof ghost_rows / sizeof ghost_rows[0]; i++) {
        cg_storetest_begin(s);
        rc = cg_store_budget_put(s, ghost, &ghost_rows[i], 0, NULL, cg_wall_ms(), NULL, &out,
                                 &created, &err);
        cg_store_rollback(s);
        cr_assert_eq(rc, CG_NOT_FOUND, "level %zu: %s", i + 1, cg_status_name(rc));
        cr_assert_str_eq(err.msg, "tenant_id: no such tenant");
    }
    cg_store_free(s);
}

/* ------------------------------------------------------------------ counters --- */

Test(budget_store, path_add_counts_on_every_level_and_never_below_zero, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    struct cg_budget_row task = cg_storetest_budget("s", "t", "", 500);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    (void)cg_storetest_put(s, t.tenant_id, &task);
    /* A sibling task, which must not move. */
    struct cg_budget_row sibling = cg_storetest_budget("s", "t2", "", 500);
    (void)cg_storetest_put(s, t.tenant_id, &sibling);

    struct cg_budget_row rows[4];
    struct cg_err err;
    cg_storetest_begin(s);
    int n = read_path(s, t.tenant_id, cg_storetest_scope("s", "t", ""), rows);
    cr_assert_eq(n, 3);
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 100, 50, 7, 3, &err), CG_OK, "%s",
                 err.msg);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(rows[i].level, i + 1);
        cr_assert_eq(rows[i].used_tokens, 100, "level %d", i + 1);
        cr_assert_eq(rows[i].reserved_tokens, 50);
        cr_assert_eq(rows[i].used_cost_micros, 7);
        cr_assert_eq(rows[i].reserved_cost_micros, 3);
    }
    cr_assert_eq(rows[2].limit_tokens, 500, "the settings come back too");
    /* More taken back than there is stops at zero. */
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, -30, -1000, 0, -4, &err), CG_OK, "%s",
                 err.msg);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(rows[i].used_tokens, 70);
        cr_assert_eq(rows[i].reserved_tokens, 0);
        cr_assert_eq(rows[i].used_cost_micros, 7);
        cr_assert_eq(rows[i].reserved_cost_micros, 0);
    }
    /* Only the first n rows: the task stays as it is. */
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, 2, 5, 0, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(rows[1].used_tokens, 75);
    cg_storetest_commit(s);

    cr_assert_eq(db_int("SELECT used_tokens FROM scopes WHERE session_id = ''", NULL), 75);
    cr_assert_eq(
        db_int("SELECT used_tokens FROM scopes WHERE session_id = 's' AND task_id = ''", NULL), 75);
    cr_assert_eq(db_int("SELECT used_tokens FROM scopes WHERE task_id = $1", "t"), 70);
    cr_assert_eq(db_int("SELECT used_tokens FROM scopes WHERE task_id = $1", "t2"), 0);

    /* SetBudget leaves the counters alone. */
    task.limit_tokens = 400;
    struct cg_budget_row after = cg_storetest_put(s, t.tenant_id, &task);
    cr_assert_eq(after.used_tokens, 70);
    cr_assert_eq(after.version, 2);

    /* A counter pushed past the bigint range is refused, and the transaction with it. */
    cg_storetest_begin(s);
    n = read_path(s, t.tenant_id, cg_storetest_scope("s", "t", ""), rows);
    cg_status rc = cg_store_path_add(s, t.tenant_id, rows, n, INT64_MAX, 0, 0, 0, &err);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT, "%s %s", cg_status_name(rc), err.msg);
    rc = cg_store_commit(s, &err);
    cr_assert_neq(rc, CG_OK, "a transaction aborted by an error must not commit");
    cg_store_rollback(s);
    cr_assert_eq(db_int("SELECT used_tokens FROM scopes WHERE task_id = $1", "t"), 70);

    /* The store is usable afterwards. */
    cg_storetest_begin(s);
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("s", "t", ""), rows), 3);
    cg_storetest_commit(s);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ reservations --- */

Test(budget_store, reservation_insert_lock_settle, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_reservation res, got;
    struct cg_err err;

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_insert(s, t.tenant_id, &ids, 400, 1200, "gpt-4o", "est-1", "",
                                             60000, &res, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(strlen(res.reservation_id), CG_UUID_LEN);
    cr_assert_eq(res.state, 1);
    cr_assert_not(res.replayed);
    cr_assert_eq(res.tokens, 400);
    cr_assert_eq(res.cost_micros, 1200);
    cr_assert_str_eq(res.model, "gpt-4o");
    cr_assert_str_eq(res.estimate_id, "est-1");
    cr_assert_str_eq(res.ids.session_id, "s");
    cr_assert_eq(res.expires_at_ms - res.created_at_ms, 60000, "expiry %lld after creation",
                 (long long)(res.expires_at_ms - res.created_at_ms));
    cr_assert_eq(res.settled_at_ms, 0);

    /* Upper case ids are the same reservation. */
    char upper[CG_UUID_LEN + 1];
    for (int i = 0; i <= CG_UUID_LEN; i++)
        upper[i] = (char)(res.reservation_id[i] >= 'a' && res.reservation_id[i] <= 'f'
                              ? res.reservation_id[i] - 'a' + 'A'
                              : res.reservation_id[i]);
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_lock(s, t.tenant_id, upper, &got, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_str_eq(got.reservation_id, res.reservation_id);
    cr_assert_eq(got.state, 1);
    struct cg_usage usage = {.input_tokens = 300,
                             .output_tokens = 50,
                             .cache_read_tokens = 20,
                             .cache_write_tokens = 10,
                             .cost_micros = 999};
    cr_assert_eq(cg_store_reservation_settle(s, t.tenant_id, res.reservation_id, 2, &usage, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_lock(s, t.tenant_id, res.reservation_id, &got, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_eq(got.state, 2);
    cr_assert_geq(got.settled_at_ms, got.created_at_ms);
    cr_assert_eq(got.committed.input_tokens, 300);
    cr_assert_eq(got.committed.output_tokens, 50);
    cr_assert_eq(got.committed.cache_read_tokens, 20);
    cr_assert_eq(got.committed.cache_write_tokens, 10);
    cr_assert_eq(got.committed.cost_micros, 999);
    /* Settling twice would return the tokens twice: refused. */
    cg_status rc = cg_store_reservation_settle(s, t.tenant_id, res.reservation_id, 3, NULL, &err);
    cr_assert_eq(rc, CG_FAILED_PRECONDITION, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "reservation_id: already committed");
    cg_store_rollback(s);

    /* Released ones record no usage. */
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, NULL, NULL, NULL, 60000,
                                             &res, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_reservation_settle(s, t.tenant_id, res.reservation_id, 3, &usage, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_reservation_lock(s, t.tenant_id, res.reservation_id, &got, &err), CG_OK,
                 "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(got.state, 3);
    cr_assert_eq(got.committed.input_tokens, 0);

    /* Unknown and malformed ids. */
    cg_storetest_begin(s);
    rc = cg_store_reservation_lock(s, t.tenant_id, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", &got,
                                   &err);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "reservation_id: no such reservation");
    rc = cg_store_reservation_lock(s, t.tenant_id, "r-1", &got, &err);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "reservation_id: no such reservation");
    rc = cg_store_reservation_settle(s, t.tenant_id, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", 3,
                                     NULL, &err);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s", cg_status_name(rc));
    /* A reservation on a scope that does not exist. */
    struct cg_scope_ids ghost = cg_storetest_scope("ghost", "", "");
    rc = cg_store_reservation_insert(s, t.tenant_id, &ghost, 1, 0, "", "", "", 1000, &res, &err);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "scope.session_id: no such session");
    cg_store_rollback(s);
    cg_store_free(s);
}

Test(budget_store, an_active_reservation_past_its_expiry_reads_expired, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_reservation res, got;
    struct cg_err err;
    cg_storetest_begin(s);
    cr_assert_eq(
        cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, "", "", "", 50, &res, &err), CG_OK,
        "%s", err.msg);
    cg_storetest_commit(s);
    sleep_ms(150);
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_lock(s, t.tenant_id, res.reservation_id, &got, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_eq(got.state, 4, "state %d", got.state);
    /* The caller settles it as expired; an expired reservation is still ACTIVE until then. */
    cr_assert_eq(cg_store_reservation_settle(s, t.tenant_id, res.reservation_id, 4, NULL, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid",
                        res.reservation_id),
                 4);
    cg_store_free(s);
}

Test(budget_store, a_repeated_idempotency_key_replays_the_reservation, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_tenant other = make_tenant(s, "other");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    (void)cg_storetest_put(s, other.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_reservation first, again;
    struct cg_err err;

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_insert(s, t.tenant_id, &ids, 100, 5, "m", "e", "key-1", 60000,
                                             &first, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_not(first.replayed);

    /* A retry, even with other amounts, gets the first reservation back. */
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_insert(s, t.tenant_id, &ids, 999, 0, "", "", "key-1", 1000,
                                             &again, &err),
                 CG_OK, "%s", err.msg);
    /* The transaction is still usable. */
    struct cg_budget_row rows[4];
    (void)read_path(s, t.tenant_id, ids, rows);
    cg_storetest_commit(s);
    cr_assert(again.replayed);
    cr_assert_str_eq(again.reservation_id, first.reservation_id);
    cr_assert_eq(again.tokens, 100);
    cr_assert_str_eq(again.model, "m");
    cr_assert_eq(again.expires_at_ms, first.expires_at_ms);

    /* Keys are per tenant. */
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservation_insert(s, other.tenant_id, &ids, 1, 0, "", "", "key-1", 60000,
                                             &again, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_not(again.replayed);
    cr_assert_str_neq(again.reservation_id, first.reservation_id);
    cr_assert_eq(db_int("SELECT count(*) FROM reservations WHERE idempotency_key = $1", "key-1"),
                 2);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ ledger --- */

Test(budget_store, ledger_append_and_a_repeated_key, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    struct cg_budget_row task = cg_storetest_budget("s", "t", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    (void)cg_storetest_put(s, t.tenant_id, &task);
    struct cg_scope_ids ids = cg_storetest_scope("s", "t", "");
    struct cg_usage first = {.input_tokens = 10,
                             .output_tokens = 20,
                             .cache_read_tokens = 30,
                             .cache_write_tokens = 40,
                             .cost_micros = 50};
    char entry[CG_UUID_LEN + 1], again[CG_UUID_LEN + 1];
    struct cg_err err;

    cg_storetest_begin(s);
    cr_assert_eq(cg_store_ledger_append(s, t.tenant_id, &ids, &first, "claude", "usage-1", NULL,
                                        entry, NULL, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(strlen(entry), CG_UUID_LEN);

    struct cg_usage second = {.input_tokens = 1};
    struct cg_ledger_first previous;
    memset(&previous, 0xff, sizeof previous);
    struct cg_budget_row rows[4];
    /* The key again, on another scope (the session): the first use is named. */
    struct cg_scope_ids other = cg_storetest_scope("s", "", "");
    cg_storetest_begin(s);
    int n = read_path(s, t.tenant_id, ids, rows);
    int64_t before_ms = cg_wall_ms();
    cg_status rc = cg_store_ledger_append(s, t.tenant_id, &other, &second, "other", "usage-1", NULL,
                                          again, &previous, &err);
    cr_assert_eq(rc, CG_ALREADY_EXISTS, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, "idempotency_key: already used");
    cr_assert_str_eq(again, entry);
    cr_assert_eq(previous.usage.input_tokens, 10);
    cr_assert_eq(previous.usage.output_tokens, 20);
    cr_assert_eq(previous.usage.cache_read_tokens, 30);
    cr_assert_eq(previous.usage.cache_write_tokens, 40);
    cr_assert_eq(previous.usage.cost_micros, 50);
    cr_assert_str_eq(previous.model, "claude");
    cr_assert_str_eq(previous.ids.session_id, "s");
    cr_assert_str_eq(previous.ids.task_id, "t");
    cr_assert_str_eq(previous.ids.agent_id, "");
    /* Its time is the first entry's (a few seconds' slack for the clocks). */
    cr_assert(
        previous.created_at_ms > before_ms - 60000 && previous.created_at_ms <= before_ms + 5000,
        "created_at_ms %lld, now %lld", (long long)previous.created_at_ms, (long long)before_ms);
    /* The repeated key did not abort the transaction: it goes on and commits. */
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 3, 0, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(cg_store_ledger_append(s, t.tenant_id, &ids, &second, "", "usage-2", NULL, again,
                                        NULL, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_str_neq(again, entry);
    cr_assert_eq(db_int("SELECT count(*) FROM ledger WHERE tenant_id = $1::uuid", t.tenant_id), 2);
    cr_assert_eq(db_int("SELECT used_tokens FROM scopes WHERE task_id = $1", "t"), 3);

    /* Without a key, every append is an entry. */
    cg_storetest_begin(s);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(cg_store_ledger_append(s, t.tenant_id, &ids, &second, "", NULL, NULL, again,
                                            NULL, &err),
                     CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(db_int("SELECT count(*) FROM ledger WHERE tenant_id = $1::uuid", t.tenant_id), 4);
    cg_store_free(s);
}

Test(budget_store, a_reservation_reaches_the_ledger_once, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_reservation res;
    struct cg_usage usage = {.input_tokens = 5};
    char entry[CG_UUID_LEN + 1];
    struct cg_err err;

    cg_storetest_begin(s);
    cr_assert_eq(
        cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, "", "", "", 60000, &res, &err),
        CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_ledger_append(s, t.tenant_id, &ids, &usage, "", NULL, res.reservation_id,
                                        entry, NULL, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(
        db_int("SELECT count(*) FROM ledger WHERE reservation_id = $1::uuid", res.reservation_id),
        1);

    cg_storetest_begin(s);
    cg_status rc = cg_store_ledger_append(s, t.tenant_id, &ids, &usage, "", NULL,
                                          res.reservation_id, entry, NULL, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_FAILED_PRECONDITION, "%s %s", cg_status_name(rc), err.msg);

    cg_storetest_begin(s);
    rc = cg_store_ledger_append(s, t.tenant_id, &ids, &usage, "", NULL,
                                "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", entry, NULL, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, "reservation_id: no such reservation");

    struct cg_scope_ids ghost = cg_storetest_scope("s", "ghost", "");
    cg_storetest_begin(s);
    rc = cg_store_ledger_append(s, t.tenant_id, &ghost, &usage, "", NULL, NULL, entry, NULL, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_NOT_FOUND, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_str_eq(err.msg, "scope.task_id: no such task");
    cr_assert_eq(db_int("SELECT count(*) FROM ledger WHERE tenant_id = $1::uuid", t.tenant_id), 1);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ transactions --- */

Test(budget_store, rollback_leaves_nothing, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    struct cg_budget_row out, rows[4];
    bool created;
    struct cg_err err;
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_reservation res;
    struct cg_usage usage = {.output_tokens = 5};
    char entry[CG_UUID_LEN + 1];

    cg_storetest_begin(s);
    int n = read_path(s, t.tenant_id, cg_storetest_scope("", "", ""), rows);
    cr_assert_eq(n, 1);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &session, 0, NULL, cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    n = read_path(s, t.tenant_id, ids, rows);
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 5, 10, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(
        cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, "", "", "k", 60000, &res, &err),
        CG_OK, "%s", err.msg);
    cr_assert_eq(
        cg_store_ledger_append(s, t.tenant_id, &ids, &usage, "", "k", NULL, entry, NULL, &err),
        CG_OK, "%s", err.msg);
    cg_store_rollback(s);
    cg_store_rollback(s); /* harmless without a transaction */

    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 0);
    cr_assert_eq(
        db_int("SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid", t.tenant_id), 0);
    cr_assert_eq(db_int("SELECT count(*) FROM ledger WHERE tenant_id = $1::uuid", t.tenant_id), 0);

    /* The same again commits: the keys were not used up by the rolled-back attempt. */
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &session, 0, NULL, cg_wall_ms(), NULL, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(
        cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, "", "", "k", 60000, &res, &err),
        CG_OK, "%s", err.msg);
    cr_assert_not(res.replayed);
    cg_storetest_commit(s);
    cg_store_free(s);
}

Test(budget_store, budget_calls_need_a_transaction, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row rows[4];
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    int n;
    struct cg_err err;
    cg_status rc =
        cg_store_path_read(s, t.tenant_id, &ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_INTERNAL, "%s", cg_status_name(rc));
    rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_INTERNAL, "%s", cg_status_name(rc));
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 0);

    /* A transaction left open is rolled back by the next begin, not carried into it. */
    cg_storetest_begin(s);
    (void)read_path(s, t.tenant_id, ids, rows);
    cg_storetest_begin(s);
    cg_storetest_commit(s);
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 0);
    cg_store_free(s);
}

Test(budget_store, commit_past_the_deadline_leaves_the_transaction_to_roll_back, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_store *other = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct cg_budget_row rows[4];
    struct cg_err err;

    cg_storetest_begin(s);
    int n = read_path(s, t.tenant_id, cg_storetest_scope("s", "", ""), rows);
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 0, 10, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cg_store_set_deadline(s, cg_mono_ms() - 1);
    cg_status rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_DEADLINE_EXCEEDED, "%s", cg_status_name(rc));
    /* The rollback runs although the deadline has passed: it releases the locks. */
    cg_store_rollback(s);
    cg_store_set_deadline(s, 0);

    cg_store_set_deadline(other, cg_mono_ms() + 2000);
    cg_storetest_begin(other);
    n = read_path(other, t.tenant_id, cg_storetest_scope("s", "", ""), rows);
    cg_storetest_commit(other);
    cr_assert_eq(rows[1].reserved_tokens, 0);
    cg_store_free(other);

    cg_storetest_begin(s);
    (void)read_path(s, t.tenant_id, cg_storetest_scope("s", "", ""), rows);
    cg_storetest_commit(s);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ concurrency --- */

#define WORKERS 16
#define ROUNDS 200
#define HOLD 10
#define LIMIT 1000

struct reserve_job {
    pthread_barrier_t *start;
    const char *tenant_id;
    struct cg_scope_ids ids;
    int granted;
    int failures;
    cg_status first_failure;
    char first_message[CG_ERR_MSG_MAX];
};

static void job_failed(struct reserve_job *job, cg_status rc, const struct cg_err *err)
{
    if (job->failures++ == 0) {
        job->first_failure = rc;
        snprintf(job->first_message, sizeof job->first_message, "%s", err->msg);
    }
}

/* The Reserve pattern: lock the path, check every budget on it, hold, record, commit. */
static void *reserve_thread(void *arg)
{
    struct reserve_job *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    pthread_barrier_wait(job->start);
    for (int round = 0; s != NULL && round < ROUNDS; round++) {
        struct cg_err err;
        struct cg_budget_row rows[4];
        int n = 0;
        cg_status rc = cg_store_begin(s, &err);
        if (rc == CG_OK)
            rc = cg_store_path_read(s, job->tenant_id, &job->ids, true, false, cg_wall_ms(), rows,
                                    &n, &err);
        bool fits = true;
        for (int i = 0; rc == CG_OK && i < n; i++) {
            if (rows[i].has_budget &&
                rows[i].used_tokens + rows[i].reserved_tokens + HOLD > rows[i].limit_tokens)
                fits = false;
        }
        if (rc == CG_OK && fits)
            rc = cg_store_path_add(s, job->tenant_id, rows, n, 0, HOLD, 0, 0, &err);
        struct cg_reservation res;
        if (rc == CG_OK && fits)
            rc = cg_store_reservation_insert(s, job->tenant_id, &job->ids, HOLD, 0, "", "", "",
                                             600000, &res, &err);
        if (rc == CG_OK)
            rc = cg_store_commit(s, &err);
        if (rc != CG_OK) {
            job_failed(job, rc, &err);
            cg_store_rollback(s);
        } else if (fits) {
            job->granted++;
        }
    }
    if (s == NULL)
        job->failures++;
    cg_store_free(s);
    return NULL;
}

static void run_reservers(const char *tenant_id, struct reserve_job jobs[WORKERS])
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, WORKERS);
    pthread_t threads[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i].start = &start;
        jobs[i].tenant_id = tenant_id;
        cr_assert_eq(pthread_create(&threads[i], NULL, reserve_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < WORKERS; i++)
        cr_assert_eq(jobs[i].failures, 0, "worker %d: %d failures, the first %s %s", i,
                     jobs[i].failures, cg_status_name(jobs[i].first_failure),
                     jobs[i].first_message);
}

Test(budget_store, concurrent_reservations_never_overspend, .init = setup, .fini = teardown,
     .timeout = 120)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 100000);
    struct cg_budget_row task = cg_storetest_budget("s", "t", "", LIMIT);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    (void)cg_storetest_put(s, t.tenant_id, &task);

    struct reserve_job jobs[WORKERS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < WORKERS; i++)
        jobs[i].ids = cg_storetest_scope("s", "t", "");
    run_reservers(t.tenant_id, jobs);

    int granted = 0;
    for (int i = 0; i < WORKERS; i++)
        granted += jobs[i].granted;
    cr_assert_eq(granted, LIMIT / HOLD, "%d reservations granted", granted);
    cr_assert_eq(
        db_int("SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid AND state = 1",
               t.tenant_id),
        LIMIT / HOLD);
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid"
                        " AND reserved_tokens = 1000",
                        t.tenant_id),
                 3, "every level holds exactly the limit");
    cg_store_free(s);
}

Test(budget_store, sibling_tasks_share_a_session_without_deadlocks, .init = setup, .fini = teardown,
     .timeout = 120)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", LIMIT);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct reserve_job jobs[WORKERS];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < WORKERS; i++) {
        char task_id[16];
        snprintf(task_id, sizeof task_id, "t%d", i);
        struct cg_budget_row task = cg_storetest_budget("s", task_id, "", LIMIT);
        (void)cg_storetest_put(s, t.tenant_id, &task);
        jobs[i].ids = cg_storetest_scope("s", task_id, "");
    }
    run_reservers(t.tenant_id, jobs);

    int granted = 0;
    for (int i = 0; i < WORKERS; i++)
        granted += jobs[i].granted;
    cr_assert_eq(granted, LIMIT / HOLD, "%d reservations granted", granted);
    cr_assert_eq(
        db_int("SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid AND state = 1",
               t.tenant_id),
        LIMIT / HOLD);
    cr_assert_eq(db_int("SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid"
                        " AND session_id = ''",
                        t.tenant_id),
                 LIMIT);
    cr_assert_eq(db_int("SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid"
                        " AND session_id = 's' AND task_id = ''",
                        t.tenant_id),
                 LIMIT);
    cr_assert_eq(db_int("SELECT sum(reserved_tokens) FROM scopes WHERE tenant_id = $1::uuid"
                        " AND task_id <> ''",
                        t.tenant_id),
                 LIMIT, "the tasks' holds add up to the session's");
    cg_store_free(s);
}

struct first_use_job {
    pthread_barrier_t *start;
    const char *tenant_id;
    cg_status rc;
    struct cg_err err;
    int n;
};

static void *first_use_thread(void *arg)
{
    struct first_use_job *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    struct cg_budget_row rows[4];
    pthread_barrier_wait(job->start);
    job->rc = s ? cg_store_begin(s, &job->err) : CG_NOMEM;
    if (job->rc == CG_OK)
        job->rc = cg_store_path_read(s, job->tenant_id, &ids, true, false, cg_wall_ms(), rows,
                                     &job->n, &job->err);
    if (job->rc == CG_OK)
        job->rc = cg_store_commit(s, &job->err);
    if (s != NULL)
        cg_store_rollback(s);
    cg_store_free(s);
    return NULL;
}

Test(budget_store, concurrent_first_use_of_a_tenant_makes_one_row, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, WORKERS);
    struct first_use_job jobs[WORKERS];
    pthread_t threads[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        jobs[i] = (struct first_use_job){.start = &start, .tenant_id = t.tenant_id};
        cr_assert_eq(pthread_create(&threads[i], NULL, first_use_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < WORKERS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < WORKERS; i++) {
        cr_assert_eq(jobs[i].rc, CG_OK, "worker %d: %s %s", i, cg_status_name(jobs[i].rc),
                     jobs[i].err.msg);
        cr_assert_eq(jobs[i].n, 1);
    }
    cr_assert_eq(db_int("SELECT count(*) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id), 1);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ failures --- */

Test(budget_store, postgres_unreachable_begin_is_unavailable, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    char dsn[128];
    snprintf(dsn, sizeof dsn, "postgresql://postgres@127.0.0.1:%d/postgres",
             cg_pgtest_closed_port());
    opts.pg_dsn = dsn;
    struct cg_store *s = cg_store_new(&opts);
    cr_assert(s != NULL);
    struct cg_err err;
    cg_status rc = cg_store_begin(s, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "storage unavailable");
    /* Nothing was begun, so nothing runs: no statement outside a transaction either. */
    struct cg_budget_row rows[4];
    struct cg_scope_ids ids = cg_storetest_scope("", "", "");
    int n;
    rc = cg_store_path_read(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", &ids, true, false,
                            cg_wall_ms(), rows, &n, &err);
    cr_assert_neq(rc, CG_OK);
    cg_store_rollback(s);
    cg_store_free(s);
}

Test(budget_store, a_backend_killed_mid_transaction_is_unavailable_and_applies_nothing,
     .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    struct cg_budget_row rows[4];
    struct cg_reservation res;
    struct cg_err err;

    cg_storetest_begin(s);
    int n = read_path(s, t.tenant_id, ids, rows);
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 0, 10, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(cg_pgtest_kill_backends(&T), 1);
    /* The next statement would run outside the transaction on a new connection: refused. */
    cg_status rc =
        cg_store_reservation_insert(s, t.tenant_id, &ids, 10, 0, "", "", "", 60000, &res, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s %s", cg_status_name(rc), err.msg);
    rc = cg_store_path_read(s, t.tenant_id, &ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "a read is not retried inside a transaction either: %s",
                 cg_status_name(rc));
    rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    cg_store_rollback(s);

    cr_assert_eq(
        db_int("SELECT sum(reserved_tokens) FROM scopes WHERE tenant_id = $1::uuid", t.tenant_id),
        0);
    cr_assert_eq(
        db_int("SELECT count(*) FROM reservations WHERE tenant_id = $1::uuid", t.tenant_id), 0);

    /* The store recovers by itself with the next transaction. */
    cg_storetest_begin(s);
    n = read_path(s, t.tenant_id, ids, rows);
    cr_assert_eq(cg_store_path_add(s, t.tenant_id, rows, n, 0, 10, 0, 0, &err), CG_OK, "%s",
                 err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(db_int("SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid"
                        " AND session_id = 's'",
                        t.tenant_id),
                 10);
    cg_store_free(s);
}

struct lock_job {
    struct cg_store *store;
    const char *tenant_id;
    cg_status rc;
    struct cg_err err;
};

static void *lock_thread(void *arg)
{
    struct lock_job *job = arg;
    struct cg_budget_row rows[4];
    struct cg_scope_ids ids = cg_storetest_scope("s", "", "");
    int n;
    job->rc = cg_store_begin(job->store, &job->err);
    if (job->rc == CG_OK)
        job->rc = cg_store_path_read(job->store, job->tenant_id, &ids, true, false, cg_wall_ms(),
                                     rows, &n, &job->err);
    cg_store_rollback(job->store);
    return NULL;
}

Test(budget_store, a_lock_wait_cut_off_is_unavailable_not_retried, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "acme");
    struct cg_budget_row session = cg_storetest_budget("s", "", "", 1000);
    (void)cg_storetest_put(s, t.tenant_id, &session);
    PGconn *locker = cg_pgtest_connect(&T);
    PGconn *admin = cg_pgtest_connect(&T);
    cg_pgtest_exec(locker, "BEGIN");
    cg_pgtest_exec(locker, "SELECT 1 FROM scopes WHERE session_id = '' FOR UPDATE");

    struct lock_job job = {.store = s, .tenant_id = t.tenant_id};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, lock_thread, &job), 0);
    int first = cg_pgtest_wait_lock_waiter(admin, &T, 0, 10000);
    cr_assert_neq(first, 0, "the path lock never waited");
    cg_pgtest_kill_pid(admin, first);
    pthread_join(thread, NULL);
    /* Were it sent again on a new connection, it would wait on the lock again. */
    cr_assert_eq(cg_pgtest_wait_lock_waiter(admin, &T, first, 300), 0);
    cr_assert_eq(job.rc, CG_UNAVAILABLE, "%s %s", cg_status_name(job.rc), job.err.msg);
    cg_pgtest_exec(locker, "ROLLBACK");

    struct cg_budget_row rows[4];
    cg_storetest_begin(s);
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("s", "", ""), rows), 2);
    cg_storetest_commit(s);
    PQfinish(admin);
    PQfinish(locker);
    cg_store_free(s);
}

/* The read-only path: one statement without a transaction, or "read in a transaction"
 * when the answer needs a write first. */
Test(budget_store, path_peek_reads_without_a_transaction_or_asks_for_one, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "peek");
    struct cg_budget_row rows[4];
    int n = -1;
    bool need_tx = false;
    struct cg_err err;
    /* No tenant row yet: creating it is a write. */
    cg_status rc = cg_store_path_peek(s, t.tenant_id, &(struct cg_scope_ids){0}, cg_wall_ms(), rows,
                                      &n, &need_tx, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert(need_tx, "a missing tenant row needs a transaction");

    struct cg_budget_row session = cg_storetest_budget("s1", "", "", 500);
    cg_storetest_put(s, t.tenant_id, &session);
    struct cg_scope_ids ids = cg_storetest_scope("s1", "", "");
    rc = cg_store_path_peek(s, t.tenant_id, &ids, cg_wall_ms(), rows, &n, &need_tx, &err);
    cr_assert_eq(rc, CG_OK, "%s", err.msg);
    cr_assert(!need_tx);
    cr_assert_eq(n, 2);
    cr_assert_eq(rows[1].limit_tokens, 500);
    cr_assert_eq(rows[0].level, 1);

    struct cg_scope_ids missing = cg_storetest_scope("s1", "nope", "");
    rc = cg_store_path_peek(s, t.tenant_id, &missing, cg_wall_ms(), rows, &n, &need_tx, &err);
    cr_assert_eq(rc, CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "task_id") != NULL, "%s", err.msg);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ HOT counter writes --- */

/* Every write of a path rewrites these columns of each row (store_pg_budget.c and the
 * batch statement of store_pg_batch.c): none may be in an index of scopes, or no counter
 * write is a HOT update and the hot rows (tenant, session) bloat under load (0014). */
static const char *const COUNTER_COLUMNS =
    "{used_tokens,reserved_tokens,used_cost_micros,reserved_cost_micros,spent_input_tokens,"
    "spent_output_tokens,spent_cache_read_tokens,spent_cache_write_tokens,last_activity_at,"
    "event_seq,row_version,allocated_tokens}";

Test(budget_store, counter_columns_are_in_no_index, .init = setup, .fini = teardown, .timeout = 30)
{
    PGconn *db = cg_pgtest_connect(&T);
    /* Key columns, then columns named by index expressions or predicates. */
    long long keyed = cg_pgtest_query_int(
        db,
        "SELECT count(*) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'scopes'::regclass"
        " AND a.attname = ANY($1::text[])",
        COUNTER_COLUMNS);
    long long in_exprs = cg_pgtest_query_int(
        db,
        "SELECT count(*) FROM pg_index i, unnest($1::text[]) AS c(name)"
        " WHERE i.indrelid = 'scopes'::regclass AND"
        " (coalesce(pg_get_expr(i.indexprs, i.indrelid), '') ~ ('\\m' || c.name || '\\M')"
        " OR coalesce(pg_get_expr(i.indpred, i.indrelid), '') ~ ('\\m' || c.name || '\\M'))",
        COUNTER_COLUMNS);
    cr_expect_eq(keyed, 0, "%lld index keys of scopes are counter columns", keyed);
    cr_expect_eq(in_exprs, 0, "%lld index expressions of scopes name counter columns", in_exprs);
    PQfinish(db);
}

Test(budget_store, counter_writes_are_hot_updates, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "hot");
    struct cg_budget_row session = cg_storetest_budget("s1", "", "", 1000);
    cg_storetest_put(s, t.tenant_id, &session); /* the tenant's row and the session's */
    cg_store_free(s);
    PGconn *db = cg_pgtest_connect(&T);
    cg_pgtest_exec(db, "BEGIN");
    /* The columns the batch statement sets, on both rows, three times (the page has room
     * for the new versions: fillfactor 50). */
    char sql[512];
    for (int i = 0; i < 3; i++) {
        snprintf(sql, sizeof sql,
                 "UPDATE scopes SET used_tokens = used_tokens + 1, reserved_tokens = 1,"
                 " spent_input_tokens = spent_input_tokens + 1, last_activity_at = now(),"
                 " event_seq = event_seq + 1 WHERE tenant_id = '%s'",
                 t.tenant_id);
        cg_pgtest_exec(db, sql);
    }
    long long updates = cg_pgtest_query_int(
        db, "SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relid = 'scopes'::regclass",
        NULL);
    long long hot = cg_pgtest_query_int(
        db, "SELECT n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relid = 'scopes'::regclass",
        NULL);
    cg_pgtest_exec(db, "ROLLBACK");
    cr_expect_eq(updates, 6);
    cr_expect_eq(hot, 6, "%lld of 6 counter writes were HOT", hot);
    PQfinish(db);
}

Test(budget_store, new_ids_are_canonical_random_v4_uuids, .init = setup, .fini = teardown,
     .timeout = 30)
{
    enum { N = 2000 };
    char(*ids)[CG_UUID_LEN + 1] = calloc(N, sizeof *ids);
    cr_assert_not_null(ids);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(cg_store_uuid(ids[i]), CG_OK);
        char canonical[CG_UUID_LEN + 1];
        cr_assert(cg_store_uuid_canonical(ids[i], canonical), "%s", ids[i]);
        cr_assert_str_eq(canonical, ids[i], "lower case, 8-4-4-4-12");
        cr_assert_eq(ids[i][14], '4', "version 4: %s", ids[i]);
        cr_assert(strchr("89ab", ids[i][19]) != NULL, "RFC 4122 variant: %s", ids[i]);
    }
    /* Random: no two alike, and every hex digit shows up in every random position. */
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            cr_assert_str_neq(ids[i], ids[j]);
    for (int pos = 0; pos < CG_UUID_LEN; pos++) {
        if (pos == 8 || pos == 13 || pos == 14 || pos == 18 || pos == 19 || pos == 23)
            continue;
        int seen = 0;
        for (int i = 0; i < N; i++)
            seen |= 1 << (strchr("0123456789abcdef", ids[i][pos]) - "0123456789abcdef");
        cr_assert_eq(seen, 0xffff, "position %d", pos);
    }
    free(ids);
}

Test(budget_store, batch_calls_take_canonical_tenant_ids_only, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_scope_ids key = cg_storetest_scope("s", "", "");
    struct cg_budget_row rows[4];
    char row_tenant[4][CG_UUID_LEN + 1];
    int n = 0;
    struct cg_err err;
    const char *bad[] = {"6F1C1E9E-0000-4000-8000-000000000001",  /* upper case */
                         "6f1c1e9e-0000-4000-8000-00000000000",   /* short */
                         "6f1c1e9e-0000-4000-8000-0000000000011", /* long */
                         "6f1c1e9e00000-4000-8000-000000000001",  /* a dash missing */
                         "6f1c1e9e-0000-4000-8000-00000000000g",  /* not hex */
                         NULL};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *tenants[] = {bad[i]};
        cr_assert_eq(cg_store_batch_lock_scopes(s, tenants, &key, 1, rows, row_tenant, 4, &n, &err),
                     CG_INVALID_ARGUMENT, "%s", bad[i] ? bad[i] : "NULL");
        cr_assert_str_eq(err.msg, "tenants[0]: not a canonical tenant UUID");
    }
    const char *good[] = {"6f1c1e9e-0000-4000-8000-000000000001"};
    cr_assert_eq(cg_store_begin(s, &err), CG_OK);
    cr_assert_eq(cg_store_batch_lock_scopes(s, good, &key, 1, rows, row_tenant, 4, &n, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_eq(n, 0, "no such tenant: no rows");
    cg_store_rollback(s);
    cg_store_free(s);
}

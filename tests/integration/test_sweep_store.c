/* test_sweep_store.c - the sweeper and calendar resets (store.h, "sweeper and resets", and
 * cg_rpc_sweep) against a real PostgreSQL, with an injected clock: reservations expire
 * without anybody waiting for them, and resets are watched at 23:59:59 and 00:00:01 of the
 * tenant's time zone, DST days included.
 *
 * Each test gets its own schema (tests/support/pgtest.h). Checks of what was stored go
 * through a separate administrative connection, never through the store under test.
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

static struct cg_tenant make_tenant(struct cg_store *s, const char *name, const char *time_zone)
{
    return cg_storetest_tenant(s, name, time_zone);
}

static struct cg_budget_row budget(struct cg_scope_ids ids, int64_t limit_tokens, int reset_period)
{
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    row.ids = ids;
    row.has_budget = true;
    row.mode = 1;
    row.limit_tokens = limit_tokens;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = reset_period;
    row.reservation_ttl_ms = 300000;
    return row;
}

/* Unix ms of a UTC date and time (proleptic Gregorian, days from civil). */
static int64_t utc_ms(int year, int month, int day, int hour, int minute, int second)
{
    int y = year - (month <= 2);
    int era = (y >= 0 ? y : y - 399) / 400;
    int yoe = y - era * 400;
    int doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    int64_t days = (int64_t)era * 146097 + doe - 719468;
    return ((days * 24 + hour) * 60 + minute) * 60000 + (int64_t)second * 1000;
}

/* Puts a budget at now_ms in a transaction of its own; returns the row as stored. */
static struct cg_budget_row put_at(struct cg_store *s, const char *tenant_id,
                                   const struct cg_budget_row *row, int64_t now_ms)
{
    struct cg_budget_row out;
    bool created = false;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc =
        cg_store_budget_put(s, tenant_id, row, 0, NULL, now_ms, NULL, &out, &created, &err);
    cr_assert_eq(rc, CG_OK, "budget_put: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return out;
}

/* Reads the path to ids at now_ms in a transaction of its own (with or without the lock). */
static int read_at(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids, bool lock,
                   int64_t now_ms, struct cg_budget_row rows[4])
{
    int n = -1;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, lock, false, now_ms, rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return n;
}

/* Adds to the counters of the path to ids, as Reserve and RecordUsage do, at now_ms. */
static void add_at(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids, int64_t used,
                   int64_t reserved, int64_t now_ms)
{
    struct cg_budget_row rows[4];
    int n = 0;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_path_read(s, tenant_id, &ids, true, false, now_ms, rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    rc = cg_store_path_add(s, tenant_id, rows, n, used, reserved, used * 10, reserved * 10, &err);
    cr_assert_eq(rc, CG_OK, "path_add: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
}

/* A Reserve: a reservation of tokens (and 10 micros a token) on ids expiring in ttl_ms (the
 * database's clock), held on every level of the path. Returns its id in rid. */
static void reserve(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                    int64_t tokens, uint32_t ttl_ms, char rid[CG_UUID_LEN + 1])
{
    struct cg_budget_row rows[4];
    int n = 0;
    struct cg_err err;
    struct cg_reservation res;
    cg_storetest_begin(s);
    cg_status rc =
        cg_store_path_read(s, tenant_id, &ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    rc = cg_store_reservation_insert(s, tenant_id, &ids, tokens, tokens * 10, NULL, NULL, NULL,
                                     ttl_ms, &res, &err);
    cr_assert_eq(rc, CG_OK, "reservation_insert: %s %s", cg_status_name(rc), err.msg);
    rc = cg_store_path_add(s, tenant_id, rows, n, 0, tokens, 0, tokens * 10, &err);
    cr_assert_eq(rc, CG_OK, "path_add: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    snprintf(rid, CG_UUID_LEN + 1, "%s", res.reservation_id);
}

static int expire_at(struct cg_store *s, const char *tenant_id, int64_t now_ms, int limit)
{
    int expired = -1;
    struct cg_err err;
    cg_status rc = cg_store_reservations_expire(s, tenant_id, now_ms, limit, &expired, &err);
    cr_assert_eq(rc, CG_OK, "reservations_expire: %s %s", cg_status_name(rc), err.msg);
    return expired;
}

/* What the administrative connection sees, as one integer. */
static long long db_int(const char *sql, const char *param)
{
    PGconn *db = cg_pgtest_connect(&T);
    long long v = cg_pgtest_query_int(db, sql, param);
    PQfinish(db);
    return v;
}

/* The reserved tokens of every level of the path s-1/t-1/a-1 of tenant_id, tenant first. */
static void reserved_levels(const char *tenant_id, long long out[4])
{
    static const char *const sql[] = {
        "SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid AND session_id = ''",
        "SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid AND session_id = 's-1'"
        " AND task_id = ''",
        "SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid AND task_id = 't-1'"
        " AND agent_id = ''",
        "SELECT reserved_tokens FROM scopes WHERE tenant_id = $1::uuid AND agent_id = 'a-1'",
    };
    for (int i = 0; i < 4; i++)
        out[i] = db_int(sql[i], tenant_id);
}

/* ------------------------------------------------------------------ expiry --- */

/* A tenant (UTC) with budgets on s-1, s-1/t-1 and s-1/t-1/a-1. */
static struct cg_tenant make_path(struct cg_store *s, const char *name)
{
    struct cg_tenant t = make_tenant(s, name, "UTC");
    int64_t now = cg_wall_ms();
    struct cg_budget_row session = budget(cg_storetest_scope("s-1", "", ""), 1000000, 1);
    struct cg_budget_row task = budget(cg_storetest_scope("s-1", "t-1", ""), 100000, 1);
    struct cg_budget_row agent = budget(cg_storetest_scope("s-1", "t-1", "a-1"), 10000, 1);
    (void)put_at(s, t.tenant_id, &session, now);
    (void)put_at(s, t.tenant_id, &task, now);
    (void)put_at(s, t.tenant_id, &agent, now);
    return t;
}

/* Whether cg_store_sweep_due finds tenant due at now_ms (the read spans every tenant of
 * the test's schema); *out gets its entry. */
static bool due_of(struct cg_store *s, const char *tenant, int64_t now_ms, struct cg_sweep_due *out)
{
    struct cg_sweep_due *found = calloc(CG_STORE_PAGE_MAX, sizeof *found);
    cr_assert_not_null(found);
    int count = 0;
    bool more = true;
    struct cg_err err;
    cr_assert_eq(cg_store_sweep_due(s, now_ms, CG_STORE_PAGE_MAX, found, &count, &more, &err),
                 CG_OK, "%s", err.msg);
    cr_assert_not(more);
    for (int i = 1; i < count; i++)
        cr_assert_lt(strcmp(found[i - 1].tenant_id, found[i].tenant_id), 0, "in id order, once");
    bool in = false;
    for (int i = 0; i < count && !in; i++) {
        if (strcmp(found[i].tenant_id, tenant) == 0) {
            *out = found[i];
            in = true;
        }
    }
    free(found);
    return in;
}

Test(sweep, an_expired_reservation_returns_its_hold_to_every_level, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_path(s, "acme");
    char rid[CG_UUID_LEN + 1], kept[CG_UUID_LEN + 1];
    reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), 300, 1000, rid);
    reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", ""), 7, 3600000, kept);
    long long levels[4];
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 307);
    cr_assert_eq(levels[3], 300);

    /* Before its expiry nothing moves; an hour later (no waiting: the clock is ours) the
     * hold returns to every level, and only that one. */
    int64_t now = cg_wall_ms();
    cr_assert_eq(expire_at(s, t.tenant_id, now - 60000, 100), 0);
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 307);
    int64_t later = now + 60000;
    cr_assert_eq(expire_at(s, t.tenant_id, later, 100), 1);
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 7, "tenant: %lld", levels[0]);
    cr_assert_eq(levels[1], 7, "session: %lld", levels[1]);
    cr_assert_eq(levels[2], 7, "task: %lld", levels[2]);
    cr_assert_eq(levels[3], 0, "agent: %lld", levels[3]);
    cr_assert_eq(db_int("SELECT reserved_cost_micros FROM scopes WHERE session_id = '' AND"
                        " tenant_id = $1::uuid",
                        t.tenant_id),
                 70);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", rid), 4);
    char later_text[24];
    snprintf(later_text, sizeof later_text, "%lld", (long long)later);
    cr_assert_eq(db_int("SELECT count(*) FROM reservations WHERE settled_at ="
                        " to_timestamp($1::int8 / 1e3)",
                        later_text),
                 1, "settled at the injected time");
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", kept), 1);

    /* Settled once: a second sweep finds nothing, and a Release that comes late finds it
     * settled (its tokens cannot be returned twice). */
    cr_assert_eq(expire_at(s, t.tenant_id, later, 100), 0);
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_reservation_settle(s, t.tenant_id, rid, 3, NULL, &err);
    cg_store_rollback(s);
    cr_assert_eq(rc, CG_FAILED_PRECONDITION, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "reservation_id: already expired");
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 7);
    cg_store_free(s);
}

Test(sweep, batches_are_bounded_and_the_soonest_expired_go_first, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_path(s, "acme");
    char rids[5][CG_UUID_LEN + 1];
    for (int i = 0; i < 5; i++)
        reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), 10 + i,
                (uint32_t)(1000 * (5 - i)), rids[i]);
    int64_t later = cg_wall_ms() + 3600000;
    /* rids[4] expires first, rids[0] last. */
    cr_assert_eq(expire_at(s, t.tenant_id, later, 2), 2);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", rids[4]),
                 4);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", rids[3]),
                 4);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", rids[0]),
                 1);
    long long levels[4];
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[3], 10 + 11 + 12, "%lld", levels[3]);
    cr_assert_eq(expire_at(s, t.tenant_id, later, 2), 2);
    cr_assert_eq(expire_at(s, t.tenant_id, later, 2), 1);
    cr_assert_eq(expire_at(s, t.tenant_id, later, 2), 0);
    reserved_levels(t.tenant_id, levels);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(levels[i], 0, "level %d: %lld", i + 1, levels[i]);

    /* The limit is checked; so is the rule that these functions run their own
     * transaction. */
    struct cg_err err;
    int expired = -1;
    cr_assert_eq(cg_store_reservations_expire(s, t.tenant_id, later, 0, &expired, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "limit: must be 1..1000");
    cr_assert_eq(cg_store_reservations_expire(s, t.tenant_id, later, 1001, &expired, &err),
                 CG_INVALID_ARGUMENT);
    cg_storetest_begin(s);
    cr_assert_eq(cg_store_reservations_expire(s, t.tenant_id, later, 10, &expired, &err),
                 CG_INTERNAL);
    cg_store_rollback(s);
    cg_store_free(s);
}

Test(sweep, a_reservation_another_transaction_holds_is_skipped_not_waited_for, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_store *other = test_store();
    struct cg_tenant t = make_path(s, "acme");
    char held[CG_UUID_LEN + 1], free_one[CG_UUID_LEN + 1];
    reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), 40, 1000, held);
    reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), 2, 2000, free_one);
    int64_t later = cg_wall_ms() + 3600000;

    /* A Commit in progress holds `held` (and nothing else yet: the reservation row is the
     * first lock it takes). The sweep settles the other one and leaves `held` to it. */
    struct cg_reservation res;
    struct cg_err err;
    cg_storetest_begin(other);
    cr_assert_eq(cg_store_reservation_lock(other, t.tenant_id, held, &res, &err), CG_OK, "%s",
                 err.msg);
    int64_t started = cg_mono_ms();
    cr_assert_eq(expire_at(s, t.tenant_id, later, 100), 1);
    cr_assert_lt(cg_mono_ms() - started, 2000, "the sweep waited for the held reservation");
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", held), 1);
    cr_assert_eq(db_int("SELECT state FROM reservations WHERE reservation_id = $1::uuid", free_one),
                 4);
    cg_store_rollback(other);

    /* Once it lets go (that Commit rolled back), the next sweep takes it. */
    cr_assert_eq(expire_at(s, t.tenant_id, later, 100), 1);
    long long levels[4];
    reserved_levels(t.tenant_id, levels);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(levels[i], 0, "level %d: %lld", i + 1, levels[i]);
    cg_store_free(other);
    cg_store_free(s);
}

#define SWEEPERS 4
#define MANY 250

struct sweeper_job {
    const char *tenant_id;
    int64_t now_ms;
    pthread_barrier_t *start;
    int expired;
    cg_status rc;
};

static void *sweeper_thread(void *arg)
{
    struct sweeper_job *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    pthread_barrier_wait(job->start);
    job->rc = s ? CG_OK : CG_INTERNAL;
    for (int n = 1; s != NULL && job->rc == CG_OK && n > 0;) {
        struct cg_err err;
        job->rc = cg_store_reservations_expire(s, job->tenant_id, job->now_ms, 10, &n, &err);
        job->expired += n;
    }
    cg_store_free(s);
    return NULL;
}

Test(sweep, replicas_sweeping_at_once_settle_each_reservation_once, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_path(s, "acme");
    char rid[CG_UUID_LEN + 1];
    reserve(s, t.tenant_id, cg_storetest_scope("s-1", "t-1", ""), 9, 3600000, rid); /* stays */
    PGconn *db = cg_pgtest_connect(&T);
    /* Many expiring holds, made in one statement (the counters as Reserve leaves them). */
    char sql[1024];
    snprintf(sql, sizeof sql,
             "INSERT INTO reservations (tenant_id, session_id, task_id, agent_id, tokens,"
             " cost_micros, expires_at) SELECT '%s', 's-1', 't-1', 'a-1', 3, 0,"
             " now() + interval '1 second' FROM generate_series(1, %d);"
             "UPDATE scopes SET reserved_tokens = reserved_tokens + %d WHERE tenant_id = '%s'"
             " AND (agent_id = 'a-1' OR agent_id = '' AND task_id IN ('t-1', '')"
             "  AND session_id IN ('s-1', ''))",
             t.tenant_id, MANY, 3 * MANY, t.tenant_id);
    cg_pgtest_exec(db, sql);
    PQfinish(db);
    long long levels[4];
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 9 + 3 * MANY);
    cr_assert_eq(levels[3], 3 * MANY);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, SWEEPERS);
    pthread_t threads[SWEEPERS];
    struct sweeper_job jobs[SWEEPERS];
    for (int i = 0; i < SWEEPERS; i++) {
        jobs[i] = (struct sweeper_job){t.tenant_id, cg_wall_ms() + 60000, &start, 0, CG_OK};
        cr_assert_eq(pthread_create(&threads[i], NULL, sweeper_thread, &jobs[i]), 0);
    }
    int total = 0, busy = 0;
    for (int i = 0; i < SWEEPERS; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(jobs[i].rc, CG_OK, "sweeper %d: %s", i, cg_status_name(jobs[i].rc));
        total += jobs[i].expired;
        busy += jobs[i].expired > 0;
    }
    pthread_barrier_destroy(&start);
    /* Each exactly once: a hold returned twice would take the counters below what the
     * reservation that stays still holds (9). */
    cr_assert_eq(total, MANY, "%d settled", total);
    cr_assert_gt(busy, 1, "the sweepers did not share the work");
    reserved_levels(t.tenant_id, levels);
    cr_assert_eq(levels[0], 9, "tenant: %lld", levels[0]);
    cr_assert_eq(levels[1], 9, "session: %lld", levels[1]);
    cr_assert_eq(levels[2], 9, "task: %lld", levels[2]);
    cr_assert_eq(levels[3], 0, "agent: %lld", levels[3]);
    cr_assert_eq(
        db_int("SELECT count(*) FROM reservations WHERE state = 4 AND tenant_id = $1", t.tenant_id),
        MANY);
    cg_store_free(s);
}

Test(sweep, a_pass_visits_every_tenant_page_by_page, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant tenants[3];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        tenants[i] = make_path(s, name);
        char rid[CG_UUID_LEN + 1];
        reserve(s, tenants[i].tenant_id, cg_storetest_scope("s-1", "t-1", "a-1"), 5, 1000, rid);
    }
    (void)make_tenant(s, "idle", "UTC"); /* nothing due: visited, untouched */

    /* Paging: by id, nothing skipped or repeated. */
    char ids[2][CG_UUID_LEN + 1], seen[8][CG_UUID_LEN + 1];
    int count = 0, total = 0;
    struct cg_err err;
    char after[CG_UUID_LEN + 1] = "";
    do {
        cr_assert_eq(cg_store_sweep_tenants(s, after, 2, ids, &count, &err), CG_OK, "%s", err.msg);
        for (int i = 0; i < count; i++) {
            cr_assert_lt(total, 8);
            memcpy(seen[total++], ids[i], sizeof ids[i]);
        }
        if (count > 0)
            snprintf(after, sizeof after, "%s", ids[count - 1]);
    } while (count == 2);
    cr_assert_eq(total, 4);
    for (int i = 1; i < total; i++)
        cr_assert_lt(strcmp(seen[i - 1], seen[i]), 0);
    cr_assert_eq(cg_store_sweep_tenants(s, "nope", 2, ids, &count, &err), CG_INVALID_ARGUMENT);
    cr_assert_eq(cg_store_sweep_tenants(s, "", 0, ids, &count, &err), CG_INVALID_ARGUMENT);

    /* What is due: the three tenants with expired holds, not the idle one. */
    struct cg_sweep_due due;
    int64_t later = cg_wall_ms() + 60000;
    for (int i = 0; i < 3; i++) {
        cr_assert(due_of(s, tenants[i].tenant_id, later, &due), "tenant %d is due", i);
        cr_assert(due.expired);
        cr_assert_not(due.reset);
        cr_assert_not(due.approvals);
        cr_assert_not(due_of(s, tenants[i].tenant_id, later - 3600000, &due));
    }
    /* Found through the due rows only: a read bounded to 1 row says more is due. */
    struct cg_sweep_due one[1];
    bool more = false;
    cr_assert_eq(cg_store_sweep_due(s, later, 1, one, &count, &more, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(count, 1);
    cr_assert(more);
    cr_assert_eq(cg_store_sweep_due(s, later, 0, one, &count, &more, &err), CG_INVALID_ARGUMENT);

    /* One pass of the server's sweeper settles all of them. */
    struct cg_rpc_env env = {.svc = {.store = s}};
    int expired = -1;
    cr_assert(cg_rpc_sweep(&env, later, &expired));
    cr_assert_eq(expired, 3);
    for (int i = 0; i < 3; i++) {
        long long levels[4];
        reserved_levels(tenants[i].tenant_id, levels);
        for (int l = 0; l < 4; l++)
            cr_assert_eq(levels[l], 0, "tenant %d level %d: %lld", i, l + 1, levels[l]);
    }
    cr_assert(cg_rpc_sweep(&env, later, &expired));
    cr_assert_eq(expired, 0);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ retention --- */

/* One event on s-1 of tenant_id, occurred now. */
static void append_event(struct cg_store *s, const char *tenant_id)
{
    struct cg_err err;
    struct cg_event_fields f;
    memset(&f, 0, sizeof f);
    cr_assert_eq(cg_store_begin(s, &err), CG_OK);
    cr_assert_eq(cg_store_event_append(s, tenant_id, &(struct cg_scope_ids){.session_id = "s-1"}, 2,
                                       &f, cg_wall_ms(), &err),
                 CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_commit(s, &err), CG_OK);
}

static long long events_of(const char *tenant_id)
{
    return db_int("SELECT count(*) FROM scope_events WHERE tenant_id = $1::uuid", tenant_id);
}

Test(sweep, retention_walks_every_tenant_once_an_interval, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant a = make_path(s, "ra"), b = make_path(s, "rb");
    append_event(s, a.tenant_id);
    append_event(s, b.tenant_id);
    int64_t now = cg_wall_ms(), hour = 3600 * 1000LL;
    struct cg_rpc_env env = {.svc = {.store = s}};
    struct cg_sweep_walk walk = {0};

    /* Events younger than an hour stay; the walk is over and the next one is due in an
     * interval. */
    cr_assert(cg_sweep_retention(&env.svc, &walk, now, 60000, 1000));
    cr_assert_not(walk.running);
    cr_assert_eq(walk.next_ms, now + 60000);
    cr_assert_eq(events_of(a.tenant_id), 1);
    cr_assert_eq(events_of(b.tenant_id), 1);

    /* Due again and two hours on: every tenant's old events go. */
    cr_assert(cg_sweep_retention(&env.svc, &walk, now + 2 * hour, 60000, 1000));
    cr_assert_eq(events_of(a.tenant_id), 0);
    cr_assert_eq(events_of(b.tenant_id), 0);

    /* Before the interval from that walk's start is over, no walk runs; at its end, one
     * does. */
    cr_assert_eq(walk.next_ms, now + 2 * hour + 60000);
    append_event(s, a.tenant_id);
    cr_assert(cg_sweep_retention(&env.svc, &walk, now + 2 * hour + 59000, 60000, 1000));
    cr_assert_eq(events_of(a.tenant_id), 1, "the walk is not due yet");
    cr_assert(cg_sweep_retention(&env.svc, &walk, now + 2 * hour + 60000, 60000, 1000));
    cr_assert_eq(events_of(a.tenant_id), 0);

    /* The wall clock set back by a day: the next walk is due an interval from then, not a
     * day later. */
    int64_t back = now + 2 * hour + 60000 - 24 * hour;
    cr_assert(cg_sweep_retention(&env.svc, &walk, back, 60000, 1000));
    cr_assert_eq(walk.next_ms, back + 60000);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ forecast --- */

static void db_exec(const char *sql)
{
    PGconn *db = cg_pgtest_connect(&T);
    cg_pgtest_exec(db, sql);
    PQfinish(db);
}

/* A bucket of 10 input tokens on s-1 of tenant_id at resolution, starting at `start` (SQL). */
static void add_bucket(const char *tenant_id, int resolution, const char *start)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO usage_rollups (tenant_id, session_id, task_id, agent_id, resolution,"
             " bucket_start, input_tokens, entries) VALUES ('%s', 's-1', '', '', %d, %s, 10, 1)",
             tenant_id, resolution, start);
    db_exec(sql);
}

/* The tenants cg_store_forecast_tenants lists for window_ms, a page of `page` at a time,
 * into seen (room for 8); returns how many. */
static int forecast_tenants(struct cg_store *s, int64_t window_ms, int page,
                            char seen[8][CG_UUID_LEN + 1])
{
    char ids[8][CG_UUID_LEN + 1], after[CG_UUID_LEN + 1] = "";
    int count = 0, total = 0;
    struct cg_err err;
    do {
        cr_assert_eq(cg_store_forecast_tenants(s, window_ms, after, page, ids, &count, &err), CG_OK,
                     "%s", err.msg);
        for (int i = 0; i < count; i++) {
            cr_assert_lt(total, 8);
            if (total > 0)
                cr_assert_lt(strcmp(seen[total - 1], ids[i]), 0, "in id order, once");
            memcpy(seen[total++], ids[i], sizeof ids[i]);
        }
        if (count > 0)
            snprintf(after, sizeof after, "%s", ids[count - 1]);
    } while (count == page);
    return total;
}

static bool listed(char seen[8][CG_UUID_LEN + 1], int n, const char *tenant_id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(seen[i], tenant_id) == 0)
            return true;
    return false;
}

Test(forecast, a_pass_lists_the_tenants_with_recent_spend_or_a_mark, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant now_spend = make_path(s, "fa"), old_spend = make_path(s, "fb"),
                     marked = make_path(s, "fc"), idle = make_path(s, "fd");
    add_bucket(now_spend.tenant_id, 1, "date_trunc('minute', now())");
    add_bucket(old_spend.tenant_id, 1, "date_trunc('minute', now()) - interval '2 hours'");
    add_bucket(idle.tenant_id, 2, "date_trunc('hour', now())"); /* not a minute bucket */
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO forecast_alerts (tenant_id, session_id, task_id, agent_id)"
             " VALUES ('%s', 's-1', '', '')",
             marked.tenant_id);
    db_exec(sql);

    /* A 15-minute window: the tenant with spend in it and the marked one, whatever the
     * page size. */
    char seen[8][CG_UUID_LEN + 1];
    for (int page = 1; page <= 3; page++) {
        int n = forecast_tenants(s, 15 * 60000, page, seen);
        cr_assert_eq(n, 2, "page %d: %d tenants", page, n);
        cr_assert(listed(seen, n, now_spend.tenant_id));
        cr_assert(listed(seen, n, marked.tenant_id));
    }
    /* A three-hour window takes in the older spend too; still not the idle tenant. */
    int n = forecast_tenants(s, 3 * 3600000LL, 2, seen);
    cr_assert_eq(n, 3);
    cr_assert(listed(seen, n, old_spend.tenant_id));
    cr_assert_not(listed(seen, n, idle.tenant_id));

    struct cg_err err;
    char ids[1][CG_UUID_LEN + 1];
    int count = 0;
    cr_assert_eq(cg_store_forecast_tenants(s, 60000, "", 0, ids, &count, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "limit") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_forecast_tenants(s, 0, "", 1, ids, &count, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "window_ms") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_forecast_tenants(s, 60000, "nope", 1, ids, &count, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "after_id") != NULL, "%s", err.msg);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ resets --- */

/* A tenant in time_zone with a tenant budget of reset_period set at now_ms, and a session
 * budget under it. */
static struct cg_tenant tenant_with_reset(struct cg_store *s, const char *time_zone,
                                          int reset_period, int64_t now_ms,
                                          struct cg_budget_row *stored)
{
    struct cg_tenant t = make_tenant(s, "acme", time_zone);
    struct cg_budget_row tenant = budget(cg_storetest_scope("", "", ""), 1000000, reset_period);
    struct cg_budget_row row = put_at(s, t.tenant_id, &tenant, now_ms);
    if (stored != NULL)
        *stored = row;
    struct cg_budget_row session = budget(cg_storetest_scope("s-1", "", ""), 100000, 1);
    (void)put_at(s, t.tenant_id, &session, now_ms);
    return t;
}

static long long tenant_used(const char *tenant_id)
{
    return db_int("SELECT used_tokens FROM scopes WHERE tenant_id = $1::uuid AND session_id = ''",
                  tenant_id);
}

Test(resets, daily_at_local_midnight_on_the_day_berlin_springs_forward, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    /* 2024-03-31 in Europe/Berlin: 02:00 CET becomes 03:00 CEST, so the day that started
     * at 2024-03-30T23:00Z ends at 2024-03-31T22:00Z, 23 hours later. */
    int64_t morning = utc_ms(2024, 3, 31, 8, 0, 0); /* 10:00 CEST */
    struct cg_budget_row stored;
    struct cg_tenant t = tenant_with_reset(s, "Europe/Berlin", 2, morning, &stored);
    int64_t day_start = utc_ms(2024, 3, 30, 23, 0, 0);
    int64_t midnight = utc_ms(2024, 3, 31, 22, 0, 0);
    cr_assert_eq(stored.reset_period, 2);
    cr_assert_eq(stored.period_start_ms, day_start, "%lld", (long long)stored.period_start_ms);
    cr_assert_eq(stored.next_reset_ms, midnight, "%lld", (long long)stored.next_reset_ms);
    cr_assert_eq(stored.next_reset_ms - stored.period_start_ms, 23 * 3600000LL);

    add_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), 500, 100, morning + 60000);

    /* 23:59:59 CEST: still the same day. */
    struct cg_budget_row rows[4];
    cr_assert_eq(
        read_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), true, midnight - 1000, rows), 2);
    cr_assert_eq(rows[0].used_tokens, 500);
    cr_assert_eq(rows[0].period_start_ms, day_start);
    cr_assert_eq(tenant_used(t.tenant_id), 500);

    /* 00:00:01 CEST: a request that comes before any sweep decides on the new day. Used
     * returns to 0 on the tenant level only; the reservation's hold stays. */
    cr_assert_eq(
        read_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), true, midnight + 1000, rows), 2);
    cr_assert_eq(rows[0].used_tokens, 0);
    cr_assert_eq(rows[0].used_cost_micros, 0);
    cr_assert_eq(rows[0].reserved_tokens, 100);
    cr_assert_eq(rows[0].reserved_cost_micros, 1000);
    cr_assert_eq(rows[0].period_start_ms, midnight);
    cr_assert_eq(rows[0].next_reset_ms, utc_ms(2024, 4, 1, 22, 0, 0)); /* 24 h: CEST all day */
    cr_assert_eq(rows[1].used_tokens, 500, "the session does not reset");
    cr_assert_eq(tenant_used(t.tenant_id), 0, "the reset is committed");

    /* Usage in the new day counts from 0, and is not reset again at the same boundary. */
    add_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), 42, 0, midnight + 2000);
    bool reset = true;
    struct cg_err err;
    cr_assert_eq(cg_store_reset_apply(s, t.tenant_id, midnight + 3000, &reset, &err), CG_OK);
    cr_assert_not(reset);
    cr_assert_eq(tenant_used(t.tenant_id), 42);
    cg_store_free(s);
}

Test(resets, daily_on_the_day_berlin_falls_back_lasts_25_hours, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    /* 2024-10-27: 03:00 CEST becomes 02:00 CET. */
    int64_t morning = utc_ms(2024, 10, 27, 9, 0, 0);
    struct cg_budget_row stored;
    struct cg_tenant t = tenant_with_reset(s, "Europe/Berlin", 2, morning, &stored);
    int64_t midnight = utc_ms(2024, 10, 27, 23, 0, 0);
    cr_assert_eq(stored.period_start_ms, utc_ms(2024, 10, 26, 22, 0, 0));
    cr_assert_eq(stored.next_reset_ms, midnight);
    add_at(s, t.tenant_id, cg_storetest_scope("", "", ""), 700, 0, morning);

    /* The unlocked read (GetBudget, CheckBudget) sees and applies the reset too. */
    struct cg_budget_row rows[4];
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), false, midnight - 1000, rows);
    cr_assert_eq(rows[0].used_tokens, 700);
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), false, midnight + 1000, rows);
    cr_assert_eq(rows[0].used_tokens, 0);
    cr_assert_eq(rows[0].period_start_ms, midnight);
    cr_assert_eq(tenant_used(t.tenant_id), 0);
    cg_store_free(s);
}

Test(resets, monthly_on_the_first_in_the_tenants_zone, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    /* America/New_York in winter is UTC-5: February starts at 2024-02-01T05:00Z. */
    int64_t set_at = utc_ms(2024, 1, 15, 12, 0, 0);
    struct cg_budget_row stored;
    struct cg_tenant t = tenant_with_reset(s, "America/New_York", 3, set_at, &stored);
    int64_t first = utc_ms(2024, 2, 1, 5, 0, 0);
    cr_assert_eq(stored.period_start_ms, utc_ms(2024, 1, 1, 5, 0, 0));
    cr_assert_eq(stored.next_reset_ms, first);
    add_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), 900, 0, set_at);

    /* 2024-01-31 23:59:59 local, then the boundary itself (a reset is due at it). */
    struct cg_sweep_due due;
    cr_assert_not(due_of(s, t.tenant_id, first - 1000, &due));
    struct cg_budget_row rows[4];
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), true, first - 1000, rows);
    cr_assert_eq(rows[0].used_tokens, 900);
    cr_assert(due_of(s, t.tenant_id, first, &due));
    cr_assert(due.reset);
    cr_assert_not(due.expired);
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), true, first, rows);
    cr_assert_eq(rows[0].used_tokens, 0);
    cr_assert_eq(rows[0].period_start_ms, first);
    /* March starts at 05:00Z too (DST begins on March 10). */
    cr_assert_eq(rows[0].next_reset_ms, utc_ms(2024, 3, 1, 5, 0, 0));
    cg_store_free(s);
}

Test(resets, the_sweeper_resets_a_tenant_nobody_calls_for, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    int64_t set_at = utc_ms(2024, 6, 10, 12, 0, 0);
    struct cg_tenant t = tenant_with_reset(s, "Asia/Tokyo", 2, set_at, NULL);
    struct cg_tenant other = tenant_with_reset(s, "UTC", 1, set_at, NULL);
    add_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), 300, 20, set_at);
    add_at(s, other.tenant_id, cg_storetest_scope("s-1", "", ""), 300, 0, set_at);
    /* Tokyo's midnight of 2024-06-11 is 2024-06-10T15:00Z. */
    int64_t midnight = utc_ms(2024, 6, 10, 15, 0, 0);

    struct cg_rpc_env env = {.svc = {.store = s}};
    int expired = -1;
    cr_assert(cg_rpc_sweep(&env, midnight - 1000, &expired));
    cr_assert_eq(tenant_used(t.tenant_id), 300);
    cr_assert(cg_rpc_sweep(&env, midnight + 1000, &expired));
    cr_assert_eq(tenant_used(t.tenant_id), 0);
    cr_assert_eq(
        db_int("SELECT reserved_tokens FROM scopes WHERE tenant_id = $1 AND session_id = ''",
               t.tenant_id),
        20);
    cr_assert_eq(tenant_used(other.tenant_id), 300, "a budget without a reset period stays");

    /* Applied once: the next pass (and a direct apply) find nothing due. */
    add_at(s, t.tenant_id, cg_storetest_scope("s-1", "", ""), 5, 0, midnight + 2000);
    cr_assert(cg_rpc_sweep(&env, midnight + 3000, &expired));
    bool reset = true;
    struct cg_err err;
    cr_assert_eq(cg_store_reset_apply(s, t.tenant_id, midnight + 3000, &reset, &err), CG_OK);
    cr_assert_not(reset);
    cr_assert_eq(tenant_used(t.tenant_id), 5);

    /* Days later with nobody around: one reset, to the day that contains now. */
    int64_t days_later = utc_ms(2024, 6, 14, 1, 0, 0); /* 10:00 in Tokyo on the 14th */
    cr_assert_eq(cg_store_reset_apply(s, t.tenant_id, days_later, &reset, &err), CG_OK);
    cr_assert(reset);
    struct cg_budget_row rows[4];
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), false, days_later, rows);
    cr_assert_eq(rows[0].used_tokens, 0);
    cr_assert_eq(rows[0].period_start_ms, utc_ms(2024, 6, 13, 15, 0, 0));
    cr_assert_eq(rows[0].next_reset_ms, utc_ms(2024, 6, 14, 15, 0, 0));
    cg_store_free(s);
}

Test(resets, setting_the_budget_again_keeps_the_period_changing_it_restarts_it, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    int64_t set_at = utc_ms(2024, 5, 20, 10, 0, 0);
    struct cg_budget_row stored;
    struct cg_tenant t = tenant_with_reset(s, "UTC", 2, set_at, &stored);
    cr_assert_eq(stored.period_start_ms, utc_ms(2024, 5, 20, 0, 0, 0));
    add_at(s, t.tenant_id, cg_storetest_scope("", "", ""), 100, 0, set_at);

    /* Same period, later the same day: the period and the usage stay. */
    struct cg_budget_row tenant = budget(cg_storetest_scope("", "", ""), 2000000, 2);
    struct cg_budget_row again = put_at(s, t.tenant_id, &tenant, set_at + 3600000);
    cr_assert_eq(again.period_start_ms, utc_ms(2024, 5, 20, 0, 0, 0));
    cr_assert_eq(again.next_reset_ms, utc_ms(2024, 5, 21, 0, 0, 0));
    cr_assert_eq(again.used_tokens, 100);

    /* Monthly from now on: the month containing now; usage so far is not wiped. */
    tenant.reset_period = 3;
    struct cg_budget_row monthly = put_at(s, t.tenant_id, &tenant, set_at + 7200000);
    cr_assert_eq(monthly.period_start_ms, utc_ms(2024, 5, 1, 0, 0, 0));
    cr_assert_eq(monthly.next_reset_ms, utc_ms(2024, 6, 1, 0, 0, 0));
    cr_assert_eq(monthly.used_tokens, 100);

    /* No reset period: no period. */
    tenant.reset_period = 1;
    struct cg_budget_row none = put_at(s, t.tenant_id, &tenant, set_at + 7200000);
    cr_assert_eq(none.period_start_ms, 0);
    cr_assert_eq(none.next_reset_ms, 0);
    struct cg_budget_row rows[4];
    (void)read_at(s, t.tenant_id, cg_storetest_scope("", "", ""), true, utc_ms(2025, 1, 1, 0, 0, 0),
                  rows);
    cr_assert_eq(rows[0].used_tokens, 100, "never reset");
    cg_store_free(s);
}

/* test_events_store.c - the event log (store.h, "events") against a real PostgreSQL:
 * events commit and roll back with their transaction, are numbered per scope, reach a
 * listener through NOTIFY, are caught up after a reconnection, and expire. */
#include <ctype.h>

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "pgtest.h"
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
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    cr_assert(s != NULL);
    return s;
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        struct cg_err err_;                                                                        \
        cg_err_clear(&err_);                                                                       \
        cg_status rc_ = (expr);                                                                    \
        (void)err_;                                                                                \
        cr_assert_eq(rc_, CG_OK, "%s: %s", #expr, cg_status_name(rc_));                            \
    } while (0)

/* A tenant with a session scope "s1" (created by a budget). */
static void make_scope(struct cg_store *s, char tenant[CG_UUID_LEN + 1], struct cg_scope_ids *ids)
{
    struct cg_tenant t;
    struct cg_err err;
    OK(cg_store_tenant_create(s, "events", "UTC", &t, &err));
    snprintf(tenant, CG_UUID_LEN + 1, "%s", t.tenant_id);
    memset(ids, 0, sizeof *ids);
    snprintf(ids->session_id, sizeof ids->session_id, "s1");
    struct cg_budget_row row, out, path[4];
    memset(&row, 0, sizeof row);
    row.ids = *ids;
    row.has_budget = true;
    row.mode = 1;
    row.limit_tokens = 1000;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = 1;
    bool created;
    int n;
    OK(cg_store_begin(s, &err));
    OK(cg_store_path_read(s, tenant, ids, true, true, cg_wall_ms(), path, &n, &err));
    OK(cg_store_budget_put(s, tenant, &row, 0, NULL, cg_wall_ms(), NULL, &out, &created, &err));
    OK(cg_store_commit(s, &err));
}

static void append(struct cg_store *s, const char *tenant, const struct cg_scope_ids *ids, int type,
                   bool commit)
{
    struct cg_err err;
    struct cg_event_fields f;
    memset(&f, 0, sizeof f);
    snprintf(f.ref_id, sizeof f.ref_id, "%s", "6f1c1e9e-0000-4000-8000-000000000001");
    f.ref_state = 2;
    OK(cg_store_begin(s, &err));
    OK(cg_store_event_append(s, tenant, ids, type, &f, cg_wall_ms(), &err));
    if (commit)
        OK(cg_store_commit(s, &err));
    else
        cg_store_rollback(s);
}

Test(events_store, numbered_per_scope_and_transactional, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = test_store();
    char tenant[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    make_scope(s, tenant, &ids);
    append(s, tenant, &ids, 2, true);
    append(s, tenant, &ids, 4, false); /* rolled back: no event, no number used */
    append(s, tenant, &ids, 7, true);
    struct cg_event ev[8];
    int count = 0;
    struct cg_err err;
    OK(cg_store_events_read(s, tenant, &ids, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 2);
    cr_assert_eq(ev[0].seq, 1);
    cr_assert_eq(ev[0].type, 2);
    cr_assert_eq(ev[1].seq, 2);
    cr_assert_eq(ev[1].type, 7);
    cr_assert_eq(ev[1].level, 2);
    cr_assert(ev[1].has_budget && ev[1].limit_tokens == 1000);
    cr_assert_str_eq(ev[1].fields.ref_id, "6f1c1e9e-0000-4000-8000-000000000001");
    cr_assert_eq(ev[1].fields.ref_state, 2);
    cr_assert_str_neq(ev[0].event_id, ev[1].event_id);
    /* A scope that does not exist. */
    struct cg_scope_ids missing = ids;
    snprintf(missing.session_id, sizeof missing.session_id, "nope");
    OK(cg_store_begin(s, &err));
    cg_status rc = cg_store_event_append(s, tenant, &missing, 2, NULL, cg_wall_ms(), &err);
    cr_assert_eq(rc, CG_NOT_FOUND);
    cg_store_rollback(s);
    cg_store_free(s);
}

Test(events_store, listener_hears_commits_in_order_and_catches_up, .init = setup, .fini = teardown,
     .timeout = 60)
{
    struct cg_store *s = test_store();
    char tenant[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    make_scope(s, tenant, &ids);
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store_listener *l = cg_store_listener_new(&opts);
    cr_assert(l != NULL);
    struct cg_event_notice notices[16];
    int count = 0;
    bool relistened = false;
    struct cg_err err;
    OK(cg_store_listener_wait(l, 10, notices, 16, &count, &relistened, &err));
    cr_assert(relistened);
    append(s, tenant, &ids, 2, true);
    append(s, tenant, &ids, 3, false);
    append(s, tenant, &ids, 6, true);
    int got = 0;
    struct cg_event_notice all[16];
    for (int tries = 0; tries < 50 && got < 2; tries++) {
        OK(cg_store_listener_wait(l, 100, notices, 16, &count, &relistened, &err));
        for (int i = 0; i < count; i++)
            if (strcmp(notices[i].tenant_id, tenant) == 0)
                all[got++] = notices[i];
    }
    cr_assert_eq(got, 2, "the rolled-back event is never announced");
    cr_assert_eq(all[0].seq, 1);
    cr_assert_eq(all[1].seq, 2);
    cr_assert_str_eq(all[1].ids.session_id, "s1");
    struct cg_event_want want = {.ids = ids, .after_seq = 0, .upto_seq = 2};
    struct cg_event ev[8];
    OK(cg_store_listener_fetch(l, tenant, &want, 1, 0, ev, 8, &count, &err));
    cr_assert_eq(count, 2);
    cr_assert_eq(ev[1].type, 6);
    /* Catch-up: events since a time, for scopes not named. */
    OK(cg_store_listener_fetch(l, tenant, NULL, 0, cg_wall_ms() - 60000, ev, 8, &count, &err));
    cr_assert_eq(count, 2);
    /* After the connection is killed, the next wait listens again. */
    cr_assert(cg_pgtest_kill_backends(&T) >= 1);
    relistened = false;
    for (int tries = 0; tries < 20 && !relistened; tries++) {
        struct cg_err e2;
        cg_status rc = cg_store_listener_wait(l, 100, notices, 16, &count, &relistened, &e2);
        (void)rc;
    }
    cr_assert(relistened, "listening again after the connection was lost");
    cg_store_listener_free(l);
    cg_store_free(s);
}

Test(events_store, retention_deletes_old_events, .init = setup, .fini = teardown, .timeout = 60)
{
    struct cg_store *s = test_store();
    char tenant[CG_UUID_LEN + 1];
    struct cg_scope_ids ids;
    make_scope(s, tenant, &ids);
    append(s, tenant, &ids, 2, true);
    append(s, tenant, &ids, 2, true);
    /* Two more tenants with two events each: one in the page, one not. */
    char other[CG_UUID_LEN + 1], outside[CG_UUID_LEN + 1];
    struct cg_scope_ids other_ids, outside_ids;
    make_scope(s, other, &other_ids);
    make_scope(s, outside, &outside_ids);
    for (int i = 0; i < 2; i++) {
        append(s, other, &other_ids, 2, true);
        append(s, outside, &outside_ids, 2, true);
    }
    char page[2][CG_UUID_LEN + 1];
    snprintf(page[0], sizeof page[0], "%s", tenant);
    snprintf(page[1], sizeof page[1], "%s", other);
    for (char *p = page[1]; *p; p++) /* either case */
        *p = (char)toupper((unsigned char)*p);
    int deleted = 0;
    struct cg_err err;
    OK(cg_store_events_expire(s, page, 2, cg_wall_ms() - 3600000, 100, &deleted, &err));
    cr_assert_eq(deleted, 0, "recent events stay");
    /* Bounded by limit across the page; the next statement takes the rest. */
    OK(cg_store_events_expire(s, page, 2, cg_wall_ms() + 1000, 3, &deleted, &err));
    cr_assert_eq(deleted, 3);
    OK(cg_store_events_expire(s, page, 2, cg_wall_ms() + 1000, 3, &deleted, &err));
    cr_assert_eq(deleted, 1);
    struct cg_event ev[4];
    int count = 0;
    OK(cg_store_events_read(s, tenant, &ids, 0, 4, ev, &count, &err));
    cr_assert_eq(count, 0);
    OK(cg_store_events_read(s, other, &other_ids, 0, 4, ev, &count, &err));
    cr_assert_eq(count, 0);
    OK(cg_store_events_read(s, outside, &outside_ids, 0, 4, ev, &count, &err));
    cr_assert_eq(count, 2, "a tenant outside the page keeps its events");
    /* A page is 1..CG_STORE_PAGE_MAX tenant ids. */
    snprintf(page[1], sizeof page[1], "not-a-tenant");
    cr_assert_eq(cg_store_events_expire(s, page, 2, cg_wall_ms(), 3, &deleted, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert_str_eq(err.msg, "tenant_ids[1]: not a tenant id");
    cr_assert_eq(cg_store_events_expire(s, page, 0, cg_wall_ms(), 3, &deleted, &err),
                 CG_INVALID_ARGUMENT);
    /* Numbering goes on after them. */
    append(s, tenant, &ids, 2, true);
    OK(cg_store_events_read(s, tenant, &ids, 0, 4, ev, &count, &err));
    cr_assert_eq(count, 1);
    cr_assert_eq(ev[0].seq, 3);
    cg_store_free(s);
}

/* CloseScope's hook: one USAGE_CHANGED for each level of the path whose allocated_tokens
 * moved, and what it saw. */
struct close_seen {
    int calls, n;
    int64_t parent_before, parent_after;
};

static int close_hook(void *ctx, const struct cg_budget_row *before,
                      const struct cg_budget_row *after, int n, struct cg_event_in *out, int cap)
{
    struct close_seen *seen = ctx;
    seen->calls++;
    seen->n = n;
    seen->parent_before = before[n - 2].allocated_tokens;
    seen->parent_after = after[n - 2].allocated_tokens;
    int count = 0;
    for (int i = 0; i < n && count < cap; i++) {
        if (before[i].allocated_tokens == after[i].allocated_tokens)
            continue;
        memset(&out[count], 0, sizeof out[count]);
        out[count].ids = after[i].ids;
        out[count].type = 2; /* USAGE_CHANGED */
        count++;
    }
    return count;
}

/* Events store the scope's allocated_tokens as the allocation trigger left them (0015), and
 * a close appends its hook's events with SCOPE_CLOSED. */
Test(events_store, events_carry_allocated_tokens, .init = setup, .fini = teardown, .timeout = 60)
{
    struct cg_store *s = test_store();
    char tenant[CG_UUID_LEN + 1];
    struct cg_scope_ids session;
    make_scope(s, tenant, &session);
    struct cg_scope_ids task = session;
    snprintf(task.task_id, sizeof task.task_id, "t1");
    struct cg_budget_row row, out, path[4];
    memset(&row, 0, sizeof row);
    row.ids = task;
    row.level = 3;
    row.has_budget = true;
    row.allocate_from_parent = true;
    row.mode = 1;
    row.limit_tokens = 300;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = 1;
    bool created;
    int n;
    struct cg_err err;
    OK(cg_store_begin(s, &err));
    OK(cg_store_path_read(s, tenant, &task, true, true, cg_wall_ms(), path, &n, &err));
    OK(cg_store_budget_put(s, tenant, &row, 0, NULL, cg_wall_ms(), NULL, &out, &created, &err));
    /* After the put's statement: its trigger moved the session's allocated_tokens. */
    OK(cg_store_event_append(s, tenant, &session, 2, NULL, cg_wall_ms(), &err));
    OK(cg_store_commit(s, &err));
    struct cg_event ev[8];
    int count = 0;
    OK(cg_store_events_read(s, tenant, &session, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 1);
    cr_assert_eq(ev[0].allocated_tokens, 300);
    cr_assert_eq(ev[0].used_tokens + ev[0].reserved_tokens, 0);

    struct close_seen seen = {0};
    struct cg_scope_close closed;
    OK(cg_store_scope_close_events(s, tenant, &task, close_hook, &seen, NULL, &closed, &err));
    cr_assert_eq(seen.calls, 1);
    cr_assert_eq(seen.n, 3);
    cr_assert_eq(closed.npath, 3);
    cr_assert_eq(seen.parent_before, 300, "the path before the close");
    cr_assert_eq(seen.parent_after, 0, "the share returned");
    OK(cg_store_events_read(s, tenant, &session, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 2);
    cr_assert_eq(ev[1].type, 2);
    cr_assert_eq(ev[1].allocated_tokens, 0);
    OK(cg_store_events_read(s, tenant, &task, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 1);
    cr_assert_eq(ev[0].type, 10, "SCOPE_CLOSED");
    cr_assert(ev[0].closed);
    /* Closing again changes nothing: the hook has nothing to say, no SCOPE_CLOSED. */
    OK(cg_store_scope_close_events(s, tenant, &task, close_hook, &seen, NULL, &closed, &err));
    cr_assert(closed.already_closed);
    OK(cg_store_events_read(s, tenant, &session, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 2);
    OK(cg_store_events_read(s, tenant, &task, 0, 8, ev, &count, &err));
    cr_assert_eq(count, 1);
    cg_store_free(s);
}

/* test_audit_store.c - the audit trail in the store (store.h "the audit trail") against a
 * real PostgreSQL: a committed change has its row, a rolled-back one has none, the actor and
 * request id are kept, and the listing pages newest first without gaps. */
#include <criterion/criterion.h>

#include <string.h>

#include "base/clock.h"
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

/* The tenant's rows of kind, newest first, into out (at most cap). */
static int rows_of(struct cg_store *s, const char *tenant_id, const char *kind,
                   struct cg_audit_event *out, int cap)
{
    struct cg_audit_filter f;
    memset(&f, 0, sizeof f);
    f.kind = kind;
    int count = 0;
    bool more = false;
    struct cg_err err = {0};
    cr_assert_eq(cg_store_audit_list(s, tenant_id, &f, 0, cap, out, &count, &more, &err), CG_OK,
                 "%s", err.msg);
    return count;
}

Test(audit_store, rolled_back_change_leaves_no_row_committed_one_has_its_row, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(s, "audit", NULL);
    struct cg_budget_row row = cg_storetest_budget("s1", "", "", 1000);
    const struct cg_audit actor = {.actor_key_id = "op1", .actor_role = 3, .request_id = "r-1"};
    struct cg_budget_row path[4], out;
    int n = 0;
    bool created = false;
    struct cg_err err = {0};

    cg_storetest_begin(s);
    cr_assert_eq(
        cg_store_path_read(s, t.tenant_id, &row.ids, true, true, cg_wall_ms(), path, &n, &err),
        CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &row, 0, "op1", cg_wall_ms(), &actor, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_store_rollback(s);
    struct cg_audit_event ev[4];
    cr_assert_eq(rows_of(s, t.tenant_id, "budget_set", ev, 4), 0, "a rollback keeps no row");

    cg_storetest_begin(s);
    cr_assert_eq(
        cg_store_path_read(s, t.tenant_id, &row.ids, true, true, cg_wall_ms(), path, &n, &err),
        CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_budget_put(s, t.tenant_id, &row, 0, "op1", cg_wall_ms(), &actor, &out,
                                     &created, &err),
                 CG_OK, "%s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(rows_of(s, t.tenant_id, "budget_set", ev, 4), 1);
    cr_assert_str_eq(ev[0].actor_key_id, "op1");
    cr_assert_eq(ev[0].actor_role, 3);
    cr_assert_str_eq(ev[0].request_id, "r-1");
    cr_assert_str_eq(ev[0].ids.session_id, "s1");
    cr_assert_null(ev[0].before_json, "a new budget has no before");
    cr_assert(ev[0].after_json != NULL && strstr(ev[0].after_json, "\"limit_tokens\": 1000"), "%s",
              ev[0].after_json ? ev[0].after_json : "(null)");
    cg_audit_events_cleanup(ev, 1);

    /* The tenant's creation (NULL audit: the server's admin key). */
    cr_assert_eq(rows_of(s, t.tenant_id, "tenant_created", ev, 4), 1);
    cr_assert_str_eq(ev[0].actor_key_id, "");
    cr_assert_eq(ev[0].actor_role, 0);
    cg_audit_events_cleanup(ev, 1);
    cg_store_free(s);
}

Test(audit_store, pages_newest_first_without_gaps_and_checks_arguments, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(s, "paging", NULL);
    for (int i = 0; i < 5; i++) {
        struct cg_budget_row row = cg_storetest_budget("p", "", "", 100 + i);
        (void)cg_storetest_put(s, t.tenant_id, &row);
    }
    struct cg_audit_filter f;
    memset(&f, 0, sizeof f);
    f.kind = "budget_set";
    struct cg_audit_event page[2];
    int64_t seen[8], before = 0;
    int total = 0, count = 0;
    bool more = true;
    struct cg_err err = {0};
    while (more) {
        cr_assert_eq(cg_store_audit_list(s, t.tenant_id, &f, before, 2, page, &count, &more, &err),
                     CG_OK, "%s", err.msg);
        for (int i = 0; i < count; i++) {
            cr_assert_lt(total, 8);
            seen[total++] = page[i].audit_id;
        }
        cg_audit_events_cleanup(page, count);
        if (count > 0)
            before = page[count - 1].audit_id;
    }
    cr_assert_eq(total, 5);
    for (int i = 1; i < total; i++)
        cr_assert_lt(seen[i], seen[i - 1], "newest first, each once");

    f.kind = "Bad";
    cr_assert_eq(cg_store_audit_list(s, t.tenant_id, &f, 0, 2, page, &count, &more, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "kind") != NULL, "%s", err.msg);
    f.kind = "";
    cr_assert_eq(cg_store_audit_list(s, t.tenant_id, &f, 0, 0, page, &count, &more, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert_eq(cg_store_audit_list(s, t.tenant_id, &f, -1, 2, page, &count, &more, &err),
                 CG_INVALID_ARGUMENT);
    cg_store_free(s);
}

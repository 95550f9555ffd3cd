/* test_alloc_store.c - allocation from the parent in the store (migration 0013): the trigger
 * keeps each parent's allocated_tokens equal to its open allocated children's shares on every
 * writer, and what path_add hands back (cg_store_alloc_mirror) equals what is stored, down to
 * row_version, so that the caches keyed by it stay right. Real PostgreSQL, a schema per test. */
#include <criterion/criterion.h>

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

/* cg_storetest_budget, allocated from its parent when allocate is set. */
static struct cg_budget_row budget(const char *session_id, const char *task_id,
                                   const char *agent_id, int64_t limit_tokens, bool allocate)
{
    struct cg_budget_row row = cg_storetest_budget(session_id, task_id, agent_id, limit_tokens);
    row.allocate_from_parent = allocate;
    return row;
}

/* Reads the path to ids in a transaction of its own. */
static int read_path(struct cg_store *s, const char *tenant_id, struct cg_scope_ids ids,
                     struct cg_budget_row rows[4])
{
    int n = -1;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc =
        cg_store_path_read(s, tenant_id, &ids, false, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_OK, "path_read: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return n;
}

Test(alloc_store, the_trigger_keeps_allocated_and_path_add_mirrors_it, .init = setup,
     .fini = teardown, .timeout = 60)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(s, "alloc", NULL);
    struct cg_budget_row row = budget("s", "", "", 1000, false);
    cg_storetest_put(s, t.tenant_id, &row);
    row = budget("s", "t", "", 400, true);
    cg_storetest_put(s, t.tenant_id, &row);
    row = budget("s", "t", "a", 100, true);
    cg_storetest_put(s, t.tenant_id, &row);

    struct cg_budget_row rows[4];
    cr_assert_eq(read_path(s, t.tenant_id, cg_storetest_scope("s", "t", "a"), rows), 4);
    cr_assert_eq(rows[1].allocated_tokens, 400);
    cr_assert_eq(rows[2].allocated_tokens, 100);
    cr_assert_eq(rows[0].allocated_tokens, 0, "the session is not allocated");
    cr_assert(rows[2].allocate_from_parent && rows[3].allocate_from_parent);

    /* A hold of 150 at the agent: its share 100 -> 0, the task's 400 -> 250. */
    struct cg_err err;
    int n = 0;
    cg_storetest_begin(s);
    cg_status rc =
        cg_store_path_read(s, t.tenant_id, &rows[3].ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_OK);
    rc = cg_store_path_add(s, t.tenant_id, rows, n, 0, 150, 0, 0, &err);
    cr_assert_eq(rc, CG_OK, "path_add: %s", err.msg);
    cg_storetest_commit(s);
    cr_assert_eq(rows[2].allocated_tokens, 0);
    cr_assert_eq(rows[1].allocated_tokens, 250);

    struct cg_budget_row stored[4];
    cr_assert_eq(read_path(s, t.tenant_id, rows[3].ids, stored), 4);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(rows[i].allocated_tokens, stored[i].allocated_tokens, "level %d", i + 1);
        cr_assert_eq(rows[i].row_version, stored[i].row_version, "row_version of level %d", i + 1);
        cr_assert_eq(rows[i].reserved_tokens, stored[i].reserved_tokens);
    }

    /* Giving the hold back restores both shares. */
    cg_storetest_begin(s);
    rc =
        cg_store_path_read(s, t.tenant_id, &rows[3].ids, true, false, cg_wall_ms(), rows, &n, &err);
    cr_assert_eq(rc, CG_OK);
    rc = cg_store_path_add(s, t.tenant_id, rows, n, 0, -150, 0, 0, &err);
    cr_assert_eq(rc, CG_OK);
    cg_storetest_commit(s);
    cr_assert_eq(read_path(s, t.tenant_id, rows[3].ids, stored), 4);
    cr_assert_eq(stored[1].allocated_tokens, 400);
    cr_assert_eq(stored[2].allocated_tokens, 100);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rows[i].row_version, stored[i].row_version);

    /* Closing the agent returns its share to the task. */
    struct cg_scope_close closed;
    rc = cg_store_scope_close(s, t.tenant_id, &rows[3].ids, &closed, &err);
    cr_assert_eq(rc, CG_OK, "close: %s", err.msg);
    cr_assert_eq(read_path(s, t.tenant_id, rows[3].ids, stored), 4);
    cr_assert_eq(stored[2].allocated_tokens, 0);
    cr_assert_eq(stored[1].allocated_tokens, 400);
    cg_store_free(s);
}

Test(alloc_store, the_tenant_cannot_allocate, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = cg_storetest_store(&T);
    struct cg_tenant t = cg_storetest_tenant(s, "alloc", NULL);
    struct cg_budget_row row = budget("", "", "", 1000, true);
    struct cg_budget_row out;
    bool created;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_budget_put(s, t.tenant_id, &row, 0, NULL, cg_wall_ms(), NULL, &out,
                                       &created, &err);
    cr_assert_eq(rc, CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "allocate_from_parent") != NULL, "%s", err.msg);
    cg_store_rollback(s);
    cg_store_free(s);
}

Test(alloc_store, mirror_counts_one_bump_per_changed_child, .timeout = 10)
{
    /* Two allocated siblings and their parent, as a batch hands them back. */
    struct cg_budget_row rows[3];
    memset(rows, 0, sizeof rows);
    rows[0] = budget("s", "", "", 1000, false);
    rows[0].level = 2;
    rows[0].row_version = 10;
    rows[0].allocated_tokens = 700;
    rows[1] = budget("s", "a", "", 400, true);
    rows[1].level = 3;
    rows[2] = budget("s", "b", "", 300, true);
    rows[2].level = 3;
    int64_t before[3] = {0, cg_store_alloc_share(&rows[1]), cg_store_alloc_share(&rows[2])};
    rows[1].reserved_tokens = 100;
    rows[2].used_tokens = 500; /* overrun: its share goes to 0, not below */
    cg_store_alloc_mirror(rows, 3, before, true);
    cr_assert_eq(rows[0].row_version, 12);
    cr_assert_eq(rows[0].allocated_tokens, 700 - 100 - 300);
    /* Without add_allocated only the versions move. */
    rows[0].row_version = 10;
    before[1] = 400;
    before[2] = 300;
    cg_store_alloc_mirror(rows, 3, before, false);
    cr_assert_eq(rows[0].row_version, 12);
    cr_assert_eq(rows[0].allocated_tokens, 300);
}

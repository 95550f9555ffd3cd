/* storetest.c - see storetest.h. */
#include "storetest.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "base/clock.h"

struct cg_store *cg_storetest_store(const struct cg_pgtest *t)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(t);
    struct cg_store *s = cg_store_new(&opts);
    cr_assert(s != NULL, "cg_store_new failed");
    return s;
}

struct cg_tenant cg_storetest_tenant(struct cg_store *s, const char *name, const char *time_zone)
{
    struct cg_tenant t;
    struct cg_err err;
    cg_status rc = cg_store_tenant_create(s, name, time_zone ? time_zone : "UTC", &t, &err);
    cr_assert_eq(rc, CG_OK, "tenant_create: %s %s", cg_status_name(rc), err.msg);
    return t;
}

struct cg_scope_ids cg_storetest_scope(const char *session_id, const char *task_id,
                                       const char *agent_id)
{
    struct cg_scope_ids ids;
    memset(&ids, 0, sizeof ids);
    snprintf(ids.session_id, sizeof ids.session_id, "%s", session_id);
    snprintf(ids.task_id, sizeof ids.task_id, "%s", task_id);
    snprintf(ids.agent_id, sizeof ids.agent_id, "%s", agent_id);
    return ids;
}

void cg_storetest_begin(struct cg_store *s)
{
    struct cg_err err;
    cg_status rc = cg_store_begin(s, &err);
    cr_assert_eq(rc, CG_OK, "begin: %s %s", cg_status_name(rc), err.msg);
}

void cg_storetest_commit(struct cg_store *s)
{
    struct cg_err err;
    cg_status rc = cg_store_commit(s, &err);
    cr_assert_eq(rc, CG_OK, "commit: %s %s", cg_status_name(rc), err.msg);
}

struct cg_budget_row cg_storetest_budget(const char *session_id, const char *task_id,
                                         const char *agent_id, int64_t limit_tokens)
{
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    row.ids = cg_storetest_scope(session_id, task_id, agent_id);
    row.has_budget = true;
    row.mode = 1;
    row.limit_tokens = limit_tokens;
    row.warning_ratio = 0.8;
    row.on_store_failure = 1;
    row.reset_period = 1;
    row.reservation_ttl_ms = 300000;
    return row;
}

struct cg_budget_row cg_storetest_put(struct cg_store *s, const char *tenant_id,
                                      const struct cg_budget_row *row)
{
    struct cg_budget_row out;
    bool created = false;
    struct cg_err err;
    cg_storetest_begin(s);
    cg_status rc = cg_store_budget_put(s, tenant_id, row, 0, "ci-key", cg_wall_ms(), NULL, &out,
                                       &created, &err);
    cr_assert_eq(rc, CG_OK, "budget_put: %s %s", cg_status_name(rc), err.msg);
    cg_storetest_commit(s);
    return out;
}

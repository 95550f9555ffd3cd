/* storetest.h - what the store's integration tests share on top of pgtest.h: a store for
 * the test's schema, tenants, scope ids and transactions that fail the test on any error.
 * For the test's main thread (Criterion assertions).
 */
#ifndef CG_TESTS_STORETEST_H
#define CG_TESTS_STORETEST_H

#include "pgtest.h"
#include "store/store.h"

/* A store on the test's schema and Redis database (the caller frees it). */
struct cg_store *cg_storetest_store(const struct cg_pgtest *t);

/* A new tenant in time_zone ("UTC" when NULL). */
struct cg_tenant cg_storetest_tenant(struct cg_store *s, const char *name, const char *time_zone);

/* Scope ids from the three ids ("" above the level). */
struct cg_scope_ids cg_storetest_scope(const char *session_id, const char *task_id,
                                       const char *agent_id);

/* A HARD budget row for the ids, with the default warning ratio, tiers and TTL. */
struct cg_budget_row cg_storetest_budget(const char *session_id, const char *task_id,
                                         const char *agent_id, int64_t limit_tokens);

/* Puts row in a transaction of its own (key id "ci-key"), asserting success; returns the
 * row as stored. */
struct cg_budget_row cg_storetest_put(struct cg_store *s, const char *tenant_id,
                                      const struct cg_budget_row *row);

/* cg_store_begin / cg_store_commit, asserting success. */
void cg_storetest_begin(struct cg_store *s);
void cg_storetest_commit(struct cg_store *s);

#endif

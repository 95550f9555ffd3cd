/* budget_path.h - a budget path as the budget service works on it: the store's rows of a
 * scope's path (tenant first, store.h) turned into core levels (core/budget.h) and decided
 * over (pure: no store, no lock, no allocation; any thread), the steps of a budget
 * transaction, and the read of a path from PostgreSQL (on the calling thread's store,
 * env->store, which must not be NULL for them).
 */
#ifndef CG_SERVICE_BUDGET_PATH_H
#define CG_SERVICE_BUDGET_PATH_H

#include <stdint.h>

#include "core/budget.h"
#include "service/service.h"
#include "store/store.h"

/* A store row as the core level it limits (approved extensions added to its limit). */
void cg_budget_row_level(const struct cg_budget_row *row, struct cg_budget_level *out);

/* The core decision (cg_budget_decide) over rows[0..n) (n <= CG_PATH_MAX) for tokens and
 * cost. */
void cg_budget_path_decide(const struct cg_budget_row *rows, int n, int64_t tokens, int64_t cost,
                           struct cg_budget_result *out);

/* The facts of a refusal at row (ErrorInfo metadata into err): where, which level, its
 * figures, requested tokens. */
void cg_budget_deny_facts(struct cg_err *err, const struct cg_budget_row *row, int64_t requested);

/* Into err: RESOURCE_EXHAUSTED (reason BUDGET_EXHAUSTED) naming the level of rows[0..n)
 * that refused tokens in r (a HARD DENY) with its figures (and compress_to_tokens when a
 * smaller prompt would fit: cg_budget_compress_to with output_tokens), or
 * FAILED_PRECONDITION (SCOPE_CLOSED) for a closed scope. Returns the status. */
cg_status cg_budget_deny(struct cg_err *err, const struct cg_budget_row *rows, int n,
                         const struct cg_budget_result *r, int64_t tokens, int64_t output_tokens);

/* The steps of a transaction on env->store: tx_begin and tx_commit copy a store error into
 * op->err (tx_commit rolls back first); tx_fail rolls back and does the same. serr is the
 * store's error of the step (begin clears it). Each returns the status the operation
 * answers with. */
cg_status cg_budget_tx_begin(const struct cg_svc_env *env, const struct cg_op *op,
                             struct cg_err *serr) CG_MUST_CHECK;
cg_status cg_budget_tx_commit(const struct cg_svc_env *env, const struct cg_op *op,
                              struct cg_err *serr) CG_MUST_CHECK;
cg_status cg_budget_tx_fail(const struct cg_svc_env *env, const struct cg_op *op,
                            const struct cg_err *serr);

/* Reads the path of ids (op->principal's tenant) from PostgreSQL without locks: one
 * statement, or a short transaction of its own when the read must write first (a reset
 * that is due: cg_store_path_peek). path has room for CG_PATH_MAX rows. On error op->err is
 * set. */
cg_status cg_budget_read_path(const struct cg_svc_env *env, const struct cg_op *op,
                              const struct cg_scope_ids *ids, struct cg_budget_row *path,
                              int *n) CG_MUST_CHECK;

#endif

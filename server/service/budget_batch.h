/* budget_batch.h - group commit for Reserve and Commit (service/budget_batch.c): concurrent
 * writes share one transaction (of one tenant, or of several: write_batch_scope), decided
 * as if each ran alone, each tenant's in arrival order.
 * The batcher holds domain requests and answers each through the completion callback its
 * caller gave; no protobuf here.
 */
#ifndef CG_SERVICE_BUDGET_BATCH_H
#define CG_SERVICE_BUDGET_BATCH_H

#include "service/budget_reserve.h"
#include "service/service.h"

typedef enum { CG_BATCH_RESERVE = 1, CG_BATCH_COMMIT = 2 } cg_batch_kind;

/* What a deferred request got, for its callback (borrowed for the callback's length). */
struct cg_budget_batch_answer {
    cg_batch_kind kind;
    const struct cg_budget_reserve_result *reserve; /* CG_BATCH_RESERVE */
    const struct cg_budget_commit_result *commit;   /* CG_BATCH_COMMIT */
};

/* Answers one deferred request: st and, when CG_OK, answer; otherwise the op's err says
 * what the client sees. Runs once, on whichever pool thread leads its batch
 * (possibly the submitter's, before cg_budget_batch_submit returns); the request's op and
 * ctx must stay valid until it runs, and nothing of them may be touched by the batcher
 * after it. */
typedef void (*cg_budget_batch_done_cb)(void *ctx, cg_status st,
                                        const struct cg_budget_batch_answer *answer);

/* Batches of several tenants run on at most this many pool threads at once. */
#define CG_BATCH_LEADERS 2

/* The batcher (env->batcher): thread-safe; freed after every pool thread that may lead a
 * batch has stopped. mixed: a batch takes the requests of several tenants (at most
 * CG_BATCH_LEADERS batches at once); otherwise each batch is one tenant's. NULL when out
 * of memory. */
struct cg_budget_batcher *cg_budget_batcher_new(bool mixed);
void cg_budget_batcher_free(struct cg_budget_batcher *batcher);

/* Queues a checked Reserve (reserve, its scope in reserve->ids) or Commit (commit; the
 * other NULL) of op's tenant into the tenant's queue, sets *fate (in the caller's frame) to
 * CG_OP_HANDED_ON and returns CG_OK: done(done_ctx, ...) answers it later, possibly before
 * this returns; after this the caller must not touch op's call. The requests are copied;
 * their strings and op are borrowed until done runs.
 * Without a store (env->store NULL: a completion-queue thread) it only queues when a
 * running leader will take the request; otherwise it sets *fate to CG_OP_NEEDS_STORE and returns
 * CG_OK without queueing anything (done never runs). Out of memory: RESOURCE_EXHAUSTED in op->err
 * (done never runs; *fate is CG_OP_DONE). */
cg_status cg_budget_batch_submit(const struct cg_svc_env *env, const struct cg_op *op,
                                 const struct cg_budget_reserve_request *reserve,
                                 const struct cg_budget_commit_request *commit,
                                 cg_budget_batch_done_cb done, void *done_ctx,
                                 cg_op_fate *fate) CG_MUST_CHECK;

#endif

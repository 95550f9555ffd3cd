/* pool.h - the worker pool that runs blocking work off the completion-queue threads.
 *
 * Each pool thread owns a context made by thread_init (for the server: its own PostgreSQL
 * and Redis connections), so jobs need no locks around their I/O. The queue is bounded:
 * when it is full, submit fails and the caller answers "overloaded" at once.
 * Thread-safe: submit may be called from any thread.
 */
#ifndef CG_BASE_POOL_H
#define CG_BASE_POOL_H

#include <stddef.h>

#include "base/status.h"

struct cg_job {
    /* Runs on a pool thread with that thread's context. The job is the caller's: the pool
     * never frees it, and does not touch it after run returns. */
    void (*run)(struct cg_job *job, void *thread_ctx);
    struct cg_job *next; /* the pool's */
};

struct cg_pool_opts {
    int threads;
    size_t max_queue;                           /* jobs waiting, beyond those running */
    void *(*thread_init)(void *arg, int index); /* NULL result stops the pool's creation */
    void (*thread_cleanup)(void *thread_ctx);
    void *arg;
    const char *name; /* thread names are "<name>-<index>" (top -H, perf); NULL: unnamed */
};

struct cg_pool;

/* Starts the threads. NULL with err filled when a thread or its context cannot be made
 * (threads already started are stopped again). */
struct cg_pool *cg_pool_new(const struct cg_pool_opts *opts, struct cg_err *err);

/* Queues a job. CG_UNAVAILABLE when the queue is full or the pool is stopping; the job
 * then never runs. */
cg_status cg_pool_submit(struct cg_pool *pool, struct cg_job *job) CG_MUST_CHECK;

/* Jobs waiting in the queue now (not those running). Thread-safe. */
size_t cg_pool_queued(struct cg_pool *pool);

/* Runs what is queued, then stops and joins the threads (cleaning their contexts).
 * Idempotent. */
void cg_pool_stop(struct cg_pool *pool);

/* Stops if needed and frees. NULL is a no-op. */
void cg_pool_free(struct cg_pool *pool);

#endif

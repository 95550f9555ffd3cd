/* pool.c - a FIFO of jobs under one mutex, drained by N threads. */
#include "base/pool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct worker {
    struct cg_pool *pool;
    pthread_t thread;
    void *ctx;
    int index;
};

struct cg_pool {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    struct cg_job *head, *tail;
    size_t queued;
    size_t max_queue;
    bool stopping;
    bool stopped;
    struct cg_pool_opts opts;
    struct worker *workers;
    int started;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct cg_pool *p = w->pool;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->nonempty, &p->lock);
        if (p->head == NULL)
            break; /* stopping and drained */
        struct cg_job *job = p->head;
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        pthread_mutex_unlock(&p->lock);
        job->next = NULL;
        job->run(job, w->ctx);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

struct cg_pool *cg_pool_new(const struct cg_pool_opts *opts, struct cg_err *err)
{
    struct cg_pool *p = calloc(1, sizeof *p);
    if (p == NULL) {
        cg_err_set(err, CG_NOMEM, "out of memory for the worker pool");
        return NULL;
    }
    p->opts = *opts;
    p->max_queue = opts->max_queue;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->nonempty, NULL);
    p->workers = calloc((size_t)opts->threads, sizeof *p->workers);
    if (p->workers == NULL) {
        cg_err_set(err, CG_NOMEM, "out of memory for the worker pool");
        cg_pool_free(p);
        return NULL;
    }
    for (int i = 0; i < opts->threads; i++) {
        struct worker *w = &p->workers[i];
        w->pool = p;
        w->index = i;
        if (opts->thread_init != NULL) {
            w->ctx = opts->thread_init(opts->arg, i);
            if (w->ctx == NULL) {
                cg_err_set(err, CG_NOMEM, "cannot set up worker pool thread %d", i);
                cg_pool_free(p);
                return NULL;
            }
        }
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc != 0) {
            if (opts->thread_cleanup != NULL)
                opts->thread_cleanup(w->ctx);
            w->ctx = NULL;
            cg_err_set(err, CG_IO, "cannot start worker pool thread %d: %s", i, strerror(rc));
            cg_pool_free(p);
            return NULL;
        }
        p->started++;
        if (opts->name != NULL) {
            char name[48];
            snprintf(name, sizeof name, "%.24s-%d", opts->name, i);
            name[15] = '\0'; /* the kernel keeps 15 bytes */
            pthread_setname_np(w->thread, name);
        }
    }
    return p;
}

cg_status cg_pool_submit(struct cg_pool *p, struct cg_job *job)
{
    pthread_mutex_lock(&p->lock);
    if (p->stopping || p->queued >= p->max_queue) {
        pthread_mutex_unlock(&p->lock);
        return CG_UNAVAILABLE;
    }
    job->next = NULL;
    if (p->tail != NULL)
        p->tail->next = job;
    else
        p->head = job;
    p->tail = job;
    p->queued++;
    pthread_cond_signal(&p->nonempty);
    pthread_mutex_unlock(&p->lock);
    return CG_OK;
}

size_t cg_pool_queued(struct cg_pool *p)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->queued;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void cg_pool_stop(struct cg_pool *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->stopped) {
        pthread_mutex_unlock(&p->lock);
        return;
    }
    p->stopping = true;
    p->stopped = true;
    pthread_cond_broadcast(&p->nonempty);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++) {
        pthread_join(p->workers[i].thread, NULL);
        if (p->opts.thread_cleanup != NULL)
            p->opts.thread_cleanup(p->workers[i].ctx);
        p->workers[i].ctx = NULL;
    }
}

void cg_pool_free(struct cg_pool *p)
{
    if (p == NULL)
        return;
    cg_pool_stop(p);
    /* Contexts made for threads that never started. */
    if (p->workers != NULL && p->opts.thread_cleanup != NULL)
        for (int i = p->started; i < p->opts.threads; i++)
            if (p->workers[i].ctx != NULL)
                p->opts.thread_cleanup(p->workers[i].ctx);
    free(p->workers);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->nonempty);
    free(p);
}

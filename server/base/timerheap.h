/* timerheap.h - a binary min-heap of timers, one per completion-queue thread.
 *
 * Timers are embedded in their owner (the per-call context), so adding one never
 * allocates beyond the heap's array. Equal due times fire in the order they were added.
 * Not thread-safe: a heap belongs to one thread. Pure: the caller passes the time in.
 */
#ifndef CG_BASE_TIMERHEAP_H
#define CG_BASE_TIMERHEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct cg_timer {
    int64_t due;  /* in the caller's clock units */
    uint64_t seq; /* insertion order, breaks ties */
    size_t index; /* position in the heap; SIZE_MAX when not armed */
    void *data;   /* the owner's, untouched by the heap */
};

struct cg_timer_heap {
    struct cg_timer **items;
    size_t len;
    size_t cap;
    uint64_t next_seq;
};

/* An empty heap. */
void cg_timer_heap_init(struct cg_timer_heap *heap);

/* Frees the array; the timers themselves belong to their owners. */
void cg_timer_heap_cleanup(struct cg_timer_heap *heap);

/* Marks a timer as not armed (call once before first use). */
void cg_timer_init(struct cg_timer *timer, void *data);

/* Whether the timer is in a heap. */
bool cg_timer_is_armed(const struct cg_timer *timer);

/* Arms timer to fire at `due`. Returns CG_NOMEM (timer unchanged) when the array
 * cannot grow, CG_INVALID_ARGUMENT when the timer is already armed. */
cg_status cg_timer_heap_add(struct cg_timer_heap *heap, struct cg_timer *timer,
                            int64_t due) CG_MUST_CHECK;

/* Disarms timer. A timer that is not armed is left alone. */
void cg_timer_heap_remove(struct cg_timer_heap *heap, struct cg_timer *timer);

/* The earliest timer, or NULL when the heap is empty. Borrowed. */
struct cg_timer *cg_timer_heap_peek(const struct cg_timer_heap *heap);

/* Removes and returns the earliest timer if its due time is <= now, else NULL. */
struct cg_timer *cg_timer_heap_pop_due(struct cg_timer_heap *heap, int64_t now);

#endif

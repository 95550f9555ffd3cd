/* timerheap.c - array-backed binary heap with back-indices for O(log n) removal. */
#include "base/timerheap.h"

#include <stdlib.h>

static bool earlier(const struct cg_timer *a, const struct cg_timer *b)
{
    return a->due < b->due || (a->due == b->due && a->seq < b->seq);
}

static void place(struct cg_timer_heap *h, size_t i, struct cg_timer *t)
{
    h->items[i] = t;
    t->index = i;
}

static void sift_up(struct cg_timer_heap *h, size_t i)
{
    struct cg_timer *t = h->items[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!earlier(t, h->items[parent]))
            break;
        place(h, i, h->items[parent]);
        i = parent;
    }
    place(h, i, t);
}

static void sift_down(struct cg_timer_heap *h, size_t i)
{
    struct cg_timer *t = h->items[i];
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= h->len)
            break;
        if (child + 1 < h->len && earlier(h->items[child + 1], h->items[child]))
            child++;
        if (!earlier(h->items[child], t))
            break;
        place(h, i, h->items[child]);
        i = child;
    }
    place(h, i, t);
}

void cg_timer_heap_init(struct cg_timer_heap *h)
{
    h->items = NULL;
    h->len = 0;
    h->cap = 0;
    h->next_seq = 0;
}

void cg_timer_heap_cleanup(struct cg_timer_heap *h)
{
    for (size_t i = 0; i < h->len; i++)
        h->items[i]->index = SIZE_MAX;
    free(h->items);
    cg_timer_heap_init(h);
}

void cg_timer_init(struct cg_timer *t, void *data)
{
    t->due = 0;
    t->seq = 0;
    t->index = SIZE_MAX;
    t->data = data;
}

bool cg_timer_is_armed(const struct cg_timer *t)
{
    return t->index != SIZE_MAX;
}

cg_status cg_timer_heap_add(struct cg_timer_heap *h, struct cg_timer *t, int64_t due)
{
    if (cg_timer_is_armed(t))
        return CG_INVALID_ARGUMENT;
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct cg_timer **items = realloc(h->items, cap * sizeof *items);
        if (items == NULL)
            return CG_NOMEM;
        h->items = items;
        h->cap = cap;
    }
    t->due = due;
    t->seq = h->next_seq++;
    h->items[h->len] = t;
    t->index = h->len++;
    sift_up(h, t->index);
    return CG_OK;
}

void cg_timer_heap_remove(struct cg_timer_heap *h, struct cg_timer *t)
{
    if (!cg_timer_is_armed(t) || t->index >= h->len || h->items[t->index] != t)
        return;
    size_t i = t->index;
    t->index = SIZE_MAX;
    h->len--;
    if (i == h->len)
        return;
    struct cg_timer *last = h->items[h->len];
    place(h, i, last);
    /* The moved timer may belong above or below its new place. */
    if (i > 0 && earlier(last, h->items[(i - 1) / 2]))
        sift_up(h, i);
    else
        sift_down(h, i);
}

struct cg_timer *cg_timer_heap_peek(const struct cg_timer_heap *h)
{
    return h->len ? h->items[0] : NULL;
}

struct cg_timer *cg_timer_heap_pop_due(struct cg_timer_heap *h, int64_t now)
{
    if (h->len == 0 || h->items[0]->due > now)
        return NULL;
    struct cg_timer *t = h->items[0];
    cg_timer_heap_remove(h, t);
    return t;
}

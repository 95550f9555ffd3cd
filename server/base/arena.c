/* arena.c - bump allocation in a chain of blocks; big requests get a block of their own. */
#include "base/arena.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 16u

struct block {
    struct block *next;
    size_t size; /* usable bytes after the header */
    size_t used;
    /* data follows, aligned by the header's size */
};

struct cg_arena {
    struct block *head;  /* block being filled */
    struct block *first; /* kept across resets */
    size_t first_size;
    size_t used;
    size_t cap;
};

#define HEADER_SIZE ((sizeof(struct block) + ALIGN - 1) & ~(size_t)(ALIGN - 1))

static unsigned char *block_data(struct block *b)
{
    return (unsigned char *)b + HEADER_SIZE;
}

static struct block *block_new(size_t size)
{
    struct block *b = malloc(HEADER_SIZE + size);
    if (b == NULL)
        return NULL;
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

struct cg_arena *cg_arena_new(size_t first_block, size_t cap)
{
    if (first_block < 256)
        first_block = 256;
    struct cg_arena *a = calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    a->first = block_new(first_block);
    if (a->first == NULL) {
        free(a);
        return NULL;
    }
    a->head = a->first;
    a->first_size = first_block;
    a->cap = cap;
    return a;
}

static void free_chain(struct block *b, struct block *stop)
{
    while (b != NULL && b != stop) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
}

void cg_arena_free(struct cg_arena *a)
{
    if (a == NULL)
        return;
    free_chain(a->head, NULL);
    free(a);
}

void cg_arena_reset(struct cg_arena *a)
{
    /* Blocks are pushed at the head, so the first block is the last of the chain. */
    free_chain(a->head, a->first);
    a->first->next = NULL;
    a->first->used = 0;
    a->head = a->first;
    a->used = 0;
}

void *cg_arena_alloc(struct cg_arena *a, size_t size)
{
    if (size == 0)
        size = 1;
    if (size > SIZE_MAX - ALIGN)
        return NULL;
    size_t rounded = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
    if (a->used + rounded > a->cap || a->used + rounded < a->used)
        return NULL;

    struct block *b = a->head;
    if (b->size - b->used < rounded) {
        /* Grow geometrically, but never more than what is left under the cap. */
        size_t want = b->size * 2 > rounded ? b->size * 2 : rounded;
        size_t left = a->cap - a->used; /* >= rounded, checked above */
        if (want > left)
            want = left;
        struct block *nb = block_new(want);
        if (nb == NULL)
            return NULL;
        nb->next = a->head;
        a->head = nb;
        b = nb;
    }
    void *p = block_data(b) + b->used;
    b->used += rounded;
    a->used += rounded;
    return p;
}

void *cg_arena_calloc(struct cg_arena *a, size_t n, size_t size)
{
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    void *p = cg_arena_alloc(a, n * size);
    if (p != NULL)
        memset(p, 0, n * size);
    return p;
}

char *cg_arena_strndup(struct cg_arena *a, const char *s, size_t len)
{
    if (len == SIZE_MAX)
        return NULL;
    char *p = cg_arena_alloc(a, len + 1);
    if (p == NULL)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *cg_arena_strdup(struct cg_arena *a, const char *s)
{
    return cg_arena_strndup(a, s, strlen(s));
}

char *cg_arena_sprintf(struct cg_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = cg_arena_alloc(a, (size_t)n + 1);
    if (p == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

size_t cg_arena_used(const struct cg_arena *a)
{
    return a->used;
}

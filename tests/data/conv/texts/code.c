/* validate.c - the dialect rules of validate.h in one forward pass, with a hash table of tool
 * call ids. */
#include "core/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"

/* One tool call as the pass sees it. */
struct call {
    const struct cg_str *id;
    size_t message, part;
    unsigned results;
    bool open;     /* awaiting its results */
    bool reported; /* dangling already said */
};

struct state {
    const struct cg_validate_input *in;
    cg_dialect d;
    struct cg_validate_result *out;
    size_t cap;
    struct call *calls;
    size_t n_calls;
    size_t *table; /* open addressing: index + 1 into calls, 0 empty */
    size_t table_size;
    bool oom;
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The first call with this id, or NULL. */
static struct call *find(struct state *s, const struct cg_str *id)
{
    if (s->table_size == 0)
        return NULL;
    size_t mask = s->table_size - 1;
    for (size_t i = hash_bytes(id->ptr, id->len) & mask;; i = (i + 1) & mask) {
        size_t slot = s->table[i];
        if (slot == 0)
            return NULL;
        struct call *c = &s->calls[slot - 1];
        if (c->id->len == id->len && memcmp(c->id->ptr, id->ptr, id->len) == 0)
            return c;
    }
}

static void insert(struct state *s, size_t index)
{

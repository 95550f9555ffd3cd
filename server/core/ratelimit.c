/* ratelimit.c - token buckets per caller (ratelimit.h). */
#include "core/ratelimit.h"

#include <stdlib.h>
#include <string.h>

#define PROBES 16

struct bucket {
    uint8_t key[CG_RATE_KEY_BYTES];
    bool used;
    double tokens;
    int64_t last_ms; /* when tokens was last brought up to date */
};

struct cg_rate_limiter {
    struct bucket *buckets;
    size_t mask;
    double per_ms; /* tokens a millisecond */
    double burst;
};

struct cg_rate_limiter *cg_rate_limiter_new(size_t capacity, int64_t rate_per_min, int64_t burst)
{
    if (rate_per_min < 1 || burst < 1)
        return NULL;
    size_t n = 16;
    while (n < capacity && n < ((size_t)1 << 30))
        n *= 2;
    struct cg_rate_limiter *l = calloc(1, sizeof *l);
    if (l == NULL || (l->buckets = calloc(n, sizeof *l->buckets)) == NULL) {
        free(l);
        return NULL;
    }
    l->mask = n - 1;
    l->per_ms = (double)rate_per_min / 60000.0;
    l->burst = (double)burst;
    return l;
}

void cg_rate_limiter_free(struct cg_rate_limiter *l)
{
    if (l == NULL)
        return;
    free(l->buckets);
    free(l);
}

/* The key's bucket, or the one to reuse for it (empty or least recently used). */
static struct bucket *find(struct cg_rate_limiter *l, const uint8_t *key)
{
    size_t h;
    memcpy(&h, key, sizeof h); /* the key is a hash already */
    struct bucket *victim = NULL;
    for (size_t i = 0; i < PROBES; i++) {
        struct bucket *b = &l->buckets[(h + i) & l->mask];
        if (b->used && memcmp(b->key, key, CG_RATE_KEY_BYTES) == 0)
            return b;
        if (!b->used) {
            if (victim == NULL || victim->used)
                victim = b;
        } else if (victim == NULL || (victim->used && b->last_ms < victim->last_ms)) {
            victim = b;
        }
    }
    victim->used = true;
    memcpy(victim->key, key, CG_RATE_KEY_BYTES);
    victim->tokens = l->burst;
    victim->last_ms = INT64_MIN;
    return victim;
}

bool cg_rate_limiter_take(struct cg_rate_limiter *l, const uint8_t key[CG_RATE_KEY_BYTES],
                          int64_t now_ms, int64_t *retry_ms)
{
    *retry_ms = 0;
    struct bucket *b = find(l, key);
    if (b->last_ms != INT64_MIN && now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * l->per_ms;
        if (b->tokens > l->burst)
            b->tokens = l->burst;
    }
    if (b->last_ms == INT64_MIN || now_ms > b->last_ms)
        b->last_ms = now_ms;
    if (b->tokens >= 1.0) {
        b->tokens -= 1.0;
        return true;
    }
    int64_t wait = (int64_t)((1.0 - b->tokens) / l->per_ms) + 1;
    *retry_ms = wait > 0 ? wait : 1;
    return false;
}

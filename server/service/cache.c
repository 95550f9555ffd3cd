/* cache.c - the in-memory cache of keys and budget rows that lets CheckBudget answer
 * on a completion-queue thread (see cache.h for the contract and the staleness bound).
 *
 * Why in service/ and not in store/: a cg_store is one pool thread's connections and is
 * never shared, while this cache is shared by every thread of the process, completion-
 * queue threads included, which have no store at all. What it holds are the values the
 * services decide on (the authenticated principal's key entry, the rows of a path), and
 * the services are where every write commits (cg_cache_written) and where the events
 * thread's notifications arrive; store/ stays "connections, one thread each". The object
 * itself is owned by the application object (app/app.h; no globals here).
 *
 * Layout: two tables (keys, rows), each SHARDS shards with a mutex, a fixed array of
 * entries and a bucket array of chains (indexes), so that threads rarely meet on a lock
 * and no lock is held for more than a hash walk and a copy. The arrays are allocated once
 * (cache_rows_max rows) and touched as entries are stored: the shards' entries are
 * interleaved, so the used ones are the array's start, in huge pages where the kernel
 * gives them (base/bigmem.h: a lookup over 100,000 agents then rarely misses the TLB). An
 * entry's name is kept in it when under NAME_INLINE bytes, else malloc'd when it is stored
 * (on the pool, never on a hit). A full shard evicts with a clock hand (the next entry in
 * the array), O(1), without bookkeeping on the read path.
 * A row entry keeps every field of struct cg_budget_row but its ids (its name says them)
 * and its description: 528 bytes on x86-64 with a name of up to 79 bytes inside it, see
 * cache.h for the memory per path. A lookup hashes its name eight bytes at a time (seeded
 * per process: ids cannot be picked to fill one chain), and a path's lookups first hint
 * the CPU to fetch their four buckets, then the entries at the heads of those chains
 * (prefetch_head), so that their cache misses overlap.
 *
 * Correctness rests on two numbers:
 *   - row_version (migration 0008), bumped by PostgreSQL on every write of a row, in
 *     commit order: a cached row is only ever replaced by the same or a newer version, so a
 *     fill that read before a write and arrives after it cannot undo it;
 *   - the ticket, a process-wide sequence advanced by every drop that names no version (a
 *     whole tenant, a reconnection of the listener, a revocation): a fill carries the
 *     ticket taken before its read and such a drop newer than it refuses it, because the
 *     value it read may be older than what the drop announced. A drop keeps the entry
 *     (for the on_store_failure policy and for its version) but marks it not fresh. For
 *     rows not cached, the shard remembers its latest drop instead (a rare extra miss,
 *     never a stale hit); so does an evicted entry's drop.
 *
 * How other replicas' writes arrive (no expiry needed): every write transaction that
 * changes scope rows appends WatchUsage events naming each row it changed (USAGE_CHANGED
 * at least; service/budget_events.c, the sweeper's SQL, resets), and the NOTIFY sent
 * right after its COMMIT (store_pg.c, NOTIFY_SQL) announces on cg_rows each of those
 * rows with its row_version read after the COMMIT (the committed one or a later one).
 * The events thread gives each to cg_cache_row_announced: a copy at that version or newer
 * stays (this process's own write, put by cg_cache_written before the notification comes
 * back), an older one is dropped and remembers the version (need_version): a fill older
 * than that is refused whatever its ticket. That closes the race the ticket alone left
 * open: a fill from Redis that started after the drop but read Redis before the writer's
 * Redis write would carry an older row with a newer ticket; the version refuses it, and
 * the read goes to PostgreSQL, which has the write (it was committed before it was
 * announced). Writes that do not know their rows (the sweeper's budget resets,
 * CloseScope, approvals) also announce their tenant (cg_cache_dropped,
 * cg_store_tenant_announce), which drops all of its rows; the sweeper's expired
 * reservations do know theirs and are put like any write (sweep.c, expire_batches), so a
 * fleet whose agents die holding reservations costs other replicas a refill of those paths
 * only. The events themselves no longer drop rows: they name the same rows without a
 * version and would drop this process's own writes (a replica of an older version, which
 * does not send cg_rows, is therefore heard only through cache_row_ttl_ms: lower it during
 * such a rolling upgrade).
 *
 * Why this NOTIFY costs the write path no round trip: a NOTIFY inside the write
 * transaction would take PostgreSQL's database-wide notify lock at commit, which
 * serializes the commits of all writers (no group commit). This one is the statement that
 * already carried the events' wake-ups after the COMMIT (its own transaction, one per
 * committed transaction or batch: the batcher commits many requests at once); it now also
 * looks up each named row's row_version by primary key.
 *
 * Bounds that remain: between a COMMIT and the arrival of its announcement (the writer's
 * round trip for the NOTIFY, delivery, and the events thread's next step: milliseconds,
 * more when that thread is busy reading events for watchers) another replica may answer
 * CheckBudget from the row before the write. A CheckBudget answer is advice: Reserve
 * decides in PostgreSQL, locking the path's rows (cg_store_path_read with lock) and never
 * reading this cache, so a HARD limit is never overspent by a stale hit. A NOTIFY that
 * fails after its COMMIT (the writer lost PostgreSQL) is kept and sent with that
 * connection's next commit; until then, at most cache_row_ttl_ms (a backstop, 5 minutes by
 * default). Listener down: the cache stops serving (cg_cache_set_live) rather than serving
 * within a TTL, because an outage of the LISTEN connection usually means PostgreSQL is away
 * too, where the on_store_failure policy (which reads the kept rows) is the answer; when
 * it is back, everything filled before is stale (notifications sent meanwhile are lost).
 * A path whose scope does not exist is not cached (CheckBudget answers NOT_FOUND from
 * PostgreSQL): CheckBudget is asked of scopes that have rows, so no negative entry is
 * needed for the fleet's path.
 *
 * Keys: a revoked, changed or deleted key is announced on cg_keys by a trigger
 * (migrations/0017), whoever changed it; the events thread drops it (cg_cache_key_drop),
 * so every replica refuses it as soon as the notification arrives. While the listener is
 * down keys are still served, for at most key_ttl_ms after their fill (refusing every
 * key would fail every call during a blip of one connection); when it comes back every
 * key filled before is forgotten (cg_cache_key_drop_all, from cg_cache_set_live), since
 * the revocations announced meanwhile were lost. A key dropped by a notification is read
 * again from PostgreSQL, not Redis (cg_cache_key_dropped): the Redis entry may still be
 * the one from before the revocation, if the revoking replica has not overwritten it yet
 * or failed to.
 */
#include "service/cache.h"

#include <stddef.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigmem.h"
#include "base/clock.h"
#include "base/crypto.h"
#include "core/hash64.h"
#include "core/siphash.h"

#define SHARDS 64
#define NAME_MAX_BYTES (CG_UUID_LEN + 3 * (CG_SCOPE_ID_MAX + 1) + 8)
#define NAME_INLINE 80 /* names shorter than this live in the entry itself */
#define NO_ENTRY (-1)

/* What both tables' entries start with. The name is the lookup's last check, so it sits
 * next to the hash: a hit reads one or two cache lines of the entry before its value. */
struct slot {
    uint64_t hash;
    const char *name;     /* inline, or malloc'd at insert and freed at eviction; NULL: free */
    uint32_t len;         /* of name */
    int32_t next;         /* next index in the bucket's chain */
    bool dropped;         /* not served fresh any more; still readable with allow_stale */
    uint64_t fill_ticket; /* ticket of the fill (or write) that stored the value */
    uint64_t drop_seq;    /* ticket of the last drop of this entry */
    int64_t filled_ms;    /* cg_mono_ms of that fill */
    char inline_name[NAME_INLINE];
};

/* A name to look up: its bytes (not NUL-terminated: a path's levels are prefixes of one
 * buffer), length and hash. */
struct name {
    const char *p;
    size_t len;
    uint64_t hash;
};

struct key_entry {
    struct slot h;
    struct cg_key_auth key;
    struct cg_key_vouch vouch; /* the tag of a token that matched key.secret_hash */
};

/* A cached row keeps what CheckBudget decides and answers on: every field of struct
 * cg_budget_row but its ids (they are the entry's name, and the caller's path gives them
 * back) and its description (no CheckBudget answer shows it). The two byte ranges below are
 * copied as they are, so that a field added to the row is cached without a change here. */
#define ROW_HEAD_AT offsetof(struct cg_budget_row, level)
#define ROW_HEAD_LEN (offsetof(struct cg_budget_row, description) - ROW_HEAD_AT)
#define ROW_TAIL_AT offsetof(struct cg_budget_row, used_tokens)
#define ROW_TAIL_LEN (sizeof(struct cg_budget_row) - ROW_TAIL_AT)
_Static_assert(offsetof(struct cg_budget_row, ids) == 0 &&
                   offsetof(struct cg_budget_row, level) <
                       offsetof(struct cg_budget_row, description) &&
                   offsetof(struct cg_budget_row, description) <
                       offsetof(struct cg_budget_row, used_tokens),
               "struct cg_budget_row: ids, then level .. description, then used_tokens ..");

struct row_entry {
    struct slot h;
    int64_t row_version;  /* of the row held (a copy of the one inside tail) */
    int64_t need_version; /* the newest version announced (cg_cache_row_announced): an
                             older fill is refused whenever it read */
    uint64_t allowance_epoch;
    int64_t allowance_spent;
    unsigned char head[ROW_HEAD_LEN];
    unsigned char tail[ROW_TAIL_LEN];
};

struct shard {
    pthread_mutex_t lock;
    unsigned char *mem; /* its first entry; entry i at mem + i * step (see struct table) */
    size_t stride;      /* an entry's bytes, starting with a struct slot */
    size_t step;        /* SHARDS * stride */
    size_t cap;
    size_t used;
    size_t hand; /* clock hand for eviction */
    int32_t *buckets;
    size_t nbuckets; /* a power of two */
    uint64_t drop_seq_max;
};

/* The shards' entries are interleaved in one block: entry i of shard k is entry
 * i * SHARDS + k of the block. Each shard fills its entries in order, so what the table
 * uses is the block's start, whatever the shards: touched memory follows the entries
 * stored, in huge pages (base/bigmem.h) where the kernel gives them. The chains' heads
 * are one block too, shard after shard. */
struct table {
    struct shard shards[SHARDS];
    unsigned char *mem;
    size_t mem_size;
    int32_t *buckets;
    size_t buckets_size;
};

struct cg_cache {
    uint64_t hash_seed;  /* random per process: ids cannot be chosen to share a chain */
    uint64_t tag_key[2]; /* random per process: the key of the tokens' tags */
    bool tag_key_set;
    int64_t key_ttl_ms;
    int64_t row_ttl_ms; /* 0: rows have no age limit */
    size_t max_rows;
    struct table keys;
    struct table rows;
    atomic_uint_fast64_t seq;           /* the ticket: advanced by every drop */
    atomic_uint_fast64_t flush_seq;     /* fills with an older ticket are never fresh */
    atomic_uint_fast64_t key_flush_seq; /* the same for keys (cg_cache_key_drop_all) */
    atomic_bool live;
    atomic_bool store_down;
    atomic_uint_fast64_t outage_epoch;
    atomic_uint_fast64_t row_hits, row_misses, rows_stored, rows_refused, key_hits, key_misses;
    atomic_uint_fast64_t rows_announced, rows_evicted;
};

/* ---------------------------------------------------------------- tables ---------- */

static bool table_init(struct table *t, size_t max_entries, size_t stride)
{
    size_t per = (max_entries + SHARDS - 1) / SHARDS;
    if (per < 1)
        per = 1;
    size_t nb = 1;
    while (nb < per * 2)
        nb <<= 1;
    for (int i = 0; i < SHARDS; i++)
        pthread_mutex_init(&t->shards[i].lock, NULL);
    t->mem_size = per * SHARDS * stride;
    t->buckets_size = nb * SHARDS * sizeof *t->buckets;
    t->mem = cg_bigmem_alloc(t->mem_size);
    t->buckets = cg_bigmem_alloc(t->buckets_size);
    if (t->mem == NULL || t->buckets == NULL)
        return false;
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &t->shards[i];
        s->cap = per;
        s->stride = stride;
        s->step = stride * SHARDS;
        s->mem = t->mem + (size_t)i * stride;
        s->nbuckets = nb;
        s->buckets = t->buckets + (size_t)i * nb;
        for (size_t b = 0; b < nb; b++)
            s->buckets[b] = NO_ENTRY;
    }
    return true;
}

static struct slot *slot_at(const struct shard *s, size_t i)
{
    return (struct slot *)(void *)(s->mem + i * s->step);
}

static void table_cleanup(struct table *t)
{
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &t->shards[i];
        for (size_t k = 0; s->mem != NULL && k < s->cap; k++) {
            struct slot *e = slot_at(s, k);
            if (e->name != e->inline_name)
                free((void *)e->name);
        }
        pthread_mutex_destroy(&s->lock);
    }
    cg_bigmem_free(t->mem, t->mem_size);
    cg_bigmem_free(t->buckets, t->buckets_size);
}

static struct shard *shard_of(struct table *t, uint64_t hash)
{
    return &t->shards[(hash >> 48) % SHARDS];
}

/* Without the lock, the lookups of a path's levels hint the CPU to fetch what they will
 * read, so that their cache misses overlap rather than come one after another: first the
 * bucket of each level's chain (an address: the array and its size never change), then the
 * entry at the head of each chain, read with a relaxed atomic load (the buckets are written,
 * under the lock, with relaxed atomic stores). A stale head only wastes the hint: the
 * lookup itself runs locked. */
static int32_t *bucket_of(const struct table *t, const struct name *n)
{
    const struct shard *s = &t->shards[(n->hash >> 48) % SHARDS];
    return &s->buckets[n->hash & (s->nbuckets - 1)];
}

static void prefetch_chain(const struct table *t, const struct name *n)
{
    __builtin_prefetch(bucket_of(t, n));
}

static void prefetch_head(const struct table *t, const struct name *n)
{
    const struct shard *s = &t->shards[(n->hash >> 48) % SHARDS];
    int32_t head = __atomic_load_n(bucket_of(t, n), __ATOMIC_RELAXED);
    if (head == NO_ENTRY || (size_t)head >= s->cap)
        return;
    const unsigned char *e = (const unsigned char *)slot_at(s, (size_t)head);
    for (size_t off = 0; off < s->stride; off += 64)
        __builtin_prefetch(e + off);
}

/* With the shard locked: the entry named n, or NULL. */
static struct slot *find(struct shard *s, const struct name *n)
{
    for (int32_t i = s->buckets[n->hash & (s->nbuckets - 1)]; i != NO_ENTRY;) {
        struct slot *e = slot_at(s, (size_t)i);
        if (e->hash == n->hash && e->len == n->len && memcmp(e->name, n->p, n->len) == 0)
            return e;
        i = e->next;
    }
    return NULL;
}

static void unlink_entry(struct shard *s, struct slot *e, int32_t idx)
{
    int32_t *p = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*p != NO_ENTRY && *p != idx)
        p = &slot_at(s, (size_t)*p)->next;
    if (*p == idx) /* atomic: p may be a bucket, which prefetch_head reads unlocked */
        __atomic_store_n(p, e->next, __ATOMIC_RELAXED);
    if (e->name != e->inline_name)
        free((void *)e->name);
    e->name = NULL;
}

/* With the shard locked: a new entry for name (evicting the one under the clock hand when
 * the shard is full), zeroed but for its name; NULL when out of memory. While the shard
 * fills, the hand walks over free slots; once full, it evicts the next one: O(1) either
 * way. An evicted entry's drops live on in drop_seq_max, which refuses fills that read
 * before them. */
static struct slot *insert(struct shard *s, const struct name *n, bool *evicted)
{
    char *copy = NULL;
    if (n->len >= NAME_INLINE && (copy = malloc(n->len + 1)) == NULL)
        return NULL;
    struct slot *e = slot_at(s, s->hand);
    int32_t idx = (int32_t)s->hand;
    for (size_t k = 0; s->used < s->cap && e->name != NULL && k < s->cap; k++) {
        s->hand = (s->hand + 1) % s->cap;
        e = slot_at(s, s->hand);
        idx = (int32_t)s->hand;
    }
    s->hand = (s->hand + 1) % s->cap;
    *evicted = e->name != NULL;
    if (*evicted) {
        if (e->drop_seq > s->drop_seq_max)
            s->drop_seq_max = e->drop_seq;
        unlink_entry(s, e, idx);
    } else {
        s->used++;
    }
    memset(e, 0, s->stride);
    char *to = copy != NULL ? copy : e->inline_name;
    memcpy(to, n->p, n->len);
    to[n->len] = '\0';
    e->name = to;
    e->len = (uint32_t)n->len;
    e->hash = n->hash;
    size_t b = n->hash & (s->nbuckets - 1);
    e->next = s->buckets[b];
    __atomic_store_n(&s->buckets[b], idx, __ATOMIC_RELAXED); /* see prefetch_head */
    return e;
}

/* Appends the separator (0x1f: no id holds it) and id to buf[*len..), NUL-terminated;
 * false when it does not fit in NAME_MAX_BYTES. No printf here: every lookup names. */
static bool name_append(char *buf, size_t *len, const char *id)
{
    size_t k = strlen(id);
    if (*len + 1 + k >= NAME_MAX_BYTES)
        return false;
    buf[(*len)++] = '\x1f';
    memcpy(buf + *len, id, k + 1);
    *len += k;
    return true;
}

/* The names of the rows of ids' path, all in buf: level k's name is its first out[k-1].len
 * bytes (the tenant id, then each level's id after a separator); hashed from level
 * `hashed` down (a row's own name needs only the last). Returns the path's depth
 * (cg_scope_level), 0 when the names do not fit. */
static int path_names(const struct cg_cache *c, const char *tenant_id,
                      const struct cg_scope_ids *ids, int hashed, char buf[NAME_MAX_BYTES],
                      struct name out[CG_PATH_ROWS_MAX])
{
    int depth = cg_scope_level(ids);
    const char *parts[] = {ids->session_id, ids->task_id, ids->agent_id};
    size_t len = strlen(tenant_id);
    if (len >= NAME_MAX_BYTES)
        return 0;
    memcpy(buf, tenant_id, len + 1);
    for (int level = 1; level <= depth; level++) {
        if (level > 1 && !name_append(buf, &len, parts[level - 2]))
            return 0;
        out[level - 1] =
            (struct name){buf, len, level >= hashed ? cg_hash64(c->hash_seed, buf, len) : 0};
    }
    return depth;
}

/* The name of ids' own row (the deepest of its path); false when too long. */
static bool row_name(const struct cg_cache *c, const char *tenant_id,
                     const struct cg_scope_ids *ids, char buf[NAME_MAX_BYTES], struct name *out)
{
    struct name path[CG_PATH_ROWS_MAX];
    int depth = path_names(c, tenant_id, ids, cg_scope_level(ids), buf, path);
    if (depth > 0)
        *out = path[depth - 1];
    return depth > 0;
}

static bool key_name(const struct cg_cache *c, const char *tenant_id, const char *key_id,
                     char buf[NAME_MAX_BYTES], struct name *out)
{
    size_t len = strlen(tenant_id);
    if (len >= NAME_MAX_BYTES)
        return false;
    memcpy(buf, tenant_id, len + 1);
    if (!name_append(buf, &len, key_id))
        return false;
    *out = (struct name){buf, len, cg_hash64(c->hash_seed, buf, len)};
    return true;
}

static void count(atomic_uint_fast64_t *c)
{
    atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* ---------------------------------------------------------------- life ------------ */

struct cg_cache *cg_cache_new(const struct cg_cache_opts *opts)
{
    struct cg_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    size_t max_keys = opts->max_keys;
    if (max_keys == 0 || max_keys > CG_CACHE_KEYS_MAX)
        max_keys = CG_CACHE_KEYS_MAX;
    size_t max_rows = opts->max_rows;
    if (max_rows == 0)
        max_rows = CG_CACHE_ROWS_DEFAULT;
    if (max_rows > CG_CACHE_ROWS_LIMIT)
        max_rows = CG_CACHE_ROWS_LIMIT;
    c->max_rows = max_rows;
    c->key_ttl_ms = opts->key_ttl_ms > 0 ? opts->key_ttl_ms : 0;
    c->row_ttl_ms = opts->row_ttl_ms > 0 ? opts->row_ttl_ms : 0;
    if (cg_random_bytes(&c->hash_seed, sizeof c->hash_seed) != CG_OK)
        c->hash_seed = (uint64_t)cg_mono_ms() * 0x9e3779b97f4a7c15ULL;
    /* Without a random key a tag could be computed from outside: no vouching then. */
    c->tag_key_set = cg_random_bytes(c->tag_key, sizeof c->tag_key) == CG_OK;
    atomic_init(&c->seq, 1);
    atomic_init(&c->flush_seq, 1);
    atomic_init(&c->key_flush_seq, 1);
    atomic_init(&c->live, false);
    atomic_init(&c->store_down, false);
    atomic_init(&c->outage_epoch, 1);
    if (!table_init(&c->keys, max_keys, sizeof(struct key_entry)) ||
        !table_init(&c->rows, max_rows, sizeof(struct row_entry))) {
        cg_cache_free(c);
        return NULL;
    }
    return c;
}

void cg_cache_free(struct cg_cache *cache)
{
    if (cache == NULL)
        return;
    table_cleanup(&cache->keys);
    table_cleanup(&cache->rows);
    free(cache);
}

size_t cg_cache_row_bytes(void)
{
    return sizeof(struct row_entry) + 2 * sizeof(int32_t);
}

uint64_t cg_cache_ticket(struct cg_cache *cache)
{
    return cache ? atomic_load(&cache->seq) : 0;
}

/* A new ticket for a drop: fills that took an older one are refused. */
static uint64_t next_drop(struct cg_cache *c)
{
    return atomic_fetch_add(&c->seq, 1) + 1;
}

/* ---------------------------------------------------------------- keys ------------ */

bool cg_cache_key_get(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                      int64_t now_ms, struct cg_key_auth *out)
{
    return cg_cache_key_get_vouched(cache, tenant_id, key_id, now_ms, out, NULL);
}

bool cg_cache_key_get_vouched(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                              int64_t now_ms, struct cg_key_auth *out, struct cg_key_vouch *vouch)
{
    if (vouch != NULL)
        vouch->set = false;
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || cache->key_ttl_ms == 0 || !key_name(cache, tenant_id, key_id, buf, &n))
        return false;
    struct shard *s = shard_of(&cache->keys, n.hash);
    pthread_mutex_lock(&s->lock);
    struct key_entry *e = (struct key_entry *)find(s, &n);
    bool hit = e != NULL && !e->h.dropped &&
               e->h.fill_ticket >= atomic_load(&cache->key_flush_seq) &&
               now_ms - e->h.filled_ms < cache->key_ttl_ms;
    if (hit)
        *out = e->key;
    if (hit && vouch != NULL)
        *vouch = e->vouch;
    pthread_mutex_unlock(&s->lock);
    count(hit ? &cache->key_hits : &cache->key_misses);
    return hit;
}

void cg_cache_token_tag(const struct cg_cache *cache, const char *token, size_t len,
                        uint8_t tag[CG_CACHE_TAG_LEN])
{
    cg_siphash128(cache->tag_key, token, len, tag);
}

void cg_cache_key_vouch(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                        const uint8_t secret_hash[32], const uint8_t tag[CG_CACHE_TAG_LEN])
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || !cache->tag_key_set || !key_name(cache, tenant_id, key_id, buf, &n))
        return;
    struct shard *s = shard_of(&cache->keys, n.hash);
    pthread_mutex_lock(&s->lock);
    struct key_entry *e = (struct key_entry *)find(s, &n);
    if (e != NULL && !e->h.dropped &&
        memcmp(e->key.secret_hash, secret_hash, sizeof e->key.secret_hash) == 0) {
        e->vouch.set = true;
        memcpy(e->vouch.tag, tag, CG_CACHE_TAG_LEN);
    }
    pthread_mutex_unlock(&s->lock);
}

void cg_cache_key_put(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, uint64_t ticket, int64_t now_ms)
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || cache->key_ttl_ms == 0 || !key_name(cache, tenant_id, key_id, buf, &n))
        return;
    struct shard *s = shard_of(&cache->keys, n.hash);
    pthread_mutex_lock(&s->lock);
    struct key_entry *e = (struct key_entry *)find(s, &n);
    bool newer = ticket >= atomic_load(&cache->key_flush_seq) &&
                 (e == NULL ? ticket >= s->drop_seq_max : ticket >= e->h.drop_seq);
    bool evicted = false;
    if (newer && e == NULL)
        e = (struct key_entry *)insert(s, &n, &evicted);
    if (newer && e != NULL) {
        e->key = *entry;
        e->vouch.set = false;
        e->h.fill_ticket = ticket;
        e->h.filled_ms = now_ms;
        e->h.dropped = false;
    }
    pthread_mutex_unlock(&s->lock);
}

void cg_cache_key_drop(struct cg_cache *cache, const char *tenant_id, const char *key_id)
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || !key_name(cache, tenant_id, key_id, buf, &n))
        return;
    uint64_t seq = next_drop(cache);
    struct shard *s = shard_of(&cache->keys, n.hash);
    pthread_mutex_lock(&s->lock);
    struct slot *e = find(s, &n);
    bool evicted = false;
    /* A key never cached here gets an entry too, empty and dropped, so that its next
     * lookup reads PostgreSQL (cg_cache_key_dropped) rather than a Redis entry that the
     * revoking replica may have failed to mark. */
    if (e == NULL)
        e = insert(s, &n, &evicted);
    if (e != NULL) {
        e->dropped = true;
        e->drop_seq = seq;
    }
    s->drop_seq_max = seq;
    pthread_mutex_unlock(&s->lock);
}

bool cg_cache_key_dropped(struct cg_cache *cache, const char *tenant_id, const char *key_id)
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || !key_name(cache, tenant_id, key_id, buf, &n))
        return false;
    struct shard *s = shard_of(&cache->keys, n.hash);
    pthread_mutex_lock(&s->lock);
    struct slot *e = find(s, &n);
    bool dropped = e != NULL && e->dropped;
    pthread_mutex_unlock(&s->lock);
    return dropped;
}

void cg_cache_key_drop_all(struct cg_cache *cache)
{
    if (cache == NULL)
        return;
    /* As cg_cache_drop_all: entries filled before are never served again, and a fill in
     * flight (its ticket older) is refused. */
    atomic_store(&cache->key_flush_seq, next_drop(cache));
}

/* ---------------------------------------------------------------- rows ------------ */

/* The row held by e into out; its ids are the prefix of ids at level (e's name). */
static void row_out(const struct row_entry *e, const struct cg_scope_ids *ids, int level,
                    struct cg_budget_row *out)
{
    cg_scope_prefix(ids, level, &out->ids);
    memcpy((unsigned char *)out + ROW_HEAD_AT, e->head, ROW_HEAD_LEN);
    out->description[0] = '\0';
    memcpy((unsigned char *)out + ROW_TAIL_AT, e->tail, ROW_TAIL_LEN);
}

/* With the shard locked: stores row under the version rule; true when stored or renewed.
 * Refused: a row older than the one held, or than the newest version announced for it
 * (need_version: a write of another replica that this fill may have read before), or read
 * before a drop that named no version (ticket older than drop_seq). */
static bool put_row(struct cg_cache *c, struct shard *s, const struct name *n,
                    const struct cg_budget_row *row, uint64_t ticket, int64_t now_ms)
{
    struct row_entry *e = (struct row_entry *)find(s, n);
    if (e == NULL) {
        if (ticket < s->drop_seq_max)
            return false;
        bool evicted = false;
        e = (struct row_entry *)insert(s, n, &evicted);
        if (e == NULL)
            return false;
        if (evicted)
            count(&c->rows_evicted);
    } else {
        if (row->row_version < e->row_version || row->row_version < e->need_version ||
            ticket < e->h.drop_seq)
            return false;
        if (row->row_version == e->row_version && ticket < e->h.fill_ticket && !e->h.dropped)
            return false; /* same value, older knowledge: keep the newer fill time */
    }
    e->row_version = row->row_version;
    memcpy(e->head, (const unsigned char *)row + ROW_HEAD_AT, ROW_HEAD_LEN);
    memcpy(e->tail, (const unsigned char *)row + ROW_TAIL_AT, ROW_TAIL_LEN);
    if (ticket > e->h.fill_ticket)
        e->h.fill_ticket = ticket;
    e->h.filled_ms = now_ms;
    e->h.dropped = false;
    return true;
}

int cg_cache_rows_put(struct cg_cache *cache, const char *tenant_id,
                      const struct cg_budget_row *rows, int n, uint64_t ticket, int64_t now_ms)
{
    if (cache == NULL || rows == NULL)
        return 0;
    if (ticket < atomic_load(&cache->flush_seq)) { /* read before everything was dropped */
        atomic_fetch_add_explicit(&cache->rows_refused, (uint_fast64_t)(n > 0 ? n : 0),
                                  memory_order_relaxed);
        return 0;
    }
    int stored = 0;
    for (int i = 0; i < n; i++) {
        char buf[NAME_MAX_BYTES];
        struct name nm;
        if (rows[i].row_version <= 0 || !row_name(cache, tenant_id, &rows[i].ids, buf, &nm))
            continue;
        struct shard *s = shard_of(&cache->rows, nm.hash);
        pthread_mutex_lock(&s->lock);
        bool ok = put_row(cache, s, &nm, &rows[i], ticket, now_ms);
        pthread_mutex_unlock(&s->lock);
        count(ok ? &cache->rows_stored : &cache->rows_refused);
        stored += ok;
    }
    return stored;
}

bool cg_cache_path_get(struct cg_cache *cache, const char *tenant_id,
                       const struct cg_scope_ids *ids, int64_t now_ms, bool allow_stale,
                       struct cg_budget_row out[4], int *n, int64_t *oldest_fill_ms)
{
    if (cache == NULL)
        return false;
    bool live = atomic_load(&cache->live);
    uint64_t flush = atomic_load(&cache->flush_seq);
    char buf[NAME_MAX_BYTES];
    struct name names[CG_PATH_ROWS_MAX];
    int depth = path_names(cache, tenant_id, ids, 1, buf, names);
    int64_t oldest = now_ms;
    bool hit = (allow_stale || live) && depth > 0;
    for (int level = 1; hit && level <= depth; level++)
        prefetch_chain(&cache->rows, &names[level - 1]);
    for (int level = 1; hit && level <= depth; level++)
        prefetch_head(&cache->rows, &names[level - 1]);
    for (int level = 1; hit && level <= depth; level++) {
        struct shard *s = shard_of(&cache->rows, names[level - 1].hash);
        pthread_mutex_lock(&s->lock);
        const struct row_entry *e = (const struct row_entry *)find(s, &names[level - 1]);
        if (e == NULL || e->row_version <= 0)
            hit = false;
        else if (!allow_stale &&
                 (e->h.dropped || e->h.fill_ticket < flush ||
                  (cache->row_ttl_ms > 0 && now_ms - e->h.filled_ms >= cache->row_ttl_ms)))
            hit = false;
        else {
            row_out(e, ids, level, &out[level - 1]);
            if (e->h.filled_ms < oldest)
                oldest = e->h.filled_ms;
        }
        pthread_mutex_unlock(&s->lock);
    }
    if (hit) {
        *n = depth;
        if (oldest_fill_ms != NULL)
            *oldest_fill_ms = oldest;
    }
    count(hit ? &cache->row_hits : &cache->row_misses);
    return hit;
}

/* With the shard locked: marks the row named name dropped at seq (fills that read before
 * are refused). A row not cached leaves the drop in the shard (drop_seq_max), which
 * refuses the fills that read before it. */
static void drop_row(struct shard *s, const struct name *n, uint64_t seq)
{
    struct row_entry *e = (struct row_entry *)find(s, n);
    if (e != NULL) {
        e->h.dropped = true;
        e->h.drop_seq = seq;
    } else {
        s->drop_seq_max = seq;
    }
}

void cg_cache_drop_path(struct cg_cache *cache, const char *tenant_id,
                        const struct cg_scope_ids *ids)
{
    if (cache == NULL)
        return;
    uint64_t seq = next_drop(cache);
    char buf[NAME_MAX_BYTES];
    struct name names[CG_PATH_ROWS_MAX];
    int depth = path_names(cache, tenant_id, ids, 1, buf, names);
    for (int level = 1; level <= depth; level++) {
        struct shard *s = shard_of(&cache->rows, names[level - 1].hash);
        pthread_mutex_lock(&s->lock);
        drop_row(s, &names[level - 1], seq);
        pthread_mutex_unlock(&s->lock);
    }
}

bool cg_cache_row_announced(struct cg_cache *cache, const char *tenant_id,
                            const struct cg_scope_ids *ids, int64_t row_version)
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || !row_name(cache, tenant_id, ids, buf, &n))
        return false;
    struct shard *s = shard_of(&cache->rows, n.hash);
    pthread_mutex_lock(&s->lock);
    struct row_entry *e = (struct row_entry *)find(s, &n);
    /* Held at that version or newer (this process's own write, or a fill that already read
     * it): nothing to do. */
    bool drop = !(e != NULL && row_version > 0 && e->row_version >= row_version);
    if (drop && e != NULL && row_version > 0) {
        /* Only a fill at least this new is right from now on, whenever it read: the write
         * committed before it was announced, so PostgreSQL gives it to every later read. */
        if (row_version > e->need_version)
            e->need_version = row_version;
        e->h.dropped = true;
    } else if (drop) {
        drop_row(s, &n, next_drop(cache));
    }
    pthread_mutex_unlock(&s->lock);
    if (drop)
        count(&cache->rows_announced);
    return drop;
}

void cg_cache_drop_tenant(struct cg_cache *cache, const char *tenant_id)
{
    if (cache == NULL)
        return;
    size_t tlen = strlen(tenant_id);
    uint64_t seq = next_drop(cache);
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &cache->rows.shards[i];
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->cap; k++) {
            struct row_entry *e = (struct row_entry *)slot_at(s, k);
            /* the tenant's row is named by its id, the rows below by the id and 0x1f */
            if (e->h.name != NULL && e->h.len >= tlen && memcmp(e->h.name, tenant_id, tlen) == 0 &&
                (e->h.len == tlen || e->h.name[tlen] == '\x1f')) {
                e->h.dropped = true;
                e->h.drop_seq = seq;
            }
        }
        s->drop_seq_max = seq;
        pthread_mutex_unlock(&s->lock);
    }
}

void cg_cache_drop_all(struct cg_cache *cache)
{
    if (cache == NULL)
        return;
    /* Every fill before this ticket is stale, and so is every fill in flight. */
    uint64_t seq = next_drop(cache);
    atomic_store(&cache->flush_seq, seq);
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &cache->rows.shards[i];
        pthread_mutex_lock(&s->lock);
        s->drop_seq_max = seq;
        pthread_mutex_unlock(&s->lock);
    }
}

void cg_cache_set_live(struct cg_cache *cache, bool live)
{
    if (cache == NULL)
        return;
    bool was = atomic_exchange(&cache->live, live);
    if (live && !was) {
        /* What changed while nobody listened is unknown: budget rows and revoked keys. */
        cg_cache_drop_all(cache);
        cg_cache_key_drop_all(cache);
    }
}

bool cg_cache_is_live(const struct cg_cache *cache)
{
    return cache != NULL && atomic_load(&cache->live);
}

/* ---------------------------------------------------------------- allowance ------- */

void cg_cache_store_state(struct cg_cache *cache, bool ok)
{
    if (cache == NULL)
        return;
    if (!ok) {
        atomic_store(&cache->store_down, true);
        return;
    }
    if (atomic_exchange(&cache->store_down, false))
        atomic_fetch_add(&cache->outage_epoch, 1);
}

bool cg_cache_allowance_take(struct cg_cache *cache, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t tokens, int64_t allowance)
{
    char buf[NAME_MAX_BYTES];
    struct name n;
    if (cache == NULL || !row_name(cache, tenant_id, ids, buf, &n))
        return false;
    uint64_t epoch = atomic_load(&cache->outage_epoch);
    struct shard *s = shard_of(&cache->rows, n.hash);
    pthread_mutex_lock(&s->lock);
    struct row_entry *e = (struct row_entry *)find(s, &n);
    bool ok = false;
    if (e != NULL) {
        if (e->allowance_epoch != epoch) {
            e->allowance_epoch = epoch;
            e->allowance_spent = 0;
        }
        if (tokens < 0) { /* a refund */
            e->allowance_spent = e->allowance_spent + tokens > 0 ? e->allowance_spent + tokens : 0;
            ok = true;
        } else if (tokens <= allowance - e->allowance_spent) {
            e->allowance_spent += tokens;
            ok = true;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void cg_cache_stats(const struct cg_cache *cache, struct cg_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    if (cache == NULL)
        return;
    out->row_hits = atomic_load(&cache->row_hits);
    out->row_misses = atomic_load(&cache->row_misses);
    out->rows_stored = atomic_load(&cache->rows_stored);
    out->rows_refused = atomic_load(&cache->rows_refused);
    out->key_hits = atomic_load(&cache->key_hits);
    out->key_misses = atomic_load(&cache->key_misses);
    out->rows_announced = atomic_load(&cache->rows_announced);
    out->rows_evicted = atomic_load(&cache->rows_evicted);
}

/* ---------------------------------------------------------------- after writes ---- */

void cg_cache_written(const struct cg_svc_env *env, const char *tenant_id,
                      const struct cg_budget_row *rows, int n)
{
    struct cg_store_rows set = {tenant_id, rows, n};
    cg_cache_written_many(env, &set, 1);
}

void cg_cache_written_many(const struct cg_svc_env *env, const struct cg_store_rows *sets, int n)
{
    if (env == NULL || sets == NULL || n < 1)
        return;
    struct cg_store_rows *paths = malloc((size_t)n * sizeof *paths);
    int npaths = 0;
    for (int i = 0; i < n; i++) {
        if (sets[i].rows == NULL || sets[i].n < 1)
            continue;
        (void)cg_cache_rows_put(env->cache, sets[i].tenant_id, sets[i].rows, sets[i].n,
                                cg_cache_ticket(env->cache), cg_mono_ms());
        /* A set of more rows than one path is not written to Redis (one round trip per path
         * would cost the write path more than the reads it saves): the other replicas, told
         * the new versions on cg_rows, refuse Redis's older rows and read PostgreSQL. */
        if (paths != NULL && sets[i].n <= CG_PATH_ROWS_MAX)
            paths[npaths++] = sets[i];
    }
    if (env->store != NULL && npaths > 0)
        cg_store_cache_rows_put_many(env->store, paths, npaths);
    free(paths);
}

void cg_cache_dropped(const struct cg_svc_env *env, const char *tenant_id)
{
    if (env == NULL)
        return;
    cg_cache_drop_tenant(env->cache, tenant_id);
    if (env->store == NULL)
        return;
    cg_store_cache_tenant_drop(env->store, tenant_id);
    cg_store_tenant_announce(env->store, tenant_id);
}

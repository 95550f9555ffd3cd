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
 * and no lock is held for more than a hash walk and a copy. Memory is allocated once; a
 * full shard evicts with a clock hand (the next entry in the array), which approximates
 * "oldest first" without per-hit bookkeeping on the read path.
 *
 * Correctness rests on two numbers:
 *   - row_version (migration 0008), bumped by PostgreSQL on every write of a row, in
 *     commit order: a cached row is only ever replaced by the same or a newer version, so a
 *     fill that read before a write and arrives after it cannot undo it;
 *   - the ticket, a process-wide sequence advanced by every drop: a fill carries the
 *     ticket taken before its read, and a drop newer than that ticket (a notification that
 *     the row changed, a revocation, a reconnection of the listener) refuses it, because
 *     the value it read may be older than what the drop announced and its version is not
 *     known to the drop. A drop keeps the entry (for the on_store_failure policy and for
 *     its version) but marks it not fresh. For keys that are not cached, the shard
 *     remembers its latest drop instead (a rare extra miss, never a stale hit).
 *
 * Why other replicas' plain counter moves are bounded by a TTL instead of announced: the
 * notifications heard are the WatchUsage events' (migrations/0006_events.sql), which
 * every write that changes a decision emits (thresholds, exhaustion, budgets, resets,
 * closes, approvals); a NOTIFY on every write would make every write transaction take
 * PostgreSQL's database-wide notify lock at commit, which serializes the commits of all
 * writers (no group commit) and would cap the durable write path that is being batched.
 * The writer updates the Redis rows instead (cg_cache_written), so a replica whose
 * row expired re-reads the newest value from Redis without touching PostgreSQL.
 * Listener down: the cache stops serving (cg_cache_set_live) rather than serving within
 * a TTL, because an outage of the LISTEN connection usually means PostgreSQL is away
 * too, where the on_store_failure policy (which reads the kept rows) is the answer.
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

#include "base/clock.h"

#define SHARDS 64
#define NAME_MAX_BYTES (CG_UUID_LEN + 3 * (CG_SCOPE_ID_MAX + 1) + 8)
#define NO_ENTRY (-1)

struct entry {
    bool used;
    bool dropped; /* not served fresh any more; still readable with allow_stale */
    int32_t next; /* next index in the bucket's chain */
    uint64_t hash;
    char name[NAME_MAX_BYTES];
    uint64_t fill_ticket; /* ticket of the fill (or write) that stored the value */
    uint64_t drop_seq;    /* ticket of the last drop of this entry */
    int64_t filled_ms;    /* cg_mono_ms of that fill */
    union {               /* an entry of the rows table, or of the keys table */
        struct {
            struct cg_budget_row row;
            uint64_t allowance_epoch;
            int64_t allowance_spent;
        };
        struct cg_key_auth key;
    };
};

struct shard {
    pthread_mutex_t lock;
    struct entry *entries;
    size_t cap;
    size_t hand; /* clock hand for eviction */
    int32_t *buckets;
    size_t nbuckets; /* a power of two */
    uint64_t drop_seq_max;
};

struct table {
    struct shard shards[SHARDS];
};

struct cg_cache {
    int64_t key_ttl_ms;
    int64_t row_ttl_ms;
    struct table keys;
    struct table rows;
    atomic_uint_fast64_t seq;           /* the ticket: advanced by every drop */
    atomic_uint_fast64_t flush_seq;     /* fills with an older ticket are never fresh */
    atomic_uint_fast64_t key_flush_seq; /* the same for keys (cg_cache_key_drop_all) */
    atomic_bool live;
    atomic_bool store_down;
    atomic_uint_fast64_t outage_epoch;
    atomic_uint_fast64_t row_hits, row_misses, rows_stored, rows_refused, key_hits, key_misses;
};

/* ---------------------------------------------------------------- tables ---------- */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h ^ (h >> 29);
}

static bool table_init(struct table *t, size_t max_entries)
{
    size_t per = (max_entries + SHARDS - 1) / SHARDS;
    if (per < 1)
        per = 1;
    size_t nb = 1;
    while (nb < per * 2)
        nb <<= 1;
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &t->shards[i];
        pthread_mutex_init(&s->lock, NULL);
        s->cap = per;
        s->nbuckets = nb;
        s->entries = calloc(per, sizeof *s->entries);
        s->buckets = malloc(nb * sizeof *s->buckets);
        if (s->entries == NULL || s->buckets == NULL)
            return false;
        for (size_t b = 0; b < nb; b++)
            s->buckets[b] = NO_ENTRY;
    }
    return true;
}

static void table_cleanup(struct table *t)
{
    for (int i = 0; i < SHARDS; i++) {
        free(t->shards[i].entries);
        free(t->shards[i].buckets);
        pthread_mutex_destroy(&t->shards[i].lock);
    }
}

static struct shard *shard_of(struct table *t, uint64_t hash)
{
    return &t->shards[(hash >> 48) % SHARDS];
}

/* With the shard locked: the entry named name, or NULL. */
static struct entry *find(struct shard *s, uint64_t hash, const char *name)
{
    for (int32_t i = s->buckets[hash & (s->nbuckets - 1)]; i != NO_ENTRY; i = s->entries[i].next) {
        struct entry *e = &s->entries[i];
        if (e->hash == hash && strcmp(e->name, name) == 0)
            return e;
    }
    return NULL;
}

static void unlink_entry(struct shard *s, struct entry *e)
{
    int32_t idx = (int32_t)(e - s->entries);
    int32_t *p = &s->buckets[e->hash & (s->nbuckets - 1)];
    while (*p != NO_ENTRY && *p != idx)
        p = &s->entries[*p].next;
    if (*p == idx)
        *p = e->next;
    e->used = false;
}

/* With the shard locked: a new entry for name (evicting the one under the clock hand when
 * the shard is full), zeroed but for its name. */
static struct entry *insert(struct shard *s, uint64_t hash, const char *name)
{
    struct entry *e = NULL;
    for (size_t k = 0; k < s->cap; k++) {
        struct entry *c = &s->entries[s->hand];
        s->hand = (s->hand + 1) % s->cap;
        if (!c->used) {
            e = c;
            break;
        }
        if (e == NULL)
            e = c; /* the first one under the hand, if no slot is free */
    }
    if (e->used)
        unlink_entry(s, e);
    memset(e, 0, sizeof *e);
    e->used = true;
    e->hash = hash;
    size_t nlen = strnlen(name, sizeof e->name - 1);
    memcpy(e->name, name, nlen);
    e->name[nlen] = '\0';
    size_t b = hash & (s->nbuckets - 1);
    e->next = s->buckets[b];
    s->buckets[b] = (int32_t)(e - s->entries);
    return e;
}

/* parts[0..n) joined by a separator no id holds (0x1f) into buf, NUL-terminated; false
 * when it does not fit in cap. Every lookup builds a name: no printf here. */
static bool join_name(const char *const *parts, int n, char *buf, size_t cap)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(parts[i]);
        if (len + k + (i > 0) >= cap)
            return false;
        if (i > 0)
            buf[len++] = '\x1f';
        memcpy(buf + len, parts[i], k);
        len += k;
    }
    buf[len] = '\0';
    return true;
}

/* "tenant/session/task/agent" with a separator no id holds; false when too long. */
static bool row_name(const char *tenant_id, const struct cg_scope_ids *ids, char *buf, size_t cap)
{
    const char *parts[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    return join_name(parts, 4, buf, cap);
}

static bool key_name(const char *tenant_id, const char *key_id, char *buf, size_t cap)
{
    const char *parts[] = {tenant_id, key_id};
    return join_name(parts, 2, buf, cap);
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
    if (max_rows == 0 || max_rows > CG_CACHE_ROWS_MAX)
        max_rows = CG_CACHE_ROWS_MAX;
    c->key_ttl_ms = opts->key_ttl_ms > 0 ? opts->key_ttl_ms : 0;
    c->row_ttl_ms = opts->row_ttl_ms > 0 ? opts->row_ttl_ms : CG_CACHE_ROW_TTL_MS_DEFAULT;
    atomic_init(&c->seq, 1);
    atomic_init(&c->flush_seq, 1);
    atomic_init(&c->key_flush_seq, 1);
    atomic_init(&c->live, false);
    atomic_init(&c->store_down, false);
    atomic_init(&c->outage_epoch, 1);
    if (!table_init(&c->keys, max_keys) || !table_init(&c->rows, max_rows)) {
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
    char name[NAME_MAX_BYTES];
    if (cache == NULL || cache->key_ttl_ms == 0 || !key_name(tenant_id, key_id, name, sizeof name))
        return false;
    uint64_t h = hash_name(name);
    struct shard *s = shard_of(&cache->keys, h);
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, h, name);
    bool hit = e != NULL && !e->dropped && e->fill_ticket >= atomic_load(&cache->key_flush_seq) &&
               now_ms - e->filled_ms < cache->key_ttl_ms;
    if (hit)
        *out = e->key;
    pthread_mutex_unlock(&s->lock);
    count(hit ? &cache->key_hits : &cache->key_misses);
    return hit;
}

void cg_cache_key_put(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, uint64_t ticket, int64_t now_ms)
{
    char name[NAME_MAX_BYTES];
    if (cache == NULL || cache->key_ttl_ms == 0 || !key_name(tenant_id, key_id, name, sizeof name))
        return;
    uint64_t h = hash_name(name);
    struct shard *s = shard_of(&cache->keys, h);
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, h, name);
    bool newer = ticket >= atomic_load(&cache->key_flush_seq) &&
                 (e == NULL ? ticket >= s->drop_seq_max : ticket >= e->drop_seq);
    if (newer) {
        if (e == NULL)
            e = insert(s, h, name);
        e->key = *entry;
        e->fill_ticket = ticket;
        e->filled_ms = now_ms;
        e->dropped = false;
    }
    pthread_mutex_unlock(&s->lock);
}

void cg_cache_key_drop(struct cg_cache *cache, const char *tenant_id, const char *key_id)
{
    char name[NAME_MAX_BYTES];
    if (cache == NULL || !key_name(tenant_id, key_id, name, sizeof name))
        return;
    uint64_t seq = next_drop(cache);
    uint64_t h = hash_name(name);
    struct shard *s = shard_of(&cache->keys, h);
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, h, name);
    /* A key never cached here gets an entry too, empty and dropped, so that its next
     * lookup reads PostgreSQL (cg_cache_key_dropped) rather than a Redis entry that the
     * revoking replica may have failed to mark. */
    if (e == NULL)
        e = insert(s, h, name);
    e->dropped = true;
    e->drop_seq = seq;
    s->drop_seq_max = seq;
    pthread_mutex_unlock(&s->lock);
}

bool cg_cache_key_dropped(struct cg_cache *cache, const char *tenant_id, const char *key_id)
{
    char name[NAME_MAX_BYTES];
    if (cache == NULL || !key_name(tenant_id, key_id, name, sizeof name))
        return false;
    uint64_t h = hash_name(name);
    struct shard *s = shard_of(&cache->keys, h);
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, h, name);
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

/* With the shard locked: stores row under the version rule; true when stored or renewed. */
static bool put_row(struct shard *s, uint64_t h, const char *name, const struct cg_budget_row *row,
                    uint64_t ticket, int64_t now_ms)
{
    struct entry *e = find(s, h, name);
    if (e == NULL) {
        if (ticket < s->drop_seq_max)
            return false;
        e = insert(s, h, name);
    } else {
        if (row->row_version < e->row.row_version || ticket < e->drop_seq)
            return false;
        if (row->row_version == e->row.row_version && ticket < e->fill_ticket)
            return false; /* same value, older knowledge: keep the newer fill time */
    }
    uint64_t epoch = e->allowance_epoch;
    int64_t spent = e->allowance_spent;
    e->row = *row;
    e->allowance_epoch = epoch;
    e->allowance_spent = spent;
    e->fill_ticket = ticket;
    e->filled_ms = now_ms;
    e->dropped = false;
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
        char name[NAME_MAX_BYTES];
        if (rows[i].row_version <= 0 || !row_name(tenant_id, &rows[i].ids, name, sizeof name))
            continue;
        uint64_t h = hash_name(name);
        struct shard *s = shard_of(&cache->rows, h);
        pthread_mutex_lock(&s->lock);
        bool ok = put_row(s, h, name, &rows[i], ticket, now_ms);
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
    int depth = cg_scope_level(ids);
    int64_t oldest = now_ms;
    bool hit = allow_stale || live;
    for (int level = 1; hit && level <= depth; level++) {
        struct cg_scope_ids p;
        char name[NAME_MAX_BYTES];
        cg_scope_prefix(ids, level, &p);
        if (!row_name(tenant_id, &p, name, sizeof name)) {
            hit = false;
            break;
        }
        uint64_t h = hash_name(name);
        struct shard *s = shard_of(&cache->rows, h);
        pthread_mutex_lock(&s->lock);
        struct entry *e = find(s, h, name);
        if (e == NULL)
            hit = false;
        else if (!allow_stale && (e->dropped || e->fill_ticket < flush ||
                                  now_ms - e->filled_ms >= cache->row_ttl_ms))
            hit = false;
        else {
            out[level - 1] = e->row;
            if (e->filled_ms < oldest)
                oldest = e->filled_ms;
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

void cg_cache_drop_path(struct cg_cache *cache, const char *tenant_id,
                        const struct cg_scope_ids *ids)
{
    if (cache == NULL)
        return;
    uint64_t seq = next_drop(cache);
    int depth = cg_scope_level(ids);
    for (int level = 1; level <= depth; level++) {
        struct cg_scope_ids p;
        char name[NAME_MAX_BYTES];
        cg_scope_prefix(ids, level, &p);
        if (!row_name(tenant_id, &p, name, sizeof name))
            return;
        uint64_t h = hash_name(name);
        struct shard *s = shard_of(&cache->rows, h);
        pthread_mutex_lock(&s->lock);
        struct entry *e = find(s, h, name);
        if (e != NULL) {
            e->dropped = true;
            e->drop_seq = seq;
        }
        s->drop_seq_max = seq;
        pthread_mutex_unlock(&s->lock);
    }
}

void cg_cache_drop_tenant(struct cg_cache *cache, const char *tenant_id)
{
    if (cache == NULL)
        return;
    char prefix[CG_UUID_LEN + 2];
    int plen = snprintf(prefix, sizeof prefix, "%s\x1f", tenant_id);
    if (plen <= 0 || (size_t)plen >= sizeof prefix)
        return;
    uint64_t seq = next_drop(cache);
    for (int i = 0; i < SHARDS; i++) {
        struct shard *s = &cache->rows.shards[i];
        pthread_mutex_lock(&s->lock);
        for (size_t k = 0; k < s->cap; k++) {
            struct entry *e = &s->entries[k];
            if (e->used && strncmp(e->name, prefix, (size_t)plen) == 0) {
                e->dropped = true;
                e->drop_seq = seq;
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
    char name[NAME_MAX_BYTES];
    if (cache == NULL || !row_name(tenant_id, ids, name, sizeof name))
        return false;
    uint64_t epoch = atomic_load(&cache->outage_epoch);
    uint64_t h = hash_name(name);
    struct shard *s = shard_of(&cache->rows, h);
    pthread_mutex_lock(&s->lock);
    struct entry *e = find(s, h, name);
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
}

/* ---------------------------------------------------------------- after writes ---- */

void cg_cache_written(const struct cg_svc_env *env, const char *tenant_id,
                      const struct cg_budget_row *rows, int n)
{
    if (env == NULL || rows == NULL || n < 1 || n > 4)
        return;
    (void)cg_cache_rows_put(env->cache, tenant_id, rows, n, cg_cache_ticket(env->cache),
                            cg_mono_ms());
    if (env->store != NULL)
        cg_store_cache_rows_put(env->store, tenant_id, rows, n, -1);
}

void cg_cache_dropped(const struct cg_svc_env *env, const char *tenant_id)
{
    if (env == NULL)
        return;
    cg_cache_drop_tenant(env->cache, tenant_id);
    if (env->store != NULL)
        cg_store_cache_tenant_drop(env->store, tenant_id);
}

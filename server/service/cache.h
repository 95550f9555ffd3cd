/* cache.h - the process-wide in-memory cache behind CheckBudget's fast path: API keys
 * that authenticated, and budget rows (struct cg_budget_row, one per scope) with their
 * row_version. See cache.c for why it lives here and how it stays correct.
 *
 * One struct cg_cache per server process, made and freed by its owner (the application
 * object) and reached through cg_svc_env.cache. Every function is thread-safe and never
 * blocks on I/O: they may run on completion-queue threads. Bounded: at most
 * CG_CACHE_KEYS_MAX keys and max_rows rows (setting cache_rows_max; the clock hand evicts).
 *
 * Memory: the slot arrays are allocated by cg_cache_new but only touched as rows arrive.
 * A cached row costs cg_cache_row_bytes() (536 bytes on x86-64: the entry, 528, and two
 * bucket indexes), its name included when shorter than 80 bytes (the tenant id and the
 * scope ids joined: a UUID and ids of up to about 14 characters each); a longer name
 * (up to 423 bytes) is malloc'd besides. A path is one row per level (tenant, session,
 * task, agent), the upper ones shared: 100,000 agents under 100 sessions of 10 tasks are
 * 101,101 rows, ~54 MB. The default (CG_CACHE_ROWS_DEFAULT, 262,144 rows) is ~140 MB
 * when full.
 *
 * Staleness (what a hit may be behind PostgreSQL):
 *   - writes committed by this process: none (cg_cache_written, after every commit);
 *   - writes of other replicas: the time their announcement takes to arrive. The NOTIFY
 *     after every COMMIT that changed scope rows announces each on cg_rows with its
 *     row_version (store_pg.c; the rows its events name); the events thread drops the
 *     older copies (cg_cache_row_announced) and the next read fills them again, from
 *     Redis when Redis is at least that new, else PostgreSQL. Writes that do not know
 *     their rows announce their whole tenant (cg_cache_dropped);
 *   - an announcement that could not be sent (the writer lost PostgreSQL right after its
 *     COMMIT): sent again with that connection's next commit; until then, at most
 *     row_ttl_ms (setting cache_row_ttl_ms, a backstop; rows otherwise never expire);
 *   - while the LISTEN connection is down nothing is served as fresh (cg_cache_set_live),
 *     and what was filled before it came back is never served as fresh again.
 * A CheckBudget answer is advice: a HARD limit is enforced by Reserve, which locks and
 * reads the rows in PostgreSQL and never reads this cache, so a stale hit cannot overspend.
 * Keys: a revoked (changed, deleted) key is dropped when its cg_keys notification arrives
 * (migrations/0017, from the events thread); while the LISTEN connection is down a key is
 * served for at most key_ttl_ms after its fill, and every key is dropped when it is back.
 * Stale rows stay readable for the on_store_failure policy (cg_cache_path_get with
 * allow_stale), which is what they are kept for during a PostgreSQL outage.
 */
#ifndef CG_SERVICE_CACHE_H
#define CG_SERVICE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store.h"

#define CG_CACHE_KEYS_MAX 4096
#define CG_CACHE_ROWS_DEFAULT 262144  /* rows when the options say 0 */
#define CG_CACHE_ROWS_LIMIT 16777216u /* the most max_rows may ask for */

struct cg_cache;

struct cg_cache_opts {
    int64_t key_ttl_ms; /* how long a key stays (key_cache_ttl_s); 0: keys are not cached */
    int64_t row_ttl_ms; /* the most a row is served after its fill (a backstop); <= 0: no
                           limit, rows leave when announced, dropped or evicted */
    size_t max_keys;    /* 0 or more than CG_CACHE_KEYS_MAX: CG_CACHE_KEYS_MAX */
    size_t max_rows;    /* 0: CG_CACHE_ROWS_DEFAULT; at most CG_CACHE_ROWS_LIMIT */
};

/* A new cache, empty and not live (nothing is served as fresh before cg_cache_set_live).
 * NULL when out of memory. */
struct cg_cache *cg_cache_new(const struct cg_cache_opts *opts);

/* Frees the cache. NULL is a no-op. No other thread may use it any more. */
void cg_cache_free(struct cg_cache *cache);

/* Bytes one cached row takes besides its malloc'd name (see the header comment). */
size_t cg_cache_row_bytes(void);

/* ---- API keys ---- */

/* The entry of (tenant_id, key_id) cached less than key_ttl_ms before now_ms (cg_mono_ms
 * clock) into *out: true on a hit. A NULL cache misses. */
bool cg_cache_key_get(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                      int64_t now_ms, struct cg_key_auth *out);

/* A token vouched for: the cache's keyed tag (SipHash-2-4-128 under a key drawn at random
 * when the cache was made) of a token whose SHA-256 matched the entry's secret_hash. A
 * presented token with the same tag needs no SHA-256 again (cg_keys_authenticate); the
 * token itself is never kept. */
#define CG_CACHE_TAG_LEN 16
struct cg_key_vouch {
    bool set;
    uint8_t tag[CG_CACHE_TAG_LEN];
};

/* cg_cache_key_get, and on a hit the entry's vouch into *vouch (set false when none). */
bool cg_cache_key_get_vouched(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                              int64_t now_ms, struct cg_key_auth *out, struct cg_key_vouch *vouch);

/* The cache's tag of len bytes of token. */
void cg_cache_token_tag(const struct cg_cache *cache, const char *token, size_t len,
                        uint8_t tag[CG_CACHE_TAG_LEN]);

/* Records that the token of tag matched secret_hash: kept on the cached entry of (tenant_id,
 * key_id) when it is there, not dropped, and holds that same secret_hash; otherwise
 * nothing. A refill (cg_cache_key_put) forgets it. NULL cache: no-op. */
void cg_cache_key_vouch(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                        const uint8_t secret_hash[32], const uint8_t tag[CG_CACHE_TAG_LEN]);

/* Caches an entry (copied) at now_ms, unless a drop of the same key came after ticket
 * (cg_cache_ticket taken before the lookup that produced entry): a revocation that raced
 * the lookup wins. NULL cache: no-op. */
void cg_cache_key_put(struct cg_cache *cache, const char *tenant_id, const char *key_id,
                      const struct cg_key_auth *entry, uint64_t ticket, int64_t now_ms);

/* Forgets a key at once (revocation, here or announced on cg_keys). NULL cache: no-op. */
void cg_cache_key_drop(struct cg_cache *cache, const char *tenant_id, const char *key_id);

/* Whether the key was dropped (cg_cache_key_drop, which leaves an empty entry for a key
 * not cached) and not filled again since: its next lookup should read PostgreSQL, since
 * other caches (Redis) may still hold what the drop announced to be wrong. False when
 * that entry has been evicted since. NULL cache: false. */
bool cg_cache_key_dropped(struct cg_cache *cache, const char *tenant_id, const char *key_id);

/* Forgets every key: entries filled before are not served again, fills in flight are
 * refused (their ticket is older). Called when the LISTEN connection (re)connects, and
 * when a cg_keys notification names every key. NULL cache: no-op. */
void cg_cache_key_drop_all(struct cg_cache *cache);

/* ---- budget rows ---- */

/* The current invalidation ticket: take it before reading what will be put, so that a
 * drop made meanwhile wins over the (older) value read. 0 for a NULL cache. */
uint64_t cg_cache_ticket(struct cg_cache *cache);

/* Stores rows[0..n) of tenant_id (each keyed by its ids), read or written with ticket.
 * The version rule, per row: a row whose row_version is 0 (unknown) is ignored; one older
 * than the cached row_version never replaces it (a stale fill cannot undo a write); an
 * equal one only renews the fill time; a newer one replaces it. A row dropped after
 * ticket (cg_cache_drop_path, or a reconnection of the listener) is not stored either,
 * nor one older than the newest version announced for it (cg_cache_row_announced, whatever
 * the ticket: Redis may still hold the row from before that write). Returns how many rows were
 * stored or renewed. NULL cache: 0. */
int cg_cache_rows_put(struct cg_cache *cache, const char *tenant_id,
                      const struct cg_budget_row *rows, int n, uint64_t ticket, int64_t now_ms);

/* The path to ids (tenant first, levels 1..depth) from the cache into out[], *n its
 * length: true when every row of the path is cached and, unless allow_stale, fresh (the
 * cache is live, the row was filled after the last reconnection (and, with a row_ttl_ms,
 * less than row_ttl_ms before now_ms), and was not dropped since). The rows out[] have
 * every field but description (""), their ids being the prefixes of ids. *oldest_fill_ms gets the
 * fill time of the oldest row (may be NULL). NULL cache: false. */
bool cg_cache_path_get(struct cg_cache *cache, const char *tenant_id,
                       const struct cg_scope_ids *ids, int64_t now_ms, bool allow_stale,
                       struct cg_budget_row out[4], int *n, int64_t *oldest_fill_ms);

/* Drops the rows of the path to ids (the scope and its ancestors: what one write of that
 * scope's path may have changed) so that the next read fills them again. A dropped row
 * stays readable with allow_stale. NULL cache: no-op. */
void cg_cache_drop_path(struct cg_cache *cache, const char *tenant_id,
                        const struct cg_scope_ids *ids);

/* Another replica committed the row (tenant_id, ids) at row_version (its announcement on
 * cg_rows, heard by the events thread): a cached row older than that is dropped, and only
 * a fill at least that new stores it again (PostgreSQL has it for every read from now
 * on). A row this process already holds at that version or newer (its own write) is left
 * alone; a row not cached leaves a drop in its shard (fills that read before it are
 * refused). row_version <= 0: as cg_cache_drop_path of that one row. Returns whether
 * something was dropped. NULL cache: false. */
bool cg_cache_row_announced(struct cg_cache *cache, const char *tenant_id,
                            const struct cg_scope_ids *ids, int64_t row_version);

/* Drops every row of the tenant (as cg_cache_drop_path). NULL cache: no-op. */
void cg_cache_drop_tenant(struct cg_cache *cache, const char *tenant_id);

/* Drops every row of every tenant (as cg_cache_drop_path). NULL cache: no-op. */
void cg_cache_drop_all(struct cg_cache *cache);

/* Whether writes of other replicas are being heard (the events thread's LISTEN connection
 * is up). Going down stops fresh hits of rows (keys are still served within key_ttl_ms);
 * coming back (true after false) drops every row and every key filled before, since
 * notifications sent meanwhile were lost. */
void cg_cache_set_live(struct cg_cache *cache, bool live);
bool cg_cache_is_live(const struct cg_cache *cache);

/* ---- on_store_failure LOCAL_ALLOWANCE ---- */

/* Marks PostgreSQL as answering (ok) or not. An outage that ends starts a new allowance
 * period: the next outage counts local spend from 0 again. */
void cg_cache_store_state(struct cg_cache *cache, bool ok);

/* Takes tokens from this process's allowance of the scope row (tenant_id, ids) for the
 * current outage: true when spent + tokens <= allowance (and then spent grows), false
 * when it would go past it (nothing taken) or the row is not cached. Negative tokens give
 * back (spent never goes below 0; allowance is then not read). The count lives with the
 * cached row: a row evicted meanwhile starts again from 0. */
bool cg_cache_allowance_take(struct cg_cache *cache, const char *tenant_id,
                             const struct cg_scope_ids *ids, int64_t tokens, int64_t allowance);

/* ---- figures (tests and logs) ---- */

struct cg_cache_stats {
    uint64_t row_hits, row_misses, rows_stored, rows_refused, key_hits, key_misses;
    uint64_t rows_announced; /* rows dropped by cg_cache_row_announced */
    uint64_t rows_evicted;   /* rows that left for a new one (the cache was full) */
};

/* A snapshot of the counters. NULL cache: zeros. */
void cg_cache_stats(const struct cg_cache *cache, struct cg_cache_stats *out);

/* After every successful commit that changed scope rows: rows[0..n) (one tenant, as they
 * are after the commit, row_version included: what cg_store_path_read with lock and
 * cg_store_path_add left in the caller's array) replace the cached ones in env->cache
 * (this process: CheckBudget sees the write at once) and, when they are one path (n <=
 * CG_PATH_ROWS_MAX), in Redis through env->store (best effort, one round trip). The other
 * replicas hear of them from the NOTIFY after the COMMIT (cg_rows). The newest row_version
 * wins, so calls racing each other or a fill cannot go backwards. Never fails; rows with
 * row_version 0 are ignored. Call it on the thread that committed, after the commit (never
 * before: a rolled-back write must not be cached), also from batched paths, once per
 * tenant. */
void cg_cache_written(const struct cg_svc_env *env, const char *tenant_id,
                      const struct cg_budget_row *rows, int n);

/* cg_cache_written of every set of sets[0..n) (one per tenant of a batch), the paths among
 * them going to Redis together: one round trip to each Redis node, not one per tenant. */
void cg_cache_written_many(const struct cg_svc_env *env, const struct cg_store_rows *sets, int n);

/* For committed writes that do not have their rows at hand (the sweeper's resets, CloseScope,
 * ResolveApproval): drops every cached row of the tenant, here and in Redis, and
 * announces it on cg_rows (every replica drops the tenant's rows). */
void cg_cache_dropped(const struct cg_svc_env *env, const char *tenant_id);

#endif

/* test_cache.c - the process cache of CheckBudget (rpc/service/cache.h) and the Redis row cache
 * (store/store_redis.h): the version rule (a stale fill never wins), drops and tickets,
 * liveness, TTLs, bounds, the local allowance, the Redis text format under hostile input,
 * and the Redis script against a real Redis (newest row_version wins, generations).
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "pgtest.h"
#include "service/cache.h"
#include "store/store_redis.h"

#define TENANT "0b0e5c2a-6d5f-4c44-9a53-1d2b3c4d5e6f"

static struct cg_budget_row row_at(const char *session, const char *task, int64_t version,
                                   int64_t used)
{
    struct cg_budget_row r;
    memset(&r, 0, sizeof r);
    snprintf(r.ids.session_id, sizeof r.ids.session_id, "%s", session);
    snprintf(r.ids.task_id, sizeof r.ids.task_id, "%s", task);
    r.level = session[0] == '\0' ? 1 : task[0] == '\0' ? 2 : 3;
    r.has_budget = true;
    r.mode = 1;
    r.limit_tokens = 1000;
    r.warning_ratio = 0.8;
    r.on_store_failure = 1;
    r.reset_period = 1;
    r.row_version = version;
    r.used_tokens = used;
    return r;
}

static struct cg_cache *new_cache(int64_t row_ttl_ms, size_t max_rows)
{
    struct cg_cache_opts o = {.key_ttl_ms = 1000, .row_ttl_ms = row_ttl_ms, .max_rows = max_rows};
    struct cg_cache *c = cg_cache_new(&o);
    cr_assert(c != NULL);
    cg_cache_set_live(c, true);
    return c;
}

/* Puts the tenant row and session row s at version v with used tokens u. */
static int put_path(struct cg_cache *c, int64_t v, int64_t u, uint64_t ticket, int64_t now)
{
    struct cg_budget_row rows[2] = {row_at("", "", 1, 0), row_at("s", "", v, u)};
    return cg_cache_rows_put(c, TENANT, rows, 2, ticket, now);
}

static int64_t cached_used(struct cg_cache *c, int64_t now, bool allow_stale)
{
    struct cg_scope_ids ids = {.session_id = "s"};
    struct cg_budget_row out[4];
    int n = 0;
    if (!cg_cache_path_get(c, TENANT, &ids, now, allow_stale, out, &n, NULL))
        return -1;
    cr_assert_eq(n, 2);
    return out[1].used_tokens;
}

Test(cache, a_stale_fill_never_replaces_a_newer_row)
{
    struct cg_cache *c = new_cache(1000, 0);
    uint64_t t = cg_cache_ticket(c);
    cr_assert_eq(put_path(c, 5, 50, t, 100), 2);
    cr_assert_eq(cached_used(c, 100, false), 50);
    /* A fill that read version 3 before the write of version 5 arrives late: refused. */
    cr_assert_eq(put_path(c, 3, 30, t, 101), 1, "only the tenant row (same version) renews");
    cr_assert_eq(cached_used(c, 101, false), 50);
    /* Newer wins. */
    cr_assert_eq(put_path(c, 7, 70, t, 102), 2);
    cr_assert_eq(cached_used(c, 102, false), 70);
    /* Unknown versions (0) are never cached. */
    struct cg_budget_row unknown = row_at("x", "", 0, 1);
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &unknown, 1, t, 103), 0);
    cg_cache_free(c);
}

Test(cache, a_drop_refuses_fills_that_read_before_it)
{
    struct cg_cache *c = new_cache(1000, 0);
    cr_assert_eq(put_path(c, 5, 50, cg_cache_ticket(c), 100), 2);
    uint64_t before = cg_cache_ticket(c); /* a fill starts reading */
    struct cg_scope_ids ids = {.session_id = "s"};
    cg_cache_drop_path(c, TENANT, &ids); /* another replica's write is announced */
    cr_assert_eq(cached_used(c, 100, false), -1, "a dropped row is not served fresh");
    cr_assert_eq(cached_used(c, 100, true), 50, "but kept for on_store_failure");
    cr_assert_eq(put_path(c, 6, 60, before, 101), 0, "the fill read before the drop: refused");
    cr_assert_eq(put_path(c, 8, 80, cg_cache_ticket(c), 102), 2);
    cr_assert_eq(cached_used(c, 102, false), 80);
    /* Never-cached rows too: the shard remembers the drop. */
    uint64_t t2 = cg_cache_ticket(c);
    struct cg_scope_ids other = {.session_id = "never"};
    cg_cache_drop_path(c, TENANT, &other);
    struct cg_budget_row r = row_at("never", "", 2, 1);
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &r, 1, t2, 103), 0);
    cg_cache_free(c);
}

Test(cache, ttl_liveness_and_reconnection)
{
    struct cg_cache *c = new_cache(1000, 0);
    cr_assert_eq(put_path(c, 5, 50, cg_cache_ticket(c), 100), 2);
    cr_assert_eq(cached_used(c, 1099, false), 50);
    cr_assert_eq(cached_used(c, 1100, false), -1, "served for row_ttl_ms only");
    cr_assert_eq(put_path(c, 5, 50, cg_cache_ticket(c), 2000), 2, "the same version renews");
    cr_assert_eq(cached_used(c, 2000, false), 50);
    uint64_t in_flight = cg_cache_ticket(c);
    cg_cache_set_live(c, false); /* the LISTEN connection is lost */
    cr_assert_eq(cached_used(c, 2000, false), -1);
    cr_assert_eq(cached_used(c, 2000, true), 50);
    cg_cache_set_live(c, true); /* back: what was filled before is not fresh any more */
    cr_assert_eq(cached_used(c, 2000, false), -1);
    cr_assert_eq(put_path(c, 9, 90, in_flight, 2001), 0, "a fill from before the outage");
    cr_assert_eq(put_path(c, 9, 90, cg_cache_ticket(c), 2002), 2);
    cr_assert_eq(cached_used(c, 2002, false), 90);
    cg_cache_free(c);
}

Test(cache, tenant_drop_and_other_tenants)
{
    struct cg_cache *c = new_cache(1000, 0);
    cr_assert_eq(put_path(c, 5, 50, cg_cache_ticket(c), 100), 2);
    struct cg_budget_row other = row_at("", "", 3, 7);
    cr_assert_eq(cg_cache_rows_put(c, "11111111-2222-3333-4444-555555555555", &other, 1,
                                   cg_cache_ticket(c), 100),
                 1);
    cg_cache_drop_tenant(c, TENANT);
    cr_assert_eq(cached_used(c, 100, false), -1);
    struct cg_scope_ids tenant_level = {.session_id = ""};
    struct cg_budget_row out[4];
    int n = 0;
    cr_assert(cg_cache_path_get(c, "11111111-2222-3333-4444-555555555555", &tenant_level, 100,
                                false, out, &n, NULL),
              "another tenant keeps its rows");
    cr_assert_eq(out[0].used_tokens, 7);
    cr_assert_not(cg_cache_path_get(c, TENANT, &tenant_level, 100, false, out, &n, NULL),
                  "the tenant's own row is dropped with the rows below it");
    cg_cache_free(c);
}

/* Names short enough live in the entry, longer ones are allocated: both kinds are found,
 * evicted and replaced without mixing them up (ASan checks the frees). 512 rows are 8 a
 * shard: a path misses when its session row evicted its tenant row (about 1 put in 512),
 * never answers another row. */
Test(cache, short_and_long_names_under_eviction)
{
    struct cg_cache *c = new_cache(1000, 512);
    struct cg_budget_row tenant = row_at("", "", 1, 0);
    char id[CG_SCOPE_ID_MAX + 1];
    int hits = 0;
    for (int i = 0; i < 3000; i++) {
        /* every third session id is 100 characters long: its name does not fit inline */
        int len = snprintf(id, sizeof id, "s%d", i);
        if (i % 3 == 0) {
            memset(id + len, 'L', 100 - (size_t)len);
            id[100] = '\0';
        }
        struct cg_budget_row rows[2] = {tenant, row_at(id, "", 1, i)};
        cr_assert_eq(cg_cache_rows_put(c, TENANT, rows, 2, cg_cache_ticket(c), 100), 2);
        struct cg_scope_ids ids = {.session_id = ""};
        snprintf(ids.session_id, sizeof ids.session_id, "%s", id);
        struct cg_budget_row out[4];
        int n = 0;
        if (!cg_cache_path_get(c, TENANT, &ids, 100, false, out, &n, NULL))
            continue;
        hits++;
        cr_assert_eq(out[1].used_tokens, i);
        cr_assert_str_eq(out[1].ids.session_id, id);
        cr_assert_eq(out[0].ids.session_id[0], '\0');
    }
    cr_assert_geq(hits, 2900, "%d of 3000 paths found right after their put", hits);
    cg_cache_free(c);
}

Test(cache, bounded_in_entries)
{
    struct cg_cache *c = new_cache(1000, 128);
    for (int i = 0; i < 5000; i++) {
        char s[32];
        snprintf(s, sizeof s, "s%d", i);
        struct cg_budget_row r = row_at(s, "", 1, i);
        cr_assert_eq(cg_cache_rows_put(c, TENANT, &r, 1, cg_cache_ticket(c), 100), 1);
    }
    int found = 0;
    for (int i = 0; i < 5000; i++) {
        struct cg_scope_ids ids = {.session_id = ""};
        snprintf(ids.session_id, sizeof ids.session_id, "s%d", i);
        struct cg_budget_row one = row_at("", "", 1, 0);
        (void)cg_cache_rows_put(c, TENANT, &one, 1, cg_cache_ticket(c), 100);
        struct cg_budget_row out[4];
        int n;
        found += cg_cache_path_get(c, TENANT, &ids, 100, false, out, &n, NULL);
    }
    cr_assert(found <= 128 && found > 0, "found %d rows for a cap of 128", found);
    /* Hostile ids: too long for a name, never stored, never crash. */
    struct cg_budget_row big = row_at("", "", 1, 0);
    memset(big.ids.session_id, 'x', CG_SCOPE_ID_MAX);
    memset(big.ids.task_id, 'y', CG_SCOPE_ID_MAX);
    memset(big.ids.agent_id, 'z', CG_SCOPE_ID_MAX);
    big.level = 4;
    (void)cg_cache_rows_put(c, TENANT, &big, 1, cg_cache_ticket(c), 100);
    cg_cache_free(c);
}

Test(cache, keys_and_revocation)
{
    struct cg_cache *c = new_cache(1000, 0);
    struct cg_key_auth k;
    memset(&k, 0, sizeof k);
    snprintf(k.tenant_name, sizeof k.tenant_name, "acme");
    struct cg_key_auth out;
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 100, &out));
    uint64_t t = cg_cache_ticket(c);
    cg_cache_key_put(c, TENANT, "k1", &k, t, 100);
    cr_assert(cg_cache_key_get(c, TENANT, "k1", 100, &out));
    cr_assert_str_eq(out.tenant_name, "acme");
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 1100, &out), "key_ttl_ms");
    cg_cache_key_drop(c, TENANT, "k1");
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 100, &out), "revoked: gone at once");
    cg_cache_key_put(c, TENANT, "k1", &k, t, 101); /* a lookup that raced the revocation */
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 101, &out));
    struct cg_cache_stats st;
    cg_cache_stats(c, &st);
    cr_assert(st.key_hits == 1 && st.key_misses == 4, "hits %llu misses %llu",
              (unsigned long long)st.key_hits, (unsigned long long)st.key_misses);
    cg_cache_free(c);
    /* key_ttl_ms 0: keys are not cached at all. */
    struct cg_cache_opts o = {.key_ttl_ms = 0};
    c = cg_cache_new(&o);
    cg_cache_key_put(c, TENANT, "k1", &k, cg_cache_ticket(c), 100);
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 100, &out));
    cg_cache_free(c);
    cr_assert_not(cg_cache_key_get(NULL, TENANT, "k1", 100, &out));
}

/* A revocation announced for a key never cached here leaves it to PostgreSQL; a
 * reconnection of the listener forgets every key and refuses the fills in flight. */
Test(cache, announced_keys_and_reconnection)
{
    struct cg_cache *c = new_cache(1000, 0);
    struct cg_key_auth k, out;
    memset(&k, 0, sizeof k);
    cr_assert_not(cg_cache_key_dropped(c, TENANT, "k2"));
    cg_cache_key_drop(c, TENANT, "k2"); /* announced on cg_keys, never cached here */
    cr_assert(cg_cache_key_dropped(c, TENANT, "k2"), "its next lookup must read PostgreSQL");
    cr_assert_not(cg_cache_key_get(c, TENANT, "k2", 100, &out));
    cg_cache_key_put(c, TENANT, "k2", &k, cg_cache_ticket(c), 100);
    cr_assert_not(cg_cache_key_dropped(c, TENANT, "k2"), "filled again after the drop");
    cr_assert(cg_cache_key_get(c, TENANT, "k2", 100, &out));

    cg_cache_key_put(c, TENANT, "k1", &k, cg_cache_ticket(c), 100);
    uint64_t in_flight = cg_cache_ticket(c);
    cr_assert(cg_cache_key_get(c, TENANT, "k1", 100, &out));
    cg_cache_set_live(c, false); /* the LISTEN connection is lost: keys still served */
    cr_assert(cg_cache_key_get(c, TENANT, "k1", 100, &out), "within key_ttl_ms while down");
    cg_cache_set_live(c, true); /* back: revocations sent meanwhile were lost */
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 100, &out));
    cr_assert_not(cg_cache_key_get(c, TENANT, "k2", 100, &out));
    cg_cache_key_put(c, TENANT, "k1", &k, in_flight, 101);
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 101, &out), "a fill read before the flush");
    cg_cache_key_put(c, TENANT, "k1", &k, cg_cache_ticket(c), 102);
    cr_assert(cg_cache_key_get(c, TENANT, "k1", 102, &out));
    cg_cache_key_drop_all(c); /* a TRUNCATE announced on cg_keys */
    cr_assert_not(cg_cache_key_get(c, TENANT, "k1", 102, &out));
    cg_cache_free(c);
}

Test(cache, local_allowance_per_outage)
{
    struct cg_cache *c = new_cache(1000, 0);
    cr_assert_eq(put_path(c, 5, 50, cg_cache_ticket(c), 100), 2);
    struct cg_scope_ids s = {.session_id = "s"};
    cg_cache_store_state(c, false);
    cr_assert(cg_cache_allowance_take(c, TENANT, &s, 60, 100));
    cr_assert(cg_cache_allowance_take(c, TENANT, &s, 40, 100));
    cr_assert_not(cg_cache_allowance_take(c, TENANT, &s, 1, 100), "spent");
    cr_assert(cg_cache_allowance_take(c, TENANT, &s, -40, 100), "a refund");
    cr_assert(cg_cache_allowance_take(c, TENANT, &s, 40, 100));
    cg_cache_store_state(c, true); /* the outage ends: the next one starts from 0 */
    cg_cache_store_state(c, false);
    cr_assert(cg_cache_allowance_take(c, TENANT, &s, 100, 100));
    struct cg_scope_ids absent = {.session_id = "absent"};
    cr_assert_not(cg_cache_allowance_take(c, TENANT, &absent, 1, 100), "not cached: none");
    cg_cache_free(c);
}

/* ---------------------------------------------------------------- Redis ------------ */

/* r's text (at generation gen_in) into text (CG_REDIS_ROW_TEXT_MAX bytes, *len of them) and
 * back into *back (its ids copied from r, as the reader knows them); false when either way
 * fails. */
static bool round_trip(const struct cg_budget_row *r, int64_t gen_in, char *text, size_t *len,
                       struct cg_budget_row *back, int64_t *gen)
{
    *len = cg_redis_row_encode(r, gen_in, text, CG_REDIS_ROW_TEXT_MAX);
    memset(back, 0, sizeof *back);
    back->ids = r->ids;
    *gen = -1;
    return *len > 0 && cg_redis_row_decode(text, *len, back, gen);
}

Test(redis_rows, text_round_trip_and_hostile_input)
{
    struct cg_budget_row r = row_at("s", "t", 42, 12345);
    r.ntiers = 2;
    r.tier_ratio[0] = 0.8;
    r.tier_delay_ms[0] = 50;
    r.tier_ratio[1] = 0.95;
    r.tier_delay_ms[1] = 1500;
    r.warning_ratio = 0.1 + 0.2; /* not exactly representable in short decimal */
    snprintf(r.description, sizeof r.description, "multi\nline = desc %%s");
    snprintf(r.updated_by_key_id, sizeof r.updated_by_key_id, "-");
    r.next_reset_ms = 1700000000000;
    r.allocate_from_parent = true; /* format 2 (row2) */
    r.allocated_tokens = 777;
    r.exclude_cache_read_tokens = true;
    r.spent_input_tokens = 11;
    r.spent_output_tokens = 12;
    r.spent_cache_read_tokens = 13;
    r.spent_cache_write_tokens = 14;
    r.last_activity_ms = 1700000000123;
    char text[CG_REDIS_ROW_TEXT_MAX];
    size_t len = 0;
    struct cg_budget_row back;
    int64_t gen = -1;
    cr_assert(round_trip(&r, 9, text, &len, &back, &gen));
    cr_assert_eq(gen, 9);
    cr_assert_eq(memcmp(&back, &r, sizeof r), 0, "the row comes back bit for bit");
    /* Every truncation, and every single-byte corruption, is refused or parses without
     * leaving the bounds (no crash, fields in range). */
    for (size_t cut = 0; cut < len - 1; cut++)
        cr_assert_not(cg_redis_row_decode(text, cut, &back, &gen) && back.level == 0);
    const char junk[] = {'x', '\0', '-', ' ', '9', 'n'};
    for (size_t i = 0; i < len; i++) {
        for (size_t j = 0; j < sizeof junk; j++) {
            char bad[CG_REDIS_ROW_TEXT_MAX];
            memcpy(bad, text, len);
            bad[i] = junk[j];
            if (cg_redis_row_decode(bad, len, &back, &gen))
                cr_assert(back.level >= 1 && back.level <= 4 && back.ntiers <= CG_TIERS_STORE_MAX &&
                          back.row_version >= 1 && back.used_tokens >= 0);
        }
    }
    cr_assert_not(cg_redis_row_decode("1 0 nan", 7, &back, &gen));
}

/* Ratios come back bit for bit, whether written as a short decimal or with %.17g. */
Test(redis_rows, ratios_round_trip_exactly)
{
    double values[64] = {0.0,  -0.0,     0.8,       0.95, 0.05,   0.125,  1.0, 0.1 + 0.2,
                         1e-7, 0.999999, 0.1234567, 0.5,  0.9995, 5e-324, 0.7, 0.3};
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (int i = 16; i < 64; i++) { /* random ratios, random short decimals */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        values[i] = (i % 2) ? (double)(x >> 11) / 9007199254740992.0 /* [0, 1) */
                            : (double)(x % 1000000) / 1000000.0;     /* up to 6 decimals */
    }
    for (int i = 0; i < 64; i++) {
        struct cg_budget_row r = row_at("s", "t", 42, 12345);
        r.warning_ratio = values[i];
        r.ntiers = 1;
        r.tier_ratio[0] = values[63 - i];
        r.tier_delay_ms[0] = 50;
        char text[CG_REDIS_ROW_TEXT_MAX];
        size_t len = 0;
        struct cg_budget_row back;
        int64_t gen = -1;
        cr_assert(round_trip(&r, 1, text, &len, &back, &gen), "value %d", i);
        cr_assert_eq(memcmp(&back.warning_ratio, &r.warning_ratio, sizeof r.warning_ratio), 0,
                     "%.17g came back as %.17g (%s)", r.warning_ratio, back.warning_ratio, text);
        cr_assert_eq(memcmp(&back.tier_ratio[0], &r.tier_ratio[0], sizeof r.tier_ratio[0]), 0,
                     "%.17g came back as %.17g", r.tier_ratio[0], back.tier_ratio[0]);
    }
    /* A short decimal is written as one. */
    struct cg_budget_row r = row_at("s", "t", 42, 12345);
    r.warning_ratio = 0.8;
    char text[CG_REDIS_ROW_TEXT_MAX];
    cr_assert(cg_redis_row_encode(&r, 1, text, sizeof text) > 0);
    cr_assert(strstr(text, " 0.8 ") != NULL || strstr(text, " 0.8\n") != NULL, "%s", text);
}

static struct cg_pgtest T;
static void redis_setup(void)
{
    cg_pgtest_setup(&T);
}
static void redis_teardown(void)
{
    cg_pgtest_teardown(&T);
}

/* A tenant of this run only (Redis databases outlive a test). */
static char rtenant[CG_UUID_LEN + 1];

static bool redis_path(struct cg_redis *r, int64_t *used, int64_t *gen)
{
    struct cg_scope_ids ids = {.session_id = "s"};
    struct cg_budget_row out[4];
    int n = 0;
    if (!cg_redis_path_get(r, rtenant, &ids, out, &n, gen))
        return false;
    cr_assert_eq(n, 2);
    cr_assert_str_eq(out[1].ids.session_id, "s");
    *used = out[1].used_tokens;
    return true;
}

Test(redis_rows, newest_version_wins_and_generations_invalidate, .init = redis_setup,
     .fini = redis_teardown)
{
    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cr_assert(r != NULL);
    snprintf(rtenant, sizeof rtenant, "0b0e5c2a-6d5f-4c44-9a53-%.12s", T.schema + 8);
    int64_t used = 0, gen = -1;
    cr_assert_not(redis_path(r, &used, &gen), "empty");
    cr_assert_eq(gen, 0, "Redis answered: generation 0");
    struct cg_budget_row rows[2] = {row_at("", "", 1, 0), row_at("s", "", 5, 50)};
    cg_redis_rows_put(r, rtenant, rows, 2, gen);
    cr_assert(redis_path(r, &used, &gen));
    cr_assert_eq(used, 50);
    /* A committed write of version 7, then a late fill of version 6: 7 stays. */
    rows[1] = row_at("s", "", 7, 70);
    cg_redis_rows_put(r, rtenant, rows, 2, -1);
    rows[1] = row_at("s", "", 6, 60);
    cg_redis_rows_put(r, rtenant, rows, 2, gen);
    cr_assert(redis_path(r, &used, &gen));
    cr_assert_eq(used, 70);
    char key[256];
    snprintf(key, sizeof key, "cg:{%s}:row2:s  ", rtenant);
    cr_assert(cg_pgtest_redis_exists(&T, key), "keys carry the {tenant} hash tag");
    long long ttl = cg_pgtest_redis_ttl(&T, key);
    cr_assert(ttl > 0 && ttl <= CG_REDIS_ROW_TTL_MS / 1000, "ttl %lld", ttl);
    /* A tenant drop: every row stops counting, and a fill that read before it is refused. */
    int64_t old_gen = gen;
    cr_assert(cg_redis_tenant_bump(r, rtenant));
    cr_assert_not(redis_path(r, &used, &gen));
    cr_assert_eq(gen, old_gen + 1);
    rows[1] = row_at("s", "", 8, 80);
    cg_redis_rows_put(r, rtenant, rows, 2, old_gen);
    cr_assert_not(redis_path(r, &used, &gen), "stale generation refused");
    cg_redis_rows_put(r, rtenant, rows, 2, gen);
    cr_assert(redis_path(r, &used, &gen));
    cr_assert_eq(used, 80);
    cg_redis_free(r);
    /* Redis unreachable: a miss, generation -1, never an error. */
    r = cg_redis_new("redis://127.0.0.1:1/0", 100);
    cr_assert_not(redis_path(r, &used, &gen));
    cr_assert_eq(gen, -1);
    cg_redis_rows_put(r, rtenant, rows, 2, 0);
    cg_redis_free(r);
}

/* test_cache_fleet.c - the process cache of CheckBudget (service/cache.h) for a fleet: it
 * holds 100,000 agents' paths at once, an announced write (cg_cache_row_announced) drops
 * exactly the rows older than it, and, against a real PostgreSQL, a counter move committed
 * through one store reaches another replica's cache on cg_rows (the events thread's step)
 * with that cache's row TTL set to an hour: no expiry is involved.
 */
#include <criterion/criterion.h>

#include <poll.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "base/clock.h"
#include "pgtest.h"
#include "service/cache.h"
#include "service/watch.h"

#define TENANT "0b0e5c2a-6d5f-4c44-9a53-1d2b3c4d5e6f"
#define AGENTS 100000

static struct cg_budget_row row_of(const struct cg_scope_ids *ids, int64_t version, int64_t used)
{
    struct cg_budget_row r;
    memset(&r, 0, sizeof r);
    r.ids = *ids;
    r.level = cg_scope_level(ids);
    r.has_budget = true;
    r.mode = 1;
    r.limit_tokens = 1000000;
    r.warning_ratio = 0.8;
    r.on_store_failure = 1;
    r.reset_period = 1;
    r.row_version = version;
    r.used_tokens = used;
    snprintf(r.description, sizeof r.description, "not cached");
    return r;
}

static void agent_ids(int i, struct cg_scope_ids *ids)
{
    memset(ids, 0, sizeof *ids);
    snprintf(ids->session_id, sizeof ids->session_id, "fleet");
    snprintf(ids->task_id, sizeof ids->task_id, "t%d", i % 100);
    snprintf(ids->agent_id, sizeof ids->agent_id, "agent-%d", i);
}

/* The path of ids (tenant first) at version 1, the last level with used tokens. */
static int path_of(const struct cg_scope_ids *ids, int64_t used, struct cg_budget_row out[4])
{
    int depth = cg_scope_level(ids);
    for (int level = 1; level <= depth; level++) {
        struct cg_scope_ids p;
        cg_scope_prefix(ids, level, &p);
        out[level - 1] = row_of(&p, 1, level == depth ? used : 0);
    }
    return depth;
}

Test(cache_fleet, holds_and_serves_100k_agents)
{
    struct cg_cache_opts o = {.key_ttl_ms = 1000, .row_ttl_ms = 0, .max_rows = 0};
    struct cg_cache *c = cg_cache_new(&o);
    cr_assert(c != NULL);
    cg_cache_set_live(c, true);
    for (int i = 0; i < AGENTS; i++) {
        struct cg_scope_ids ids;
        struct cg_budget_row path[4];
        agent_ids(i, &ids);
        int n = path_of(&ids, i, path);
        cr_assert_eq(cg_cache_rows_put(c, TENANT, path, n, cg_cache_ticket(c), 100), n);
    }
    /* No age limit (row_ttl_ms 0): an hour later every path is still served, each row as
     * stored but for its description, its ids those of the path asked for. */
    int64_t later = 100 + 3600 * 1000;
    for (int i = 0; i < AGENTS; i++) {
        struct cg_scope_ids ids;
        struct cg_budget_row out[4];
        int n = 0;
        agent_ids(i, &ids);
        cr_assert(cg_cache_path_get(c, TENANT, &ids, later, false, out, &n, NULL), "agent %d", i);
        cr_assert_eq(n, 4);
        cr_assert_eq(out[3].used_tokens, i);
        cr_assert_eq(out[3].limit_tokens, 1000000);
        cr_assert_eq(out[3].level, 4);
        cr_assert_str_eq(out[3].ids.agent_id, ids.agent_id);
        cr_assert_str_eq(out[2].ids.task_id, ids.task_id);
        cr_assert_str_eq(out[2].ids.agent_id, "");
        cr_assert_str_eq(out[3].description, "");
    }
    struct cg_cache_stats st;
    cg_cache_stats(c, &st);
    cr_assert_eq(st.rows_evicted, 0, "the default capacity holds the fleet");
    cr_assert_eq(st.row_hits, AGENTS);
    cr_log_info("a cached row takes %zu bytes besides its name", cg_cache_row_bytes());
    cr_assert(cg_cache_row_bytes() < 1024, "a row is %zu bytes", cg_cache_row_bytes());
    cg_cache_free(c);
}

Test(cache_fleet, an_announced_write_drops_only_older_rows)
{
    struct cg_cache_opts o = {.key_ttl_ms = 1000, .row_ttl_ms = 0, .max_rows = 1024};
    struct cg_cache *c = cg_cache_new(&o);
    cr_assert(c != NULL);
    cg_cache_set_live(c, true);
    struct cg_scope_ids ids;
    struct cg_budget_row path[4], out[4];
    int n = 0;
    agent_ids(7, &ids);
    int depth = path_of(&ids, 0, path);
    path[3].row_version = 5;
    path[3].used_tokens = 50;
    cr_assert_eq(cg_cache_rows_put(c, TENANT, path, depth, cg_cache_ticket(c), 100), 4);
    uint64_t before = cg_cache_ticket(c); /* a fill starts reading */
    /* This process's own write, heard back: nothing to drop. */
    cr_assert_not(cg_cache_row_announced(c, TENANT, &ids, 5));
    cr_assert(cg_cache_path_get(c, TENANT, &ids, 100, false, out, &n, NULL));
    /* Another replica's write of version 7: the row goes, the rest of the path stays. */
    cr_assert(cg_cache_row_announced(c, TENANT, &ids, 7));
    cr_assert_not(cg_cache_path_get(c, TENANT, &ids, 100, false, out, &n, NULL));
    cr_assert(cg_cache_path_get(c, TENANT, &ids, 100, true, out, &n, NULL), "kept as stale");
    struct cg_scope_ids task;
    cg_scope_prefix(&ids, 3, &task);
    cr_assert(cg_cache_path_get(c, TENANT, &task, 100, false, out, &n, NULL), "parents stay");
    /* Version 6 (Redis behind, or a read from before the write) is refused, even read
     * after the announcement; version 7 is taken, even read before it. */
    path[3].row_version = 6;
    path[3].used_tokens = 60;
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &path[3], 1, cg_cache_ticket(c), 101), 0);
    path[3].row_version = 7;
    path[3].used_tokens = 70;
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &path[3], 1, before, 102), 1);
    cr_assert(cg_cache_path_get(c, TENANT, &ids, 102, false, out, &n, NULL));
    cr_assert_eq(out[3].used_tokens, 70);
    /* A row not cached: fills that read before the announcement are refused. */
    struct cg_scope_ids other;
    agent_ids(8, &other);
    uint64_t t2 = cg_cache_ticket(c);
    cr_assert(cg_cache_row_announced(c, TENANT, &other, 3));
    struct cg_budget_row r = row_of(&other, 2, 0);
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &r, 1, t2, 103), 0);
    r.row_version = 3;
    cr_assert_eq(cg_cache_rows_put(c, TENANT, &r, 1, cg_cache_ticket(c), 104), 1);
    struct cg_cache_stats st;
    cg_cache_stats(c, &st);
    cr_assert_eq(st.rows_announced, 2);
    cg_cache_free(c);
}

/* ---------------------------------------------------------------- two replicas ---- */

static struct cg_pgtest T;

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

#define OK(expr)                                                                                   \
    do {                                                                                           \
        cg_status rc_ = (expr);                                                                    \
        cr_assert_eq(rc_, CG_OK, "%s: %s (%s)", #expr, cg_status_name(rc_), err.msg);              \
    } while (0)

/* One replica: a store (its pool thread), a cache, the events thread's listener and hub. */
struct replica {
    struct cg_svc_env env;
    struct cg_store_listener *listener;
};

static void replica_open(struct replica *r)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    memset(r, 0, sizeof *r);
    /* The old expiry set to an hour: whatever this replica learns, an announcement told it. */
    struct cg_cache_opts co = {.key_ttl_ms = 1000, .row_ttl_ms = 3600 * 1000};
    r->env.store = cg_store_new(&opts);
    r->env.cache = cg_cache_new(&co);
    r->env.watch_hub = cg_watch_hub_new();
    r->listener = cg_store_listener_new(&opts);
    cr_assert(r->env.store && r->env.cache && r->env.watch_hub && r->listener);
    /* The listener is up (LISTEN sent): the cache goes live. */
    cr_assert(cg_events_step(&r->env, r->listener, 10));
    cr_assert(cg_cache_is_live(r->env.cache));
}

static void replica_close(struct replica *r)
{
    cg_store_listener_free(r->listener);
    cg_watch_hub_free(r->env.watch_hub);
    cg_cache_free(r->env.cache);
    cg_store_free(r->env.store);
}

/* The replica's CheckBudget read of ids as budget.c does it on a miss: PostgreSQL, then
 * the cache with the ticket taken before. */
static void replica_fill(struct replica *r, const char *tenant, const struct cg_scope_ids *ids)
{
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_budget_row path[4];
    int n = 0;
    bool need_tx = false;
    uint64_t ticket = cg_cache_ticket(r->env.cache);
    OK(cg_store_path_peek(r->env.store, tenant, ids, cg_wall_ms(), path, &n, &need_tx, &err));
    cr_assert_not(need_tx);
    cr_assert_eq(cg_cache_rows_put(r->env.cache, tenant, path, n, ticket, cg_mono_ms()), n);
}

/* used_tokens of the last level of ids in the replica's cache, fresh only; -1: a miss. */
static int64_t replica_cached_used(struct replica *r, const char *tenant,
                                   const struct cg_scope_ids *ids)
{
    struct cg_budget_row out[4];
    int n = 0;
    if (!cg_cache_path_get(r->env.cache, tenant, ids, cg_mono_ms(), false, out, &n, NULL))
        return -1;
    return out[n - 1].used_tokens;
}

/* In the store's open transaction, as the budget service writes: lock the path of ids into
 * path (*n rows), add tokens, append the USAGE_CHANGED event of each level
 * (service/budget_events.c). */
static void add_in_tx(struct cg_store *s, const char *tenant, const struct cg_scope_ids *ids,
                      int64_t tokens, struct cg_budget_row path[4], int *n)
{
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_event_in events[4];
    OK(cg_store_path_read(s, tenant, ids, true, true, cg_wall_ms(), path, n, &err));
    OK(cg_store_path_add(s, tenant, path, *n, tokens, 0, 0, 0, &err));
    memset(events, 0, sizeof events);
    for (int i = 0; i < *n; i++) {
        events[i].ids = path[i].ids;
        events[i].type = 2; /* USAGE_CHANGED */
    }
    OK(cg_store_events_append(s, tenant, events, *n, cg_wall_ms(), &err));
}

/* Replica a's write path as the budget service runs it: add_in_tx, commit (the NOTIFY after
 * it announces the rows), then cg_cache_written. */
static void replica_add(struct replica *a, const char *tenant, const struct cg_scope_ids *ids,
                        int64_t tokens)
{
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_budget_row path[4];
    int n = 0;
    OK(cg_store_begin(a->env.store, &err));
    add_in_tx(a->env.store, tenant, ids, tokens, path, &n);
    OK(cg_store_commit(a->env.store, &err));
    cg_cache_written(&a->env, tenant, path, n);
}

/* Budgets on every level of ids below the tenant (each scope exists once its budget does). */
static void make_path(struct cg_store *s, const char *tenant, const struct cg_scope_ids *ids)
{
    struct cg_err err;
    cg_err_clear(&err);
    for (int level = 2; level <= cg_scope_level(ids); level++) {
        struct cg_scope_ids p;
        cg_scope_prefix(ids, level, &p);
        struct cg_budget_row row = row_of(&p, 0, 0), out, path[4];
        bool created = false;
        int n = 0;
        OK(cg_store_begin(s, &err));
        OK(cg_store_path_read(s, tenant, &p, true, true, cg_wall_ms(), path, &n, &err));
        OK(cg_store_budget_put(s, tenant, &row, 0, NULL, cg_wall_ms(), NULL, &out, &created, &err));
        OK(cg_store_commit(s, &err));
    }
}

/* Replicas a and b on one database, and a new tenant t. */
static void replicas_open(struct replica *a, struct replica *b, struct cg_tenant *t)
{
    struct cg_err err;
    cg_err_clear(&err);
    replica_open(a);
    replica_open(b);
    OK(cg_store_tenant_create(a->env.store, "fleet", "UTC", t, &err));
}

Test(cache_fleet, a_counter_move_on_one_replica_drops_the_row_on_the_other, .init = setup,
     .fini = teardown, .timeout = 120)
{
    struct replica a, b;
    struct cg_tenant t;
    replicas_open(&a, &b, &t);
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_scope_ids ids;
    agent_ids(42, &ids);
    make_path(a.env.store, t.tenant_id, &ids);
    replica_fill(&b, t.tenant_id, &ids);
    cr_assert_eq(replica_cached_used(&b, t.tenant_id, &ids), 0);

    /* A's write moves only counters (no WatchUsage event): B hears of it on cg_rows. */
    replica_add(&a, t.tenant_id, &ids, 25);
    cr_assert_eq(replica_cached_used(&a, t.tenant_id, &ids), 25, "A's own cache has it at once");
    int64_t deadline = cg_mono_ms() + 20000; /* generous for a loaded machine */
    while (replica_cached_used(&b, t.tenant_id, &ids) == 0 && cg_mono_ms() < deadline)
        (void)cg_events_step(&b.env, b.listener, 100);
    cr_assert_eq(replica_cached_used(&b, t.tenant_id, &ids), -1,
                 "B dropped the row it held (its TTL is an hour)");
    replica_fill(&b, t.tenant_id, &ids);
    cr_assert_eq(replica_cached_used(&b, t.tenant_id, &ids), 25);

    /* The parents moved too (the tenant row counts every token): dropped as well. */
    struct cg_scope_ids tenant_level;
    cg_scope_prefix(&ids, 1, &tenant_level);
    cr_assert_eq(replica_cached_used(&b, t.tenant_id, &tenant_level), 25);

    /* A hears its own announcement back (and its events): its rows stay cached. */
    for (int i = 0; i < 5; i++)
        (void)cg_events_step(&a.env, a.listener, 100);
    cr_assert_eq(replica_cached_used(&a, t.tenant_id, &ids), 25);

    /* A write that does not know its rows (sweeper, CloseScope) drops the whole tenant. */
    cg_cache_dropped(&a.env, t.tenant_id);
    deadline = cg_mono_ms() + 20000;
    while (replica_cached_used(&b, t.tenant_id, &ids) == 25 && cg_mono_ms() < deadline)
        (void)cg_events_step(&b.env, b.listener, 100);
    cr_assert_eq(replica_cached_used(&b, t.tenant_id, &tenant_level), -1);
    replica_close(&a);
    replica_close(&b);
}

/* The cg_rows payloads about tenant a raw listener got until it counted `rows` row lines
 * (or 20 s): how many payloads, each checked to carry at most 16 lines. */
static int rows_payloads(PGconn *listen, const char *tenant, int rows)
{
    int payloads = 0, lines = 0;
    int64_t deadline = cg_mono_ms() + 20000;
    while (lines < rows && cg_mono_ms() < deadline) {
        cr_assert(PQconsumeInput(listen), "%s", PQerrorMessage(listen));
        PGnotify *n;
        while ((n = PQnotifies(listen)) != NULL) {
            /* Notifications are per database: other tests' tenants are heard too. */
            if (strcmp(n->relname, "cg_rows") == 0 &&
                strncmp(n->extra, tenant, strlen(tenant)) == 0) {
                int here = 0;
                for (const char *p = strchr(n->extra, '\n'); p != NULL; p = strchr(p + 1, '\n'))
                    here++;
                cr_assert(here >= 1 && here <= 16, "%d rows in one payload", here);
                lines += here;
                payloads++;
            }
            PQfreemem(n);
        }
        if (lines < rows) {
            struct pollfd pfd = {.fd = PQsocket(listen), .events = POLLIN};
            (void)poll(&pfd, 1, 100);
        }
    }
    cr_assert_eq(lines, rows, "row lines announced");
    return payloads;
}

Test(cache_fleet, a_commit_announces_its_rows_a_few_payloads_per_tenant, .init = setup,
     .fini = teardown, .timeout = 120)
{
    struct replica a, b;
    struct cg_tenant t;
    replicas_open(&a, &b, &t);
    struct cg_err err;
    cg_err_clear(&err);
    enum { N = 20 }; /* agents, each under a task of its own: N + N + 2 rows */
    struct cg_scope_ids ids[N];
    for (int i = 0; i < N; i++) {
        agent_ids(i, &ids[i]);
        make_path(a.env.store, t.tenant_id, &ids[i]);
        replica_fill(&b, t.tenant_id, &ids[i]);
    }
    for (int i = 0; i < 10; i++) /* what the setup announced */
        (void)cg_events_step(&b.env, b.listener, 50);
    PGconn *listen = cg_pgtest_connect(&T);
    PQclear(PQexec(listen, "LISTEN cg_rows"));
    uint64_t ticket = cg_cache_ticket(b.env.cache); /* a fill of B starts reading */

    /* One transaction of A moves every agent's path. */
    OK(cg_store_begin(a.env.store, &err));
    for (int i = 0; i < N; i++) {
        struct cg_budget_row path[4];
        int n = 0;
        add_in_tx(a.env.store, t.tenant_id, &ids[i], 5, path, &n);
    }
    OK(cg_store_commit(a.env.store, &err));

    /* Each row once, 16 to a payload: 42 rows in 3 notifications, not 42 (nor one that
     * names the whole tenant). */
    cr_assert_eq(rows_payloads(listen, t.tenant_id, 2 * N + 2), 3);
    PQfinish(listen);
    /* B drops every one of those rows... */
    int64_t deadline = cg_mono_ms() + 20000;
    for (int i = 0; i < N && cg_mono_ms() < deadline;)
        if (replica_cached_used(&b, t.tenant_id, &ids[i]) == -1)
            i++;
        else
            (void)cg_events_step(&b.env, b.listener, 100);
    for (int i = 0; i < N; i++)
        cr_assert_eq(replica_cached_used(&b, t.tenant_id, &ids[i]), -1, "agent %d dropped", i);
    /* ...each by its version, not as a whole tenant: the fill that started before the
     * announcements and read after the commit is taken (its rows are that new), where a
     * tenant's drop refuses every fill that started before it. */
    for (int i = 0; i < N; i++) {
        struct cg_budget_row path[4];
        int n = 0;
        bool need_tx = false;
        OK(cg_store_path_peek(b.env.store, t.tenant_id, &ids[i], cg_wall_ms(), path, &n, &need_tx,
                              &err));
        cr_assert_eq(cg_cache_rows_put(b.env.cache, t.tenant_id, path, n, ticket, cg_mono_ms()), n,
                     "agent %d", i);
        cr_assert_eq(replica_cached_used(&b, t.tenant_id, &ids[i]), 5, "agent %d", i);
    }
    replica_close(&a);
    replica_close(&b);
}

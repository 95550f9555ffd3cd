/* test_store.c - the storage layer (store.h) against real PostgreSQL and Redis.
 *
 * Each test gets its own schema and Redis database (tests/support/pgtest.h). Failures of
 * the servers are made for real: closed ports, a socket that never answers, backends
 * terminated with pg_terminate_backend, tables locked by another session.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "pgtest.h"
#include "store/migrate.h"
#include "store/store.h"

static struct cg_pgtest T;

static void setup_empty(void)
{
    cg_pgtest_setup(&T);
}

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

static struct cg_store *new_store(const struct cg_store_opts *opts)
{
    struct cg_store *s = cg_store_new(opts);
    cr_assert(s != NULL, "cg_store_new failed");
    return s;
}

static struct cg_store *test_store(void)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    return new_store(&opts);
}

static struct cg_tenant make_tenant(struct cg_store *s, const char *name)
{
    struct cg_tenant t;
    struct cg_err err;
    cg_status rc = cg_store_tenant_create(s, name, "Europe/Paris", &t, &err);
    cr_assert_eq(rc, CG_OK, "tenant_create: %s %s", cg_status_name(rc), err.msg);
    return t;
}

static void hash_of(const char *secret, uint8_t out[32])
{
    cg_sha256(secret, strlen(secret), out);
}

static struct cg_api_key make_key(struct cg_store *s, const char *tenant_id, const char *key_id,
                                  const char *secret)
{
    uint8_t h[32];
    hash_of(secret, h);
    struct cg_api_key k;
    struct cg_err err;
    struct cg_api_key_spec spec = {.name = "ci key", .role = 4};
    cg_status rc = cg_store_key_create(s, tenant_id, key_id, h, &spec, NULL, &k, &err);
    cr_assert_eq(rc, CG_OK, "key_create: %s %s", cg_status_name(rc), err.msg);
    return k;
}

static void cache_key(const char *tenant_id, const char *key_id, char *buf, size_t cap)
{
    snprintf(buf, cap, "cg:{%s}:key:%s", tenant_id, key_id);
}

/* ------------------------------------------------------------------ migrations --- */

Test(store, migrations_apply_to_a_fresh_schema, .init = setup_empty, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_err err;
    int applied = -1;
    cg_status rc = cg_store_migrate(s, &applied, &err);
    cr_assert_eq(rc, CG_OK, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_gt(cg_migrations_count, 0);
    cr_assert_eq(applied, cg_migrations_count);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT count(*) FROM schema_migrations", NULL),
                 cg_migrations_count);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT max(version) FROM schema_migrations", NULL),
                 cg_migrations[cg_migrations_count - 1].version);
    /* Everything landed in the test's schema, selected by search_path. */
    cr_assert_eq(cg_pgtest_query_int(db,
                                     "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND"
                                     " tablename IN ('tenants', 'api_keys', 'schema_migrations')",
                                     T.schema),
                 3);
    PQfinish(db);
    (void)make_tenant(s, "after migration");
    cg_store_free(s);
}

Test(store, migrations_are_idempotent, .init = setup_empty, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_err err;
    int applied = -1;
    cr_assert_eq(cg_store_migrate(s, &applied, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(applied, cg_migrations_count);
    cr_assert_eq(cg_store_migrate(s, &applied, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(applied, 0, "the second run applied %d", applied);
    cg_store_free(s);

    struct cg_store *other = test_store();
    cr_assert_eq(cg_store_migrate(other, &applied, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(applied, 0);
    cg_store_free(other);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT count(*) FROM schema_migrations", NULL),
                 cg_migrations_count);
    PQfinish(db);
}

#define MIGRATORS 8

struct migrate_job {
    pthread_barrier_t *start;
    cg_status rc;
    int applied;
    struct cg_err err;
};

static void *migrate_thread(void *arg)
{
    struct migrate_job *job = arg;
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    pthread_barrier_wait(job->start);
    job->rc = s ? cg_store_migrate(s, &job->applied, &job->err) : CG_NOMEM;
    cg_store_free(s);
    return NULL;
}

Test(store, concurrent_migrations_apply_each_version_once, .init = setup_empty, .fini = teardown,
     .timeout = 30)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, MIGRATORS);
    struct migrate_job jobs[MIGRATORS];
    pthread_t threads[MIGRATORS];
    for (int i = 0; i < MIGRATORS; i++) {
        jobs[i] = (struct migrate_job){.start = &start, .applied = -1};
        cr_assert_eq(pthread_create(&threads[i], NULL, migrate_thread, &jobs[i]), 0);
    }
    int total = 0;
    for (int i = 0; i < MIGRATORS; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(jobs[i].rc, CG_OK, "migrator %d: %s %s", i, cg_status_name(jobs[i].rc),
                     jobs[i].err.msg);
        total += jobs[i].applied;
    }
    pthread_barrier_destroy(&start);
    cr_assert_eq(total, cg_migrations_count, "%d migrations applied in all", total);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT count(*) FROM schema_migrations", NULL),
                 cg_migrations_count);
    cr_assert_eq(
        cg_pgtest_query_int(db, "SELECT count(DISTINCT version) FROM schema_migrations", NULL),
        cg_migrations_count);
    PQfinish(db);
}

/* ------------------------------------------------------------------ tenants --- */

Test(store, tenant_create_then_get, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    int64_t before = cg_wall_ms();
    struct cg_tenant created = make_tenant(s, "Acme Ltd");
    cr_assert_eq(strlen(created.tenant_id), CG_UUID_LEN);
    cr_assert_str_eq(created.name, "Acme Ltd");
    cr_assert_str_eq(created.time_zone, "Europe/Paris");
    cr_assert(created.created_at_ms >= before - 60000 &&
                  created.created_at_ms <= cg_wall_ms() + 60000,
              "created_at_ms %lld is not now", (long long)created.created_at_ms);

    struct cg_tenant got;
    struct cg_err err;
    cr_assert_eq(cg_store_tenant_get(s, created.tenant_id, &got, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(got.tenant_id, created.tenant_id);
    cr_assert_str_eq(got.name, "Acme Ltd");
    cr_assert_str_eq(got.time_zone, "Europe/Paris");
    cr_assert_eq(got.created_at_ms, created.created_at_ms);

    /* The id in upper case names the same tenant; it comes back in lower case. */
    char upper[CG_UUID_LEN + 1];
    for (int i = 0; i <= CG_UUID_LEN; i++)
        upper[i] = (char)((created.tenant_id[i] >= 'a' && created.tenant_id[i] <= 'f')
                              ? created.tenant_id[i] - 'a' + 'A'
                              : created.tenant_id[i]);
    cr_assert_eq(cg_store_tenant_get(s, upper, &got, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(got.tenant_id, created.tenant_id);
    cg_store_free(s);
}

Test(store, tenant_names_are_checked, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t;
    struct cg_err err;
    /* 200 two-byte characters are fine; 201 are not. */
    char name[CG_NAME_MAX * 2 + 3] = "";
    for (int i = 0; i < CG_NAME_MAX; i++)
        memcpy(name + 2 * i, "\xc3\xa9", 2);
    name[2 * CG_NAME_MAX] = '\0';
    cr_assert_eq(cg_store_tenant_create(s, name, "UTC", &t, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(t.name, name);
    memcpy(name + 2 * CG_NAME_MAX, "\xc3\xa9", 3);
    cr_assert_eq(cg_store_tenant_create(s, name, "UTC", &t, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "name") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_create(s, "", "UTC", &t, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "name") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_create(s, "bad \xff utf-8", "UTC", &t, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "name") != NULL, "%s", err.msg);
    cg_store_free(s);
}

Test(store, invalid_time_zone_is_invalid_argument_naming_time_zone, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    const char *bad[] = {"Mars/Olympus_Mons", "UTC+3", "", "Europe/Paris'; DROP TABLE tenants; --",
                         "Europe/../../etc/passwd"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_tenant t;
        struct cg_err err;
        cg_status rc = cg_store_tenant_create(s, "tz test", bad[i], &t, &err);
        cr_assert_eq(rc, CG_INVALID_ARGUMENT, "time zone \"%s\": %s", bad[i], cg_status_name(rc));
        cr_assert(strstr(err.msg, "time_zone") != NULL, "message \"%s\"", err.msg);
    }
    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT count(*) FROM tenants", NULL), 0);
    PQfinish(db);
    struct cg_tenant t;
    struct cg_err err;
    cr_assert_eq(cg_store_tenant_create(s, "tz ok", "America/Argentina/Buenos_Aires", &t, &err),
                 CG_OK, "%s", err.msg);
    cg_store_free(s);
}

Test(store, unknown_tenant_is_not_found, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    const char *ids[] = {"6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", "not-a-uuid", "",
                         "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f0g", "'; SELECT 1; --"};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        struct cg_tenant t;
        struct cg_err err;
        cg_status rc = cg_store_tenant_get(s, ids[i], &t, &err);
        cr_assert_eq(rc, CG_NOT_FOUND, "id \"%s\": %s %s", ids[i], cg_status_name(rc), err.msg);
        cr_assert(strstr(err.msg, "tenant_id") != NULL, "message \"%s\"", err.msg);
        cr_assert(strstr(err.msg, "uuid") == NULL && strstr(err.msg, "syntax") == NULL,
                  "SQL error leaked: \"%s\"", err.msg);
    }
    /* The store is still usable: nothing above broke its connection or transaction. */
    (void)make_tenant(s, "still fine");
    cg_store_free(s);
}

Test(store, tenant_list_pages_in_creation_order, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    char ids[5][CG_UUID_LEN + 1];
    for (int i = 0; i < 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "tenant %d", i);
        struct cg_tenant t = make_tenant(s, name);
        memcpy(ids[i], t.tenant_id, sizeof ids[i]);
    }
    struct cg_tenant page[2];
    char after[CG_UUID_LEN + 1] = "";
    int seen = 0, pages = 0;
    bool more = true;
    struct cg_err err;
    while (more) {
        int count = -1;
        cr_assert_eq(cg_store_tenant_list(s, after, 2, page, &count, &more, &err), CG_OK, "%s",
                     err.msg);
        pages++;
        cr_assert(count >= 1 && count <= 2);
        for (int i = 0; i < count; i++, seen++) {
            cr_assert(seen < 5);
            cr_assert_str_eq(page[i].tenant_id, ids[seen], "page %d entry %d", pages, i);
        }
        memcpy(after, page[count - 1].tenant_id, sizeof after);
    }
    cr_assert_eq(seen, 5);
    cr_assert_eq(pages, 3);

    int count = -1;
    struct cg_tenant all[10];
    cr_assert_eq(cg_store_tenant_list(s, "", 10, all, &count, &more, &err), CG_OK);
    cr_assert_eq(count, 5);
    cr_assert(!more);
    cr_assert_eq(cg_store_tenant_list(s, "", 5, all, &count, &more, &err), CG_OK);
    cr_assert_eq(count, 5);
    cr_assert(!more, "a page that ends exactly at the last tenant says there is more");
    cr_assert_eq(cg_store_tenant_list(s, "", 0, page, &count, &more, &err), CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "limit") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_list(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", 2, page, &count,
                                      &more, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "after_id") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_list(s, "garbage", 2, page, &count, &more, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "after_id") != NULL, "%s", err.msg);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ API keys --- */

Test(store, key_create_lookup_list_revoke, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "keys");
    struct cg_api_key k = make_key(s, t.tenant_id, "k1AbCdEf_-012345", "secret one");
    cr_assert_str_eq(k.tenant_id, t.tenant_id);
    cr_assert_str_eq(k.key_id, "k1AbCdEf_-012345");
    cr_assert_str_eq(k.name, "ci key");
    cr_assert_eq(k.revoked_at_ms, 0);
    cr_assert_gt(k.created_at_ms, 0);

    struct cg_key_auth auth;
    struct cg_err err;
    uint8_t want[32];
    hash_of("secret one", want);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert_arr_eq(auth.secret_hash, want, 32);
    cr_assert_str_eq(auth.tenant_name, "keys");
    cr_assert(!auth.revoked);

    /* Same id twice, unknown tenant, malformed ids. */
    struct cg_api_key dup;
    const struct cg_api_key_spec agent = {.role = 1};
    cr_assert_eq(cg_store_key_create(s, t.tenant_id, k.key_id, want, &agent, NULL, &dup, &err),
                 CG_ALREADY_EXISTS);
    cr_assert(strstr(err.msg, "key_id") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_key_create(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", "k2", want, &agent,
                                     NULL, &dup, &err),
                 CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "tenant_id") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_key_create(s, t.tenant_id, "bad key!", want, &agent, NULL, &dup, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "key_id") != NULL, "%s", err.msg);
    cr_assert_eq(
        cg_store_key_create(s, t.tenant_id, "k12345678901234567", want, &agent, NULL, &dup, &err),
        CG_INVALID_ARGUMENT);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, "nokey", &auth, &err), CG_NOT_FOUND);
    cr_assert_eq(cg_store_key_lookup(s, "nope", k.key_id, &auth, &err), CG_NOT_FOUND);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, "x'y", &auth, &err), CG_NOT_FOUND);

    struct cg_api_key listed[4];
    int count = -1;
    cr_assert_eq(cg_store_key_list(s, t.tenant_id, 4, listed, &count, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(count, 1);
    cr_assert_str_eq(listed[0].key_id, k.key_id);

    struct cg_api_key revoked, again;
    cr_assert_eq(cg_store_key_revoke(s, t.tenant_id, k.key_id, NULL, &revoked, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_gt(revoked.revoked_at_ms, 0);
    cr_assert_eq(cg_store_key_revoke(s, t.tenant_id, k.key_id, NULL, &again, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(again.revoked_at_ms, revoked.revoked_at_ms, "a second revoke moved the time");
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(auth.revoked);
    cr_assert_eq(cg_store_key_revoke(s, t.tenant_id, "nokey", NULL, &again, &err), CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "key_id") != NULL, "%s", err.msg);
    cg_store_free(s);
}

Test(store, key_list_is_newest_first_and_per_tenant, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant a = make_tenant(s, "a");
    struct cg_tenant b = make_tenant(s, "b");
    (void)make_key(s, a.tenant_id, "first", "s1");
    (void)make_key(s, a.tenant_id, "second", "s2");
    (void)make_key(s, a.tenant_id, "third", "s3");
    (void)make_key(s, b.tenant_id, "other", "s4");

    struct cg_api_key keys[3];
    int count = -1;
    struct cg_err err;
    cr_assert_eq(cg_store_key_list(s, a.tenant_id, 2, keys, &count, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(count, 2);
    cr_assert_str_eq(keys[0].key_id, "third");
    cr_assert_str_eq(keys[1].key_id, "second");
    cr_assert_eq(cg_store_key_list(s, b.tenant_id, 3, keys, &count, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(count, 1);
    cr_assert_str_eq(keys[0].key_id, "other");

    struct cg_tenant empty = make_tenant(s, "no keys");
    cr_assert_eq(cg_store_key_list(s, empty.tenant_id, 3, keys, &count, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(count, 0);
    cr_assert_eq(
        cg_store_key_list(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", 3, keys, &count, &err),
        CG_NOT_FOUND);
    cr_assert_eq(cg_store_key_list(s, "not-a-uuid", 3, keys, &count, &err), CG_NOT_FOUND);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ key cache --- */

Test(store, lookup_is_served_from_redis_after_the_first, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "cached");
    struct cg_api_key k = make_key(s, t.tenant_id, "cachedkey", "secret");
    char key[128];
    cache_key(t.tenant_id, k.key_id, key, sizeof key);
    cr_assert(!cg_pgtest_redis_exists(&T, key));

    struct cg_key_auth auth;
    struct cg_err err;
    uint8_t want[32];
    hash_of("secret", want);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert_arr_eq(auth.secret_hash, want, 32);
    cr_assert(cg_store_redis_ok(s));
    cr_assert(cg_pgtest_redis_exists(&T, key), "no cache entry %s", key);
    long long ttl = cg_pgtest_redis_ttl(&T, key);
    cr_assert(ttl > 0 && ttl <= 60, "ttl %lld", ttl);

    /* Change the row behind the cache's back: a lookup served from Redis does not see it. */
    PGconn *db = cg_pgtest_connect(&T);
    cg_pgtest_exec(db, "UPDATE api_keys SET secret_hash = decode(repeat('00', 32), 'hex')");
    PQfinish(db);
    memset(&auth, 0, sizeof auth);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert_arr_eq(auth.secret_hash, want, 32, "the second lookup did not come from Redis");
    cr_assert_str_eq(auth.tenant_name, "cached");
    cr_assert(!auth.revoked);

    /* Another store (another worker, another replica) shares the entry. */
    struct cg_store *other = test_store();
    cr_assert_eq(cg_store_key_lookup(other, t.tenant_id, k.key_id, &auth, &err), CG_OK);
    cr_assert_arr_eq(auth.secret_hash, want, 32);
    cg_store_free(other);
    cg_store_free(s);
}

/* What a key may do (migration 0016) comes back from PostgreSQL and, unchanged, from Redis. */
Test(store, key_grants_round_trip_through_postgres_and_redis, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "grants");
    uint8_t h[32];
    hash_of("grant secret", h);
    int64_t expires = cg_wall_ms() + 3600 * 1000;
    const struct cg_api_key_spec spec = {.name = "worker",
                                         .role = 3,
                                         .scope_session_id = "s-1",
                                         .scope_task_id = "t/1",
                                         .expires_at_ms = expires,
                                         .created_by_key_id = "creator01"};
    struct cg_api_key k;
    struct cg_err err;
    cr_assert_eq(cg_store_key_create(s, t.tenant_id, "grantkey", h, &spec, NULL, &k, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_eq(k.role, 3);
    cr_assert_str_eq(k.scope_session_id, "s-1");
    cr_assert_str_eq(k.scope_task_id, "t/1");
    cr_assert(k.expires_at_ms >= expires - 1 && k.expires_at_ms <= expires + 1, "%lld",
              (long long)k.expires_at_ms);
    cr_assert_str_eq(k.created_by_key_id, "creator01");
    cr_assert_eq(k.last_used_at_ms, 0);

    for (int round = 0; round < 2; round++) { /* PostgreSQL, then the Redis entry */
        struct cg_key_auth auth;
        memset(&auth, 0, sizeof auth);
        cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, "grantkey", &auth, &err), CG_OK, "%s",
                     err.msg);
        cr_assert_eq(auth.role, 3, "round %d", round);
        cr_assert_str_eq(auth.scope_session_id, "s-1");
        cr_assert_str_eq(auth.scope_task_id, "t/1");
        cr_assert_eq(auth.expires_at_ms, k.expires_at_ms);
        cr_assert_eq(auth.max_call_tokens, CG_CALL_TOKENS_DEFAULT);
    }

    cr_assert_eq(cg_store_key_touch(s, t.tenant_id, "grantkey", &err), CG_OK, "%s", err.msg);
    struct cg_api_key listed[4];
    int n = 0;
    cr_assert_eq(cg_store_key_list(s, t.tenant_id, 4, listed, &n, &err), CG_OK);
    cr_assert_eq(n, 1);
    cr_assert_gt(listed[0].last_used_at_ms, 0);

    /* Bad grants are refused before PostgreSQL, naming what is wrong. */
    struct cg_api_key_spec bad = spec;
    bad.role = 0;
    cr_assert_eq(cg_store_key_create(s, t.tenant_id, "bad1", h, &bad, NULL, &k, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "role") != NULL, "%s", err.msg);
    bad = spec;
    bad.scope_session_id = "";
    cr_assert_eq(cg_store_key_create(s, t.tenant_id, "bad2", h, &bad, NULL, &k, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "scope") != NULL, "%s", err.msg);
    cg_store_free(s);
}

Test(store, revoke_marks_the_cache_entry_revoked, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "revoking");
    struct cg_api_key k = make_key(s, t.tenant_id, "revokeme", "secret");
    char key[128];
    cache_key(t.tenant_id, k.key_id, key, sizeof key);
    struct cg_key_auth auth;
    struct cg_err err;
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(cg_pgtest_redis_exists(&T, key));

    struct cg_api_key revoked;
    cr_assert_eq(cg_store_key_revoke(s, t.tenant_id, k.key_id, NULL, &revoked, &err), CG_OK, "%s",
                 err.msg);
    /* Marked revoked, not deleted, so that a lookup racing the revocation cannot write the
     * key back as valid. */
    cr_assert(cg_pgtest_redis_exists(&T, key), "the revoked mark is missing");
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(auth.revoked);
    cr_assert_eq(cg_store_key_lookup_fresh(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s",
                 err.msg);
    cr_assert(auth.revoked);
    cg_store_free(s);
}

Test(store, lookup_works_without_redis, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", cg_pgtest_closed_port());
    opts.redis_url = url;
    struct cg_store *s = new_store(&opts);
    struct cg_tenant t = make_tenant(s, "no redis");
    struct cg_api_key k = make_key(s, t.tenant_id, "nocache", "secret");
    uint8_t want[32];
    hash_of("secret", want);

    int64_t start = cg_mono_ms();
    for (int i = 0; i < 5; i++) {
        struct cg_key_auth auth;
        struct cg_err err;
        cg_status rc = cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err);
        cr_assert_eq(rc, CG_OK, "lookup %d: %s %s", i, cg_status_name(rc), err.msg);
        cr_assert_arr_eq(auth.secret_hash, want, 32);
        cr_assert_str_eq(auth.tenant_name, "no redis");
    }
    cr_assert_lt(cg_mono_ms() - start, 2000, "lookups were slow without Redis");
    cr_assert(!cg_store_redis_ok(s));

    struct cg_api_key revoked;
    struct cg_key_auth auth;
    struct cg_err err;
    cr_assert_eq(cg_store_key_revoke(s, t.tenant_id, k.key_id, NULL, &revoked, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(auth.revoked);
    cg_store_free(s);

    /* And with the cache switched off. */
    opts.redis_url = NULL;
    s = new_store(&opts);
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(auth.revoked);
    cr_assert(!cg_store_redis_ok(s));
    cg_store_free(s);
}

/* ------------------------------------------------------------------ failures --- */

Test(store, postgres_unreachable_is_unavailable_quickly, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    char dsn[128];
    snprintf(dsn, sizeof dsn, "postgresql://postgres@127.0.0.1:%d/postgres",
             cg_pgtest_closed_port());
    opts.pg_dsn = dsn;
    struct cg_store *s = new_store(&opts);
    struct cg_err err;
    int64_t start = cg_mono_ms();
    cg_status rc = cg_store_ping(s, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    struct cg_tenant t;
    rc = cg_store_tenant_get(s, "6f1c1d52-0c34-4d0e-9a57-0d5bbd3e1f00", &t, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    cr_assert_str_eq(err.msg, "storage unavailable");
    rc = cg_store_tenant_create(s, "x", "UTC", &t, &err);
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    cr_assert_lt(cg_mono_ms() - start, 1500);
    cg_store_free(s);
}

Test(store, connect_timeout_is_honoured, .init = setup, .fini = teardown, .timeout = 30)
{
    /* A socket that accepts connections in the kernel and never says a word. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    cr_assert(listen(fd, 16) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);

    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    char dsn[128];
    snprintf(dsn, sizeof dsn, "postgresql://postgres@127.0.0.1:%d/postgres", ntohs(sa.sin_port));
    opts.pg_dsn = dsn;
    opts.pg_connect_timeout_ms = 300;
    struct cg_store *s = new_store(&opts);
    struct cg_err err;
    int64_t start = cg_mono_ms();
    cg_status rc = cg_store_ping(s, &err);
    int64_t took = cg_mono_ms() - start;
    cr_assert_eq(rc, CG_UNAVAILABLE, "%s", cg_status_name(rc));
    cr_assert(took >= 250 && took < 1500, "connect gave up after %lld ms", (long long)took);

    /* A deadline shorter than the connect timeout wins. */
    opts.pg_connect_timeout_ms = 5000;
    cg_store_free(s);
    s = new_store(&opts);
    cg_store_set_deadline(s, cg_mono_ms() + 200);
    start = cg_mono_ms();
    rc = cg_store_ping(s, &err);
    took = cg_mono_ms() - start;
    cr_assert_eq(rc, CG_DEADLINE_EXCEEDED, "%s", cg_status_name(rc));
    cr_assert(took < 1500, "the deadline was ignored: %lld ms", (long long)took);
    cg_store_free(s);
    close(fd);
}

Test(store, passed_deadline_is_deadline_exceeded_without_touching_the_database, .init = setup,
     .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "deadline");
    struct cg_err err;
    cg_store_set_deadline(s, cg_mono_ms() - 1);
    struct cg_tenant got;
    cr_assert_eq(cg_store_tenant_get(s, t.tenant_id, &got, &err), CG_DEADLINE_EXCEEDED);
    cr_assert_eq(cg_store_ping(s, &err), CG_DEADLINE_EXCEEDED);
    struct cg_key_auth auth;
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, "k", &auth, &err), CG_DEADLINE_EXCEEDED);
    cr_assert_eq(cg_store_tenant_create(s, "late", "UTC", &got, &err), CG_DEADLINE_EXCEEDED);
    cg_store_set_deadline(s, 0);
    cr_assert_eq(cg_store_tenant_get(s, t.tenant_id, &got, &err), CG_OK, "%s", err.msg);
    cg_store_free(s);

    PGconn *db = cg_pgtest_connect(&T);
    cr_assert_eq(cg_pgtest_query_int(db, "SELECT count(*) FROM tenants WHERE name = 'late'", NULL),
                 0);
    PQfinish(db);

    /* Not even a connection attempt: an unreachable server still gives DEADLINE_EXCEEDED. */
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    char dsn[128];
    snprintf(dsn, sizeof dsn, "postgresql://postgres@127.0.0.1:%d/postgres",
             cg_pgtest_closed_port());
    opts.pg_dsn = dsn;
    s = new_store(&opts);
    cg_store_set_deadline(s, cg_mono_ms() - 1);
    cr_assert_eq(cg_store_ping(s, &err), CG_DEADLINE_EXCEEDED);
    cg_store_free(s);
}

Test(store, deadline_shortens_the_statement_timeout, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store(); /* statement timeout 5 s */
    struct cg_tenant t = make_tenant(s, "locked");
    PGconn *locker = cg_pgtest_connect(&T);
    cg_pgtest_exec(locker, "BEGIN");
    cg_pgtest_exec(locker, "LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE");

    struct cg_tenant got;
    struct cg_err err;
    cg_store_set_deadline(s, cg_mono_ms() + 300);
    int64_t start = cg_mono_ms();
    cg_status rc = cg_store_tenant_get(s, t.tenant_id, &got, &err);
    int64_t took = cg_mono_ms() - start;
    cr_assert_eq(rc, CG_DEADLINE_EXCEEDED, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_lt(took, 2000, "the statement ran %lld ms past a 300 ms deadline", (long long)took);

    cg_pgtest_exec(locker, "ROLLBACK");
    cg_store_set_deadline(s, 0);
    cr_assert_eq(cg_store_tenant_get(s, t.tenant_id, &got, &err), CG_OK, "%s", err.msg);

    /* Without a deadline, the configured statement timeout applies. */
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    opts.pg_statement_timeout_ms = 300;
    struct cg_store *quick = new_store(&opts);
    cr_assert_eq(cg_store_ping(quick, &err), CG_OK, "%s", err.msg);
    cg_pgtest_exec(locker, "BEGIN");
    cg_pgtest_exec(locker, "LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE");
    start = cg_mono_ms();
    rc = cg_store_tenant_get(quick, t.tenant_id, &got, &err);
    took = cg_mono_ms() - start;
    cr_assert_eq(rc, CG_DEADLINE_EXCEEDED, "%s %s", cg_status_name(rc), err.msg);
    cr_assert_lt(took, 2000);
    cg_pgtest_exec(locker, "ROLLBACK");
    cr_assert_eq(cg_store_tenant_get(quick, t.tenant_id, &got, &err), CG_OK, "%s", err.msg);
    cg_store_free(quick);
    PQfinish(locker);
    cg_store_free(s);
}

Test(store, reconnects_after_the_backend_is_killed, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "survivor");
    struct cg_err err;
    cr_assert_eq(cg_store_ping(s, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(cg_pgtest_kill_backends(&T), 1);

    struct cg_tenant got;
    cr_assert_eq(cg_store_tenant_get(s, t.tenant_id, &got, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(got.name, "survivor");

    /* A write on a connection that died while idle goes out on a new one: nothing had
     * been sent on the dead one. */
    cr_assert_eq(cg_pgtest_kill_backends(&T), 1);
    struct cg_tenant made;
    cr_assert_eq(cg_store_tenant_create(s, "after kill", "UTC", &made, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_ping(s, &err), CG_OK, "%s", err.msg);
    cg_store_free(s);
}

struct call_job {
    struct cg_store *store;
    const char *tenant_id;
    bool write;
    cg_status rc;
    struct cg_tenant out;
    struct cg_err err;
};

static void *call_thread(void *arg)
{
    struct call_job *job = arg;
    if (job->write)
        job->rc = cg_store_tenant_create(job->store, "in flight", "UTC", &job->out, &job->err);
    else
        job->rc = cg_store_tenant_get(job->store, job->tenant_id, &job->out, &job->err);
    return NULL;
}

Test(store, read_cut_off_mid_statement_is_retried_once, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "retried");
    PGconn *locker = cg_pgtest_connect(&T);
    PGconn *admin = cg_pgtest_connect(&T);
    cg_pgtest_exec(locker, "BEGIN");
    cg_pgtest_exec(locker, "LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE");

    struct call_job job = {.store = s, .tenant_id = t.tenant_id};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, call_thread, &job), 0);
    int first = cg_pgtest_wait_lock_waiter(admin, &T, 0, 10000);
    cr_assert_neq(first, 0, "the read never reached the lock");
    cg_pgtest_kill_pid(admin, first);
    int second = cg_pgtest_wait_lock_waiter(admin, &T, first, 10000);
    cg_pgtest_exec(locker, "ROLLBACK");
    pthread_join(thread, NULL);
    cr_assert_neq(second, 0, "the read was not sent again on a new connection");
    cr_assert_eq(job.rc, CG_OK, "%s %s", cg_status_name(job.rc), job.err.msg);
    cr_assert_str_eq(job.out.tenant_id, t.tenant_id);
    PQfinish(admin);
    PQfinish(locker);
    cg_store_free(s);
}

Test(store, write_cut_off_mid_statement_is_unavailable_not_retried, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_err err;
    cr_assert_eq(cg_store_ping(s, &err), CG_OK, "%s", err.msg);
    PGconn *locker = cg_pgtest_connect(&T);
    PGconn *admin = cg_pgtest_connect(&T);
    cg_pgtest_exec(locker, "BEGIN");
    cg_pgtest_exec(locker, "LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE");

    struct call_job job = {.store = s, .write = true};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, call_thread, &job), 0);
    int first = cg_pgtest_wait_lock_waiter(admin, &T, 0, 10000);
    cr_assert_neq(first, 0, "the write never reached the lock");
    cg_pgtest_kill_pid(admin, first);
    /* Were the write sent again, it would wait on the lock until its statement timeout
     * and come back DEADLINE_EXCEEDED instead. */
    pthread_join(thread, NULL);
    cg_pgtest_exec(locker, "ROLLBACK");
    cr_assert_eq(job.rc, CG_UNAVAILABLE, "%s %s", cg_status_name(job.rc), job.err.msg);
    cr_assert_eq(
        cg_pgtest_query_int(admin, "SELECT count(*) FROM tenants WHERE name = 'in flight'", NULL),
        0);

    /* The store recovers by itself. */
    struct cg_tenant made;
    cr_assert_eq(cg_store_tenant_create(s, "in flight", "UTC", &made, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(
        cg_pgtest_query_int(admin, "SELECT count(*) FROM tenants WHERE name = 'in flight'", NULL),
        1);
    PQfinish(admin);
    PQfinish(locker);
    cg_store_free(s);
}

/* ------------------------------------------------------------------ Redis trouble --- */

Test(store, redis_that_never_answers_costs_one_timeout_per_second, .init = setup, .fini = teardown,
     .timeout = 30)
{
    /* Connections complete in the kernel's backlog; no command ever gets an answer. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    cr_assert(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    cr_assert(listen(fd, 16) == 0);
    cr_assert(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", ntohs(sa.sin_port));

    struct cg_store_opts opts = cg_pgtest_store_opts(&T); /* redis_timeout_ms 200 */
    opts.redis_url = url;
    struct cg_store *s = new_store(&opts);
    struct cg_tenant t = make_tenant(s, "silent redis");
    struct cg_api_key k = make_key(s, t.tenant_id, "silent", "secret");
    uint8_t want[32];
    hash_of("secret", want);

    int64_t start = cg_mono_ms();
    for (int i = 0; i < 5; i++) {
        struct cg_key_auth auth;
        struct cg_err err;
        cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s",
                     err.msg);
        cr_assert_arr_eq(auth.secret_hash, want, 32);
        if (i == 0)
            cr_assert_geq(cg_mono_ms() - start, 150, "the Redis timeout was not waited for");
    }
    int64_t took = cg_mono_ms() - start;
    cr_assert_lt(took, 900, "%lld ms: Redis was retried within the reconnect interval",
                 (long long)took);
    cr_assert(!cg_store_redis_ok(s));
    cg_store_free(s);
    close(fd);
}

Test(store, redis_connection_loss_is_a_miss_then_recovers, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t = make_tenant(s, "flaky redis");
    struct cg_api_key k = make_key(s, t.tenant_id, "flaky", "secret");
    uint8_t want[32];
    hash_of("secret", want);
    struct cg_key_auth auth;
    struct cg_err err;
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert(cg_store_redis_ok(s));

    cr_assert_geq(cg_pgtest_redis_kill_clients(&T), 1);
    int64_t lost_at = cg_mono_ms();
    cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s", err.msg);
    cr_assert_arr_eq(auth.secret_hash, want, 32);
    cr_assert(!cg_store_redis_ok(s), "the lost connection went unnoticed");

    /* Lookups keep working; the cache comes back after the reconnect interval. */
    int64_t back_at = 0;
    while (cg_mono_ms() - lost_at < 5000) {
        cr_assert_eq(cg_store_key_lookup(s, t.tenant_id, k.key_id, &auth, &err), CG_OK, "%s",
                     err.msg);
        cr_assert_arr_eq(auth.secret_hash, want, 32);
        if (cg_store_redis_ok(s)) {
            back_at = cg_mono_ms();
            break;
        }
        struct timespec pause = {.tv_nsec = 20000000};
        nanosleep(&pause, NULL);
    }
    cr_assert_neq(back_at, 0, "the cache never came back");
    cr_assert_geq(back_at - lost_at, 900, "reconnected after %lld ms, before the interval",
                  (long long)(back_at - lost_at));
    cg_store_free(s);
}

/* test_base_misc.c - arena caps, log line formats, health state, the worker pool. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/arena.h"
#include "base/bigmem.h"
#include "base/clock.h"
#include "base/crypto.h"
#include "base/health.h"
#include "base/log.h"
#include "base/pool.h"

Test(arena, allocations_are_aligned_and_capped, .timeout = 10)
{
    struct cg_arena *a = cg_arena_new(256, 4096);
    cr_assert_not_null(a);
    for (int i = 0; i < 10; i++) {
        void *p = cg_arena_alloc(a, 13);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % 16, 0);
    }
    cr_assert_null(cg_arena_alloc(a, 5000), "over the cap");
    cr_assert_not_null(cg_arena_alloc(a, 1000), "a failed allocation does not poison the arena");
    char *s = cg_arena_sprintf(a, "%s-%d", "x", 42);
    cr_assert_str_eq(s, "x-42");
    cr_assert_null(cg_arena_calloc(a, SIZE_MAX / 2, 4), "overflow is refused");
    size_t used = cg_arena_used(a);
    cr_assert_gt(used, 0);
    cg_arena_reset(a);
    cr_assert_eq(cg_arena_used(a), 0);
    cr_assert_not_null(cg_arena_alloc(a, 3000));
    cg_arena_free(a);
    cg_arena_free(NULL);
}

Test(bigmem, blocks_are_zeroed_aligned_writable_and_apart, .timeout = 10)
{
    /* Sizes around the 2 MiB piece: each block zero-filled, 2 MiB-aligned, every byte of
     * it writable, and no two blocks overlapping. */
    static const size_t sizes[] = {
        0, 1, 4096, ((size_t)2 << 20) - 1, (size_t)2 << 20, ((size_t)2 << 20) + 1, (size_t)5 << 20};
    enum { N = sizeof sizes / sizeof sizes[0] };
    unsigned char *blocks[N];
    for (int i = 0; i < N; i++) {
        size_t n = sizes[i] ? sizes[i] : 1;
        blocks[i] = cg_bigmem_alloc(sizes[i]);
        cr_assert_not_null(blocks[i], "size %zu", sizes[i]);
        cr_assert_eq((uintptr_t)blocks[i] % ((size_t)2 << 20), 0, "size %zu", sizes[i]);
        for (size_t k = 0; k < n; k += 4093)
            cr_assert_eq(blocks[i][k], 0);
        cr_assert_eq(blocks[i][n - 1], 0);
        memset(blocks[i], 0xa0 + i, n);
    }
    for (int i = 0; i < N; i++) {
        size_t n = sizes[i] ? sizes[i] : 1;
        cr_assert_eq(blocks[i][0], 0xa0 + i, "block %d kept its bytes", i);
        cr_assert_eq(blocks[i][n - 1], 0xa0 + i, "block %d kept its bytes", i);
        cg_bigmem_free(blocks[i], sizes[i]);
    }
    cg_bigmem_free(NULL, 1);
    cr_assert_null(cg_bigmem_alloc(SIZE_MAX - 4096), "a size that cannot be rounded up");
}

Test(log, logfmt_quotes_and_escapes_values, .timeout = 10)
{
    char line[512];
    struct cg_kv kv[] = {
        {"method", "/a.B/C"}, {"detail", "has \"quotes\" and\nnewline"}, {"empty", ""}};
    int n = cg_log_format_line(line, sizeof line, CG_LOG_LOGFMT, CG_LOG_WARN, "transport", "rid1",
                               "call failed", kv, 3);
    cr_assert_eq((size_t)n, strlen(line));
    cr_assert(line[n - 1] == '\n');
    cr_assert(strstr(line, " lvl=warn mod=transport rid=rid1 msg=\"call failed\"") != NULL, "%s",
              line);
    cr_assert(strstr(line, " method=/a.B/C") != NULL, "%s", line);
    cr_assert(strstr(line, " detail=\"has \\\"quotes\\\" and\\nnewline\"") != NULL, "%s", line);
    cr_assert(strstr(line, " empty=\"\"") != NULL, "%s", line);
    cr_assert(strncmp(line, "ts=", 3) == 0);
}

Test(log, json_lines_are_objects, .timeout = 10)
{
    char line[512];
    struct cg_kv kv[] = {{"status", "OK"}};
    cg_log_format_line(line, sizeof line, CG_LOG_JSON, CG_LOG_DEBUG, "main", NULL, "x\ty", kv, 1);
    cr_assert(line[0] == '{');
    cr_assert(
        strstr(line, "\"lvl\":\"debug\",\"mod\":\"main\",\"msg\":\"x\\ty\",\"status\":\"OK\"}\n") !=
            NULL,
        "%s", line);
    cr_assert(strstr(line, "rid") == NULL, "no rid field without a request id");
}

Test(log, long_lines_are_cut_but_end_in_newline, .timeout = 10)
{
    char line[64];
    char big[300];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    int n =
        cg_log_format_line(line, sizeof line, CG_LOG_LOGFMT, CG_LOG_INFO, "m", NULL, big, NULL, 0);
    cr_assert_lt(n, (int)sizeof line);
    cr_assert_eq(line[n - 1], '\n');
}

Test(health, serving_needs_store_and_no_drain, .timeout = 10)
{
    struct cg_health h;
    cg_health_init(&h);
    cr_assert(!cg_health_is_serving(&h), "unknown store: not serving");
    unsigned v0 = cg_health_version(&h);
    cr_assert(cg_health_set_store_ok(&h, true));
    cr_assert(!cg_health_set_store_ok(&h, true), "no change, no bump");
    cr_assert(cg_health_is_serving(&h));
    cr_assert(cg_health_set_draining(&h, true));
    cr_assert(!cg_health_is_serving(&h));
    cr_assert_eq(cg_health_version(&h), v0 + 2);
}

Test(health, an_answer_older_than_its_freshness_reads_as_down, .timeout = 10)
{
    struct cg_health h;
    cg_health_init(&h);
    cg_health_set_fresh_ms(&h, 30);
    cr_assert(cg_health_set_store_ok(&h, true));
    int64_t answered = cg_mono_ms();
    cr_assert(cg_health_is_serving(&h), "a fresh answer: serving");
    /* No probe since: once the answer is older than 30 ms it no longer counts, although
     * nobody set the store down (a prober stuck in a call). */
    while (cg_mono_ms() - answered <= 40)
        ;
    cr_assert(!cg_health_is_serving(&h), "a stale answer: not serving");
    cr_assert(!cg_health_set_store_ok(&h, true), "same value: no change");
    cr_assert(cg_health_is_serving(&h), "a new answer counts again");
}

Test(crypto, sha256_and_encodings, .timeout = 10)
{
    uint8_t h[CG_SHA256_LEN];
    char hex[65];
    cg_sha256("abc", 3, h);
    cg_hex_encode(h, sizeof h, hex);
    cr_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char b64[8];
    cg_base64url_encode((const uint8_t *)"\xfb\xff", 2, b64);
    cr_assert_str_eq(b64, "-_8");
    cr_assert(cg_equal_ct("abc", "abc", 3));
    cr_assert(!cg_equal_ct("abc", "abd", 3));
    char rid1[17], rid2[17];
    cg_request_id(rid1);
    cg_request_id(rid2);
    cr_assert_eq(strlen(rid1), 16);
    cr_assert_str_neq(rid1, rid2);
}

/* RFC 4231 test cases 1, 2 and 6 (a key longer than the block is hashed first). */
Test(crypto, hmac_sha256_matches_rfc_4231, .timeout = 10)
{
    uint8_t key1[20], key6[131], mac[CG_SHA256_LEN];
    memset(key1, 0x0b, sizeof key1);
    memset(key6, 0xaa, sizeof key6);
    const struct {
        const void *key;
        size_t key_len;
        const char *data;
        const char *hex;
    } cases[] = {
        {key1, sizeof key1, "Hi There",
         "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?",
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {key6, sizeof key6, "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char hex[2 * CG_SHA256_LEN + 1];
        cr_assert_eq(cg_hmac_sha256(cases[i].key, cases[i].key_len, cases[i].data,
                                    strlen(cases[i].data), mac),
                     CG_OK);
        cg_hex_encode(mac, sizeof mac, hex);
        cr_assert_str_eq(hex, cases[i].hex, "case %zu", i);
    }
}

struct counter_job {
    struct cg_job job;
    atomic_int *count;
    int thread_seen;
};

static void count_run(struct cg_job *job, void *ctx)
{
    struct counter_job *c = (struct counter_job *)job;
    c->thread_seen = *(int *)ctx;
    atomic_fetch_add(c->count, 1);
}

static int thread_ids[4];

static void *thread_init(void *arg, int index)
{
    (void)arg;
    thread_ids[index] = index + 100;
    return &thread_ids[index];
}

Test(pool, runs_every_job_with_its_thread_context_and_bounds_the_queue, .timeout = 20)
{
    atomic_int count = 0;
    struct cg_pool_opts o = {.threads = 4, .max_queue = 10000, .thread_init = thread_init};
    struct cg_err err;
    struct cg_pool *p = cg_pool_new(&o, &err);
    cr_assert_not_null(p);
    enum { N = 2000 };
    static struct counter_job jobs[N];
    for (int i = 0; i < N; i++) {
        jobs[i].job.run = count_run;
        jobs[i].count = &count;
        cr_assert_eq(cg_pool_submit(p, &jobs[i].job), CG_OK);
    }
    cg_pool_stop(p);
    cr_assert_eq(atomic_load(&count), N, "stop runs what was queued");
    for (int i = 0; i < N; i++)
        cr_assert(jobs[i].thread_seen >= 100 && jobs[i].thread_seen < 104);
    struct counter_job late = {.job.run = count_run, .count = &count};
    cr_assert_eq(cg_pool_submit(p, &late.job), CG_UNAVAILABLE, "stopped pool refuses");
    cg_pool_free(p);

    struct cg_pool_opts tiny = {.threads = 1, .max_queue = 0};
    p = cg_pool_new(&tiny, &err);
    cr_assert_not_null(p);
    cr_assert_eq(cg_pool_submit(p, &late.job), CG_UNAVAILABLE, "full queue refuses");
    cg_pool_free(p);
}

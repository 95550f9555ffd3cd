/* test_store_redis_conn.c - the routing of Redis commands (store/store_redis_conn.c) against
 * the real standalone Redis of the test run: keys of two slots in one command are never
 * sent; redis_cluster off and on against a standalone Redis; and, against a cluster node
 * played by the test, hostile CLUSTER SLOTS replies and endless MOVED (the cluster itself
 * is tested end to end by tests/e2e/test_redis_cluster.py).
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pgtest.h"
#include "store/store_redis_internal.h"

static struct cg_pgtest T;

static void setup(void)
{
    cg_pgtest_setup(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

/* A key of this test only (Redis databases outlive a test), with hash tag tag. */
static void key_of(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "{%s-%s}:k", tag, T.schema);
}

static bool run_ok(struct cg_redis *r, int argc, const char **argv, int first_key, int nkeys)
{
    redisReply *reply = cg__redis_command(r, argv[0], argc, argv, NULL, first_key, nkeys);
    if (reply == NULL)
        return false;
    freeReplyObject(reply);
    return true;
}

Test(redis_conn, keys_of_two_slots_in_one_command_are_never_sent, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cr_assert(r != NULL);
    char a[160], b[160];
    key_of(a, sizeof a, "a");
    key_of(b, sizeof b, "b");
    cr_assert_neq(cg_keyslot_of(a, strlen(a)), cg_keyslot_of(b, strlen(b)), "two slots");
    const char *set[] = {"SET", a, "1"};
    cr_assert(run_ok(r, 3, set, 1, 1));
    cr_assert(cg_pgtest_redis_exists(&T, a));

    const char *del[] = {"DEL", a, b};
    cr_assert_not(run_ok(r, 3, del, 1, 2), "refused");
    cr_assert(cg_pgtest_redis_exists(&T, a), "and not sent, even to a standalone Redis");
    cr_assert(cg_redis_ok(r), "a bug of the caller is no outage");

    const char *del_one[] = {"DEL", a};
    cr_assert(run_ok(r, 2, del_one, 1, 1));
    cr_assert_not(cg_pgtest_redis_exists(&T, a));
    cg_redis_free(r);
}

static bool path_cached(struct cg_redis *r, const char *tenant)
{
    struct cg_budget_row rows[1];
    memset(rows, 0, sizeof rows);
    rows[0].level = 1;
    rows[0].has_budget = true;
    rows[0].mode = 1;
    rows[0].on_store_failure = 1;
    rows[0].reset_period = 1;
    rows[0].row_version = 3;
    cg_redis_rows_put(r, tenant, rows, 1, -1);
    struct cg_scope_ids ids;
    memset(&ids, 0, sizeof ids);
    struct cg_budget_row out[4];
    int n = 0;
    int64_t gen = -1;
    return cg_redis_path_get(r, tenant, &ids, out, &n, &gen) && n == 1 && out[0].row_version == 3;
}

Test(redis_conn, a_standalone_redis_with_cluster_off_and_on, .init = setup, .fini = teardown,
     .timeout = 30)
{
    char tenant[CG_UUID_LEN + 1];
    snprintf(tenant, sizeof tenant, "1c2e5c2a-6d5f-4c44-9a53-%.12s", T.schema + 8);
    cg_redis_cluster_mode mode;
    cr_assert(cg_redis_cluster_mode_parse("off", &mode) && mode == CG_REDIS_CLUSTER_OFF);
    cr_assert(cg_redis_cluster_mode_parse(NULL, &mode) && mode == CG_REDIS_CLUSTER_AUTO);
    cr_assert_not(cg_redis_cluster_mode_parse("yes", &mode));

    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cg_redis_set_cluster_mode(r, CG_REDIS_CLUSTER_OFF);
    cr_assert(path_cached(r, tenant), "off: the URL's node serves every key");
    cg_redis_free(r);

    /* on: the node refuses CLUSTER SLOTS (or the per-test database): every call a miss, the
     * outage logged, never an error or a crash. */
    r = cg_redis_new(T.redis_url, 1000);
    cg_redis_set_cluster_mode(r, CG_REDIS_CLUSTER_ON);
    cr_assert_not(path_cached(r, tenant));
    cr_assert_not(cg_redis_ok(r));
    struct cg_key_auth entry;
    cr_assert_not(cg_redis_key_get(r, tenant, "k1", &entry));
    cg_redis_free(r);
}

Test(redis_conn, a_pipeline_answers_each_command_in_order, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cr_assert(r != NULL);
    char a[160], b[160], c[160];
    key_of(a, sizeof a, "pa");
    key_of(b, sizeof b, "pb");
    key_of(c, sizeof c, "pc");
    const char *set_a[] = {"SET", a, "text"}, *incr_a[] = {"INCR", a}, *set_b[] = {"SET", b, "1"};
    const char *spans[] = {"DEL", a, c}; /* two slots: never sent */
    const char *set_c[] = {"SET", c, "2"};
    struct cg__redis_cmd cmds[] = {
        {3, set_a, NULL, 1, 1}, {2, incr_a, NULL, 1, 1}, {3, spans, NULL, 1, 2},
        {3, set_b, NULL, 1, 1}, {3, set_c, NULL, 1, 1},
    };
    redisReply *replies[5];
    cg__redis_commands(r, "test", 5, cmds, replies);
    cr_assert(replies[0] != NULL && replies[0]->type == REDIS_REPLY_STATUS, "SET answered");
    cr_assert_null(replies[1], "INCR of a text: an error reply is a miss");
    cr_assert_null(replies[2], "keys of two slots: not sent");
    cr_assert(replies[3] != NULL && replies[4] != NULL, "the replies after it still read");
    for (int i = 0; i < 5; i++)
        if (replies[i] != NULL)
            freeReplyObject(replies[i]);
    cr_assert(cg_pgtest_redis_exists(&T, b) && cg_pgtest_redis_exists(&T, c));
    cg_redis_free(r);
}

Test(redis_conn, the_rows_of_several_tenants_go_in_one_call, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cr_assert(r != NULL);
    char tenants[4][CG_UUID_LEN + 1];
    struct cg_budget_row rows[4][2];
    struct cg_redis_rows sets[5];
    memset(rows, 0, sizeof rows);
    for (int t = 0; t < 4; t++) {
        snprintf(tenants[t], sizeof tenants[t], "2d3e5c2a-6d5f-4c44-9a5%d-%.12s", t, T.schema + 8);
        for (int l = 0; l < 2; l++) {
            struct cg_budget_row *row = &rows[t][l];
            row->level = l + 1;
            row->has_budget = true;
            row->mode = 1;
            row->on_store_failure = 1;
            row->reset_period = 1;
            row->row_version = 10 + t;
            row->used_tokens = 100 * t + l;
            if (l == 1)
                cg_scope_ids_set(&row->ids, "s1", "", "");
        }
        sets[t] = (struct cg_redis_rows){tenants[t], rows[t], 2};
    }
    sets[4] = (struct cg_redis_rows){tenants[0], rows[0], 0}; /* nothing to put: skipped */
    cg_redis_rows_put_many(r, sets, 5);
    for (int t = 0; t < 4; t++) {
        struct cg_scope_ids ids;
        cg_scope_ids_set(&ids, "s1", "", "");
        struct cg_budget_row out[4];
        int n = 0;
        int64_t gen = -1;
        cr_assert(cg_redis_path_get(r, tenants[t], &ids, out, &n, &gen), "tenant %d", t);
        cr_assert_eq(n, 2);
        cr_assert_eq(out[1].row_version, 10 + t);
        cr_assert_eq(out[1].used_tokens, 100 * t + 1);
    }
    cg_redis_free(r);
}

/* The rows go by EVALSHA; a Redis without the script (new, restarted, SCRIPT FLUSH) answers
 * NOSCRIPT, and the put is sent again with the script's text: the rows arrive either way
 * and Redis is not taken for down. */
Test(redis_conn, rows_go_by_script_name_and_by_text_after_noscript, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_redis *r = cg_redis_new(T.redis_url, 1000);
    cr_assert(r != NULL);
    char tenant[CG_UUID_LEN + 1];
    snprintf(tenant, sizeof tenant, "7a1e5c2a-6d5f-4c44-9a51-%.12s", T.schema + 8);
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    row.level = 1;
    row.has_budget = true;
    row.mode = 1;
    row.on_store_failure = 1;
    row.reset_period = 1;
    struct cg_scope_ids tenant_ids;
    memset(&tenant_ids, 0, sizeof tenant_ids);
    const char *flush[] = {"SCRIPT", "FLUSH"};
    for (int round = 0; round < 4; round++) {
        /* Rounds 0 and 2 find no script (flushed), 1 and 3 find it (the EVAL of the round
         * before loaded it). */
        if (round % 2 == 0) {
            redisReply *reply =
                cg__redis_node_exchange(r, &r->seed, "SCRIPT", 2, flush, NULL, false);
            cr_assert(reply != NULL && reply->type == REDIS_REPLY_STATUS, "SCRIPT FLUSH");
            freeReplyObject(reply);
        }
        row.row_version = 20 + round;
        row.used_tokens = 1000 + round;
        struct cg_redis_rows set = {tenant, &row, 1};
        if (round < 2)
            cg_redis_rows_put_many(r, &set, 1);
        else
            cg_redis_rows_put(r, tenant, &row, 1, -1);
        struct cg_budget_row out[4];
        int n = 0;
        int64_t gen = -1;
        cr_assert(cg_redis_path_get(r, tenant, &tenant_ids, out, &n, &gen), "round %d", round);
        cr_assert_eq(out[0].row_version, 20 + round, "round %d", round);
        cr_assert_eq(out[0].used_tokens, 1000 + round);
        cr_assert(r->ok, "round %d: NOSCRIPT is an answer, not an outage", round);
    }
    cg_redis_free(r);
}

/* ------------------------------------------------------------------ a fake node --- */

/* A cluster node played by the test, on a loopback port: INFO says cluster_enabled:1,
 * CLUSTER SLOTS answers `slots` (the hostile part), MGET answers nils or, with moved_loop,
 * "MOVED <slot> 127.0.0.1:<its own port>" for ever. One client at a time. */
struct fake_node {
    int listen_fd;
    int port;
    const char *slots; /* the RESP text of the CLUSTER SLOTS reply */
    bool moved_loop;
    atomic_int mgets;
    atomic_int slots_asked;
    pthread_t thread;
};

static bool read_command(FILE *in, char args[8][256], int *argc)
{
    char line[64];
    if (fgets(line, sizeof line, in) == NULL || line[0] != '*')
        return false;
    int n = atoi(line + 1);
    *argc = 0;
    for (int i = 0; i < n; i++) {
        if (fgets(line, sizeof line, in) == NULL || line[0] != '$')
            return false;
        long len = atol(line + 1);
        char skip[4096];
        if (len < 0 || (size_t)len + 2 > sizeof skip ||
            fread(skip, 1, (size_t)len + 2, in) != (size_t)len + 2)
            return false;
        if (i < 8) {
            snprintf(args[i], 256, "%.*s", (int)(len < 255 ? len : 255), skip);
            (*argc)++;
        }
    }
    return true;
}

static void answer(int fd, const char *text)
{
    size_t off = 0, len = strlen(text);
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

static void *fake_main(void *arg)
{
    struct fake_node *f = arg;
    for (;;) {
        int fd = accept(f->listen_fd, NULL, NULL);
        if (fd < 0)
            return NULL;
        FILE *in = fdopen(dup(fd), "r");
        char args[8][256], reply[512];
        int argc;
        while (in != NULL && read_command(in, args, &argc)) {
            if (strcasecmp(args[0], "INFO") == 0) {
                answer(fd, "$17\r\ncluster_enabled:1\r\n");
            } else if (strcasecmp(args[0], "CLUSTER") == 0) {
                atomic_fetch_add(&f->slots_asked, 1);
                answer(fd, f->slots);
            } else if (strcasecmp(args[0], "MGET") == 0) {
                atomic_fetch_add(&f->mgets, 1);
                if (f->moved_loop) {
                    snprintf(reply, sizeof reply, "-MOVED %d 127.0.0.1:%d\r\n",
                             cg_keyslot_of(args[1], strlen(args[1])), f->port);
                    answer(fd, reply);
                } else {
                    snprintf(reply, sizeof reply, "*%d\r\n", argc - 1);
                    answer(fd, reply);
                    for (int i = 1; i < argc; i++)
                        answer(fd, "$-1\r\n");
                }
            } else {
                answer(fd, "-ERR not played by the fake\r\n");
            }
        }
        if (in != NULL)
            fclose(in);
        close(fd);
    }
}

static void fake_start(struct fake_node *f, const char *slots)
{
    memset(f, 0, sizeof *f);
    f->slots = slots;
    f->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a) == 0);
    cr_assert(listen(f->listen_fd, 4) == 0);
    socklen_t len = sizeof a;
    cr_assert(getsockname(f->listen_fd, (struct sockaddr *)&a, &len) == 0);
    f->port = ntohs(a.sin_port);
    cr_assert(pthread_create(&f->thread, NULL, fake_main, f) == 0);
}

static void fake_stop(struct fake_node *f)
{
    shutdown(f->listen_fd, SHUT_RDWR);
    close(f->listen_fd);
    pthread_join(f->thread, NULL);
}

/* A map of one range, every slot, served by host (RESP bulk text) and the fake's port. */
static void whole_map(char *buf, size_t cap, const char *host, int port)
{
    snprintf(buf, cap, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$%zu\r\n%s\r\n:%d\r\n", strlen(host),
             host, port);
}

static struct cg_redis *fake_client(const struct fake_node *f)
{
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", f->port);
    struct cg_redis *r = cg_redis_new(url, 1000);
    cr_assert(r != NULL);
    return r;
}

static bool fake_path(struct cg_redis *r)
{
    struct cg_scope_ids ids;
    memset(&ids, 0, sizeof ids);
    struct cg_budget_row out[4];
    int n = 0;
    int64_t gen = -1;
    (void)cg_redis_path_get(r, "2d3e5c2a-6d5f-4c44-9a53-1d2b3c4d5e6f", &ids, out, &n, &gen);
    return gen >= 0; /* Redis answered (a miss: the fake holds nothing) */
}

Test(redis_conn, hostile_slot_maps_change_nothing, .timeout = 30)
{
    /* Each is wrong in one way: slot out of range, port 0, an entry that is no array, a
     * host of 300 bytes, a reversed range. */
    static const char *const bad[] = {
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n",
        "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:0\r\n",
        "*1\r\n:5\r\n",
        "*1\r\n*3\r\n:10\r\n:5\r\n*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct fake_node f;
        fake_start(&f, bad[i]);
        struct cg_redis *r = fake_client(&f);
        cr_assert_not(fake_path(r), "map %zu: a miss", i);
        cr_assert_not(cg_redis_ok(r));
        cr_assert_eq(atomic_load(&f.slots_asked), 1, "map %zu was asked for", i);
        cr_assert_eq(atomic_load(&f.mgets), 0, "map %zu: nothing routed by it", i);
        cg_redis_free(r);
        fake_stop(&f);
    }
}

Test(redis_conn, a_map_with_an_empty_host_means_the_node_asked, .timeout = 30)
{
    struct fake_node f;
    static char slots[128];
    fake_start(&f, slots);
    /* "" as host: the node that answered; the port is the fake's own. */
    whole_map(slots, sizeof slots, "", f.port);
    struct cg_redis *r = fake_client(&f);
    cr_assert(fake_path(r));
    cr_assert(cg_redis_ok(r));
    cr_assert_eq(atomic_load(&f.mgets), 1);
    cg_redis_free(r);
    fake_stop(&f);
}

Test(redis_conn, redirections_are_bounded, .timeout = 30)
{
    struct fake_node f;
    static char slots[128];
    fake_start(&f, slots);
    whole_map(slots, sizeof slots, "127.0.0.1", f.port);
    f.moved_loop = true;
    struct cg_redis *r = fake_client(&f);
    cr_assert_not(fake_path(r), "a node that always says MOVED is a miss");
    cr_assert_not(cg_redis_ok(r));
    cr_assert_eq(atomic_load(&f.mgets), 1 + CG_REDIS_REDIRECTS_MAX,
                 "the command and %d redirections", CG_REDIS_REDIRECTS_MAX);
    cg_redis_free(r);
    fake_stop(&f);
}

/* store_redis_conn.c - the routing of one command of a cg_redis: to the one node of a
 * standalone Redis, or, on a Redis Cluster, to the master serving the command's slot,
 * following MOVED (the map updated) and ASK (this command only). Whether the server is a
 * cluster is asked once per connection to the URL's node (cg_redis_cluster_mode AUTO).
 *
 * Redis is a cache: every failure here becomes a miss. On a cluster a node's failure
 * concerns its slots only: the others keep being served from their nodes.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "store/store_redis_internal.h"

#define MOD "store_redis"

/* ------------------------------------------------------------------ SIGPIPE --- */

/* hiredis writes with write(2), which raises SIGPIPE when Redis has closed the connection.
 * A library must not change the process's signal dispositions, so the signal is blocked
 * around each exchange and a SIGPIPE raised meanwhile is consumed (as libpq does). */
struct pipe_guard {
    sigset_t old_mask;
    bool active;
    bool pending_before;
};

static void pipe_guard_enter(struct pipe_guard *g)
{
    sigset_t block, pending;
    sigemptyset(&block);
    sigaddset(&block, SIGPIPE);
    g->active = pthread_sigmask(SIG_BLOCK, &block, &g->old_mask) == 0;
    g->pending_before = false;
    if (g->active && sigpending(&pending) == 0)
        g->pending_before = sigismember(&pending, SIGPIPE) == 1;
}

static void pipe_guard_leave(struct pipe_guard *g)
{
    if (!g->active)
        return;
    sigset_t pending;
    if (!g->pending_before && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, SIGPIPE);
        const struct timespec zero = {0, 0};
        (void)sigtimedwait(&only, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &g->old_mask, NULL);
}

/* ------------------------------------------------------------------ routing --- */

/* Whether the seed is a cluster node: asked with INFO cluster in auto mode (a server that
 * refuses INFO is taken as standalone). The seed is connected on return when true. */
static bool topology_detect(struct cg_redis *r)
{
    if (r->cluster_mode == CG_REDIS_CLUSTER_OFF) {
        r->topology = CG__REDIS_STANDALONE;
        return true;
    }
    if (r->cluster_mode == CG_REDIS_CLUSTER_ON) {
        r->topology = CG__REDIS_CLUSTER;
        return cg__redis_map_refresh(r);
    }
    const char *argv[] = {"INFO", "cluster"};
    redisReply *reply = cg__redis_node_exchange(r, &r->seed, "INFO", 2, argv, NULL, false);
    if (reply == NULL)
        return false;
    bool cluster = reply->type == REDIS_REPLY_STRING;
    cluster = cluster && strstr(reply->str, "cluster_enabled:1") != NULL;
    freeReplyObject(reply);
    if (!cluster) {
        r->topology = CG__REDIS_STANDALONE;
        return true;
    }
    cg_log(CG_LOG_INFO, MOD, NULL, "redis %s:%d is a cluster node: routing by slot", r->seed.host,
           r->seed.port);
    r->topology = CG__REDIS_CLUSTER;
    return cg__redis_map_refresh(r);
}

/* The slot of argv[first .. first + nkeys), or -1 when they do not share one. */
static int keys_slot(const char **argv, const size_t *lens, int first, int nkeys)
{
    int slot = -1;
    for (int i = first; i < first + nkeys; i++) {
        size_t len = lens != NULL ? lens[i] : strlen(argv[i]);
        int s = cg_keyslot_of(argv[i], len);
        if (slot >= 0 && s != slot)
            return -1;
        slot = s;
    }
    return slot;
}

bool cg__redis_reply_noscript(const redisReply *reply)
{
    return reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
           memcmp(reply->str, "NOSCRIPT", 8) == 0;
}

/* Whether reply is an answer for the caller: not an error, or NOSCRIPT (an EVALSHA of a
 * script the node does not hold: the node is fine, and the caller sends the script). */
static bool is_answer(const redisReply *reply)
{
    return reply->type != REDIS_REPLY_ERROR || cg__redis_reply_noscript(reply);
}

static redisReply *standalone_command(struct cg_redis *r, const char *what, int argc,
                                      const char **argv, const size_t *lens)
{
    redisReply *reply = cg__redis_node_exchange(r, &r->seed, what, argc, argv, lens, false);
    if (reply == NULL)
        return NULL;
    if (!is_answer(reply)) {
        cg__redis_node_fail_reply(r, &r->seed, what, reply);
        return NULL;
    }
    cg__redis_node_answered(r, &r->seed);
    return reply;
}

/* An error reply that is no redirection, from node n of a cluster: TRYAGAIN (a multi-key
 * command while a slot's keys are split between two nodes), CLUSTERDOWN and LOADING are
 * passing states of the cluster (a miss; the node stays connected; after the last two the
 * map is read again: the map itself is not in question during a migration); anything
 * else fails the node, as on a standalone Redis. The reply is freed. */
static void cluster_error(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                          redisReply *reply)
{
    static const char *const passing[] = {"TRYAGAIN", "CLUSTERDOWN", "LOADING"};
    for (size_t i = 0; i < sizeof passing / sizeof passing[0]; i++) {
        size_t len = strlen(passing[i]);
        if (reply->len >= len && memcmp(reply->str, passing[i], len) == 0) {
            cg_log(CG_LOG_DEBUG, MOD, NULL, "redis node %s:%d: %s: %.*s (a miss)", n->host, n->port,
                   what, (int)(reply->len < 120 ? reply->len : 120), reply->str);
            freeReplyObject(reply);
            if (i > 0)
                r->map_stale = true;
            cg__redis_node_answered(r, n);
            return;
        }
    }
    cg__redis_node_fail_reply(r, n, what, reply);
}

static redisReply *cluster_command(struct cg_redis *r, int slot, const char *what, int argc,
                                   const char **argv, const size_t *lens)
{
    int64_t now = cg_mono_ms();
    if (r->map_stale || now >= r->map_due_ms)
        (void)cg__redis_map_refresh(r); /* on failure the old map goes on */
    int node = (int)r->slot_node[slot] - 1;
    if (node < 0) {
        cg_log(CG_LOG_DEBUG, MOD, NULL, "redis cluster: no node serves slot %d (a miss)", slot);
        r->ok = false;
        r->map_stale = true;
        return NULL;
    }
    bool asking = false;
    for (int hop = 0; hop <= CG_REDIS_REDIRECTS_MAX; hop++) {
        struct cg__redis_node *n = &r->nodes[node];
        redisReply *reply = cg__redis_node_exchange(r, n, what, argc, argv, lens, asking);
        if (reply == NULL)
            return NULL;
        if (is_answer(reply)) {
            cg__redis_node_answered(r, n);
            return reply;
        }
        struct cg_keyslot_redirect to;
        cg_keyslot_redirect_kind kind = cg_keyslot_redirect_parse(reply->str, reply->len, &to);
        if (kind == CG_KEYSLOT_NOT_REDIRECT) {
            cluster_error(r, n, what, reply);
            return NULL;
        }
        freeReplyObject(reply);
        cg__redis_node_answered(r, n);
        /* An empty host is the host of the node that answered (copied: adding a node may
         * move the table n is in). */
        if (to.host[0] == '\0')
            cg__redis_copy_str(to.host, sizeof to.host, n->host, strlen(n->host));
        int next = cg__redis_node_find_or_add(r, to.host, to.port);
        if (next < 0)
            return NULL;
        asking = kind == CG_KEYSLOT_ASK;
        if (!asking) {
            r->slot_node[to.slot] = (uint16_t)(next + 1);
            r->map_stale = true; /* more slots probably moved with it */
        }
        cg_log(CG_LOG_DEBUG, MOD, NULL, "redis cluster: %s slot %d to %s:%d",
               asking ? "ASK" : "MOVED", to.slot, r->nodes[next].host, r->nodes[next].port);
        node = next;
    }
    /* A loop of redirections (a map in flux): a failure of the last node named, so that it
     * is logged once, the map read again and the node left alone for a while. */
    char detail[64];
    snprintf(detail, sizeof detail, "slot %d redirected more than %d times", slot,
             CG_REDIS_REDIRECTS_MAX);
    cg__redis_node_fail(r, &r->nodes[node], what, detail);
    return NULL;
}

redisReply *cg__redis_command(struct cg_redis *r, const char *what, int argc, const char **argv,
                              const size_t *lens, int first_key, int nkeys)
{
    if (!r->addr_valid)
        return NULL;
    int slot = keys_slot(argv, lens, first_key, nkeys);
    if (slot < 0) {
        cg_log(CG_LOG_ERROR, MOD, NULL, "bug: the keys of one %s span slots; not sent", what);
        return NULL;
    }
    struct pipe_guard guard;
    pipe_guard_enter(&guard);
    redisReply *reply = NULL;
    if (r->topology != CG__REDIS_UNKNOWN || topology_detect(r)) {
        if (r->topology == CG__REDIS_CLUSTER)
            reply = cluster_command(r, slot, what, argc, argv, lens);
        else
            reply = standalone_command(r, what, argc, argv, lens);
    }
    pipe_guard_leave(&guard);
    return reply;
}

/* ------------------------------------------------------------------ pipelines --- */

/* The replies of cmds[idx[0..count)] read from node n in one round trip, taken as
 * standalone_command and cluster_command take a reply: an answer is kept; an error reply
 * is a miss (on a standalone Redis the first one fails the node, as there); a redirection
 * is run again alone by cluster_command, which follows it. again: room for count indexes. */
static void pipeline_replies(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                             const struct cg__redis_cmd *cmds, const int *idx, int count,
                             const int *slots, int *again, redisReply **replies)
{
    /* In the replies' order, as one command after the other would have gone: the node
     * answered (once) until a reply fails it; after that nothing counts it as answering. */
    bool cluster = r->topology == CG__REDIS_CLUSTER, answered = false, failed = false;
    int nagain = 0;
    for (int k = 0; k < count; k++) {
        redisReply *reply = replies[idx[k]];
        if (reply == NULL)
            continue;
        struct cg_keyslot_redirect to;
        bool error = !is_answer(reply);
        bool redirect =
            error && cluster &&
            cg_keyslot_redirect_parse(reply->str, reply->len, &to) != CG_KEYSLOT_NOT_REDIRECT;
        if (!error || redirect) {
            if (!answered && !failed)
                cg__redis_node_answered(r, n);
            answered = true;
            if (redirect) {
                replies[idx[k]] = NULL;
                freeReplyObject(reply);
                again[nagain++] = idx[k];
            }
            continue;
        }
        replies[idx[k]] = NULL;
        if (cluster) {
            cluster_error(r, n, what, reply); /* a passing state, or the node fails */
            failed = failed || n->ctx == NULL;
        } else if (!failed) {
            cg__redis_node_fail_reply(r, n, what, reply);
            failed = true;
        } else {
            freeReplyObject(reply);
        }
    }
    /* n is not used from here: following a redirection may add a node, which may move the
     * table it is in. */
    for (int k = 0; k < nagain; k++) {
        const struct cg__redis_cmd *c = &cmds[again[k]];
        replies[again[k]] = cluster_command(r, slots[again[k]], what, c->argc, c->argv, c->lens);
    }
}

/* The node that serves slot (a standalone Redis: the seed), or NULL (a cluster with no node
 * known for it: the map is read again before the next command). */
static struct cg__redis_node *node_of(struct cg_redis *r, int slot)
{
    if (r->topology != CG__REDIS_CLUSTER)
        return &r->seed;
    int node = (int)r->slot_node[slot] - 1;
    if (node >= 0 && node < r->nnodes)
        return &r->nodes[node];
    cg_log(CG_LOG_DEBUG, MOD, NULL, "redis cluster: no node serves slot %d (a miss)", slot);
    r->ok = false;
    r->map_stale = true;
    return NULL;
}

/* Runs the routed commands (slots[i] >= 0) node by node, in the order of each node's first
 * command: one round trip each. The node of a command is looked up when its turn comes, so
 * that a map read again meanwhile (after a redirection) is followed. scratch: 2n ints. */
static void pipeline_by_node(struct cg_redis *r, const char *what, int n,
                             const struct cg__redis_cmd *cmds, int *slots, int *scratch,
                             redisReply **replies)
{
    int *idx = scratch, *again = scratch + n;
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0)
            continue;
        struct cg__redis_node *target = node_of(r, slots[i]);
        if (target == NULL) {
            slots[i] = -1;
            continue;
        }
        int count = 0;
        for (int j = i; j < n; j++)
            if (slots[j] >= 0 && node_of(r, slots[j]) == target)
                idx[count++] = j;
        if (cg__redis_node_pipeline(r, target, what, cmds, idx, count, replies)) {
            pipeline_replies(r, target, what, cmds, idx, count, slots, again, replies);
        } else { /* the node failed: what was read is still an answer or a miss */
            for (int k = 0; k < count; k++)
                if (replies[idx[k]] != NULL && replies[idx[k]]->type == REDIS_REPLY_ERROR) {
                    freeReplyObject(replies[idx[k]]);
                    replies[idx[k]] = NULL;
                }
        }
        for (int k = 0; k < count; k++) /* done (slots kept until the redirected ran) */
            slots[idx[k]] = -1;
    }
}

void cg__redis_commands(struct cg_redis *r, const char *what, int n,
                        const struct cg__redis_cmd *cmds, redisReply **replies)
{
    for (int i = 0; i < n; i++)
        replies[i] = NULL;
    if (!r->addr_valid || n <= 0)
        return;
    int *slots = malloc((size_t)n * sizeof *slots);
    int *scratch = malloc((size_t)n * 2 * sizeof *scratch);
    struct pipe_guard guard;
    pipe_guard_enter(&guard);
    bool routed = slots != NULL && scratch != NULL &&
                  (r->topology != CG__REDIS_UNKNOWN || topology_detect(r));
    if (routed && r->topology == CG__REDIS_CLUSTER &&
        (r->map_stale || cg_mono_ms() >= r->map_due_ms))
        (void)cg__redis_map_refresh(r); /* on failure the old map goes on */
    for (int i = 0; routed && i < n; i++) {
        const struct cg__redis_cmd *c = &cmds[i];
        slots[i] = keys_slot(c->argv, c->lens, c->first_key, c->nkeys);
        if (slots[i] < 0)
            cg_log(CG_LOG_ERROR, MOD, NULL, "bug: the keys of one %s span slots; not sent", what);
    }
    if (routed)
        pipeline_by_node(r, what, n, cmds, slots, scratch, replies);
    pipe_guard_leave(&guard);
    free(slots);
    free(scratch);
}

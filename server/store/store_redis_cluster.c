/* store_redis_cluster.c - the slot map of a Redis Cluster, as one thread's cg_redis sees
 * it: which master serves each of the 16384 slots, read with CLUSTER SLOTS (Redis 3.0 on;
 * CLUSTER SHARDS only from 7.0) from any node that answers, and the table of those
 * masters with their connections.
 *
 * The reply is hostile input: every range, host and port is checked, and a malformed reply
 * changes nothing. A new map keeps the connection of every node it still names (same host
 * and port) and closes the others, so that the table holds the current masters only.
 */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "store/store_redis_internal.h"

#define MOD "store_redis"

/* One range of a CLUSTER SLOTS reply, checked. */
struct slot_range {
    int first, last; /* 0 <= first <= last < CG_KEYSLOT_COUNT */
    char host[CG_REDIS_HOST_MAX + 1];
    int port;
};

void cg__redis_map_clear(struct cg_redis *r)
{
    for (int i = 0; i < r->nnodes; i++)
        cg__redis_node_close(&r->nodes[i]);
    free(r->nodes);
    r->nodes = NULL;
    r->nnodes = 0;
    memset(r->slot_node, 0, sizeof r->slot_node);
}

static int node_find(const struct cg__redis_node *nodes, int n, const char *host, int port)
{
    for (int i = 0; i < n; i++)
        if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
            return i;
    return -1;
}

int cg__redis_node_find_or_add(struct cg_redis *r, const char *host, int port)
{
    int i = node_find(r->nodes, r->nnodes, host, port);
    if (i >= 0)
        return i;
    if (r->nnodes >= CG__REDIS_NODES_MAX || strlen(host) > CG_REDIS_HOST_MAX)
        return -1;
    struct cg__redis_node *grown = realloc(r->nodes, (size_t)(r->nnodes + 1) * sizeof *grown);
    if (grown == NULL)
        return -1;
    r->nodes = grown;
    struct cg__redis_node *n = &r->nodes[r->nnodes];
    memset(n, 0, sizeof *n);
    cg__redis_copy_str(n->host, sizeof n->host, host, strlen(host));
    n->port = port;
    return r->nnodes++;
}

/* Checks entry e of a CLUSTER SLOTS reply ([first, last, [host, port, id, ...], replicas
 * ...]) into *out; an empty host is asked_host (the node said "the one you asked").
 * 1 when filled, 0 when the master's endpoint is unknown ("?": its slots stay unknown),
 * -1 when malformed. */
static int range_parse(const redisReply *e, const char *asked_host, struct slot_range *out)
{
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3)
        return -1;
    const redisReply *first = e->element[0], *last = e->element[1], *master = e->element[2];
    if (first->type != REDIS_REPLY_INTEGER || last->type != REDIS_REPLY_INTEGER ||
        first->integer < 0 || first->integer > last->integer || last->integer >= CG_KEYSLOT_COUNT ||
        master->type != REDIS_REPLY_ARRAY || master->elements < 2)
        return -1;
    const redisReply *host = master->element[0], *port = master->element[1];
    if (host->type != REDIS_REPLY_STRING || host->len > CG_REDIS_HOST_MAX ||
        port->type != REDIS_REPLY_INTEGER || port->integer < 1 || port->integer > 65535)
        return -1;
    for (size_t i = 0; i < host->len; i++)
        if ((unsigned char)host->str[i] < 0x21 || (unsigned char)host->str[i] > 0x7e)
            return -1;
    if (host->len == 1 && host->str[0] == '?')
        return 0;
    out->first = (int)first->integer;
    out->last = (int)last->integer;
    out->port = (int)port->integer;
    if (host->len == 0)
        cg__redis_copy_str(out->host, sizeof out->host, asked_host, strlen(asked_host));
    else
        cg__redis_copy_str(out->host, sizeof out->host, host->str, host->len);
    return 1;
}

/* Replaces the map with the ranges of a checked reply. The nodes the new map names keep
 * their connections (the seed's too, when it is one of them); the others are closed.
 * false (nothing changed) when out of memory. */
static bool map_apply(struct cg_redis *r, const struct slot_range *ranges, int nranges)
{
    int cap = nranges < CG__REDIS_NODES_MAX ? nranges : CG__REDIS_NODES_MAX;
    struct cg__redis_node *fresh = calloc((size_t)(cap > 0 ? cap : 1), sizeof *fresh);
    uint16_t *map = calloc(CG_KEYSLOT_COUNT, sizeof *map);
    if (fresh == NULL || map == NULL) {
        free(fresh);
        free(map);
        return false;
    }
    int nfresh = 0;
    for (int i = 0; i < nranges; i++) {
        int k = node_find(fresh, nfresh, ranges[i].host, ranges[i].port);
        if (k < 0 && nfresh < cap) {
            k = nfresh++;
            cg__redis_copy_str(fresh[k].host, sizeof fresh[k].host, ranges[i].host,
                               strlen(ranges[i].host));
            fresh[k].port = ranges[i].port;
        }
        for (int s = ranges[i].first; k >= 0 && s <= ranges[i].last; s++)
            map[s] = (uint16_t)(k + 1);
    }
    /* Move what the old table knew of each node (connection, back-off, failure). */
    for (int i = 0; i < r->nnodes; i++) {
        struct cg__redis_node *old = &r->nodes[i];
        int k = node_find(fresh, nfresh, old->host, old->port);
        if (k >= 0) {
            fresh[k] = *old;
            continue;
        }
        cg__redis_node_close(old);
        if (old->failed)
            r->failed_nodes--; /* gone from the map: its outage is not this handle's any more */
    }
    int seed_k = node_find(fresh, nfresh, r->seed.host, r->seed.port);
    if (seed_k >= 0 && fresh[seed_k].ctx == NULL && r->seed.ctx != NULL) {
        fresh[seed_k].ctx = r->seed.ctx;
        r->seed.ctx = NULL;
    }
    cg__redis_node_close(&r->seed); /* the map's nodes are used from now on */
    if (r->seed.failed) {
        r->seed.failed = false;
        r->failed_nodes--;
    }
    free(r->nodes);
    r->nodes = fresh;
    r->nnodes = nfresh;
    memcpy(r->slot_node, map, sizeof r->slot_node);
    free(map);
    return true;
}

/* Checks every entry of a CLUSTER SLOTS reply and applies them. false when malformed. */
static bool map_read(struct cg_redis *r, const redisReply *reply, const char *asked_host)
{
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements > CG_KEYSLOT_COUNT)
        return false;
    struct slot_range *ranges = calloc(reply->elements + 1, sizeof *ranges);
    if (ranges == NULL)
        return false;
    int n = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < reply->elements; i++) {
        int got = range_parse(reply->element[i], asked_host, &ranges[n]);
        n += got > 0;
        ok = got >= 0;
    }
    ok = ok && map_apply(r, ranges, n);
    free(ranges);
    return ok;
}

/* Asks node n for the map. true when it answered with a well-formed one, now applied; an
 * error or a malformed map fails the node (logged once per outage). */
static bool map_ask(struct cg_redis *r, struct cg__redis_node *n)
{
    const char *argv[] = {"CLUSTER", "SLOTS"};
    redisReply *reply = cg__redis_node_exchange(r, n, "CLUSTER SLOTS", 2, argv, NULL, false);
    if (reply == NULL)
        return false;
    char detail[128] = "malformed reply";
    if (reply->type == REDIS_REPLY_ERROR) {
        cg__redis_copy_str(detail, sizeof detail, reply->str, reply->len);
    } else {
        char asked_host[CG_REDIS_HOST_MAX + 1];
        cg__redis_copy_str(asked_host, sizeof asked_host, n->host, strlen(n->host));
        cg__redis_node_answered(r, n); /* before map_read, which may free n */
        if (map_read(r, reply, asked_host)) {
            freeReplyObject(reply);
            return true;
        }
    }
    freeReplyObject(reply);
    cg__redis_node_fail(r, n, "CLUSTER SLOTS", detail);
    return false;
}

bool cg__redis_map_refresh(struct cg_redis *r)
{
    int64_t now = cg_mono_ms();
    if (now < r->map_not_before)
        return false;
    r->map_not_before = now + CG__REDIS_MAP_MIN_GAP_MS;
    /* Connected nodes first (no connect cost), then the others not waiting out a back-off,
     * then the seed. map_ask may replace r->nodes: nothing of it is kept across a call. */
    bool done = false;
    for (int pass = 0; pass < 2 && !done; pass++) {
        for (int i = 0; i < r->nnodes && !done; i++) {
            struct cg__redis_node *n = &r->nodes[i];
            if ((n->ctx != NULL) == (pass == 0) && (n->ctx != NULL || now >= n->next_attempt_ms))
                done = map_ask(r, n);
        }
    }
    if (!done)
        done = map_ask(r, &r->seed);
    if (done) {
        r->map_stale = false;
        r->map_due_ms = now + CG__REDIS_MAP_REFRESH_MS;
        cg_log(CG_LOG_DEBUG, MOD, NULL, "redis cluster: map read, %d masters", r->nnodes);
    }
    return done;
}

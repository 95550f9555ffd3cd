/* store_redis_internal.h - what the Redis files of the store share: the handle, its nodes
 * and the command runner. Private to server/store/store_redis*.c, the only files that
 * include hiredis.h. Not thread-safe: a cg_redis belongs to one thread at a time.
 *
 * Calls go one way: store_redis.c -> store_redis_conn.c -> store_redis_cluster.c ->
 * store_redis_node.c.
 * store_redis.c         the handle, the URL, the operations (keys, budget rows) and their
 *                       encodings
 * store_redis_conn.c    the routing of a command: standalone, or by slot with MOVED/ASK
 * store_redis_cluster.c the slot map of a cluster (CLUSTER SLOTS) and its node table
 * store_redis_node.c    one node's connection, its failures and the outage log
 */
#ifndef CG_STORE_STORE_REDIS_INTERNAL_H
#define CG_STORE_STORE_REDIS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "core/keyslot.h"
#include "store/store_redis.h"

#define CG__REDIS_NODES_MAX 1024       /* nodes of one cluster's map, a hostile reply capped */
#define CG__REDIS_RECONNECT_MS 1000    /* a node that failed is not tried again before */
#define CG__REDIS_MAP_REFRESH_MS 10000 /* a cluster's map is read again at least this often */
#define CG__REDIS_MAP_MIN_GAP_MS 100   /* and at most this often */

/* One node: the seed of the URL, or a master of the cluster's map. */
struct cg__redis_node {
    char host[CG_REDIS_HOST_MAX + 1];
    int port;
    redisContext *ctx;       /* NULL while not connected */
    int64_t next_attempt_ms; /* no connection attempt before (cg_mono_ms) */
    bool failed;             /* its last exchange failed (this handle's view) */
};

typedef enum {
    CG__REDIS_UNKNOWN = 0, /* not yet asked (or the seed was lost in auto mode) */
    CG__REDIS_STANDALONE,
    CG__REDIS_CLUSTER,
} cg__redis_topology;

struct cg_redis {
    char rows_put_sha[41]; /* the rows script's SHA-1: its EVALSHA name */
    struct cg_redis_addr addr;
    bool addr_valid;
    int timeout_ms;
    cg_redis_cluster_mode cluster_mode; /* the setting */
    cg__redis_topology topology;        /* what the server said */
    bool ok;                            /* the last command got an answer */
    /* One warning per outage: the process's flag (cg_store_outages.redis) or this own. */
    atomic_int *outage_logged;
    atomic_int own_outage_logged;
    struct cg_metric *seconds, *errors; /* cg_redis_set_meters; NULL: not counted */
    uint32_t metrics_slot;
    int failed_nodes; /* nodes of this handle whose last exchange failed */

    /* Standalone: the one connection. Cluster: where the map is read first, closed (or
     * handed to its node of the map) once the map is known. */
    struct cg__redis_node seed;

    /* Cluster only. slot_node[slot] is the index in nodes + 1 of the master serving slot,
     * 0 when none is known. */
    struct cg__redis_node *nodes;
    int nnodes;
    uint16_t slot_node[CG_KEYSLOT_COUNT];
    bool map_stale;         /* read the map before the next command */
    int64_t map_due_ms;     /* read it again at this time in any case */
    int64_t map_not_before; /* no read before (CG__REDIS_MAP_MIN_GAP_MS) */
};

/* Whether reply is the NOSCRIPT error of an EVALSHA whose script the node does not hold
 * (new, restarted or flushed): an answer, for the caller to send the script with EVAL. */
bool cg__redis_reply_noscript(const redisReply *reply);

/* Runs one command whose keys are argv[first_key .. first_key + nkeys) (nkeys >= 1, all
 * of one slot: keys of different slots are a bug, logged, and nothing is sent), on the
 * node that serves them, following MOVED and ASK. The reply (never an error reply but
 * NOSCRIPT) goes to the caller, who frees it; NULL means a miss (Redis unavailable, the
 * outage logged once). lens may be NULL (argv NUL-terminated). */
redisReply *cg__redis_command(struct cg_redis *r, const char *what, int argc, const char **argv,
                              const size_t *lens, int first_key, int nkeys);

/* One command of a pipeline (cg__redis_commands): its arguments and where its keys are, as
 * for cg__redis_command. */
struct cg__redis_cmd {
    int argc;
    const char **argv;
    const size_t *lens; /* NULL: argv NUL-terminated */
    int first_key, nkeys;
};

/* Runs cmds[0..n) as cg__redis_command would run each, replies[i] getting the reply of
 * cmds[i] or NULL (a miss), but the commands of one node in one round trip: appended, then
 * their replies read in order. A command redirected (MOVED, ASK) is run again alone,
 * following the redirection. */
void cg__redis_commands(struct cg_redis *r, const char *what, int n,
                        const struct cg__redis_cmd *cmds, redisReply **replies);

/* Runs the commands cmds[idx[0..n)] on node n in one round trip (connecting it when needed
 * and not in its back-off), without interpreting the replies: replies[idx[k]] gets each,
 * error replies too. false after a connection failure, which cg__redis_node_fail has
 * handled (the replies not read are NULL), or while the node waits out its back-off. */
bool cg__redis_node_pipeline(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                             const struct cg__redis_cmd *cmds, const int *idx, int count,
                             redisReply **replies);

/* Copies [src, src+n) into dst (size cap >= 1), cut to fit, NUL-terminated. */
void cg__redis_copy_str(char *dst, size_t cap, const char *src, size_t n);

/* Runs one command on node n (connecting it when needed and not in its back-off) without
 * interpreting the reply: error replies are returned too. With asking, ASKING is sent
 * first in the same round trip (its reply consumed). NULL after a connection failure,
 * which cg__redis_node_fail has handled, or while the node waits out its back-off. */
redisReply *cg__redis_node_exchange(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                                    int argc, const char **argv, const size_t *lens, bool asking);

/* Gives up n's connection after any trouble: freed, the next attempt waits
 * CG__REDIS_RECONNECT_MS, the map is read again before the next command (cluster), and
 * the first failure of an outage is logged as a warning. */
void cg__redis_node_fail(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                         const char *detail);

/* Records that n answered (with anything but a failure): the end of an outage is logged
 * once. */
void cg__redis_node_answered(struct cg_redis *r, struct cg__redis_node *n);

/* Fails n with the text of an error reply, which is freed. */
void cg__redis_node_fail_reply(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                               redisReply *reply);

/* Closes n's connection without counting a failure. */
void cg__redis_node_close(struct cg__redis_node *n);

/* Reads the cluster's map (CLUSTER SLOTS) from a reachable node: a connected master of the
 * current map first, then the others, then the seed. true when a map was read and applied
 * (nodes kept by host and port keep their connection; the others are closed). false,
 * keeping the old map, when no node answered or the reply was malformed (logged), or when
 * the last read was less than CG__REDIS_MAP_MIN_GAP_MS ago. */
bool cg__redis_map_refresh(struct cg_redis *r);

/* The index in r->nodes of host:port, added (unconnected) when new. -1 when the table is
 * full or out of memory. */
int cg__redis_node_find_or_add(struct cg_redis *r, const char *host, int port);

/* Frees the node table and forgets the map (connections closed). */
void cg__redis_map_clear(struct cg_redis *r);

#endif

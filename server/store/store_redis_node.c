/* store_redis_node.c - one connection to one Redis node (the standalone Redis, or a master
 * of a cluster): connecting (AUTH, SELECT), one exchange (with ASKING first when asked),
 * and what a failure or an answer means for the node and for the outage log.
 *
 * A failed connection is freed at once (a hiredis context that saw an error is not
 * reusable) and the next attempt on that node waits CG__REDIS_RECONNECT_MS, so that an
 * outage costs each caller at most one timeout per interval instead of one per call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/metrics.h"
#include "store/store_redis_internal.h"

#define MOD "store_redis"

void cg__redis_copy_str(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void cg__redis_node_close(struct cg__redis_node *n)
{
    if (n->ctx != NULL) {
        redisFree(n->ctx);
        n->ctx = NULL;
    }
}

void cg__redis_node_fail(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                         const char *detail)
{
    cg__redis_node_close(n);
    r->ok = false;
    n->next_attempt_ms = cg_mono_ms() + CG__REDIS_RECONNECT_MS;
    if (!n->failed) {
        n->failed = true;
        r->failed_nodes++;
    }
    if (r->topology == CG__REDIS_CLUSTER) {
        /* A failover may have moved its slots: ask the others. */
        r->map_stale = true;
        if (atomic_exchange(r->outage_logged, 1) == 0)
            cg_log(CG_LOG_WARN, MOD, NULL,
                   "redis node %s:%d unavailable, its slots use postgresql only: %s: %s", n->host,
                   n->port, what, detail);
        else
            cg_log(CG_LOG_DEBUG, MOD, NULL, "redis node %s:%d still unavailable: %s: %s", n->host,
                   n->port, what, detail);
        return;
    }
    if (r->cluster_mode == CG_REDIS_CLUSTER_AUTO && n == &r->seed)
        r->topology = CG__REDIS_UNKNOWN; /* asked again on the next connection */
    if (atomic_exchange(r->outage_logged, 1) == 0)
        cg_log(CG_LOG_WARN, MOD, NULL, "redis unavailable, using postgresql only: %s: %s", what,
               detail);
    else
        cg_log(CG_LOG_DEBUG, MOD, NULL, "redis still unavailable: %s: %s", what, detail);
}

/* The outage ends (one info line) when this handle has no failed node left; on a cluster
 * only the handle that saw a node fail ends it, so that the answers of the other nodes do
 * not announce the end of an outage that goes on. */
void cg__redis_node_answered(struct cg_redis *r, struct cg__redis_node *n)
{
    r->ok = true;
    bool was_failed = n->failed;
    if (was_failed) {
        n->failed = false;
        r->failed_nodes--;
    }
    if (r->failed_nodes > 0 || (r->topology == CG__REDIS_CLUSTER && !was_failed))
        return;
    if (atomic_exchange(r->outage_logged, 0) == 1)
        cg_log(CG_LOG_INFO, MOD, NULL, "redis reachable again");
}

void cg__redis_node_fail_reply(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                               redisReply *reply)
{
    char detail[128];
    cg__redis_copy_str(detail, sizeof detail, reply->str, reply->len);
    freeReplyObject(reply);
    cg__redis_node_fail(r, n, what, detail);
}

/* Fails n with the error its hiredis context holds (a failed write or read). */
static void fail_with_ctx_error(struct cg_redis *r, struct cg__redis_node *n, const char *what)
{
    char detail[128];
    cg__redis_copy_str(detail, sizeof detail, n->ctx->errstr, strlen(n->ctx->errstr));
    cg__redis_node_fail(r, n, what, detail);
}

/* "<kind><n>\r\n" at p; returns the end. */
static char *resp_header(char *p, char kind, size_t n)
{
    char digits[24];
    int k = 0;
    do {
        digits[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n > 0);
    *p++ = kind;
    while (k > 0)
        *p++ = digits[--k];
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

/* Appends one command to ctx's output, written here in RESP in one piece (hiredis's argv
 * form builds it from an sds string per argument, a malloc and a printf each, and showed in
 * a batch's profile); lens NULL: argv NUL-terminated. */
static bool append_command(redisContext *ctx, int argc, const char **argv, const size_t *lens)
{
    size_t total = 24;
    for (int i = 0; i < argc; i++)
        total += 24 + (lens != NULL ? lens[i] : strlen(argv[i])) + 2;
    char small[2048];
    char *buf = total <= sizeof small ? small : malloc(total);
    if (buf == NULL)
        return false;
    char *p = resp_header(buf, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        size_t n = lens != NULL ? lens[i] : strlen(argv[i]);
        p = resp_header(p, '$', n);
        memcpy(p, argv[i], n);
        p += n;
        *p++ = '\r';
        *p++ = '\n';
    }
    bool ok = redisAppendFormattedCommand(ctx, buf, (size_t)(p - buf)) == REDIS_OK;
    if (buf != small)
        free(buf);
    return ok;
}

/* node_send without the counting. */
static redisReply *exchange(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                            int argc, const char **argv, const size_t *lens, bool asking)
{
    redisReply *reply = NULL;
    if (asking) {
        /* ASKING and the command in one round trip; ASKING's +OK is dropped. */
        const char *asking_argv[] = {"ASKING"};
        void *first = NULL;
        if (!append_command(n->ctx, 1, asking_argv, NULL) ||
            !append_command(n->ctx, argc, argv, lens) ||
            redisGetReply(n->ctx, &first) != REDIS_OK ||
            redisGetReply(n->ctx, (void **)&reply) != REDIS_OK) {
            if (first != NULL)
                freeReplyObject(first);
            reply = NULL;
        } else {
            freeReplyObject(first);
        }
    } else {
        if (append_command(n->ctx, argc, argv, lens) &&
            redisGetReply(n->ctx, (void **)&reply) != REDIS_OK)
            reply = NULL;
    }
    if (reply == NULL)
        fail_with_ctx_error(r, n, what);
    return reply;
}

/* One command on a connected node, timed; error replies are returned. NULL after a failure
 * (counted as an error of the store). */
static redisReply *node_send(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                             int argc, const char **argv, const size_t *lens, bool asking)
{
    int64_t started = r->seconds != NULL ? cg_mono_ns() : 0;
    redisReply *reply = exchange(r, n, what, argc, argv, lens, asking);
    if (r->seconds != NULL)
        cg_metric_observe(r->seconds, r->metrics_slot, (double)(cg_mono_ns() - started) / 1e9);
    if (reply == NULL)
        cg_metric_inc(r->errors, r->metrics_slot);
    return reply;
}

/* A command whose error reply fails the node (the connection's set-up). */
static bool node_setup(struct cg_redis *r, struct cg__redis_node *n, const char *what, int argc,
                       const char **argv)
{
    redisReply *reply = node_send(r, n, what, argc, argv, NULL, false);
    if (reply == NULL)
        return false;
    if (reply->type == REDIS_REPLY_ERROR) {
        cg__redis_node_fail_reply(r, n, what, reply);
        return false;
    }
    freeReplyObject(reply);
    return true;
}

static bool node_connect(struct cg_redis *r, struct cg__redis_node *n)
{
    struct timeval tv = {.tv_sec = r->timeout_ms / 1000, .tv_usec = (r->timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(n->host, n->port, tv);
    if (c == NULL) {
        cg__redis_node_fail(r, n, "connect", "out of memory");
        return false;
    }
    n->ctx = c;
    if (c->err) {
        char detail[128];
        cg__redis_copy_str(detail, sizeof detail, c->errstr, strlen(c->errstr));
        cg__redis_node_fail(r, n, "connect", detail);
        return false;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        cg__redis_node_fail(r, n, "connect", "cannot set the command timeout");
        return false;
    }
    (void)redisEnableKeepAlive(c);

    if (r->addr.password[0] != '\0') {
        const char *argv[3] = {"AUTH", r->addr.user, r->addr.password};
        int argc = 3;
        if (r->addr.user[0] == '\0') {
            argv[1] = r->addr.password;
            argc = 2;
        }
        if (!node_setup(r, n, "AUTH", argc, argv))
            return false;
    }
    if (r->addr.db != 0) {
        /* A cluster node refuses it: the URL of a cluster names database 0. */
        char db[16];
        snprintf(db, sizeof db, "%d", r->addr.db);
        const char *argv[] = {"SELECT", db};
        if (!node_setup(r, n, "SELECT", 2, argv))
            return false;
    }
    return true;
}

/* Whether n is connected, connecting it when it is not and not in its back-off. */
static bool node_ready(struct cg_redis *r, struct cg__redis_node *n)
{
    if (n->ctx != NULL)
        return true;
    if (cg_mono_ms() < n->next_attempt_ms) {
        r->ok = false;
        return false;
    }
    return node_connect(r, n);
}

redisReply *cg__redis_node_exchange(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                                    int argc, const char **argv, const size_t *lens, bool asking)
{
    return node_ready(r, n) ? node_send(r, n, what, argc, argv, lens, asking) : NULL;
}

bool cg__redis_node_pipeline(struct cg_redis *r, struct cg__redis_node *n, const char *what,
                             const struct cg__redis_cmd *cmds, const int *idx, int count,
                             redisReply **replies)
{
    if (!node_ready(r, n))
        return false;
    int64_t started = r->seconds != NULL ? cg_mono_ns() : 0;
    bool ok = true;
    for (int k = 0; k < count && ok; k++) {
        const struct cg__redis_cmd *c = &cmds[idx[k]];
        ok = append_command(n->ctx, c->argc, c->argv, c->lens);
    }
    for (int k = 0; k < count && ok; k++)
        ok = redisGetReply(n->ctx, (void **)&replies[idx[k]]) == REDIS_OK;
    /* One round trip, observed once (ctxguard_store_call_seconds). */
    if (r->seconds != NULL)
        cg_metric_observe(r->seconds, r->metrics_slot, (double)(cg_mono_ns() - started) / 1e9);
    if (!ok) {
        cg_metric_inc(r->errors, r->metrics_slot);
        fail_with_ctx_error(r, n, what);
    }
    return ok;
}

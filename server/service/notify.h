/* notify.h - notification channels in the budget service: the channel and delivery RPCs'
 * flows, and the notifier's pass that sends due deliveries (one thread per replica, on a
 * store and an HTTP client of its own: transport/server.c notify_main).
 */
#ifndef CG_SERVICE_NOTIFY_H
#define CG_SERVICE_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

#include "llm/webhook.h"
#include "service/service.h"
#include "store/store_notify.h"

/* Deliveries claimed per statement by a notifier pass, and the most one pass sends. One at
 * a time keeps a claim's lease short (2 x notify_timeout_ms + 1 s): a replica that dies
 * mid-delivery delays that delivery by no more. */
#define CG_NOTIFY_CLAIM 1
#define CG_NOTIFY_PASS_MAX 256
/* The most notifier threads a replica runs (notify_threads). */
#define CG_NOTIFY_THREADS_MAX 16

/* CreateNotificationChannel of op's tenant, in checked by the caller (kind, url, types,
 * prefix, description): a webhook gets a new signing secret (out->secret, for the answer
 * only). */
cg_status cg_notify_channel_create(const struct cg_svc_env *env, const struct cg_op *op,
                                   const struct cg_channel *in, const struct cg_audit *audit,
                                   struct cg_channel *out) CG_MUST_CHECK;

/* ListNotificationChannels: *rows in op->arena (CG_CHANNELS_MAX at most), secrets blanked. */
cg_status cg_notify_channel_list(const struct cg_svc_env *env, const struct cg_op *op,
                                 struct cg_channel **rows, int *count) CG_MUST_CHECK;

cg_status cg_notify_channel_delete(const struct cg_svc_env *env, const struct cg_op *op,
                                   const char *channel_id, const struct cg_audit *audit,
                                   struct cg_channel *out, int64_t *dropped) CG_MUST_CHECK;

/* One page of deliveries; rows in op->arena (limit of them). */
cg_status cg_notify_delivery_list(const struct cg_svc_env *env, const struct cg_op *op, int state,
                                  const char *channel_id, const struct cg_delivery_cursor *after,
                                  int limit, struct cg_delivery **rows, int *count, bool *more,
                                  struct cg_delivery_cursor *next) CG_MUST_CHECK;

cg_status cg_notify_delivery_redrive(const struct cg_svc_env *env, const struct cg_op *op,
                                     const char *const *ids, int n, bool all_dead,
                                     const char *channel_id, const struct cg_audit *audit,
                                     int64_t *count) CG_MUST_CHECK;

/* What one pass did. */
struct cg_notify_pass_result {
    int delivered;
    int retried;
    int dead;
};

/* One notifier pass: claims due deliveries of every tenant (CG_NOTIFY_CLAIM at a time) and
 * sends each through client, settling it as delivered, due again (backoff with jitter) or
 * dead (notify_max_attempts), until none is due. False when the store failed (the next pass
 * tries again). */
bool cg_notify_pass(const struct cg_svc_env *env, struct cg_webhook *client,
                    struct cg_notify_pass_result *out);

#endif

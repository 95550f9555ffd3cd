/* store_notify.h - notification channels and their outbox (migrations/0023_notifications):
 * a tenant's channels, the deliveries the ledger of events made for them, and the claim and
 * settlement of due deliveries by the notifiers of every replica.
 *
 * Deliveries are written by a trigger in the transaction that stores an event, so nothing
 * here enqueues. A claim leases rows (lease_until) with FOR UPDATE SKIP LOCKED: one
 * notifier at a time holds a row; a lease that runs out (the notifier died) makes the row
 * due again, to be sent again with the same delivery id. Times are the database's clock.
 *
 * Every function takes the tenant id where it names one (a UUID; anything else is
 * CG_NOT_FOUND), runs one statement and names the client's field in its errors. Not
 * thread-safe (a store belongs to one thread).
 */
#ifndef CG_STORE_NOTIFY_H
#define CG_STORE_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/notify.h"
#include "store/store.h"

#define CG_CHANNELS_MAX 1000           /* channels of one tenant */
#define CG_CHANNEL_DESCRIPTION_MAX 200 /* characters */
#define CG_DELIVERY_ERROR_MAX 300      /* bytes of last_error kept */

struct cg_channel {
    char channel_id[CG_UUID_LEN + 1];
    int kind; /* 1 webhook, 2 Slack */
    char url[CG_NOTIFY_URL_MAX + 1];
    char secret[CG_NOTIFY_SECRET_MAX + 1]; /* webhook: the signing key */
    int event_types[CG_NOTIFY_EVENT_TYPES_MAX];
    int n_event_types; /* 0: the default set */
    char session_id[CG_SCOPE_ID_MAX + 1];
    char task_id[CG_SCOPE_ID_MAX + 1];
    char description[CG_CHANNEL_DESCRIPTION_MAX * 4 + 1];
    int64_t created_at_ms;
};

struct cg_delivery {
    char delivery_id[CG_UUID_LEN + 1];
    char channel_id[CG_UUID_LEN + 1];
    char event_id[CG_UUID_LEN + 1];
    int event_type;
    int state; /* 1 pending, 2 delivered, 3 dead */
    int attempts;
    int64_t next_attempt_ms;
    int last_status;
    char last_error[CG_DELIVERY_ERROR_MAX + 1];
    int64_t created_at_ms;
    int64_t delivered_at_ms; /* 0: not delivered */
};

/* A claimed delivery: what to send where. body is malloc'd (cg_outbox_items_free). */
struct cg_outbox_item {
    char tenant_id[CG_UUID_LEN + 1];
    char delivery_id[CG_UUID_LEN + 1];
    int kind;
    int event_type;
    int attempts; /* counting this one */
    char url[CG_NOTIFY_URL_MAX + 1];
    char secret[CG_NOTIFY_SECRET_MAX + 1];
    char *body;
    size_t body_len;
};

/* Where a page of cg_store_delivery_list starts: after this delivery, newest first. */
struct cg_delivery_cursor {
    int64_t created_at_us;
    char delivery_id[CG_UUID_LEN + 1];
};

/* Adds a channel (in: everything but channel_id and created_at_ms, checked by the caller);
 * out gets the stored row. More than CG_CHANNELS_MAX: CG_RESOURCE_EXHAUSTED. The same
 * statement writes the audit row notification_channel_created (target the channel id; after:
 * kind, URL host, event types, description: never the URL's path or the secret) by audit's
 * actor. */
cg_status cg_store_channel_create(struct cg_store *store, const char *tenant_id,
                                  const struct cg_channel *in, const struct cg_audit *audit,
                                  struct cg_channel *out, struct cg_err *err) CG_MUST_CHECK;

/* The tenant's channels, oldest first, into out[cap] (secrets included: the caller drops
 * them); *count gets how many. */
cg_status cg_store_channel_list(struct cg_store *store, const char *tenant_id,
                                struct cg_channel *out, int cap, int *count,
                                struct cg_err *err) CG_MUST_CHECK;

/* Deletes a channel and its deliveries, with the audit row notification_channel_deleted
 * (before: as for the creation); out gets it, *dropped the undelivered deliveries that went
 * with it. CG_NOT_FOUND naming `channel_id`. */
cg_status cg_store_channel_delete(struct cg_store *store, const char *tenant_id,
                                  const char *channel_id, const struct cg_audit *audit,
                                  struct cg_channel *out, int64_t *dropped,
                                  struct cg_err *err) CG_MUST_CHECK;

/* A page of the tenant's deliveries, newest first: of state (0: any) and channel_id ("" any),
 * after `after` (NULL: the first page), at most limit (1..CG_STORE_PAGE_MAX) into out;
 * *more and *next when another page follows. */
cg_status cg_store_delivery_list(struct cg_store *store, const char *tenant_id, int state,
                                 const char *channel_id, const struct cg_delivery_cursor *after,
                                 int limit, struct cg_delivery *out, int *count, bool *more,
                                 struct cg_delivery_cursor *next, struct cg_err *err) CG_MUST_CHECK;

/* Makes DEAD deliveries PENDING again, due now, attempts 0: the n named ones (ids checked
 * by the caller), or with all_dead every dead one (of channel_id unless ""). *count gets
 * how many; when some, the audit row notification_deliveries_redriven lists them. */
cg_status cg_store_delivery_redrive(struct cg_store *store, const char *tenant_id,
                                    const char *const *ids, int n, bool all_dead,
                                    const char *channel_id, const struct cg_audit *audit,
                                    int64_t *count, struct cg_err *err) CG_MUST_CHECK;

/* Claims up to limit due deliveries of every tenant (pending, due, lease free) for lease_ms,
 * counting the attempt; out[limit] gets them (*count). */
cg_status cg_store_outbox_claim(struct cg_store *store, int64_t lease_ms, int limit,
                                struct cg_outbox_item *out, int *count,
                                struct cg_err *err) CG_MUST_CHECK;

/* Frees the bodies of n claimed items. */
void cg_outbox_items_free(struct cg_outbox_item *items, int n);

/* Settles the attempt of a claimed delivery (item, as claimed): delivered, or due again in
 * retry_ms, or dead (retry_ms < 0); http_status 0 when none came; error text is kept
 * (truncated). A delivery no longer pending, or claimed again since (its lease ran out), is
 * left alone. */
cg_status cg_store_outbox_settle(struct cg_store *store, const struct cg_outbox_item *item,
                                 bool delivered, int http_status, const char *error,
                                 int64_t retry_ms, struct cg_err *err) CG_MUST_CHECK;

/* Deletes up to limit (of each state) of the delivered and dead deliveries of the n
 * tenants of tenant_ids (a page of the sweeper) created before before_ms; *deleted gets
 * how many. */
cg_status cg_store_outbox_expire(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t before_ms, int limit, int *deleted,
                                 struct cg_err *err) CG_MUST_CHECK;

#endif

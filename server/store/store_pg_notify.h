/* store_pg_notify.h - the PostgreSQL side of notification channels and their outbox
 * (store_pg_notify.c), for the facade (store_notify.c) only. Contracts in store_notify.h:
 * these take a normalized tenant id and checked arguments. */
#ifndef CG_STORE_PG_NOTIFY_H
#define CG_STORE_PG_NOTIFY_H

#include "store/store_notify.h"
#include "store/store_pg.h"

cg_status cg_pg_channel_create(struct cg_pg *pg, const char *tenant_id, const struct cg_channel *in,
                               const struct cg_audit *audit, struct cg_channel *out,
                               struct cg_err *err);
cg_status cg_pg_channel_list(struct cg_pg *pg, const char *tenant_id, struct cg_channel *out,
                             int cap, int *count, struct cg_err *err);
cg_status cg_pg_channel_delete(struct cg_pg *pg, const char *tenant_id, const char *channel_id,
                               const struct cg_audit *audit, struct cg_channel *out,
                               int64_t *dropped, struct cg_err *err);
cg_status cg_pg_delivery_list(struct cg_pg *pg, const char *tenant_id, int state,
                              const char *channel_id, const struct cg_delivery_cursor *after,
                              int limit, struct cg_delivery *out, int *count, bool *more,
                              struct cg_delivery_cursor *next, struct cg_err *err);
cg_status cg_pg_delivery_redrive(struct cg_pg *pg, const char *tenant_id, const char *ids_literal,
                                 bool all_dead, const char *channel_id,
                                 const struct cg_audit *audit, int64_t *count, struct cg_err *err);
cg_status cg_pg_outbox_claim(struct cg_pg *pg, int64_t lease_ms, int limit,
                             struct cg_outbox_item *out, int *count, struct cg_err *err);
cg_status cg_pg_outbox_settle(struct cg_pg *pg, const char *tenant_id, const char *delivery_id,
                              int attempts, bool delivered, int http_status, const char *error,
                              int64_t retry_ms, struct cg_err *err);
cg_status cg_pg_outbox_expire(struct cg_pg *pg, const char *tenants, int64_t before_ms, int limit,
                              int *deleted, struct cg_err *err);

#endif

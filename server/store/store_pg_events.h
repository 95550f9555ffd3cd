/* store_pg_events.h - the PostgreSQL side of the event log (internal to server/store; see
 * store.h, "events", for what the functions mean). Arguments are checked by the facade
 * (store_events.c); a cg_pg belongs to one thread.
 */
#ifndef CG_STORE_STORE_PG_EVENTS_H
#define CG_STORE_STORE_PG_EVENTS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "store/store.h"

struct cg_pg;

/* Inside a transaction: appends events (see cg_store_events_append). Also used by the
 * sweeper's SQL (store_pg_sweep.c) for resets and expired reservations. */
cg_status cg__pg_events_append(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_event_in *events, int n, int64_t now_ms,
                               struct cg_err *err) CG_MUST_CHECK;

cg_status cg_pg_events_read(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                            int64_t after_seq, int max, struct cg_event *out, int *count,
                            struct cg_err *err) CG_MUST_CHECK;

cg_status cg_pg_events_since(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_scope_ids *ids, int level, bool descendants,
                             int64_t since_ms, int max, struct cg_event *out, int *count,
                             bool *more, struct cg_err *err) CG_MUST_CHECK;

cg_status cg_pg_event_seq(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          int64_t *seq, struct cg_err *err) CG_MUST_CHECK;

cg_status cg_pg_events_expire(struct cg_pg *pg, const char *tenants, int64_t before_ms, int limit,
                              int *deleted, struct cg_err *err) CG_MUST_CHECK;

/* The payloads of cg_keys notifications (migrations/0017) as received, unchecked: the
 * facade (store_events.c) validates them. A payload that does not fit is stored empty (so
 * it is refused as malformed); more than fit set overflow. */
#define CG_PG_KEY_PAYLOAD_LEN 64
struct cg_pg_key_payloads {
    char payload[CG_STORE_KEY_NOTICES_MAX][CG_PG_KEY_PAYLOAD_LEN];
    int count;
    bool overflow;
};

/* The rows of cg_rows notifications as received (structure checked, tenant not yet):
 * the wait stops taking notifications before one could overflow it. */
struct cg_pg_row_notices {
    struct cg_row_notice rows[CG_STORE_ROW_NOTICES_MAX];
    int count;
};

/* The most rows one cg_rows payload may carry (store_pg.c's NOTIFY sends up to 16). */
#define CG_PG_ROWS_PER_PAYLOAD 64

/* LISTEN cg_events, cg_keys and cg_rows when conn is not *listening (a new or remade
 * connection); then drains notifications or waits up to timeout_ms. keys and rows are
 * emptied first and get the cg_keys payloads and cg_rows rows received. See
 * cg_store_listener_wait. */
cg_status cg_pg_listen_wait(struct cg_pg *pg, void **listening, int timeout_ms,
                            struct cg_event_notice *out, int max, int *count,
                            struct cg_pg_key_payloads *keys, struct cg_pg_row_notices *rows,
                            bool *relistened, struct cg_err *err) CG_MUST_CHECK;

/* Outside a transaction: NOTIFY cg_rows with each of the payloads joined by 0x1e (no
 * UUID holds it), in one statement, past the call's deadline. */
cg_status cg_pg_rows_announce(struct cg_pg *pg, const char *payloads,
                              struct cg_err *err) CG_MUST_CHECK;

cg_status cg_pg_events_fetch(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_event_want *wants, int nwants, int64_t since_ms,
                             struct cg_event *out, int max, int *count,
                             struct cg_err *err) CG_MUST_CHECK;

#endif

/* store_pg_notify.c - notification channels and their outbox in PostgreSQL (migration
 * 0023). Contracts in store_notify.h; the facade (store_notify.c) checks arguments first. */
#include "store/store_pg_internal.h"
#include "store/store_pg_notify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define CHANNEL_COLUMNS                                                                            \
    "channel_id::text, kind, url, secret, array_to_string(event_types, ','), session_id,"          \
    " task_id, description, floor(extract(epoch FROM created_at) * 1000)::int8"

static cg_status bad_row(struct cg_pg *pg, const char *label, struct cg_err *err)
{
    cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "%s: a stored row does not parse", label);
    return cg_err_set(err, CG_INTERNAL, "storage error");
}

static void copy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src);
}

static bool read_channel(PGresult *res, int row, struct cg_channel *c)
{
    memset(c, 0, sizeof *c);
    copy(c->channel_id, sizeof c->channel_id, PQgetvalue(res, row, 0));
    c->kind = (int)cg__pg_parse_i64(PQgetvalue(res, row, 1));
    copy(c->url, sizeof c->url, PQgetvalue(res, row, 2));
    copy(c->secret, sizeof c->secret, PQgetvalue(res, row, 3));
    const char *types = PQgetvalue(res, row, 4);
    while (*types != '\0' && c->n_event_types < CG_NOTIFY_EVENT_TYPES_MAX) {
        char *end = NULL;
        long t = strtol(types, &end, 10);
        if (end == types)
            return false;
        c->event_types[c->n_event_types++] = (int)t;
        types = *end == ',' ? end + 1 : end;
    }
    copy(c->session_id, sizeof c->session_id, PQgetvalue(res, row, 5));
    copy(c->task_id, sizeof c->task_id, PQgetvalue(res, row, 6));
    copy(c->description, sizeof c->description, PQgetvalue(res, row, 7));
    c->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 8));
    return c->kind >= 1 && c->kind <= 2;
}

/* What the audit trail keeps of a channel (alias c): no URL path, no secret (both may be
 * credentials). */
#define CHANNEL_AUDIT_JSON(c)                                                                      \
    "jsonb_build_object('kind', CASE " c ".kind WHEN 1 THEN 'webhook' ELSE 'slack' END,"           \
    " 'url_host', substring(" c ".url from '^[a-z]+://[^/?#]*'), 'event_types', " c                \
    ".event_types,"                                                                                \
    " 'description', " c ".description)"

cg_status cg_pg_channel_create(struct cg_pg *pg, const char *tenant_id, const struct cg_channel *in,
                               const struct cg_audit *audit, struct cg_channel *out,
                               struct cg_err *err)
{
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    char kind[8], types[CG_NOTIFY_EVENT_TYPES_MAX * 4 + 3], max[16];
    snprintf(kind, sizeof kind, "%d", in->kind);
    snprintf(max, sizeof max, "%d", CG_CHANNELS_MAX);
    size_t used = (size_t)snprintf(types, sizeof types, "{");
    for (int i = 0; i < in->n_event_types; i++)
        used += (size_t)snprintf(types + used, sizeof types - used, "%s%d", i ? "," : "",
                                 in->event_types[i]);
    snprintf(types + used, sizeof types - used, "}");
    const char *values[] = {tenant_id, kind,           in->url,     in->secret,
                            types,     in->session_id, in->task_id, in->description,
                            max,       actor.key_id,   actor.role,  actor.request_id};
    PGresult *res = NULL;
    /* The tenant's count, the insert and its audit row in one statement; two concurrent
     * creates may both pass the count at the limit (a bound, not an invariant). */
    cg_status rc = cg__pg_run(
        pg, "channel_create",
        "WITH made AS (INSERT INTO notification_channels (tenant_id, kind, url, secret,"
        " event_types, session_id, task_id, description)"
        " SELECT $1::uuid, $2::int2, $3::text, $4::text, $5::int2[], $6::text, $7::text,"
        " $8::text WHERE (SELECT count(*) FROM notification_channels"
        "  WHERE tenant_id = $1::uuid) < $9::int8 RETURNING *),"
        " audit AS (" AUDIT_INSERT " SELECT m.tenant_id, $10::text, $11::int2,"
        " 'notification_channel_created', m.session_id, m.task_id, '', m.channel_id::text,"
        " NULL, " CHANNEL_AUDIT_JSON("m") ", $12::text FROM made m)"
                                          " SELECT " CHANNEL_COLUMNS " FROM made",
        12, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23503") || cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg__pg_scope_missing(err, 0);
    } else if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_RESOURCE_EXHAUSTED,
                        "channels: the tenant has %d already; delete one first", CG_CHANNELS_MAX);
    } else if (!read_channel(res, 0, out)) {
        rc = bad_row(pg, "channel_create", err);
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_channel_list(struct cg_pg *pg, const char *tenant_id, struct cg_channel *out,
                             int cap, int *count, struct cg_err *err)
{
    *count = 0;
    char limit[16];
    snprintf(limit, sizeof limit, "%d", cap);
    const char *values[] = {tenant_id, limit};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "channel_list",
                              "SELECT " CHANNEL_COLUMNS " FROM notification_channels"
                              " WHERE tenant_id = $1::uuid ORDER BY created_at, channel_id"
                              " LIMIT $2::int4",
                              2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK) {
        for (int i = 0; i < PQntuples(res) && i < cap; i++) {
            if (!read_channel(res, i, &out[i])) {
                rc = bad_row(pg, "channel_list", err);
                break;
            }
            *count = i + 1;
        }
    } else if (cg__pg_sqlstate_is(pg, "22P02")) {
        rc = cg__pg_scope_missing(err, 0);
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_channel_delete(struct cg_pg *pg, const char *tenant_id, const char *channel_id,
                               const struct cg_audit *audit, struct cg_channel *out,
                               int64_t *dropped, struct cg_err *err)
{
    *dropped = 0;
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id, channel_id, actor.key_id, actor.role, actor.request_id};
    PGresult *res = NULL;
    /* The outbox rows go by the foreign key's ON DELETE CASCADE; counted first, in the
     * same statement's snapshot. The audit row keeps what the channel was. */
    cg_status rc = cg__pg_run(
        pg, "channel_delete",
        "WITH gone AS (DELETE FROM notification_channels"
        " WHERE tenant_id = $1::uuid AND channel_id = $2::uuid RETURNING *),"
        " audit AS (" AUDIT_INSERT " SELECT g.tenant_id, $3::text, $4::int2,"
        " 'notification_channel_deleted', g.session_id, g.task_id, '', "
        "g.channel_id::text, " CHANNEL_AUDIT_JSON(
            "g") ", NULL, $5::text FROM gone g)"
                 " SELECT " CHANNEL_COLUMNS ", (SELECT count(*) FROM notification_outbox"
                 "  WHERE tenant_id = $1::uuid AND channel_id = $2::uuid AND state <> 2) FROM gone",
        5, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK) {
        if (PQntuples(res) != 1)
            rc = cg_err_set(err, CG_NOT_FOUND, "channel_id: no such channel");
        else if (!read_channel(res, 0, out))
            rc = bad_row(pg, "channel_delete", err);
        else
            *dropped = cg__pg_parse_i64(PQgetvalue(res, 0, 9));
    } else if (cg__pg_sqlstate_is(pg, "22P02")) {
        rc = cg_err_set(err, CG_NOT_FOUND, "channel_id: no such channel");
    }
    PQclear(res);
    return rc;
}

#define DELIVERY_COLUMNS                                                                           \
    "delivery_id::text, channel_id::text, event_id::text, event_type, state, attempts,"            \
    " floor(extract(epoch FROM next_attempt_at) * 1000)::int8, last_status, last_error,"           \
    " floor(extract(epoch FROM created_at) * 1000)::int8,"                                         \
    " coalesce(floor(extract(epoch FROM delivered_at) * 1000)::int8, 0),"                          \
    " (extract(epoch FROM created_at) * 1000000)::int8"

static void read_delivery(PGresult *res, int row, struct cg_delivery *d)
{
    memset(d, 0, sizeof *d);
    copy(d->delivery_id, sizeof d->delivery_id, PQgetvalue(res, row, 0));
    copy(d->channel_id, sizeof d->channel_id, PQgetvalue(res, row, 1));
    copy(d->event_id, sizeof d->event_id, PQgetvalue(res, row, 2));
    d->event_type = (int)cg__pg_parse_i64(PQgetvalue(res, row, 3));
    d->state = (int)cg__pg_parse_i64(PQgetvalue(res, row, 4));
    d->attempts = (int)cg__pg_parse_i64(PQgetvalue(res, row, 5));
    d->next_attempt_ms = cg__pg_parse_i64(PQgetvalue(res, row, 6));
    d->last_status = (int)cg__pg_parse_i64(PQgetvalue(res, row, 7));
    copy(d->last_error, sizeof d->last_error, PQgetvalue(res, row, 8));
    d->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 9));
    d->delivered_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 10));
}

cg_status cg_pg_delivery_list(struct cg_pg *pg, const char *tenant_id, int state,
                              const char *channel_id, const struct cg_delivery_cursor *after,
                              int limit, struct cg_delivery *out, int *count, bool *more,
                              struct cg_delivery_cursor *next, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char state_text[8], limit_text[16], after_us[24];
    snprintf(state_text, sizeof state_text, "%d", state);
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    snprintf(after_us, sizeof after_us, "%lld", after ? (long long)after->created_at_us : 0LL);
    const char *values[] = {
        tenant_id,  state_text,
        channel_id, after ? "t" : "f",
        after_us,   after ? after->delivery_id : "00000000-0000-0000-0000-000000000000",
        limit_text};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "delivery_list",
                   "SELECT " DELIVERY_COLUMNS " FROM notification_outbox WHERE tenant_id = $1::uuid"
                   " AND ($2::int2 = 0 OR state = $2::int2)"
                   " AND ($3::text = '' OR channel_id::text = $3::text)"
                   " AND (NOT $4::boolean OR (created_at, delivery_id) < ('epoch'::timestamptz"
                   " + $5::int8 * interval '1 microsecond', $6::uuid))"
                   " ORDER BY created_at DESC, delivery_id DESC LIMIT $7::int4",
                   7, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK) {
        int rows = PQntuples(res);
        for (int i = 0; i < rows && i < limit; i++) {
            read_delivery(res, i, &out[i]);
            *count = i + 1;
        }
        if (rows > limit && *count > 0) {
            *more = true;
            next->created_at_us = cg__pg_parse_i64(PQgetvalue(res, *count - 1, 11));
            copy(next->delivery_id, sizeof next->delivery_id, out[*count - 1].delivery_id);
        }
    } else if (cg__pg_sqlstate_is(pg, "22P02")) {
        rc = cg__pg_scope_missing(err, 0);
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_delivery_redrive(struct cg_pg *pg, const char *tenant_id, const char *ids_literal,
                                 bool all_dead, const char *channel_id,
                                 const struct cg_audit *audit, int64_t *count, struct cg_err *err)
{
    *count = 0;
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id,    ids_literal, all_dead ? "t" : "f", channel_id,
                            actor.key_id, actor.role,  actor.request_id};
    PGresult *res = NULL;
    /* One audit row for a re-drive that made something pending (its deliveries listed). */
    cg_status rc =
        cg__pg_run(pg, "delivery_redrive",
                   "WITH r AS (UPDATE notification_outbox SET state = 1, attempts = 0,"
                   " next_attempt_at = now(), lease_until = NULL"
                   " WHERE tenant_id = $1::uuid AND state = 3"
                   " AND (($3::boolean AND ($4::text = '' OR channel_id::text = $4::text))"
                   "      OR delivery_id = ANY ($2::uuid[])) RETURNING delivery_id),"
                   " audit AS (" AUDIT_INSERT " SELECT $1::uuid, $5::text, $6::int2,"
                   " 'notification_deliveries_redriven', '', '', '', $4::text, NULL,"
                   " jsonb_build_object('redriven', count(*), 'delivery_ids',"
                   " jsonb_agg(r.delivery_id::text ORDER BY r.delivery_id)), $7::text FROM r"
                   " HAVING count(*) > 0)"
                   " SELECT count(*) FROM r",
                   7, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK)
        *count = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    else if (cg__pg_sqlstate_is(pg, "22P02"))
        rc = cg__pg_scope_missing(err, 0);
    PQclear(res);
    return rc;
}

cg_status cg_pg_outbox_claim(struct cg_pg *pg, int64_t lease_ms, int limit,
                             struct cg_outbox_item *out, int *count, struct cg_err *err)
{
    *count = 0;
    char lease[24], limit_text[16];
    snprintf(lease, sizeof lease, "%lld", (long long)lease_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {lease, limit_text};
    PGresult *res = NULL;
    /* Through notification_outbox_due; SKIP LOCKED: replicas claiming at once take
     * different rows. The lease makes a claimed row invisible to the next claims until it
     * runs out (its notifier died) or the attempt is settled. */
    cg_status rc = cg__pg_run(
        pg, "outbox_claim",
        "WITH due AS (SELECT tenant_id, delivery_id FROM notification_outbox"
        " WHERE state = 1 AND next_attempt_at <= now()"
        " AND (lease_until IS NULL OR lease_until <= now())"
        " ORDER BY next_attempt_at LIMIT $2::int4 FOR UPDATE SKIP LOCKED),"
        " claimed AS (UPDATE notification_outbox o"
        " SET attempts = o.attempts + 1, lease_until = now() + $1::int8 * interval '1 millisecond'"
        " FROM due WHERE o.tenant_id = due.tenant_id AND o.delivery_id = due.delivery_id"
        " RETURNING o.tenant_id, o.delivery_id, o.channel_id, o.event_type, o.attempts, o.body)"
        " SELECT c.tenant_id::text, c.delivery_id::text, n.kind, c.event_type, c.attempts,"
        " n.url, n.secret, c.body FROM claimed c JOIN notification_channels n"
        " ON n.tenant_id = c.tenant_id AND n.channel_id = c.channel_id",
        2, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK) {
        for (int i = 0; i < PQntuples(res) && i < limit; i++) {
            struct cg_outbox_item *it = &out[i];
            memset(it, 0, sizeof *it);
            copy(it->tenant_id, sizeof it->tenant_id, PQgetvalue(res, i, 0));
            copy(it->delivery_id, sizeof it->delivery_id, PQgetvalue(res, i, 1));
            it->kind = (int)cg__pg_parse_i64(PQgetvalue(res, i, 2));
            it->event_type = (int)cg__pg_parse_i64(PQgetvalue(res, i, 3));
            it->attempts = (int)cg__pg_parse_i64(PQgetvalue(res, i, 4));
            copy(it->url, sizeof it->url, PQgetvalue(res, i, 5));
            copy(it->secret, sizeof it->secret, PQgetvalue(res, i, 6));
            it->body_len = (size_t)PQgetlength(res, i, 7);
            if ((it->body = malloc(it->body_len + 1)) == NULL) {
                rc = cg_err_set(err, CG_NOMEM, "out of memory");
                break;
            }
            memcpy(it->body, PQgetvalue(res, i, 7), it->body_len + 1);
            *count = i + 1;
        }
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_outbox_settle(struct cg_pg *pg, const char *tenant_id, const char *delivery_id,
                              int attempts, bool delivered, int http_status, const char *error,
                              int64_t retry_ms, struct cg_err *err)
{
    char attempts_text[16];
    snprintf(attempts_text, sizeof attempts_text, "%d", attempts);
    char status[16], retry[24], text[CG_DELIVERY_ERROR_MAX + 1];
    snprintf(status, sizeof status, "%d", http_status);
    snprintf(retry, sizeof retry, "%lld", (long long)retry_ms);
    /* Cut on a UTF-8 boundary: the column is text. */
    size_t n = strlen(error);
    if (n > CG_DELIVERY_ERROR_MAX) {
        n = CG_DELIVERY_ERROR_MAX;
        while (n > 0 && ((unsigned char)error[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(text, error, n);
    text[n] = '\0';
    const char *values[] = {tenant_id, delivery_id, delivered ? "t" : "f", status,
                            text,      retry,       attempts_text};
    PGresult *res = NULL;
    cg_status rc =
        cg__pg_run(pg, "outbox_settle",
                   "UPDATE notification_outbox SET lease_until = NULL, last_status = $4::int4,"
                   " last_error = $5::text,"
                   " state = CASE WHEN $3::boolean THEN 2 WHEN $6::int8 < 0 THEN 3 ELSE 1 END,"
                   " delivered_at = CASE WHEN $3::boolean THEN now() END,"
                   " next_attempt_at = CASE WHEN $3::boolean OR $6::int8 < 0 THEN next_attempt_at"
                   "   ELSE now() + $6::int8 * interval '1 millisecond' END"
                   " WHERE tenant_id = $1::uuid AND delivery_id = $2::uuid AND state = 1"
                   " AND attempts = $7::int4",
                   7, values, NULL, NULL, 0, &res, err);
    PQclear(res);
    return rc;
}

cg_status cg_pg_outbox_expire(struct cg_pg *pg, const char *tenants, int64_t before_ms, int limit,
                              int *deleted, struct cg_err *err)
{
    *deleted = 0;
    char before[24], limit_text[16];
    snprintf(before, sizeof before, "%lld", (long long)before_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenants, before, limit_text};
    PGresult *res = NULL;
    /* Through notification_outbox_by_state (tenant, state, created_at), one state a scan. */
    cg_status rc = cg__pg_run(
        pg, "outbox_expire",
        "DELETE FROM notification_outbox WHERE (tenant_id, delivery_id) IN ("
        " (SELECT tenant_id, delivery_id FROM notification_outbox WHERE tenant_id = ANY($1::uuid[])"
        "  AND state = 2 AND created_at < 'epoch'::timestamptz + $2::int8 * interval '1 "
        "millisecond'"
        "  LIMIT $3::int4)"
        " UNION ALL"
        " (SELECT tenant_id, delivery_id FROM notification_outbox WHERE tenant_id = ANY($1::uuid[])"
        "  AND state = 3 AND created_at < 'epoch'::timestamptz + $2::int8 * interval '1 "
        "millisecond'"
        "  LIMIT $3::int4))",
        3, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK)
        *deleted = (int)cg__pg_parse_i64(PQcmdTuples(res));
    PQclear(res);
    return rc;
}

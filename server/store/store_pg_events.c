/* store_pg_events.c - the event log's SQL and the LISTEN connection (see store.h,
 * "events", and migrations/0006_events.sql). Events are appended by the SQL function
 * cg_events_append, which numbers them per scope under the scope row's lock and NOTIFYs
 * cg_events; every statement is keyed by tenant_id. The same connection LISTENs on
 * cg_keys, where a trigger announces revoked, changed and deleted API keys (0017).
 */
#include "store/store_pg_events.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "store/store_pg_internal.h"

#define EVENT_COLUMNS                                                                              \
    "e.tenant_id::text, e.session_id, e.task_id, e.agent_id, e.level, e.seq, e.event_id::text,"    \
    " e.type, floor(extract(epoch FROM e.occurred_at) * 1000)::int8, e.has_budget, e.mode,"        \
    " e.limit_tokens, e.limit_cost_micros, e.warning_ratio, e.used_tokens, e.reserved_tokens,"     \
    " e.used_cost_micros, e.reserved_cost_micros, e.closed, e.threshold_ratio, e.falling,"         \
    " e.delay_ms, e.period_start_ms, e.ref_id, e.ref_tokens, e.ref_state, e.message,"              \
    " e.allocated_tokens, e.approved_extra_tokens, e.ref_input_tokens, e.ref_output_tokens,"       \
    " e.ref_cache_read_tokens, e.ref_cache_write_tokens, e.ref_cost_micros"

/* A growable text buffer with a cap (JSON parameters). */
struct buf {
    char *data;
    size_t len, cap;
    bool failed;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *d = cap > (1u << 24) ? NULL : realloc(b->data, cap);
        if (d == NULL) {
            b->failed = true;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_printf(struct buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        b->failed = true;
    else
        buf_add(b, tmp, (size_t)n);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void buf_json_str(struct buf *b, const char *key, const char *s)
{
    buf_printf(b, "\"%s\":\"", key);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            buf_add(b, esc, 2);
        } else if (*p < 0x20) {
            buf_printf(b, "\\u%04x", *p);
        } else {
            buf_add(b, (const char *)p, 1);
        }
    }
    buf_add(b, "\"", 1);
}

static void buf_json_ids(struct buf *b, const struct cg_scope_ids *ids)
{
    buf_json_str(b, "s", ids->session_id);
    buf_add(b, ",", 1);
    buf_json_str(b, "t", ids->task_id);
    buf_add(b, ",", 1);
    buf_json_str(b, "a", ids->agent_id);
}

cg_status cg__pg_events_append(struct cg_pg *pg, const char *tenant_id,
                               const struct cg_event_in *events, int n, int64_t now_ms,
                               struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "events_append", err);
    struct buf b = {0};
    buf_add(&b, "[", 1);
    for (int i = 0; i < n; i++) {
        const struct cg_event_in *e = &events[i];
        const struct cg_event_fields *f = &e->fields;
        buf_add(&b, i ? ",{" : "{", i ? 2 : 1);
        buf_json_ids(&b, &e->ids);
        buf_printf(&b, ",\"type\":%d,\"thr\":%.17g,\"fall\":%s,\"delay\":%u,\"ps\":%lld,", e->type,
                   f->threshold_ratio, f->falling ? "true" : "false", f->delay_ms,
                   (long long)f->period_start_ms);
        buf_json_str(&b, "ref", f->ref_id);
        buf_printf(&b, ",\"reft\":%lld,\"refs\":%d,", (long long)f->ref_tokens, f->ref_state);
        buf_json_str(&b, "msg", f->message);
        const struct cg_usage *u = &f->ref_usage;
        buf_printf(&b, ",\"ri\":%lld,\"ro\":%lld,\"rcr\":%lld,\"rcw\":%lld,\"rc\":%lld}",
                   (long long)u->input_tokens, (long long)u->output_tokens,
                   (long long)u->cache_read_tokens, (long long)u->cache_write_tokens,
                   (long long)u->cost_micros);
    }
    buf_add(&b, "]", 1);
    if (b.failed) {
        free(b.data);
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)now_ms);
    const char *values[] = {tenant_id, b.data, now_text};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "events_append",
                              "SELECT p FROM cg_events_append($1::uuid, $2::jsonb, $3::int8) AS p",
                              3, values, NULL, NULL, 0, &res, err);
    /* The wake-ups go out after COMMIT (cg_pg_commit), never inside the transaction. */
    for (int i = 0; rc == CG_OK && i < PQntuples(res); i++)
        if (!cg__pg_notice_add(pg, PQgetvalue(res, i, 0)))
            cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg),
                   "too many events in one transaction to "
                   "announce; watchers learn of them later");
    if (rc != CG_OK && cg__pg_sqlstate_is(pg, "P0002")) {
        const struct cg_scope_ids *ids = &events[0].ids;
        rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND, "%s: no such scope",
                         ids->agent_id[0]     ? "scope.agent_id"
                         : ids->task_id[0]    ? "scope.task_id"
                         : ids->session_id[0] ? "scope.session_id"
                                              : "tenant_id");
    }
    PQclear(res);
    free(b.data);
    return rc;
}

static void row_to_event(PGresult *res, int i, struct cg_event *e)
{
    memset(e, 0, sizeof *e);
    int c = 0;
    cg__pg_copy_str(e->tenant_id, sizeof e->tenant_id, PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->ids.session_id, sizeof e->ids.session_id, PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->ids.task_id, sizeof e->ids.task_id, PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->ids.agent_id, sizeof e->ids.agent_id, PQgetvalue(res, i, c++));
    e->level = (int)cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->seq = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->event_id, sizeof e->event_id, PQgetvalue(res, i, c++));
    e->type = (int)cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->occurred_at_ms = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->has_budget = PQgetvalue(res, i, c++)[0] == 't';
    e->mode = (int)cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->limit_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->limit_cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->warning_ratio = strtod(PQgetvalue(res, i, c++), NULL);
    e->used_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->reserved_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->used_cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->reserved_cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->closed = PQgetvalue(res, i, c++)[0] == 't';
    e->fields.threshold_ratio = strtod(PQgetvalue(res, i, c++), NULL);
    e->fields.falling = PQgetvalue(res, i, c++)[0] == 't';
    e->fields.delay_ms = (uint32_t)cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.period_start_ms = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->fields.ref_id, sizeof e->fields.ref_id, PQgetvalue(res, i, c++));
    e->fields.ref_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_state = (int)cg__pg_parse_i64(PQgetvalue(res, i, c++));
    cg__pg_copy_str(e->fields.message, sizeof e->fields.message, PQgetvalue(res, i, c++));
    e->allocated_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->approved_extra_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_usage.input_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_usage.output_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_usage.cache_read_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_usage.cache_write_tokens = cg__pg_parse_i64(PQgetvalue(res, i, c++));
    e->fields.ref_usage.cost_micros = cg__pg_parse_i64(PQgetvalue(res, i, c++));
}

static void rows_to_events(PGresult *res, struct cg_event *out, int max, int *count)
{
    int rows = PQntuples(res);
    if (rows > max)
        rows = max;
    for (int i = 0; i < rows; i++)
        row_to_event(res, i, &out[i]);
    *count = rows;
}

cg_status cg_pg_events_read(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                            int64_t after_seq, int max, struct cg_event *out, int *count,
                            struct cg_err *err)
{
    *count = 0;
    char after_text[24], max_text[16];
    snprintf(after_text, sizeof after_text, "%lld", (long long)after_seq);
    snprintf(max_text, sizeof max_text, "%d", max);
    const char *values[] = {tenant_id,     ids->session_id, ids->task_id,
                            ids->agent_id, after_text,      max_text};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "events_read",
                              "SELECT " EVENT_COLUMNS " FROM scope_events e"
                              " WHERE e.tenant_id = $1::uuid AND e.session_id = $2"
                              "  AND e.task_id = $3 AND e.agent_id = $4 AND e.seq > $5::int8"
                              " ORDER BY e.seq LIMIT $6::int",
                              6, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK)
        rows_to_events(res, out, max, count);
    PQclear(res);
    return rc;
}

cg_status cg_pg_events_since(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_scope_ids *ids, int level, bool descendants,
                             int64_t since_ms, int max, struct cg_event *out, int *count,
                             bool *more, struct cg_err *err)
{
    *count = 0;
    *more = false;
    char level_text[8], since_text[24], max_text[16];
    snprintf(level_text, sizeof level_text, "%d", level);
    snprintf(since_text, sizeof since_text, "%lld", (long long)since_ms);
    snprintf(max_text, sizeof max_text, "%d", max + 1); /* one more: are there older ones? */
    const char *values[] = {tenant_id,  ids->session_id,         ids->task_id, ids->agent_id,
                            level_text, descendants ? "t" : "f", since_text,   max_text};
    PGresult *res = NULL;
    /* The newest max + 1, read backwards on scope_events_age (tenant_id, occurred_at): the
     * scan stops there however many an hour holds. */
    cg_status rc =
        cg__pg_run(pg, "events_since",
                   "SELECT " EVENT_COLUMNS " FROM scope_events e"
                   " WHERE e.tenant_id = $1::uuid"
                   "  AND e.occurred_at >= to_timestamp($7::int8 / 1000.0)"
                   "  AND ($5::int < 2 OR e.session_id = $2) AND ($5::int < 3 OR e.task_id = $3)"
                   "  AND ($5::int < 4 OR e.agent_id = $4)"
                   "  AND ($6::bool OR (e.session_id = $2 AND e.task_id = $3 AND e.agent_id = $4))"
                   " ORDER BY e.occurred_at DESC, e.seq DESC LIMIT $8::int",
                   8, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK) {
        int rows = PQntuples(res);
        *more = rows > max;
        if (rows > max)
            rows = max;
        /* Oldest first for the caller. */
        for (int i = 0; i < rows; i++)
            row_to_event(res, rows - 1 - i, &out[i]);
        *count = rows;
    }
    PQclear(res);
    return rc;
}

cg_status cg_pg_events_expire(struct cg_pg *pg, const char *tenants, int64_t before_ms, int limit,
                              int *deleted, struct cg_err *err)
{
    *deleted = 0;
    char before_text[24], limit_text[16];
    snprintf(before_text, sizeof before_text, "%lld", (long long)before_ms);
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenants, before_text, limit_text};
    PGresult *res = NULL;
    /* Through scope_events_age (tenant_id, occurred_at), one index range per tenant of
     * the page; bounded so that one statement stays short after a long outage of the
     * sweeper. */
    cg_status rc = cg__pg_run(
        pg, "events_expire",
        "DELETE FROM scope_events WHERE (tenant_id, session_id, task_id, agent_id, seq) IN"
        " (SELECT tenant_id, session_id, task_id, agent_id, seq FROM scope_events"
        "  WHERE tenant_id = ANY($1::uuid[]) AND occurred_at < to_timestamp($2::int8 / 1e3)"
        "  LIMIT $3::int)",
        3, values, NULL, NULL, 0, &res, err);
    if (rc == CG_OK)
        *deleted = (int)cg__pg_parse_i64(PQcmdTuples(res));
    PQclear(res);
    return rc;
}

/* Splits [p, end) into exactly n fields separated by single spaces (the last one ends at
 * end) and copies the number that is the first into *number (at most 18 digits, > 0) and
 * the three scope ids that are the last into *ids. False when the text is not that. */
static bool split_number_ids(const char *p, const char *end, int n, int64_t *number,
                             struct cg_scope_ids *ids, const char **first, size_t *first_len)
{
    const char *fields[5];
    size_t lens[5];
    for (int i = 0; i < n; i++) {
        const char *sp = p;
        while (sp < end && *sp != ' ')
            sp++;
        if ((i < n - 1) != (sp < end))
            return false; /* too few fields, or too many */
        fields[i] = p;
        lens[i] = (size_t)(sp - p);
        p = sp + 1;
    }
    const char *num = fields[n - 4];
    size_t num_len = lens[n - 4];
    if (num_len == 0 || num_len > 18 || lens[n - 3] > CG_SCOPE_ID_MAX ||
        lens[n - 2] > CG_SCOPE_ID_MAX || lens[n - 1] > CG_SCOPE_ID_MAX)
        return false;
    char v[20];
    memcpy(v, num, num_len);
    v[num_len] = '\0';
    *number = cg__pg_parse_i64(v);
    memcpy(ids->session_id, fields[n - 3], lens[n - 3]);
    memcpy(ids->task_id, fields[n - 2], lens[n - 2]);
    memcpy(ids->agent_id, fields[n - 1], lens[n - 1]);
    if (first != NULL) {
        *first = fields[0];
        *first_len = lens[0];
    }
    return *number > 0;
}

/* "<tenant> <seq> <session> <task> <agent>"; false when it is not one of ours. */
static bool parse_notice(const char *payload, struct cg_event_notice *out)
{
    memset(out, 0, sizeof *out);
    const char *tenant = NULL;
    size_t tenant_len = 0;
    if (!split_number_ids(payload, payload + strlen(payload), 5, &out->seq, &out->ids, &tenant,
                          &tenant_len) ||
        tenant_len != CG_UUID_LEN)
        return false;
    memcpy(out->tenant_id, tenant, tenant_len);
    return true;
}

/* Stores one cg_keys payload (checked later, by the facade). */
static void key_payload_add(struct cg_pg_key_payloads *keys, const char *payload)
{
    if (keys->count == CG_STORE_KEY_NOTICES_MAX) {
        keys->overflow = true;
        return;
    }
    char *slot = keys->payload[keys->count++];
    size_t len = strlen(payload);
    if (len >= CG_PG_KEY_PAYLOAD_LEN)
        len = 0; /* too long to be one of ours: refused as malformed */
    memcpy(slot, payload, len);
    slot[len] = '\0';
}

/* One "<row_version> <session> <task> <agent>" line of len bytes into out; false when it
 * is not that. */
static bool parse_row_line(const char *line, size_t len, struct cg_row_notice *out)
{
    return split_number_ids(line, line + len, 4, &out->row_version, &out->ids, NULL, NULL);
}

/* A cg_rows payload, "<tenant>" (the whole tenant) or "<tenant>" then "\n<line>" per row,
 * into rows (the caller left room for CG_PG_ROWS_PER_PAYLOAD). A malformed one names the
 * tenant alone when it starts with one (safe: more is dropped), else is logged. */
static void rows_payload_add(struct cg_pg_row_notices *rows, const char *payload)
{
    size_t len = strlen(payload);
    struct cg_row_notice *r = &rows->rows[rows->count];
    if (len < CG_UUID_LEN || (len > CG_UUID_LEN && payload[CG_UUID_LEN] != '\n')) {
        cg_log(CG_LOG_WARN, MOD, NULL, "cg_rows: ignored a notification that names no tenant");
        return;
    }
    bool whole = len == CG_UUID_LEN;
    int added = 0;
    for (const char *p = payload + CG_UUID_LEN; !whole && *p == '\n';) {
        const char *line = p + 1, *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        memset(&r[added], 0, sizeof r[added]);
        if (added == CG_PG_ROWS_PER_PAYLOAD || !parse_row_line(line, n, &r[added]))
            whole = true; /* not ours as it should be: the whole tenant, to be safe */
        else
            added++;
        p = line + n;
    }
    if (whole) {
        added = 1;
        memset(r, 0, sizeof *r);
        r->whole_tenant = true;
    }
    for (int i = 0; i < added; i++) {
        memcpy(r[i].tenant_id, payload, CG_UUID_LEN);
        r[i].tenant_id[CG_UUID_LEN] = '\0';
    }
    rows->count += added;
}

static void drain(PGconn *conn, struct cg_event_notice *out, int max, int *count,
                  struct cg_pg_key_payloads *keys, struct cg_pg_row_notices *rows)
{
    PGnotify *n;
    while (*count < max && rows->count + CG_PG_ROWS_PER_PAYLOAD <= CG_STORE_ROW_NOTICES_MAX &&
           (n = PQnotifies(conn)) != NULL) {
        if (strcmp(n->relname, "cg_events") == 0 && parse_notice(n->extra, &out[*count]))
            (*count)++;
        else if (strcmp(n->relname, "cg_keys") == 0)
            key_payload_add(keys, n->extra);
        else if (strcmp(n->relname, "cg_rows") == 0)
            rows_payload_add(rows, n->extra);
        PQfreemem(n);
    }
}

cg_status cg_pg_listen_wait(struct cg_pg *pg, void **listening, int timeout_ms,
                            struct cg_event_notice *out, int max, int *count,
                            struct cg_pg_key_payloads *keys, struct cg_pg_row_notices *rows,
                            bool *relistened, struct cg_err *err)
{
    *count = 0;
    rows->count = 0;
    keys->count = 0;
    keys->overflow = false;
    *relistened = false;
    if (pg->conn == NULL || (void *)pg->conn != *listening) {
        *listening = NULL;
        /* A key revoked (a row written) before LISTEN took effect is unheard; the caller
         * drops every cached key and row on *relistened, which comes after all three. */
        static const char *const channels[] = {"LISTEN cg_events", "LISTEN cg_keys",
                                               "LISTEN cg_rows"};
        for (int i = 0; i < 3; i++) {
            PGresult *res = NULL;
            cg_status rc = cg__pg_run(pg, "listen", channels[i], 0, NULL, NULL, NULL, 0, &res, err);
            PQclear(res);
            if (rc != CG_OK)
                return rc;
        }
        *listening = pg->conn;
        *relistened = true;
    }
    PGconn *conn = pg->conn;
    drain(conn, out, max, count, keys, rows);
    if (*count > 0 || keys->count > 0 || keys->overflow || rows->count > 0)
        return CG_OK;
    struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};
    if (p.fd < 0)
        goto lost;
    int ready = poll(&p, 1, timeout_ms);
    if (ready < 0 && errno != EINTR)
        goto lost;
    if (ready > 0) {
        if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK)
            goto lost;
        drain(conn, out, max, count, keys, rows);
    }
    return CG_OK;
lost:
    cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg), "listening connection lost: %s", PQerrorMessage(conn));
    PQfinish(conn);
    pg->conn = NULL;
    pg->session_timeout_ms = -1;
    *listening = NULL;
    return cg_err_set(err, CG_UNAVAILABLE, "storage unavailable");
}

cg_status cg_pg_rows_announce(struct cg_pg *pg, const char *payloads, struct cg_err *err)
{
    if (pg->in_tx) { /* a NOTIFY would wait for that transaction's commit, and lock it */
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "rows_announce called inside a transaction");
        return cg_err_set(err, CG_INTERNAL, "storage error");
    }
    /* Past the call's deadline: the write is committed and the other replicas wait for the
     * news. */
    int64_t deadline = pg->deadline_mono_ms;
    pg->deadline_mono_ms = 0;
    const char *values[] = {payloads};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "rows_announce",
                              "SELECT count(pg_notify('cg_rows', p))"
                              " FROM unnest(string_to_array($1::text, E'\\x1e')) AS p",
                              1, values, NULL, NULL, RUN_READ, &res, err);
    pg->deadline_mono_ms = deadline;
    PQclear(res);
    return rc;
}

cg_status cg_pg_events_fetch(struct cg_pg *pg, const char *tenant_id,
                             const struct cg_event_want *wants, int nwants, int64_t since_ms,
                             struct cg_event *out, int max, int *count, struct cg_err *err)
{
    *count = 0;
    struct buf b = {0};
    buf_add(&b, "[", 1);
    for (int i = 0; i < nwants; i++) {
        buf_add(&b, i ? ",{" : "{", i ? 2 : 1);
        buf_json_ids(&b, &wants[i].ids);
        buf_printf(&b, ",\"after\":%lld,\"upto\":%lld}", (long long)wants[i].after_seq,
                   (long long)wants[i].upto_seq);
    }
    buf_add(&b, "]", 1);
    if (b.failed) {
        free(b.data);
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    char since_text[24], max_text[16];
    snprintf(since_text, sizeof since_text, "%lld", (long long)since_ms);
    snprintf(max_text, sizeof max_text, "%d", max);
    const char *values[] = {tenant_id, b.data, since_text, max_text};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(
        pg, "events_fetch",
        "WITH k AS (SELECT * FROM jsonb_to_recordset($2::jsonb)"
        "  AS k(s text, t text, a text, after int8, upto int8))"
        " SELECT * FROM ("
        "  SELECT " EVENT_COLUMNS " FROM k JOIN scope_events e ON e.tenant_id = $1::uuid"
        "   AND e.session_id = k.s AND e.task_id = k.t AND e.agent_id = k.a AND e.seq > k.after"
        "   AND (k.upto = 0 OR e.seq <= k.upto)"
        "  UNION ALL"
        "  SELECT " EVENT_COLUMNS " FROM scope_events e WHERE $3::int8 > 0"
        "   AND e.tenant_id = $1::uuid AND e.occurred_at >= to_timestamp($3::int8 / 1e3)"
        "   AND NOT EXISTS (SELECT 1 FROM k WHERE k.s = e.session_id AND k.t = e.task_id"
        "                   AND k.a = e.agent_id)) x"
        " ORDER BY 2, 3, 4, 6 LIMIT $4::int",
        4, values, NULL, NULL, RUN_READ, &res, err);
    if (rc == CG_OK)
        rows_to_events(res, out, max, count);
    PQclear(res);
    free(b.data);
    return rc;
}

cg_status cg_pg_event_seq(struct cg_pg *pg, const char *tenant_id, const struct cg_scope_ids *ids,
                          int64_t *seq, struct cg_err *err)
{
    const char *values[] = {tenant_id, ids->session_id, ids->task_id, ids->agent_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run_one(pg, "event_seq",
                                  "SELECT event_seq FROM scopes WHERE tenant_id = $1::uuid"
                                  " AND session_id = $2 AND task_id = $3 AND agent_id = $4",
                                  4, values, RUN_READ, "scope: no such scope", &res, err);
    if (rc == CG_OK)
        *seq = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

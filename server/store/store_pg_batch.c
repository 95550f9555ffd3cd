/* store_pg_batch.c - the set-based statements of a batched budget transaction: many
 * Reserves and Commits of one or several tenants decided together under one set of row
 * locks and written by one statement (service/budget_batch.c drives them). Every array
 * element carries its tenant, so a batch of many tenants costs the statements of one.
 *
 * Arrays travel as text array literals ("{...}") built here, every element quoted, so that
 * one statement carries the whole batch whatever its size (bounded by the caller).
 */
#include "store/store_pg_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* ------------------------------------------------------------------ array literals --- */

/* A growing "{...}" literal. On allocation failure it stays failed (ok = false). */
struct lit {
    char *buf;
    size_t len, cap;
    bool ok;
    bool first;
};

static void lit_init(struct lit *l)
{
    memset(l, 0, sizeof *l);
    l->ok = true;
    l->first = true;
}

static void lit_put(struct lit *l, const char *s, size_t n)
{
    if (!l->ok)
        return;
    if (l->len + n + 3 > l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        while (cap < l->len + n + 3)
            cap *= 2;
        char *b = realloc(l->buf, cap);
        if (b == NULL) {
            l->ok = false;
            return;
        }
        l->buf = b;
        l->cap = cap;
    }
    memcpy(l->buf + l->len, s, n);
    l->len += n;
    l->buf[l->len] = '\0';
}

static void lit_sep(struct lit *l)
{
    lit_put(l, l->first ? "{" : ",", 1);
    l->first = false;
}

/* One quoted element: backslash and double quote escaped, as array_in wants. */
static void lit_text(struct lit *l, const char *s)
{
    lit_sep(l);
    lit_put(l, "\"", 1);
    for (const char *p = s; *p;) {
        size_t run = strcspn(p, "\"\\"); /* copied as they are, in one piece */
        lit_put(l, p, run);
        p += run;
        if (*p) {
            lit_put(l, "\\", 1);
            lit_put(l, p++, 1);
        }
    }
    lit_put(l, "\"", 1);
}

/* A float8 element, printed so that it reads back exactly. */
static void lit_double(struct lit *l, double v)
{
    lit_sep(l);
    if (v == 0.0 && !signbit(v)) { /* most events: no threshold */
        lit_put(l, "0", 1);
        return;
    }
    char num[32];
    int n = snprintf(num, sizeof num, "%.17g", v);
    lit_put(l, num, (size_t)n);
}

/* An int8 element (digits by hand: a batch writes thousands, and printf showed in the
 * server's profile). */
static void lit_i64(struct lit *l, int64_t v)
{
    char num[24];
    char *p = num + sizeof num;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    lit_sep(l);
    lit_put(l, p, (size_t)(num + sizeof num - p));
}

/* The literal, "{}" when empty; NULL after an allocation failure. */
static const char *lit_done(struct lit *l)
{
    if (l->first)
        lit_put(l, "{", 1);
    lit_put(l, "}", 1);
    return l->ok ? l->buf : NULL;
}

static void lits_free(struct lit *lits, int n)
{
    for (int i = 0; i < n; i++)
        free(lits[i].buf);
}

/* Finishes n literals into values[first..]; false when one failed. */
static bool lits_done(struct lit *lits, int n, const char **values, int first)
{
    for (int i = 0; i < n; i++)
        if ((values[first + i] = lit_done(&lits[i])) == NULL)
            return false;
    return true;
}

static cg_status no_memory(struct cg_err *err)
{
    return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
}

/* ------------------------------------------------------------------ locks --- */

/* Builds the "{...}" literals lits[0..nlits) from columns; false when out of memory (lits
 * then freed). */
static bool lits_build(struct lit *lits, int nlits, const char **values, int first)
{
    if (lits_done(lits, nlits, values, first))
        return true;
    lits_free(lits, nlits);
    return false;
}

cg_status cg_pg_batch_lock_reservations(struct cg_pg *pg, const char *const *tenants,
                                        char (*const ids)[CG_UUID_LEN + 1], int n,
                                        struct cg_reservation *out, bool *found, struct cg_err *err)
{
    for (int i = 0; i < n; i++)
        found[i] = false;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "batch_lock_reservations", err);
    if (n == 0)
        return CG_OK;
    struct lit lits[2];
    lit_init(&lits[0]);
    lit_init(&lits[1]);
    for (int i = 0; i < n; i++) {
        lit_text(&lits[0], tenants[i]);
        lit_text(&lits[1], ids[i]);
    }
    const char *values[2];
    if (!lits_build(lits, 2, values, 0))
        return no_memory(err);
    /* By tenant then id, so that two batches locking overlapping sets wait, not deadlock. */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "batch_lock_reservations",
                              "SELECT " RESERVATION_COLUMNS ", tenant_id::text FROM reservations"
                              " WHERE (tenant_id, reservation_id) IN"
                              " (SELECT * FROM unnest($1::uuid[], $2::uuid[]))"
                              " ORDER BY tenant_id, reservation_id FOR NO KEY UPDATE",
                              2, values, NULL, NULL, 0, &res, err);
    lits_free(lits, 2);
    if (rc != CG_OK)
        return rc;
    int tcol = PQnfields(res) - 1;
    for (int r = 0; r < PQntuples(res); r++) {
        struct cg_reservation row;
        cg__pg_read_reservation(res, r, &row);
        const char *tenant = PQgetvalue(res, r, tcol);
        for (int i = 0; i < n; i++) {
            if (!found[i] && strcmp(ids[i], row.reservation_id) == 0 &&
                strcmp(tenants[i], tenant) == 0) {
                out[i] = row;
                found[i] = true;
            }
        }
    }
    PQclear(res);
    return CG_OK;
}

cg_status cg_pg_batch_lock_scopes(struct cg_pg *pg, const char *const *tenants,
                                  const struct cg_scope_ids *keys, int n, struct cg_budget_row *out,
                                  char (*row_tenant)[CG_UUID_LEN + 1], int cap, int *nout,
                                  struct cg_err *err)
{
    *nout = 0;
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "batch_lock_scopes", err);
    struct lit lits[4];
    for (int i = 0; i < 4; i++)
        lit_init(&lits[i]);
    for (int i = 0; i < n; i++) {
        lit_text(&lits[0], tenants[i]);
        lit_text(&lits[1], keys[i].session_id);
        lit_text(&lits[2], keys[i].task_id);
        lit_text(&lits[3], keys[i].agent_id);
    }
    const char *values[4];
    if (!lits_build(lits, 4, values, 0))
        return no_memory(err);
    /* LockRows runs above the sort: rows are locked by tenant, then tenant row first, by
     * level and ids, the order every writer of store.h follows. */
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "batch_lock_scopes",
                              "SELECT " SCOPE_COLUMNS ", tenant_id::text FROM scopes"
                              " WHERE (tenant_id, session_id, task_id, agent_id) IN"
                              " (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[],"
                              " $4::text[]))"
                              " ORDER BY tenant_id, level, session_id, task_id, agent_id"
                              " FOR NO KEY UPDATE",
                              4, values, NULL, NULL, 0, &res, err);
    lits_free(lits, 4);
    if (rc != CG_OK)
        return rc;
    int rows = PQntuples(res), tcol = PQnfields(res) - 1;
    if (rows > cap) {
        PQclear(res);
        return cg_err_set(err, CG_INTERNAL, "batch: more scope rows than expected");
    }
    for (int r = 0; r < rows; r++) {
        if (!cg__pg_read_scope(res, r, &out[r]) || PQgetlength(res, r, tcol) != CG_UUID_LEN) {
            PQclear(res);
            cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "batch_lock_scopes: a row does not parse");
            return cg_err_set(err, CG_INTERNAL, "storage error");
        }
        memcpy(row_tenant[r], PQgetvalue(res, r, tcol), CG_UUID_LEN + 1);
    }
    *nout = rows;
    PQclear(res);
    return CG_OK;
}

cg_status cg_pg_batch_keys_used(struct cg_pg *pg, const char *const *tenants,
                                const char *const *keys, int n, bool *used, struct cg_err *err)
{
    for (int i = 0; i < n; i++)
        used[i] = false;
    if (n == 0)
        return CG_OK;
    struct lit lits[2];
    lit_init(&lits[0]);
    lit_init(&lits[1]);
    for (int i = 0; i < n; i++) {
        lit_text(&lits[0], tenants[i]);
        lit_text(&lits[1], keys[i]);
    }
    const char *values[2];
    if (!lits_build(lits, 2, values, 0))
        return no_memory(err);
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "batch_keys_used",
                              "SELECT tenant_id::text, idempotency_key FROM reservations"
                              " WHERE (tenant_id, idempotency_key) IN"
                              " (SELECT * FROM unnest($1::uuid[], $2::text[]))",
                              2, values, NULL, NULL, 0, &res, err);
    lits_free(lits, 2);
    if (rc != CG_OK)
        return rc;
    for (int r = 0; r < PQntuples(res); r++)
        for (int i = 0; i < n; i++)
            if (strcmp(tenants[i], PQgetvalue(res, r, 0)) == 0 &&
                strcmp(keys[i], PQgetvalue(res, r, 1)) == 0)
                used[i] = true;
    PQclear(res);
    return CG_OK;
}

/* ------------------------------------------------------------------ the write --- */

/* Parameters of the write statement, in order (NEW_TN is $1; the events' time follows the
 * arrays). */
enum {
    NEW_TN,
    NEW_ID,
    NEW_S,
    NEW_T,
    NEW_A,
    NEW_TOKENS,
    NEW_COST,
    NEW_MODEL,
    NEW_ESTIMATE,
    NEW_KEY,
    NEW_TTL,
    SET_TN,
    SET_ID,
    SET_STATE,
    SET_IN,
    SET_OUT,
    SET_CR,
    SET_CW,
    SET_COST,
    LED_TN,
    LED_ID,
    LED_S,
    LED_T,
    LED_A,
    LED_IN,
    LED_OUT,
    LED_CR,
    LED_CW,
    LED_COST,
    LED_MODEL,
    LED_KEY,
    LED_RES,
    CNT_TN,
    CNT_S,
    CNT_T,
    CNT_A,
    CNT_USED,
    CNT_RESERVED,
    CNT_USED_COST,
    CNT_RESERVED_COST,
    CNT_IN,
    CNT_OUT,
    CNT_CR,
    CNT_CW,
    CNT_NE,
    CNT_ALLOC,
    EV_TN,
    EV_S,
    EV_T,
    EV_A,
    EV_K,
    EV_TYPE,
    EV_THR,
    EV_FALL,
    EV_DELAY,
    PARAM_ARRAYS
};

static const char WRITE_SQL[] =
    "WITH new_res AS ("
    " INSERT INTO reservations (tenant_id, reservation_id, session_id, task_id, agent_id,"
    " tokens, cost_micros, model, estimate_id, idempotency_key, expires_at)"
    " SELECT r.tn, r.id, r.s, r.t, r.a, r.tokens, r.cost, r.model, r.est, NULLIF(r.k, ''),"
    " now() + r.ttl * interval '1 millisecond'"
    " FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::text[], $6::int8[],"
    " $7::int8[], $8::text[], $9::text[], $10::text[], $11::int8[])"
    " AS r(tn, id, s, t, a, tokens, cost, model, est, k, ttl)"
    " RETURNING reservation_id::text AS id,"
    " floor(extract(epoch FROM created_at) * 1000)::int8 AS c,"
    " floor(extract(epoch FROM expires_at) * 1000)::int8 AS e),"
    " settled AS ("
    " UPDATE reservations r SET state = d.state, settled_at = now(),"
    " committed_input_tokens = d.i, committed_output_tokens = d.o,"
    " committed_cache_read_tokens = d.cr, committed_cache_write_tokens = d.cw,"
    " committed_cost_micros = d.cost"
    " FROM unnest($12::uuid[], $13::uuid[], $14::int2[], $15::int8[], $16::int8[],"
    " $17::int8[], $18::int8[], $19::int8[]) AS d(tn, id, state, i, o, cr, cw, cost)"
    " WHERE r.tenant_id = d.tn AND r.reservation_id = d.id AND r.state = 1"
    " RETURNING 1),"
    " led AS ("
    " INSERT INTO ledger (tenant_id, entry_id, session_id, task_id, agent_id, input_tokens,"
    " output_tokens, cache_read_tokens, cache_write_tokens, cost_micros, model,"
    " idempotency_key, reservation_id)"
    " SELECT l.tn, l.id, l.s, l.t, l.a, l.i, l.o, l.cr, l.cw, l.cost, l.model,"
    " NULLIF(l.k, ''), l.res"
    " FROM unnest($20::uuid[], $21::uuid[], $22::text[], $23::text[], $24::text[],"
    " $25::int8[], $26::int8[], $27::int8[], $28::int8[], $29::int8[], $30::text[],"
    " $31::text[], $32::uuid[]) AS l(tn, id, s, t, a, i, o, cr, cw, cost, model, k, res)"
    " RETURNING 1),"
    " counters AS ("
    " UPDATE scopes s SET used_tokens = c.u, reserved_tokens = c.r, used_cost_micros = c.uc,"
    " reserved_cost_micros = c.rc, spent_input_tokens = c.si, spent_output_tokens = c.so,"
    " spent_cache_read_tokens = c.scr, spent_cache_write_tokens = c.scw,"
    " last_activity_at = now(), event_seq = s.event_seq + c.ne"
    " FROM unnest($33::uuid[], $34::text[], $35::text[], $36::text[], $37::int8[],"
    " $38::int8[], $39::int8[], $40::int8[], $41::int8[], $42::int8[], $43::int8[],"
    " $44::int8[], $45::int8[], $46::int8[])"
    " WITH ORDINALITY AS c(tn, s, t, a, u, r, uc, rc, si, so, scr, scw, ne, al, ord)"
    " WHERE s.tenant_id = c.tn AND s.session_id = c.s AND s.task_id = c.t"
    " AND s.agent_id = c.a"
    " RETURNING s.tenant_id, s.session_id, s.task_id, s.agent_id,"
    " c.ord::text AS ids, s.row_version,"
    " s.event_seq, c.ne, s.level, s.has_budget, s.mode, s.limit_tokens, s.limit_cost_micros,"
    " s.warning_ratio, s.used_tokens, s.reserved_tokens, s.used_cost_micros,"
    " s.reserved_cost_micros, s.closed_at IS NOT NULL AS closed, c.al,"
    " s.approved_extra_tokens),"
    /* The events, numbered per scope after the scope's earlier ones (as cg_events_append
     * numbers them), each with its scope's row as this statement leaves it; allocated_tokens
     * as the allocation trigger leaves it after the statement (c.al, computed by the
     * caller: RETURNING does not show the trigger's change of a parent). */
    " ev AS ("
    " INSERT INTO scope_events (tenant_id, session_id, task_id, agent_id, seq, type,"
    " occurred_at, level, has_budget, mode, limit_tokens, limit_cost_micros, warning_ratio,"
    " used_tokens, reserved_tokens, used_cost_micros, reserved_cost_micros, closed,"
    " threshold_ratio, falling, delay_ms, allocated_tokens, approved_extra_tokens)"
    " SELECT e.tn, e.s, e.t, e.a, u.event_seq - u.ne + e.k, e.type,"
    " to_timestamp($56::int8 / 1e3), u.level, u.has_budget, u.mode, u.limit_tokens,"
    " u.limit_cost_micros, u.warning_ratio, u.used_tokens, u.reserved_tokens,"
    " u.used_cost_micros, u.reserved_cost_micros, u.closed, e.thr, e.fall, e.delay, u.al,"
    " u.approved_extra_tokens"
    " FROM unnest($47::uuid[], $48::text[], $49::text[], $50::text[], $51::int8[],"
    " $52::int2[], $53::float8[], $54::boolean[], $55::int4[])"
    " AS e(tn, s, t, a, k, type, thr, fall, delay)"
    " JOIN counters u ON u.tenant_id = e.tn AND u.session_id = e.s AND u.task_id = e.t"
    " AND u.agent_id = e.a"
    " RETURNING tenant_id::text || ' ' || seq::text || ' ' || session_id || ' ' || task_id"
    " || ' ' || agent_id AS payload)"
    " SELECT 'r', id, c, e FROM new_res"
    " UNION ALL SELECT 's', count(*)::text, 0, 0 FROM settled"
    " UNION ALL SELECT 'l', count(*)::text, 0, 0 FROM led"
    " UNION ALL SELECT 'c', ids, row_version, 0 FROM counters"
    " UNION ALL SELECT 'e', payload, 0, 0 FROM ev";

/* The order of scopes: tenant, then session, task and agent ids. */
static int scope_cmp(const char *ta, const struct cg_scope_ids *a, const char *tb,
                     const struct cg_scope_ids *b)
{
    int c = strcmp(ta, tb);
    if (c == 0)
        c = strcmp(a->session_id, b->session_id);
    if (c == 0)
        c = strcmp(a->task_id, b->task_id);
    if (c == 0)
        c = strcmp(a->agent_id, b->agent_id);
    return c;
}

/* qsort_r orders of event and counter indexes: by scope, then index (so that the events
 * of a scope keep their order). */
static int event_order(const void *x, const void *y, void *arg)
{
    const struct cg_batch_write *w = arg;
    int i = *(const int *)x, j = *(const int *)y;
    int c =
        scope_cmp(w->event_tenants[i], &w->events[i].ids, w->event_tenants[j], &w->events[j].ids);
    return c != 0 ? c : (i > j) - (i < j);
}

static int counter_order(const void *x, const void *y, void *arg)
{
    const struct cg_batch_write *w = arg;
    int i = *(const int *)x, j = *(const int *)y;
    int c = scope_cmp(w->counter_tenants[i], &w->counters[i].ids, w->counter_tenants[j],
                      &w->counters[j].ids);
    return c != 0 ? c : (i > j) - (i < j);
}

/* Numbers the events per scope: k[e] is event e's place among its scope's events (from 1,
 * in order), ne[c] how many events counter row c has. Sorting both by scope and walking
 * them side by side keeps this O(n log n) for a batch of hundreds of rows. false when out
 * of memory. */
static bool number_events(const struct cg_batch_write *w, int64_t *k, int64_t *ne)
{
    int *ev = malloc(((size_t)w->n_events + (size_t)w->n_counters + 1) * sizeof *ev);
    if (ev == NULL)
        return false;
    int *cn = ev + w->n_events;
    for (int e = 0; e < w->n_events; e++)
        ev[e] = e;
    for (int c = 0; c < w->n_counters; c++)
        cn[c] = c;
    qsort_r(ev, (size_t)w->n_events, sizeof *ev, event_order, (void *)w);
    qsort_r(cn, (size_t)w->n_counters, sizeof *cn, counter_order, (void *)w);
    for (int a = 0; a < w->n_events; a++) {
        int e = ev[a];
        bool same = a > 0 && scope_cmp(w->event_tenants[ev[a - 1]], &w->events[ev[a - 1]].ids,
                                       w->event_tenants[e], &w->events[e].ids) == 0;
        k[e] = same ? k[ev[a - 1]] + 1 : 1;
    }
    int a = 0;
    for (int b = 0; b < w->n_counters; b++) {
        int c = cn[b];
        const char *tc = w->counter_tenants[c];
        const struct cg_scope_ids *ic = &w->counters[c].ids;
        while (a < w->n_events &&
               scope_cmp(w->event_tenants[ev[a]], &w->events[ev[a]].ids, tc, ic) < 0)
            a++;
        int n = 0;
        while (a + n < w->n_events &&
               scope_cmp(w->event_tenants[ev[a + n]], &w->events[ev[a + n]].ids, tc, ic) == 0)
            n++;
        ne[c] = n; /* a scope is one counter row: the next counter's scope is another */
    }
    free(ev);
    return true;
}

/* The batch's rows as the statement's array literals (lits[PARAM_ARRAYS], initialized): the
 * new reservations, the settlements, the ledger entries, the counters (with how many events
 * each scope has: ne) and the events (with their place among their scope's: k). */
static void batch_literals(const struct cg_batch_write *w, const int64_t *k, const int64_t *ne,
                           struct lit *lits)
{
    for (int i = 0; i < w->n_new; i++) {
        struct cg_batch_new *r = &w->new_res[i];
        lit_text(&lits[NEW_TN], r->tenant_id);
        lit_text(&lits[NEW_ID], r->reservation_id);
        lit_text(&lits[NEW_S], r->ids.session_id);
        lit_text(&lits[NEW_T], r->ids.task_id);
        lit_text(&lits[NEW_A], r->ids.agent_id);
        lit_i64(&lits[NEW_TOKENS], r->tokens);
        lit_i64(&lits[NEW_COST], r->cost_micros);
        lit_text(&lits[NEW_MODEL], r->model);
        lit_text(&lits[NEW_ESTIMATE], r->estimate_id);
        lit_text(&lits[NEW_KEY], r->idempotency_key);
        lit_i64(&lits[NEW_TTL], r->ttl_ms);
    }
    for (int i = 0; i < w->n_settle; i++) {
        const struct cg_batch_settle *s = &w->settle[i];
        lit_text(&lits[SET_TN], s->tenant_id);
        lit_text(&lits[SET_ID], s->reservation_id);
        lit_i64(&lits[SET_STATE], s->state);
        lit_i64(&lits[SET_IN], s->usage.input_tokens);
        lit_i64(&lits[SET_OUT], s->usage.output_tokens);
        lit_i64(&lits[SET_CR], s->usage.cache_read_tokens);
        lit_i64(&lits[SET_CW], s->usage.cache_write_tokens);
        lit_i64(&lits[SET_COST], s->usage.cost_micros);
    }
    for (int i = 0; i < w->n_ledger; i++) {
        const struct cg_batch_ledger *l = &w->ledger[i];
        lit_text(&lits[LED_TN], l->tenant_id);
        lit_text(&lits[LED_ID], l->entry_id);
        lit_text(&lits[LED_S], l->ids.session_id);
        lit_text(&lits[LED_T], l->ids.task_id);
        lit_text(&lits[LED_A], l->ids.agent_id);
        lit_i64(&lits[LED_IN], l->usage.input_tokens);
        lit_i64(&lits[LED_OUT], l->usage.output_tokens);
        lit_i64(&lits[LED_CR], l->usage.cache_read_tokens);
        lit_i64(&lits[LED_CW], l->usage.cache_write_tokens);
        lit_i64(&lits[LED_COST], l->usage.cost_micros);
        lit_text(&lits[LED_MODEL], l->model);
        lit_text(&lits[LED_KEY], l->idempotency_key);
        lit_text(&lits[LED_RES], l->reservation_id);
    }
    for (int i = 0; i < w->n_counters; i++) {
        const struct cg_budget_row *c = &w->counters[i];
        lit_text(&lits[CNT_TN], w->counter_tenants[i]);
        lit_text(&lits[CNT_S], c->ids.session_id);
        lit_text(&lits[CNT_T], c->ids.task_id);
        lit_text(&lits[CNT_A], c->ids.agent_id);
        lit_i64(&lits[CNT_USED], c->used_tokens);
        lit_i64(&lits[CNT_RESERVED], c->reserved_tokens);
        lit_i64(&lits[CNT_USED_COST], c->used_cost_micros);
        lit_i64(&lits[CNT_RESERVED_COST], c->reserved_cost_micros);
        lit_i64(&lits[CNT_IN], c->spent_input_tokens);
        lit_i64(&lits[CNT_OUT], c->spent_output_tokens);
        lit_i64(&lits[CNT_CR], c->spent_cache_read_tokens);
        lit_i64(&lits[CNT_CW], c->spent_cache_write_tokens);
        lit_i64(&lits[CNT_NE], ne[i]);
        lit_i64(&lits[CNT_ALLOC], c->allocated_tokens);
    }
    for (int e = 0; e < w->n_events; e++) {
        const struct cg_event_in *ev = &w->events[e];
        lit_text(&lits[EV_TN], w->event_tenants[e]);
        lit_text(&lits[EV_S], ev->ids.session_id);
        lit_text(&lits[EV_T], ev->ids.task_id);
        lit_text(&lits[EV_A], ev->ids.agent_id);
        lit_i64(&lits[EV_K], k[e]);
        lit_i64(&lits[EV_TYPE], ev->type);
        lit_double(&lits[EV_THR], ev->fields.threshold_ratio);
        lit_sep(&lits[EV_FALL]);
        lit_put(&lits[EV_FALL], ev->fields.falling ? "t" : "f", 1);
        lit_i64(&lits[EV_DELAY], ev->fields.delay_ms);
    }
}

cg_status cg_pg_batch_write(struct cg_pg *pg, const struct cg_batch_write *w, struct cg_err *err)
{
    if (!pg->in_tx)
        return cg__pg_not_in_tx(pg, "batch_write", err);
    int64_t *k = malloc(((size_t)w->n_events + (size_t)w->n_counters + 1) * sizeof *k);
    if (k == NULL || !number_events(w, k, k + w->n_events)) {
        free(k);
        return no_memory(err);
    }
    struct lit lits[PARAM_ARRAYS];
    for (int i = 0; i < PARAM_ARRAYS; i++)
        lit_init(&lits[i]);
    batch_literals(w, k, k + w->n_events, lits);
    free(k);
    char now_text[24];
    snprintf(now_text, sizeof now_text, "%lld", (long long)w->now_ms);
    const char *values[PARAM_ARRAYS + 1];
    values[PARAM_ARRAYS] = now_text;
    if (!lits_build(lits, PARAM_ARRAYS, values, 0))
        return no_memory(err);
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(pg, "batch_write", WRITE_SQL, PARAM_ARRAYS + 1, values, NULL, NULL, 0,
                              &res, err);
    lits_free(lits, PARAM_ARRAYS);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23505") || cg__pg_sqlstate_is(pg, "23503") ||
            cg__pg_sqlstate_is(pg, "23514"))
            rc = cg_err_set(err, CG_ABORTED, "batch: a row changed under the batch; retry");
        return rc;
    }
    /* Every row the batch meant to change must have changed: the locks taken before make
     * anything else a bug, and a bug must not become a half-applied batch. */
    int settled = -1, ledger = -1, counters = 0, inserted = 0, stored_events = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *kind = PQgetvalue(res, r, 0);
        const char *v = PQgetvalue(res, r, 1);
        if (kind[0] == 'r') {
            for (int i = 0; i < w->n_new; i++) {
                if (strcmp(w->new_res[i].reservation_id, v) == 0) {
                    w->new_res[i].created_at_ms = cg__pg_parse_i64(PQgetvalue(res, r, 2));
                    w->new_res[i].expires_at_ms = cg__pg_parse_i64(PQgetvalue(res, r, 3));
                    inserted++;
                }
            }
        } else if (kind[0] == 's') {
            settled = (int)cg__pg_parse_i64(v);
        } else if (kind[0] == 'l') {
            ledger = (int)cg__pg_parse_i64(v);
        } else if (kind[0] == 'e') {
            stored_events++;
            if (!cg__pg_notice_add(pg, v))
                cg_log(CG_LOG_WARN, MOD, cg__pg_rid(pg),
                       "too many events in one transaction to announce; watchers learn of them "
                       "later");
        } else if (kind[0] == 'c') {
            /* The row's new row_version (migration 0008), for the caches; v is the
             * row's place in the counters array, from 1 (WITH ORDINALITY). */
            int64_t at = cg__pg_parse_i64(v);
            if (at >= 1 && at <= w->n_counters) {
                counters++;
                w->counters[at - 1].row_version = cg__pg_parse_i64(PQgetvalue(res, r, 2));
            }
        }
    }
    PQclear(res);
    if (inserted != w->n_new || settled != w->n_settle || ledger != w->n_ledger ||
        counters != w->n_counters || stored_events != w->n_events) {
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg),
               "batch_write: changed %d/%d/%d/%d rows, meant %d/%d/%d/%d", inserted, settled,
               ledger, counters, w->n_new, w->n_settle, w->n_ledger, w->n_counters);
        return cg_err_set(err, CG_ABORTED, "batch: a row changed under the batch; retry");
    }
    return CG_OK;
}

/* budget_batch.c - group commit for Reserve and Commit (service/budget_batch.h).
 *
 * A durable write costs a WAL flush, and every write of a tenant locks the tenant's scope
 * row (store.h lock order), so one transaction per request caps a tenant at one request
 * per flush, and costs each request a transaction's fixed statements and flush. Here
 * concurrent Reserves and Commits share transactions: each tenant has a queue; a pool
 * thread that finds its tenant's queue idle (and, when mixed, fewer than CG_BATCH_LEADERS
 * leaders running) becomes a leader and runs batches of whatever has queued up until no
 * queue is left that no other leader runs; the others queue their call and return to the
 * pool at once (the call is deferred: answered through its completion callback). A tenant
 * is in one running batch at a time (its group is busy), so its requests are decided in
 * arrival order. A batch takes one tenant's queue, or (write_batch_scope = mixed, the
 * default) the queues of several tenants, up to CG_BATCH_MAX requests: a workload of many
 * small tenants then shares flushes as a hot tenant does. A batch is
 *
 *   BEGIN; lock the Commits' reservations (by tenant, then id); lock every scope row of
 *   every path (by tenant, tenant row first, then level and ids); check the Reserves'
 *   idempotency keys; decide each tenant's requests (its part) in arrival order on the
 *   locked counters (core/budget, as a request of its own would); write the new
 *   reservations, settlements, ledger entries, counters and events; COMMIT; answer.
 *
 * Each step is one statement for all the batch's tenants (every array element names its
 * tenant: store.h "batches"), so a batch of many tenants costs what a batch of one does.
 * Lock order: every reservation, then every scope row, each by tenant (store.h); a
 * transaction of one tenant locks in the same order, so no cycle can form, and a tenant
 * is in one batch at a time on a server. Trade-off: a mixed batch is a transaction across
 * tenants; with PostgreSQL distributed by tenant (Citus, a goal of the design) it becomes
 * a multi-shard transaction (two-phase commit among the nodes it touches), allowed but
 * dearer than a one-shard one: write_batch_scope = tenant keeps every batch on one
 * tenant. A failing write (a row changed under it, a constraint of one tenant's rows)
 * rolls back the whole batch and every request goes to the one-request path, which
 * decides it alone: no request is refused for another tenant's trouble.
 *
 * A success reply still means committed, and decisions are those of the requests run one
 * after the other in a transaction each. A Reserve or Commit is first tried on its
 * completion-queue thread (rpc.h, try_inline): it joins its tenant's queue there when a
 * running leader will take it (its tenant is busy, or no more leaders may start), with no
 * hand-off to the pool; only a call that would lead goes
 * to the pool, whose thread then leads. What a batch does not decide itself goes to
 * the one-request path afterwards, on the leader's thread: idempotent replays, approvals,
 * expired or settled reservations, missing scopes, a due reset, a batch whose write fails
 * for any reason but an unreachable store. Events of a batch show each scope's row as it
 * is after the whole batch (in order per scope, as always).
 */
#include "service/budget_batch.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/budget_events.h"
#include "core/keyrole.h"
#include "service/budget.h"
#include "service/budget_events.h"
#include "service/budget_path.h"
#include "service/cache.h"
#include "service/calibration.h"
#include "service/meters.h"
#include "service/op_err.h"

/* One queued request. Lives in its call's arena. */
struct item {
    cg_batch_kind kind;
    struct cg_op op; /* the caller's, valid until done runs */
    cg_budget_batch_done_cb done;
    void *done_ctx;
    struct cg_budget_reserve_request reserve; /* CG_BATCH_RESERVE */
    struct cg_budget_commit_request commit;   /* CG_BATCH_COMMIT */
    struct cg_scope_ids ids;                  /* Reserve: its scope; Commit: its reservation's */
    char reservation_id[CG_UUID_LEN + 1];     /* Commit: canonical; Reserve: the new one's */
    struct item *next;
    /* the batch's work (its state is the batch's: once answered, an item is gone) */
    int n;                                   /* rows of its path */
    struct cg_budget_row after[CG_PATH_MAX]; /* its path right after it */
    struct cg_budget_result decided;         /* Reserve: the decision before the hold */
    struct cg_reservation res;               /* the reservation it made or settled */
    struct cg_usage usage;                   /* Commit: recorded */
    bool price_known;
    int64_t spent;
    char entry_id[CG_UUID_LEN + 1];
    char ledger_key[CG_IDEMPOTENCY_MAX + 1];
    int new_index, settle_index;
    struct cg_calibration_sample cal; /* Commit: its calibration, after COMMIT */
};

/* The answer of an item, built on the answering thread's stack for its callback. */
union answer {
    struct cg_budget_reserve_result reserve;
    struct cg_budget_commit_result commit;
};

/* A tenant's queue. busy: some of its items are in a running batch (a tenant is in one
 * running batch at a time, so its requests are decided in arrival order). */
struct group {
    char tenant_id[CG_UUID_LEN + 1];
    struct item *head, *tail;
    bool busy;
    struct group *next;
};

/* The items of one tenant in a batch: items[lo..hi), its locked rows rowbuf[row..row +
 * nrows) and its changed rows counters[cnt..cnt + ncnt) (after the write). */
struct part {
    struct group *group;          /* busy while the batch runs */
    char tenant[CG_UUID_LEN + 1]; /* canonical; "" when the id is not a UUID */
    int lo, hi;
    int row, nrows;
    int cnt, ncnt;
};

/* Where an item of the running batch stands. Answering an item is the last thing done
 * with it: its call (and the item, in the call's arena) may be freed at once. */
typedef enum {
    ITEM_PENDING,  /* not decided yet */
    ITEM_DONE,     /* answered */
    ITEM_FALLBACK, /* to the one-request path after the batch */
    ITEM_BATCHED,  /* decided by the batch: answered after COMMIT */
    ITEM_DENIED,   /* refused by the batch: answered after COMMIT (or retried alone) */
} item_state;

struct batch;

struct cg_budget_batcher {
    pthread_mutex_t lock;
    struct group *groups; /* tenants with queued items or a running batch, oldest first */
    struct batch **spare; /* batch buffers not in use, for the next leader */
    int nspare, capspare;
    int leaders;     /* threads leading batches now */
    int max_leaders; /* mixed: CG_BATCH_LEADERS; per tenant: no bound */
    bool mixed;      /* a batch may take several tenants */
};

struct cg_budget_batcher *cg_budget_batcher_new(bool mixed)
{
    struct cg_budget_batcher *b = calloc(1, sizeof *b);
    if (b != NULL) {
        pthread_mutex_init(&b->lock, NULL);
        b->mixed = mixed;
        b->max_leaders = mixed ? CG_BATCH_LEADERS : INT_MAX;
    }
    return b;
}

void cg_budget_batcher_free(struct cg_budget_batcher *b)
{
    if (b == NULL)
        return;
    /* Leaders run on pool threads, which are joined before this: no group is left. */
    for (int i = 0; i < b->nspare; i++)
        free(b->spare[i]);
    free(b->spare);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

/* ------------------------------------------------------------------ deciding --- */

/* The locked rows, their working counters and whether the batch changed them. */
struct rows {
    struct cg_budget_row *row;
    bool *dirty;
    int n;
};

static int find_row(const struct rows *rows, const struct cg_scope_ids *ids)
{
    for (int i = 0; i < rows->n; i++)
        if (cg_scope_equal(&rows->row[i].ids, ids))
            return i;
    return -1;
}

/* Indexes of the rows of the path of ids into at[]; false when one is missing. */
static bool path_of(const struct rows *rows, const struct cg_scope_ids *ids, int at[CG_PATH_MAX],
                    int *n)
{
    *n = cg_scope_level(ids);
    for (int level = 1; level <= *n; level++) {
        struct cg_scope_ids p;
        cg_scope_prefix(ids, level, &p);
        if ((at[level - 1] = find_row(rows, &p)) < 0)
            return false;
    }
    return true;
}

static int64_t add_floor0(int64_t v, int64_t delta)
{
    int64_t r = v + delta;
    return r < 0 ? 0 : r;
}

static bool fits(int64_t v, int64_t delta)
{
    return delta <= 0 || v <= INT64_MAX - delta;
}

/* Applies a request to the path's working rows as cg_store_path_add / cg_store_path_spend
 * would (counters >= 0; spent counts on each level but for cache reads on a level that
 * leaves them out), keeping a copy of the path before and after. False (nothing changed)
 * when a counter would leave its range: that request goes to the one-request path. */
static bool apply(struct rows *rows, const int *at, int n, const struct cg_usage *spent,
                  int64_t reserved, int64_t reserved_cost, struct cg_budget_row *before,
                  struct cg_budget_row *after)
{
    static const struct cg_usage none;
    const struct cg_usage *k = spent ? spent : &none;
    int64_t used =
        k->input_tokens + k->output_tokens + k->cache_read_tokens + k->cache_write_tokens;
    for (int i = 0; i < n; i++) {
        const struct cg_budget_row *r = &rows->row[at[i]];
        if (!fits(r->used_tokens, used) || !fits(r->reserved_tokens, reserved) ||
            !fits(r->used_cost_micros, k->cost_micros) ||
            !fits(r->reserved_cost_micros, reserved_cost) ||
            !fits(r->spent_input_tokens, k->input_tokens) ||
            !fits(r->spent_output_tokens, k->output_tokens) ||
            !fits(r->spent_cache_read_tokens, k->cache_read_tokens) ||
            !fits(r->spent_cache_write_tokens, k->cache_write_tokens))
            return false;
    }
    for (int i = 0; i < n; i++) {
        struct cg_budget_row *r = &rows->row[at[i]];
        before[i] = *r;
        r->used_tokens = add_floor0(
            r->used_tokens, used - (r->exclude_cache_read_tokens ? k->cache_read_tokens : 0));
        r->reserved_tokens = add_floor0(r->reserved_tokens, reserved);
        r->used_cost_micros = add_floor0(r->used_cost_micros, k->cost_micros);
        r->reserved_cost_micros = add_floor0(r->reserved_cost_micros, reserved_cost);
        r->spent_input_tokens += k->input_tokens;
        r->spent_output_tokens += k->output_tokens;
        r->spent_cache_read_tokens += k->cache_read_tokens;
        r->spent_cache_write_tokens += k->cache_write_tokens;
        rows->dirty[at[i]] = true;
    }
    /* What migration 0013's trigger will do at the write: a change of an allocated level's
     * share moves its parent's allocated_tokens, so later items of the batch are decided
     * on what PostgreSQL will hold. */
    for (int i = n - 1; i >= 1; i--) {
        int64_t delta = cg_store_alloc_share(&rows->row[at[i]]) - cg_store_alloc_share(&before[i]);
        struct cg_budget_row *parent = &rows->row[at[i - 1]];
        int64_t a = parent->allocated_tokens + delta;
        parent->allocated_tokens = a < 0 ? 0 : a;
    }
    for (int i = 0; i < n; i++)
        after[i] = rows->row[at[i]];
    return true;
}

/* Everything one batch holds; reused from batch to batch (nothing is cleared between
 * them: every array is written before it is read). */
struct batch {
    struct item *items[CG_BATCH_MAX]; /* by tenant (parts), each tenant's in arrival order */
    item_state state[CG_BATCH_MAX];
    int n;
    struct part parts[CG_BATCH_MAX];
    int nparts;
    struct cg_store_rows written[CG_BATCH_MAX]; /* the parts' rows for the caches */
    struct cg_scope_ids keys[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    const char *key_tenant[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    struct cg_budget_row rowbuf[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    char row_tenant[CG_BATCH_MAX * CG_PATH_ROWS_MAX][CG_UUID_LEN + 1];
    bool dirty[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    char res_ids[CG_BATCH_MAX][CG_UUID_LEN + 1];
    struct cg_reservation res[CG_BATCH_MAX];
    bool found[CG_BATCH_MAX];
    int res_owner[CG_BATCH_MAX];
    const char *res_tenant[CG_BATCH_MAX];
    const char *keys_text[CG_BATCH_MAX];
    bool key_used[CG_BATCH_MAX];
    int key_owner[CG_BATCH_MAX];
    const char *keys_tenant[CG_BATCH_MAX];
    struct cg_batch_new new_res[CG_BATCH_MAX];
    struct cg_batch_settle settle[CG_BATCH_MAX];
    struct cg_batch_ledger ledger[CG_BATCH_MAX];
    struct cg_budget_row counters[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    const char *counter_tenant[CG_BATCH_MAX * CG_PATH_ROWS_MAX];
    int64_t locked_share[CG_BATCH_MAX * CG_PATH_ROWS_MAX]; /* each locked row's share */
    int64_t share0[CG_BATCH_MAX * CG_PATH_ROWS_MAX];       /* of counters[], as locked */
    struct cg_event_in events[CG_BATCH_MAX * (CG_PATH_MAX * CG_LEVEL_EVENTS_MAX + 1)];
    const char *event_tenant[CG_BATCH_MAX * (CG_PATH_MAX * CG_LEVEL_EVENTS_MAX + 1)];
};

/* Answers item i now (an error), which is the last thing done with it. */
static void finish_error(struct batch *b, int i, cg_status st)
{
    struct item *it = b->items[i];
    b->state[i] = ITEM_DONE;
    it->done(it->done_ctx, st, NULL);
}

/* Locks the Commits' reservations of every part (one statement); decides which Commits
 * the batch can settle. */
static cg_status lock_reservations(const struct cg_svc_env *env, struct batch *b,
                                   struct cg_err *serr)
{
    int nres = 0;
    for (int k = 0; k < b->nparts; k++) {
        const struct part *p = &b->parts[k];
        int first = nres; /* a reservation id twice within one tenant: a replay */
        for (int i = p->lo; i < p->hi; i++) {
            /* State first: an answered item (ITEM_DONE) may be freed already. */
            if (b->state[i] != ITEM_PENDING || b->items[i]->kind != CG_BATCH_COMMIT)
                continue;
            struct item *it = b->items[i];
            if (!cg_store_uuid_canonical(it->commit.reservation_id, it->reservation_id)) {
                b->state[i] = ITEM_FALLBACK; /* the one-request path says NOT_FOUND as ever */
                continue;
            }
            bool twice = false;
            for (int j = first; j < nres; j++)
                twice |= strcmp(b->res_ids[j], it->reservation_id) == 0;
            if (twice) {
                b->state[i] = ITEM_FALLBACK; /* the second Commit of one reservation */
                continue;
            }
            memcpy(b->res_ids[nres], it->reservation_id, CG_UUID_LEN + 1);
            b->res_tenant[nres] = p->tenant;
            b->res_owner[nres++] = i;
        }
    }
    cg_status st = cg_store_batch_lock_reservations(env->store, b->res_tenant, b->res_ids, nres,
                                                    b->res, b->found, serr);
    if (st != CG_OK)
        return st;
    for (int j = 0; j < nres; j++) {
        int i = b->res_owner[j];
        /* Unknown, settled, past expiry or outside a scope-bound key's subtree: the
         * one-request path has the answers (NOT_FOUND for the last, nothing touched). */
        const struct cg_principal *who = b->items[i]->op.principal;
        if (!b->found[j] || b->res[j].state != 1 ||
            !cg_scope_within(who->scope_session_id, who->scope_task_id, b->res[j].ids.session_id,
                             b->res[j].ids.task_id)) {
            b->state[i] = ITEM_FALLBACK;
            continue;
        }
        b->items[i]->res = b->res[j];
        b->items[i]->ids = b->res[j].ids;
    }
    return CG_OK;
}

/* Whether part p's items go to the one-request path: its tenant row is missing (or the
 * id is no tenant) or its period must reset first. */
static bool part_falls_back(const struct batch *b, const struct part *p, int64_t now_ms)
{
    const struct cg_budget_row *r = &b->rowbuf[p->row];
    return p->nrows == 0 || r->level != 1 || (r->next_reset_ms != 0 && r->next_reset_ms <= now_ms);
}

/* Locks every row of every path of every part (one statement) and gives each part its
 * rows; the items of a part that cannot be decided become ITEM_FALLBACK. */
static cg_status lock_scopes(const struct cg_svc_env *env, struct batch *b, int64_t now_ms,
                             struct cg_err *serr)
{
    int nkeys = 0;
    for (int k = 0; k < b->nparts; k++) {
        const struct part *p = &b->parts[k];
        for (int i = p->lo; i < p->hi; i++) {
            if (b->state[i] != ITEM_PENDING)
                continue;
            const struct cg_scope_ids *ids = &b->items[i]->ids;
            for (int level = 1; level <= cg_scope_level(ids); level++) {
                b->key_tenant[nkeys] = p->tenant;
                cg_scope_prefix(ids, level, &b->keys[nkeys++]);
            }
        }
    }
    int nrows = 0;
    cg_status st =
        cg_store_batch_lock_scopes(env->store, b->key_tenant, b->keys, nkeys, b->rowbuf,
                                   b->row_tenant, CG_BATCH_MAX * CG_PATH_ROWS_MAX, &nrows, serr);
    if (st != CG_OK)
        return st;
    memset(b->dirty, 0, (size_t)nrows * sizeof *b->dirty);
    for (int r = 0; r < nrows; r++)
        b->locked_share[r] = cg_store_alloc_share(&b->rowbuf[r]);
    /* The rows come by tenant in the parts' order (both that of the canonical ids). */
    int r = 0;
    for (int k = 0; k < b->nparts; k++) {
        struct part *p = &b->parts[k];
        p->row = r;
        while (r < nrows && strcmp(b->row_tenant[r], p->tenant) == 0)
            r++;
        p->nrows = r - p->row;
        bool fallback = part_falls_back(b, p, now_ms);
        for (int i = p->lo; i < p->hi && fallback; i++)
            if (b->state[i] == ITEM_PENDING)
                b->state[i] = ITEM_FALLBACK;
    }
    if (r != nrows)
        return cg_err_set(serr, CG_INTERNAL, "batch: scope rows of no tenant of the batch");
    return CG_OK;
}

/* Idempotency keys of the Reserves (one statement): a key seen before is a replay
 * (one-request path). */
static cg_status check_keys(const struct cg_svc_env *env, struct batch *b, struct cg_err *serr)
{
    int nkeys = 0;
    for (int k = 0; k < b->nparts; k++) {
        const struct part *p = &b->parts[k];
        int first = nkeys;
        for (int i = p->lo; i < p->hi; i++) {
            if (b->state[i] != ITEM_PENDING || b->items[i]->kind != CG_BATCH_RESERVE)
                continue;
            struct item *it = b->items[i];
            const struct cg_budget_reserve_request *req = &it->reserve;
            if (req->idempotency_key[0] == '\0')
                continue;
            bool twice = false;
            for (int j = first; j < nkeys; j++)
                twice |= strcmp(b->keys_text[j], req->idempotency_key) == 0;
            if (twice) {
                b->state[i] = ITEM_FALLBACK;
                continue;
            }
            b->keys_text[nkeys] = req->idempotency_key;
            b->keys_tenant[nkeys] = p->tenant;
            b->key_owner[nkeys++] = i;
        }
    }
    cg_status st = cg_store_batch_keys_used(env->store, b->keys_tenant, b->keys_text, nkeys,
                                            b->key_used, serr);
    if (st != CG_OK)
        return st;
    for (int j = 0; j < nkeys; j++)
        if (b->key_used[j])
            b->state[b->key_owner[j]] = ITEM_FALLBACK;
    return CG_OK;
}

/* Decides Reserve i on the working rows. */
static void decide_reserve(const struct cg_svc_env *env, struct batch *b, struct rows *rows, int i,
                           int *n_new, int *n_events)
{
    struct item *it = b->items[i];
    const struct cg_budget_reserve_request *req = &it->reserve;
    int at[CG_PATH_MAX], n;
    if (!path_of(rows, &it->ids, at, &n)) {
        b->state[i] = ITEM_FALLBACK; /* a missing scope: the one-request path names it */
        return;
    }
    struct cg_budget_row before[CG_PATH_MAX];
    for (int l = 0; l < n; l++)
        it->after[l] = rows->row[at[l]];
    it->n = n;
    int64_t hold_cost =
        cg_budget_price_estimate(env, req->model, req->tokens, req->estimated_output_tokens);
    cg_budget_path_decide(it->after, n, req->tokens, hold_cost, &it->decided);
    if (it->decided.decision == CG_DECISION_REQUIRE_APPROVAL) {
        b->state[i] = ITEM_FALLBACK;
        return;
    }
    if (it->decided.decision == CG_DECISION_DENY) {
        /* Answered once the batch commits: it saw holds of this batch that a failed write
         * would take back. */
        b->state[i] = ITEM_DENIED;
        return;
    }
    uint32_t ttl = cg_budget_reserve_ttl(req->ttl_ms, &it->after[n - 1]);
    if (cg_store_uuid(it->reservation_id) != CG_OK ||
        !apply(rows, at, n, NULL, req->tokens, hold_cost, before, it->after)) {
        b->state[i] = ITEM_FALLBACK;
        return;
    }
    b->state[i] = ITEM_BATCHED;
    struct cg_batch_new *nr = &b->new_res[*n_new];
    it->new_index = (*n_new)++;
    memset(nr, 0, sizeof *nr);
    memcpy(nr->reservation_id, it->reservation_id, sizeof nr->reservation_id);
    nr->ids = it->ids;
    nr->tokens = req->tokens;
    nr->cost_micros = hold_cost;
    nr->model = req->model;
    nr->estimate_id = req->estimate_id;
    nr->idempotency_key = req->idempotency_key;
    nr->ttl_ms = ttl;
    int cap = (int)(sizeof b->events / sizeof *b->events);
    (void)cg_budget_events_collect(before, it->after, n, b->events, cap, n_events);
}

/* Decides Commit i (of an ACTIVE reservation) on the working rows. */
static void decide_commit(const struct cg_svc_env *env, struct batch *b, struct rows *rows, int i,
                          int *n_settle, int *n_events)
{
    struct item *it = b->items[i];
    const struct cg_budget_commit_request *req = &it->commit;
    int at[CG_PATH_MAX], n;
    if (!path_of(rows, &it->ids, at, &n)) {
        b->state[i] = ITEM_FALLBACK;
        return;
    }
    it->usage = req->usage; /* checked by the caller */
    it->spent = cg_budget_usage_tokens(&it->usage);
    /* An overrun's OVERRUN event names the reservation (the batch's events carry no
     * reference): the one-request path writes it. Overruns are the exception. */
    if (it->spent > it->res.tokens) {
        b->state[i] = ITEM_FALLBACK;
        return;
    }
    it->price_known =
        cg_budget_price_usage(env, req->model[0] ? req->model : it->res.model, &it->usage);
    struct cg_budget_row before[CG_PATH_MAX];
    if (cg_store_uuid(it->entry_id) != CG_OK ||
        !apply(rows, at, n, &it->usage, -it->res.tokens, -it->res.cost_micros, before, it->after)) {
        b->state[i] = ITEM_FALLBACK;
        return;
    }
    it->n = n;
    b->state[i] = ITEM_BATCHED;
    /* "reservation:<id>" (the id is a canonical UUID: it fits) */
    memcpy(it->ledger_key, "reservation:", 12);
    memcpy(it->ledger_key + 12, it->reservation_id, CG_UUID_LEN + 1);
    struct cg_batch_settle *s = &b->settle[*n_settle];
    struct cg_batch_ledger *l = &b->ledger[*n_settle];
    it->settle_index = (*n_settle)++;
    memcpy(s->reservation_id, it->reservation_id, sizeof s->reservation_id);
    s->state = 2;
    s->usage = it->usage;
    memset(l, 0, sizeof *l);
    memcpy(l->entry_id, it->entry_id, sizeof l->entry_id);
    l->ids = it->ids;
    l->usage = it->usage;
    l->model = req->model[0] ? req->model : it->res.model;
    l->idempotency_key = it->ledger_key;
    l->reservation_id = it->reservation_id;
    int cap = (int)(sizeof b->events / sizeof *b->events);
    (void)cg_budget_events_collect(before, it->after, n, b->events, cap, n_events);
}

/* The answer of Reserve item it, decided (and held) by the batch, once committed. */
static void reserve_answer(const struct item *it, const struct cg_batch_new *nr,
                           struct cg_budget_reserve_result *out)
{
    out->outcome = CG_RESERVE_HELD;
    memcpy(out->path, it->after, (size_t)it->n * sizeof *out->path);
    out->n = it->n;
    out->decision = it->decided;
    struct cg_reservation *res = &out->reservation;
    memset(res, 0, sizeof *res);
    memcpy(res->reservation_id, nr->reservation_id, sizeof nr->reservation_id);
    res->ids = nr->ids;
    res->tokens = nr->tokens;
    res->cost_micros = nr->cost_micros;
    snprintf(res->model, sizeof res->model, "%s", nr->model);
    snprintf(res->estimate_id, sizeof res->estimate_id, "%s", nr->estimate_id);
    res->state = CG_RESERVATION_ACTIVE;
    res->created_at_ms = nr->created_at_ms;
    res->expires_at_ms = nr->expires_at_ms;
}

/* The answer of Commit item it, decided by the batch, once committed at now_ms. */
static void commit_answer(const struct item *it, int64_t now_ms,
                          struct cg_budget_commit_result *out)
{
    out->replayed = false;
    out->reservation_expired = false;
    out->released_tokens = it->res.tokens > it->spent ? it->res.tokens - it->spent : 0;
    out->overrun_tokens = it->spent > it->res.tokens ? it->spent - it->res.tokens : 0;
    out->reservation = it->res;
    out->reservation.state = CG_RESERVATION_COMMITTED;
    out->reservation.committed = it->usage;
    out->reservation.settled_at_ms = now_ms;
    struct cg_budget_recorded *rec = &out->rec;
    rec->usage = it->usage;
    rec->price_known = it->price_known;
    memcpy(rec->ledger_entry_id, it->entry_id, sizeof rec->ledger_entry_id);
    rec->calibration_updated = it->cal.updated;
    rec->calibration_factor = it->cal.factor;
    memcpy(rec->path, it->after, (size_t)it->n * sizeof *rec->path);
    rec->n = it->n;
}

/* The answer of item i, decided by the batch, once committed. */
static void answer(struct batch *b, int i, int64_t now_ms)
{
    struct item *it = b->items[i];
    struct cg_budget_batch_answer a = {.kind = it->kind};
    union answer out;
    cg_status st = CG_OK;
    if (b->state[i] == ITEM_DENIED) {
        st = cg_budget_deny(it->op.err, it->after, it->n, &it->decided, it->reserve.tokens,
                            it->reserve.estimated_output_tokens);
    } else if (it->kind == CG_BATCH_RESERVE) {
        reserve_answer(it, &b->new_res[it->new_index], &out.reserve);
        a.reserve = &out.reserve;
    } else {
        commit_answer(it, now_ms, &out.commit);
        a.commit = &out.commit;
    }
    b->state[i] = ITEM_DONE;
    it->done(it->done_ctx, st, st == CG_OK ? &a : NULL);
}

/* The one-request path for item i, which the batch left. */
static void run_single(const struct cg_svc_env *env, struct batch *b, int i)
{
    struct item *it = b->items[i];
    cg_store_set_deadline(env->store, it->op.deadline_ms);
    struct cg_budget_batch_answer a = {.kind = it->kind};
    union answer out;
    cg_status st;
    if (cg_mono_ms() >= it->op.deadline_ms) {
        st = cg_err_set(it->op.err, CG_DEADLINE_EXCEEDED, "deadline passed in the queue");
    } else if (it->kind == CG_BATCH_RESERVE) {
        st = cg_budget_reserve(env, &it->op, &it->reserve, &out.reserve);
        a.reserve = &out.reserve;
    } else {
        st = cg_budget_commit(env, &it->op, &it->commit, &out.commit);
        a.commit = &out.commit;
    }
    b->state[i] = ITEM_DONE;
    it->done(it->done_ctx, st, st == CG_OK ? &a : NULL);
}

/* Every event shows its scope's row as it is when appended, after the whole batch, so a
 * scope's USAGE_CHANGED events of one batch would all say the same: only the last one of
 * each scope is kept (the others' order is unchanged). Returns the new count. */
static int coalesce_usage_events(struct cg_event_in *events, int n)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        bool later = false;
        if (events[i].type == CG_EVENT_USAGE_CHANGED)
            for (int j = i + 1; j < n && !later; j++)
                later = events[j].type == CG_EVENT_USAGE_CHANGED &&
                        cg_scope_equal(&events[j].ids, &events[i].ids);
        if (!later)
            events[kept++] = events[i];
    }
    return kept;
}

/* After COMMIT: the calibration of the batch's Commits, one statement for all of them,
 * best effort (cg_calibration_apply logs trouble; the answers stand). */
static void calibrate(const struct cg_svc_env *env, const struct part *p, struct batch *b)
{
    struct cg_calibration_sample samples[CG_BATCH_MAX];
    int k = 0;
    for (int i = p->lo; i < p->hi; i++) {
        if (b->state[i] != ITEM_BATCHED || b->items[i]->kind != CG_BATCH_COMMIT)
            continue;
        struct item *it = b->items[i];
        const struct cg_budget_commit_request *req = &it->commit;
        it->cal.estimate_id = req->estimate_id[0] ? req->estimate_id : it->res.estimate_id;
        it->cal.provider_tokens =
            cg_budget_provider_input_tokens(req->provider_input_tokens, &it->usage);
        it->cal.updated = false;
        it->cal.factor = 1.0;
        if (it->cal.estimate_id[0] != '\0')
            samples[k++] = it->cal;
    }
    if (k == 0)
        return;
    cg_calibration_apply(env, p->group->tenant_id, NULL, samples, k);
    for (int i = p->lo, j = 0; i < p->hi && j < k; i++) {
        if (b->state[i] == ITEM_BATCHED && b->items[i]->kind == CG_BATCH_COMMIT &&
            b->items[i]->cal.estimate_id[0] != '\0')
            b->items[i]->cal = samples[j++];
    }
}

/* How far the parts decided so far have filled the batch's write arrays: each part
 * appends its own slice. */
struct tally {
    int n_new, n_settle, n_events, n_counters;
};

/* Decides the items of part p on its locked rows, appending what it writes at *t (which
 * grows by it), each element marked with the part's tenant. */
static void decide_part(const struct cg_svc_env *env, struct batch *b, struct part *p,
                        struct tally *t)
{
    struct rows rows = {.row = b->rowbuf + p->row, .dirty = b->dirty + p->row, .n = p->nrows};
    int new0 = t->n_new, settle0 = t->n_settle, ev0 = t->n_events;
    p->cnt = t->n_counters;
    p->ncnt = 0;
    for (int i = p->lo; i < p->hi; i++) {
        if (b->state[i] != ITEM_PENDING)
            continue;
        if (b->items[i]->kind == CG_BATCH_RESERVE)
            decide_reserve(env, b, &rows, i, &t->n_new, &t->n_events);
        else
            decide_commit(env, b, &rows, i, &t->n_settle, &t->n_events);
    }
    if (t->n_new == new0 && t->n_settle == settle0) {
        t->n_events = ev0; /* refusals only: nothing to write */
        return;
    }
    t->n_events = ev0 + coalesce_usage_events(b->events + ev0, t->n_events - ev0);
    for (int e = ev0; e < t->n_events; e++)
        b->event_tenant[e] = p->tenant;
    for (int j = new0; j < t->n_new; j++)
        b->new_res[j].tenant_id = p->tenant;
    for (int j = settle0; j < t->n_settle; j++) {
        b->settle[j].tenant_id = p->tenant;
        b->ledger[j].tenant_id = p->tenant;
    }
    for (int i = 0; i < rows.n; i++)
        if (rows.dirty[i]) {
            b->share0[t->n_counters] = b->locked_share[p->row + i];
            b->counter_tenant[t->n_counters] = p->tenant;
            b->counters[t->n_counters++] = rows.row[i];
        }
    p->ncnt = t->n_counters - p->cnt;
}

/* qsort order of parts: by canonical tenant id (the batch's lock order). */
static int part_cmp(const void *x, const void *y)
{
    const struct part *a = x, *b = y;
    return strcmp(a->tenant, b->tenant);
}

/* Decides and writes what it can of the batch, every tenant in one transaction: one
 * statement each locks the reservations, locks the scope rows, checks the keys and
 * writes, whatever the number of tenants. CG_OK when committed (or when there was nothing
 * to write); otherwise serr says why and nothing is. */
static cg_status decide_and_write(const struct cg_svc_env *env, struct batch *b, int64_t now_ms,
                                  struct cg_err *serr)
{
    for (int k = 0; k < b->nparts; k++) {
        struct part *p = &b->parts[k];
        if (!cg_store_uuid_canonical(p->group->tenant_id, p->tenant))
            p->tenant[0] = '\0';
        for (int i = p->lo; i < p->hi && p->tenant[0] == '\0'; i++)
            if (b->state[i] == ITEM_PENDING)
                b->state[i] = ITEM_FALLBACK; /* the one-request path names the trouble */
    }
    /* The lock order: tenants in UUID order, which is that of the canonical texts. */
    qsort(b->parts, (size_t)b->nparts, sizeof *b->parts, part_cmp);
    struct tally t = {0};
    cg_status st = cg_store_begin(env->store, serr);
    if (st == CG_OK)
        st = lock_reservations(env, b, serr);
    if (st == CG_OK)
        st = lock_scopes(env, b, now_ms, serr);
    if (st == CG_OK)
        st = check_keys(env, b, serr);
    for (int k = 0; st == CG_OK && k < b->nparts; k++)
        decide_part(env, b, &b->parts[k], &t);
    if (st == CG_OK && t.n_new + t.n_settle == 0) {
        cg_store_rollback(env->store);
        return CG_OK;
    }
    struct cg_batch_write w = {
        .new_res = b->new_res,
        .n_new = t.n_new,
        .settle = b->settle,
        .n_settle = t.n_settle,
        .ledger = b->ledger,
        .n_ledger = t.n_settle,
        .counters = b->counters,
        .counter_tenants = b->counter_tenant,
        .n_counters = t.n_counters,
        .events = b->events,
        .event_tenants = b->event_tenant,
        .n_events = t.n_events,
        .now_ms = now_ms,
    };
    if (st == CG_OK)
        st = cg_store_batch_write(env->store, &w, serr);
    if (st == CG_OK)
        st = cg_store_commit(env->store, serr);
    if (st != CG_OK) {
        cg_store_rollback(env->store);
        return st;
    }
    /* Committed: the new holds and the settlements are durable (every Commit the batch
     * writes settles an ACTIVE reservation as COMMITTED). */
    cg_svc_meters_reservations(env->meters, env->metrics_slot, CG_SVC_RES_CREATED, t.n_new);
    cg_svc_meters_reservations(env->meters, env->metrics_slot, CG_SVC_RES_COMMITTED, t.n_settle);
    cg_svc_meters_batch(env->meters, env->metrics_slot, t.n_new + t.n_settle);
    for (int k = 0; k < t.n_settle; k++)
        cg_svc_meters_usage(env->meters, env->metrics_slot, &b->ledger[k].usage);
    int nwritten = 0;
    for (int k = 0; k < b->nparts; k++) {
        const struct part *p = &b->parts[k];
        if (p->ncnt == 0)
            continue;
        /* The trigger bumped the row_version of each parent whose allocated_tokens it
         * moved (allocated_tokens itself was mirrored item by item). */
        cg_store_alloc_mirror(b->counters + p->cnt, p->ncnt, b->share0 + p->cnt, false);
        b->written[nwritten++] =
            (struct cg_store_rows){p->group->tenant_id, b->counters + p->cnt, p->ncnt};
        calibrate(env, p, b);
    }
    /* The caches of CheckBudget learn the rows as committed (new row_version): every
     * tenant's path to Redis in one round trip per node. */
    cg_cache_written_many(env, b->written, nwritten);
    return CG_OK;
}

/* Runs one batch on this thread's store and answers every item. */
static void run_batch(const struct cg_svc_env *env, struct batch *b)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    int64_t latest = 0;
    for (int i = 0; i < b->n; i++) {
        b->state[i] = ITEM_PENDING;
        const struct cg_op *op = &b->items[i]->op;
        if (cg_mono_ms() >= op->deadline_ms)
            finish_error(b, i,
                         cg_err_set(op->err, CG_DEADLINE_EXCEEDED, "deadline passed in the queue"));
        else if (op->deadline_ms > latest)
            latest = op->deadline_ms;
    }
    cg_store_set_deadline(env->store, latest);
    int64_t now_ms = cg_wall_ms();
    int64_t t0 = cg_mono_ms();
    cg_status st = decide_and_write(env, b, now_ms, &serr);
    cg_log(CG_LOG_DEBUG, "rpc_batch", NULL, "batch n=%d tenants=%d ms=%lld st=%d", b->n, b->nparts,
           (long long)(cg_mono_ms() - t0), (int)st);
    bool unreachable = serr.code == CG_UNAVAILABLE || serr.code == CG_DEADLINE_EXCEEDED;
    if (st != CG_OK && !unreachable && b->n > 0)
        cg_log(CG_LOG_INFO, "rpc_batch", NULL,
               "batch of %d (%d tenants) failed (%s: %s); its requests run one by one", b->n,
               b->nparts, cg_status_str(serr.code), serr.msg);
    for (int i = 0; i < b->n; i++) {
        if (b->state[i] == ITEM_DONE)
            continue;
        if (st == CG_OK && (b->state[i] == ITEM_BATCHED || b->state[i] == ITEM_DENIED))
            answer(b, i, now_ms);
        else if (st != CG_OK && unreachable)
            finish_error(b, i, cg_op_store_error(&b->items[i]->op, &serr));
        else
            b->state[i] = ITEM_FALLBACK; /* a second try, one request at a time */
    }
    for (int i = 0; i < b->n; i++)
        if (b->state[i] == ITEM_FALLBACK)
            run_single(env, b, i);
    cg_store_set_deadline(env->store, 0);
}

/* ------------------------------------------------------------------ the queue --- */

static struct group *group_find(struct cg_budget_batcher *bt, const char *tenant)
{
    for (struct group *g = bt->groups; g != NULL; g = g->next)
        if (strcmp(g->tenant_id, tenant) == 0)
            return g;
    return NULL;
}

static void group_remove(struct cg_budget_batcher *bt, struct group *g)
{
    for (struct group **p = &bt->groups; *p != NULL; p = &(*p)->next) {
        if (*p == g) {
            *p = g->next;
            return;
        }
    }
}

/* Under the lock: puts g last among the groups (the others get their turn first). */
static void group_append(struct cg_budget_batcher *bt, struct group *g)
{
    struct group **p = &bt->groups;
    while (*p != NULL)
        p = &(*p)->next;
    g->next = NULL;
    *p = g;
}

/* Under the lock: a batch buffer, spare or new (NULL when out of memory). */
static struct batch *batch_take(struct cg_budget_batcher *bt)
{
    if (bt->nspare > 0)
        return bt->spare[--bt->nspare];
    return malloc(sizeof(struct batch));
}

/* Under the lock: keeps b for the next leader (frees it when that cannot be). */
static void batch_give_back(struct cg_budget_batcher *bt, struct batch *b)
{
    if (bt->nspare == bt->capspare) {
        int cap = bt->capspare ? bt->capspare * 2 : 8;
        struct batch **spare = realloc(bt->spare, (size_t)cap * sizeof *spare);
        if (spare == NULL) {
            free(b);
            return;
        }
        bt->spare = spare;
        bt->capspare = cap;
    }
    bt->spare[bt->nspare++] = b;
}

/* Under the lock: fills b with the queued items of groups no batch is running (one group
 * unless the batcher is mixed), up to CG_BATCH_MAX items, each tenant's in arrival order.
 * Those groups become busy. Returns b->n (0: nothing to do). */
static int batch_fill(struct cg_budget_batcher *bt, struct batch *b)
{
    b->n = 0;
    b->nparts = 0;
    int queued = 0;
    for (struct group *g = bt->groups; g != NULL && queued < CG_BATCH_MAX; g = g->next) {
        if (g->busy || g->head == NULL)
            continue;
        if (!bt->mixed && b->nparts == 1)
            break;
        g->busy = true;
        b->parts[b->nparts++] = (struct part){.group = g};
        for (const struct item *it = g->head; it != NULL && queued < CG_BATCH_MAX; it = it->next)
            queued++;
    }
    int kept = 0;
    for (int k = 0; k < b->nparts; k++) {
        struct part p = b->parts[k];
        struct group *g = p.group;
        p.lo = b->n;
        while (g->head != NULL && b->n < CG_BATCH_MAX) {
            b->items[b->n++] = g->head;
            g->head = g->head->next;
        }
        if (g->head == NULL)
            g->tail = NULL;
        p.hi = b->n;
        if (p.hi > p.lo)
            b->parts[kept++] = p;
        else
            g->busy = false; /* the batch filled up before its turn */
    }
    b->nparts = kept;
    return b->n;
}

/* Under the lock, after batch b: its groups are free again; the empty ones go, the others
 * queue behind the groups that waited. */
static void batch_release(struct cg_budget_batcher *bt, struct batch *b)
{
    for (int k = 0; k < b->nparts; k++) {
        struct group *g = b->parts[k].group;
        g->busy = false;
        group_remove(bt, g);
        if (g->head == NULL)
            free(g);
        else
            group_append(bt, g);
    }
    b->nparts = 0;
}

/* Leads batches until no group has queued items that no other leader runs. */
static void lead(const struct cg_svc_env *env, struct batch *b)
{
    struct cg_budget_batcher *bt = env->batcher;
    pthread_mutex_lock(&bt->lock);
    while (batch_fill(bt, b) > 0) {
        pthread_mutex_unlock(&bt->lock);
        run_batch(env, b);
        pthread_mutex_lock(&bt->lock);
        batch_release(bt, b);
    }
    bt->leaders--;
    batch_give_back(bt, b);
    pthread_mutex_unlock(&bt->lock);
}

cg_status cg_budget_batch_submit(const struct cg_svc_env *env, const struct cg_op *op,
                                 const struct cg_budget_reserve_request *reserve,
                                 const struct cg_budget_commit_request *commit,
                                 cg_budget_batch_done_cb done, void *done_ctx, cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    struct item *it = cg_arena_alloc(op->arena, sizeof *it);
    if (it == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    memset(it, 0, sizeof *it);
    it->kind = reserve != NULL ? CG_BATCH_RESERVE : CG_BATCH_COMMIT;
    it->op = *op;
    it->done = done;
    it->done_ctx = done_ctx;
    if (reserve != NULL) {
        it->reserve = *reserve;
        it->ids = reserve->ids;
    } else {
        it->commit = *commit;
    }

    struct cg_budget_batcher *bt = env->batcher;
    struct batch *b = NULL;
    pthread_mutex_lock(&bt->lock);
    const char *tenant = op->principal->tenant_id;
    struct group *g = group_find(bt, tenant);
    /* A busy tenant's running leader takes the item after its batch; so does any running
     * leader when no other may start. Otherwise this thread leads. */
    bool leads = (g == NULL || !g->busy) && bt->leaders < bt->max_leaders;
    if (leads && env->store == NULL) {
        /* A completion-queue thread only joins: leading takes a store, so the transport
         * runs the call again on the pool. */
        pthread_mutex_unlock(&bt->lock);
        *fate = CG_OP_NEEDS_STORE;
        return CG_OK;
    }
    bool made = g == NULL;
    if (made && (g = calloc(1, sizeof *g)) != NULL) {
        memcpy(g->tenant_id, tenant, sizeof g->tenant_id);
        group_append(bt, g);
    }
    if (g != NULL && leads && (b = batch_take(bt)) == NULL && made) {
        group_remove(bt, g);
        free(g);
        g = NULL;
    }
    if (g == NULL || (leads && b == NULL)) {
        pthread_mutex_unlock(&bt->lock);
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (leads)
        bt->leaders++;
    if (g->tail != NULL)
        g->tail->next = it;
    else
        g->head = it;
    g->tail = it;
    pthread_mutex_unlock(&bt->lock);
    /* From here on the call may be answered (and gone) at any moment: the fate is written
     * to the caller's frame, never to anything of op. */
    *fate = CG_OP_HANDED_ON;
    if (b != NULL)
        lead(env, b);
    return CG_OK;
}

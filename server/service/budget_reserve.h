/* budget_reserve.h - the budget writes of one request in domain types
 * (service/budget_reserve.c): Reserve, Commit, Release and RecordUsage, each in a PostgreSQL
 * transaction of its own that locks the rows of the scope's path, tenant first (store.h),
 * with the events of the write in the same transaction and the caches updated after COMMIT.
 * The batcher falls back on Reserve and Commit for what it does not decide itself.
 *
 * Requests are checked by the caller (ids reachable by op's principal, counts in range).
 * On the calling thread's store (env->store, never NULL here). On error op->err says what
 * the client sees (naming the field or the level), and nothing is written.
 */
#ifndef CG_SERVICE_BUDGET_RESERVE_H
#define CG_SERVICE_BUDGET_RESERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/budget.h"
#include "service/budget_approvals.h"
#include "service/service.h"
#include "store/store.h"

#define CG_RESERVATION_TTL_DEFAULT_MS 300000u

/* The states of a reservation (store.h, reservations.state). */
enum {
    CG_RESERVATION_ACTIVE = 1,
    CG_RESERVATION_COMMITTED = 2,
    CG_RESERVATION_RELEASED = 3,
    CG_RESERVATION_EXPIRED = 4,
};

/* ---- helpers the batcher shares ---- */

/* Prices u from the price table (env->prices) when it has no cost; whether the cost is
 * known (given, or priced). */
bool cg_budget_price_usage(const struct cg_svc_env *env, const char *model, struct cg_usage *u);

/* Input + output + cache tokens of u. */
int64_t cg_budget_usage_tokens(const struct cg_usage *u);

/* The provider's count of a prompt for calibration: provider_input_tokens when > 0, else
 * input + cache_read + cache_write of u (CommitRequest's rule). */
int64_t cg_budget_provider_input_tokens(int64_t provider_input_tokens, const struct cg_usage *u);

/* A Reserve's TTL: ttl_ms when set, else the scope's, else the default. */
uint32_t cg_budget_reserve_ttl(uint32_t ttl_ms, const struct cg_budget_row *scope_row);

/* ---- Reserve ---- */

struct cg_budget_reserve_request {
    struct cg_scope_ids ids;
    int64_t tokens; /* 1..CG_TOKENS_PER_CALL_MAX */
    int64_t estimated_output_tokens;
    const char *model;           /* "" none */
    const char *estimate_id;     /* "" none */
    const char *idempotency_key; /* "" none */
    uint32_t ttl_ms;             /* 0: cg_budget_reserve_ttl's rule */
};

typedef enum {
    CG_RESERVE_HELD = 1, /* the tokens are held */
    CG_RESERVE_REPLAYED, /* a retry of the Reserve that held them (idempotency_key) */
    CG_RESERVE_APPROVAL, /* REQUIRE_APPROVAL: nothing held; the gate's approval answers */
} cg_reserve_outcome;

struct cg_budget_reserve_result {
    cg_reserve_outcome outcome;
    /* HELD: the path right after the hold and the decision taken before it; REPLAYED: the
     * path now and its decision for 0 tokens; APPROVAL: what the gate read and decided. */
    struct cg_budget_row path[CG_PATH_MAX];
    int n;
    struct cg_budget_result decision;
    struct cg_reservation reservation;   /* HELD, REPLAYED */
    struct cg_budget_approval_gate gate; /* APPROVAL */
};

/* Reserve: holds req->tokens (priced) on every level of the path when the decision allows
 * it. DENY: RESOURCE_EXHAUSTED naming the level; an approval that was denied:
 * RESOURCE_EXHAUSTED (APPROVAL_DENIED); an idempotency key used before for another hold:
 * ALREADY_EXISTS (IDEMPOTENCY_KEY_REUSED); a budget that changed under the approval step:
 * ABORTED. */
cg_status cg_budget_reserve(const struct cg_svc_env *env, const struct cg_op *op,
                            const struct cg_budget_reserve_request *req,
                            struct cg_budget_reserve_result *out) CG_MUST_CHECK;

/* ---- Commit ---- */

/* What a Commit or a RecordUsage recorded. */
struct cg_budget_recorded {
    struct cg_usage usage; /* as recorded (priced when the price table knew it) */
    bool price_known;
    char ledger_entry_id[CG_UUID_LEN + 1];
    bool calibration_updated; /* false on a replay */
    double calibration_factor;
    struct cg_budget_row path[CG_PATH_MAX]; /* the path after the write */
    int n;
};

struct cg_budget_commit_request {
    const char *reservation_id;
    struct cg_usage usage;   /* checked (cg_rpc_usage_in's rules) */
    const char *model;       /* "" : the reservation's */
    const char *estimate_id; /* "" : the reservation's */
    int64_t provider_input_tokens;
    bool record_if_expired;
};

struct cg_budget_commit_result {
    bool replayed;                     /* committed before with the same usage: nothing written */
    bool reservation_expired;          /* recorded anyway on a reservation past its expiry */
    struct cg_reservation reservation; /* as it is after the Commit */
    int64_t released_tokens;           /* of the hold, not spent */
    int64_t overrun_tokens;            /* spent beyond the hold */
    struct cg_budget_recorded rec;
};

/* Commit: records the usage of a reservation, gives back what it held and appends its
 * ledger entry; after COMMIT, the calibration (best effort). A reservation past its ACTIVE
 * state: FAILED_PRECONDITION (RESERVATION_SETTLED / _EXPIRED) unless it is a retry or
 * record_if_expired; one outside the key's subtree: NOT_FOUND. */
cg_status cg_budget_commit(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_budget_commit_request *req,
                           struct cg_budget_commit_result *out) CG_MUST_CHECK;

/* ---- Release ---- */

struct cg_budget_release_result {
    bool replayed; /* released or expired before */
    int64_t released_tokens;
    struct cg_reservation reservation; /* as it is after the Release */
};

/* Release: gives back what an ACTIVE reservation (or one past its expiry) holds. A
 * committed one: FAILED_PRECONDITION (RESERVATION_SETTLED); one outside the key's subtree:
 * NOT_FOUND. */
cg_status cg_budget_release(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *reservation_id,
                            struct cg_budget_release_result *out) CG_MUST_CHECK;

/* ---- RecordUsage ---- */

struct cg_budget_record_request {
    struct cg_scope_ids ids;
    struct cg_usage usage;       /* checked */
    const char *model;           /* "" none */
    const char *idempotency_key; /* required */
    const char *estimate_id;     /* "" none */
    int64_t provider_input_tokens;
    int64_t occurred_at_ms; /* unix ms, 0: now */
    int64_t now_ms;         /* the wall clock the request was checked at */
};

struct cg_budget_record_result {
    bool replayed;
    struct cg_budget_recorded rec;
};

/* RecordUsage: spends usage without a reservation and appends its ledger entry; after
 * COMMIT, the calibration (best effort). occurred_at before the tenant's current period:
 * INVALID_ARGUMENT; the key used before for other usage: ALREADY_EXISTS. */
cg_status cg_budget_record_usage(const struct cg_svc_env *env, const struct cg_op *op,
                                 const struct cg_budget_record_request *req,
                                 struct cg_budget_record_result *out) CG_MUST_CHECK;

#endif

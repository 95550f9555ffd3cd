/* budget.h - budget decisions: may a scope spend N tokens, and how long must it wait?
 *
 * Pure: the caller passes the usage of every level of the scope's path (tenant first, the
 * scope itself last) as read inside its transaction; this module returns the verdict of
 * each level and of the whole path. No I/O, no clock, no globals; thread-safe.
 *
 * Rules (DESIGN.md §3):
 * - projected = used + reserved + allocated + requested; ratio = projected / limit.
 * - Allocation (allocate_from_parent): a level marked `allocated` holds a share of its
 *   parent, share = max(0, share limit - used - reserved) while it is open with a budget
 *   (cg_budget_share), which the parent counts in its allocated_tokens. A request of N
 *   tokens is judged at the scope itself with N, and at each level above with what the
 *   share of its child on the path does not already cover: max(0, N - share(child)) when
 *   that child is allocated, else N (only the direct child's share is in a level's
 *   allocated_tokens). A child over its limit has share 0: everything counts above.
 * - A level whose projected tokens (or cost) would pass its limit answers by its mode:
 *   HARD -> DENY, SOFT -> ALLOW_WITH_WARNING, APPROVAL -> REQUIRE_APPROVAL. Below the
 *   limit, a ratio at or over warning_ratio -> ALLOW_WITH_WARNING. A closed scope -> DENY.
 * - The path's decision is the strictest level's (DENY > REQUIRE_APPROVAL > WARNING > ALLOW).
 * - Backpressure: the tightest level (highest projected ratio among levels with a budget)
 *   picks the delay of the highest tier whose threshold its ratio reaches. No delay with
 *   DENY or REQUIRE_APPROVAL: there is nothing to slow down.
 *
 * Edge rules:
 * - Exactly at the limit is within it: only projected > limit (or projected cost > a cost
 *   limit > 0) is over. Ratios are the token ratios; the cost limit only decides.
 * - A level's reasons are facts: TOKEN_LIMIT / COST_LIMIT when over; WARNING only when not
 *   over (over the limit the limit bit says more); BACKPRESSURE whenever its tier delay is
 *   > 0, whatever its verdict. A closed level answers DENY and adds CLOSED to the reasons
 *   it would otherwise give (with or without a budget).
 * - Each level's delay_ms is its tier delay whatever the verdicts; only the result's
 *   delay_ms is 0 when the path answers DENY or REQUIRE_APPROVAL.
 * - Sums saturate at INT64_MAX, so a huge request can never wrap into an ALLOW. Negative
 *   requests and counters (a caller's bug) count as 0; an unknown mode answers like HARD;
 *   ntiers <= 0 means the default tiers, > CG_TIERS_MAX the first CG_TIERS_MAX.
 */
#ifndef CG_CORE_BUDGET_H
#define CG_CORE_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "core/scope.h"

/* Numbered as in budget.proto, so the rpc layer can cast. */
typedef enum {
    CG_MODE_HARD = 1,
    CG_MODE_SOFT = 2,
    CG_MODE_APPROVAL = 3,
} cg_budget_mode;

typedef enum {
    CG_DECISION_ALLOW = 1,
    CG_DECISION_WARNING = 2,
    CG_DECISION_REQUIRE_APPROVAL = 3,
    CG_DECISION_DENY = 4,
} cg_decision;

/* cg_level (ScopeLevel of common.proto) and cg_level_name: core/scope.h. */

/* Reasons a level gives for its verdict (bits). */
enum {
    CG_REASON_WARNING = 1u << 0,      /* ratio at or over warning_ratio */
    CG_REASON_BACKPRESSURE = 1u << 1, /* a tier's threshold reached */
    CG_REASON_TOKEN_LIMIT = 1u << 2,  /* projected tokens over the limit */
    CG_REASON_COST_LIMIT = 1u << 3,   /* projected cost over the limit */
    CG_REASON_CLOSED = 1u << 4,       /* the scope was closed */
};

#define CG_TIERS_MAX 8
#define CG_PATH_MAX 4
#define CG_LIMIT_MAX 1000000000000000LL /* 10^15: tokens or micros; beyond is absurd */

struct cg_tier {
    double ratio;      /* 0 < ratio <= 10 */
    uint32_t delay_ms; /* <= 60000 */
};

/* One level of a path: its budget (when it has one) and its counters. */
struct cg_budget_level {
    cg_level level;
    bool has_budget; /* false: the level exists only to count usage */
    bool closed;
    cg_budget_mode mode;
    int64_t limit_tokens;      /* > 0 when has_budget */
    int64_t limit_cost_micros; /* 0: no cost limit */
    double warning_ratio;      /* 0 < w <= 1 */
    bool backpressure_disabled;
    struct cg_tier tiers[CG_TIERS_MAX]; /* ascending ratio */
    int ntiers;
    int64_t used_tokens;
    int64_t reserved_tokens;
    int64_t used_cost_micros;
    int64_t reserved_cost_micros;
    /* allocation */
    bool allocated;             /* this level's budget is carved out of its parent's */
    int64_t share_limit_tokens; /* the limit the share counts from (without approved
                                   extensions); 0: limit_tokens */
    int64_t allocated_tokens;   /* held here for the open allocated children */
};

struct cg_level_verdict {
    cg_decision decision;
    unsigned reasons;         /* CG_REASON_* bits */
    double usage_ratio;       /* (used + reserved + allocated) / limit; 0 without a budget */
    double projected_ratio;   /* (used + reserved + allocated + requested) / limit; 0 without */
    int64_t remaining_tokens; /* limit - used - reserved - allocated (may be negative); 0
                                 without a budget */
    int64_t requested_tokens; /* what this level judged: the request less what the share of
                                 its allocated child on the path covers */
    uint32_t delay_ms;        /* this level's tier delay */
};

struct cg_budget_result {
    cg_decision decision;
    uint32_t delay_ms;
    int tightest; /* index into the levels, -1 when no level has a budget */
    double tightest_ratio;
    int64_t available_tokens; /* max(0, least of the HARD levels' remaining plus the share of
                                 their allocated child on the path); INT64_MAX when none */
    struct cg_level_verdict levels[CG_PATH_MAX];
};

/* The default tiers: 0.80 -> 50 ms, 0.85 -> 300 ms, 0.90 -> 750 ms, 0.95 -> 1500 ms. */
void cg_budget_default_tiers(struct cg_tier tiers[CG_TIERS_MAX], int *ntiers);

/* The share an allocated level holds of its parent: max(0, share limit - used - reserved)
 * (saturating; negative counters count as 0) when it is allocated, has a budget and is
 * open; else 0. NULL: 0. Thread-safe. */
int64_t cg_budget_share(const struct cg_budget_level *level);

/* Decides whether the path may take `tokens` more tokens costing `cost_micros`
 * (0: unpriced). levels[0..n) tenant first; n in 1..CG_PATH_MAX. Fills all of *out
 * (levels[n..) zeroed). A NULL or malformed path (levels NULL, n out of range) answers
 * DENY with tightest -1 and available_tokens 0. Thread-safe; nothing is kept. */
void cg_budget_decide(const struct cg_budget_level *levels, int n, int64_t tokens,
                      int64_t cost_micros, struct cg_budget_result *out);

/* The prompt a request refused by HARD token limits alone would fit at, once compressed:
 * r's available tokens less the expected output tokens; 0 when a cost limit or a closed
 * scope refused it too, when it was not refused, or when nothing would fit. r decided a
 * path of n levels for `tokens`. Thread-safe. */
int64_t cg_budget_compress_to(const struct cg_budget_result *r, int n, int64_t tokens,
                              int64_t output_tokens);

/* Checks one level's settings: limits in 1..CG_LIMIT_MAX (cost may be 0), a known mode,
 * 0 < warning_ratio <= 1, tiers ascending, each ratio in (0, 10], delay <= 60000 ms, at
 * most CG_TIERS_MAX. On error err names the field ("limit_tokens", "backpressure_tiers[2]
 * .threshold_ratio", ...) and the problem; returns CG_INVALID_ARGUMENT, or CG_OK leaving
 * err untouched. err may be NULL. Fields a settings level does not use (level, closed,
 * counters) are not checked. */
cg_status cg_budget_check_settings(const struct cg_budget_level *settings,
                                   struct cg_err *err) CG_MUST_CHECK;

/* A child's limit may not exceed its parent's: checks child against parent (both with a
 * budget; otherwise OK). Cost limits are compared only when both are set (> 0). On
 * CG_INVALID_ARGUMENT err names both levels and limits ("limit_tokens 5000 of the task
 * exceeds the session's limit_tokens 4000"); on CG_OK err is untouched. err may be NULL. */
cg_status cg_budget_check_nesting(const struct cg_budget_level *parent,
                                  const struct cg_budget_level *child,
                                  struct cg_err *err) CG_MUST_CHECK;

#endif

/* budget_events.h - which WatchUsage events a change of one scope's counters or budget makes.
 *
 * Pure: the caller passes the scope's level (budget and counters) before and after a change
 * made in one transaction; this module lists the events that change is worth, in the order
 * a watcher should see them. No I/O, no clock, no globals; thread-safe.
 *
 * Rules (ratio = (used + reserved + allocated) / limit of a level with a budget, allocated
 * being the shares of its allocated children (budget.h); a level without one
 * makes USAGE_CHANGED only):
 * - USAGE_CHANGED when used or reserved tokens or cost, or allocated tokens (an allocated
 *   child's share moved: its SetBudget, its spending, its CloseScope) changed;
 * - THRESHOLD_CROSSED for each backpressure tier threshold t of the budget after the change
 *   (the default tiers when it has none; none with backpressure disabled) that the ratio
 *   crossed: rising when before < t <= after (ascending order), falling when after < t <=
 *   before (descending order), `falling` set;
 * - WARNING when the ratio rose across warning_ratio (before < w <= after);
 * - EXHAUSTED when used + reserved + allocated reached the limit (before < limit <= after);
 * - a change of the limit moves the ratio too (a raised limit makes falling crossings).
 * Each event carries the tier delay now in force at the scope (of the ratio after).
 */
#ifndef CG_CORE_BUDGET_EVENTS_H
#define CG_CORE_BUDGET_EVENTS_H

#include <stdint.h>

#include "core/budget.h"

/* UsageEventType of budget.proto, numbered alike so the rpc layer can cast. */
typedef enum {
    CG_EVENT_SNAPSHOT = 1,
    CG_EVENT_USAGE_CHANGED = 2,
    CG_EVENT_THRESHOLD_CROSSED = 3,
    CG_EVENT_WARNING = 4,
    CG_EVENT_EXHAUSTED = 5,
    CG_EVENT_APPROVAL_REQUESTED = 6,
    CG_EVENT_APPROVAL_DECIDED = 7,
    CG_EVENT_RESET = 8,
    CG_EVENT_BUDGET_CHANGED = 9,
    CG_EVENT_SCOPE_CLOSED = 10,
    CG_EVENT_RESERVATION_EXPIRED = 11,
    CG_EVENT_HEARTBEAT = 12,
    CG_EVENT_OVERRUN = 13,
    CG_EVENT_FORECAST_EXHAUSTION = 14,
} cg_event_type;

#define CG_EVENT_TYPE_MAX 14
/* Events one change can make at most: usage, every tier, warning, exhausted. */
#define CG_LEVEL_EVENTS_MAX (CG_TIERS_MAX + 3)

struct cg_level_event {
    cg_event_type type;
    double threshold_ratio; /* THRESHOLD_CROSSED and WARNING */
    bool falling;           /* THRESHOLD_CROSSED downwards */
    uint32_t delay_ms;      /* the tier delay in force after the change */
};

/* Fills out[0..CG_LEVEL_EVENTS_MAX) with the events the change from before to after makes
 * (see the rules above) and returns how many (0 when nothing changed). before and after
 * must not be NULL. Thread-safe. */
int cg_budget_level_events(const struct cg_budget_level *before,
                           const struct cg_budget_level *after,
                           struct cg_level_event out[CG_LEVEL_EVENTS_MAX]);

/* The tier delay in force at a level at its current ratio (0 without a budget). */
uint32_t cg_budget_level_delay(const struct cg_budget_level *level);

/* Whether t is a type a watcher may ask for in a filter (2..11 and 13: not SNAPSHOT, not
 * HEARTBEAT, not unspecified). */
bool cg_event_type_filterable(int t);

#endif

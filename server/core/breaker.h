/* breaker.h - a circuit breaker: stop calling a dependency that keeps failing, and try it
 * again, once, after a cool-down.
 *
 * Pure: the caller passes the time (any monotonic milliseconds) and owns the storage. No
 * I/O, no globals, no locks: a breaker shared by threads must be guarded by the caller
 * (llm/ wraps it with a mutex). Functions on distinct breakers are thread-safe.
 *
 * States and transitions:
 * - CLOSED: every call is allowed. Each outcome is recorded; the breaker OPENs when the
 *   last failure_threshold outcomes were all failures (consecutive), or, with the ratio rule
 *   on, when the last ratio_window outcomes hold at least ratio_min_calls outcomes of which
 *   a share >= failure_ratio failed.
 * - OPEN: no call is allowed until cooldown_ms have passed since it opened. The first call
 *   after that becomes the probe and the breaker is HALF_OPEN.
 * - HALF_OPEN: only the probe is out; other calls are refused. The probe's success CLOSEs
 *   the breaker (counters cleared); its failure OPENs it again for a new cool-down. A probe
 *   that never reports (its caller died) stops blocking after another cooldown_ms: the next
 *   call becomes a new probe.
 *
 * Every call the breaker allows gets a ticket; the outcome is recorded with it. A ticket
 * from before a state change is stale and its outcome is ignored, so that calls that
 * started while CLOSED and finish after the breaker OPENed (or a late success while a probe
 * is out) cannot move the state. A ticket whose call was never made (no outcome to report)
 * is given back with cg_breaker_release, which frees the probe slot.
 */
#ifndef CG_CORE_BREAKER_H
#define CG_CORE_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#define CG_BREAKER_WINDOW_MAX 64

typedef enum {
    CG_BREAKER_CLOSED = 0,
    CG_BREAKER_OPEN = 1,
    CG_BREAKER_HALF_OPEN = 2,
} cg_breaker_state;

/* Out-of-range fields are clamped where used: failure_threshold to >= 1, ratio_window to
 * 0..CG_BREAKER_WINDOW_MAX (0 turns the ratio rule off), ratio_min_calls to
 * 1..ratio_window, cooldown_ms to >= 0. A failure_ratio <= 0 or NaN turns the ratio rule
 * off; > 1 means it can never trigger. */
struct cg_breaker_policy {
    int failure_threshold;
    int ratio_window;
    int ratio_min_calls;
    double failure_ratio;
    int64_t cooldown_ms;
};

/* Caller-owned state; set up with cg_breaker_init. Fields are read-only to callers. */
struct cg_breaker {
    cg_breaker_state state;
    uint64_t generation;      /* changes with every state change */
    int consecutive_failures; /* while CLOSED */
    uint64_t window;          /* while CLOSED: bit i set = outcome i was a failure */
    int window_count;         /* outcomes in the window */
    int window_next;          /* where the next outcome goes */
    int64_t opened_at_ms;     /* when it last OPENed */
    int64_t probe_started_ms; /* while HALF_OPEN */
    bool probe_out;           /* while HALF_OPEN */
    uint64_t times_opened;    /* how often it OPENed since init */
};

/* What cg_breaker_acquire answered. */
struct cg_breaker_ticket {
    bool allowed;        /* false: do not call; the breaker is OPEN or a probe is out */
    bool probe;          /* this call is the HALF_OPEN probe */
    uint64_t generation; /* the breaker's generation when it was issued */
};

/* Sets b to CLOSED with no history. */
void cg_breaker_init(struct cg_breaker *b);

/* Asks whether a call may go at now_ms. May move OPEN to HALF_OPEN (the caller's call is
 * then the probe). A refused ticket needs no record or release. */
struct cg_breaker_ticket cg_breaker_acquire(struct cg_breaker *b,
                                            const struct cg_breaker_policy *policy, int64_t now_ms);

/* Records the outcome of an allowed call at now_ms. Stale or refused tickets are ignored. */
void cg_breaker_record(struct cg_breaker *b, const struct cg_breaker_policy *policy,
                       struct cg_breaker_ticket ticket, bool success, int64_t now_ms);

/* Gives back an allowed ticket whose call was not made: a probe's slot is freed (the
 * breaker stays HALF_OPEN and the next call becomes the probe); other tickets need nothing. */
void cg_breaker_release(struct cg_breaker *b, struct cg_breaker_ticket ticket);

/* The state as a caller at now_ms would find it: OPEN whose cool-down is over reads as
 * HALF_OPEN (the next call would be a probe). Does not change b. */
cg_breaker_state cg_breaker_state_at(const struct cg_breaker *b,
                                     const struct cg_breaker_policy *policy, int64_t now_ms);

/* Milliseconds from now_ms until a call could be allowed: 0 when one would be now. */
int64_t cg_breaker_wait_ms(const struct cg_breaker *b, const struct cg_breaker_policy *policy,
                           int64_t now_ms);

/* "closed", "open", "half_open" ("unknown" otherwise). */
const char *cg_breaker_state_name(cg_breaker_state state);

#endif

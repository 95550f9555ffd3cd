/* breaker.c - the circuit breaker's state machine. */
#include "core/breaker.h"

#include <string.h>

/* The policy as used: every field within its documented range. */
struct limits {
    int threshold;
    int window;    /* 0: ratio rule off */
    int min_calls; /* 1..window */
    double ratio;
    int64_t cooldown_ms;
};

static struct limits limits_of(const struct cg_breaker_policy *p)
{
    struct limits l;
    l.threshold = p->failure_threshold < 1 ? 1 : p->failure_threshold;
    l.window = p->ratio_window < 0                       ? 0
               : p->ratio_window > CG_BREAKER_WINDOW_MAX ? CG_BREAKER_WINDOW_MAX
                                                         : p->ratio_window;
    /* `!(x > 0)` is also true for NaN. */
    if (!(p->failure_ratio > 0))
        l.window = 0;
    l.min_calls = p->ratio_min_calls < 1          ? 1
                  : p->ratio_min_calls > l.window ? l.window
                                                  : p->ratio_min_calls;
    l.ratio = p->failure_ratio;
    l.cooldown_ms = p->cooldown_ms < 0 ? 0 : p->cooldown_ms;
    return l;
}

/* Whether at least d ms have passed from since to now, without overflow for any values. A
 * clock that went backwards has not advanced. */
static bool elapsed_at_least(int64_t now, int64_t since, int64_t d)
{
    if (now < since)
        return d <= 0;
    return (uint64_t)now - (uint64_t)since >= (uint64_t)d;
}

/* Milliseconds left of d from since to now (0 when over). */
static int64_t remaining(int64_t now, int64_t since, int64_t d)
{
    if (now < since)
        return d;
    uint64_t passed = (uint64_t)now - (uint64_t)since;
    return passed >= (uint64_t)d ? 0 : d - (int64_t)passed;
}

static void clear_history(struct cg_breaker *b)
{
    b->consecutive_failures = 0;
    b->window = 0;
    b->window_count = 0;
    b->window_next = 0;
}

static void set_state(struct cg_breaker *b, cg_breaker_state state, int64_t now_ms)
{
    b->state = state;
    b->generation++;
    b->probe_out = false;
    clear_history(b);
    if (state == CG_BREAKER_OPEN) {
        b->opened_at_ms = now_ms;
        b->times_opened++;
    }
}

void cg_breaker_init(struct cg_breaker *b)
{
    memset(b, 0, sizeof *b);
    b->state = CG_BREAKER_CLOSED;
}

static int popcount64(uint64_t v)
{
    int n = 0;
    for (; v != 0; v &= v - 1)
        n++;
    return n;
}

/* Adds an outcome to the CLOSED history; returns whether the breaker must open. */
static bool push_outcome(struct cg_breaker *b, const struct limits *l, bool failure)
{
    b->consecutive_failures = failure ? b->consecutive_failures + 1 : 0;
    if (b->consecutive_failures >= l->threshold)
        return true;
    if (l->window == 0)
        return false;
    uint64_t bit = (uint64_t)1 << b->window_next;
    b->window = failure ? b->window | bit : b->window & ~bit;
    b->window_next = (b->window_next + 1) % l->window;
    if (b->window_count < l->window)
        b->window_count++;
    if (b->window_count < l->min_calls)
        return false;
    /* Bits past the window's length are never set: the ring only writes below l->window. */
    int failures = popcount64(b->window);
    return (double)failures >= l->ratio * (double)b->window_count;
}

struct cg_breaker_ticket cg_breaker_acquire(struct cg_breaker *b,
                                            const struct cg_breaker_policy *policy, int64_t now_ms)
{
    struct limits l = limits_of(policy);
    struct cg_breaker_ticket t = {.allowed = false, .probe = false, .generation = b->generation};
    if (b->state == CG_BREAKER_CLOSED) {
        t.allowed = true;
        return t;
    }
    if (b->state == CG_BREAKER_OPEN) {
        if (!elapsed_at_least(now_ms, b->opened_at_ms, l.cooldown_ms))
            return t;
        /* The cool-down is over: the caller's call is the first probe. */
        set_state(b, CG_BREAKER_HALF_OPEN, now_ms);
    }
    if (b->probe_out && !elapsed_at_least(now_ms, b->probe_started_ms, l.cooldown_ms))
        return t;
    /* A new probe makes the ticket of any earlier, silent probe stale. */
    b->generation++;
    b->probe_out = true;
    b->probe_started_ms = now_ms;
    t.allowed = true;
    t.probe = true;
    t.generation = b->generation;
    return t;
}

void cg_breaker_record(struct cg_breaker *b, const struct cg_breaker_policy *policy,
                       struct cg_breaker_ticket ticket, bool success, int64_t now_ms)
{
    if (!ticket.allowed || ticket.generation != b->generation)
        return;
    struct limits l = limits_of(policy);
    switch (b->state) {
    case CG_BREAKER_CLOSED:
        if (push_outcome(b, &l, !success))
            set_state(b, CG_BREAKER_OPEN, now_ms);
        break;
    case CG_BREAKER_HALF_OPEN:
        if (!ticket.probe)
            break;
        set_state(b, success ? CG_BREAKER_CLOSED : CG_BREAKER_OPEN, now_ms);
        break;
    case CG_BREAKER_OPEN:
        /* Unreachable with a current ticket: opening changes the generation. */
        break;
    }
}

void cg_breaker_release(struct cg_breaker *b, struct cg_breaker_ticket ticket)
{
    if (!ticket.allowed || !ticket.probe || ticket.generation != b->generation)
        return;
    if (b->state == CG_BREAKER_HALF_OPEN)
        b->probe_out = false;
}

cg_breaker_state cg_breaker_state_at(const struct cg_breaker *b,
                                     const struct cg_breaker_policy *policy, int64_t now_ms)
{
    struct limits l = limits_of(policy);
    if (b->state == CG_BREAKER_OPEN && elapsed_at_least(now_ms, b->opened_at_ms, l.cooldown_ms))
        return CG_BREAKER_HALF_OPEN;
    return b->state;
}

int64_t cg_breaker_wait_ms(const struct cg_breaker *b, const struct cg_breaker_policy *policy,
                           int64_t now_ms)
{
    struct limits l = limits_of(policy);
    switch (b->state) {
    case CG_BREAKER_CLOSED:
        return 0;
    case CG_BREAKER_OPEN:
        return remaining(now_ms, b->opened_at_ms, l.cooldown_ms);
    case CG_BREAKER_HALF_OPEN:
        return b->probe_out ? remaining(now_ms, b->probe_started_ms, l.cooldown_ms) : 0;
    }
    return 0;
}

const char *cg_breaker_state_name(cg_breaker_state state)
{
    switch (state) {
    case CG_BREAKER_CLOSED:
        return "closed";
    case CG_BREAKER_OPEN:
        return "open";
    case CG_BREAKER_HALF_OPEN:
        return "half_open";
    }
    return "unknown";
}

/* llm_breaker.c - the circuit breaker every client of the process shares: core/breaker.h's
 * state machine behind a mutex, with its own clock, logging its changes. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "llm/llm_internal.h"

#define MOD "llm"

/* The ratio rule: half of the last 20 calls, once 10 are known. It catches an endpoint that
 * fails often without failing llm_breaker_failures times in a row. */
#define RATIO_WINDOW 20
#define RATIO_MIN_CALLS 10
#define RATIO 0.5

struct cg_llm_breaker {
    pthread_mutex_t lock;
    struct cg_breaker state;
    struct cg_breaker_policy policy;
    int64_t (*now_ms)(void *arg);
    void *clock_arg;
};

void cg_llm_breaker_opts_from_config(const struct cg_config *cfg, struct cg_llm_breaker_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->policy.failure_threshold = (int)cfg->llm_breaker_failures;
    opts->policy.cooldown_ms = cfg->llm_breaker_cooldown_ms;
    opts->policy.ratio_window = RATIO_WINDOW;
    opts->policy.ratio_min_calls = RATIO_MIN_CALLS;
    opts->policy.failure_ratio = RATIO;
}

static int64_t mono_clock(void *arg)
{
    (void)arg;
    return cg_mono_ms();
}

struct cg_llm_breaker *cg_llm_breaker_new(const struct cg_llm_breaker_opts *opts)
{
    struct cg_llm_breaker *b = calloc(1, sizeof *b);
    if (b == NULL)
        return NULL;
    if (pthread_mutex_init(&b->lock, NULL) != 0) {
        free(b);
        return NULL;
    }
    cg_breaker_init(&b->state);
    b->policy = opts->policy;
    b->now_ms = opts->now_ms ? opts->now_ms : mono_clock;
    b->clock_arg = opts->clock_arg;
    return b;
}

void cg_llm_breaker_free(struct cg_llm_breaker *breaker)
{
    if (breaker == NULL)
        return;
    pthread_mutex_destroy(&breaker->lock);
    free(breaker);
}

cg_breaker_state cg_llm_breaker_state(struct cg_llm_breaker *breaker)
{
    pthread_mutex_lock(&breaker->lock);
    cg_breaker_state s =
        cg_breaker_state_at(&breaker->state, &breaker->policy, breaker->now_ms(breaker->clock_arg));
    pthread_mutex_unlock(&breaker->lock);
    return s;
}

bool cg__llm_breaker_acquire(struct cg_llm_breaker *br, struct cg_breaker_ticket *ticket,
                             char *detail, size_t detail_cap)
{
    ticket->allowed = true;
    ticket->probe = false;
    ticket->generation = 0;
    if (br == NULL)
        return true;
    pthread_mutex_lock(&br->lock);
    int64_t now = br->now_ms(br->clock_arg);
    *ticket = cg_breaker_acquire(&br->state, &br->policy, now);
    int64_t wait = ticket->allowed ? 0 : cg_breaker_wait_ms(&br->state, &br->policy, now);
    pthread_mutex_unlock(&br->lock);
    if (!ticket->allowed)
        snprintf(detail, detail_cap, "circuit breaker open; next probe in %lld ms",
                 (long long)wait);
    return ticket->allowed;
}

void cg__llm_breaker_report(struct cg_llm_breaker *br, struct cg_breaker_ticket ticket,
                            bool counted, bool success, const char *rid)
{
    if (br == NULL)
        return;
    pthread_mutex_lock(&br->lock);
    cg_breaker_state before = br->state.state;
    if (counted)
        cg_breaker_record(&br->state, &br->policy, ticket, success, br->now_ms(br->clock_arg));
    else
        cg_breaker_release(&br->state, ticket);
    cg_breaker_state after = br->state.state;
    pthread_mutex_unlock(&br->lock);
    /* Logged where the state changed, once per change. */
    if (after != before && after == CG_BREAKER_OPEN)
        cg_log(CG_LOG_WARN, MOD, rid, "circuit breaker opened: LLM calls refused for %lld ms",
               (long long)br->policy.cooldown_ms);
    else if (after != before && after == CG_BREAKER_CLOSED)
        cg_log(CG_LOG_INFO, MOD, rid, "circuit breaker closed: the LLM answered a probe");
}

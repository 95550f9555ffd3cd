/* budget.c - budget decisions: the verdict of every level of a path and of the path.
 *
 * Pure arithmetic on the counters the caller read; see budget.h for the rules. All sums
 * saturate at INT64_MAX instead of wrapping, so a hostile token count can only make a
 * request look larger, never smaller.
 */
#include "core/budget.h"

#include <stdarg.h>
#include <stdio.h>

static const struct cg_tier default_tiers[] = {
    {0.80, 50},
    {0.85, 300},
    {0.90, 750},
    {0.95, 1500},
};

#define DEFAULT_NTIERS ((int)(sizeof default_tiers / sizeof default_tiers[0]))

/* core/ may not call into base/, so it fills struct cg_err itself. */
CG_PRINTF(3, 4)
static cg_status fail(struct cg_err *err, cg_status code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    return code;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t sum;
    if (__builtin_add_overflow(a, b, &sum))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return sum;
}

static int64_t sat_sub(int64_t a, int64_t b)
{
    int64_t diff;
    if (__builtin_sub_overflow(a, b, &diff))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return diff;
}

/* Negative counters and requests are a caller's bug; counting them as 0 can only make a
 * request look larger than it is, which keeps a HARD limit safe. */
static int64_t non_negative(int64_t v)
{
    return v < 0 ? 0 : v;
}

static double ratio_of(int64_t amount, int64_t limit)
{
    /* A budget always has limit >= 1 (cg_budget_check_settings); a smaller one from a
     * buggy caller must not divide by zero. */
    return (double)amount / (double)(limit > 0 ? limit : 1);
}

static cg_decision decision_of_mode(cg_budget_mode mode)
{
    switch (mode) {
    case CG_MODE_SOFT:
        return CG_DECISION_WARNING;
    case CG_MODE_APPROVAL:
        return CG_DECISION_REQUIRE_APPROVAL;
    case CG_MODE_HARD:
    default: /* an unknown mode fails closed */
        return CG_DECISION_DENY;
    }
}

/* The delay of the highest tier the ratio reaches. Tiers are ascending when valid; the
 * loop does not rely on it, it takes the reached tier with the highest threshold. */
static uint32_t tier_delay(const struct cg_budget_level *l, double ratio)
{
    if (l->backpressure_disabled)
        return 0;
    const struct cg_tier *tiers = l->tiers;
    int ntiers = l->ntiers;
    if (ntiers > CG_TIERS_MAX)
        ntiers = CG_TIERS_MAX;
    if (ntiers <= 0) {
        tiers = default_tiers;
        ntiers = DEFAULT_NTIERS;
    }
    const struct cg_tier *best = NULL;
    for (int i = 0; i < ntiers; i++)
        if (tiers[i].ratio <= ratio && (best == NULL || tiers[i].ratio > best->ratio))
            best = &tiers[i];
    return best != NULL ? best->delay_ms : 0;
}

int64_t cg_budget_share(const struct cg_budget_level *l)
{
    if (l == NULL || !l->allocated || !l->has_budget || l->closed)
        return 0;
    int64_t limit = l->share_limit_tokens > 0 ? l->share_limit_tokens : l->limit_tokens;
    int64_t held = sat_add(non_negative(l->used_tokens), non_negative(l->reserved_tokens));
    int64_t share = sat_sub(limit, held);
    return share > 0 ? share : 0;
}

static void decide_level(const struct cg_budget_level *l, int64_t tokens, int64_t cost_micros,
                         struct cg_level_verdict *v)
{
    *v = (struct cg_level_verdict){.decision = CG_DECISION_ALLOW, .requested_tokens = tokens};
    if (l->has_budget) {
        int64_t held =
            sat_add(sat_add(non_negative(l->used_tokens), non_negative(l->reserved_tokens)),
                    non_negative(l->allocated_tokens));
        int64_t projected = sat_add(held, tokens);
        v->usage_ratio = ratio_of(held, l->limit_tokens);
        v->projected_ratio = ratio_of(projected, l->limit_tokens);
        v->remaining_tokens = sat_sub(l->limit_tokens, held);

        if (projected > l->limit_tokens)
            v->reasons |= CG_REASON_TOKEN_LIMIT;
        if (l->limit_cost_micros > 0) {
            int64_t cost =
                sat_add(non_negative(l->used_cost_micros), non_negative(l->reserved_cost_micros));
            if (sat_add(cost, cost_micros) > l->limit_cost_micros)
                v->reasons |= CG_REASON_COST_LIMIT;
        }
        if (v->reasons != 0) {
            v->decision = decision_of_mode(l->mode);
        } else if (v->projected_ratio >= l->warning_ratio) {
            v->decision = CG_DECISION_WARNING;
            v->reasons |= CG_REASON_WARNING;
        }

        v->delay_ms = tier_delay(l, v->projected_ratio);
    }
    /* Closing overrides the verdict, not the facts: the other reasons stay. */
    if (l->closed) {
        v->decision = CG_DECISION_DENY;
        v->reasons |= CG_REASON_CLOSED;
    }
    /* A level that refuses or waits for approval slows nothing down. */
    if (v->decision == CG_DECISION_DENY || v->decision == CG_DECISION_REQUIRE_APPROVAL)
        v->delay_ms = 0;
    if (v->delay_ms > 0)
        v->reasons |= CG_REASON_BACKPRESSURE;
}

void cg_budget_default_tiers(struct cg_tier tiers[CG_TIERS_MAX], int *ntiers)
{
    for (int i = 0; i < DEFAULT_NTIERS; i++)
        tiers[i] = default_tiers[i];
    *ntiers = DEFAULT_NTIERS;
}

void cg_budget_decide(const struct cg_budget_level *levels, int n, int64_t tokens,
                      int64_t cost_micros, struct cg_budget_result *out)
{
    if (out == NULL)
        return;
    *out = (struct cg_budget_result){
        .decision = CG_DECISION_ALLOW,
        .tightest = -1,
        .tightest_ratio = 0,
        .available_tokens = INT64_MAX,
    };
    if (levels == NULL || n < 1 || n > CG_PATH_MAX) {
        /* A malformed path is the caller's bug; answering it must not let spend through. */
        out->decision = CG_DECISION_DENY;
        out->available_tokens = 0;
        return;
    }
    tokens = non_negative(tokens);
    cost_micros = non_negative(cost_micros);

    for (int i = 0; i < n; i++) {
        const struct cg_budget_level *l = &levels[i];
        struct cg_level_verdict *v = &out->levels[i];
        /* What the share of this level's allocated child on the path already holds is in
         * this level's allocated_tokens: only the rest of the request is new here. */
        int64_t covered = i + 1 < n ? cg_budget_share(&levels[i + 1]) : 0;
        int64_t requested = tokens > covered ? tokens - covered : 0;
        decide_level(l, requested, cost_micros, v);
        if (v->decision > out->decision)
            out->decision = v->decision;
        if (!l->has_budget)
            continue;
        /* >=: on a tie the deeper level, the one closest to the caller, is the tightest. */
        if (out->tightest < 0 || v->projected_ratio >= out->tightest_ratio) {
            out->tightest = i;
            out->tightest_ratio = v->projected_ratio;
        }
        int64_t available = sat_add(v->remaining_tokens, covered);
        if (l->mode == CG_MODE_HARD && !l->closed && available < out->available_tokens)
            out->available_tokens = available;
    }
    if (out->available_tokens < 0)
        out->available_tokens = 0;
    if (out->tightest >= 0 &&
        (out->decision == CG_DECISION_ALLOW || out->decision == CG_DECISION_WARNING))
        out->delay_ms = out->levels[out->tightest].delay_ms;
}

int64_t cg_budget_compress_to(const struct cg_budget_result *r, int n, int64_t tokens,
                              int64_t output_tokens)
{
    if (r == NULL || r->decision != CG_DECISION_DENY || tokens <= r->available_tokens || n < 1 ||
        n > CG_PATH_MAX)
        return 0;
    for (int i = 0; i < n; i++) {
        const struct cg_level_verdict *v = &r->levels[i];
        if (v->decision == CG_DECISION_DENY &&
            (!(v->reasons & CG_REASON_TOKEN_LIMIT) || (v->reasons & CG_REASON_CLOSED)))
            return 0;
    }
    int64_t fit = r->available_tokens - non_negative(output_tokens);
    return fit > 0 ? fit : 0;
}

cg_status cg_budget_check_settings(const struct cg_budget_level *settings, struct cg_err *err)
{
    const struct cg_budget_level *s = settings;
    if (s == NULL)
        return fail(err, CG_INVALID_ARGUMENT, "settings: required");
    if (s->limit_tokens < 1 || s->limit_tokens > CG_LIMIT_MAX)
        return fail(err, CG_INVALID_ARGUMENT, "limit_tokens must be between 1 and %lld",
                    CG_LIMIT_MAX);
    if (s->limit_cost_micros < 0 || s->limit_cost_micros > CG_LIMIT_MAX)
        return fail(err, CG_INVALID_ARGUMENT, "limit_cost_micros must be between 0 and %lld",
                    CG_LIMIT_MAX);
    if (s->mode != CG_MODE_HARD && s->mode != CG_MODE_SOFT && s->mode != CG_MODE_APPROVAL)
        return fail(err, CG_INVALID_ARGUMENT, "mode: unknown value %d", (int)s->mode);
    /* Written so that NaN fails too. */
    if (!(s->warning_ratio > 0 && s->warning_ratio <= 1))
        return fail(err, CG_INVALID_ARGUMENT,
                    "warning_ratio must be greater than 0 and at most 1, got %g", s->warning_ratio);
    if (s->ntiers < 0 || s->ntiers > CG_TIERS_MAX)
        return fail(err, CG_INVALID_ARGUMENT, "backpressure_tiers: at most %d tiers, got %d",
                    CG_TIERS_MAX, s->ntiers);
    for (int i = 0; i < s->ntiers; i++) {
        const struct cg_tier *t = &s->tiers[i];
        if (!(t->ratio > 0 && t->ratio <= 10))
            return fail(err, CG_INVALID_ARGUMENT,
                        "backpressure_tiers[%d].threshold_ratio must be greater than 0 and at "
                        "most 10, got %g",
                        i, t->ratio);
        if (i > 0 && !(t->ratio > s->tiers[i - 1].ratio))
            return fail(err, CG_INVALID_ARGUMENT,
                        "backpressure_tiers[%d].threshold_ratio %g must be greater than the "
                        "previous tier's %g",
                        i, t->ratio, s->tiers[i - 1].ratio);
        if (t->delay_ms > 60000)
            return fail(err, CG_INVALID_ARGUMENT,
                        "backpressure_tiers[%d].delay_ms must be at most 60000, got %u", i,
                        (unsigned)t->delay_ms);
    }
    return CG_OK;
}

cg_status cg_budget_check_nesting(const struct cg_budget_level *parent,
                                  const struct cg_budget_level *child, struct cg_err *err)
{
    if (parent == NULL || child == NULL || !parent->has_budget || !child->has_budget)
        return CG_OK;
    if (child->limit_tokens > parent->limit_tokens)
        return fail(err, CG_INVALID_ARGUMENT,
                    "limit_tokens %lld of the %s exceeds the %s's limit_tokens %lld",
                    (long long)child->limit_tokens, cg_level_name(child->level),
                    cg_level_name(parent->level), (long long)parent->limit_tokens);
    if (child->limit_cost_micros > 0 && parent->limit_cost_micros > 0 &&
        child->limit_cost_micros > parent->limit_cost_micros)
        return fail(err, CG_INVALID_ARGUMENT,
                    "limit_cost_micros %lld of the %s exceeds the %s's limit_cost_micros %lld",
                    (long long)child->limit_cost_micros, cg_level_name(child->level),
                    cg_level_name(parent->level), (long long)parent->limit_cost_micros);
    return CG_OK;
}

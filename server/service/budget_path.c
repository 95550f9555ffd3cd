/* budget_path.c - the rows of a budget path as core levels, and the decision over them
 * (service/budget_path.h).
 */
#include "service/budget_path.h"

#include <string.h>

void cg_budget_row_level(const struct cg_budget_row *row, struct cg_budget_level *out)
{
    memset(out, 0, sizeof *out);
    out->level = (cg_level)row->level;
    out->has_budget = row->has_budget;
    out->closed = row->closed_at_ms != 0;
    out->mode = (cg_budget_mode)row->mode;
    /* Approvals extend the limit until the next SetBudget or reset (store.h, "approvals"). */
    out->limit_tokens = row->approved_extra_tokens > INT64_MAX - row->limit_tokens
                            ? INT64_MAX
                            : row->limit_tokens + row->approved_extra_tokens;
    out->limit_cost_micros = row->limit_cost_micros;
    out->warning_ratio = row->warning_ratio;
    out->backpressure_disabled = row->backpressure_disabled;
    out->ntiers = row->ntiers;
    for (int i = 0; i < row->ntiers && i < CG_TIERS_MAX; i++) {
        out->tiers[i].ratio = row->tier_ratio[i];
        out->tiers[i].delay_ms = row->tier_delay_ms[i];
    }
    out->used_tokens = row->used_tokens;
    out->reserved_tokens = row->reserved_tokens;
    out->used_cost_micros = row->used_cost_micros;
    out->reserved_cost_micros = row->reserved_cost_micros;
    out->allocated = row->allocate_from_parent;
    out->share_limit_tokens = row->limit_tokens; /* a share does not grow with approvals */
    out->allocated_tokens = row->allocated_tokens;
}

void cg_budget_path_decide(const struct cg_budget_row *rows, int n, int64_t tokens, int64_t cost,
                           struct cg_budget_result *out)
{
    struct cg_budget_level levels[CG_PATH_MAX];
    for (int i = 0; i < n; i++)
        cg_budget_row_level(&rows[i], &levels[i]);
    cg_budget_decide(levels, n, tokens, cost, out);
}

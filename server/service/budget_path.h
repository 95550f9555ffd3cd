/* budget_path.h - a budget path as the budget service works on it: the store's rows of a
 * scope's path (tenant first, store.h) turned into core levels (core/budget.h) and decided
 * over. Pure functions: no store, no lock, no allocation; any thread.
 */
#ifndef CG_SERVICE_BUDGET_PATH_H
#define CG_SERVICE_BUDGET_PATH_H

#include <stdint.h>

#include "core/budget.h"
#include "store/store.h"

/* A store row as the core level it limits (approved extensions added to its limit). */
void cg_budget_row_level(const struct cg_budget_row *row, struct cg_budget_level *out);

/* The core decision (cg_budget_decide) over rows[0..n) (n <= CG_PATH_MAX) for tokens and
 * cost. */
void cg_budget_path_decide(const struct cg_budget_row *rows, int n, int64_t tokens, int64_t cost,
                           struct cg_budget_result *out);

#endif

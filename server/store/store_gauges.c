/* store_gauges.c - the facade of the metrics' figures (store_gauges.h): checks and the
 * deadline, then PostgreSQL (store_pg_gauges.c). */
#include "store/store_gauges.h"

#include <string.h>

#include "store/store_internal.h"

/* Defined in store_pg_gauges.c; contract in store_gauges.h. */
cg_status cg_pg_gauges_read(struct cg_pg *pg, int64_t now_ms, int top_n,
                            struct cg_budget_ratio *top, int *count, struct cg_store_gauges *out,
                            struct cg_err *err);

cg_status cg_store_gauges_read(struct cg_store *store, int64_t now_ms, int top_n,
                               struct cg_budget_ratio *top, int *count, struct cg_store_gauges *out,
                               struct cg_err *err)
{
    *count = 0;
    memset(out, 0, sizeof *out);
    if (top_n < 0 || top_n > CG_STORE_GAUGES_TOP_MAX || (top_n > 0 && top == NULL))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "top_n: must be 0..%d",
                          CG_STORE_GAUGES_TOP_MAX);
    if (cg__store_deadline_passed(store))
        return cg__store_deadline_exceeded(err);
    return cg_pg_gauges_read(store->pg, now_ms, top_n, top, count, out, err);
}

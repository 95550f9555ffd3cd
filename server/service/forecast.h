/* forecast.h - spend forecasts: when each budget runs out at its recent spend rate
 * (core/history.h cg_history_forecast over the minute rollups of forecast_window_minutes),
 * for GetUsage, and the pass that turns forecasts under forecast_horizon_minutes into
 * FORECAST_EXHAUSTION events (once per crossing: store.h cg_store_forecast_alert).
 */
#ifndef CG_SERVICE_FORECAST_H
#define CG_SERVICE_FORECAST_H

#include <stdbool.h>
#include <stdint.h>

#include "core/history.h"
#include "service/service.h"
#include "store/store.h"

/* Budgets looked at per tenant and pass at most (the lowest levels first dropped). */
#define CG_FORECAST_SCOPES_MAX 5000

/* The forecasts of n usage nodes (out[i] for nodes[i]; zero for nodes without a budget), at
 * now_ms. */
cg_status cg_forecast_nodes(const struct cg_svc_env *env, const char *tenant_id,
                            const struct cg_scope_usage *nodes, int n, int64_t now_ms,
                            struct cg_forecast *out, struct cg_err *err) CG_MUST_CHECK;

/* One pass over the tenants with spend in the window or a budget marked under the horizon
 * (store.h cg_store_forecast_tenants; the others have nothing to forecast or re-arm):
 * alerts the budgets whose forecast fell under the horizon and re-arms those that left it.
 * *alerted gets how many events were appended. False when the store failed (logged); the
 * next pass tries again. Nothing when the horizon is 0. */
bool cg_forecast_pass(const struct cg_svc_env *env, int64_t now_ms, int *alerted);

#endif

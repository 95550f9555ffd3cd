/* rpc_context.h - what ContextService shares with the rest of rpc/: the calibration hook
 * that BudgetService's Commit and RecordUsage call once their write has committed. Internal
 * to rpc/.
 */
#ifndef CG_RPC_CONTEXT_H
#define CG_RPC_CONTEXT_H

#include "core/models.h"
#include "core/tok.h"
#include "rpc/rpc.h"
#include "store/store.h"

/* Calibration, best effort (rpc_context_count.c): applies samples[0..n) (0..CG_BATCH_MAX;
 * each with an estimate_id CountTokens gave and the provider's count of that prompt; ids
 * that are empty or counts <= 0 are skipped) of the tenant through env->svc.store in one
 * statement, outside any transaction, after the budget write committed. Fills each sample's
 * updated and factor (false / 1.0 when skipped or on failure). Never fails: store trouble
 * is logged with request_id (may be NULL) and the budget call answers as usual. Must not be
 * called inside a transaction; the calling thread's store only. */
void cg_rpc_calibrate(const struct cg_rpc_env *env, const char *tenant_id, const char *request_id,
                      struct cg_calibration_sample *samples, int n);

#endif

/* calibration.h - the calibration of CountTokens estimates from what the provider counted,
 * as Commit and RecordUsage report it once their budget write has committed.
 */
#ifndef CG_SERVICE_CALIBRATION_H
#define CG_SERVICE_CALIBRATION_H

#include "service/service.h"
#include "store/store.h"

/* Calibration, best effort: applies samples[0..n) (0..CG_BATCH_MAX; each with an estimate_id
 * CountTokens gave and the provider's count of that prompt; ids that are empty or counts
 * <= 0 are skipped) of the tenant through env->store in one statement, outside any
 * transaction, after the budget write committed. Fills each sample's updated and factor
 * (false / 1.0 when skipped or on failure). Never fails: store trouble is logged with
 * request_id (may be NULL) and the budget call answers as usual; without a store (NULL)
 * nothing is applied. Must not be called inside a transaction; the calling thread's store
 * only. */
void cg_calibration_apply(const struct cg_svc_env *env, const char *tenant_id,
                          const char *request_id, struct cg_calibration_sample *samples, int n);

#endif

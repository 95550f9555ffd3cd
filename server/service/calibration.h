/* calibration.h - the calibration of CountTokens estimates: each estimate recorded with its
 * id and answered with the model's calibration, and the calibration moved by what the
 * provider counted, as Commit and RecordUsage report it once their budget write has
 * committed.
 */
#ifndef CG_SERVICE_CALIBRATION_H
#define CG_SERVICE_CALIBRATION_H

#include <stdint.h>

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

/* Records op's tenant's estimate raw_total (the uncalibrated count) of model (the key
 * calibrations are kept under) through env->store and reads the model's calibration into
 * *cal; estimate_id gets the estimate's id (a UUID, for a later Commit or RecordUsage to
 * name). Never fails: on store trouble (PostgreSQL unreachable) the estimate is still given,
 * uncalibrated (*cal factor 1.0, 0 samples) and without an id (estimate_id ""), and the
 * trouble is logged with op's request_id. The calling thread's store only. */
void cg_calibration_estimate(const struct cg_svc_env *env, const struct cg_op *op,
                             const char *model, int64_t raw_total,
                             char estimate_id[CG_UUID_LEN + 1], struct cg_calibration *cal);

#endif

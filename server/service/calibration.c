/* calibration.c - the calibration of CountTokens estimates: the estimate recorded with the
 * model's calibration read, and the provider's counts that Commit and RecordUsage report
 * (service/calibration.h).
 */
#include "service/calibration.h"

#include <string.h>

#include "base/log.h"

void cg_calibration_apply(const struct cg_svc_env *env, const char *tenant_id,
                          const char *request_id, struct cg_calibration_sample *samples, int n)
{
    struct cg_calibration_sample *use[CG_BATCH_MAX];
    struct cg_calibration_sample batch[CG_BATCH_MAX];
    int k = 0;
    for (int i = 0; i < n && i < CG_BATCH_MAX; i++) {
        samples[i].updated = false;
        samples[i].factor = 1.0;
        if (samples[i].estimate_id == NULL || samples[i].estimate_id[0] == '\0' ||
            samples[i].provider_tokens <= 0)
            continue;
        use[k] = &samples[i];
        batch[k++] = samples[i];
    }
    if (k == 0 || env->store == NULL)
        return;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_calibrate(env->store, tenant_id, batch, k, &serr) != CG_OK) {
        cg_log(CG_LOG_WARN, "count", request_id,
               "calibration not updated (%d samples; the budget write stands): %s", k,
               cg_err_text(&serr));
        return;
    }
    for (int i = 0; i < k; i++) {
        use[i]->updated = batch[i].updated;
        use[i]->factor = batch[i].factor;
    }
}

void cg_calibration_estimate(const struct cg_svc_env *env, const struct cg_op *op,
                             const char *model, int64_t raw_total,
                             char estimate_id[CG_UUID_LEN + 1], struct cg_calibration *cal)
{
    cal->factor = 1.0;
    cal->samples = 0;
    cal->updated_at_ms = 0;
    estimate_id[0] = '\0';
    char id[CG_UUID_LEN + 1];
    if (cg_store_uuid(id) != CG_OK)
        return;
    struct cg_err serr;
    cg_err_clear(&serr);
    if (cg_store_estimate_record(env->store, op->principal->tenant_id, id, model, raw_total, cal,
                                 &serr) != CG_OK) {
        cg_log(CG_LOG_WARN, "count", op->request_id,
               "estimate not recorded (answered uncalibrated, without estimate_id): %s",
               cg_err_text(&serr));
        cal->factor = 1.0;
        cal->samples = 0;
        return;
    }
    memcpy(estimate_id, id, sizeof id);
}

/* calibration.c - the calibration of CountTokens estimates from the provider's counts that
 * Commit and RecordUsage report (service/calibration.h).
 */
#include "service/calibration.h"

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

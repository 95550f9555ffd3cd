/* store_calibration.c - the facade of estimate calibration: argument checks and the
 * deadline, then PostgreSQL (store_pg_calibration.c). Contracts in store.h ("calibration").
 */
#include "store/store_internal.h"

#include <string.h>

/* Defined in store_pg_calibration.c. */
cg_status cg_pg_estimate_record(struct cg_pg *pg, const char *tenant_id, const char *estimate_id,
                                const char *model, int64_t raw_tokens, struct cg_calibration *out,
                                struct cg_err *err);
cg_status cg_pg_calibrate(struct cg_pg *pg, const char *tenant_id,
                          struct cg_calibration_sample *samples, int n, struct cg_err *err);

static bool estimate_id_valid(const char *s)
{
    size_t len = s != NULL ? strlen(s) : 0;
    if (len == 0 || len > CG_IDEMPOTENCY_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return false;
    return true;
}

cg_status cg_store_estimate_record(struct cg_store *store, const char *tenant_id,
                                   const char *estimate_id, const char *model, int64_t raw_tokens,
                                   struct cg_calibration *out, struct cg_err *err)
{
    out->factor = 1.0;
    out->samples = 0;
    out->updated_at_ms = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (!estimate_id_valid(estimate_id))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "estimate_id: 1..128 printable ASCII characters required");
    rc = cg__store_check_text(model, 0, 0, CG_ESTIMATE_MODEL_MAX, "model", err);
    if (rc != CG_OK)
        return rc;
    if (raw_tokens < 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "raw_tokens: must not be negative");
    return cg_pg_estimate_record(store->pg, id, estimate_id, model, raw_tokens, out, err);
}

cg_status cg_store_calibrate(struct cg_store *store, const char *tenant_id,
                             struct cg_calibration_sample *samples, int n, struct cg_err *err)
{
    for (int i = 0; samples != NULL && i < n; i++) {
        samples[i].updated = false;
        samples[i].factor = 1.0;
    }
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    if (samples == NULL || n < 1 || n > CG_BATCH_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "n: must be 1..%d samples", CG_BATCH_MAX);
    for (int i = 0; i < n; i++) {
        if (!estimate_id_valid(samples[i].estimate_id))
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "samples[%d].estimate_id: 1..128 printable ASCII characters", i);
        if (samples[i].provider_tokens <= 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "samples[%d].provider_tokens: must be positive", i);
    }
    return cg_pg_calibrate(store->pg, id, samples, n, err);
}

/* test_calibration_store.c - store.h "calibration" against a real PostgreSQL: estimates are
 * recorded and read back with the factor, a provider count moves the factor by the documented
 * rule (running mean, then steps of at least 0.2, bounded to 0.25..4), each estimate is used
 * once, within 24 hours, by its own tenant only, and one call averages a model's samples.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "pgtest.h"
#include "store/store.h"

static struct cg_pgtest T;
static struct cg_store *S;

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    S = cg_store_new(&opts);
    cr_assert(S != NULL);
}

static void teardown(void)
{
    cg_store_free(S);
    cg_pgtest_teardown(&T);
}

TestSuite(calibration_store, .init = setup, .fini = teardown, .timeout = 60);

static void make_tenant(char id[CG_UUID_LEN + 1])
{
    struct cg_tenant t;
    struct cg_err err;
    cr_assert_eq(cg_store_tenant_create(S, "cal", "UTC", &t, &err), CG_OK, "%s", err.msg);
    memcpy(id, t.tenant_id, CG_UUID_LEN + 1);
}

/* Records an estimate of raw tokens; returns the factor read with it. */
static struct cg_calibration record(const char *tenant, const char *id, const char *model,
                                    int64_t raw)
{
    struct cg_calibration cal;
    struct cg_err err;
    cg_status st = cg_store_estimate_record(S, tenant, id, model, raw, &cal, &err);
    cr_assert_eq(st, CG_OK, "estimate_record: %s", err.msg);
    return cal;
}

static struct cg_calibration_sample calibrate1(const char *tenant, const char *id, int64_t provider)
{
    struct cg_calibration_sample s = {.estimate_id = id, .provider_tokens = provider};
    struct cg_err err;
    cr_assert_eq(cg_store_calibrate(S, tenant, &s, 1, &err), CG_OK, "calibrate: %s", err.msg);
    return s;
}

Test(calibration_store, factor_follows_the_rule)
{
    char tenant[CG_UUID_LEN + 1];
    make_tenant(tenant);
    struct cg_calibration cal = record(tenant, "e1", "claude-x", 1000);
    cr_expect_eq(cal.samples, 0);
    cr_expect_float_eq(cal.factor, 1.0, 1e-12);

    /* First sample: the ratio itself. */
    struct cg_calibration_sample s = calibrate1(tenant, "e1", 1500);
    cr_assert(s.updated);
    cr_expect_float_eq(s.factor, 1.5, 1e-9);
    /* Second: the running mean (w = 1/2). */
    record(tenant, "e2", "claude-x", 1000);
    s = calibrate1(tenant, "e2", 2500);
    cr_expect_float_eq(s.factor, 2.0, 1e-9);
    /* Many samples later the weight stays 0.2. */
    double f = 2.0;
    for (int i = 3; i < 12; i++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", i);
        record(tenant, id, "claude-x", 1000);
        s = calibrate1(tenant, id, 1000);
        double w = fmax(1.0 / i, 0.2);
        f += w * (1.0 - f);
        cr_expect_float_eq(s.factor, f, 1e-9, "step %d", i);
    }
    cal = record(tenant, "e99", "claude-x", 10);
    cr_expect_eq(cal.samples, 11);
    cr_expect_float_eq(cal.factor, f, 1e-9);
    cr_expect_gt(cal.updated_at_ms, 0);
}

Test(calibration_store, bounded_once_and_per_tenant)
{
    char a[CG_UUID_LEN + 1], b[CG_UUID_LEN + 1];
    make_tenant(a);
    make_tenant(b);
    record(a, "x1", "m", 100);
    /* Another tenant cannot use it; unknown ids change nothing. */
    cr_expect_not(calibrate1(b, "x1", 150).updated);
    cr_expect_not(calibrate1(a, "nope", 150).updated);
    /* A ratio of 100 is bounded to 4. */
    struct cg_calibration_sample s = calibrate1(a, "x1", 10000);
    cr_assert(s.updated);
    cr_expect_float_eq(s.factor, 4.0, 1e-12);
    /* Used once. */
    cr_expect_not(calibrate1(a, "x1", 100).updated);
    /* b has nothing for m. */
    cr_expect_eq(record(b, "y1", "m", 100).samples, 0);
    cr_expect_eq(record(a, "x2", "m", 100).samples, 1);
    /* Older than 24 hours: not used. */
    record(a, "old", "m", 100);
    PGconn *admin = cg_pgtest_connect(&T);
    cg_pgtest_exec(admin, "UPDATE token_estimates SET created_at = now() - interval '25 hours'"
                          " WHERE estimate_id = 'old'");
    cr_expect_not(calibrate1(a, "old", 100).updated);
    /* The next record of the tenant deletes it. */
    record(a, "x3", "m", 100);
    cr_expect_eq(cg_pgtest_query_int(admin,
                                     "SELECT count(*) FROM token_estimates"
                                     " WHERE estimate_id = 'old'",
                                     NULL),
                 0);
    PQfinish(admin);
}

Test(calibration_store, one_call_averages_a_models_samples)
{
    char t[CG_UUID_LEN + 1];
    make_tenant(t);
    record(t, "a1", "m1", 100);
    record(t, "a2", "m1", 100);
    record(t, "b1", "m2", 100);
    struct cg_calibration_sample s[4] = {
        {.estimate_id = "a1", .provider_tokens = 120},
        {.estimate_id = "a2", .provider_tokens = 180},
        {.estimate_id = "b1", .provider_tokens = 50},
        {.estimate_id = "zz", .provider_tokens = 50},
    };
    struct cg_err err;
    cr_assert_eq(cg_store_calibrate(S, t, s, 4, &err), CG_OK, "%s", err.msg);
    cr_expect(s[0].updated && s[1].updated && s[2].updated);
    cr_expect_not(s[3].updated);
    cr_expect_float_eq(s[0].factor, 1.5, 1e-9);
    cr_expect_float_eq(s[1].factor, 1.5, 1e-9);
    cr_expect_float_eq(s[2].factor, 0.5, 1e-9);
    cr_expect_eq(record(t, "c", "m1", 1).samples, 2);
}

Test(calibration_store, arguments_are_checked)
{
    char t[CG_UUID_LEN + 1];
    make_tenant(t);
    struct cg_calibration cal;
    struct cg_err err;
    cr_expect_eq(cg_store_estimate_record(S, t, "", "m", 1, &cal, &err), CG_INVALID_ARGUMENT);
    cr_expect_eq(cg_store_estimate_record(S, t, "a b", "m", 1, &cal, &err), CG_INVALID_ARGUMENT);
    cr_expect_eq(cg_store_estimate_record(S, t, "ok", "m", -1, &cal, &err), CG_INVALID_ARGUMENT);
    cr_expect_eq(cg_store_estimate_record(S, "00000000-0000-4000-8000-000000000000", "ok", "m", 1,
                                          &cal, &err),
                 CG_NOT_FOUND);
    record(t, "dup", "m", 1);
    cr_expect_eq(cg_store_estimate_record(S, t, "dup", "m", 1, &cal, &err), CG_ALREADY_EXISTS);
    struct cg_calibration_sample s = {.estimate_id = "dup", .provider_tokens = 0};
    cr_expect_eq(cg_store_calibrate(S, t, &s, 1, &err), CG_INVALID_ARGUMENT);
    cr_expect_eq(cg_store_calibrate(S, t, &s, 0, &err), CG_INVALID_ARGUMENT);
}

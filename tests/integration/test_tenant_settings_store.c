/* test_tenant_settings_store.c - per-tenant PII settings in the store (store.h
 * cg_store_tenant_create_with, cg_store_tenant_settings_put) against a real PostgreSQL. */
#include <criterion/criterion.h>

#include <string.h>

#include "pgtest.h"
#include "store/store.h"

static struct cg_pgtest T;

static void setup(void)
{
    cg_pgtest_setup_migrated(&T);
}

static void teardown(void)
{
    cg_pgtest_teardown(&T);
}

static struct cg_store *test_store(void)
{
    struct cg_store_opts opts = cg_pgtest_store_opts(&T);
    struct cg_store *s = cg_store_new(&opts);
    cr_assert(s != NULL, "cg_store_new failed");
    return s;
}

Test(tenant_settings, defaults_create_update_and_read_back, .init = setup, .fini = teardown,
     .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t, got;
    struct cg_err err = {0};
    cr_assert_eq(cg_store_tenant_create(s, "plain", "UTC", &t, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(t.settings.redact_types, 0u);
    cr_assert(!t.settings.redact_artifacts);

    struct cg_tenant_settings in = {.redact_types = (1u << 1) | (1u << 8),
                                    .redact_artifacts = true};
    cr_assert_eq(cg_store_tenant_create_with(s, "pii", "UTC", &in, NULL, &t, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(t.settings.redact_types, in.redact_types);
    cr_assert(t.settings.redact_artifacts);
    cr_assert_eq(cg_store_tenant_get(s, t.tenant_id, &got, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(got.settings.redact_types, in.redact_types);
    cr_assert(got.settings.redact_artifacts);

    struct cg_tenant_settings upd = {.redact_types = 1u << 5, .redact_artifacts = false};
    cr_assert_eq(cg_store_tenant_settings_put(s, t.tenant_id, &upd, NULL, &got, &err), CG_OK, "%s",
                 err.msg);
    cr_assert_eq(got.settings.redact_types, 1u << 5);
    cr_assert(!got.settings.redact_artifacts);
    cr_assert_str_eq(got.name, "pii");

    struct cg_tenant page[10];
    int count = 0;
    bool more = false;
    cr_assert_eq(cg_store_tenant_list(s, "", 10, page, &count, &more, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(count, 2);
    cr_assert_eq(page[0].settings.redact_types, 0u);
    cr_assert_eq(page[1].settings.redact_types, 1u << 5);
    cg_store_free(s);
}

Test(tenant_settings, bad_input, .init = setup, .fini = teardown, .timeout = 30)
{
    struct cg_store *s = test_store();
    struct cg_tenant t, got;
    struct cg_err err = {0};
    struct cg_tenant_settings bad = {.redact_types = 1u << 9};
    cr_assert_eq(cg_store_tenant_create_with(s, "x", "UTC", &bad, NULL, &t, &err),
                 CG_INVALID_ARGUMENT);
    cr_assert(strstr(err.msg, "redact_types") != NULL, "%s", err.msg);
    bad.redact_types = 1u; /* bit 0: UNSPECIFIED */
    cr_assert_eq(cg_store_tenant_create_with(s, "x", "UTC", &bad, NULL, &t, &err),
                 CG_INVALID_ARGUMENT);

    cr_assert_eq(cg_store_tenant_create(s, "ok", "UTC", &t, &err), CG_OK, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_settings_put(s, t.tenant_id, &bad, NULL, &got, &err),
                 CG_INVALID_ARGUMENT);
    struct cg_tenant_settings fine = {.redact_types = 1u << 2};
    cr_assert_eq(cg_store_tenant_settings_put(s, "00000000-0000-4000-8000-000000000000", &fine,
                                              NULL, &got, &err),
                 CG_NOT_FOUND);
    cr_assert(strstr(err.msg, "tenant_id") != NULL, "%s", err.msg);
    cr_assert_eq(cg_store_tenant_settings_put(s, "not-a-uuid", &fine, NULL, &got, &err),
                 CG_NOT_FOUND);
    cg_store_free(s);
}

/* test_status.c - the status table maps to the right gRPC codes and texts. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/status.h"

Test(status, grpc_codes_follow_the_protocol, .timeout = 10)
{
    cr_assert_eq(cg_status_grpc_code(CG_OK), 0);
    cr_assert_eq(cg_status_grpc_code(CG_INVALID_ARGUMENT), 3);
    cr_assert_eq(cg_status_grpc_code(CG_NOT_FOUND), 5);
    cr_assert_eq(cg_status_grpc_code(CG_RESOURCE_EXHAUSTED), 8);
    cr_assert_eq(cg_status_grpc_code(CG_FAILED_PRECONDITION), 9);
    cr_assert_eq(cg_status_grpc_code(CG_UNIMPLEMENTED), 12);
    cr_assert_eq(cg_status_grpc_code(CG_UNAVAILABLE), 14);
    cr_assert_eq(cg_status_grpc_code(CG_UNAUTHENTICATED), 16);
    /* internal codes never leave as themselves */
    cr_assert_eq(cg_status_grpc_code(CG_NOMEM), 8);
    cr_assert_eq(cg_status_grpc_code(CG_IO), 13);
    cr_assert_eq(cg_status_grpc_code((cg_status)999), 2);
}

Test(status, every_public_status_name_matches_grpc_name, .timeout = 10)
{
    for (int s = CG_OK; s <= CG_UNAUTHENTICATED; s++) {
        cr_assert_str_eq(cg_status_name((cg_status)s),
                         cg_grpc_code_name(cg_status_grpc_code((cg_status)s)));
        cr_assert_eq(cg_status_grpc_code((cg_status)s), s);
    }
    cr_assert_str_eq(cg_grpc_code_name(-1), "UNKNOWN");
    cr_assert_str_eq(cg_grpc_code_name(17), "UNKNOWN");
    cr_assert_str_eq(cg_status_name((cg_status)-5), "UNKNOWN_STATUS");
}

Test(status, err_set_formats_truncates_and_returns_code, .timeout = 10)
{
    struct cg_err err;
    cr_assert_eq(cg_err_set(&err, CG_NOT_FOUND, "scope %s", "s1"), CG_NOT_FOUND);
    cr_assert_eq(err.code, CG_NOT_FOUND);
    cr_assert_str_eq(err.msg, "scope s1");
    char big[400];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cg_err_set(&err, CG_INTERNAL, "%s", big);
    cr_assert_eq(strlen(err.msg), CG_ERR_MSG_MAX - 1);
    cr_assert_eq(cg_err_set(NULL, CG_ABORTED, "ignored"), CG_ABORTED);
    cg_err_clear(&err);
    cr_assert_str_eq(cg_err_text(&err), "ok");
}

/* ---------------------------------------------------------------- reasons ---------- */

Test(status, reason_defaults_follow_the_status_table, .timeout = 10)
{
    cr_assert_eq(cg_err_reason(NULL, CG_INVALID_ARGUMENT), CG_ERR_INVALID_ARGUMENT);
    cr_assert_eq(cg_err_reason(NULL, CG_NOT_FOUND), CG_ERR_NOT_FOUND);
    cr_assert_eq(cg_err_reason(NULL, CG_UNAVAILABLE), CG_ERR_STORE_UNAVAILABLE);
    cr_assert_eq(cg_err_reason(NULL, CG_ABORTED), CG_ERR_CONFLICT);
    cr_assert_eq(cg_err_reason(NULL, CG_UNAUTHENTICATED), CG_ERR_UNAUTHENTICATED);
    cr_assert_eq(cg_err_reason(NULL, CG_NOMEM), CG_ERR_RESOURCE_EXHAUSTED);
    cr_assert_eq(cg_err_reason(NULL, CG_UNKNOWN), CG_ERR_INTERNAL);
    cr_assert_eq(cg_err_reason(NULL, (cg_status)999), CG_ERR_INTERNAL);
    /* every status but OK has a reason */
    for (int s = CG_OK + 1; s < CG__STATUS_COUNT; s++)
        cr_assert_neq(cg_err_reason(NULL, (cg_status)s), CG_ERR_NONE, "%s",
                      cg_status_name((cg_status)s));

    struct cg_err err;
    cg_err_setr(&err, CG_NOT_FOUND, CG_ERR_RESERVATION_NOT_FOUND, "reservation_id: no such");
    cr_assert_eq(cg_err_reason(&err, CG_NOT_FOUND), CG_ERR_RESERVATION_NOT_FOUND);
    /* the error's own reason only for its own code */
    cr_assert_eq(cg_err_reason(&err, CG_UNAVAILABLE), CG_ERR_STORE_UNAVAILABLE);
    /* a plain cg_err_set drops what the earlier error said */
    cg_err_meta(&err, "reservation_id", "r1");
    cg_err_set(&err, CG_NOT_FOUND, "something else");
    cr_assert_eq(cg_err_reason(&err, CG_NOT_FOUND), CG_ERR_NOT_FOUND);
    cr_assert_null(cg_err_meta_get(&err, "reservation_id"));
}

Test(status, reason_names_and_retry_delays, .timeout = 10)
{
    cr_assert_str_eq(cg_error_reason_name(CG_ERR_BUDGET_EXHAUSTED), "BUDGET_EXHAUSTED");
    cr_assert_str_eq(cg_error_reason_name(CG_ERR_STORE_UNAVAILABLE), "STORE_UNAVAILABLE");
    cr_assert_str_eq(cg_error_reason_name((cg_error_reason)-1), "NONE");
    cr_assert_str_eq(cg_error_reason_name(CG__ERR_REASON_COUNT), "NONE");
    cr_assert_eq(cg_error_reason_retry_ms(CG_ERR_STORE_UNAVAILABLE), 1000);
    cr_assert_eq(cg_error_reason_retry_ms(CG_ERR_SERVER_OVERLOADED), 1000);
    /* retrying a HARD refusal does not help */
    cr_assert_eq(cg_error_reason_retry_ms(CG_ERR_BUDGET_EXHAUSTED), 0);
    cr_assert_eq(cg_error_reason_retry_ms(CG_ERR_INVALID_ARGUMENT), 0);
}

Test(status, metadata_is_bounded_and_never_allocates, .timeout = 10)
{
    struct cg_err err;
    cg_err_set(&err, CG_RESOURCE_EXHAUSTED, "refused");
    cg_err_meta_i64(&err, "limit_tokens", 1000);
    cg_err_metaf(&err, "scope", "%s/%s", "s1", "t1");
    cr_assert_str_eq(cg_err_meta_get(&err, "limit_tokens"), "1000");
    cr_assert_str_eq(cg_err_meta_get(&err, "scope"), "s1/t1");
    /* a key set again is replaced, not doubled */
    cg_err_meta(&err, "scope", "s2");
    cr_assert_str_eq(cg_err_meta_get(&err, "scope"), "s2");
    cr_assert_eq(err.nmeta, 2);

    /* values are cut at CG_ERR_META_VALUE_MAX bytes, at a UTF-8 boundary */
    char big[1000];
    memset(big, 'v', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    cg_err_meta(&err, "big", big);
    cr_assert_eq(strlen(cg_err_meta_get(&err, "big")), CG_ERR_META_VALUE_MAX);
    char utf8[CG_ERR_META_VALUE_MAX + 8];
    memset(utf8, 'a', CG_ERR_META_VALUE_MAX - 1);
    strcpy(utf8 + CG_ERR_META_VALUE_MAX - 1, "\xc3\xa9tail"); /* é across the cap */
    cg_err_meta(&err, "utf8", utf8);
    cr_assert_eq(strlen(cg_err_meta_get(&err, "utf8")), CG_ERR_META_VALUE_MAX - 1);

    /* at most CG_ERR_META_MAX entries, and all values within CG_ERR_META_BYTES */
    static const char *const keys[] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cg_err_meta(&err, keys[i], big);
    cr_assert_leq(err.nmeta, CG_ERR_META_MAX);
    cr_assert_leq(err.meta_used, CG_ERR_META_BYTES);
    for (unsigned i = 0; i < err.nmeta; i++) {
        const char *v = err.meta_buf + err.meta[i].offset;
        cr_assert_eq(strlen(v), err.meta[i].len);
        cr_assert_leq(err.meta[i].offset + err.meta[i].len + 1, CG_ERR_META_BYTES);
    }
    cg_err_meta(NULL, "x", "y"); /* a no-op */
    cg_err_clear(&err);
    cr_assert_eq(err.nmeta, 0);
    cr_assert_eq(err.reason, CG_ERR_NONE);
}

Test(status, field_is_read_from_the_house_message_forms, .timeout = 10)
{
    struct cg_err err;
    cg_err_set(&err, CG_INVALID_ARGUMENT, "field 'scope.session_id' is required");
    cg_err_field_from_message(&err);
    cr_assert_str_eq(cg_err_meta_get(&err, "field"), "scope.session_id");

    cg_err_set(&err, CG_INVALID_ARGUMENT,
               "messages[3].parts[0].tool_call.arguments_json: not valid JSON");
    cg_err_field_from_message(&err);
    cr_assert_str_eq(cg_err_meta_get(&err, "field"),
                     "messages[3].parts[0].tool_call.arguments_json");

    cg_err_set(&err, CG_NOT_FOUND, "reservation_id: no such reservation");
    cg_err_field_from_message(&err);
    cr_assert_str_eq(cg_err_meta_get(&err, "field"), "reservation_id");

    /* "x: ..." names a field only for argument-shaped codes */
    cg_err_set(&err, CG_RESOURCE_EXHAUSTED, "summarizing: out of memory");
    cg_err_field_from_message(&err);
    cr_assert_null(cg_err_meta_get(&err, "field"));
    /* nor when it is no path */
    cg_err_set(&err, CG_INVALID_ARGUMENT, "name or time_zone: invalid value");
    cg_err_field_from_message(&err);
    cr_assert_null(cg_err_meta_get(&err, "field"));
    cg_err_set(&err, CG_INVALID_ARGUMENT, "field '' is odd");
    cg_err_field_from_message(&err);
    cr_assert_null(cg_err_meta_get(&err, "field"));
    /* a field the site set stays */
    cg_err_set(&err, CG_INVALID_ARGUMENT, "field 'a' is required");
    cg_err_meta(&err, "field", "b");
    cg_err_field_from_message(&err);
    cr_assert_str_eq(cg_err_meta_get(&err, "field"), "b");
}

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

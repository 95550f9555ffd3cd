/* test_status_details.c - the google.rpc.Status of an error reply (transport/status_details.h):
 * packed, then read back with protobuf-c's own unpack. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "base/arena.h"
#include "ctxguard/v1/errors.pb-c.h"
#include "google/rpc/error_details.pb-c.h"
#include "google/rpc/status.pb-c.h"
#include "transport/status_details.h"

struct unpacked {
    struct cg_arena *arena;
    Google__Rpc__Status *status;
    Google__Rpc__ErrorInfo *info;
    Google__Rpc__BadRequest *bad;
    Google__Rpc__RetryInfo *retry;
};

static void unpack(const struct cg_err *err, cg_status st, const char *message, struct unpacked *u)
{
    memset(u, 0, sizeof *u);
    u->arena = cg_arena_new(4096, 1 << 20);
    cr_assert_not_null(u->arena);
    uint8_t *bytes;
    size_t len;
    cr_assert_eq(cg_status_details_pack(err, st, message, u->arena, &bytes, &len), CG_OK);
    u->status = google__rpc__status__unpack(NULL, len, bytes);
    cr_assert_not_null(u->status);
    for (size_t i = 0; i < u->status->n_details; i++) {
        const Google__Protobuf__Any *any = u->status->details[i];
        const ProtobufCBinaryData *v = &any->value;
        if (strcmp(any->type_url, "type.googleapis.com/google.rpc.ErrorInfo") == 0)
            u->info = google__rpc__error_info__unpack(NULL, v->len, v->data);
        else if (strcmp(any->type_url, "type.googleapis.com/google.rpc.BadRequest") == 0)
            u->bad = google__rpc__bad_request__unpack(NULL, v->len, v->data);
        else if (strcmp(any->type_url, "type.googleapis.com/google.rpc.RetryInfo") == 0)
            u->retry = google__rpc__retry_info__unpack(NULL, v->len, v->data);
        else
            cr_assert_fail("unexpected detail %s", any->type_url);
    }
    cr_assert_not_null(u->info, "always an ErrorInfo");
    cr_assert_str_eq(u->info->domain, "ctxguard");
}

static void unpacked_free(struct unpacked *u)
{
    if (u->info)
        google__rpc__error_info__free_unpacked(u->info, NULL);
    if (u->bad)
        google__rpc__bad_request__free_unpacked(u->bad, NULL);
    if (u->retry)
        google__rpc__retry_info__free_unpacked(u->retry, NULL);
    google__rpc__status__free_unpacked(u->status, NULL);
    cg_arena_free(u->arena);
}

static const char *meta(const struct unpacked *u, const char *key)
{
    for (size_t i = 0; i < u->info->n_metadata; i++)
        if (strcmp(u->info->metadata[i]->key, key) == 0)
            return u->info->metadata[i]->value;
    return NULL;
}

Test(status_details, budget_refusal_round_trips, .timeout = 10)
{
    struct cg_err err;
    cg_err_setr(&err, CG_RESOURCE_EXHAUSTED, CG_ERR_BUDGET_EXHAUSTED,
                "HARD token limit of the session: 500 used and reserved + 600 requested > 1000");
    cg_err_meta(&err, "scope", "s1");
    cg_err_meta(&err, "level", "session");
    cg_err_meta_i64(&err, "limit_tokens", 1000);
    cg_err_meta_i64(&err, "requested_tokens", 600);
    struct unpacked u;
    unpack(&err, CG_RESOURCE_EXHAUSTED, cg_err_text(&err), &u);
    cr_assert_eq(u.status->code, 8);
    cr_assert_str_eq(u.status->message, err.msg);
    cr_assert_str_eq(u.info->reason, "BUDGET_EXHAUSTED");
    cr_assert_eq(u.info->n_metadata, 4);
    cr_assert_str_eq(meta(&u, "scope"), "s1");
    cr_assert_str_eq(meta(&u, "level"), "session");
    cr_assert_str_eq(meta(&u, "limit_tokens"), "1000");
    cr_assert_str_eq(meta(&u, "requested_tokens"), "600");
    cr_assert_null(u.bad);
    cr_assert_null(u.retry, "retrying a HARD refusal does not help");
    unpacked_free(&u);
}

Test(status_details, invalid_argument_gets_a_field_violation, .timeout = 10)
{
    struct cg_err err;
    cg_err_set(&err, CG_INVALID_ARGUMENT, "usage.input_tokens: must not be negative");
    struct unpacked u;
    unpack(&err, CG_INVALID_ARGUMENT, cg_err_text(&err), &u);
    cr_assert_eq(u.status->code, 3);
    cr_assert_str_eq(u.info->reason, "INVALID_ARGUMENT");
    cr_assert_str_eq(meta(&u, "field"), "usage.input_tokens");
    cr_assert_not_null(u.bad);
    cr_assert_eq(u.bad->n_field_violations, 1);
    cr_assert_str_eq(u.bad->field_violations[0]->field, "usage.input_tokens");
    cr_assert_str_eq(u.bad->field_violations[0]->description, err.msg);
    cr_assert_null(u.retry);
    /* the caller's error is not changed by the field read from the message */
    cr_assert_null(cg_err_meta_get(&err, "field"));
    unpacked_free(&u);
}

Test(status_details, unavailable_says_when_to_retry, .timeout = 10)
{
    struct cg_err err;
    cg_err_set(&err, CG_UNAVAILABLE, "storage unavailable");
    struct unpacked u;
    unpack(&err, CG_UNAVAILABLE, cg_err_text(&err), &u);
    cr_assert_eq(u.status->code, 14);
    cr_assert_str_eq(u.info->reason, "STORE_UNAVAILABLE");
    cr_assert_not_null(u.retry);
    cr_assert_not_null(u.retry->retry_delay);
    cr_assert_eq(u.retry->retry_delay->seconds, 1);
    cr_assert_eq(u.retry->retry_delay->nanos, 0);
    cr_assert_null(u.bad);
    unpacked_free(&u);

    cg_err_setr(&err, CG_ABORTED, CG_ERR_CONFLICT, "conflict with a concurrent change; retry");
    unpack(&err, CG_ABORTED, cg_err_text(&err), &u);
    cr_assert_eq(u.retry->retry_delay->seconds, 0);
    cr_assert_eq(u.retry->retry_delay->nanos, 100000000);
    unpacked_free(&u);
}

Test(status_details, another_codes_error_and_no_error_give_the_defaults, .timeout = 10)
{
    struct cg_err err;
    cg_err_setr(&err, CG_NOT_FOUND, CG_ERR_SCOPE_NOT_FOUND, "scope.task_id: no such task");
    cg_err_meta(&err, "scope", "s1/t1");
    struct unpacked u;
    /* the status sent is not the error's: its reason and metadata do not apply */
    unpack(&err, CG_DEADLINE_EXCEEDED, "deadline exceeded", &u);
    cr_assert_eq(u.status->code, 4);
    cr_assert_str_eq(u.status->message, "deadline exceeded");
    cr_assert_str_eq(u.info->reason, "DEADLINE_EXCEEDED");
    cr_assert_eq(u.info->n_metadata, 0);
    unpacked_free(&u);

    unpack(NULL, CG_UNIMPLEMENTED, NULL, &u);
    cr_assert_eq(u.status->code, 12);
    cr_assert_str_eq(u.status->message, cg_status_str(CG_UNIMPLEMENTED));
    cr_assert_str_eq(u.info->reason, "UNIMPLEMENTED");
    unpacked_free(&u);

    /* internal codes go out as their gRPC code */
    unpack(NULL, CG_NOMEM, "out of memory", &u);
    cr_assert_eq(u.status->code, 8);
    cr_assert_str_eq(u.info->reason, "RESOURCE_EXHAUSTED");
    unpacked_free(&u);
}

Test(status_details, full_metadata_fits_and_a_full_arena_is_an_error, .timeout = 10)
{
    struct cg_err err;
    cg_err_setr(&err, CG_INVALID_ARGUMENT, CG_ERR_INVALID_ARGUMENT, "field 'x' is bad");
    char big[CG_ERR_META_VALUE_MAX + 50];
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    static const char *const keys[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cg_err_meta(&err, keys[i], big);
    struct unpacked u;
    unpack(&err, CG_INVALID_ARGUMENT, cg_err_text(&err), &u);
    cr_assert_leq(u.info->n_metadata, CG_ERR_META_MAX + 1); /* + the field read from msg */
    for (size_t i = 0; i < u.info->n_metadata; i++)
        cr_assert_leq(strlen(u.info->metadata[i]->value), CG_ERR_META_VALUE_MAX);
    unpacked_free(&u);

    struct cg_arena *tiny = cg_arena_new(64, 128);
    cr_assert_not_null(tiny);
    uint8_t *bytes = NULL;
    size_t len = 0;
    cr_assert_eq(cg_status_details_pack(&err, CG_INVALID_ARGUMENT, err.msg, tiny, &bytes, &len),
                 CG_NOMEM);
    cr_assert_null(bytes);
    cg_arena_free(tiny);
}

Test(status_details, reasons_match_the_proto_enum, .timeout = 10)
{
    const ProtobufCEnumDescriptor *d = &ctxguard__v1__error_reason__descriptor;
    cr_assert_eq(d->n_values, (unsigned)CG__ERR_REASON_COUNT);
    for (int r = 1; r < CG__ERR_REASON_COUNT; r++) {
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, r);
        cr_assert_not_null(v, "reason %d", r);
        char want[80];
        snprintf(want, sizeof want, "ERROR_REASON_%s", cg_error_reason_name((cg_error_reason)r));
        cr_assert_str_eq(v->name, want);
    }
}

Test(status_details, strings_go_out_as_valid_utf8, .timeout = 10)
{
    struct cg_err err;
    /* an unknown method's path is whatever bytes the caller sent */
    cg_err_set(&err, CG_UNIMPLEMENTED, "unknown method /a\xff\xfex");
    cg_err_meta(&err, "method", "/a\xff\xfex");
    struct unpacked u;
    unpack(&err, CG_UNIMPLEMENTED, cg_err_text(&err), &u);
    cr_assert_str_eq(u.status->message, "unknown method /a?"
                                        "?x");
    cr_assert_str_eq(meta(&u, "method"), "/a?"
                                         "?x");
    unpacked_free(&u);

    /* a message cut inside a character by its fixed buffer */
    char cut[CG_ERR_MSG_MAX + 8];
    memset(cut, 'm', CG_ERR_MSG_MAX - 2);
    strcpy(cut + CG_ERR_MSG_MAX - 2, "\xe2\x82\xac"); /* the euro sign across the end */
    cg_err_set(&err, CG_INVALID_ARGUMENT, "%s", cut);
    cr_assert_eq(strlen(err.msg), CG_ERR_MSG_MAX - 1);
    unpack(&err, CG_INVALID_ARGUMENT, cg_err_text(&err), &u);
    size_t n = strlen(u.status->message);
    cr_assert_eq(n, CG_ERR_MSG_MAX - 1);
    cr_assert_eq(u.status->message[n - 1], '?');
    unpacked_free(&u);
}

/* Every status goes out as itself: the status table holds errors only (control flow such
 * as "handed on" or "needs the pool" is service/service.h cg_op_fate, never a status). */
Test(status_details, every_status_goes_out_as_itself, .timeout = 10)
{
    for (int s = CG_OK + 1; s < CG__STATUS_COUNT; s++) {
        struct cg_err err;
        cg_err_set(&err, (cg_status)s, "kept");
        struct unpacked u;
        unpack(&err, (cg_status)s, "kept", &u);
        cr_assert_eq(u.status->code, cg_status_grpc_code((cg_status)s), "%s",
                     cg_status_name((cg_status)s));
        cr_assert_str_eq(u.status->message, "kept");
        unpacked_free(&u);
    }
}

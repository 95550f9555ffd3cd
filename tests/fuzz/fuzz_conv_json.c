/* fuzz_conv_json.c - the four JSON readers (OpenAI chat, Anthropic, Responses, Gemini), the
 * writers, the round trip, ValidateContext in every dialect, the estimator, and the
 * conversation to proto messages. The first byte picks the input format (its low two bits);
 * the rest is the JSON. Anything that reads must write back in its own format, and that output
 * must read again and write identically; writing in each other format either fails cleanly or
 * gives JSON that format reads. */
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "core/conv_json.h"
#include "core/estimate.h"
#include "core/validate.h"
#include "rpc/rpc_conv.h"

/* A broken property: says which, then crashes so that libFuzzer keeps the input. */
#define FAIL(why)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_conv_json: %s (%s)\n", why, err.msg);                                \
        abort();                                                                                   \
    } while (0)

static void check_conv(const struct cg_conv *conv)
{
    for (int d = CG_DIALECT_OPENAI; d <= CG_DIALECT_GENERIC; d++) {
        struct cg_validate_input in = {.conv = conv,
                                       .dialect = (cg_dialect)d,
                                       .have_counts = true,
                                       .prompt_tokens = 100,
                                       .context_window = 1000,
                                       .reserved_output_tokens = 950};
        struct cg_validate_result r;
        if (cg_validate(&in, &r, NULL) == CG_OK) {
            if (r.valid != (r.errors == 0))
                abort();
            cg_validate_result_free(&r);
        }
    }
    struct cg_estimate e;
    int64_t *per = calloc(conv->n_messages + 1, sizeof *per);
    for (int p = 0; p < CG__PROFILE_COUNT; p++)
        if (cg_estimate_conv(conv, (cg_profile)p, 1.0, per, &e, NULL) != CG_OK || e.total < 0)
            abort();
    free(per);
    struct cg_arena *arena = cg_arena_new(4096, 64u << 20);
    struct cg_rpc_call call = {.arena = arena, .max_message_bytes = 4u << 20};
    Ctxguard__V1__Conversation *out;
    if (cg_rpc_conv_out(&call, conv,
                        CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED,
                        &out) == CG_OK) {
        /* What goes out as messages comes back in. */
        struct cg_conv *back = NULL;
        if (cg_rpc_conv_in(&call, "conversation", out, &back) == CG_OK &&
            back->n_messages != conv->n_messages)
            abort();
        cg_conv_free(back);
    }
    cg_arena_free(arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    cg_conv_json_format format = (cg_conv_json_format)(CG_CONV_JSON_OPENAI + (data[0] & 3));
    const char *json = (const char *)data + 1;
    size_t len = size - 1;
    struct cg_conv_limits limits = {.max_bytes = 16u << 20};
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    if (cg_conv_json_read(format, json, len, &limits, &conv, &err) != CG_OK) {
        if (conv != NULL || err.msg[0] != '$')
            FAIL("errors name a JSON path");
        return 0;
    }
    char *out = NULL, *out2 = NULL;
    size_t out_len, out2_len;
    if (cg_conv_json_write(conv, format, &out, &out_len, &err) != CG_OK)
        FAIL("what a format reads, it writes");
    struct cg_conv *again = NULL;
    if (cg_conv_json_read(format, out, out_len, &limits, &again, &err) != CG_OK)
        FAIL("what was written reads again");
    if (cg_conv_json_write(again, format, &out2, &out2_len, &err) != CG_OK || out_len != out2_len ||
        memcmp(out, out2, out_len) != 0)
        FAIL("the round trip is a fixed point");
    for (int f = CG_CONV_JSON_OPENAI; f <= CG_CONV_JSON_GEMINI; f++) {
        cg_conv_json_format other = (cg_conv_json_format)f;
        char *cross = NULL;
        size_t cross_len;
        if (other == format || cg_conv_json_write(conv, other, &cross, &cross_len, &err) != CG_OK)
            continue;
        struct cg_conv *c2 = NULL;
        if (cg_conv_json_read(other, cross, cross_len, &limits, &c2, &err) != CG_OK)
            FAIL("what a format writes, it reads");
        check_conv(c2);
        cg_conv_free(c2);
        free(cross);
    }
    check_conv(conv);
    free(out);
    free(out2);
    cg_conv_free(again);
    cg_conv_free(conv);
    return 0;
}

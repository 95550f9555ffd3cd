/* fuzz_compress.c - the JSON conversion followed by the whole cascade. Byte 0 picks the input
 * format (with byte 1's top bit), the dialect, the strategy and offload; byte 1 the window
 * (small, so that every layer runs); the rest is the JSON. Properties: a read conversation
 * compresses with OK or a caller status (never another); an OK output passes cg_validate for
 * the dialect, is at most as large as the input's normalized form allows, writes as JSON in
 * the input's format, and a second run gives the identical output. With gpt-4o (byte 0 bit
 * 3) counts are exact with the build's o200k data, through the run's count memo. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokdata.h"
#include "core/compress.h"
#include "core/conv_json.h"
#include "core/tok.h"
#include "core/validate.h"

#define FAIL(why)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_compress: %s (%s)\n", why, err.msg);                                 \
        abort();                                                                                   \
    } while (0)

/* A summarizer that answers with a short fixed text, so that L5 runs too. */
static cg_status summarize(void *ctx, const struct cg_conv *conv, size_t from, size_t to,
                           int64_t target, char **out, struct cg_err *err)
{
    (void)ctx;
    (void)target;
    (void)err;
    if (from >= to || to > conv->n_messages)
        abort();
    *out = strdup("earlier turns: files read, a fix proposed");
    return *out != NULL ? CG_OK : CG_NOMEM;
}

/* o200k from the build's token data, once; NULL (estimates) when it cannot be loaded. */
static const struct cg_tok_encoding *o200k(void)
{
    static struct cg_tok_encoding *enc;
    static bool tried;
    if (!tried) {
        tried = true;
        struct cg_tokdata td;
        struct cg_err err;
        if (cg_tokdata_load(NULL, "o200k_base", &td, &err) == CG_OK) {
            if (cg_tok_encoding_new(td.data, td.len, &enc, &err) != CG_OK)
                enc = NULL;
            cg_tokdata_cleanup(&td);
        }
    }
    return enc;
}

static char *write_json(const struct cg_conv *conv)
{
    char *out = NULL;
    size_t len;
    if (cg_conv_json_write(conv, CG_CONV_JSON_OPENAI, &out, &len, NULL) != CG_OK)
        return NULL;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t mode = data[0], scale = data[1];
    /* Bit 0 and the top bit of scale pick one of the four formats. */
    cg_conv_json_format fmt =
        (cg_conv_json_format)(CG_CONV_JSON_OPENAI + (mode & 1) + ((scale >> 6) & 2));
    const cg_dialect dialects[4] = {CG_DIALECT_OPENAI, CG_DIALECT_ANTHROPIC, CG_DIALECT_GOOGLE,
                                    CG_DIALECT_GENERIC};
    struct cg_conv_limits limits = {.max_bytes = 8u << 20, .max_messages = 5000};
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    if (cg_conv_json_read(fmt, (const char *)data + 2, size - 2, &limits, &conv, &err) != CG_OK)
        return 0;
    struct cg_model_info model;
    cg_models_lookup((mode & 8) ? "gpt-4o" : "claude-sonnet-4", &model);
    struct cg_compress_count_state cs = {.enc = (mode & 8) ? o200k() : NULL,
                                         .profile = model.profile};
    struct cg_compress_input in = {
        .conv = conv,
        .model = &model,
        .dialect = dialects[(mode >> 1) & 3],
        .context_window = 200 + (int64_t)scale * 50,
        .offload = (mode & 16) != 0,
        .force = (mode & 32) != 0,
        .trim_boundary = (mode & 64) ? (int64_t)(scale % 8) : 0,
        .summarize = (mode & 128) ? summarize : NULL,
    };
    cg_compress_counter_init(&in.counter, &cs, conv);
    struct cg_compress_policy p;
    cg_compress_policy_defaults(&p, (mode & 4) ? CG_STRATEGY_TRIMMING : CG_STRATEGY_SUMMARIZING,
                                NULL);
    p.reserved_output_tokens = 0;
    p.offload_threshold_chars = 200;
    p.offload_preview_bytes = 64;
    p.tool_result_threshold_chars = 300;
    p.tool_result_target_chars = 100;
    struct cg_compress_result a, b;
    cg_status st = cg_compress_run(&in, &p, &a, &err);
    if (st != CG_OK) {
        if (st != CG_INVALID_ARGUMENT && st != CG_RESOURCE_EXHAUSTED &&
            st != CG_FAILED_PRECONDITION)
            FAIL("unexpected status");
        cg_conv_free(conv);
        return 0;
    }
    struct cg_validate_input vin = {.conv = a.conv, .dialect = in.dialect};
    struct cg_validate_result vr;
    if (cg_validate(&vin, &vr, &err) == CG_OK) {
        if (!vr.valid)
            FAIL("output does not validate");
        cg_validate_result_free(&vr);
    }
    if (a.messages_after != (int64_t)a.conv->n_messages || a.boundary_after < a.boundary_before)
        FAIL("report does not match the output");
    if (cg_compress_run(&in, &p, &b, &err) != CG_OK)
        FAIL("second run failed");
    /* Compress answers in the format the conversation came in: that must always write. */
    char *native = NULL;
    size_t native_len;
    if (cg_conv_json_write(a.conv, fmt, &native, &native_len, &err) != CG_OK)
        FAIL("the output writes in the input's format");
    free(native);
    char *ja = write_json(a.conv), *jb = write_json(b.conv);
    if ((ja == NULL) != (jb == NULL) || (ja != NULL && strcmp(ja, jb) != 0))
        FAIL("two runs differ");
    free(ja);
    free(jb);
    cg_compress_result_free(&a);
    cg_compress_result_free(&b);
    cg_conv_free(conv);
    return 0;
}

/* fuzz_count.c - CountTokens' handler on hostile requests: the decoder, the conversation
 * readers, the exact chat accounting (tool definitions rendered as JSON, images, specials)
 * with both real encodings from the build's token data. Estimates need the store and stop
 * at the pool hand-off here (the estimator has its own target, fuzz_conv_json). The first
 * byte picks the encoding field (0..3, 3 being unknown) and allow_special; the rest is the
 * CountTokensRequest as it comes off the wire. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/arena.h"
#include "base/config.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc_handlers.h"
#include "service/tokenizers.h"

static struct cg_config config;
static struct cg_tokenizers tokenizers;

static void setup(void)
{
    if (tokenizers.cl100k_base != NULL)
        return;
    struct cg_err err;
    if (cg_config_init(&config) != CG_OK || cg_tokenizers_load(NULL, &tokenizers, &err) != CG_OK)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    setup();
    struct cg_arena *arena = cg_arena_new(4096, 64u << 20);
    struct cg_rpc_call call = {.arena = arena, .max_message_bytes = 4u << 20, .request_id = "fuzz"};
    struct cg_rpc_env env = {.svc = {.config = &config, .tokenizers = &tokenizers}};
    ProtobufCMessage *msg = NULL;
    if (cg_rpc_decode(&call, &ctxguard__v1__count_tokens_request__descriptor, data + 1, size - 1,
                      &msg) == CG_OK) {
        Ctxguard__V1__CountTokensRequest *req = (Ctxguard__V1__CountTokensRequest *)msg;
        req->encoding = (Ctxguard__V1__TokenEncoding)(data[0] & 3);
        req->allow_special_tokens = (data[0] & 4) != 0;
        ProtobufCMessage *resp = NULL;
        cg_op_fate fate;
        cg_status st = cg_rpc_context_count_tokens(&call, &env, msg, &resp, &fate);
        /* Every refusal names its reason; an estimate needs the store (CG_OP_NEEDS_STORE),
         * always with CG_OK: a hand-off to the pool, never an answer. */
        if (st != CG_OK && call.err.msg[0] == '\0')
            __builtin_trap();
        if (fate != CG_OP_DONE && (fate != CG_OP_NEEDS_STORE || st != CG_OK))
            __builtin_trap();
        if (st == CG_OK && fate == CG_OP_DONE) {
            const Ctxguard__V1__CountTokensResponse *r = (const void *)resp;
            const Ctxguard__V1__TokenBreakdown *b = r->breakdown;
            int64_t sum = 0;
            for (size_t i = 0; i < r->n_message_tokens; i++)
                sum += r->message_tokens[i];
            /* The parts add up: messages + priming + tools + text is the total. */
            int64_t priming = r->n_message_tokens > 0 ? 3 : 0;
            if (r->total_tokens != sum + priming + b->tool_definition_tokens + b->text_tokens ||
                r->total_tokens != b->content_tokens + b->overhead_tokens +
                                       b->tool_definition_tokens + b->image_tokens + b->text_tokens)
                __builtin_trap();
            uint8_t *out;
            size_t out_len;
            if (cg_rpc_encode(&call, resp, &out, &out_len) != CG_OK)
                __builtin_trap();
        }
    }
    cg_arena_free(arena);
    return 0;
}

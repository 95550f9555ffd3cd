/* fuzz_rpc_decode.c - every request decoder of the method table, the UTF-8 walk, and the
 * whole invoke path of the methods that need no storage (health, reflection, Ping).
 * The first byte picks the method, the second the authorization; the rest is the request
 * as it would come off the wire. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/arena.h"
#include "base/config.h"
#include "core/price.h"
#include "rpc/reflection.h"
#include "rpc/rpc.h"

static struct cg_config config;
static struct cg_health health;
static struct cg_reflection *reflection;
static struct cg_price_table prices;

static void setup(void)
{
    if (reflection != NULL)
        return;
    struct cg_err err;
    if (cg_config_init(&config) != CG_OK ||
        cg_config_set(&config, "admin_key", "fuzz-admin-key-0123456789", "fuzz", &err) != CG_OK)
        abort();
    cg_health_init(&health);
    size_t n;
    const char *const *services = cg_rpc_services(&n);
    reflection = cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len, services, n, &err);
    if (reflection == NULL)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    setup();
    size_t n;
    const struct cg_rpc_method *methods = cg_rpc_methods(&n);
    const struct cg_rpc_method *m = &methods[data[0] % n];
    static const char *const auths[] = {NULL, "", "Bearer fuzz-admin-key-0123456789", "Bearer nope",
                                        "Basic x"};
    struct cg_arena *arena = cg_arena_new(4096, 16u << 20);
    struct cg_rpc_call call = {.arena = arena,
                               .max_message_bytes = 4u << 20,
                               .authorization = auths[data[1] % 5],
                               .request_id = "fuzz"};
    const uint8_t *req = data + 2;
    size_t len = size - 2;

    ProtobufCMessage *msg = NULL;
    if (cg_rpc_decode(&call, m->request_desc, req, len, &msg) == CG_OK) {
        /* What decodes must encode again. */
        uint8_t *out;
        size_t out_len;
        if (cg_rpc_encode(&call, msg, &out, &out_len) != CG_OK)
            __builtin_trap();
    }
    if (!m->blocking && m->kind != CG_RPC_SERVER_STREAM) {
        struct cg_rpc_env env = {.svc = {.config = &config, .health = &health, .prices = &prices},
                                 .reflection = reflection};
        cg_arena_reset(arena);
        cg_err_clear(&call.err);
        uint8_t *out;
        size_t out_len;
        cg_op_fate fate;
        cg_status st = cg_rpc_invoke(m, &call, &env, req, len, &out, &out_len, &fate);
        if (fate != CG_OP_DONE)
            __builtin_trap(); /* a method that never blocks always answers */
        if (st != CG_OK && call.err.msg[0] == '\0')
            __builtin_trap(); /* every refusal names its reason */
    }
    cg_arena_free(arena);
    return 0;
}

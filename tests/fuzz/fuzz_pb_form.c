/* fuzz_pb_form.c - the JSON API's request builder (rpc/pb_form.h) on hostile input: the first
 * byte picks a request type of the method table and whether the rest is a JSON body or
 * query arguments ("name=value" lines). Whatever it builds must encode and decode again
 * (what the API then hands to the RPC's own decoder). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "rpc/pb_form.h"
#include "rpc/rpc.h"

/* Feeds "name=value" lines of text to cg_pb_form_set until one is refused. */
static void set_lines(struct cg_arena *arena, ProtobufCMessage *msg, char *text)
{
    struct cg_err err;
    for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char *eq = strchr(line, '=');
        if (eq == NULL)
            continue;
        *eq = '\0';
        if (cg_pb_form_set(arena, msg, line, eq + 1, &err) != CG_OK)
            return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    size_t n;
    const struct cg_rpc_method *methods = cg_rpc_methods(&n);
    const struct cg_rpc_method *m = &methods[(data[0] >> 1) % n];
    struct cg_arena *arena = cg_arena_new(4096, 16u << 20);
    ProtobufCMessage *msg = cg_pb_form_new(arena, m->request_desc);
    if (msg == NULL)
        abort();
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    struct cg_err err;
    if (data[0] & 1)
        (void)cg_pb_form_json(arena, msg, (const char *)data + 1, size - 1, &err);
    else
        set_lines(arena, msg, text);
    free(text);
    /* What was built encodes, and the encoding decodes to a message of the same type. */
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len + 1);
    if (protobuf_c_message_pack(msg, buf) != len)
        __builtin_trap();
    ProtobufCAllocator alloc;
    cg_rpc_allocator(arena, &alloc);
    if (protobuf_c_message_unpack(m->request_desc, &alloc, len, buf) == NULL)
        __builtin_trap();
    free(buf);
    cg_arena_free(arena);
    return 0;
}

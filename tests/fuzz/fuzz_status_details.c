/* fuzz_status_details.c - an error's facts from arbitrary text (messages and metadata values
 * carry ids and field paths a caller sent): the metadata bounds of struct cg_err, the field
 * read from the message, and the google.rpc.Status packed from them, read back by protobuf-c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/arena.h"
#include "base/status.h"
#include "core/utf8.h"
#include "google/rpc/status.pb-c.h"
#include "transport/status_details.h"

static const char *const keys[] = {"field",       "scope",       "level",      "reservation_id",
                                   "approval_id", "artifact_id", "session_id", "method",
                                   "state",       "key_id"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* byte 0: the status; byte 1: the reason; the rest: NUL-separated message and values */
    cg_status st = (cg_status)(1 + data[0] % (CG__STATUS_COUNT - 1));
    cg_error_reason reason = (cg_error_reason)(data[1] % (CG__ERR_REASON_COUNT + 2));
    char *text = malloc(size - 1);
    if (text == NULL)
        return 0;
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';

    struct cg_err err;
    cg_err_setr(&err, st, reason, "%s", text);
    size_t at = strlen(text) + 1;
    for (size_t i = 0; at < size - 1; i++) {
        cg_err_meta(&err, keys[i % (sizeof keys / sizeof keys[0])], text + at);
        at += strlen(text + at) + 1;
    }
    if (err.nmeta > CG_ERR_META_MAX || err.meta_used > CG_ERR_META_BYTES)
        __builtin_trap();
    for (unsigned i = 0; i < err.nmeta; i++)
        if (err.meta[i].len > CG_ERR_META_VALUE_MAX ||
            strlen(err.meta_buf + err.meta[i].offset) != err.meta[i].len)
            __builtin_trap();

    struct cg_arena *arena = cg_arena_new(4096, 1 << 20);
    uint8_t *bytes;
    size_t len;
    if (arena != NULL &&
        cg_status_details_pack(&err, st, cg_err_text(&err), arena, &bytes, &len) == CG_OK) {
        Google__Rpc__Status *back = google__rpc__status__unpack(NULL, len, bytes);
        if (back == NULL || back->code != cg_status_grpc_code(st) || back->n_details < 1 ||
            !cg_utf8_valid(back->message, strlen(back->message), NULL))
            __builtin_trap();
        google__rpc__status__free_unpacked(back, NULL);
    }
    cg_arena_free(arena);
    free(text);
    return 0;
}

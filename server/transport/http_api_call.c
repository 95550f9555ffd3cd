/* http_api_call.c - the JSON API's calls (http_api_internal.h): counted in and out, their
 * request built from the query or the body, their errors answered; shared by the unary
 * calls (http_api.c) and the event streams (http_sse.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/pb_form.h"
#include "rpc/pb_json.h"
#include "transport/http_api_internal.h"

bool cg__http_api_enter(struct cg_http_api *api)
{
    pthread_mutex_lock(&api->lock);
    bool ok = !api->closing;
    api->inflight += ok;
    pthread_mutex_unlock(&api->lock);
    return ok;
}

void cg__http_api_leave(struct cg_http_api *api)
{
    pthread_mutex_lock(&api->lock);
    if (--api->inflight == 0)
        pthread_cond_broadcast(&api->idle);
    pthread_mutex_unlock(&api->lock);
}

void cg__http_api_call_free(struct cg_http_api_call *c)
{
    struct cg_http_api *api = c->api;
    cg_arena_free(c->arena);
    free(c);
    cg__http_api_leave(api); /* last: the listener may stop once every call has left */
}

int cg_http_api_status(int grpc_code)
{
    switch (grpc_code) {
    case 0:
        return 200;
    case 1: /* CANCELLED */
        return 499;
    case 3:  /* INVALID_ARGUMENT */
    case 9:  /* FAILED_PRECONDITION */
    case 11: /* OUT_OF_RANGE */
        return 400;
    case 4: /* DEADLINE_EXCEEDED */
        return 504;
    case 5: /* NOT_FOUND */
        return 404;
    case 6:  /* ALREADY_EXISTS */
    case 10: /* ABORTED */
        return 409;
    case 7: /* PERMISSION_DENIED */
        return 403;
    case 8: /* RESOURCE_EXHAUSTED */
        return 429;
    case 12: /* UNIMPLEMENTED */
        return 501;
    case 14: /* UNAVAILABLE */
        return 503;
    case 16: /* UNAUTHENTICATED */
        return 401;
    default: /* UNKNOWN, INTERNAL, DATA_LOSS */
        return 500;
    }
}

/* ---------------------------------------------------------------- answers --------- */

/* Sends a JSON text built into a memory stream; on failure the connection is closed. */
static void respond_json(struct cg_http_request *req, int status, char *text, size_t len)
{
    (void)cg_http_respond(req, status, "application/json; charset=utf-8", text, len);
}

void cg__http_api_error(struct cg_http_request *req, cg_status st, struct cg_err *err,
                        const char *request_id)
{
    cg_err_field_from_message(err);
    int code = cg_status_grpc_code(st);
    const char *field = cg_err_meta_get(err, "field");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    bool ok = f != NULL;
    if (ok) {
        fprintf(f, "{\"error\":{\"code\":\"%s\",\"reason\":\"%s\",\"message\":",
                cg_grpc_code_name(code), cg_error_reason_name(cg_err_reason(err, st)));
        const char *msg = cg_err_text(err);
        ok = cg_json_write_string(f, msg, strlen(msg)) == CG_OK;
        if (ok && field != NULL) {
            fputs(",\"field\":", f);
            ok = cg_json_write_string(f, field, strlen(field)) == CG_OK;
        }
        fprintf(f, ",\"request_id\":\"%s\"}}", request_id);
        ok = fclose(f) == 0 && ok;
    }
    if (!ok) {
        free(text);
        (void)cg_http_respond_text(req, 500, "error\n");
        return;
    }
    respond_json(req, cg_http_api_status(code), text, len);
}

/* ---------------------------------------------------------------- the call -------- */

cg_status cg__http_api_build(struct cg_http_api_call *c, uint8_t **buf, size_t *len,
                             struct cg_err *err)
{
    ProtobufCMessage *msg = cg_pb_form_new(c->arena, c->method->request_desc);
    if (msg == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    if (c->too_many_args)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "at most %d query arguments",
                          CG_HTTP_API_ARGS_MAX);
    for (int i = 0; i < c->nargs; i++) {
        cg_status st = cg_pb_form_set(c->arena, msg, c->arg_keys[i], c->arg_values[i], err);
        if (st != CG_OK)
            return st;
    }
    if (c->body != NULL && c->body_len > 0) {
        cg_status st = cg_pb_form_json(c->arena, msg, c->body, c->body_len, err);
        if (st != CG_OK)
            return st;
    }
    *len = protobuf_c_message_get_packed_size(msg);
    if ((*buf = cg_arena_alloc(c->arena, *len + 1)) == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    protobuf_c_message_pack(msg, *buf);
    return CG_OK;
}

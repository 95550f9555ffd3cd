/* cg_client.c - the client library on gRPC C core: one channel and one pluck completion
 * queue per client; unary calls as one batch; server streams as a send batch, a status
 * batch started at once and one receive batch per read.
 *
 * Pluck (rather than next) is what lets a stream stay open across reads while unary calls
 * run on the same client: each wait takes only its own tag and leaves the others queued.
 * Every tag is the address of a field of the call's state, so tags never collide.
 */
#include "cg_client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

/* The library returns gRPC codes as cg_status values: the two numberings must agree. */
_Static_assert(CG_OK == 0 && CG_CANCELLED == 1 && CG_NOT_FOUND == 5 && CG_RESOURCE_EXHAUSTED == 8 &&
                   CG_UNAUTHENTICATED == 16,
               "cg_status must start with the gRPC codes in order");

/* More extra metadata than this in one call is a caller bug, not a test of the server. */
#define MAX_EXTRA_METADATA 1024

#ifndef CG_VERSION
#define CG_VERSION "dev"
#endif

struct cg_client {
    grpc_channel *channel;
    grpc_completion_queue *cq;
    char *auth_value; /* "Bearer <key>", or NULL */
    int timeout_ms;
    size_t max_recv;
};

/* Metadata of one call: slices owned here (copied from the caller's strings). */
struct md_list {
    grpc_metadata *items;
    size_t count;
};

struct cg_client_stream {
    struct cg_client *client;
    grpc_call *call;
    struct md_list md;
    grpc_byte_buffer *send_buf;
    grpc_byte_buffer *recv_buf;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_status_code code;
    grpc_slice details;
    bool send_pending;
    bool recv_pending;
    bool status_pending;
    bool done;
    struct cg_client_status final_status;
    /* Their addresses are the tags of the three kinds of batch. */
    char send_tag;
    char recv_tag;
    char status_tag;
};

/* ------------------------------------------------------------------ statuses ---- */

static void status_set(struct cg_client_status *st, int grpc_code, bool local, const char *msg,
                       size_t msg_len)
{
    if (grpc_code < 0 || grpc_code > 16)
        grpc_code = 2; /* UNKNOWN, as gRPC itself maps unknown codes */
    st->grpc_code = grpc_code;
    st->code = (cg_status)grpc_code;
    st->name = cg_grpc_code_name(grpc_code);
    st->local = local;
    if (msg_len >= sizeof st->message)
        msg_len = sizeof st->message - 1;
    if (msg_len > 0)
        memcpy(st->message, msg, msg_len);
    st->message[msg_len] = '\0';
}

static cg_status status_vset_local(struct cg_client_status *st, cg_status code, const char *fmt,
                                   va_list ap)
{
    int grpc_code = cg_status_grpc_code(code);
    if (st == NULL)
        return (cg_status)grpc_code;
    status_set(st, grpc_code, true, "", 0);
    int n = vsnprintf(st->message, sizeof st->message, fmt, ap);
    if (n < 0)
        st->message[0] = '\0';
    return st->code;
}

cg_status cg_client_status_set_local(struct cg_client_status *st, cg_status code, const char *fmt,
                                     ...)
{
    va_list ap;
    va_start(ap, fmt);
    cg_status rc = status_vset_local(st, code, fmt, ap);
    va_end(ap);
    return rc;
}

static cg_status status_from_wire(struct cg_client_status *st, grpc_status_code code,
                                  grpc_slice details)
{
    status_set(st, (int)code, false, (const char *)GRPC_SLICE_START_PTR(details),
               GRPC_SLICE_LENGTH(details));
    return st->code;
}

static cg_status status_from_call_error(struct cg_client_status *st, grpc_call_error err,
                                        const char *method)
{
    cg_status code = err == GRPC_CALL_ERROR_INVALID_METADATA ? CG_INVALID_ARGUMENT : CG_INTERNAL;
    return cg_client_status_set_local(st, code, "gRPC refused the call to %s: %s", method,
                                      grpc_call_error_to_string(err));
}

/* ------------------------------------------------------------------ helpers ----- */

static gpr_timespec deadline_in(int ms)
{
    if (ms < 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static bool header_value_is_printable(const char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
            return false;
    }
    return true;
}

static cg_status check_method(const char *method, struct cg_client_status *st)
{
    if (method == NULL || method[0] != '/' || strchr(method + 1, '/') == NULL)
        return cg_client_status_set_local(st, CG_INVALID_ARGUMENT,
                                          "method must look like /package.Service/Method");
    return CG_OK;
}

static void md_cleanup(struct md_list *md)
{
    for (size_t i = 0; i < md->count; i++) {
        grpc_slice_unref(md->items[i].key);
        grpc_slice_unref(md->items[i].value);
    }
    free(md->items);
    md->items = NULL;
    md->count = 0;
}

/* Builds the metadata of a call: the caller's extra entries, then the client's
 * authorization unless the caller sent one or asked for none. */
static cg_status md_build(const struct cg_client *client, const struct cg_client_call_opts *copts,
                          struct md_list *md, struct cg_client_status *st)
{
    size_t extra = copts != NULL ? copts->metadata_count : 0;
    bool send_auth = client->auth_value != NULL && !(copts != NULL && copts->omit_auth);
    cg_status rc = CG_OK;

    md->items = NULL;
    md->count = 0;
    if (extra > MAX_EXTRA_METADATA) {
        rc = cg_client_status_set_local(st, CG_INVALID_ARGUMENT,
                                        "more than %d extra metadata entries", MAX_EXTRA_METADATA);
        goto out;
    }
    if (extra > 0 && copts->metadata == NULL) {
        rc = cg_client_status_set_local(st, CG_INVALID_ARGUMENT,
                                        "metadata_count is set but metadata is NULL");
        goto out;
    }
    for (size_t i = 0; i < extra; i++) {
        const struct cg_client_metadata *m = &copts->metadata[i];
        if (m->key == NULL || m->value == NULL) {
            rc = cg_client_status_set_local(st, CG_INVALID_ARGUMENT,
                                            "metadata entry %zu has no key or no value", i);
            goto out;
        }
        if (strcasecmp(m->key, "authorization") == 0)
            send_auth = false;
    }
    md->items = calloc(extra + 1, sizeof *md->items);
    if (md->items == NULL) {
        rc = cg_client_status_set_local(st, CG_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < extra; i++) {
        const struct cg_client_metadata *m = &copts->metadata[i];
        size_t len = m->value_len != 0 ? m->value_len : strlen(m->value);
        md->items[md->count].key = grpc_slice_from_copied_string(m->key);
        md->items[md->count].value = grpc_slice_from_copied_buffer(m->value, len);
        md->count++;
    }
    if (send_auth) {
        md->items[md->count].key = grpc_slice_from_static_string("authorization");
        md->items[md->count].value = grpc_slice_from_copied_string(client->auth_value);
        md->count++;
    }
out:
    if (rc)
        md_cleanup(md);
    return rc;
}

static cg_status buffer_from_bytes(const void *data, size_t len, grpc_byte_buffer **out,
                                   struct cg_client_status *st)
{
    if (data == NULL && len > 0)
        return cg_client_status_set_local(st, CG_INVALID_ARGUMENT,
                                          "request is NULL but its length is %zu", len);
    grpc_slice slice = grpc_slice_from_copied_buffer(data != NULL ? data : "", len);
    *out = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return CG_OK;
}

/* Copies a received message into a malloc'd buffer of at most cap bytes. */
static cg_status bytes_from_buffer(grpc_byte_buffer *bb, size_t cap, uint8_t **out, size_t *out_len,
                                   struct cg_client_status *st)
{
    grpc_byte_buffer_reader reader;
    grpc_slice all = grpc_empty_slice();
    uint8_t *data = NULL;
    cg_status rc = CG_OK;

    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return cg_client_status_set_local(st, CG_INTERNAL, "could not read a received message");
    all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    size_t len = GRPC_SLICE_LENGTH(all);
    if (len > cap) {
        rc = cg_client_status_set_local(st, CG_RESOURCE_EXHAUSTED,
                                        "received message of %zu bytes exceeds the cap of %zu", len,
                                        cap);
        goto out;
    }
    data = malloc(len > 0 ? len : 1);
    if (data == NULL) {
        rc = cg_client_status_set_local(st, CG_NOMEM, "out of memory");
        goto out;
    }
    if (len > 0)
        memcpy(data, GRPC_SLICE_START_PTR(all), len);
    *out = data;
    *out_len = len;
out:
    grpc_slice_unref(all);
    return rc;
}

static cg_status pack_message(const ProtobufCMessage *msg, uint8_t **out, size_t *out_len,
                              struct cg_client_status *st)
{
    size_t len = msg != NULL ? protobuf_c_message_get_packed_size(msg) : 0;
    uint8_t *buf = malloc(len > 0 ? len : 1);
    if (buf == NULL)
        return cg_client_status_set_local(st, CG_NOMEM, "out of memory");
    if (len > 0 && protobuf_c_message_pack(msg, buf) != len) {
        free(buf);
        return cg_client_status_set_local(st, CG_INTERNAL, "could not encode the request");
    }
    *out = buf;
    *out_len = len;
    return CG_OK;
}

static cg_status unpack_message(const ProtobufCMessageDescriptor *desc, const uint8_t *data,
                                size_t len, ProtobufCMessage **out, struct cg_client_status *st)
{
    ProtobufCMessage *msg = protobuf_c_message_unpack(desc, NULL, len, data);
    if (msg == NULL)
        return cg_client_status_set_local(
            st, CG_INTERNAL, "the server's answer is not a valid %s (%zu bytes)", desc->name, len);
    *out = msg;
    return CG_OK;
}

/* ------------------------------------------------------------------ client ------ */

void cg_client_opts_init(struct cg_client_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->target = CG_CLIENT_DEFAULT_TARGET;
    opts->timeout_ms = CG_CLIENT_DEFAULT_TIMEOUT_MS;
    opts->max_recv_bytes = CG_CLIENT_DEFAULT_MAX_RECV;
}

/* Reads a PEM file into a NUL-terminated malloc'd string of at most CG_CLIENT_MAX_CA_FILE. */
static cg_status read_pem_file(const char *path, char **out, struct cg_err *err)
{
    FILE *f = NULL;
    char *buf = NULL;
    cg_status rc = CG_OK;

    f = fopen(path, "rb");
    if (f == NULL) {
        rc = cg_err_set(err, CG_IO, "cannot open TLS CA file %s: %s", path, strerror(errno));
        goto out;
    }
    buf = malloc(CG_CLIENT_MAX_CA_FILE + 1);
    if (buf == NULL) {
        rc = cg_err_set(err, CG_NOMEM, "out of memory");
        goto out;
    }
    size_t len = fread(buf, 1, CG_CLIENT_MAX_CA_FILE + 1, f);
    if (ferror(f)) {
        rc = cg_err_set(err, CG_IO, "cannot read TLS CA file %s", path);
        goto out;
    }
    if (len > CG_CLIENT_MAX_CA_FILE) {
        rc = cg_err_set(err, CG_CONFIG, "TLS CA file %s is over %u bytes", path,
                        CG_CLIENT_MAX_CA_FILE);
        goto out;
    }
    buf[len] = '\0';
    /* gRPC's own complaint about a bad file comes much later and much less clearly. */
    if (memchr(buf, '\0', len) != NULL || strstr(buf, "-----BEGIN CERTIFICATE-----") == NULL) {
        rc = cg_err_set(err, CG_CONFIG, "TLS CA file %s holds no PEM certificate", path);
        goto out;
    }
    *out = buf;
    buf = NULL;
out:
    free(buf);
    if (f != NULL)
        fclose(f);
    return rc;
}

struct cg_client *cg_client_new(const struct cg_client_opts *opts, struct cg_err *err)
{
    struct cg_client_opts defaults;
    struct cg_client *client = NULL;
    grpc_channel_credentials *creds = NULL;
    char *pem = NULL;
    bool grpc_started = false;
    cg_status rc = CG_OK;

    if (opts == NULL) {
        cg_client_opts_init(&defaults);
        opts = &defaults;
    }
    const char *target = opts->target != NULL ? opts->target : CG_CLIENT_DEFAULT_TARGET;
    size_t max_recv = opts->max_recv_bytes != 0 ? opts->max_recv_bytes : CG_CLIENT_DEFAULT_MAX_RECV;
    const char *key = opts->bearer_key;

    if (target[0] == '\0') {
        rc = cg_err_set(err, CG_CONFIG, "target is empty");
        goto out;
    }
    if (max_recv > CG_CLIENT_MAX_RECV_LIMIT) {
        rc = cg_err_set(err, CG_CONFIG, "max_recv_bytes is over %u", CG_CLIENT_MAX_RECV_LIMIT);
        goto out;
    }
    if (key != NULL && !header_value_is_printable(key)) {
        rc = cg_err_set(err, CG_CONFIG, "the key has characters that cannot go in a header");
        goto out;
    }
    if (opts->tls_ca_file != NULL) {
        rc = read_pem_file(opts->tls_ca_file, &pem, err);
        if (rc)
            goto out;
    }

    client = calloc(1, sizeof *client);
    if (client == NULL) {
        rc = cg_err_set(err, CG_NOMEM, "out of memory");
        goto out;
    }
    client->timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : CG_CLIENT_DEFAULT_TIMEOUT_MS;
    client->max_recv = max_recv;
    if (key != NULL && key[0] != '\0') {
        size_t len = strlen("Bearer ") + strlen(key) + 1;
        client->auth_value = malloc(len);
        if (client->auth_value == NULL) {
            rc = cg_err_set(err, CG_NOMEM, "out of memory");
            goto out;
        }
        snprintf(client->auth_value, len, "Bearer %s", key);
    }

    grpc_init();
    grpc_started = true;
    if (pem != NULL)
        creds = grpc_ssl_credentials_create(pem, NULL, NULL, NULL);
    else
        creds = grpc_insecure_credentials_create();
    if (creds == NULL) {
        rc = cg_err_set(err, CG_CONFIG, "gRPC refused the channel credentials");
        goto out;
    }

    grpc_arg args[3];
    size_t nargs = 0;
    args[nargs].type = GRPC_ARG_INTEGER;
    args[nargs].key = (char *)GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[nargs].value.integer = (int)max_recv;
    nargs++;
    args[nargs].type = GRPC_ARG_STRING;
    args[nargs].key = (char *)GRPC_ARG_PRIMARY_USER_AGENT_STRING;
    args[nargs].value.string = (char *)"ctxguard-c/" CG_VERSION;
    nargs++;
    if (pem != NULL && opts->tls_server_name != NULL) {
        args[nargs].type = GRPC_ARG_STRING;
        args[nargs].key = (char *)GRPC_SSL_TARGET_NAME_OVERRIDE_ARG;
        args[nargs].value.string = (char *)opts->tls_server_name;
        nargs++;
    }
    grpc_channel_args channel_args = {.num_args = nargs, .args = args};

    client->channel = grpc_channel_create(target, creds, &channel_args);
    if (client->channel == NULL) {
        rc = cg_err_set(err, CG_CONFIG, "gRPC refused the target %s", target);
        goto out;
    }
    client->cq = grpc_completion_queue_create_for_pluck(NULL);
    if (client->cq == NULL) {
        rc = cg_err_set(err, CG_NOMEM, "could not create a completion queue");
        goto out;
    }
    cg_err_clear(err);
out:
    if (creds != NULL)
        grpc_channel_credentials_release(creds);
    free(pem);
    if (rc && client != NULL) {
        if (client->channel != NULL)
            grpc_channel_destroy(client->channel);
        free(client->auth_value);
        free(client);
        client = NULL;
    }
    if (rc && grpc_started)
        grpc_shutdown();
    return client;
}

void cg_client_free(struct cg_client *client)
{
    if (client == NULL)
        return;
    grpc_channel_destroy(client->channel);
    grpc_completion_queue_shutdown(client->cq);
    /* Every call drained its own tags, so this only waits for the shutdown event. */
    while (grpc_completion_queue_pluck(client->cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
               .type != GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(client->cq);
    free(client->auth_value);
    free(client);
    grpc_shutdown();
}

static void drop_grpc_log(gpr_log_func_args *args)
{
    (void)args;
}

void cg_client_set_grpc_logging(bool enabled)
{
    /* NULL restores gRPC's default logger (checked on 1.51). */
    gpr_set_log_function(enabled ? NULL : drop_grpc_log);
}

/* ------------------------------------------------------------------ unary ------- */

cg_status cg_client_unary_raw(struct cg_client *client, const char *method, const void *request,
                              size_t request_len, const struct cg_client_call_opts *copts,
                              uint8_t **response, size_t *response_len, struct cg_client_status *st)
{
    struct cg_client_status own_status;
    struct md_list md = {0};
    grpc_call *call = NULL;
    grpc_byte_buffer *send_buf = NULL;
    grpc_byte_buffer *recv_buf = NULL;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    char call_tag = 0;
    cg_status rc;

    if (st == NULL)
        st = &own_status;
    if (response != NULL)
        *response = NULL;
    if (response_len != NULL)
        *response_len = 0;
    grpc_metadata_array_init(&initial_md);
    grpc_metadata_array_init(&trailing_md);

    rc = check_method(method, st);
    if (rc)
        goto out;
    rc = md_build(client, copts, &md, st);
    if (rc)
        goto out;
    rc = buffer_from_bytes(request, request_len, &send_buf, st);
    if (rc)
        goto out;

    int timeout_ms =
        copts != NULL && copts->timeout_ms > 0 ? copts->timeout_ms : client->timeout_ms;
    grpc_slice method_slice = grpc_slice_from_copied_string(method);
    call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, client->cq,
                                    method_slice, NULL, deadline_in(timeout_ms), NULL);
    grpc_slice_unref(method_slice);
    if (call == NULL) {
        rc = cg_client_status_set_local(st, CG_INTERNAL, "could not create a call to %s", method);
        goto out;
    }

    grpc_op ops[6];
    memset(ops, 0, sizeof ops);
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = md.count;
    ops[0].data.send_initial_metadata.metadata = md.items;
    if (copts != NULL && copts->wait_for_ready)
        ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send_buf;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv_buf;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trailing_md;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;

    grpc_call_error call_err = grpc_call_start_batch(call, ops, 6, &call_tag, NULL);
    if (call_err != GRPC_CALL_OK) {
        rc = status_from_call_error(st, call_err, method);
        goto out;
    }
    /* RECV_STATUS_ON_CLIENT completes by the call's deadline at the latest. */
    grpc_event ev = grpc_completion_queue_pluck(client->cq, &call_tag,
                                                gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (ev.type != GRPC_OP_COMPLETE) {
        rc = cg_client_status_set_local(st, CG_INTERNAL, "completion queue failed during %s",
                                        method);
        goto out;
    }
    rc = status_from_wire(st, code, details);
    if (recv_buf != NULL && response != NULL) {
        size_t len = 0;
        cg_status copy_rc = bytes_from_buffer(recv_buf, client->max_recv, response, &len, st);
        if (copy_rc) {
            rc = copy_rc;
            goto out;
        }
        if (response_len != NULL)
            *response_len = len;
    }
out:
    if (recv_buf != NULL)
        grpc_byte_buffer_destroy(recv_buf);
    if (send_buf != NULL)
        grpc_byte_buffer_destroy(send_buf);
    grpc_metadata_array_destroy(&initial_md);
    grpc_metadata_array_destroy(&trailing_md);
    grpc_slice_unref(details);
    if (call != NULL)
        grpc_call_unref(call);
    md_cleanup(&md);
    return rc;
}

cg_status cg_client_unary(struct cg_client *client, const char *method,
                          const ProtobufCMessage *request,
                          const ProtobufCMessageDescriptor *response_desc,
                          ProtobufCMessage **response, struct cg_client_status *st)
{
    uint8_t *request_bytes = NULL;
    size_t request_len = 0;
    uint8_t *response_bytes = NULL;
    size_t response_len = 0;
    cg_status rc;

    *response = NULL;
    rc = pack_message(request, &request_bytes, &request_len, st);
    if (rc)
        goto out;
    rc = cg_client_unary_raw(client, method, request_bytes, request_len, NULL, &response_bytes,
                             &response_len, st);
    if (rc)
        goto out;
    /* A clean status without a message is a broken server: an empty message is 0 bytes,
     * but it is still a message. */
    if (response_bytes == NULL) {
        rc =
            cg_client_status_set_local(st, CG_INTERNAL, "the server answered OK without a message");
        goto out;
    }
    rc = unpack_message(response_desc, response_bytes, response_len, response, st);
out:
    free(request_bytes);
    free(response_bytes);
    return rc;
}

/* ------------------------------------------------------------------ streams ----- */

/* Waits for the final status (and the send batch), which follows at once once the message
 * stream has ended or the call was cancelled. */
static void stream_finish(struct cg_client_stream *s)
{
    gpr_timespec forever = gpr_inf_future(GPR_CLOCK_REALTIME);
    if (s->status_pending) {
        grpc_completion_queue_pluck(s->client->cq, &s->status_tag, forever, NULL);
        s->status_pending = false;
        status_from_wire(&s->final_status, s->code, s->details);
    }
    if (s->send_pending) {
        grpc_completion_queue_pluck(s->client->cq, &s->send_tag, forever, NULL);
        s->send_pending = false;
    }
    s->done = true;
}

void cg_client_stream_free(struct cg_client_stream *s)
{
    if (s == NULL)
        return;
    if (s->call != NULL) {
        if (!s->done)
            grpc_call_cancel(s->call, NULL);
        if (s->recv_pending) {
            grpc_completion_queue_pluck(s->client->cq, &s->recv_tag,
                                        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
            s->recv_pending = false;
        }
        stream_finish(s);
        grpc_call_unref(s->call);
    }
    if (s->recv_buf != NULL)
        grpc_byte_buffer_destroy(s->recv_buf);
    if (s->send_buf != NULL)
        grpc_byte_buffer_destroy(s->send_buf);
    grpc_metadata_array_destroy(&s->initial_md);
    grpc_metadata_array_destroy(&s->trailing_md);
    grpc_slice_unref(s->details);
    md_cleanup(&s->md);
    free(s);
}

cg_status cg_client_stream_open_raw(struct cg_client *client, const char *method,
                                    const void *request, size_t request_len,
                                    const struct cg_client_call_opts *copts,
                                    struct cg_client_stream **stream, struct cg_client_status *st)
{
    struct cg_client_stream *s = NULL;
    cg_status rc;

    *stream = NULL;
    rc = check_method(method, st);
    if (rc)
        goto out;
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        rc = cg_client_status_set_local(st, CG_NOMEM, "out of memory");
        goto out;
    }
    s->client = client;
    s->details = grpc_empty_slice();
    s->code = GRPC_STATUS_UNKNOWN;
    grpc_metadata_array_init(&s->initial_md);
    grpc_metadata_array_init(&s->trailing_md);

    rc = md_build(client, copts, &s->md, st);
    if (rc)
        goto out;
    rc = buffer_from_bytes(request, request_len, &s->send_buf, st);
    if (rc)
        goto out;

    int timeout_ms = copts != NULL && copts->timeout_ms > 0 ? copts->timeout_ms : -1;
    grpc_slice method_slice = grpc_slice_from_copied_string(method);
    s->call = grpc_channel_create_call(client->channel, NULL, GRPC_PROPAGATE_DEFAULTS, client->cq,
                                       method_slice, NULL, deadline_in(timeout_ms), NULL);
    grpc_slice_unref(method_slice);
    if (s->call == NULL) {
        rc = cg_client_status_set_local(st, CG_INTERNAL, "could not create a call to %s", method);
        goto out;
    }

    grpc_op send_ops[4];
    memset(send_ops, 0, sizeof send_ops);
    send_ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    send_ops[0].data.send_initial_metadata.count = s->md.count;
    send_ops[0].data.send_initial_metadata.metadata = s->md.items;
    if (copts != NULL && copts->wait_for_ready)
        send_ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    send_ops[1].op = GRPC_OP_SEND_MESSAGE;
    send_ops[1].data.send_message.send_message = s->send_buf;
    send_ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    send_ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    send_ops[3].data.recv_initial_metadata.recv_initial_metadata = &s->initial_md;
    grpc_call_error call_err = grpc_call_start_batch(s->call, send_ops, 4, &s->send_tag, NULL);
    if (call_err != GRPC_CALL_OK) {
        /* Nothing was started: the stream is over before it began. */
        s->done = true;
        rc = status_from_call_error(st, call_err, method);
        goto out;
    }
    s->send_pending = true;

    /* The status batch runs from the start so that the call's end is always observed. */
    grpc_op status_op;
    memset(&status_op, 0, sizeof status_op);
    status_op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    status_op.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
    status_op.data.recv_status_on_client.status = &s->code;
    status_op.data.recv_status_on_client.status_details = &s->details;
    call_err = grpc_call_start_batch(s->call, &status_op, 1, &s->status_tag, NULL);
    if (call_err != GRPC_CALL_OK) {
        rc = status_from_call_error(st, call_err, method);
        goto out;
    }
    s->status_pending = true;
    if (st != NULL)
        status_set(st, 0, true, "", 0);
    *stream = s;
    s = NULL;
out:
    cg_client_stream_free(s);
    return rc;
}

cg_status cg_client_stream_open(struct cg_client *client, const char *method,
                                const ProtobufCMessage *request,
                                const struct cg_client_call_opts *copts,
                                struct cg_client_stream **stream, struct cg_client_status *st)
{
    uint8_t *request_bytes = NULL;
    size_t request_len = 0;
    cg_status rc;

    *stream = NULL;
    rc = pack_message(request, &request_bytes, &request_len, st);
    if (rc)
        goto out;
    rc = cg_client_stream_open_raw(client, method, request_bytes, request_len, copts, stream, st);
out:
    free(request_bytes);
    return rc;
}

bool cg_client_stream_done(const struct cg_client_stream *s)
{
    return s->done;
}

void cg_client_stream_cancel(struct cg_client_stream *s)
{
    if (s != NULL && s->call != NULL)
        grpc_call_cancel(s->call, NULL);
}

cg_status cg_client_stream_read_raw(struct cg_client_stream *s, int timeout_ms, uint8_t **message,
                                    size_t *message_len, struct cg_client_status *st)
{
    struct cg_client_status own_status;
    cg_status rc = CG_OK;

    if (st == NULL)
        st = &own_status;
    *message = NULL;
    *message_len = 0;
    if (s->done) {
        *st = s->final_status;
        return st->code;
    }
    if (!s->recv_pending) {
        grpc_op recv_op;
        memset(&recv_op, 0, sizeof recv_op);
        recv_op.op = GRPC_OP_RECV_MESSAGE;
        recv_op.data.recv_message.recv_message = &s->recv_buf;
        grpc_call_error call_err = grpc_call_start_batch(s->call, &recv_op, 1, &s->recv_tag, NULL);
        if (call_err != GRPC_CALL_OK)
            return status_from_call_error(st, call_err, "a stream");
        s->recv_pending = true;
    }
    grpc_event ev =
        grpc_completion_queue_pluck(s->client->cq, &s->recv_tag, deadline_in(timeout_ms), NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return cg_client_status_set_local(st, CG_DEADLINE_EXCEEDED, "no message within %d ms",
                                          timeout_ms);
    if (ev.type != GRPC_OP_COMPLETE)
        return cg_client_status_set_local(st, CG_INTERNAL, "completion queue failed on a stream");
    s->recv_pending = false;
    if (s->recv_buf != NULL) {
        rc = bytes_from_buffer(s->recv_buf, s->client->max_recv, message, message_len, st);
        grpc_byte_buffer_destroy(s->recv_buf);
        s->recv_buf = NULL;
        if (rc == CG_OK)
            status_set(st, 0, false, "", 0);
        return rc;
    }
    stream_finish(s);
    *st = s->final_status;
    return st->code;
}

cg_status cg_client_stream_read(struct cg_client_stream *s, int timeout_ms,
                                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **message,
                                struct cg_client_status *st)
{
    uint8_t *bytes = NULL;
    size_t len = 0;
    cg_status rc;

    *message = NULL;
    rc = cg_client_stream_read_raw(s, timeout_ms, &bytes, &len, st);
    if (rc || bytes == NULL)
        goto out;
    rc = unpack_message(desc, bytes, len, message, st);
out:
    free(bytes);
    return rc;
}

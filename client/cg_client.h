/* cg_client.h - the C client library of ctxguard: a channel to one server, unary calls
 * (typed with protobuf-c, or raw bytes for tests) and server-streaming reads.
 *
 * Model: a struct cg_client owns one gRPC channel and one completion queue (pluck type);
 * every call made through it runs to completion on the calling thread, except a stream,
 * which stays open between cg_client_stream_read() calls. Several streams and unary calls
 * may be interleaved on one client, from one thread.
 *
 * Thread-safety: a client and its streams are NOT thread-safe: use one client per thread
 * (clients are cheap; each one initialises the gRPC library, reference-counted).
 * The one exception is cg_client_stream_cancel(), which any thread may call while another
 * thread reads the stream.
 *
 * Statuses: the gRPC codes 0..16 are the first 17 values of cg_status (CG_OK ..
 * CG_UNAUTHENTICATED), so a call returns the gRPC status as a cg_status. Failures that
 * happen in this library rather than on the wire (a response that does not decode, a
 * request that does not encode, metadata that gRPC refuses to send, a read that timed out)
 * are reported with one of those codes too and st->local set.
 */
#ifndef CG_CLIENT_H
#define CG_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "base/status.h"

#define CG_CLIENT_DEFAULT_TARGET "127.0.0.1:50051"
#define CG_CLIENT_DEFAULT_TIMEOUT_MS 10000
/* What a client accepts in one received message unless told otherwise (gRPC's default). */
#define CG_CLIENT_DEFAULT_MAX_RECV (4u * 1024u * 1024u)
/* Upper bound on max_recv_bytes, and on a PEM root-certificate file. */
#define CG_CLIENT_MAX_RECV_LIMIT (64u * 1024u * 1024u)
#define CG_CLIENT_MAX_CA_FILE (1024u * 1024u)
/* The status message kept from the server, truncated beyond this (including the NUL). */
#define CG_CLIENT_MSG_MAX 512

/* How to reach a server. Initialise with cg_client_opts_init(); every string is borrowed
 * during cg_client_new() only. */
struct cg_client_opts {
    const char *target;          /* "host:port" or any gRPC target; NULL: the default */
    const char *bearer_key;      /* sent as `authorization: Bearer <key>`; NULL or "": none */
    const char *tls_ca_file;     /* PEM root CA file; set: TLS, NULL: plaintext */
    const char *tls_server_name; /* TLS only: name expected in the server's certificate
                                    instead of the target's host; NULL: the target's */
    int timeout_ms;              /* default deadline of a unary call; <= 0: the default */
    size_t max_recv_bytes;       /* cap on one received message; 0: the default */
};

/* The outcome of a call as the caller sees it. Caller-allocated; filled by every call
 * that takes one (st may be NULL where documented). Never allocates. */
struct cg_client_status {
    cg_status code;                  /* the gRPC status (CG_OK .. CG_UNAUTHENTICATED) */
    int grpc_code;                   /* the same as a gRPC code number, 0..16 */
    const char *name;                /* canonical name ("NOT_FOUND"), static storage */
    bool local;                      /* true: produced by this library, never on the wire */
    char message[CG_CLIENT_MSG_MAX]; /* the status details text, NUL-terminated, may be
                                        empty; truncated to fit */
};

/* One extra metadata entry for a call. Keys ending in "-bin" carry binary values (gRPC
 * base64-encodes them). gRPC itself refuses, before anything is sent, keys that are not
 * lowercase [a-z0-9._-] and other values that are not printable ASCII: such a call returns
 * CG_INVALID_ARGUMENT with st->local set. Garbage meant for the server must therefore be
 * printable ("Bearer", "Basic x", "Bearer not-a-key"). */
struct cg_client_metadata {
    const char *key;
    const char *value;
    size_t value_len; /* 0: strlen(value) */
};

/* Per-call options of the raw and streaming calls. Zero-initialise ({0}) for defaults. */
struct cg_client_call_opts {
    /* Deadline of the call in ms from now. Unary: <= 0 means the client's timeout_ms.
     * Streams: <= 0 means no deadline (reads still take their own timeout). */
    int timeout_ms;
    /* Extra metadata sent with the call; borrowed during the call that takes it. When one
     * of them is `authorization`, the client's own bearer key is not sent. */
    const struct cg_client_metadata *metadata;
    size_t metadata_count;
    /* Send no `authorization` from the client's key (explicit metadata is still sent). */
    bool omit_auth;
    /* Wait for the channel to become ready (up to the deadline) instead of failing with
     * UNAVAILABLE at once when the server cannot be reached. */
    bool wait_for_ready;
};

struct cg_client;
struct cg_client_stream;

/* Sets opts to the defaults: default target, no key, plaintext, default timeout and cap. */
void cg_client_opts_init(struct cg_client_opts *opts);

/* Creates a client for opts (NULL: all defaults). The channel connects lazily, on the first
 * call, so an unreachable server is reported by calls, not here.
 * Returns the client, or NULL with err (may be NULL) set: CG_IO when the CA file cannot be
 * read, CG_CONFIG for a bad option (empty target, CA file over CG_CLIENT_MAX_CA_FILE,
 * max_recv_bytes over CG_CLIENT_MAX_RECV_LIMIT, a key with characters that cannot go in a
 * header), CG_NOMEM. The caller owns the client and frees it with cg_client_free(). */
struct cg_client *cg_client_new(const struct cg_client_opts *opts, struct cg_err *err);

/* Frees a client and closes its channel. All of its streams must have been freed before.
 * client may be NULL. */
void cg_client_free(struct cg_client *client);

/* Makes a unary call of method ("/ctxguard.v1.AdminService/CreateTenant") with request
 * (NULL: an empty message), under the client's default timeout, and decodes the answer as
 * response_desc.
 * On CG_OK, *response is the decoded message, owned by the caller, freed with
 * protobuf_c_message_free_unpacked(*response, NULL). On any other return *response is
 * NULL. Returns st->code; st (may be NULL) receives the status. A response that does not
 * decode gives CG_INTERNAL with st->local set. */
CG_MUST_CHECK cg_status cg_client_unary(struct cg_client *client, const char *method,
                                        const ProtobufCMessage *request,
                                        const ProtobufCMessageDescriptor *response_desc,
                                        ProtobufCMessage **response, struct cg_client_status *st);

/* Makes a unary call with request bytes sent as they are (they need not be valid protobuf
 * and may be of any size; NULL with request_len 0 is an empty message) and call options
 * copts (NULL: defaults).
 * On return, *response / *response_len hold the bytes of the answer's message when the
 * server sent one (possibly with a non-OK status, which a well-behaved server does not
 * do), else NULL / 0; the caller frees *response with free(). A message over the client's
 * max_recv_bytes ends the call with RESOURCE_EXHAUSTED. response and response_len may both
 * be NULL to discard the answer. Returns st->code; st may be NULL. */
CG_MUST_CHECK cg_status cg_client_unary_raw(struct cg_client *client, const char *method,
                                            const void *request, size_t request_len,
                                            const struct cg_client_call_opts *copts,
                                            uint8_t **response, size_t *response_len,
                                            struct cg_client_status *st);

/* Starts a server-streaming call of method with one request message (typed, or raw bytes)
 * and call options copts (NULL: defaults; no deadline). Returns at once: an unreachable
 * server or a refused call is reported by the first cg_client_stream_read*().
 * On CG_OK, *stream is the open stream, owned by the caller, freed with
 * cg_client_stream_free() before the client is freed. On error *stream is NULL and st
 * (may be NULL) says why (local errors only: encoding, refused metadata, CG_NOMEM). */
CG_MUST_CHECK cg_status cg_client_stream_open(struct cg_client *client, const char *method,
                                              const ProtobufCMessage *request,
                                              const struct cg_client_call_opts *copts,
                                              struct cg_client_stream **stream,
                                              struct cg_client_status *st);
CG_MUST_CHECK cg_status cg_client_stream_open_raw(struct cg_client *client, const char *method,
                                                  const void *request, size_t request_len,
                                                  const struct cg_client_call_opts *copts,
                                                  struct cg_client_stream **stream,
                                                  struct cg_client_status *st);

/* Reads the next message of a stream, waiting up to timeout_ms (< 0: without limit).
 * - A message arrived: returns CG_OK and *message (raw: *message / *message_len, freed with
 *   free(); typed: decoded as desc, freed with protobuf_c_message_free_unpacked()).
 * - The stream ended: *message is NULL and the return value and st are the call's final
 *   status (CG_OK when the server ended it cleanly); cg_client_stream_done() is then true
 *   and further reads return the same status again.
 * - Nothing within timeout_ms: returns CG_DEADLINE_EXCEEDED with st->local set and
 *   *message NULL; the stream stays open and the next read waits for the same message.
 * A typed read whose message does not decode returns CG_INTERNAL (st->local set); the
 * stream stays open. st may be NULL. */
CG_MUST_CHECK cg_status cg_client_stream_read_raw(struct cg_client_stream *stream, int timeout_ms,
                                                  uint8_t **message, size_t *message_len,
                                                  struct cg_client_status *st);
CG_MUST_CHECK cg_status cg_client_stream_read(struct cg_client_stream *stream, int timeout_ms,
                                              const ProtobufCMessageDescriptor *desc,
                                              ProtobufCMessage **message,
                                              struct cg_client_status *st);

/* True once the stream's final status has been received by a read. */
bool cg_client_stream_done(const struct cg_client_stream *stream);

/* Cancels the stream: the server sees the call cancelled, pending and later reads end with
 * CG_CANCELLED (or the status that arrived first). Does not free. Thread-safe: may be called
 * from another thread than the one reading, any time before cg_client_stream_free().
 * Harmless once the stream is done. */
void cg_client_stream_cancel(struct cg_client_stream *stream);

/* Cancels the stream when it is still open, waits for gRPC to release it (promptly, no
 * network wait) and frees it. stream may be NULL. */
void cg_client_stream_free(struct cg_client_stream *stream);

/* Turns gRPC's own log lines on stderr off (false) or back to gRPC's default (true). The
 * status messages of calls carry the same reasons, so tools usually turn them off.
 * Process-wide; call it before creating clients, not while calls run. */
void cg_client_set_grpc_logging(bool enabled);

/* Fills st (may be NULL) as a local status with code and a formatted message. Internal
 * codes become the gRPC code they map to (CG_NOMEM: CG_RESOURCE_EXHAUSTED). Returns st's
 * code. For callers that report their own failures in the same shape. */
cg_status cg_client_status_set_local(struct cg_client_status *st, cg_status code, const char *fmt,
                                     ...) CG_PRINTF(3, 4);

#endif

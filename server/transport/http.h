/* http.h - the HTTP listener beside gRPC (libmicrohttpd): /metrics, /healthz, /readyz, and
 * a route table (the console, the JSON API and its Server-Sent Events).
 *
 * One MHD daemon with one internal thread that polls every connection. A route's handler
 * runs on that thread and answers with cg_http_respond, either before it returns or later
 * from any thread (the connection is suspended meanwhile and resumed by the answer), so a
 * handler that waits on something else never blocks the listener. Bounded: at most
 * max_connections at once (more are refused), a per-connection memory cap (request line and
 * headers; larger requests get 431/414 from MHD), an idle timeout, and request bodies cut
 * off at max_body_bytes (the connection is closed).
 *
 * Built-in routes (GET and HEAD; other methods 405, other paths 404):
 *   /healthz  200 "ok" while the process runs
 *   /readyz   200 while the health state (base/health.h) is SERVING, 503 otherwise: the
 *             same state gRPC's health service reports
 *   /metrics  the registry (base/metrics.h) in Prometheus text format 0.0.4, with the
 *             process_* families added at start
 */
#ifndef CG_TRANSPORT_HTTP_H
#define CG_TRANSPORT_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct cg_http;
struct cg_http_request;
struct cg_metrics;
struct cg_health;

/* Request methods, as bits of a route's `methods`. */
enum { CG_HTTP_GET = 1u, CG_HTTP_HEAD = 2u, CG_HTTP_POST = 4u, CG_HTTP_OTHER = 8u };

/* A route's handler, on the listener's thread. It must answer the request exactly once
 * with cg_http_respond (now, or later from any thread). ctx is the route's. */
typedef void (*cg_http_handler_cb)(struct cg_http_request *req, void *ctx);

struct cg_http_route {
    const char *path; /* the exact path; a path ending in '/' is a prefix ("/api/v1/") */
    unsigned methods; /* CG_HTTP_* bits it answers; others get 405 */
    cg_http_handler_cb handler;
    void *ctx;
};

struct cg_http_opts {
    const char *listen;   /* host:port or [ipv6]:port; port 0 picks a free one */
    const char *tls_cert; /* PEM files; both set: HTTPS only. NULL or "": plain HTTP */
    const char *tls_key;
    unsigned max_connections;           /* 0: 64 */
    unsigned idle_timeout_s;            /* 0: 30 */
    size_t max_body_bytes;              /* 0: 64 KiB */
    struct cg_metrics *metrics;         /* /metrics (borrowed; NULL: 404) */
    const struct cg_health *health;     /* /readyz (borrowed; NULL: always 503) */
    const struct cg_http_route *routes; /* more routes (borrowed, with their ctx, until
                                         * cg_http_stop); matched after the built-in ones */
    size_t nroutes;
};

/* Starts the listener: binds opts->listen and starts its thread. Registers the process_*
 * families in opts->metrics (harmless when already there). opts and what it points to
 * are borrowed until cg_http_stop. NULL with err filled (CG_CONFIG naming the http_* key
 * at fault: address not usable or in use, TLS files unreadable or not a matching pair, TLS
 * not built into libmicrohttpd; CG_NOMEM). Not thread-safe (call from the thread that
 * owns the server). */
struct cg_http *cg_http_start(const struct cg_http_opts *opts, struct cg_err *err);

/* The port actually bound (useful with port 0). */
int cg_http_port(const struct cg_http *http);

/* Stops the listener (closing its connections) and frees it. Every request a handler
 * answers later must have been answered before. NULL is a no-op. Not thread-safe. */
void cg_http_stop(struct cg_http *http);

/* The request's path (without the query string; borrowed, valid until answered) and
 * method (a CG_HTTP_* bit). Thread-safe until answered. */
const char *cg_http_request_path(const struct cg_http_request *req);
unsigned cg_http_request_method(const struct cg_http_request *req);

/* A request header's value (borrowed), NULL when absent. Only in the handler's call, on
 * the listener's thread. */
const char *cg_http_request_header(struct cg_http_request *req, const char *name);

/* The request's body (NUL-terminated; NULL with *len 0 when none came), borrowed until the
 * request is answered. Thread-safe until answered. */
const char *cg_http_request_body(const struct cg_http_request *req, size_t *len);

/* Calls cb with each query argument (URL-decoded key and value, "" for a key without
 * one), in order, until it returns false; returns false when it did. Only in the handler's
 * call, on the listener's thread. */
typedef bool (*cg_http_arg_cb)(void *ctx, const char *key, const char *value);
bool cg_http_request_args(struct cg_http_request *req, cg_http_arg_cb cb, void *ctx);

/* Answers req with status, content_type and body, taking body (malloc'd, or NULL with
 * len 0; freed by the listener, also on error). Exactly once per request; from any
 * thread. After it returns req may be gone. CG_NOMEM when the answer cannot be made: the
 * connection is closed instead. */
cg_status cg_http_respond(struct cg_http_request *req, int status, const char *content_type,
                          char *body, size_t len);

/* Answers req with a body that outlives the listener (static data: not copied, not freed)
 * and extra headers (name, value, ..., NULL; borrowed). As cg_http_respond otherwise. */
cg_status cg_http_respond_static(struct cg_http_request *req, int status, const char *content_type,
                                 const void *body, size_t len, const char *const *headers);

/* The same with a copy of the NUL-terminated text, as text/plain. */
cg_status cg_http_respond_text(struct cg_http_request *req, int status, const char *text);

/* A streamed answer (Server-Sent Events): a body of unknown length (chunked) that a producer
 * writes on the listener's thread, a piece at a time, for as long as it likes. */
struct cg_http_stream;

/* The producer: writes up to cap bytes of the body into buf and returns how many (> 0);
 * 0 when it has nothing now (the connection then sleeps, holding no thread, until
 * cg_http_stream_wake); < 0 to end the body. On the listener's thread, one call at a time;
 * not called once the client has closed its side (seen at each wake): the stream ends. */
typedef long (*cg_http_stream_read_cb)(void *ctx, char *buf, size_t cap);

/* Runs once when the listener is done with the stream (the body ended, the client went away,
 * the listener stopped, or the answer could not be made), on the thread where that happened:
 * the producer is not called again and wakes must have stopped before it returns. */
typedef void (*cg_http_stream_done_cb)(void *ctx);

/* A stream of ctx, not yet an answer (NULL when out of memory; nothing runs then). */
struct cg_http_stream *cg_http_stream_new(cg_http_stream_read_cb read, cg_http_stream_done_cb done,
                                          void *ctx);

/* Answers req with status, content_type and the extra headers (as cg_http_respond_static),
 * the body coming from s, which the listener owns from now on (done runs once, also when
 * the answer cannot be made: CG_NOMEM, the connection is closed). From any thread. */
cg_status cg_http_respond_stream(struct cg_http_request *req, int status, const char *content_type,
                                 const char *const *headers, struct cg_http_stream *s);

/* Tells the stream's producer that it may have something to write: a sleeping connection is
 * called again. Any thread, until its done callback has run. */
void cg_http_stream_wake(struct cg_http_stream *s);

#endif

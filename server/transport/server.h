/* server.h - the gRPC server on C core: completion-queue threads, calls, timers, streams.
 *
 * One completion queue per worker thread, each with request slots pre-posted for every
 * method of the rpc table and for unknown methods (answered UNIMPLEMENTED at once). A call
 * lives on the thread whose queue it arrived on: its batches and its timer are handled
 * there without locks. Handlers that need storage run on the worker pool, whose threads
 * own their PostgreSQL and Redis connections; the pool wakes the call's queue when done.
 * Replies held for backpressure wait on the thread's timer heap, never on a sleeping thread.
 *
 * Every call of a method of the table counts in the app's metrics registry as the Go and
 * Java gRPC interceptors name it: grpc_server_started_total where it starts,
 * grpc_server_handled_total{grpc_code} and grpc_server_handling_seconds where its final
 * status is sent (CANCELLED when it never was), each completion-queue thread in its own
 * metrics slot. With http_listen set, the HTTP listener (transport/http.h: /metrics,
 * /healthz, /readyz) runs from the start to the end of the drain.
 */
#ifndef CG_TRANSPORT_SERVER_H
#define CG_TRANSPORT_SERVER_H

#include "base/status.h"

struct cg_server;
struct cg_app;

/* Builds the server from app (app/app.h, started: its config gives the listen address,
 * TLS, sizes and threads), starts its threads and starts serving, and the HTTP listener
 * when http_listen is set (logged as msg="http listening" with its port). Each thread's cg_rpc_env
 * is app's (cg_app_env) plus what the thread makes from app's factories: a store for the
 * pool threads and the health monitor, an LLM client for the pool threads, the LISTEN
 * connection for the events thread. app is borrowed and must outlive the server.
 * NULL with err filled when the address (or the HTTP one) cannot be bound, TLS files cannot
 * be read, threads cannot start, or the metrics cannot be registered. */
struct cg_server *cg_server_start(struct cg_app *app, struct cg_err *err);

/* The port actually bound (useful with port 0). */
int cg_server_port(const struct cg_server *srv);

/* Graceful stop: reports NOT_SERVING, stops taking calls, lets in-flight calls finish for
 * up to cfg->shutdown_grace_ms, cancels what is left, then stops every thread.
 * Call once, from the thread that started the server. */
void cg_server_shutdown(struct cg_server *srv);

/* Frees a server that was shut down (with what its threads made from the app; the app
 * itself stays). NULL is a no-op. */
void cg_server_free(struct cg_server *srv);

#endif

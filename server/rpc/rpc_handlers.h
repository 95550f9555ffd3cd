/* rpc_handlers.h - the handlers of the method table, one file per service. Internal to rpc/.
 *
 * Each unary or bidi handler is a cg_rpc_handler_fn (rpc.h), written out as an ordinary
 * function; the method table (generated at build time from the .proto files: README
 * "Architecture") names them. */
#ifndef CG_RPC_HANDLERS_H
#define CG_RPC_HANDLERS_H

#include "rpc/rpc.h"
#include "rpc/rpc_check.h"

/* A protobuf-c message of `type` in the call's arena, initialised with `init`; NULL when the
 * arena is full. */
#define NEW(call, type, init)                                                                      \
    ({                                                                                             \
        type *m_ = cg_arena_alloc((call)->arena, sizeof(type));                                    \
        if (m_ != NULL)                                                                            \
            init(m_);                                                                              \
        m_;                                                                                        \
    })

/* The answer of a call whose arena ran out. */
#define OOM(call) cg_err_set(&(call)->err, CG_RESOURCE_EXHAUSTED, "out of memory")

/* rpc_health.c */
cg_status cg_rpc_health_check(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_health_watch(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                              ProtobufCMessage **response, bool *finished);

/* rpc_admin.c */
cg_status cg_rpc_admin_create_tenant(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_get_tenant(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_list_tenants(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_update_tenant_settings(struct cg_rpc_call *call,
                                              const struct cg_rpc_env *env,
                                              const ProtobufCMessage *request,
                                              ProtobufCMessage **response);
cg_status cg_rpc_admin_create_api_key(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_list_api_keys(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_revoke_api_key(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_list_audit_events(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                         const ProtobufCMessage *request,
                                         ProtobufCMessage **response);
cg_status cg_rpc_admin_who_am_i(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_admin_ping(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response);

/* rpc_budget.c */
cg_status cg_rpc_budget_set(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_budget_get(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, ProtobufCMessage **response);
/* try_inline methods: cg_rpc_try_fn (rpc.h) */
cg_status cg_rpc_budget_check(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, ProtobufCMessage **response,
                              cg_op_fate *fate);
cg_status cg_rpc_budget_reserve(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response,
                                cg_op_fate *fate);
cg_status cg_rpc_budget_commit(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                               const ProtobufCMessage *request, ProtobufCMessage **response,
                               cg_op_fate *fate);
cg_status cg_rpc_budget_release(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_budget_record_usage(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response);

/* rpc_watch.c: WatchUsage (server stream; open on the pool, poll on the queue) */
cg_status cg_rpc_watch_open(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream);
cg_status cg_rpc_watch_poll(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                            ProtobufCMessage **response, bool *finished);

/* rpc_budget_scopes.c */
cg_status cg_rpc_budget_close_scope(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_budget_get_usage(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_budget_list_scopes(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                    const ProtobufCMessage *request, ProtobufCMessage **response);
/* rpc_budget_notify.c */
cg_status cg_rpc_budget_create_notification_channel(struct cg_rpc_call *call,
                                                    const struct cg_rpc_env *env,
                                                    const ProtobufCMessage *request,
                                                    ProtobufCMessage **response);
cg_status cg_rpc_budget_list_notification_channels(struct cg_rpc_call *call,
                                                   const struct cg_rpc_env *env,
                                                   const ProtobufCMessage *request,
                                                   ProtobufCMessage **response);
cg_status cg_rpc_budget_delete_notification_channel(struct cg_rpc_call *call,
                                                    const struct cg_rpc_env *env,
                                                    const ProtobufCMessage *request,
                                                    ProtobufCMessage **response);
cg_status cg_rpc_budget_list_notification_deliveries(struct cg_rpc_call *call,
                                                     const struct cg_rpc_env *env,
                                                     const ProtobufCMessage *request,
                                                     ProtobufCMessage **response);
cg_status cg_rpc_budget_redrive_notification_deliveries(struct cg_rpc_call *call,
                                                        const struct cg_rpc_env *env,
                                                        const ProtobufCMessage *request,
                                                        ProtobufCMessage **response);
/* rpc_budget_history.c */
cg_status cg_rpc_budget_get_usage_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                          const ProtobufCMessage *request,
                                          ProtobufCMessage **response);

/* rpc_budget_approvals.c */
cg_status cg_rpc_budget_resolve_approval(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                         const ProtobufCMessage *request,
                                         ProtobufCMessage **response);
cg_status cg_rpc_budget_get_approval(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_budget_list_approvals(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                       const ProtobufCMessage *request,
                                       ProtobufCMessage **response);

/* rpc_context_count.c */
/* try_inline: cg_rpc_try_fn (rpc.h) */
cg_status cg_rpc_context_count_tokens(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response,
                                      cg_op_fate *fate);
/* rpc_context_summarize.c */
cg_status cg_rpc_context_summarize(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                   const ProtobufCMessage *request, ProtobufCMessage **response);
/* rpc_context_compress.c */
cg_status cg_rpc_context_compress(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_context_validate(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  const ProtobufCMessage *request, ProtobufCMessage **response);

/* rpc_context_state.c */
cg_status cg_rpc_context_get_artifact(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_context_list_artifacts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response);
cg_status cg_rpc_context_get_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_context_get_stats(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                   const ProtobufCMessage *request, ProtobufCMessage **response);
cg_status cg_rpc_context_delete_session(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response);
/* rpc_context_search.c */
cg_status cg_rpc_context_search_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response);

#endif

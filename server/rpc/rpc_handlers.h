/* rpc_handlers.h - the handlers of the method table, one file per service. Internal to rpc/. */
#ifndef CG_RPC_HANDLERS_H
#define CG_RPC_HANDLERS_H

#include "rpc/rpc.h"

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

#define CG_HANDLER(name)                                                                           \
    cg_status name(struct cg_rpc_call *call, const struct cg_rpc_env *env,                         \
                   const ProtobufCMessage *request, ProtobufCMessage **response)

/* rpc_health.c */
CG_HANDLER(cg_rpc_health_check);
cg_status cg_rpc_health_watch(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                              ProtobufCMessage **response, bool *finished);

/* rpc_admin.c */
CG_HANDLER(cg_rpc_admin_create_tenant);
CG_HANDLER(cg_rpc_admin_get_tenant);
CG_HANDLER(cg_rpc_admin_list_tenants);
CG_HANDLER(cg_rpc_admin_update_tenant_settings);
CG_HANDLER(cg_rpc_admin_create_api_key);
CG_HANDLER(cg_rpc_admin_list_api_keys);
CG_HANDLER(cg_rpc_admin_revoke_api_key);
CG_HANDLER(cg_rpc_admin_list_audit_events);
CG_HANDLER(cg_rpc_admin_who_am_i);
CG_HANDLER(cg_rpc_admin_ping);

/* rpc_budget.c */
CG_HANDLER(cg_rpc_budget_set);
CG_HANDLER(cg_rpc_budget_get);
CG_HANDLER(cg_rpc_budget_check);
CG_HANDLER(cg_rpc_budget_reserve);
CG_HANDLER(cg_rpc_budget_commit);
CG_HANDLER(cg_rpc_budget_release);
CG_HANDLER(cg_rpc_budget_record_usage);

/* rpc_watch.c: WatchUsage (server stream; open on the pool, poll on the queue) */
cg_status cg_rpc_watch_open(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream);
cg_status cg_rpc_watch_poll(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const ProtobufCMessage *request, struct cg_rpc_stream *stream,
                            ProtobufCMessage **response, bool *finished);

/* rpc_budget_scopes.c */
CG_HANDLER(cg_rpc_budget_close_scope);
CG_HANDLER(cg_rpc_budget_get_usage);
CG_HANDLER(cg_rpc_budget_list_scopes);

/* rpc_budget_approvals.c */
CG_HANDLER(cg_rpc_budget_resolve_approval);
CG_HANDLER(cg_rpc_budget_get_approval);
CG_HANDLER(cg_rpc_budget_list_approvals);

/* rpc_context_count.c */
CG_HANDLER(cg_rpc_context_count_tokens);
/* rpc_context_summarize.c */
CG_HANDLER(cg_rpc_context_summarize);
/* rpc_context_compress.c */
CG_HANDLER(cg_rpc_context_compress);
CG_HANDLER(cg_rpc_context_validate);

/* rpc_context_state.c */
CG_HANDLER(cg_rpc_context_get_artifact);
CG_HANDLER(cg_rpc_context_list_artifacts);
CG_HANDLER(cg_rpc_context_get_history);
CG_HANDLER(cg_rpc_context_get_stats);

/* Checks a required text field: 1..max_chars code points, no control characters.
 * On error fills call->err naming `field`. */
cg_status cg_rpc_check_name(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_chars, bool required) CG_MUST_CHECK;

/* Checks a UUID field (required). INVALID_ARGUMENT naming `field` otherwise. */
cg_status cg_rpc_check_uuid(struct cg_rpc_call *call, const char *field,
                            const char *value) CG_MUST_CHECK;

/* Copies a store error into call->err and returns its code. */
cg_status cg_rpc_store_error(struct cg_rpc_call *call, const struct cg_err *serr);

#endif

/* rpc_methods.c - the method table: every RPC the server answers, who may call it (the one
 * role table: README "Roles and keys") and its handler.
 *
 * Methods whose work is not built yet have no handler: they authenticate like the real one
 * will, then answer UNIMPLEMENTED naming the planned work (never a fake success).
 */
#include "rpc/rpc_handlers.h"

#include <string.h>

#include "ctxguard/v1/admin.pb-c.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "ctxguard/v1/context.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "rpc/reflection.h"

#define ADMIN "ctxguard.v1.AdminService"
#define BUDGET "ctxguard.v1.BudgetService"
#define CONTEXT "ctxguard.v1.ContextService"
#define HEALTH "grpc.health.v1.Health"
#define REFL_V1 "grpc.reflection.v1.ServerReflection"
#define REFL_V1A "grpc.reflection.v1alpha.ServerReflection"

/* Who may call what (core/keyrole.h). A tenant `admin` key may do everything inside its
 * tenant, which is what every key could do before roles existed (migration 0016). */
#define ANYONE CG_ALLOW_ANYONE
#define SERVER_ADMIN CG_ALLOW_SERVER_ADMIN
#define READERS CG_ALLOW_TENANT_KEYS                         /* every tenant role */
#define SPENDERS (CG_ALLOW_AGENT | CG_ALLOW_TENANT_ADMIN)    /* spend, count, compress */
#define MANAGERS (CG_ALLOW_OPERATOR | CG_ALLOW_TENANT_ADMIN) /* budgets, approvals, audit */

#define UNARY(svc, name, auth_, blocking_, req, resp, fn)                                          \
    {                                                                                              \
        "/" svc "/" #name, svc, CG_RPC_UNARY, auth_, blocking_, &req##__descriptor,                \
            &resp##__descriptor, fn, NULL, NULL, NULL, false                                       \
    }

/* A blocking unary method that is first tried on the completion-queue thread (rpc.h,
 * try_inline): CheckBudget answers from the process's cache there when it can, CountTokens
 * counts small requests exactly there, Reserve and Commit join the batch of their tenant
 * that a pool thread is running (rpc_budget_batch.c). */
#define UNARY_TRY_INLINE(svc, name, auth_, req, resp, fn)                                          \
    {                                                                                              \
        "/" svc "/" #name, svc, CG_RPC_UNARY, auth_, true, &req##__descriptor,                     \
            &resp##__descriptor, fn, NULL, NULL, NULL, true                                        \
    }

static const struct cg_rpc_method methods[] = {
    UNARY(HEALTH, Check, ANYONE, false, grpc__health__v1__health_check_request,
          grpc__health__v1__health_check_response, cg_rpc_health_check),
    {"/" HEALTH "/Watch", HEALTH, CG_RPC_SERVER_STREAM, ANYONE, false,
     &grpc__health__v1__health_check_request__descriptor,
     &grpc__health__v1__health_check_response__descriptor, NULL, cg_rpc_health_watch, NULL, NULL,
     false},
    {"/" REFL_V1 "/ServerReflectionInfo", REFL_V1, CG_RPC_BIDI_EACH, ANYONE, false,
     &grpc__reflection__v1__server_reflection_request__descriptor,
     &grpc__reflection__v1__server_reflection_response__descriptor, cg_rpc_reflection_info, NULL,
     NULL, NULL, false},
    /* v1alpha has the same messages on the wire; the v1 descriptors decode and encode it. */
    {"/" REFL_V1A "/ServerReflectionInfo", REFL_V1A, CG_RPC_BIDI_EACH, ANYONE, false,
     &grpc__reflection__v1__server_reflection_request__descriptor,
     &grpc__reflection__v1__server_reflection_response__descriptor, cg_rpc_reflection_info, NULL,
     NULL, NULL, false},

    UNARY(ADMIN, CreateTenant, SERVER_ADMIN, true, ctxguard__v1__create_tenant_request,
          ctxguard__v1__create_tenant_response, cg_rpc_admin_create_tenant),
    UNARY(ADMIN, GetTenant, SERVER_ADMIN | CG_ALLOW_TENANT_ADMIN, true,
          ctxguard__v1__get_tenant_request, ctxguard__v1__get_tenant_response,
          cg_rpc_admin_get_tenant),
    UNARY(ADMIN, ListTenants, SERVER_ADMIN, true, ctxguard__v1__list_tenants_request,
          ctxguard__v1__list_tenants_response, cg_rpc_admin_list_tenants),
    UNARY(ADMIN, UpdateTenantSettings, SERVER_ADMIN | CG_ALLOW_TENANT_ADMIN, true,
          ctxguard__v1__update_tenant_settings_request,
          ctxguard__v1__update_tenant_settings_response, cg_rpc_admin_update_tenant_settings),
    UNARY(ADMIN, CreateApiKey, SERVER_ADMIN | MANAGERS, true, ctxguard__v1__create_api_key_request,
          ctxguard__v1__create_api_key_response, cg_rpc_admin_create_api_key),
    UNARY(ADMIN, ListApiKeys, SERVER_ADMIN | CG_ALLOW_TENANT_ADMIN, true,
          ctxguard__v1__list_api_keys_request, ctxguard__v1__list_api_keys_response,
          cg_rpc_admin_list_api_keys),
    UNARY(ADMIN, RevokeApiKey, SERVER_ADMIN | CG_ALLOW_TENANT_ADMIN, true,
          ctxguard__v1__revoke_api_key_request, ctxguard__v1__revoke_api_key_response,
          cg_rpc_admin_revoke_api_key),
    UNARY(ADMIN, WhoAmI, SERVER_ADMIN | READERS, true, ctxguard__v1__who_am_irequest,
          ctxguard__v1__who_am_iresponse, cg_rpc_admin_who_am_i),
    /* The admin key is checked in memory, so Ping never needs the pool. */
    UNARY(ADMIN, Ping, SERVER_ADMIN, false, ctxguard__v1__ping_request, ctxguard__v1__ping_response,
          cg_rpc_admin_ping),
    UNARY(ADMIN, ListAuditEvents, SERVER_ADMIN | MANAGERS, true,
          ctxguard__v1__list_audit_events_request, ctxguard__v1__list_audit_events_response,
          cg_rpc_admin_list_audit_events),

    UNARY(BUDGET, SetBudget, MANAGERS, true, ctxguard__v1__set_budget_request,
          ctxguard__v1__set_budget_response, cg_rpc_budget_set),
    UNARY(BUDGET, GetBudget, READERS, true, ctxguard__v1__get_budget_request,
          ctxguard__v1__get_budget_response, cg_rpc_budget_get),
    UNARY_TRY_INLINE(BUDGET, CheckBudget, SPENDERS, ctxguard__v1__check_budget_request,
                     ctxguard__v1__check_budget_response, cg_rpc_budget_check),
    UNARY_TRY_INLINE(BUDGET, Reserve, SPENDERS, ctxguard__v1__reserve_request,
                     ctxguard__v1__reserve_response, cg_rpc_budget_reserve),
    UNARY_TRY_INLINE(BUDGET, Commit, SPENDERS, ctxguard__v1__commit_request,
                     ctxguard__v1__commit_response, cg_rpc_budget_commit),
    UNARY(BUDGET, Release, SPENDERS, true, ctxguard__v1__release_request,
          ctxguard__v1__release_response, cg_rpc_budget_release),
    UNARY(BUDGET, RecordUsage, SPENDERS, true, ctxguard__v1__record_usage_request,
          ctxguard__v1__record_usage_response, cg_rpc_budget_record_usage),
    UNARY(BUDGET, CloseScope, MANAGERS, true, ctxguard__v1__close_scope_request,
          ctxguard__v1__close_scope_response, cg_rpc_budget_close_scope),
    UNARY(BUDGET, GetUsage, READERS, true, ctxguard__v1__get_usage_request,
          ctxguard__v1__get_usage_response, cg_rpc_budget_get_usage),
    UNARY(BUDGET, ListScopes, READERS, true, ctxguard__v1__list_scopes_request,
          ctxguard__v1__list_scopes_response, cg_rpc_budget_list_scopes),
    {"/" BUDGET "/WatchUsage", BUDGET, CG_RPC_SERVER_STREAM, READERS, true,
     &ctxguard__v1__watch_usage_request__descriptor, &ctxguard__v1__usage_event__descriptor, NULL,
     cg_rpc_watch_poll, NULL, cg_rpc_watch_open, false},
    UNARY(BUDGET, ResolveApproval, MANAGERS, true, ctxguard__v1__resolve_approval_request,
          ctxguard__v1__resolve_approval_response, cg_rpc_budget_resolve_approval),
    UNARY(BUDGET, GetApproval, READERS, true, ctxguard__v1__get_approval_request,
          ctxguard__v1__get_approval_response, cg_rpc_budget_get_approval),
    UNARY(BUDGET, ListApprovals, READERS, true, ctxguard__v1__list_approvals_request,
          ctxguard__v1__list_approvals_response, cg_rpc_budget_list_approvals),
    /* Exact counts of small requests on the queue thread; estimates (the store) and large
     * counts on the pool. */
    UNARY_TRY_INLINE(CONTEXT, CountTokens, SPENDERS, ctxguard__v1__count_tokens_request,
                     ctxguard__v1__count_tokens_response, cg_rpc_context_count_tokens),
    /* Stateless, CPU only: runs on the pool so a long cascade never holds a queue thread. */
    UNARY(CONTEXT, Compress, SPENDERS, true, ctxguard__v1__compress_request,
          ctxguard__v1__compress_response, cg_rpc_context_compress),
    /* On the pool: the LLM call blocks (env->llm is a pool thread's). */
    UNARY(CONTEXT, Summarize, SPENDERS, true, ctxguard__v1__summarize_request,
          ctxguard__v1__summarize_response, cg_rpc_context_summarize),
    UNARY(CONTEXT, GetArtifact, SPENDERS, true, ctxguard__v1__get_artifact_request,
          ctxguard__v1__get_artifact_response, cg_rpc_context_get_artifact),
    UNARY(CONTEXT, ListArtifacts, SPENDERS, true, ctxguard__v1__list_artifacts_request,
          ctxguard__v1__list_artifacts_response, cg_rpc_context_list_artifacts),
    UNARY(CONTEXT, GetHistory, SPENDERS, true, ctxguard__v1__get_history_request,
          ctxguard__v1__get_history_response, cg_rpc_context_get_history),
    UNARY(CONTEXT, ValidateContext, SPENDERS, true, ctxguard__v1__validate_context_request,
          ctxguard__v1__validate_context_response, cg_rpc_context_validate),
    UNARY(CONTEXT, GetCompressionStats, READERS, true, ctxguard__v1__get_compression_stats_request,
          ctxguard__v1__get_compression_stats_response, cg_rpc_context_get_stats),
};

#define METHOD_COUNT (sizeof methods / sizeof methods[0])

const struct cg_rpc_method *cg_rpc_methods(size_t *count)
{
    *count = METHOD_COUNT;
    return methods;
}

const struct cg_rpc_method *cg_rpc_find(const char *path)
{
    for (size_t i = 0; i < METHOD_COUNT; i++)
        if (strcmp(methods[i].path, path) == 0)
            return &methods[i];
    return NULL;
}

const char *const *cg_rpc_services(size_t *count)
{
    /* Distinct services in table order; fixed once the table is (the table is static). */
    static const char *const services[] = {
        HEALTH, REFL_V1, REFL_V1A, ADMIN, BUDGET, CONTEXT,
    };
    *count = sizeof services / sizeof services[0];
    return services;
}

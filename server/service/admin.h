/* admin.h - the AdminService flows in domain types (service/admin.c): tenants and their
 * settings, API keys (who may mint what, the key's making, revocation with the process
 * cache), and the audit trail. rpc/rpc_admin.c checks a request's fields, names the tenant
 * (a tenant key acts for its own) and calls one of these; each writes its audit row in the
 * store's statement. On error op->err says what the client sees.
 */
#ifndef CG_SERVICE_ADMIN_H
#define CG_SERVICE_ADMIN_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store.h"

/* ---------------------------------------------------------------- tenants --------- */

/* A new tenant with name, time zone and settings (all checked by the caller), and its
 * audit row tenant_created by audit's actor (borrowed). */
cg_status cg_admin_tenant_create(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *name, const char *time_zone,
                                 const struct cg_tenant_settings *settings,
                                 const struct cg_audit *audit, struct cg_tenant *out) CG_MUST_CHECK;

/* A tenant by its lower-case id; NOT_FOUND when there is none. */
cg_status cg_admin_tenant_get(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, struct cg_tenant *out) CG_MUST_CHECK;

/* Replaces a tenant's settings, with the audit row tenant_settings_updated; *out is the
 * tenant as written. */
cg_status cg_admin_tenant_settings_put(const struct cg_svc_env *env, const struct cg_op *op,
                                       const char *tenant_id,
                                       const struct cg_tenant_settings *settings,
                                       const struct cg_audit *audit,
                                       struct cg_tenant *out) CG_MUST_CHECK;

/* One page of at most limit tenants by creation order after after_id ("" for the first
 * page): *rows in op's arena, *count of them, *more whether others follow. */
cg_status cg_admin_tenant_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *after_id, int limit, struct cg_tenant **rows, int *count,
                               bool *more) CG_MUST_CHECK;

/* ---------------------------------------------------------------- keys ------------ */

/* A new key of tenant_id as want asks (role, name, bound scope, expiry; its fields checked
 * by the caller), held against the creator (op's principal; the server's admin key may
 * mint anything): a role of at most its own (PERMISSION_DENIED, reason ROLE_NOT_ALLOWED),
 * a scope inside its own subtree (NOT_FOUND, reason SCOPE_NOT_FOUND), an expiry no later
 * than its own (capped, no error). The key is 8 random bytes of key id and 32 of secret;
 * the store keeps SHA-256 of the whole key text and writes the audit row api_key_created.
 * *out is the stored key, *secret the whole key text (op's arena), shown to the client
 * once. */
cg_status cg_admin_key_create(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const struct cg_api_key_spec *want,
                              const struct cg_audit *audit, struct cg_api_key *out,
                              char **secret) CG_MUST_CHECK;

/* A tenant's keys (at most 1000): *rows in op's arena, *count of them. */
cg_status cg_admin_key_list(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *tenant_id, struct cg_api_key **rows,
                            int *count) CG_MUST_CHECK;

/* Revokes a key (idempotent) with the audit row api_key_revoked, and drops it from this
 * process's cache whatever the outcome (other replicas learn it from the commit's
 * notification). *out is the key as stored. */
cg_status cg_admin_key_revoke(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const char *key_id,
                              const struct cg_audit *audit, struct cg_api_key *out) CG_MUST_CHECK;

/* ---------------------------------------------------------------- audit trail ----- */

/* One page of at most limit audit rows of tenant_id, newest first, older than before_id
 * (0: the newest), as filter selects (checked by the caller; its bound_* fields are set
 * here from op's principal: a scope-bound key sees its subtree only). *rows in op's arena
 * (their JSON too), *count of them, *more whether older rows follow. */
cg_status cg_admin_audit_list(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *tenant_id, const struct cg_audit_filter *filter,
                              int64_t before_id, int limit, struct cg_audit_event **rows,
                              int *count, bool *more) CG_MUST_CHECK;

#endif

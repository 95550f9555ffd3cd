/* keys.h - authentication of a tenant API key: the process's key cache, then the store
 * (Redis, then PostgreSQL), and the key's last use. rpc/rpc.c parses the `authorization`
 * metadata, tells the server's admin key apart, calls this for a tenant key and checks the
 * principal's role against the method.
 */
#ifndef CG_SERVICE_KEYS_H
#define CG_SERVICE_KEYS_H

#include <stddef.h>

#include "service/service.h"

/* Authenticates the tenant key token (len bytes, the text after "Bearer ") and fills *out
 * (its tenant, role, scope binding, expiry and call bound). The key is read from the
 * process's key cache (env->cache) when it has it, which needs no I/O; otherwise from the
 * store (from PostgreSQL when a revocation dropped it from the cache: Redis may not have heard
 * of it yet), then cached, and its last use recorded (to the minute; never fails the call).
 * UNAUTHENTICATED in *err for a malformed, unknown, revoked or expired key or one without a
 * valid role (API_KEY_EXPIRED for an expired one); what the store failed with otherwise.
 * Without a store (env->store NULL: a completion-queue thread) a key the cache has not got
 * sets *fate to CG_OP_NEEDS_STORE and returns CG_OK, with *out untouched; otherwise *fate is
 * CG_OP_DONE. */
cg_status cg_keys_authenticate(const struct cg_svc_env *env, const char *token, size_t len,
                               struct cg_principal *out, struct cg_err *err,
                               cg_op_fate *fate) CG_MUST_CHECK;

#endif

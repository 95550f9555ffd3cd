/* rpc_check.h - the request checks every handler shares (rpc/rpc_check.c). Internal to rpc/.
 * On error each fills call->err naming the field and returns its status; they call no
 * handler file back.
 */
#ifndef CG_RPC_CHECK_H
#define CG_RPC_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctxguard/v1/common.pb-c.h"
#include "rpc/rpc.h"

#define CG_TOKENS_PER_CALL_MAX 100000000LL

/* Checks a required text field: 1..max_chars code points, no control characters.
 * On error fills call->err naming `field`. */
cg_status cg_rpc_check_name(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_chars, bool required) CG_MUST_CHECK;

/* Checks a UUID field (required). INVALID_ARGUMENT naming `field` otherwise. */
cg_status cg_rpc_check_uuid(struct cg_rpc_call *call, const char *field,
                            const char *value) CG_MUST_CHECK;

/* A Scope into ids and its level (NULL, no ids, or scope.tenant: the tenant); ids <= 128
 * bytes without spaces or control characters, a task needs a session and an agent a task,
 * scope.tenant comes with no id. */
cg_status cg_rpc_scope_in(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope,
                          struct cg_scope_ids *ids, int *level) CG_MUST_CHECK;

/* Compress's and Summarize's charge_scope: absent, *out NULL; else it must name a scope (or
 * set tenant), read into *ids with *out = ids; errors name charge_scope. */
cg_status cg_rpc_charge_scope(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope,
                              struct cg_scope_ids *ids,
                              const struct cg_scope_ids **out) CG_MUST_CHECK;

/* cg_rpc_scope_in for a Scope in the request's field `name` ("charge_scope"): errors name
 * name.session_id and so on. */
cg_status cg_rpc_scope_in_field(struct cg_rpc_call *call, const char *name,
                                const Ctxguard__V1__Scope *scope, struct cg_scope_ids *ids,
                                int *level) CG_MUST_CHECK;

/* CheckBudget, Reserve and RecordUsage: INVALID_ARGUMENT (reason SCOPE_REQUIRED, naming
 * `scope`) unless the scope names an id or sets scope.tenant, so that a forgotten scope never
 * spends on the whole tenant. Called before cg_rpc_scope_in, which checks the rest. */
cg_status cg_rpc_scope_required(struct cg_rpc_call *call,
                                const Ctxguard__V1__Scope *scope) CG_MUST_CHECK;

/* v within 0..max. */
cg_status cg_rpc_check_count(struct cg_rpc_call *call, const char *field, int64_t v,
                             int64_t max) CG_MUST_CHECK;

/* At most max_bytes, no control characters. */
cg_status cg_rpc_check_text(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_bytes) CG_MUST_CHECK;

/* 1..128 printable ASCII characters without spaces (empty allowed unless required). */
cg_status cg_rpc_check_key(struct cg_rpc_call *call, const char *field, const char *value,
                           bool required) CG_MUST_CHECK;

/* A TokenUsage, each count 0..1e8, at least one token in all, and in all (input + output
 * + cache_read + cache_write; reasoning tokens are part of output) at most the tenant's
 * max_call_tokens (call->principal): INVALID_ARGUMENT reason CALL_TOKENS_ABOVE_LIMIT,
 * metadata tokens and max_call_tokens. */
cg_status cg_rpc_usage_in(struct cg_rpc_call *call, const Ctxguard__V1__TokenUsage *u,
                          struct cg_usage *out) CG_MUST_CHECK;

/* DelayMode within the enum. */
cg_status cg_rpc_check_delay_mode(struct cg_rpc_call *call, int mode) CG_MUST_CHECK;

#endif

/* rpc_check.c - the request checks every handler shares: each names the field it refuses
 * in call->err (INVALID_ARGUMENT unless said otherwise). They call nothing in rpc/ but the
 * principal's reach (rpc.c cg_rpc_scope_check).
 */
#include "rpc/rpc_check.h"

#include <stdio.h>
#include <string.h>

#include "core/apikey.h"
#include "core/budget.h"
#include "core/keyrole.h"
#include "core/utf8.h"
#include "ctxguard/v1/budget.pb-c.h"

cg_status cg_rpc_check_name(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_chars, bool required)
{
    size_t len = strlen(value);
    if (len == 0) {
        if (required)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
        return CG_OK;
    }
    if (cg_utf8_length(value, len) > max_chars)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' is longer than %zu characters", field, max_chars);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c < 0x20 || c == 0x7f)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s' contains a control character", field);
    }
    return CG_OK;
}

cg_status cg_rpc_check_uuid(struct cg_rpc_call *call, const char *field, const char *value)
{
    if (value[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
    if (!cg_uuid_valid(value))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' is not a UUID (8-4-4-4-12 hex digits)", field);
    return CG_OK;
}

/* The id at name.member (e.g. scope.task_id): at most CG_SCOPE_ID_MAX bytes, no space or
 * control character. The field's name is put together only for an error. */
static cg_status check_id(struct cg_rpc_call *call, const char *name, const char *member,
                          const char *value)
{
    size_t len = strlen(value);
    if (len > CG_SCOPE_ID_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s.%s' is longer than %d bytes",
                          name, member, CG_SCOPE_ID_MAX);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)value[i];
        if (c <= 0x20 || c == 0x7f)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s.%s' contains a space or control character", name, member);
    }
    return CG_OK;
}

/* scope.tenant names the tenant level, so it cannot come with an id. */
static cg_status check_tenant_flag(struct cg_rpc_call *call, const char *name,
                                   const Ctxguard__V1__Scope *scope)
{
    if (scope->tenant && (scope->session_id[0] || scope->task_id[0] || scope->agent_id[0]))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s.tenant' names the whole tenant: leave %s.session_id, "
                          "%s.task_id and %s.agent_id empty with it",
                          name, name, name, name);
    return CG_OK;
}

cg_status cg_rpc_scope_required(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope)
{
    bool named = scope != NULL &&
                 (scope->tenant || scope->session_id[0] || scope->task_id[0] || scope->agent_id[0]);
    if (named)
        return CG_OK;
    cg_err_setr(&call->err, CG_INVALID_ARGUMENT, CG_ERR_SCOPE_REQUIRED,
                "field 'scope' is required: set scope.session_id, or scope.tenant = true to "
                "spend on the whole tenant");
    cg_err_meta(&call->err, "field", "scope");
    return CG_INVALID_ARGUMENT;
}

/* Reads a Scope (the request's field `name`) into ids and its level. A NULL scope is the
 * tenant. */
cg_status cg_rpc_scope_in_field(struct cg_rpc_call *call, const char *name,
                                const Ctxguard__V1__Scope *scope, struct cg_scope_ids *ids,
                                int *level)
{
    memset(ids, 0, sizeof *ids);
    *level = CG_LEVEL_TENANT;
    if (scope == NULL)
        return cg_rpc_scope_check(call, "", "");
    cg_status st = check_tenant_flag(call, name, scope);
    if (st == CG_OK)
        st = check_id(call, name, "session_id", scope->session_id);
    if (st == CG_OK)
        st = check_id(call, name, "task_id", scope->task_id);
    if (st == CG_OK)
        st = check_id(call, name, "agent_id", scope->agent_id);
    if (st != CG_OK)
        return st;
    bool s = scope->session_id[0], t = scope->task_id[0], a = scope->agent_id[0];
    if (t && !s)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s.session_id' is required with %s.task_id", name, name);
    if (a && !t)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s.task_id' is required with %s.agent_id", name, name);
    cg_scope_ids_set(ids, scope->session_id, scope->task_id, scope->agent_id);
    *level = cg_scope_level(ids);
    /* A scope-bound key sees only its subtree: anything else, the tenant level included, is
     * NOT_FOUND as a scope that does not exist (README "Scope-bound keys"). */
    return cg_rpc_scope_check(call, ids->session_id, ids->task_id);
}

cg_status cg_rpc_scope_in(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope,
                          struct cg_scope_ids *ids, int *level)
{
    return cg_rpc_scope_in_field(call, "scope", scope, ids, level);
}

cg_status cg_rpc_charge_scope(struct cg_rpc_call *call, const Ctxguard__V1__Scope *scope,
                              struct cg_scope_ids *ids, const struct cg_scope_ids **out)
{
    *out = NULL;
    if (scope == NULL)
        return CG_OK;
    if (!scope->tenant && !scope->session_id[0] && !scope->task_id[0] && !scope->agent_id[0]) {
        cg_err_setr(&call->err, CG_INVALID_ARGUMENT, CG_ERR_SCOPE_REQUIRED,
                    "field 'charge_scope' names no scope: set charge_scope.session_id, or "
                    "charge_scope.tenant = true to charge the whole tenant");
        cg_err_meta(&call->err, "field", "charge_scope");
        return CG_INVALID_ARGUMENT;
    }
    int level;
    cg_status st = cg_rpc_scope_in_field(call, "charge_scope", scope, ids, &level);
    if (st == CG_OK)
        *out = ids;
    return st;
}

cg_status cg_rpc_check_count(struct cg_rpc_call *call, const char *field, int64_t v, int64_t max)
{
    if (v < 0 || v > max)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' must be between 0 and %lld (got %lld)", field, (long long)max,
                          (long long)v);
    return CG_OK;
}

cg_status cg_rpc_check_text(struct cg_rpc_call *call, const char *field, const char *value,
                            size_t max_bytes)
{
    if (strlen(value) > max_bytes)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is longer than %zu bytes",
                          field, max_bytes);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s' contains a control character", field);
    return CG_OK;
}

/* Idempotency keys: 1..128 printable ASCII characters (empty allowed when optional). */
cg_status cg_rpc_check_key(struct cg_rpc_call *call, const char *field, const char *value,
                           bool required)
{
    size_t len = strlen(value);
    if (len == 0)
        return required
                   ? cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field)
                   : CG_OK;
    if (len > CG_IDEMPOTENCY_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is longer than %d bytes",
                          field, CG_IDEMPOTENCY_MAX);
    for (size_t i = 0; i < len; i++)
        if (value[i] < 0x21 || value[i] > 0x7e)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s' must be printable ASCII without spaces", field);
    return CG_OK;
}

/* The tenant's bound on one Commit or RecordUsage (TenantSettings.max_call_tokens, which
 * authentication put in the principal with the key): checked here, with the request, so
 * that every path (one request, a batch, a replay) refuses before anything is written. */
static cg_status check_call_tokens(struct cg_rpc_call *call, const struct cg_usage *u)
{
    int64_t max = call->principal.max_call_tokens > 0 ? call->principal.max_call_tokens
                                                      : CG_CALL_TOKENS_DEFAULT;
    int64_t tokens =
        u->input_tokens + u->output_tokens + u->cache_read_tokens + u->cache_write_tokens;
    if (tokens <= max)
        return CG_OK;
    cg_err_setr(&call->err, CG_INVALID_ARGUMENT, CG_ERR_CALL_TOKENS_ABOVE_LIMIT,
                "field 'usage' counts %lld tokens, above the tenant's max_call_tokens %lld for "
                "one call; nothing recorded",
                (long long)tokens, (long long)max);
    cg_err_meta(&call->err, "field", "usage");
    cg_err_meta_i64(&call->err, "tokens", tokens);
    cg_err_meta_i64(&call->err, "max_call_tokens", max);
    return CG_INVALID_ARGUMENT;
}

cg_status cg_rpc_usage_in(struct cg_rpc_call *call, const Ctxguard__V1__TokenUsage *u,
                          struct cg_usage *out)
{
    if (u == NULL)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'usage' is required");
    cg_status st =
        cg_rpc_check_count(call, "usage.input_tokens", u->input_tokens, CG_TOKENS_PER_CALL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "usage.output_tokens", u->output_tokens,
                                CG_TOKENS_PER_CALL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "usage.cache_read_tokens", u->cache_read_tokens,
                                CG_TOKENS_PER_CALL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "usage.cache_write_tokens", u->cache_write_tokens,
                                CG_TOKENS_PER_CALL_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "usage.cost_micros", u->cost_micros, CG_LIMIT_MAX);
    if (st == CG_OK)
        st = cg_rpc_check_count(call, "usage.reasoning_tokens", u->reasoning_tokens,
                                u->output_tokens);
    if (st != CG_OK)
        return st;
    out->input_tokens = u->input_tokens;
    out->output_tokens = u->output_tokens;
    out->cache_read_tokens = u->cache_read_tokens;
    out->cache_write_tokens = u->cache_write_tokens;
    out->cost_micros = u->cost_micros;
    if (out->input_tokens + out->output_tokens + out->cache_read_tokens + out->cache_write_tokens <
        1)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'usage' must count at least one token (release a reservation "
                          "that spent nothing)");
    return check_call_tokens(call, out);
}

cg_status cg_rpc_check_delay_mode(struct cg_rpc_call *call, int mode)
{
    if (mode < 0 || mode > CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'delay_mode': unknown value %d",
                          mode);
    return CG_OK;
}

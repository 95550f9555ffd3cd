/* store_pg_tenants.c - tenants and API keys in PostgreSQL. See store_pg.c for how statements run.
 */
#include "store/store_pg_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* ------------------------------------------------------------------ tenants --- */

/* The settings' type list comes back as a bit mask (1 << PiiType per type). */
#define TENANT_COLUMNS                                                                             \
    "tenant_id::text, name, time_zone, floor(extract(epoch FROM created_at) * 1000)::int8,"        \
    " (SELECT coalesce(bit_or(1 << t), 0) FROM unnest(pii_redact_types) AS t),"                    \
    " pii_redact_artifacts, max_call_tokens, history_retention_days"

/* A tenant's settings (tenants aliased `alias`) as the audit trail shows them. */
#define SETTINGS_JSON(alias)                                                                       \
    "jsonb_build_object('redact_types', to_jsonb(" alias ".pii_redact_types),"                     \
    " 'redact_artifacts', " alias ".pii_redact_artifacts, 'max_call_tokens', " alias               \
    ".max_call_tokens, 'history_retention_days', " alias ".history_retention_days)"

/* Ends a transaction of this file: commits after rc == CG_OK, else rolls back. */
static cg_status end_tx(struct cg_pg *pg, cg_status rc, struct cg_err *err)
{
    if (rc == CG_OK)
        rc = cg_pg_commit(pg, err);
    if (rc != CG_OK)
        cg_pg_rollback(pg);
    return rc;
}

/* The aliases the statements below give the rows: made (m), old (o), changed (c). */
#define SETTINGS_JSON_MADE SETTINGS_JSON("m")
#define SETTINGS_JSON_OLD SETTINGS_JSON("o")
#define SETTINGS_JSON_NEW SETTINGS_JSON("c")

static void read_tenant(PGresult *res, int row, struct cg_tenant *out)
{
    cg__pg_copy_str(out->tenant_id, sizeof out->tenant_id, PQgetvalue(res, row, 0));
    cg__pg_copy_str(out->name, sizeof out->name, PQgetvalue(res, row, 1));
    cg__pg_copy_str(out->time_zone, sizeof out->time_zone, PQgetvalue(res, row, 2));
    out->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 3));
    out->settings.redact_types =
        (unsigned)cg__pg_parse_i64(PQgetvalue(res, row, 4)) & CG_TENANT_PII_TYPES_MASK;
    out->settings.redact_artifacts = strcmp(PQgetvalue(res, row, 5), "t") == 0;
    out->settings.max_call_tokens = cg__pg_parse_i64(PQgetvalue(res, row, 6));
    out->settings.history_retention_days = (int)cg__pg_parse_i64(PQgetvalue(res, row, 7));
}

/* The setting as stored: 0 means the default. */
static void max_call_text(const struct cg_tenant_settings *settings, char *out, size_t cap)
{
    snprintf(out, cap, "%lld",
             (long long)(settings->max_call_tokens > 0 ? settings->max_call_tokens
                                                       : CG_CALL_TOKENS_DEFAULT));
}

/* The type mask as a PostgreSQL array literal: "{1,5}" ("{}" for 0). */
static void types_text(unsigned mask, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "{");
    for (int t = 1; t <= 8 && n < cap; t++)
        if (mask & (1u << t))
            n += (size_t)snprintf(out + n, cap - n, "%s%d", n > 1 ? "," : "", t);
    if (n < cap)
        snprintf(out + n, cap - n, "}");
}

cg_status cg_pg_tenant_create(struct cg_pg *pg, const char *name, const char *time_zone,
                              const struct cg_tenant_settings *settings,
                              const struct cg_audit *audit, struct cg_tenant *out,
                              struct cg_err *err)
{
    /* The time zone must be one PostgreSQL lists by name: abbreviations and POSIX offsets
     * that AT TIME ZONE would also take are not what calendar-aligned resets need. */
    char types[32], max_call[24];
    types_text(settings->redact_types, types, sizeof types);
    max_call_text(settings, max_call, sizeof max_call);
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    char days[16];
    snprintf(days, sizeof days, "%d", settings->history_retention_days);
    const char *values[] = {
        name,     time_zone,    types,      settings->redact_artifacts ? "t" : "f",
        max_call, actor.key_id, actor.role, actor.request_id,
        days};
    PGresult *res = NULL;
    /* The audit row in the same statement: one statement commits or fails whole. */
    cg_status rc = cg__pg_run(
        pg, "tenant_create",
        "WITH made AS (INSERT INTO tenants (name, time_zone, pii_redact_types,"
        "  pii_redact_artifacts, max_call_tokens, history_retention_days)"
        "  SELECT $1::text, $2::text, $3::smallint[], $4::boolean, $5::int8, $9::int"
        "  WHERE EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = $2::text)"
        "  RETURNING *),"
        " audit AS (" AUDIT_INSERT " SELECT m.tenant_id, $6::text, $7::int2, 'tenant_created',"
        "  '', '', '', m.tenant_id::text, NULL, jsonb_build_object('name', m.name, 'time_zone',"
        "  m.time_zone) || " SETTINGS_JSON_MADE ", $8::text FROM made m)"
        " SELECT " TENANT_COLUMNS " FROM made",
        9, values, NULL, NULL, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "name or time_zone: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1) {
        rc = cg_err_set(err, CG_INVALID_ARGUMENT,
                        "time_zone: not a time zone name PostgreSQL knows (IANA, e.g. "
                        "Europe/Paris)");
        goto out;
    }
    read_tenant(res, 0, out);
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_tenant_get(struct cg_pg *pg, const char *tenant_id, struct cg_tenant *out,
                           struct cg_err *err)
{
    const char *values[] = {tenant_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run_one(
        pg, "tenant_get", "SELECT " TENANT_COLUMNS " FROM tenants WHERE tenant_id = $1::uuid", 1,
        values, RUN_READ, "tenant_id: no such tenant", &res, err);
    if (rc == CG_OK)
        read_tenant(res, 0, out);
    PQclear(res);
    return rc;
}

cg_status cg_pg_tenant_settings_put(struct cg_pg *pg, const char *tenant_id,
                                    const struct cg_tenant_settings *settings,
                                    const struct cg_audit *audit, struct cg_tenant *out,
                                    struct cg_err *err)
{
    char types[32], max_call[24], days[16];
    types_text(settings->redact_types, types, sizeof types);
    max_call_text(settings, max_call, sizeof max_call);
    snprintf(days, sizeof days, "%d", settings->history_retention_days);
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id,        types,        settings->redact_artifacts ? "t" : "f",
                            max_call,         actor.key_id, actor.role,
                            actor.request_id, days};
    static const char missing[] = "tenant_id: no such tenant";
    /* Two statements in a transaction rather than one: the row is locked first, so that the
     * snapshot of the second statement, whose `old` is the audit row's before, holds the
     * settings this update replaces (one statement alone could read a version a concurrent
     * update has just replaced). */
    cg_status rc = cg_pg_begin(pg, err);
    if (rc != CG_OK)
        return rc;
    PGresult *res = NULL;
    rc = cg__pg_run_one(pg, "tenant_lock",
                        "SELECT 1 FROM tenants WHERE tenant_id = $1::uuid FOR NO KEY UPDATE", 1,
                        values, 0, missing, &res, err);
    PQclear(res);
    res = NULL;
    if (rc == CG_OK)
        rc = cg__pg_run_one(pg, "tenant_settings_put",
                            "WITH old AS (SELECT * FROM tenants WHERE tenant_id = $1::uuid),"
                            " changed AS (UPDATE tenants SET pii_redact_types = $2::smallint[],"
                            "  pii_redact_artifacts = $3::boolean, max_call_tokens = $4::int8,"
                            "  history_retention_days = $8::int"
                            "  WHERE tenant_id = $1::uuid RETURNING *),"
                            " audit AS (" AUDIT_INSERT " SELECT c.tenant_id, $5::text, $6::int2,"
                            "  'tenant_settings_updated', '', '', '', '', " SETTINGS_JSON_OLD
                            ", " SETTINGS_JSON_NEW
                            ", $7::text FROM changed c JOIN old o ON o.tenant_id = c.tenant_id)"
                            " SELECT " TENANT_COLUMNS " FROM changed",
                            8, values, 0, missing, &res, err);
    if (rc == CG_OK)
        read_tenant(res, 0, out);
    else if (cg__pg_sqlstate_is(pg, "23514"))
        rc = cg_err_set(err, CG_INVALID_ARGUMENT, "settings.redact_types: unknown PiiType");
    PQclear(res);
    return end_tx(pg, rc, err);
}

cg_status cg_pg_tenant_list(struct cg_pg *pg, const char *after_id, int limit,
                            struct cg_tenant *out, int *count, bool *more, struct cg_err *err)
{
    /* One row more than asked tells whether another page exists. */
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit + 1);
    PGresult *res = NULL;
    cg_status rc;
    *count = 0;
    *more = false;
    if (after_id[0] == '\0') {
        const char *values[] = {limit_text};
        rc = cg__pg_run(pg, "tenant_list",
                        "SELECT " TENANT_COLUMNS " FROM tenants"
                        " ORDER BY created_at, tenant_id LIMIT $1::int",
                        1, values, NULL, NULL, RUN_READ, &res, err);
    } else {
        const char *values[] = {after_id, limit_text};
        rc = cg__pg_run(
            pg, "tenant_list_after",
            "SELECT " TENANT_COLUMNS " FROM tenants t"
            " WHERE (t.created_at, t.tenant_id) >"
            "  (SELECT a.created_at, a.tenant_id FROM tenants a WHERE a.tenant_id = $1::uuid)"
            " ORDER BY t.created_at, t.tenant_id LIMIT $2::int",
            2, values, NULL, NULL, RUN_READ, &res, err);
    }
    if (rc != CG_OK)
        goto out;
    int rows = PQntuples(res);
    if (rows == 0 && after_id[0] != '\0') {
        /* An empty page after an id that names no tenant would silently end the listing. */
        struct cg_tenant anchor;
        rc = cg_pg_tenant_get(pg, after_id, &anchor, err);
        if (rc == CG_NOT_FOUND)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT, "after_id: no such tenant");
        goto out;
    }
    *more = rows > limit;
    *count = rows > limit ? limit : rows;
    for (int i = 0; i < *count; i++)
        read_tenant(res, i, &out[i]);
out:
    PQclear(res);
    return rc;
}

/* ------------------------------------------------------------------ API keys --- */

#define KEY_COLUMNS                                                                                \
    "tenant_id::text, key_id, name, floor(extract(epoch FROM created_at) * 1000)::int8,"           \
    " coalesce(floor(extract(epoch FROM revoked_at) * 1000)::int8, 0), role, scope_session_id,"    \
    " scope_task_id, coalesce(floor(extract(epoch FROM expires_at) * 1000)::int8, 0),"             \
    " coalesce(floor(extract(epoch FROM last_used_at) * 1000)::int8, 0), created_by_key_id"
#define KEY_COLUMN_COUNT 11

static void read_key(PGresult *res, int row, struct cg_api_key *out)
{
    cg__pg_copy_str(out->tenant_id, sizeof out->tenant_id, PQgetvalue(res, row, 0));
    cg__pg_copy_str(out->key_id, sizeof out->key_id, PQgetvalue(res, row, 1));
    cg__pg_copy_str(out->name, sizeof out->name, PQgetvalue(res, row, 2));
    out->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 3));
    out->revoked_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 4));
    out->role = (int)cg__pg_parse_i64(PQgetvalue(res, row, 5));
    cg__pg_copy_str(out->scope_session_id, sizeof out->scope_session_id, PQgetvalue(res, row, 6));
    cg__pg_copy_str(out->scope_task_id, sizeof out->scope_task_id, PQgetvalue(res, row, 7));
    out->expires_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 8));
    out->last_used_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 9));
    cg__pg_copy_str(out->created_by_key_id, sizeof out->created_by_key_id,
                    PQgetvalue(res, row, 10));
}

/* A key (api_keys aliased `alias`) as the audit trail shows it: never its secret. */
#define KEY_JSON(alias)                                                                            \
    "jsonb_build_object('role', (ARRAY['agent', 'viewer', 'operator', 'admin'])[" alias            \
    ".role::int], 'scope_session_id', " alias ".scope_session_id, 'scope_task_id', " alias         \
    ".scope_task_id, 'expires_at_unix_ms', floor(extract(epoch FROM " alias                        \
    ".expires_at) * 1000)::int8, 'name', " alias ".name, 'revoked_at_unix_ms', floor(extract("     \
    "epoch FROM " alias ".revoked_at) * 1000)::int8)"

#define KEY_JSON_MADE KEY_JSON("m")
#define KEY_JSON_OLD KEY_JSON("o")
#define KEY_JSON_NEW KEY_JSON("c")

cg_status cg_pg_key_create(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           const uint8_t secret_hash[32], const struct cg_api_key_spec *spec,
                           const struct cg_audit *audit, struct cg_api_key *out, struct cg_err *err)
{
    char role[8], expires[24];
    snprintf(role, sizeof role, "%d", spec->role);
    snprintf(expires, sizeof expires, "%lld", (long long)spec->expires_at_ms);
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id,           key_id,     (const char *)secret_hash,
                            spec->name,          role,       spec->scope_session_id,
                            spec->scope_task_id, expires,    spec->created_by_key_id,
                            actor.key_id,        actor.role, actor.request_id};
    const int lengths[] = {0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const int formats[] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* the hash as binary bytea */
    PGresult *res = NULL;
    /* The audit row in the same statement: one statement commits or fails whole. */
    cg_status rc = cg__pg_run(
        pg, "key_create",
        "WITH made AS (INSERT INTO api_keys (tenant_id, key_id, secret_hash, name, role,"
        "  scope_session_id, scope_task_id, expires_at, created_by_key_id)"
        "  VALUES ($1::uuid, $2::text, $3::bytea, $4::text, $5::smallint, $6::text, $7::text,"
        "  CASE WHEN $8::int8 = 0 THEN NULL ELSE to_timestamp($8::int8 / 1000.0) END, $9::text)"
        "  RETURNING *),"
        " audit AS (" AUDIT_INSERT " SELECT m.tenant_id, $10::text, $11::int2, 'api_key_created',"
        "  '', '', '', m.key_id, NULL, " KEY_JSON_MADE ", $12::text FROM made m)"
        " SELECT " KEY_COLUMNS " FROM made",
        12, values, lengths, formats, 0, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "23503") || cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND,
                             "tenant_id: no such tenant");
        else if (cg__pg_sqlstate_is(pg, "23505"))
            rc = cg_err_set(err, CG_ALREADY_EXISTS, "key_id: the tenant already has this key");
        else if (cg__pg_sqlstate_is(pg, "23514") || strncmp(pg->sqlstate, "22", 2) == 0)
            rc = cg_err_set(err, CG_INVALID_ARGUMENT,
                            "key_id, name, scope or ttl_ms: invalid value");
        goto out;
    }
    if (PQntuples(res) != 1 || PQnfields(res) != KEY_COLUMN_COUNT) {
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
    read_key(res, 0, out);
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_list(struct cg_pg *pg, const char *tenant_id, int limit, struct cg_api_key *out,
                         int *count, struct cg_err *err)
{
    char limit_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    const char *values[] = {tenant_id, limit_text};
    PGresult *res = NULL;
    *count = 0;
    /* The outer row for the tenant tells "no such tenant" from "no keys" in one query; the
     * join stays within one tenant. */
    cg_status rc =
        cg__pg_run(pg, "key_list",
                   "SELECT k.tenant_id::text, k.key_id, k.name, k.created_ms, k.revoked_ms,"
                   " k.role, k.ss, k.st, k.expires_ms, k.used_ms, k.by"
                   " FROM tenants t LEFT JOIN LATERAL ("
                   "  SELECT " KEY_COLUMNS ", created_at AS created"
                   "  FROM api_keys"
                   "  WHERE api_keys.tenant_id = t.tenant_id"
                   "  ORDER BY created_at DESC, key_id DESC LIMIT $2::int"
                   " ) AS k (tenant_id, key_id, name, created_ms, revoked_ms, role, ss, st,"
                   " expires_ms, used_ms, by, created) ON true"
                   " WHERE t.tenant_id = $1::uuid"
                   " ORDER BY k.created DESC, k.key_id DESC",
                   2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK) {
        if (cg__pg_sqlstate_is(pg, "22P02"))
            rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND,
                             "tenant_id: no such tenant");
        goto out;
    }
    int rows = PQntuples(res);
    if (rows == 0) {
        rc = cg_err_setr(err, CG_NOT_FOUND, CG_ERR_TENANT_NOT_FOUND, "tenant_id: no such tenant");
        goto out;
    }
    for (int i = 0; i < rows && *count < limit; i++) {
        if (PQgetisnull(res, i, 1))
            continue; /* the tenant without keys */
        read_key(res, i, &out[(*count)++]);
    }
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_revoke(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           const struct cg_audit *audit, struct cg_api_key *out, struct cg_err *err)
{
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {tenant_id, key_id, actor.key_id, actor.role, actor.request_id};
    static const char missing[] = "key_id: no such key";
    /* A transaction: the key is locked and read first, so that only the revocation that
     * takes effect writes the audit row (a repeated one answers the row as it is), and the
     * row's before is the key this revocation changed. */
    cg_status rc = cg_pg_begin(pg, err);
    if (rc != CG_OK)
        return rc;
    PGresult *res = NULL;
    rc = cg__pg_run_one(pg, "key_revoke_lock",
                        "SELECT " KEY_COLUMNS " FROM api_keys"
                        " WHERE tenant_id = $1::uuid AND key_id = $2::text FOR NO KEY UPDATE",
                        2, values, 0, missing, &res, err);
    if (rc != CG_OK)
        goto out;
    read_key(res, 0, out);
    if (out->revoked_at_ms != 0)
        goto out; /* revoked before: nothing changes, nothing is audited */
    PQclear(res);
    res = NULL;
    rc = cg__pg_run_one(
        pg, "key_revoke",
        "WITH old AS (SELECT * FROM api_keys WHERE tenant_id = $1::uuid AND key_id = $2::text),"
        " changed AS (UPDATE api_keys SET revoked_at = now()"
        "  WHERE tenant_id = $1::uuid AND key_id = $2::text RETURNING *),"
        " audit AS (" AUDIT_INSERT " SELECT c.tenant_id, $3::text, $4::int2, 'api_key_revoked',"
        "  '', '', '', c.key_id, " KEY_JSON_OLD ", " KEY_JSON_NEW
        ", $5::text FROM changed c JOIN old o ON o.key_id = c.key_id)"
        " SELECT " KEY_COLUMNS " FROM changed",
        5, values, 0, missing, &res, err);
    if (rc == CG_OK)
        read_key(res, 0, out);
out:
    PQclear(res);
    return end_tx(pg, rc, err);
}

cg_status cg_pg_key_lookup(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                           struct cg_key_auth *out, struct cg_err *err)
{
    const char *values[] = {tenant_id, key_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run_one(
        pg, "key_lookup",
        "SELECT t.name, k.secret_hash, k.revoked_at IS NOT NULL, k.role, k.scope_session_id,"
        " k.scope_task_id, coalesce(floor(extract(epoch FROM k.expires_at) * 1000)::int8, 0),"
        " t.max_call_tokens"
        " FROM api_keys k JOIN tenants t ON t.tenant_id = k.tenant_id"
        " WHERE k.tenant_id = $1::uuid AND t.tenant_id = $1::uuid"
        " AND k.key_id = $2::text",
        2, values, RUN_READ, "key_id: no such key", &res, err);
    if (rc != CG_OK)
        goto out;
    if (!cg__pg_decode_bytea_hex(PQgetvalue(res, 0, 1), out->secret_hash,
                                 sizeof out->secret_hash)) {
        cg_log(CG_LOG_ERROR, MOD, cg__pg_rid(pg), "key_lookup: secret_hash is not 32 bytes");
        rc = cg_err_set(err, CG_INTERNAL, "storage error");
        goto out;
    }
    cg__pg_copy_str(out->tenant_name, sizeof out->tenant_name, PQgetvalue(res, 0, 0));
    out->revoked = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
    out->role = (int)cg__pg_parse_i64(PQgetvalue(res, 0, 3));
    cg__pg_copy_str(out->scope_session_id, sizeof out->scope_session_id, PQgetvalue(res, 0, 4));
    cg__pg_copy_str(out->scope_task_id, sizeof out->scope_task_id, PQgetvalue(res, 0, 5));
    out->expires_at_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 6));
    out->max_call_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 7));
out:
    PQclear(res);
    return rc;
}

cg_status cg_pg_key_touch(struct cg_pg *pg, const char *tenant_id, const char *key_id,
                          struct cg_err *err)
{
    const char *values[] = {tenant_id, key_id};
    PGresult *res = NULL;
    /* At most one write a minute per key, whatever the number of replicas. */
    cg_status rc = cg__pg_run(pg, "key_touch",
                              "UPDATE api_keys SET last_used_at = now()"
                              " WHERE tenant_id = $1::uuid AND key_id = $2::text"
                              " AND (last_used_at IS NULL"
                              "  OR last_used_at < now() - interval '1 minute')",
                              2, values, NULL, NULL, 0, &res, err);
    PQclear(res);
    return rc;
}

/* store_pg_context.c - the context state of store_context.h in PostgreSQL
 * (migrations/0010_context_state.sql). Binary parameters for messages and artifact bytes;
 * bytea comes back in PostgreSQL's hex text form and is decoded here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_context.h"
#include "store/store_internal.h"
#include "store/store_pg_internal.h"

#define SESSION_COLUMNS "trim_boundary, revision, history_messages, version"

static void read_session(PGresult *res, struct cg_ctx_session *out)
{
    out->trim_boundary = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    out->revision = (uint32_t)cg__pg_parse_i64(PQgetvalue(res, 0, 1));
    out->history_messages = cg__pg_parse_i64(PQgetvalue(res, 0, 2));
    out->version = cg__pg_parse_i64(PQgetvalue(res, 0, 3));
}

static cg_status in_tx(struct cg_store *store, const char *what, struct cg_err *err)
{
    if (!store->pg->in_tx)
        return cg__pg_not_in_tx(store->pg, what, err);
    return CG_OK;
}

cg_status cg_store_ctx_session_lock(struct cg_store *store, const char *tenant_id,
                                    const char *session_id, struct cg_ctx_session *out,
                                    struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_session_lock", err)) != CG_OK)
        return rc;
    memset(out, 0, sizeof *out);
    const char *values[] = {id, session_id};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_session_create",
                    "INSERT INTO context_sessions (tenant_id, session_id) VALUES ($1::uuid, $2)"
                    " ON CONFLICT DO NOTHING RETURNING 1",
                    2, values, NULL, NULL, RUN_PINNED, &res, err);
    if (rc != CG_OK)
        return rc;
    out->created = PQntuples(res) == 1;
    PQclear(res);
    rc = cg__pg_run(store->pg, "ctx_session_lock",
                    "SELECT " SESSION_COLUMNS " FROM context_sessions"
                    " WHERE tenant_id = $1::uuid AND session_id = $2 FOR UPDATE",
                    2, values, NULL, NULL, RUN_PINNED, &res, err);
    if (rc != CG_OK)
        return rc;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return cg_err_set(err, CG_INTERNAL, "session_id: the session row vanished");
    }
    read_session(res, out);
    PQclear(res);
    return CG_OK;
}

cg_status cg_store_ctx_session_get(struct cg_store *store, const char *tenant_id,
                                   const char *session_id, struct cg_ctx_session *out,
                                   struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    memset(out, 0, sizeof *out);
    const char *values[] = {id, session_id};
    PGresult *res = NULL;
    rc = cg__pg_run_one(store->pg, "ctx_session_get",
                        "SELECT " SESSION_COLUMNS " FROM context_sessions"
                        " WHERE tenant_id = $1::uuid AND session_id = $2",
                        2, values, RUN_READ, "session_id: no such session", &res, err);
    if (rc == CG_OK)
        read_session(res, out);
    PQclear(res);
    return rc;
}

cg_status cg_store_ctx_session_update(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, const struct cg_ctx_session *s,
                                      struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_session_update", err)) != CG_OK)
        return rc;
    char b[24], r[24], h[24];
    snprintf(b, sizeof b, "%lld", (long long)s->trim_boundary);
    snprintf(r, sizeof r, "%u", s->revision);
    snprintf(h, sizeof h, "%lld", (long long)s->history_messages);
    const char *values[] = {id, session_id, b, r, h};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_session_update",
                    "UPDATE context_sessions SET trim_boundary = $3::int8, revision = $4::int,"
                    " history_messages = $5::int8, version = version + 1, updated_at = now()"
                    " WHERE tenant_id = $1::uuid AND session_id = $2",
                    5, values, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    return rc;
}

cg_status cg_store_ctx_history_digests(struct cg_store *store, const char *tenant_id,
                                       const char *session_id, uint32_t revision, int64_t n,
                                       uint8_t *digests, int64_t *found, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    *found = 0;
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    char r[24], lim[24];
    snprintf(r, sizeof r, "%u", revision);
    snprintf(lim, sizeof lim, "%lld", (long long)n);
    const char *values[] = {id, session_id, r, lim};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_history_digests",
                    "SELECT digest FROM context_history WHERE tenant_id = $1::uuid"
                    " AND session_id = $2 AND revision = $3::int AND position < $4::int8"
                    " ORDER BY position",
                    4, values, NULL, NULL, store->pg->in_tx ? RUN_PINNED : RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    int rows = PQntuples(res);
    for (int i = 0; i < rows && i < n; i++)
        if (!cg__pg_decode_bytea_hex(PQgetvalue(res, i, 0), digests + (size_t)i * 32, 32)) {
            PQclear(res);
            return cg_err_set(err, CG_INTERNAL, "session_id: a stored digest does not parse");
        }
    *found = rows;
    PQclear(res);
    return CG_OK;
}

cg_status cg_store_ctx_history_put(struct cg_store *store, const char *tenant_id,
                                   const char *session_id, uint32_t revision, int64_t position,
                                   const void *message, size_t len,
                                   const uint8_t digest[CG_CTX_DIGEST_LEN], int64_t tokens,
                                   const char *compaction_id, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_history_put", err)) != CG_OK)
        return rc;
    char r[24], p[24], t[24];
    snprintf(r, sizeof r, "%u", revision);
    snprintf(p, sizeof p, "%lld", (long long)position);
    snprintf(t, sizeof t, "%lld", (long long)tokens);
    const char *values[] = {id, session_id,   r, p, len ? message : "", (const char *)digest,
                            t,  compaction_id};
    const int lengths[] = {0, 0, 0, 0, (int)len, CG_CTX_DIGEST_LEN, 0, 0};
    const int formats[] = {0, 0, 0, 0, 1, 1, 0, 0};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_history_put",
                    "INSERT INTO context_history (tenant_id, session_id, revision, position,"
                    " message, digest, tokens, compaction_id) VALUES ($1::uuid, $2, $3::int,"
                    " $4::int8, $5::bytea, $6::bytea, $7::int8, $8)",
                    8, values, lengths, formats, RUN_PINNED, &res, err);
    PQclear(res);
    return rc;
}

/* bytea hex text into a new buffer. */
static void *decode_bytea(const char *s, size_t *len)
{
    size_t hex = strlen(s);
    if (hex < 2 || (hex - 2) % 2 != 0)
        return NULL;
    size_t n = (hex - 2) / 2;
    uint8_t *buf = malloc(n ? n : 1);
    if (buf == NULL || !cg__pg_decode_bytea_hex(s, buf, n)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

cg_status cg_store_ctx_history_page(struct cg_store *store, const char *tenant_id,
                                    const char *session_id, uint32_t revision, int64_t from,
                                    int limit, struct cg_ctx_history_row *out, int *count,
                                    bool *more, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    *count = 0;
    *more = false;
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    char r[24], f[24], l[24];
    snprintf(r, sizeof r, "%u", revision);
    snprintf(f, sizeof f, "%lld", (long long)from);
    snprintf(l, sizeof l, "%d", limit + 1);
    const char *values[] = {id, session_id, r, f, l};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_history_page",
                    "SELECT position, message, tokens,"
                    " floor(extract(epoch FROM received_at) * 1000)::int8, compaction_id"
                    " FROM context_history WHERE tenant_id = $1::uuid AND session_id = $2"
                    " AND revision = $3::int AND position >= $4::int8 ORDER BY position"
                    " LIMIT $5::int",
                    5, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    int rows = PQntuples(res);
    *more = rows > limit;
    int n = rows > limit ? limit : rows;
    for (int i = 0; i < n; i++) {
        struct cg_ctx_history_row *row = &out[i];
        row->position = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        row->message = decode_bytea(PQgetvalue(res, i, 1), &row->len);
        if (row->message == NULL) {
            cg_store_ctx_rows_free(out, i);
            PQclear(res);
            return cg_err_set(err, CG_INTERNAL, "session_id: a stored message does not parse");
        }
        row->tokens = cg__pg_parse_i64(PQgetvalue(res, i, 2));
        row->received_at_ms = cg__pg_parse_i64(PQgetvalue(res, i, 3));
        cg__pg_copy_str(row->compaction_id, sizeof row->compaction_id, PQgetvalue(res, i, 4));
    }
    *count = n;
    PQclear(res);
    return CG_OK;
}

void cg_store_ctx_rows_free(struct cg_ctx_history_row *rows, int n)
{
    for (int i = 0; i < n; i++) {
        free(rows[i].message);
        rows[i].message = NULL;
    }
}

#define ARTIFACT_COLUMNS                                                                           \
    "artifact_id, session_id, compaction_id, seq, source_index, history_position,"                 \
    " tool_call_id, tool_name, media_type, octet_length(content), size_chars, tokens, sha256,"     \
    " preview_bytes, floor(extract(epoch FROM created_at) * 1000)::int8, pii_redacted"

static void read_artifact(PGresult *res, int row, struct cg_ctx_artifact *a)
{
    cg__pg_copy_str(a->artifact_id, sizeof a->artifact_id, PQgetvalue(res, row, 0));
    cg__pg_copy_str(a->session_id, sizeof a->session_id, PQgetvalue(res, row, 1));
    cg__pg_copy_str(a->compaction_id, sizeof a->compaction_id, PQgetvalue(res, row, 2));
    a->seq = cg__pg_parse_i64(PQgetvalue(res, row, 3));
    a->source_index = cg__pg_parse_i64(PQgetvalue(res, row, 4));
    a->history_position = cg__pg_parse_i64(PQgetvalue(res, row, 5));
    cg__pg_copy_str(a->tool_call_id, sizeof a->tool_call_id, PQgetvalue(res, row, 6));
    cg__pg_copy_str(a->tool_name, sizeof a->tool_name, PQgetvalue(res, row, 7));
    cg__pg_copy_str(a->media_type, sizeof a->media_type, PQgetvalue(res, row, 8));
    a->size_bytes = cg__pg_parse_i64(PQgetvalue(res, row, 9));
    a->size_chars = cg__pg_parse_i64(PQgetvalue(res, row, 10));
    a->tokens = cg__pg_parse_i64(PQgetvalue(res, row, 11));
    cg__pg_copy_str(a->sha256, sizeof a->sha256, PQgetvalue(res, row, 12));
    a->preview_bytes = cg__pg_parse_i64(PQgetvalue(res, row, 13));
    a->created_at_ms = cg__pg_parse_i64(PQgetvalue(res, row, 14));
    a->pii_redacted = strcmp(PQgetvalue(res, row, 15), "t") == 0;
}

cg_status cg_store_ctx_artifact_put(struct cg_store *store, const char *tenant_id,
                                    const struct cg_ctx_artifact *a, const void *content,
                                    size_t len, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_artifact_put", err)) != CG_OK)
        return rc;
    char si[24], hp[24], sc[24], tk[24], pb[24];
    snprintf(si, sizeof si, "%lld", (long long)a->source_index);
    snprintf(hp, sizeof hp, "%lld", (long long)a->history_position);
    snprintf(sc, sizeof sc, "%lld", (long long)a->size_chars);
    snprintf(tk, sizeof tk, "%lld", (long long)a->tokens);
    snprintf(pb, sizeof pb, "%lld", (long long)a->preview_bytes);
    const char *values[] = {id,
                            a->artifact_id,
                            a->session_id,
                            a->compaction_id,
                            si,
                            hp,
                            a->tool_call_id,
                            a->tool_name,
                            a->media_type,
                            sc,
                            tk,
                            a->sha256,
                            pb,
                            len ? content : "",
                            a->pii_redacted ? "t" : "f"};
    const int lengths[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, (int)len, 0};
    const int formats[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_artifact_put",
                    "INSERT INTO context_artifacts (tenant_id, artifact_id, session_id,"
                    " compaction_id, source_index, history_position, tool_call_id, tool_name,"
                    " media_type, size_chars, tokens, sha256, preview_bytes, content, pii_redacted)"
                    " VALUES ($1::uuid, $2, $3, $4, $5::int8, $6::int8, $7, $8, $9, $10::int8,"
                    " $11::int8, $12, $13::int8, $14::bytea, $15::boolean)",
                    15, values, lengths, formats, RUN_PINNED, &res, err);
    PQclear(res);
    if (rc != CG_OK && cg__pg_sqlstate_is(store->pg, "23505"))
        return cg_err_set(err, CG_ALREADY_EXISTS, "artifact_id: already exists");
    return rc;
}

cg_status cg_store_ctx_artifact_get(struct cg_store *store, const char *tenant_id,
                                    const char *artifact_id, int64_t offset, int64_t length,
                                    struct cg_ctx_artifact *info, void **content, size_t *len,
                                    struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    *content = NULL;
    *len = 0;
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    char off[24], n[24];
    /* substring() takes int: larger offsets are past any stored artifact anyway. */
    snprintf(off, sizeof off, "%lld", (long long)(offset < 2000000000 ? offset + 1 : 2000000000));
    snprintf(n, sizeof n, "%lld", (long long)(length < 2000000000 ? length : 2000000000));
    const char *values[] = {id, artifact_id, off, n};
    PGresult *res = NULL;
    rc = cg__pg_run_one(store->pg, "ctx_artifact_get",
                        "SELECT " ARTIFACT_COLUMNS ", substring(content FROM $3::int FOR $4::int)"
                        " FROM context_artifacts WHERE tenant_id = $1::uuid AND artifact_id = $2",
                        4, values, RUN_READ, "artifact_id: no such artifact", &res, err);
    if (rc != CG_OK) {
        PQclear(res);
        return rc;
    }
    read_artifact(res, 0, info);
    if (offset > info->size_bytes) {
        PQclear(res);
        return cg_err_set(err, CG_OUT_OF_RANGE, "offset: %lld is past the end (%lld bytes)",
                          (long long)offset, (long long)info->size_bytes);
    }
    *content = decode_bytea(PQgetvalue(res, 0, 16), len);
    PQclear(res);
    if (*content == NULL)
        return cg_err_set(err, CG_INTERNAL, "artifact_id: stored content does not parse");
    return CG_OK;
}

cg_status cg_store_ctx_artifact_list(struct cg_store *store, const char *tenant_id,
                                     const char *session_id, const char *tool_call_id,
                                     int64_t after_seq, int limit, struct cg_ctx_artifact *out,
                                     int *count, bool *more, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    *count = 0;
    *more = false;
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    char after[24], l[24];
    snprintf(after, sizeof after, "%lld", (long long)after_seq);
    snprintf(l, sizeof l, "%d", limit + 1);
    const char *values[] = {id, session_id, tool_call_id, after, l};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_artifact_list",
                    "SELECT " ARTIFACT_COLUMNS " FROM context_artifacts"
                    " WHERE tenant_id = $1::uuid AND session_id = $2"
                    " AND ($3 = '' OR tool_call_id = $3) AND seq > $4::int8"
                    " ORDER BY seq LIMIT $5::int",
                    5, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    int rows = PQntuples(res);
    *more = rows > limit;
    *count = rows > limit ? limit : rows;
    for (int i = 0; i < *count; i++)
        read_artifact(res, i, &out[i]);
    PQclear(res);
    return CG_OK;
}

/* ------------------------------------------------------------------ compactions ------- */

/* "{a,b,c}" of n integers into buf (cap bytes); false when it does not fit. */
static bool int_array(const int64_t *v, const int *iv, size_t n, char *buf, size_t cap)
{
    size_t at = 0;
    buf[at++] = '{';
    for (size_t i = 0; i < n; i++) {
        int w = snprintf(buf + at, cap - at, "%s%lld", i ? "," : "",
                         (long long)(v != NULL ? v[i] : iv[i]));
        if (w < 0 || (size_t)w >= cap - at)
            return false;
        at += (size_t)w;
    }
    if (at + 2 > cap)
        return false;
    buf[at++] = '}';
    buf[at] = '\0';
    return true;
}

cg_status cg_store_ctx_compaction_put(struct cg_store *store, const char *tenant_id,
                                      const struct cg_ctx_compaction *c, struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_compaction_put", err)) != CG_OK)
        return rc;
    enum { CAP = 64 * 24 };
    char arrays[5][CAP];
    if (c->n_layers > 64 || !int_array(NULL, c->layer, c->n_layers, arrays[0], CAP) ||
        !int_array(NULL, c->outcome, c->n_layers, arrays[1], CAP) ||
        !int_array(c->saved, NULL, c->n_layers, arrays[2], CAP) ||
        !int_array(c->affected, NULL, c->n_layers, arrays[3], CAP) ||
        !int_array(c->ms, NULL, c->n_layers, arrays[4], CAP))
        return cg_err_set(err, CG_INTERNAL, "too many layer results to record");
    char st[8], tb[24], ta[24], ci[24], na[16], ab[24];
    snprintf(st, sizeof st, "%d", c->strategy);
    snprintf(tb, sizeof tb, "%lld", (long long)c->tokens_before);
    snprintf(ta, sizeof ta, "%lld", (long long)c->tokens_after);
    snprintf(ci, sizeof ci, "%lld", (long long)c->cache_tokens_invalidated);
    snprintf(na, sizeof na, "%d", c->artifacts);
    snprintf(ab, sizeof ab, "%lld", (long long)c->artifact_bytes);
    char cw[24], ew[24];
    snprintf(cw, sizeof cw, "%lld", (long long)c->context_window);
    snprintf(ew, sizeof ew, "%lld", (long long)c->effective_window);
    const char *values[] = {id,
                            c->session_id,
                            c->compaction_id,
                            st,
                            c->triggered ? "t" : "f",
                            tb,
                            ta,
                            c->boundary_moved ? "t" : "f",
                            ci,
                            na,
                            ab,
                            arrays[0],
                            arrays[1],
                            arrays[2],
                            arrays[3],
                            arrays[4],
                            cw,
                            ew};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_compaction_put",
                    "INSERT INTO context_compactions (tenant_id, session_id, compaction_id,"
                    " strategy, triggered, tokens_before, tokens_after, boundary_moved,"
                    " cache_tokens_invalidated, artifacts, artifact_bytes, layer, layer_outcome,"
                    " layer_saved, layer_affected, layer_ms, context_window, effective_window)"
                    " VALUES ($1::uuid, $2, $3, $4::int2, $5::bool, $6::int8, $7::int8, $8::bool,"
                    " $9::int8, $10::int, $11::int8, $12::int[], $13::int[], $14::int8[],"
                    " $15::int8[], $16::int8[], $17::int8, $18::int8)",
                    18, values, NULL, NULL, RUN_PINNED, &res, err);
    PQclear(res);
    return rc;
}

#define STATS_WHERE                                                                                \
    " WHERE tenant_id = $1::uuid AND ($2 = '' OR session_id = $2)"                                 \
    " AND ($3::int8 = 0 OR created_at >= to_timestamp($3::int8 / 1000.0))"                         \
    " AND ($4::int8 = 0 OR created_at < to_timestamp($4::int8 / 1000.0))"

/* A session's latest compaction record (the session index, newest first), into out->latest_*. */
static cg_status ctx_stats_latest(struct cg_store *store, const char *tenant_uuid,
                                  const char *session_id, struct cg_ctx_stats *out,
                                  struct cg_err *err)
{
    const char *values[] = {tenant_uuid, session_id};
    PGresult *res = NULL;
    cg_status rc = cg__pg_run(store->pg, "ctx_stats_latest",
                              "SELECT tokens_after, context_window, effective_window,"
                              " floor(extract(epoch FROM created_at) * 1000)::int8"
                              " FROM context_compactions WHERE tenant_id = $1::uuid"
                              " AND session_id = $2 ORDER BY created_at DESC LIMIT 1",
                              2, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    if (PQntuples(res) == 1) {
        out->latest_tokens = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
        out->latest_context_window = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
        out->latest_effective_window = cg__pg_parse_i64(PQgetvalue(res, 0, 2));
        out->latest_ms = cg__pg_parse_i64(PQgetvalue(res, 0, 3));
    }
    PQclear(res);
    return CG_OK;
}

cg_status cg_store_ctx_stats(struct cg_store *store, const char *tenant_id, const char *session_id,
                             int64_t since_ms, int64_t until_ms, struct cg_ctx_stats *out,
                             struct cg_err *err)
{
    char id[CG_UUID_LEN + 1];
    memset(out, 0, sizeof *out);
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    char since[24], until[24];
    snprintf(since, sizeof since, "%lld", (long long)since_ms);
    snprintf(until, sizeof until, "%lld", (long long)until_ms);
    const char *values[] = {id, session_id, since, until};
    PGresult *res = NULL;
    rc = cg__pg_run(store->pg, "ctx_stats_totals",
                    "SELECT count(*), count(*) FILTER (WHERE triggered),"
                    " coalesce(sum(tokens_before), 0), coalesce(sum(tokens_after), 0),"
                    " coalesce(sum(artifacts), 0), coalesce(sum(artifact_bytes), 0),"
                    " count(*) FILTER (WHERE boundary_moved),"
                    " coalesce(sum(cache_tokens_invalidated), 0),"
                    " coalesce(floor(extract(epoch FROM min(created_at)) * 1000)::int8, 0),"
                    " coalesce(floor(extract(epoch FROM max(created_at)) * 1000)::int8, 0)"
                    " FROM context_compactions" STATS_WHERE,
                    4, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    int64_t *f[] = {
        &out->calls,     &out->triggered,      &out->tokens_before,  &out->tokens_after,
        &out->artifacts, &out->artifact_bytes, &out->boundary_moves, &out->cache_tokens_invalidated,
        &out->first_ms,  &out->last_ms};
    for (int i = 0; i < 10; i++)
        *f[i] = cg__pg_parse_i64(PQgetvalue(res, 0, i));
    PQclear(res);
    rc =
        cg__pg_run(store->pg, "ctx_stats_layers",
                   "SELECT u.l, count(*), count(*) FILTER (WHERE u.o = 2),"
                   " count(*) FILTER (WHERE u.o = 4), coalesce(sum(u.s) FILTER (WHERE u.o = 2), 0),"
                   " coalesce(sum(u.a), 0), coalesce(sum(u.ms), 0)"
                   " FROM context_compactions c,"
                   " unnest(c.layer, c.layer_outcome, c.layer_saved, c.layer_affected, c.layer_ms)"
                   " AS u(l, o, s, a, ms)" STATS_WHERE " GROUP BY u.l ORDER BY u.l",
                   4, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) {
        int64_t l = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        if (l < 0 || l >= CG_CTX_STATS_LAYERS)
            continue;
        out->layer[l].runs = cg__pg_parse_i64(PQgetvalue(res, i, 1));
        out->layer[l].applied = cg__pg_parse_i64(PQgetvalue(res, i, 2));
        out->layer[l].failed = cg__pg_parse_i64(PQgetvalue(res, i, 3));
        out->layer[l].saved = cg__pg_parse_i64(PQgetvalue(res, i, 4));
        out->layer[l].affected = cg__pg_parse_i64(PQgetvalue(res, i, 5));
        out->layer[l].ms = cg__pg_parse_i64(PQgetvalue(res, i, 6));
    }
    PQclear(res);
    rc = cg__pg_run(store->pg, "ctx_stats_strategies",
                    "SELECT strategy, count(*), count(*) FILTER (WHERE triggered),"
                    " coalesce(sum(tokens_before - tokens_after), 0)"
                    " FROM context_compactions" STATS_WHERE " GROUP BY strategy ORDER BY strategy",
                    4, values, NULL, NULL, RUN_READ, &res, err);
    if (rc != CG_OK)
        return rc;
    for (int i = 0; i < PQntuples(res); i++) {
        int64_t s = cg__pg_parse_i64(PQgetvalue(res, i, 0));
        if (s < 0 || s >= CG_CTX_STATS_STRATEGIES)
            continue;
        out->strategy[s].calls = cg__pg_parse_i64(PQgetvalue(res, i, 1));
        out->strategy[s].triggered = cg__pg_parse_i64(PQgetvalue(res, i, 2));
        out->strategy[s].saved = cg__pg_parse_i64(PQgetvalue(res, i, 3));
    }
    PQclear(res);
    return session_id[0] != '\0' ? ctx_stats_latest(store, id, session_id, out, err) : CG_OK;
}

/* ------------------------------------------------------------------ retention --------- */

cg_status cg_store_ctx_artifacts_trim(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, int keep, int clean_at, int *deleted,
                                      struct cg_err *err)
{
    *deleted = 0;
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK || (rc = in_tx(store, "ctx_artifacts_trim", err)) != CG_OK)
        return rc;
    if (keep < 1 || clean_at < keep)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "keep: must be 1..clean_at");
    char k[16], c[16];
    snprintf(k, sizeof k, "%d", keep);
    snprintf(c, sizeof c, "%d", clean_at);
    const char *values[] = {id, session_id, k, c};
    PGresult *res = NULL;
    /* The count reads the session's index entries only; past clean_at the oldest (by seq)
     * beyond keep go. */
    rc = cg__pg_run_one(store->pg, "ctx_artifacts_trim",
                        "WITH n AS (SELECT count(*) AS c FROM context_artifacts"
                        "  WHERE tenant_id = $1::uuid AND session_id = $2),"
                        " gone AS (DELETE FROM context_artifacts WHERE tenant_id = $1::uuid"
                        "  AND session_id = $2 AND (SELECT c FROM n) > $4::int AND seq IN"
                        "  (SELECT seq FROM context_artifacts WHERE tenant_id = $1::uuid"
                        "   AND session_id = $2 ORDER BY seq"
                        "   LIMIT greatest((SELECT c FROM n) - $3::int, 0)) RETURNING 1)"
                        " SELECT count(*) FROM gone",
                        4, values, RUN_PINNED, "session_id: no such session", &res, err);
    if (rc == CG_OK)
        *deleted = (int)cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

cg_status cg_store_ctx_session_delete(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, const struct cg_audit *audit,
                                      struct cg_ctx_deleted *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    char id[CG_UUID_LEN + 1];
    cg_status rc = cg__store_open_call(store, tenant_id, id, err);
    if (rc != CG_OK)
        return rc;
    struct cg__pg_actor actor;
    cg__pg_actor(audit, &actor);
    const char *values[] = {id, session_id, actor.key_id, actor.role, actor.request_id};
    PGresult *res = NULL;
    /* The children are counted before the session row's delete cascades to them (every
     * part of a statement sees the same snapshot); the audit row goes with it. */
    rc = cg__pg_run_one(store->pg, "ctx_session_delete",
                        "WITH gone AS (DELETE FROM context_sessions WHERE tenant_id = $1::uuid"
                        "  AND session_id = $2 RETURNING tenant_id),"
                        " n AS (SELECT (SELECT count(*) FROM context_history"
                        "  WHERE tenant_id = $1::uuid AND session_id = $2) AS messages,"
                        "  (SELECT count(*) FROM context_artifacts"
                        "  WHERE tenant_id = $1::uuid AND session_id = $2) AS artifacts,"
                        "  (SELECT count(*) FROM context_compactions"
                        "  WHERE tenant_id = $1::uuid AND session_id = $2) AS compactions),"
                        " audit AS (" AUDIT_INSERT " SELECT g.tenant_id, $3::text, $4::int2,"
                        "  'session_deleted', '', '', '', $2, to_jsonb(n), NULL, $5::text"
                        "  FROM gone g, n)"
                        " SELECT n.messages, n.artifacts, n.compactions FROM gone, n",
                        5, values, 0, "session_id: no such session", &res, err);
    if (rc == CG_OK) {
        out->messages = cg__pg_parse_i64(PQgetvalue(res, 0, 0));
        out->artifacts = cg__pg_parse_i64(PQgetvalue(res, 0, 1));
        out->compactions = cg__pg_parse_i64(PQgetvalue(res, 0, 2));
    }
    PQclear(res);
    return rc;
}

cg_status cg_store_ctx_retention(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t now_ms, int limit, int *deleted, struct cg_err *err)
{
    *deleted = 0;
    if (limit < 1 || limit > CG_SWEEP_BATCH_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "limit: must be 1..%d", CG_SWEEP_BATCH_MAX);
    char *tenants = NULL;
    cg_status rc = cg__store_open_page(store, tenant_ids, n, &tenants, err);
    if (rc != CG_OK)
        return rc;
    char now[24], lim[16];
    snprintf(now, sizeof now, "%lld", (long long)now_ms);
    snprintf(lim, sizeof lim, "%d", limit);
    const char *values[] = {tenants, now, lim};
    PGresult *res = NULL;
    /* The page's tenants that keep sessions for a while, then their sessions idle past it
     * (context_sessions_by_update, one range per such tenant), oldest first. */
    rc = cg__pg_run(store->pg, "ctx_retention",
                    "WITH t AS (SELECT tenant_id, history_retention_days AS d FROM tenants"
                    "  WHERE tenant_id = ANY($1::uuid[]) AND history_retention_days > 0),"
                    " old AS (SELECT s.tenant_id, s.session_id FROM context_sessions s"
                    "  JOIN t ON s.tenant_id = t.tenant_id WHERE s.updated_at <"
                    "  to_timestamp($2::int8 / 1000.0) - make_interval(days => t.d)"
                    "  ORDER BY s.updated_at LIMIT $3::int FOR UPDATE OF s SKIP LOCKED),"
                    " gone AS (DELETE FROM context_sessions WHERE (tenant_id, session_id) IN"
                    "  (SELECT tenant_id, session_id FROM old) RETURNING 1)"
                    " SELECT count(*) FROM gone",
                    3, values, NULL, NULL, 0, &res, err);
    free(tenants);
    if (rc == CG_OK)
        *deleted = (int)cg__pg_parse_i64(PQgetvalue(res, 0, 0));
    PQclear(res);
    return rc;
}

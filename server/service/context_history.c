/* context_history.c - the reads of what stateful Compress kept (context_history.h): plain
 * reads of the session row, the history, the artifacts and the compaction totals.
 */
#include "service/context_history.h"
#include "service/op_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most history rows counted when an older revision's size is asked for. */
#define HISTORY_MAX 200000

/* The session's row; NOT_FOUND ("session_id: no such session") when it does not exist. */
static cg_status session_get(const struct cg_svc_env *env, const struct cg_op *op,
                             const char *session_id, struct cg_ctx_session *sess)
{
    struct cg_err serr = {0};
    if (cg_store_ctx_session_get(env->store, op->principal->tenant_id, session_id, sess, &serr) !=
        CG_OK)
        return cg_op_store_error(op, &serr);
    return CG_OK;
}

cg_status cg_ctx_artifact_read(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *artifact_id, int64_t offset, int64_t length,
                               struct cg_ctx_artifact *info, void **content, size_t *len)
{
    struct cg_err serr = {0};
    memset(info, 0, sizeof *info);
    *content = NULL;
    *len = 0;
    cg_status st = cg_store_ctx_artifact_get(env->store, op->principal->tenant_id, artifact_id,
                                             offset, length, info, content, len, &serr);
    if (st != CG_OK)
        cg_op_store_error(op, &serr);
    return st;
}

cg_status cg_ctx_artifact_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *session_id, const char *tool_call_id, int64_t after_seq,
                               int limit, struct cg_ctx_artifact_page *out)
{
    memset(out, 0, sizeof *out);
    struct cg_ctx_session sess; /* the session must exist: an unknown one is NOT_FOUND */
    struct cg_err serr = {0};
    cg_status st = session_get(env, op, session_id, &sess);
    if (st != CG_OK)
        return st;
    if ((out->rows = calloc((size_t)limit, sizeof *out->rows)) == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    if (cg_store_ctx_artifact_list(env->store, op->principal->tenant_id, session_id, tool_call_id,
                                   after_seq, limit, out->rows, &out->count, &out->more,
                                   &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    if (out->more && out->count > 0)
        snprintf(out->next_page_token, sizeof out->next_page_token, "s%lld",
                 (long long)out->rows[out->count - 1].seq);
    return CG_OK;
}

void cg_ctx_artifact_page_cleanup(struct cg_ctx_artifact_page *page)
{
    free(page->rows);
    page->rows = NULL;
    page->count = 0;
}

/* How many messages an older revision holds (0 when they cannot be counted). */
static int64_t revision_size(const struct cg_svc_env *env, const struct cg_op *op,
                             const char *session_id, uint32_t revision)
{
    int64_t found = 0;
    struct cg_err serr = {0};
    uint8_t *digests = malloc((size_t)HISTORY_MAX * CG_CTX_DIGEST_LEN);
    if (digests == NULL ||
        cg_store_ctx_history_digests(env->store, op->principal->tenant_id, session_id, revision,
                                     HISTORY_MAX, digests, &found, &serr) != CG_OK)
        found = 0;
    free(digests);
    return found;
}

cg_status cg_ctx_history_read(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *session_id, uint32_t revision, int64_t from, int limit,
                              struct cg_ctx_history_page *out)
{
    memset(out, 0, sizeof *out);
    struct cg_ctx_session sess;
    cg_status st = session_get(env, op, session_id, &sess);
    if (st != CG_OK)
        return st;
    struct cg_err serr = {0};
    out->revision = revision ? revision : sess.revision;
    if (out->revision > sess.revision)
        return cg_err_set(op->err, CG_NOT_FOUND, "revision: no such revision (latest %u)",
                          sess.revision);
    out->latest_revision = sess.revision;
    out->trim_boundary = sess.trim_boundary;
    if ((out->rows = calloc((size_t)limit, sizeof *out->rows)) == NULL)
        return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
    bool more;
    if (cg_store_ctx_history_page(env->store, op->principal->tenant_id, session_id, out->revision,
                                  from, limit, out->rows, &out->count, &more, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    if (more && out->count > 0)
        snprintf(out->next_page_token, sizeof out->next_page_token, "p%lld",
                 (long long)out->rows[out->count - 1].position + 1);
    out->total_messages = out->revision == sess.revision
                              ? sess.history_messages
                              : revision_size(env, op, session_id, out->revision);
    return CG_OK;
}

void cg_ctx_history_page_cleanup(struct cg_ctx_history_page *page)
{
    if (page->rows != NULL)
        cg_store_ctx_rows_free(page->rows, page->count);
    free(page->rows);
    page->rows = NULL;
    page->count = 0;
}

cg_status cg_ctx_stats_read(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *session_id, int64_t since_ms, int64_t until_ms,
                            struct cg_ctx_session *session, struct cg_ctx_stats *stats)
{
    memset(session, 0, sizeof *session);
    cg_status st = session_id[0] != '\0' ? session_get(env, op, session_id, session) : CG_OK;
    if (st != CG_OK)
        return st;
    struct cg_err serr = {0};
    if (cg_store_ctx_stats(env->store, op->principal->tenant_id, session_id, since_ms, until_ms,
                           stats, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    return CG_OK;
}

cg_status cg_ctx_session_delete(const struct cg_svc_env *env, const struct cg_op *op,
                                const char *session_id, const struct cg_audit *audit,
                                struct cg_ctx_deleted *out)
{
    struct cg_err serr = {0};
    if (cg_store_ctx_session_delete(env->store, op->principal->tenant_id, session_id, audit, out,
                                    &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    return CG_OK;
}

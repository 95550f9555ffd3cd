/* context_history.h - the reads of what stateful Compress kept (store/store_context.h), for
 * GetArtifact, ListArtifacts, GetHistory and GetCompressionStats, in domain types, and
 * DeleteSession.
 *
 * Each function reads through env->store (a pool thread's) with plain reads (no transaction),
 * for op->principal's tenant. On error op->err says why, as the store gave it
 * ("session_id: no such session", "artifact_id: no such artifact"). Not thread-safe beyond
 * its store (one worker's).
 */
#ifndef CG_SERVICE_CONTEXT_HISTORY_H
#define CG_SERVICE_CONTEXT_HISTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "service/service.h"
#include "store/store_context.h"

/* An artifact's description into *info and content[offset, offset + length) into *content
 * (malloc'd, *len bytes; the caller frees it). NOT_FOUND for an unknown id; OUT_OF_RANGE for
 * an offset past its end, with *info filled then too (whose artifact it is decides what the
 * caller may learn). */
cg_status cg_ctx_artifact_read(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *artifact_id, int64_t offset, int64_t length,
                               struct cg_ctx_artifact *info, void **content,
                               size_t *len) CG_MUST_CHECK;

/* One page of a session's artifacts. */
struct cg_ctx_artifact_page {
    struct cg_ctx_artifact *rows; /* count rows (malloc'd): cg_ctx_artifact_page_cleanup */
    int count;
    bool more;                /* others follow */
    char next_page_token[32]; /* "s<seq>" of the last row when more, else "" */
};

/* Up to limit artifacts of the session with seq > after_seq (oldest first), only those of
 * tool_call_id when it is not "". NOT_FOUND when the session does not exist. out needs
 * cg_ctx_artifact_page_cleanup after success and after failure alike. */
cg_status cg_ctx_artifact_list(const struct cg_svc_env *env, const struct cg_op *op,
                               const char *session_id, const char *tool_call_id, int64_t after_seq,
                               int limit, struct cg_ctx_artifact_page *out) CG_MUST_CHECK;

/* Frees the rows of a page (a zeroed page too). */
void cg_ctx_artifact_page_cleanup(struct cg_ctx_artifact_page *page);

/* One page of a session's history (GetHistory). */
struct cg_ctx_history_page {
    struct cg_ctx_history_row *rows; /* count rows (malloc'd): cg_ctx_history_page_cleanup */
    int count;
    uint32_t revision;        /* the revision read */
    uint32_t latest_revision; /* the session's current one */
    int64_t total_messages;   /* in the revision read (0 when an older one cannot be counted) */
    int64_t trim_boundary;
    char next_page_token[32]; /* "p<position>" of the row after the last when more, else "" */
};

/* Up to limit messages of the session's revision (0: the current one) from position `from`
 * on. NOT_FOUND "revision: no such revision (latest N)" for a revision past the current one;
 * NOT_FOUND for an unknown session. out needs cg_ctx_history_page_cleanup after success and
 * after failure alike. */
cg_status cg_ctx_history_read(const struct cg_svc_env *env, const struct cg_op *op,
                              const char *session_id, uint32_t revision, int64_t from, int limit,
                              struct cg_ctx_history_page *out) CG_MUST_CHECK;

/* Frees the rows of a page (a zeroed page too). */
void cg_ctx_history_page_cleanup(struct cg_ctx_history_page *page);

/* The tenant's compaction totals (of one session when session_id is not "") created in
 * [since_ms, until_ms) (0: unbounded) into *stats, and the session's row into *session (all
 * 0 when session_id is ""). NOT_FOUND for an unknown session. */
cg_status cg_ctx_stats_read(const struct cg_svc_env *env, const struct cg_op *op,
                            const char *session_id, int64_t since_ms, int64_t until_ms,
                            struct cg_ctx_session *session,
                            struct cg_ctx_stats *stats) CG_MUST_CHECK;

/* Deletes the session whole (cg_store_ctx_session_delete) with the audit row by audit's
 * actor; *out what went with it. NOT_FOUND for an unknown session. */
cg_status cg_ctx_session_delete(const struct cg_svc_env *env, const struct cg_op *op,
                                const char *session_id, const struct cg_audit *audit,
                                struct cg_ctx_deleted *out) CG_MUST_CHECK;

#endif

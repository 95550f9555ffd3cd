/* store_context.h - what stateful Compress keeps per session (migrations/0010_context_state):
 * the session row (trim boundary, history revision and size), the original messages
 * (protobuf-encoded ctxguard.v1.Message with their SHA-256), and offloaded artifacts.
 *
 * Every function takes the tenant id (a UUID; anything else is NOT_FOUND) and runs on the
 * store's connection; the writers run inside a transaction the caller opened with
 * cg_store_begin (CG_INTERNAL outside one). Errors name the field the client gave
 * ("session_id: no such session", "artifact_id: no such artifact"); SQL goes to the log.
 * Not thread-safe (a store belongs to one worker).
 */
#ifndef CG_STORE_CONTEXT_H
#define CG_STORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define CG_CTX_DIGEST_LEN 32
#define CG_CTX_ID_MAX 64

struct cg_ctx_session {
    int64_t trim_boundary;
    uint32_t revision;
    int64_t history_messages; /* in the current revision */
    int64_t version;          /* moves on every cg_store_ctx_session_update (0: never saved) */
    bool created;             /* made by this call (cg_store_ctx_session_lock) */
};

/* Inside a transaction: the session's row, created when missing (revision 1, boundary 0),
 * locked FOR UPDATE so that concurrent calls of one session run one after the other. */
cg_status cg_store_ctx_session_lock(struct cg_store *store, const char *tenant_id,
                                    const char *session_id, struct cg_ctx_session *out,
                                    struct cg_err *err) CG_MUST_CHECK;

/* The session's row without creating it; CG_NOT_FOUND ("session_id: no such session"). */
cg_status cg_store_ctx_session_get(struct cg_store *store, const char *tenant_id,
                                   const char *session_id, struct cg_ctx_session *out,
                                   struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: sets the boundary, revision and history size, and moves the
 * session's version on by one. */
cg_status cg_store_ctx_session_update(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, const struct cg_ctx_session *s,
                                      struct cg_err *err) CG_MUST_CHECK;

/* The digests of positions [0, n) of a revision, in order, into digests (n x 32 bytes,
 * caller's). *found gets how many rows there were (< n when the history is shorter). */
cg_status cg_store_ctx_history_digests(struct cg_store *store, const char *tenant_id,
                                       const char *session_id, uint32_t revision, int64_t n,
                                       uint8_t *digests, int64_t *found,
                                       struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: stores one message at (revision, position). */
cg_status cg_store_ctx_history_put(struct cg_store *store, const char *tenant_id,
                                   const char *session_id, uint32_t revision, int64_t position,
                                   const void *message, size_t len,
                                   const uint8_t digest[CG_CTX_DIGEST_LEN], int64_t tokens,
                                   const char *compaction_id, struct cg_err *err) CG_MUST_CHECK;

/* One stored message as GetHistory returns it; message is malloc'd (free it). */
struct cg_ctx_history_row {
    int64_t position;
    void *message;
    size_t len;
    int64_t tokens;
    int64_t received_at_ms;
    char compaction_id[CG_CTX_ID_MAX];
};

/* Up to limit rows of a revision from position `from` on, in order; *count how many, *more
 * whether others follow. The caller frees each row's message (cg_store_ctx_rows_free). */
cg_status cg_store_ctx_history_page(struct cg_store *store, const char *tenant_id,
                                    const char *session_id, uint32_t revision, int64_t from,
                                    int limit, struct cg_ctx_history_row *out, int *count,
                                    bool *more, struct cg_err *err) CG_MUST_CHECK;

void cg_store_ctx_rows_free(struct cg_ctx_history_row *rows, int n);

struct cg_ctx_artifact {
    char artifact_id[CG_CTX_ID_MAX];
    char session_id[CG_SCOPE_ID_MAX + 1];
    char compaction_id[CG_CTX_ID_MAX];
    int64_t seq;
    int64_t source_index, history_position;
    char tool_call_id[257];
    char tool_name[257];
    char media_type[32];
    int64_t size_bytes, size_chars, tokens;
    char sha256[65];
    int64_t preview_bytes;
    int64_t created_at_ms;
    bool pii_redacted; /* redacted before storing (the tenant's redact_artifacts) */
};

/* Inside a transaction: stores an artifact (info's seq, size_bytes and created_at are set by
 * the store). CG_ALREADY_EXISTS for a duplicate id. */
cg_status cg_store_ctx_artifact_put(struct cg_store *store, const char *tenant_id,
                                    const struct cg_ctx_artifact *info, const void *content,
                                    size_t len, struct cg_err *err) CG_MUST_CHECK;

/* An artifact's description and content[offset, offset + length) (malloc'd into *content,
 * *len bytes; the caller frees it). CG_NOT_FOUND for an unknown id, CG_OUT_OF_RANGE for an
 * offset past the end (info is filled then too: whose artifact it is decides what the
 * caller may learn). */
cg_status cg_store_ctx_artifact_get(struct cg_store *store, const char *tenant_id,
                                    const char *artifact_id, int64_t offset, int64_t length,
                                    struct cg_ctx_artifact *info, void **content, size_t *len,
                                    struct cg_err *err) CG_MUST_CHECK;

/* Up to limit artifacts of a session with seq > after_seq (oldest first), only those of
 * tool_call_id when it is not "". */
cg_status cg_store_ctx_artifact_list(struct cg_store *store, const char *tenant_id,
                                     const char *session_id, const char *tool_call_id,
                                     int64_t after_seq, int limit, struct cg_ctx_artifact *out,
                                     int *count, bool *more, struct cg_err *err) CG_MUST_CHECK;

/* One stateful Compress for GetCompressionStats. The layer arrays hold n_layers entries. */
struct cg_ctx_compaction {
    const char *session_id;
    const char *compaction_id;
    int strategy;
    bool triggered, boundary_moved;
    int64_t tokens_before, tokens_after, cache_tokens_invalidated;
    int64_t context_window, effective_window; /* the window the call worked in */
    int artifacts;
    int64_t artifact_bytes;
    size_t n_layers;
    const int *layer, *outcome;
    const int64_t *saved, *affected, *ms;
};

/* Inside a transaction: records c. */
cg_status cg_store_ctx_compaction_put(struct cg_store *store, const char *tenant_id,
                                      const struct cg_ctx_compaction *c,
                                      struct cg_err *err) CG_MUST_CHECK;

#define CG_CTX_STATS_LAYERS 8
#define CG_CTX_STATS_STRATEGIES 3

struct cg_ctx_stats {
    int64_t calls, triggered, tokens_before, tokens_after, artifacts, artifact_bytes;
    int64_t boundary_moves, cache_tokens_invalidated, first_ms, last_ms;
    struct {
        int64_t runs, applied, failed, saved, affected, ms;
    } layer[CG_CTX_STATS_LAYERS]; /* by layer value; runs 0: never ran */
    struct {
        int64_t calls, triggered, saved;
    } strategy[CG_CTX_STATS_STRATEGIES]; /* by strategy value */
    /* A session's latest compaction whatever the range (latest_ms 0: none): its output's
     * tokens and the window it worked in (0 when recorded before the window was kept). */
    int64_t latest_tokens, latest_context_window, latest_effective_window, latest_ms;
};

/* Totals of the tenant's compactions (of one session when session_id is not "") created in
 * [since_ms, until_ms) (0: unbounded), and for a session its latest compaction. */
cg_status cg_store_ctx_stats(struct cg_store *store, const char *tenant_id, const char *session_id,
                             int64_t since_ms, int64_t until_ms, struct cg_ctx_stats *out,
                             struct cg_err *err) CG_MUST_CHECK;

/* Inside a transaction: when the session holds more than clean_at artifacts, deletes its
 * oldest ones down to keep (1 <= keep <= clean_at); *deleted gets how many. The messages
 * they came from stay in the history. */
cg_status cg_store_ctx_artifacts_trim(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, int keep, int clean_at, int *deleted,
                                      struct cg_err *err) CG_MUST_CHECK;

/* What a session's deletion took with it. */
struct cg_ctx_deleted {
    int64_t messages, artifacts, compactions;
};

/* One statement (so one transaction): the session's row, every revision of its history,
 * its artifacts and compaction records, with the audit row session_deleted (before: the
 * counts) by audit's actor. CG_NOT_FOUND ("session_id: no such session"). */
cg_status cg_store_ctx_session_delete(struct cg_store *store, const char *tenant_id,
                                      const char *session_id, const struct cg_audit *audit,
                                      struct cg_ctx_deleted *out, struct cg_err *err) CG_MUST_CHECK;

/* One statement: deletes up to limit of the sessions of the n tenants of tenant_ids (a
 * page of the sweeper) that nobody saved for their tenant's history_retention_days before
 * now_ms (nothing for a tenant where that is 0), whole, as cg_store_ctx_session_delete,
 * oldest first; *deleted gets how many sessions (limit: more may be left). */
cg_status cg_store_ctx_retention(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                                 int n, int64_t now_ms, int limit, int *deleted,
                                 struct cg_err *err) CG_MUST_CHECK;

#endif

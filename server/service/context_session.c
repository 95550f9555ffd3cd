/* context_session.c - the session flow of a stateful Compress (context_session.h): load in one
 * short transaction, the work with no transaction open, save in one short transaction with
 * a check of the session's version.
 *
 * Why not one transaction around the whole call: the work may call an LLM for seconds, and a
 * transaction held that long keeps a pool connection and the session row locked, so every
 * other call of the session would wait on the lock (and fail on its statement timeout). The
 * version check gives the same result as running the calls one after the other: a call
 * whose load is out of date by the time it saves throws its work away and runs again on
 * what the other call saved.
 */
#include "service/context_session.h"
#include "service/op_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crypto.h"
#include "base/log.h"
#include "core/utf8.h"

#define PAGE_MAX 1000
#define HISTORY_MAX 200000

/* "prefix" + 26 random base32 characters. */
static void random_id(const char *prefix, char *out, size_t cap)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
    uint8_t bytes[26];
    if (cg_random_bytes(bytes, sizeof bytes) != CG_OK)
        memset(bytes, 0, sizeof bytes); /* cannot happen after start-up checks; ids collide
                                         * visibly (ALREADY_EXISTS) rather than silently */
    size_t p = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof bytes && p + 1 < cap; i++)
        out[p++] = alphabet[bytes[i] & 31];
    out[p] = '\0';
}

void cg_ctx_session_name_artifact(void *ctx, size_t index, char id[64])
{
    (void)ctx;
    (void)index;
    random_id("art_", id, 64);
}

/* Packs the messages [from, n) of conv with their digests into s (the arena). */
static cg_status pack_from(const struct cg_op *op, const struct cg_ctx_session_req *req,
                           const struct cg_conv *conv, size_t from, struct cg_ctx_session_state *s)
{
    cg_status st =
        req->codec->pack(req->codec->ctx, op->arena, conv, from, &s->data, &s->len, op->err);
    if (st != CG_OK)
        return st;
    s->digest = cg_arena_alloc(op->arena, (conv->n_messages + 1) * sizeof *s->digest);
    if (s->digest == NULL)
        return cg_op_oom(op);
    for (size_t i = from; i < conv->n_messages; i++)
        cg_sha256(s->data[i], s->len[i], s->digest[i]);
    return CG_OK;
}

/* The stored messages of a revision [0, n) decoded by the codec into the arena. */
static cg_status read_history(const struct cg_svc_env *env, const struct cg_op *op,
                              const struct cg_ctx_session_req *req, const char *session_id,
                              uint32_t revision, int64_t n, void ***out)
{
    void **msgs = cg_arena_alloc(op->arena, (size_t)(n + 1) * sizeof *msgs);
    struct cg_ctx_history_row *rows = calloc(PAGE_MAX, sizeof *rows);
    if (msgs == NULL || rows == NULL) {
        free(rows);
        return cg_op_oom(op);
    }
    int64_t at = 0;
    struct cg_err serr = {0};
    while (at < n) {
        int count;
        bool more;
        if (cg_store_ctx_history_page(env->store, op->principal->tenant_id, session_id, revision,
                                      at, PAGE_MAX, rows, &count, &more, &serr) != CG_OK) {
            free(rows);
            return cg_op_store_error(op, &serr);
        }
        if (count == 0)
            break;
        for (int i = 0; i < count && at < n; i++, at++) {
            msgs[at] = req->codec->unpack(req->codec->ctx, op->arena, rows[i].message, rows[i].len);
            if (msgs[at] == NULL) {
                cg_store_ctx_rows_free(rows, count);
                free(rows);
                return cg_err_set(op->err, CG_INTERNAL,
                                  "session_id: stored message %lld does not decode", (long long)at);
            }
        }
        cg_store_ctx_rows_free(rows, count);
        if (!more)
            break;
    }
    free(rows);
    if (at != n)
        return cg_err_set(op->err, CG_INTERNAL, "session_id: the stored history is short");
    *out = msgs;
    return CG_OK;
}

/* APPEND: the whole history then the new messages, as one conversation in s->joined: the
 * stored messages decoded, the new ones copied as they are (the request's conversation is
 * not converted again). Tools given in the JSON of the new messages stay the tools. */
static cg_status join_history(const struct cg_op *op, const struct cg_ctx_session_req *req,
                              void *const *stored, int64_t n, struct cg_ctx_session_state *s)
{
    const struct cg_conv *added = req->conv;
    struct cg_conv *full = NULL;
    cg_status st =
        req->codec->decode(req->codec->ctx, op->arena, stored, (size_t)n, &full, op->err);
    if (st != CG_OK)
        return st;
    for (size_t i = 0; i < added->n_messages; i++) {
        if ((st = cg_conv_copy_message(full, &added->messages[i], op->err)) != CG_OK) {
            cg_conv_free(full);
            return st;
        }
    }
    if (full->n_tools == 0) {
        for (size_t i = 0; i < added->n_tools; i++) {
            struct cg_tool_def *t;
            const struct cg_tool_def *o = &added->tools[i];
            if (cg_conv_add_tool(full, &t, op->err) != CG_OK ||
                cg_conv_str(full, o->name.ptr, o->name.len, &t->name, op->err) ||
                cg_conv_str(full, o->description.ptr, o->description.len, &t->description,
                            op->err) ||
                cg_conv_str(full, o->parameters.ptr, o->parameters.len, &t->parameters, op->err) ||
                cg_conv_str(full, o->type.ptr, o->type.len, &t->type, op->err)) {
                cg_conv_free(full);
                return op->err->code ? op->err->code : CG_RESOURCE_EXHAUSTED;
            }
        }
    }
    full->origin = added->origin;
    s->joined = full;
    return CG_OK;
}

/* FULL (the messages packed with their digests already): the longest common prefix of the
 * stored history and the conversation decides what is written: what is new after the stored
 * history, or a new revision from the first message that differs (the boundary falls back to it if
 * it was past it). */
static cg_status sync_full(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_ctx_session_req *req, struct cg_ctx_session_state *s)
{
    int64_t n = (int64_t)req->conv->n_messages, stored = s->stored.history_messages;
    int64_t cmp = stored < n ? stored : n, found = 0, same = 0;
    if (cmp > 0) {
        uint8_t *digests = malloc((size_t)(cmp + 1) * CG_CTX_DIGEST_LEN);
        struct cg_err serr = {0};
        if (digests == NULL)
            return cg_op_oom(op);
        if (cg_store_ctx_history_digests(env->store, op->principal->tenant_id, s->session_id,
                                         s->revision, cmp, digests, &found, &serr) != CG_OK) {
            free(digests);
            return cg_op_store_error(op, &serr);
        }
        while (same < found &&
               memcmp(digests + same * CG_CTX_DIGEST_LEN, s->digest[same], CG_CTX_DIGEST_LEN) == 0)
            same++;
        free(digests);
    }
    if (same == stored) {
        s->write_from = stored;
        s->added = n - stored;
    } else {
        s->diverged = true;
        s->diverged_at = same;
        s->revision++;
        if (s->boundary > same)
            s->boundary = same;
        s->write_from = 0;
        s->added = n - same;
    }
    s->history_messages = n;
    return CG_OK;
}

/* LOAD: the session row and what the sync needs of the history, in one short transaction
 * (committed before this returns; nothing is written). A session that does not exist yet
 * loads as revision 1, boundary 0, no history. */
static cg_status load(const struct cg_svc_env *env, const struct cg_op *op,
                      const struct cg_ctx_session_req *req, struct cg_ctx_session_state *s)
{
    /* FULL compares digests: the messages are packed before the transaction begins. */
    cg_status st;
    if (!req->append && (st = pack_from(op, req, req->conv, 0, s)) != CG_OK)
        return st;
    struct cg_err serr = {0};
    if (cg_store_begin(env->store, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    st = cg_store_ctx_session_get(env->store, op->principal->tenant_id, s->session_id, &s->stored,
                                  &serr);
    s->found = st == CG_OK;
    if (st == CG_NOT_FOUND) {
        memset(&s->stored, 0, sizeof s->stored);
        s->stored.revision = 1;
        st = CG_OK;
    }
    if (st != CG_OK) {
        cg_store_rollback(env->store);
        return cg_op_store_error(op, &serr);
    }
    s->revision = s->stored.revision;
    s->boundary = s->stored.trim_boundary;
    int64_t stored = s->stored.history_messages;
    void **old = NULL;
    if (req->append) {
        if (stored + (int64_t)req->conv->n_messages > HISTORY_MAX)
            st = cg_err_set(op->err, CG_RESOURCE_EXHAUSTED,
                            "session_id: the history would exceed %d messages", HISTORY_MAX);
        else
            st = read_history(env, op, req, s->session_id, s->revision, stored, &old);
    } else {
        st = sync_full(env, op, req, s);
    }
    if (st != CG_OK) {
        cg_store_rollback(env->store);
        return st;
    }
    if (cg_store_commit(env->store, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    if (!req->append)
        return CG_OK;
    /* The stored messages are read; joining them to the new ones needs no transaction. */
    if ((st = join_history(op, req, old, stored, s)) != CG_OK ||
        (st = pack_from(op, req, s->joined, (size_t)stored, s)) != CG_OK)
        return st;
    s->write_from = stored;
    s->added = (int64_t)s->joined->n_messages - stored;
    s->history_messages = (int64_t)s->joined->n_messages;
    return CG_OK;
}

/* The artifacts of r as the store keeps them (the arena). */
static cg_status describe_artifacts(const struct cg_op *op, const struct cg_compress_result *r,
                                    struct cg_ctx_session_state *s)
{
    s->n_artifacts = 0;
    s->artifacts = cg_arena_calloc(op->arena, r->n_artifacts + 1, sizeof *s->artifacts);
    if (s->artifacts == NULL)
        return cg_op_oom(op);
    for (size_t i = 0; i < r->n_artifacts; i++) {
        const struct cg_compress_artifact *a = &r->artifacts[i];
        struct cg_ctx_artifact *info = &s->artifacts[s->n_artifacts++];
        snprintf(info->artifact_id, sizeof info->artifact_id, "%s", a->id);
        snprintf(info->session_id, sizeof info->session_id, "%s", s->session_id);
        snprintf(info->compaction_id, sizeof info->compaction_id, "%s", s->compaction_id);
        info->source_index = a->source_index;
        info->history_position = a->source_index;
        snprintf(info->tool_call_id, sizeof info->tool_call_id, "%s", a->tool_call_id);
        snprintf(info->tool_name, sizeof info->tool_name, "%s", a->tool_name);
        snprintf(info->media_type, sizeof info->media_type, "%s",
                 a->is_json ? "application/json" : "text/plain");
        info->size_bytes = (int64_t)a->content_len;
        info->size_chars = (int64_t)cg_utf8_length(a->content, a->content_len);
        info->tokens = a->tokens;
        uint8_t sum[32];
        cg_sha256(a->content, a->content_len, sum);
        cg_hex_encode(sum, 32, info->sha256);
        info->preview_bytes = (int64_t)a->preview_bytes;
        info->pii_redacted = s->artifacts_redacted;
    }
    return CG_OK;
}

/* The writes of a save, inside its transaction: the history rows from s->write_from, the
 * artifacts, the compaction record and the session row. */
static cg_status save_rows(const struct cg_svc_env *env, const struct cg_op *op,
                           const struct cg_ctx_session_req *req, const struct cg_compress_result *r,
                           struct cg_ctx_session_state *s, struct cg_err *serr)
{
    const char *tenant = op->principal->tenant_id;
    const struct cg_conv *conv = s->joined != NULL ? s->joined : req->conv;
    struct cg_compress_count_state cs = *req->count_state;
    struct cg_compress_counter counter;
    cg_compress_counter_init(&counter, &cs, conv);
    for (size_t i = (size_t)s->write_from; i < conv->n_messages; i++) {
        int64_t tokens = counter.count_message(counter.ctx, &conv->messages[i]);
        if (cg_store_ctx_history_put(env->store, tenant, s->session_id, s->revision, (int64_t)i,
                                     s->data[i], s->len[i], s->digest[i], tokens, s->compaction_id,
                                     serr) != CG_OK)
            return serr->code;
    }
    for (size_t i = 0; i < s->n_artifacts; i++)
        if (cg_store_ctx_artifact_put(env->store, tenant, &s->artifacts[i], r->artifacts[i].content,
                                      r->artifacts[i].content_len, serr) != CG_OK)
            return serr->code;
    /* The session's artifact cap: past session_artifacts_max the oldest go, down to
     * session_artifacts_keep (their messages stay in the history). */
    if (s->n_artifacts > 0) {
        int keep = (int)env->config->session_artifacts_keep,
            max = (int)env->config->session_artifacts_max, deleted = 0;
        if (cg_store_ctx_artifacts_trim(env->store, tenant, s->session_id, keep,
                                        max > keep ? max : keep, &deleted, serr) != CG_OK)
            return serr->code;
        if (deleted > 0)
            cg_log(CG_LOG_INFO, "context_session", op->request_id,
                   "session %s: %d oldest artifacts deleted (keep %d of more than %d)",
                   s->session_id, deleted, keep, max);
    }
    /* The call's totals and layer results, for GetCompressionStats. */
    int layer[CG_COMPRESS_LAYERS_MAX], outcome[CG_COMPRESS_LAYERS_MAX];
    int64_t saved[CG_COMPRESS_LAYERS_MAX], affected[CG_COMPRESS_LAYERS_MAX],
        ms[CG_COMPRESS_LAYERS_MAX], artifact_bytes = 0;
    for (size_t i = 0; i < r->n_layers; i++) {
        layer[i] = (int)r->layers[i].layer;
        outcome[i] = (int)r->layers[i].outcome;
        saved[i] = r->layers[i].tokens_before - r->layers[i].tokens_after;
        affected[i] = r->layers[i].messages_affected;
        ms[i] = r->layers[i].duration_ms;
    }
    for (size_t i = 0; i < r->n_artifacts; i++)
        artifact_bytes += (int64_t)r->artifacts[i].content_len;
    struct cg_ctx_compaction cmp = {
        .session_id = s->session_id,
        .compaction_id = s->compaction_id,
        .strategy = req->strategy,
        .triggered = r->triggered,
        .boundary_moved = r->boundary_moved,
        .tokens_before = r->tokens_before,
        .tokens_after = r->tokens_after,
        .cache_tokens_invalidated = r->cache_tokens_invalidated,
        .context_window = req->context_window,
        .effective_window = r->effective_window,
        .artifacts = (int)r->n_artifacts,
        .artifact_bytes = artifact_bytes,
        .n_layers = r->n_layers,
        .layer = layer,
        .outcome = outcome,
        .saved = saved,
        .affected = affected,
        .ms = ms,
    };
    struct cg_ctx_session upd = {
        .trim_boundary = r->boundary_after,
        .revision = s->revision,
        .history_messages = s->history_messages,
    };
    if (cg_store_ctx_compaction_put(env->store, tenant, &cmp, serr) != CG_OK ||
        cg_store_ctx_session_update(env->store, tenant, s->session_id, &upd, serr) != CG_OK)
        return serr->code;
    return CG_OK;
}

/* SAVE: locks the session row (creating it when new), checks that nobody saved since the
 * load (*changed: nothing written, the call runs again), writes and commits. */
static cg_status save(const struct cg_svc_env *env, const struct cg_op *op,
                      const struct cg_ctx_session_req *req, const struct cg_compress_result *r,
                      struct cg_ctx_session_state *s, bool *changed)
{
    *changed = false;
    struct cg_err serr = {0};
    struct cg_ctx_session now;
    if (cg_store_begin(env->store, &serr) != CG_OK)
        return cg_op_store_error(op, &serr);
    if (cg_store_ctx_session_lock(env->store, op->principal->tenant_id, s->session_id, &now,
                                  &serr) != CG_OK)
        goto fail;
    if (s->found ? (now.created || now.version != s->stored.version) : !now.created) {
        cg_store_rollback(env->store);
        *changed = true;
        return CG_OK;
    }
    if (save_rows(env, op, req, r, s, &serr) != CG_OK ||
        cg_store_commit(env->store, &serr) != CG_OK)
        goto fail;
    return CG_OK;
fail:
    cg_store_rollback(env->store);
    return cg_op_store_error(op, &serr);
}

void cg_ctx_session_cleanup(struct cg_ctx_session_state *s)
{
    cg_conv_free(s->joined);
    s->joined = NULL;
}

cg_status cg_ctx_session_run(const struct cg_svc_env *env, const struct cg_op *op,
                             const struct cg_ctx_session_req *req, cg_ctx_session_work_cb work,
                             void *work_ctx, struct cg_ctx_session_state *s,
                             struct cg_compress_result *res)
{
    memset(s, 0, sizeof *s);
    if (env->store == NULL)
        return cg_err_set(op->err, CG_UNAVAILABLE, "the session store is not available");
    for (unsigned attempt = 1; attempt <= CG_CTX_SESSION_ATTEMPTS; attempt++) {
        cg_ctx_session_cleanup(s);
        memset(s, 0, sizeof *s);
        s->attempts = attempt;
        snprintf(s->session_id, sizeof s->session_id, "%s", req->session_id);
        random_id("cmp_", s->compaction_id, sizeof s->compaction_id);
        cg_status st = load(env, op, req, s);
        if (st != CG_OK)
            return st;
        /* No transaction is open from here to the save: the work may take seconds. */
        if ((st = work(work_ctx, s, s->joined != NULL ? s->joined : req->conv, res)) != CG_OK)
            return st;
        if ((st = describe_artifacts(op, res, s)) != CG_OK || req->dry_run) {
            if (st != CG_OK)
                cg_compress_result_free(res);
            return st;
        }
        bool changed;
        if ((st = save(env, op, req, res, s, &changed)) != CG_OK || !changed) {
            if (st != CG_OK)
                cg_compress_result_free(res);
            return st;
        }
        cg_compress_result_free(res);
        cg_log(CG_LOG_DEBUG, "context_session", op->request_id,
               "session %s was saved by another call during attempt %u; running again",
               s->session_id, attempt);
    }
    return cg_err_set(op->err, CG_ABORTED,
                      "session_id '%s': other calls saved the session during each of %d attempts; "
                      "try again",
                      req->session_id, CG_CTX_SESSION_ATTEMPTS);
}

cg_status cg_ctx_session_history(const struct cg_svc_env *env, const struct cg_op *op,
                                 const char *session_id, int64_t from, int64_t to,
                                 int64_t max_messages, const struct cg_ctx_history_codec *codec,
                                 struct cg_conv **out)
{
    *out = NULL;
    struct cg_err serr = {0};
    struct cg_ctx_session sess;
    cg_status st =
        cg_store_ctx_session_get(env->store, op->principal->tenant_id, session_id, &sess, &serr);
    if (st == CG_NOT_FOUND)
        return cg_err_setr(op->err, CG_NOT_FOUND, CG_ERR_SESSION_NOT_FOUND,
                           "field 'session_id': no such session");
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    if (to == 0)
        to = sess.history_messages;
    if (from >= sess.history_messages || to > sess.history_messages)
        return cg_err_set(op->err, CG_OUT_OF_RANGE,
                          "field '%s' is past the end of the session's history (%lld messages)",
                          from >= sess.history_messages ? "from_position" : "to_position",
                          (long long)sess.history_messages);
    if (to <= from)
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "field 'to_position' must be after 'from_position'");
    if (to - from > max_messages)
        return cg_err_set(op->err, CG_INVALID_ARGUMENT,
                          "fields 'from_position'..'to_position' span more than %lld messages",
                          (long long)max_messages);
    void **msgs = cg_arena_alloc(op->arena, (size_t)(to - from + 1) * sizeof *msgs);
    struct cg_ctx_history_row *rows = calloc(PAGE_MAX, sizeof *rows);
    if (msgs == NULL || rows == NULL) {
        free(rows);
        return cg_op_oom(op);
    }
    size_t n = 0;
    for (int64_t at = from; at < to && st == CG_OK;) {
        int limit = to - at < PAGE_MAX ? (int)(to - at) : PAGE_MAX, count = 0;
        bool more = false;
        if (cg_store_ctx_history_page(env->store, op->principal->tenant_id, session_id,
                                      sess.revision, at, limit, rows, &count, &more,
                                      &serr) != CG_OK) {
            st = cg_op_store_error(op, &serr);
            break;
        }
        for (int i = 0; i < count && st == CG_OK; i++) {
            msgs[n] = codec->unpack(codec->ctx, op->arena, rows[i].message, rows[i].len);
            if (msgs[n] == NULL)
                st = cg_err_set(op->err, CG_INTERNAL, "stored message %lld does not decode",
                                (long long)rows[i].position);
            else
                n++;
        }
        cg_store_ctx_rows_free(rows, count);
        if (count == 0)
            break;
        at += count;
    }
    free(rows);
    if (st != CG_OK)
        return st;
    return codec->decode(codec->ctx, op->arena, msgs, n, out, op->err);
}

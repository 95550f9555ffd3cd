/* rpc_context_state.c - session state for Compress (history sync, boundary, artifacts) and
 * the read-back RPCs GetArtifact, ListArtifacts and GetHistory.
 *
 * History messages are stored as protobuf ctxguard.v1.Message (rpc_conv's structured form),
 * one row per message with its SHA-256; a FULL sync compares digests to find what is new.
 * Everything a stateful Compress writes (history, artifacts, boundary) commits in one
 * transaction after the cascade, so a failed call leaves nothing behind.
 */
#include "rpc/rpc_context_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crypto.h"
#include "core/utf8.h"
#include "rpc/rpc_conv.h"
#include "rpc/rpc_handlers.h"
#include "rpc/rpc_summary.h"

#define PAGE_DEFAULT 100
#define PAGE_MAX 1000
#define ARTIFACT_READ_DEFAULT 1048576
#define ARTIFACT_READ_MAX 4194304
#define HISTORY_MAX 200000

static cg_status store_error(struct cg_rpc_call *call, const struct cg_err *serr)
{
    return cg_rpc_store_error(call, serr);
}

static cg_status check_session_id(struct cg_rpc_call *call, const char *field, const char *s)
{
    size_t n = strlen(s);
    if (n == 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
    if (n > CG_RPC_SESSION_ID_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' is longer than %d characters", field, CG_RPC_SESSION_ID_MAX);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field '%s' must be printable ASCII without spaces", field);
    return CG_OK;
}

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

void cg_rpc_ctx_name_artifact(void *ctx, size_t index, char id[64])
{
    (void)ctx;
    (void)index;
    random_id("art_", id, 64);
}

/* Each message of conv packed as a ctxguard.v1.Message, in the arena. */
struct packed {
    uint8_t **data;
    size_t *len;
    uint8_t (*digest)[32];
    size_t n;
};

static cg_status pack_messages(struct cg_rpc_call *call, const struct cg_conv *conv,
                               struct packed *out)
{
    Ctxguard__V1__MessageList *list = cg_rpc_conv_messages_out(call, conv);
    if (list == NULL)
        return OOM(call);
    out->n = list->n_messages;
    out->data = cg_arena_alloc(call->arena, (out->n + 1) * sizeof *out->data);
    out->len = cg_arena_alloc(call->arena, (out->n + 1) * sizeof *out->len);
    out->digest = cg_arena_alloc(call->arena, (out->n + 1) * sizeof *out->digest);
    if (out->data == NULL || out->len == NULL || out->digest == NULL)
        return OOM(call);
    for (size_t i = 0; i < out->n; i++) {
        const ProtobufCMessage *m = &list->messages[i]->base;
        size_t len = protobuf_c_message_get_packed_size(m);
        uint8_t *buf = cg_arena_alloc(call->arena, len + 1);
        if (buf == NULL)
            return OOM(call);
        protobuf_c_message_pack(m, buf);
        out->data[i] = buf;
        out->len[i] = len;
        cg_sha256(buf, len, out->digest[i]);
    }
    return CG_OK;
}

/* The stored messages of a revision [0, n) unpacked into the arena. */
static cg_status load_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const char *session_id, uint32_t revision, int64_t n,
                              Ctxguard__V1__Message ***out)
{
    Ctxguard__V1__Message **msgs = cg_arena_alloc(call->arena, (size_t)(n + 1) * sizeof *msgs);
    struct cg_ctx_history_row *rows = calloc(PAGE_MAX, sizeof *rows);
    if (msgs == NULL || rows == NULL) {
        free(rows);
        return OOM(call);
    }
    ProtobufCAllocator alloc;
    cg_rpc_allocator(call->arena, &alloc);
    int64_t at = 0;
    struct cg_err serr = {0};
    while (at < n) {
        int count;
        bool more;
        cg_status st =
            cg_store_ctx_history_page(env->svc.store, call->principal.tenant_id, session_id,
                                      revision, at, PAGE_MAX, rows, &count, &more, &serr);
        if (st != CG_OK) {
            free(rows);
            return store_error(call, &serr);
        }
        if (count == 0)
            break;
        for (int i = 0; i < count && at < n; i++, at++) {
            ProtobufCMessage *m = protobuf_c_message_unpack(&ctxguard__v1__message__descriptor,
                                                            &alloc, rows[i].len, rows[i].message);
            if (m == NULL) {
                cg_store_ctx_rows_free(rows, count);
                free(rows);
                return cg_err_set(&call->err, CG_INTERNAL,
                                  "session_id: stored message %lld does not decode", (long long)at);
            }
            msgs[at] = (Ctxguard__V1__Message *)m;
        }
        cg_store_ctx_rows_free(rows, count);
        if (!more)
            break;
    }
    free(rows);
    if (at != n)
        return cg_err_set(&call->err, CG_INTERNAL, "session_id: the stored history is short");
    *out = msgs;
    return CG_OK;
}

static cg_status put_messages(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              struct cg_rpc_ctx_state *s, const struct cg_conv *conv,
                              const struct packed *pk, size_t from,
                              const struct cg_compress_counter *counter)
{
    struct cg_err serr = {0};
    for (size_t i = from; i < pk->n; i++) {
        int64_t tokens = counter->count_message(counter->ctx, &conv->messages[i]);
        if (cg_store_ctx_history_put(env->svc.store, call->principal.tenant_id, s->session_id,
                                     s->revision, (int64_t)i, pk->data[i], pk->len[i],
                                     pk->digest[i], tokens, s->compaction_id, &serr) != CG_OK)
            return store_error(call, &serr);
    }
    return CG_OK;
}

cg_status cg_rpc_ctx_begin(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                           const Ctxguard__V1__CompressRequest *req, struct cg_conv **conv,
                           const struct cg_compress_counter *counter, struct cg_rpc_ctx_state *s)
{
    memset(s, 0, sizeof *s);
    cg_status st = check_session_id(call, "session_id", req->session_id);
    if (st == CG_OK)
        st = cg_rpc_session_check(call, req->session_id);
    if (st != CG_OK)
        return st;
    if (env->svc.store == NULL)
        return cg_err_set(&call->err, CG_UNAVAILABLE, "the session store is not available");
    snprintf(s->session_id, sizeof s->session_id, "%s", req->session_id);
    random_id("cmp_", s->compaction_id, sizeof s->compaction_id);
    struct cg_err serr = {0};
    if (cg_store_begin(env->svc.store, &serr) != CG_OK)
        return store_error(call, &serr);
    s->active = true;
    if (cg_store_ctx_session_lock(env->svc.store, call->principal.tenant_id, s->session_id,
                                  &s->session, &serr) != CG_OK) {
        st = store_error(call, &serr);
        goto fail;
    }
    s->revision = s->session.revision;
    s->boundary = s->session.trim_boundary;
    int64_t stored = s->session.history_messages;
    if (req->session_sync == CTXGUARD__V1__SESSION_SYNC__SESSION_SYNC_APPEND) {
        /* The whole history, then the new messages. */
        if (stored + (int64_t)(*conv)->n_messages > HISTORY_MAX) {
            st = cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED,
                            "session_id: the history would exceed %d messages", HISTORY_MAX);
            goto fail;
        }
        Ctxguard__V1__Message **old = NULL;
        if ((st = load_history(call, env, s->session_id, s->revision, stored, &old)) != CG_OK)
            goto fail;
        Ctxguard__V1__MessageList *added = cg_rpc_conv_messages_out(call, *conv);
        Ctxguard__V1__MessageList *all =
            NEW(call, Ctxguard__V1__MessageList, ctxguard__v1__message_list__init);
        Ctxguard__V1__Conversation *c =
            NEW(call, Ctxguard__V1__Conversation, ctxguard__v1__conversation__init);
        if (added == NULL || all == NULL || c == NULL ||
            (all->messages = cg_arena_alloc(
                 call->arena, (size_t)(stored + 1) * sizeof *all->messages +
                                  added->n_messages * sizeof *all->messages)) == NULL) {
            st = OOM(call);
            goto fail;
        }
        for (int64_t i = 0; i < stored; i++)
            all->messages[all->n_messages++] = old[i];
        for (size_t i = 0; i < added->n_messages; i++)
            all->messages[all->n_messages++] = added->messages[i];
        c->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
        c->messages = all;
        c->n_tools = req->conversation->n_tools;
        c->tools = req->conversation->tools;
        struct cg_conv *full = NULL;
        if ((st = cg_rpc_conv_in(call, "conversation", c, &full)) != CG_OK)
            goto fail;
        /* Tools given in the JSON of the new messages stay the tools. */
        if (full->n_tools == 0) {
            for (size_t i = 0; i < (*conv)->n_tools; i++) {
                struct cg_tool_def *t;
                const struct cg_tool_def *o = &(*conv)->tools[i];
                if (cg_conv_add_tool(full, &t, &call->err) != CG_OK ||
                    cg_conv_str(full, o->name.ptr, o->name.len, &t->name, &call->err) ||
                    cg_conv_str(full, o->description.ptr, o->description.len, &t->description,
                                &call->err) ||
                    cg_conv_str(full, o->parameters.ptr, o->parameters.len, &t->parameters,
                                &call->err) ||
                    cg_conv_str(full, o->type.ptr, o->type.len, &t->type, &call->err)) {
                    cg_conv_free(full);
                    st = call->err.code ? call->err.code : CG_RESOURCE_EXHAUSTED;
                    goto fail;
                }
            }
        }
        full->origin = (*conv)->origin;
        cg_conv_free(*conv);
        *conv = full;
        struct packed pk;
        if ((st = pack_messages(call, *conv, &pk)) != CG_OK ||
            (st = put_messages(call, env, s, *conv, &pk, (size_t)stored, counter)) != CG_OK)
            goto fail;
        s->added = (int64_t)pk.n - stored;
        s->history_messages = (int64_t)pk.n;
        return CG_OK;
    }
    /* FULL: the longest common prefix of the stored history and the conversation. */
    struct packed pk;
    if ((st = pack_messages(call, *conv, &pk)) != CG_OK)
        goto fail;
    int64_t cmp = stored < (int64_t)pk.n ? stored : (int64_t)pk.n;
    uint8_t *digests = malloc((size_t)(cmp + 1) * 32);
    int64_t found = 0;
    if (digests == NULL) {
        st = OOM(call);
        goto fail;
    }
    if (cg_store_ctx_history_digests(env->svc.store, call->principal.tenant_id, s->session_id,
                                     s->revision, cmp, digests, &found, &serr) != CG_OK) {
        free(digests);
        st = store_error(call, &serr);
        goto fail;
    }
    int64_t same = 0;
    while (same < found && memcmp(digests + same * 32, pk.digest[same], 32) == 0)
        same++;
    free(digests);
    if (same == stored) {
        st = put_messages(call, env, s, *conv, &pk, (size_t)stored, counter);
        s->added = (int64_t)pk.n - stored;
    } else {
        /* Diverged (or shorter): a new revision holds the whole conversation; the boundary
         * falls back to the first differing message if it was past it. */
        s->diverged = true;
        s->diverged_at = same;
        s->revision++;
        if (s->boundary > same)
            s->boundary = same;
        st = put_messages(call, env, s, *conv, &pk, 0, counter);
        s->added = (int64_t)pk.n - same;
    }
    if (st != CG_OK)
        goto fail;
    s->history_messages = (int64_t)pk.n;
    return CG_OK;
fail:
    cg_rpc_ctx_abort(env, s);
    return st;
}

/* ------------------------------------------------------------------ artifact redaction */

#define OFFLOAD_MARKER "\n[ctxguard: offloaded, "

/* The longest head of text[0..len) of at most max bytes that ends on a character boundary. */
static size_t utf8_head(const char *text, size_t len, size_t max)
{
    if (len <= max)
        return len;
    size_t n = max;
    while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80)
        n--;
    return n;
}

/* Tokens of one tool result holding text, counted as the cascade counts it. */
static int64_t result_tokens(const struct cg_compress_counter *counter, const struct cg_part *part,
                             const char *text, size_t len)
{
    struct cg_part p = *part;
    p.u.tool_result.content.ptr = text;
    p.u.tool_result.content.len = len;
    struct cg_message one = {.role = CG_ROLE_TOOL, .parts = &p, .n_parts = 1};
    return counter->count_message(counter->ctx, &one);
}

/* The new text of the offloaded message's part: the redacted head and a marker with the
 * redacted sizes when the part is still the offload's preview, else NULL (redact it whole). */
static char *preview_text(const struct cg_compress_artifact *a, const struct cg_str *now,
                          const char *red, size_t red_len, size_t preview_max, size_t *keep_out,
                          size_t *len_out)
{
    size_t raw_keep = a->preview_bytes;
    size_t mlen = strlen(OFFLOAD_MARKER);
    if (now->len < raw_keep + mlen || memcmp(now->ptr, a->content, raw_keep) != 0 ||
        memcmp(now->ptr + raw_keep, OFFLOAD_MARKER, mlen) != 0)
        return NULL;
    size_t keep = utf8_head(red, red_len, preview_max);
    char marker[240];
    int ml = snprintf(marker, sizeof marker,
                      "\n[ctxguard: offloaded, %zu of %zu bytes shown; the whole result "
                      "is artifact %s (GetArtifact)]",
                      keep, red_len, a->id);
    if (ml < 0 || (size_t)ml >= sizeof marker)
        return NULL;
    char *text = malloc(keep + (size_t)ml + 1);
    if (text == NULL)
        return NULL;
    memcpy(text, red, keep);
    memcpy(text + keep, marker, (size_t)ml + 1);
    *keep_out = keep;
    *len_out = keep + (size_t)ml;
    return text;
}

cg_status cg_rpc_ctx_redact_artifacts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      struct cg_rpc_ctx_state *state, struct cg_compress_result *r,
                                      const struct cg_compress_counter *counter, unsigned types,
                                      int64_t preview_max)
{
    size_t n = r->n_artifacts;
    if (n == 0)
        return CG_OK;
    /* One pass over every artifact and its message part, so both get the same labels. */
    const char **in = calloc(2 * n, sizeof *in);
    size_t *in_len = calloc(2 * n, sizeof *in_len), *out_len = calloc(2 * n, sizeof *out_len);
    char **out = calloc(2 * n, sizeof *out);
    struct cg_part **parts = calloc(n, sizeof *parts);
    struct cg_redact_counts counts;
    memset(&counts, 0, sizeof counts);
    cg_status st = CG_OK;
    if (in == NULL || in_len == NULL || out_len == NULL || out == NULL || parts == NULL) {
        st = OOM(call);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const struct cg_compress_artifact *a = &r->artifacts[i];
        in[2 * i] = a->content;
        in_len[2 * i] = a->content_len;
        in[2 * i + 1] = "";
        if (r->conv != NULL && a->output_index >= 0 &&
            (size_t)a->output_index < r->conv->n_messages &&
            a->part_index < r->conv->messages[a->output_index].n_parts &&
            r->conv->messages[a->output_index].parts[a->part_index].kind == CG_PART_TOOL_RESULT) {
            parts[i] = &r->conv->messages[a->output_index].parts[a->part_index];
            in[2 * i + 1] = parts[i]->u.tool_result.content.ptr;
            in_len[2 * i + 1] = parts[i]->u.tool_result.content.len;
        }
    }
    /* Labels may be longer than the values they replace. */
    size_t max = 2 * (r->conv != NULL ? r->conv->limits.max_bytes : (size_t)64 << 20);
    st = cg_rpc_redact_texts(call, env, state->session_id, types, "conversation", 2 * n, in, in_len,
                             max, out, out_len, &counts);
    if (st != CG_OK)
        goto done;
    for (size_t i = 0; i < n; i++) {
        struct cg_compress_artifact *a = &r->artifacts[i];
        char *red = out[2 * i];
        size_t red_len = out_len[2 * i];
        if (parts[i] != NULL) {
            struct cg_str *now = &parts[i]->u.tool_result.content;
            size_t keep = 0, text_len = 0;
            char *text = preview_text(a, now, red, red_len, (size_t)preview_max, &keep, &text_len);
            bool rebuilt = text != NULL;
            if (text == NULL) { /* changed after offload: its redacted form as a whole */
                text = out[2 * i + 1];
                text_len = out_len[2 * i + 1];
                out[2 * i + 1] = NULL;
            }
            int64_t before = result_tokens(counter, parts[i], now->ptr, now->len);
            struct cg_err err = {0};
            st = cg_conv_str(r->conv, text, text_len, now, &err);
            free(text);
            if (st != CG_OK) {
                cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "redacting an artifact's preview: %s",
                           err.msg);
                goto done;
            }
            int64_t delta = result_tokens(counter, parts[i], now->ptr, now->len) - before;
            r->tokens_after += delta;
            for (size_t c = 0; c < r->n_changes; c++)
                if (r->changes[c].artifact == (int64_t)i)
                    r->changes[c].tokens_after += delta;
            if (rebuilt)
                a->preview_bytes = keep;
        }
        if (a->preview_bytes > red_len)
            a->preview_bytes = red_len;
        if (parts[i] != NULL)
            a->tokens = result_tokens(counter, parts[i], red, red_len);
        free(a->content);
        a->content = red;
        a->content_len = red_len;
        out[2 * i] = NULL;
    }
    state->artifacts_redacted = true;
    /* The counts, where the report has room for them: the OFFLOAD layer's detail. */
    for (size_t l = r->n_layers; l-- > 0;) {
        if (r->layers[l].layer != CG_LAYER_OFFLOAD)
            continue;
        char *d = r->layers[l].detail;
        size_t dl = strlen(d);
        dl += (size_t)snprintf(d + dl, sizeof r->layers[l].detail - dl, "; PII redacted:");
        bool any = false;
        for (int t = 1; t < CG_PII_TYPE_COUNT && dl < sizeof r->layers[l].detail; t++) {
            if (counts.by_type[t] == 0)
                continue;
            dl += (size_t)snprintf(d + dl, sizeof r->layers[l].detail - dl, "%s %s %lld",
                                   any ? "," : "", cg_pii_type_name((cg_pii_type)t),
                                   (long long)counts.by_type[t]);
            any = true;
        }
        if (!any && dl < sizeof r->layers[l].detail)
            snprintf(d + dl, sizeof r->layers[l].detail - dl, " none");
        break;
    }
done:
    if (out != NULL)
        for (size_t i = 0; i < 2 * n; i++)
            free(out[i]);
    free(in);
    free(in_len);
    free(out_len);
    free(out);
    free(parts);
    return st;
}

void cg_rpc_ctx_abort(const struct cg_rpc_env *env, struct cg_rpc_ctx_state *s)
{
    if (s->active && env->svc.store != NULL)
        cg_store_rollback(env->svc.store);
    s->active = false;
}

cg_status cg_rpc_ctx_finish(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const Ctxguard__V1__CompressRequest *req,
                            const struct cg_compress_result *r, struct cg_rpc_ctx_state *s,
                            Ctxguard__V1__CompressionReport *rep)
{
    struct cg_err serr = {0};
    cg_status st = CG_OK;
    rep->artifacts = cg_arena_alloc(call->arena, (r->n_artifacts + 1) * sizeof *rep->artifacts);
    if (rep->artifacts == NULL) {
        st = OOM(call);
        goto fail;
    }
    for (size_t i = 0; i < r->n_artifacts; i++) {
        const struct cg_compress_artifact *a = &r->artifacts[i];
        struct cg_ctx_artifact info;
        memset(&info, 0, sizeof info);
        snprintf(info.artifact_id, sizeof info.artifact_id, "%s", a->id);
        snprintf(info.session_id, sizeof info.session_id, "%s", s->session_id);
        snprintf(info.compaction_id, sizeof info.compaction_id, "%s", s->compaction_id);
        info.source_index = a->source_index;
        info.history_position = a->source_index;
        snprintf(info.tool_call_id, sizeof info.tool_call_id, "%s", a->tool_call_id);
        snprintf(info.tool_name, sizeof info.tool_name, "%s", a->tool_name);
        snprintf(info.media_type, sizeof info.media_type, "%s",
                 a->is_json ? "application/json" : "text/plain");
        info.size_bytes = (int64_t)a->content_len;
        info.size_chars = (int64_t)cg_utf8_length(a->content, a->content_len);
        info.tokens = a->tokens;
        uint8_t sum[32];
        cg_sha256(a->content, a->content_len, sum);
        cg_hex_encode(sum, 32, info.sha256);
        info.preview_bytes = (int64_t)a->preview_bytes;
        info.pii_redacted = s->artifacts_redacted;
        if (!req->dry_run &&
            cg_store_ctx_artifact_put(env->svc.store, call->principal.tenant_id, &info, a->content,
                                      a->content_len, &serr) != CG_OK) {
            st = store_error(call, &serr);
            goto fail;
        }
        Ctxguard__V1__ArtifactInfo *o =
            NEW(call, Ctxguard__V1__ArtifactInfo, ctxguard__v1__artifact_info__init);
        if (o == NULL) {
            st = OOM(call);
            goto fail;
        }
        o->artifact_id = cg_arena_strdup(call->arena, req->dry_run ? "" : info.artifact_id);
        o->session_id = cg_arena_strdup(call->arena, info.session_id);
        o->source_index = info.source_index;
        o->history_position = info.history_position;
        o->tool_call_id = cg_arena_strdup(call->arena, info.tool_call_id);
        o->tool_name = cg_arena_strdup(call->arena, info.tool_name);
        o->media_type = cg_arena_strdup(call->arena, info.media_type);
        o->size_bytes = info.size_bytes;
        o->size_chars = info.size_chars;
        o->tokens = info.tokens;
        o->sha256 = cg_arena_strdup(call->arena, info.sha256);
        o->preview_bytes = info.preview_bytes;
        o->pii_redacted = s->artifacts_redacted;
        o->compaction_id = cg_arena_strdup(call->arena, req->dry_run ? "" : s->compaction_id);
        if (o->artifact_id == NULL || o->session_id == NULL || o->tool_call_id == NULL ||
            o->tool_name == NULL || o->media_type == NULL || o->sha256 == NULL ||
            o->compaction_id == NULL) {
            st = OOM(call);
            goto fail;
        }
        rep->artifacts[rep->n_artifacts++] = o;
    }
    /* Changes name the artifact their message went to. */
    for (size_t i = 0; i < rep->n_changes && i < r->n_changes; i++)
        if (r->changes[i].artifact >= 0 && (size_t)r->changes[i].artifact < rep->n_artifacts)
            rep->changes[i]->artifact_id = rep->artifacts[r->changes[i].artifact]->artifact_id;
    rep->history_revision = s->revision;
    if (req->dry_run) {
        cg_rpc_ctx_abort(env, s);
        return CG_OK;
    }
    rep->compaction_id = cg_arena_strdup(call->arena, s->compaction_id);
    rep->history_messages_added = s->added;
    struct cg_ctx_session upd = {
        .trim_boundary = r->boundary_after,
        .revision = s->revision,
        .history_messages = s->history_messages,
    };
    if (rep->compaction_id == NULL) {
        st = OOM(call);
        goto fail;
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
        .strategy = rep->effective_policy != NULL ? (int)rep->effective_policy->strategy : 0,
        .triggered = r->triggered,
        .boundary_moved = r->boundary_moved,
        .tokens_before = r->tokens_before,
        .tokens_after = r->tokens_after,
        .cache_tokens_invalidated = r->cache_tokens_invalidated,
        .artifacts = (int)r->n_artifacts,
        .artifact_bytes = artifact_bytes,
        .n_layers = r->n_layers,
        .layer = layer,
        .outcome = outcome,
        .saved = saved,
        .affected = affected,
        .ms = ms,
    };
    if (cg_store_ctx_compaction_put(env->svc.store, call->principal.tenant_id, &cmp, &serr) !=
            CG_OK ||
        cg_store_ctx_session_update(env->svc.store, call->principal.tenant_id, s->session_id, &upd,
                                    &serr) != CG_OK ||
        cg_store_commit(env->svc.store, &serr) != CG_OK) {
        st = store_error(call, &serr);
        goto fail;
    }
    s->active = false;
    return CG_OK;
fail:
    cg_rpc_ctx_abort(env, s);
    return st;
}

/* ------------------------------------------------------------------ read-back RPCs ---- */

static Ctxguard__V1__ArtifactInfo *artifact_out(struct cg_rpc_call *call,
                                                const struct cg_ctx_artifact *a)
{
    Ctxguard__V1__ArtifactInfo *o =
        NEW(call, Ctxguard__V1__ArtifactInfo, ctxguard__v1__artifact_info__init);
    if (o == NULL)
        return NULL;
    o->artifact_id = cg_arena_strdup(call->arena, a->artifact_id);
    o->session_id = cg_arena_strdup(call->arena, a->session_id);
    o->source_index = a->source_index;
    o->history_position = a->history_position;
    o->tool_call_id = cg_arena_strdup(call->arena, a->tool_call_id);
    o->tool_name = cg_arena_strdup(call->arena, a->tool_name);
    o->media_type = cg_arena_strdup(call->arena, a->media_type);
    o->size_bytes = a->size_bytes;
    o->size_chars = a->size_chars;
    o->tokens = a->tokens;
    o->sha256 = cg_arena_strdup(call->arena, a->sha256);
    o->preview_bytes = a->preview_bytes;
    o->pii_redacted = a->pii_redacted;
    o->compaction_id = cg_arena_strdup(call->arena, a->compaction_id);
    o->created_at_unix_ms = a->created_at_ms;
    if (o->artifact_id == NULL || o->session_id == NULL || o->tool_call_id == NULL ||
        o->tool_name == NULL || o->media_type == NULL || o->sha256 == NULL ||
        o->compaction_id == NULL)
        return NULL;
    return o;
}

cg_status cg_rpc_context_get_artifact(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetArtifactRequest *req = (const Ctxguard__V1__GetArtifactRequest *)request;
    if (req->artifact_id[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'artifact_id' is required");
    if (strlen(req->artifact_id) >= CG_CTX_ID_MAX)
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_ARTIFACT_NOT_FOUND,
                           "artifact_id: no such artifact");
    if (req->offset < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'offset' must not be negative");
    if (req->length < 0 || req->length > ARTIFACT_READ_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'length' must be 0..%d",
                          ARTIFACT_READ_MAX);
    int64_t length = req->length ? req->length : ARTIFACT_READ_DEFAULT;
    struct cg_ctx_artifact info;
    void *content = NULL;
    size_t len = 0;
    struct cg_err serr = {0};
    memset(&info, 0, sizeof info);
    cg_status st =
        cg_store_ctx_artifact_get(env->svc.store, call->principal.tenant_id, req->artifact_id,
                                  req->offset, length, &info, &content, &len, &serr);
    /* An artifact of a session outside a scope-bound key is as unknown as another tenant's,
     * also when the offset is past its end (info is read then too). */
    if ((st == CG_OK || st == CG_OUT_OF_RANGE) &&
        !cg_rpc_scope_reachable(&call->principal, info.session_id, "")) {
        free(content);
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_ARTIFACT_NOT_FOUND,
                           "artifact_id: no such artifact");
    }
    if (st != CG_OK)
        return store_error(call, &serr);
    Ctxguard__V1__GetArtifactResponse *resp =
        NEW(call, Ctxguard__V1__GetArtifactResponse, ctxguard__v1__get_artifact_response__init);
    uint8_t *bytes = cg_arena_alloc(call->arena, len + 1);
    if (resp == NULL || bytes == NULL || (resp->artifact = artifact_out(call, &info)) == NULL) {
        free(content);
        return OOM(call);
    }
    if (len > 0)
        memcpy(bytes, content, len);
    free(content);
    resp->content.data = bytes;
    resp->content.len = len;
    resp->offset = req->offset;
    resp->eof = req->offset + (int64_t)len >= info.size_bytes;
    *response = &resp->base;
    return CG_OK;
}

/* Page tokens: "<prefix><decimal>" (a position or a sequence number). */
static cg_status parse_token(struct cg_rpc_call *call, const char *token, char prefix, int64_t *out)
{
    *out = 0;
    if (token[0] == '\0')
        return CG_OK;
    char *end;
    if (token[0] != prefix || token[1] < '0' || token[1] > '9')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_token' is not valid");
    long long v = strtoll(token + 1, &end, 10);
    if (*end != '\0' || v < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_token' is not valid");
    *out = v;
    return CG_OK;
}

static cg_status page_size(struct cg_rpc_call *call, uint32_t v, int *out)
{
    if (v > PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_size' must be 0..%d",
                          PAGE_MAX);
    *out = v ? (int)v : PAGE_DEFAULT;
    return CG_OK;
}

cg_status cg_rpc_context_list_artifacts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response)
{
    const Ctxguard__V1__ListArtifactsRequest *req =
        (const Ctxguard__V1__ListArtifactsRequest *)request;
    cg_status st;
    int limit = PAGE_DEFAULT;
    int64_t after = 0;
    if ((st = check_session_id(call, "session_id", req->session_id)) != CG_OK ||
        (st = cg_rpc_session_check(call, req->session_id)) != CG_OK ||
        (st = page_size(call, req->page_size, &limit)) != CG_OK ||
        (st = parse_token(call, req->page_token, 's', &after)) != CG_OK ||
        (st = cg_rpc_check_name(call, "tool_call_id", req->tool_call_id, 256, false)) != CG_OK)
        return st;
    struct cg_ctx_session sess;
    struct cg_err serr = {0};
    if (cg_store_ctx_session_get(env->svc.store, call->principal.tenant_id, req->session_id, &sess,
                                 &serr) != CG_OK)
        return store_error(call, &serr);
    struct cg_ctx_artifact *rows = calloc((size_t)limit, sizeof *rows);
    if (rows == NULL)
        return OOM(call);
    int count = 0;
    bool more;
    if (cg_store_ctx_artifact_list(env->svc.store, call->principal.tenant_id, req->session_id,
                                   req->tool_call_id, after, limit, rows, &count, &more,
                                   &serr) != CG_OK) {
        free(rows);
        return store_error(call, &serr);
    }
    Ctxguard__V1__ListArtifactsResponse *resp =
        NEW(call, Ctxguard__V1__ListArtifactsResponse, ctxguard__v1__list_artifacts_response__init);
    if (resp == NULL || (resp->artifacts = cg_arena_alloc(
                             call->arena, ((size_t)count + 1) * sizeof *resp->artifacts)) == NULL) {
        free(rows);
        return OOM(call);
    }
    for (int i = 0; i < count; i++)
        if ((resp->artifacts[resp->n_artifacts++] = artifact_out(call, &rows[i])) == NULL) {
            free(rows);
            return OOM(call);
        }
    char token[32] = "";
    if (more && count > 0)
        snprintf(token, sizeof token, "s%lld", (long long)rows[count - 1].seq);
    free(rows);
    if ((resp->next_page_token = cg_arena_strdup(call->arena, token)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_context_get_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                     const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetHistoryRequest *req = (const Ctxguard__V1__GetHistoryRequest *)request;
    cg_status st;
    int limit = PAGE_DEFAULT;
    int64_t from = 0;
    if ((st = check_session_id(call, "session_id", req->session_id)) != CG_OK ||
        (st = cg_rpc_session_check(call, req->session_id)) != CG_OK ||
        (st = page_size(call, req->page_size, &limit)) != CG_OK ||
        (st = parse_token(call, req->page_token, 'p', &from)) != CG_OK)
        return st;
    if ((int)req->response_format < 0 || (int)req->response_format > 3)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'response_format' has an unknown value %d",
                          (int)req->response_format);
    if (req->page_token[0] == '\0') {
        if (req->from_position < 0)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'from_position' must not be negative");
        from = req->from_position;
    }
    struct cg_ctx_session sess;
    struct cg_err serr = {0};
    if (cg_store_ctx_session_get(env->svc.store, call->principal.tenant_id, req->session_id, &sess,
                                 &serr) != CG_OK)
        return store_error(call, &serr);
    uint32_t revision = req->revision ? req->revision : sess.revision;
    if (revision > sess.revision)
        return cg_err_set(&call->err, CG_NOT_FOUND, "revision: no such revision (latest %u)",
                          sess.revision);
    struct cg_ctx_history_row *rows = calloc((size_t)limit, sizeof *rows);
    if (rows == NULL)
        return OOM(call);
    int count = 0;
    bool more;
    if (cg_store_ctx_history_page(env->svc.store, call->principal.tenant_id, req->session_id,
                                  revision, from, limit, rows, &count, &more, &serr) != CG_OK) {
        free(rows);
        return store_error(call, &serr);
    }
    ProtobufCAllocator alloc;
    cg_rpc_allocator(call->arena, &alloc);
    Ctxguard__V1__GetHistoryResponse *resp =
        NEW(call, Ctxguard__V1__GetHistoryResponse, ctxguard__v1__get_history_response__init);
    Ctxguard__V1__MessageList *list =
        NEW(call, Ctxguard__V1__MessageList, ctxguard__v1__message_list__init);
    Ctxguard__V1__Conversation *c =
        NEW(call, Ctxguard__V1__Conversation, ctxguard__v1__conversation__init);
    st = CG_OK;
    if (resp == NULL || list == NULL || c == NULL ||
        (list->messages =
             cg_arena_alloc(call->arena, ((size_t)count + 1) * sizeof *list->messages)) == NULL ||
        (resp->entries =
             cg_arena_alloc(call->arena, ((size_t)count + 1) * sizeof *resp->entries)) == NULL) {
        st = OOM(call);
        goto out;
    }
    for (int i = 0; i < count; i++) {
        ProtobufCMessage *m = protobuf_c_message_unpack(&ctxguard__v1__message__descriptor, &alloc,
                                                        rows[i].len, rows[i].message);
        Ctxguard__V1__HistoryEntry *e =
            NEW(call, Ctxguard__V1__HistoryEntry, ctxguard__v1__history_entry__init);
        if (m == NULL || e == NULL ||
            (e->compaction_id = cg_arena_strdup(call->arena, rows[i].compaction_id)) == NULL) {
            st = cg_err_set(&call->err, CG_INTERNAL, "stored message %lld does not decode",
                            (long long)rows[i].position);
            goto out;
        }
        list->messages[list->n_messages++] = (Ctxguard__V1__Message *)m;
        e->position = rows[i].position;
        e->revision = revision;
        e->received_at_unix_ms = rows[i].received_at_ms;
        e->tokens = rows[i].tokens;
        resp->entries[resp->n_entries++] = e;
    }
    c->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
    c->messages = list;
    if (req->response_format ==
            CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_UNSPECIFIED ||
        req->response_format == CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED) {
        resp->conversation = c;
    } else {
        struct cg_conv *conv = NULL;
        if ((st = cg_rpc_conv_in(call, "conversation", c, &conv)) != CG_OK)
            goto out;
        st = cg_rpc_conv_out(call, conv, (int)req->response_format, &resp->conversation);
        cg_conv_free(conv);
        if (st != CG_OK)
            goto out;
    }
    char token[32] = "";
    if (more && count > 0)
        snprintf(token, sizeof token, "p%lld", (long long)rows[count - 1].position + 1);
    if ((resp->next_page_token = cg_arena_strdup(call->arena, token)) == NULL) {
        st = OOM(call);
        goto out;
    }
    resp->total_messages = revision == sess.revision ? sess.history_messages : 0;
    if (revision != sess.revision) {
        int64_t found = 0;
        uint8_t *tmp = malloc((size_t)HISTORY_MAX * 32);
        if (tmp != NULL &&
            cg_store_ctx_history_digests(env->svc.store, call->principal.tenant_id, req->session_id,
                                         revision, HISTORY_MAX, tmp, &found, &serr) == CG_OK)
            resp->total_messages = found;
        free(tmp);
    }
    resp->trim_boundary = sess.trim_boundary;
    resp->revision = revision;
    resp->latest_revision = sess.revision;
    *response = &resp->base;
out:
    cg_store_ctx_rows_free(rows, count);
    free(rows);
    return st;
}

cg_status cg_rpc_context_get_stats(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                   const ProtobufCMessage *request, ProtobufCMessage **response)
{
    const Ctxguard__V1__GetCompressionStatsRequest *req =
        (const Ctxguard__V1__GetCompressionStatsRequest *)request;
    cg_status st;
    if (req->session_id[0] != '\0' &&
        (st = check_session_id(call, "session_id", req->session_id)) != CG_OK)
        return st;
    /* The tenant-wide figures (no session) are outside a scope-bound key too. */
    if ((st = cg_rpc_session_check(call, req->session_id)) != CG_OK)
        return st;
    if (req->since_unix_ms < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'since_unix_ms' must not be negative");
    if (req->until_unix_ms < 0 ||
        (req->until_unix_ms != 0 && req->until_unix_ms < req->since_unix_ms))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'until_unix_ms' must be 0 or at least since_unix_ms");
    struct cg_ctx_session sess = {0};
    struct cg_err serr = {0};
    if (req->session_id[0] != '\0' &&
        cg_store_ctx_session_get(env->svc.store, call->principal.tenant_id, req->session_id, &sess,
                                 &serr) != CG_OK)
        return store_error(call, &serr);
    struct cg_ctx_stats t;
    if (cg_store_ctx_stats(env->svc.store, call->principal.tenant_id, req->session_id,
                           req->since_unix_ms, req->until_unix_ms, &t, &serr) != CG_OK)
        return store_error(call, &serr);
    Ctxguard__V1__GetCompressionStatsResponse *resp =
        NEW(call, Ctxguard__V1__GetCompressionStatsResponse,
            ctxguard__v1__get_compression_stats_response__init);
    if (resp == NULL ||
        (resp->session_id = cg_arena_strdup(call->arena, req->session_id)) == NULL ||
        (resp->by_layer =
             cg_arena_alloc(call->arena, CG_CTX_STATS_LAYERS * sizeof *resp->by_layer)) == NULL ||
        (resp->by_strategy = cg_arena_alloc(call->arena, CG_CTX_STATS_STRATEGIES *
                                                             sizeof *resp->by_strategy)) == NULL)
        return OOM(call);
    resp->compress_calls = t.calls;
    resp->triggered_calls = t.triggered;
    resp->tokens_before = t.tokens_before;
    resp->tokens_after = t.tokens_after;
    resp->tokens_saved = t.tokens_before - t.tokens_after;
    resp->artifacts_created = t.artifacts;
    resp->artifact_bytes = t.artifact_bytes;
    resp->boundary_moves = t.boundary_moves;
    resp->cache_tokens_invalidated = t.cache_tokens_invalidated;
    resp->first_compressed_at_unix_ms = t.first_ms;
    resp->last_compressed_at_unix_ms = t.last_ms;
    for (int l = 1; l < CG_CTX_STATS_LAYERS; l++) {
        if (t.layer[l].runs == 0)
            continue;
        Ctxguard__V1__LayerStats *o =
            NEW(call, Ctxguard__V1__LayerStats, ctxguard__v1__layer_stats__init);
        if (o == NULL)
            return OOM(call);
        o->layer = (Ctxguard__V1__CompressionLayer)l;
        o->applied = t.layer[l].applied;
        o->failed = t.layer[l].failed;
        o->tokens_saved = t.layer[l].saved;
        o->messages_affected = t.layer[l].affected;
        o->duration_ms = t.layer[l].ms;
        resp->by_layer[resp->n_by_layer++] = o;
    }
    for (int s = 1; s < CG_CTX_STATS_STRATEGIES; s++) {
        if (t.strategy[s].calls == 0)
            continue;
        Ctxguard__V1__StrategyStats *o =
            NEW(call, Ctxguard__V1__StrategyStats, ctxguard__v1__strategy_stats__init);
        if (o == NULL)
            return OOM(call);
        o->strategy = (Ctxguard__V1__CompressionStrategy)s;
        o->calls = t.strategy[s].calls;
        o->triggered_calls = t.strategy[s].triggered;
        o->tokens_saved = t.strategy[s].saved;
        resp->by_strategy[resp->n_by_strategy++] = o;
    }
    resp->trim_boundary = sess.trim_boundary;
    resp->history_messages = sess.history_messages;
    *response = &resp->base;
    return CG_OK;
}

/* rpc_context_state.c - what stateful Compress needs of rpc/ around the session flow of
 * service/context_session.c (the check of session_id, the history's wire encoding, the
 * report's session entries), and the read-back RPCs GetArtifact, ListArtifacts, GetHistory
 * and GetCompressionStats (their reads in service/context_history.c).
 *
 * History messages are stored as protobuf ctxguard.v1.Message (rpc_conv's structured form),
 * one row per message with its SHA-256; a FULL sync compares digests to find what is new.
 */
#include "rpc/rpc_context_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/rpc_conv.h"
#include "rpc/rpc_handlers.h"
#include "service/context_history.h"

#define PAGE_DEFAULT 100
#define PAGE_MAX 1000
#define ARTIFACT_READ_DEFAULT 1048576
#define ARTIFACT_READ_MAX 4194304

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

/* ------------------------------------------------------------------ history codec -- */

/* cg_ctx_history_codec.pack: messages [from, n) each as a packed ctxguard.v1.Message in the
 * arena (one at a time: no list of the whole conversation is built). */
static cg_status codec_pack(void *ctx, struct cg_arena *arena, const struct cg_conv *conv,
                            size_t from, uint8_t ***data, size_t **len, struct cg_err *err)
{
    struct cg_rpc_history_codec_ctx *cc = ctx;
    (void)arena; /* the call's */
    size_t n = conv->n_messages;
    uint8_t **d = cg_arena_alloc(cc->call->arena, (n + 1) * sizeof *d);
    size_t *l = cg_arena_alloc(cc->call->arena, (n + 1) * sizeof *l);
    if (d == NULL || l == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = from; i < n; i++) {
        const ProtobufCMessage *m = cg_rpc_conv_message_out(cc->call, conv, i);
        if (m == NULL)
            return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        l[i] = protobuf_c_message_get_packed_size(m);
        if ((d[i] = cg_arena_alloc(cc->call->arena, l[i] + 1)) == NULL)
            return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
        protobuf_c_message_pack(m, d[i]);
    }
    *data = d;
    *len = l;
    return CG_OK;
}

/* cg_ctx_history_codec.unpack: a stored ctxguard.v1.Message. */
static void *codec_unpack(void *ctx, struct cg_arena *arena, const void *data, size_t len)
{
    struct cg_rpc_history_codec_ctx *cc = ctx;
    (void)arena;
    ProtobufCAllocator alloc;
    cg_rpc_allocator(cc->call->arena, &alloc);
    return protobuf_c_message_unpack(&ctxguard__v1__message__descriptor, &alloc, len, data);
}

/* cg_ctx_history_codec.decode: the stored messages read as one conversation with the
 * request's tools, so that they are checked as a whole. */
static cg_status codec_decode(void *ctx, struct cg_arena *arena, void *const *stored, size_t n,
                              struct cg_conv **out, struct cg_err *err)
{
    struct cg_rpc_history_codec_ctx *cc = ctx;
    struct cg_rpc_call *call = cc->call;
    (void)arena;
    *out = NULL;
    Ctxguard__V1__MessageList *all =
        NEW(call, Ctxguard__V1__MessageList, ctxguard__v1__message_list__init);
    Ctxguard__V1__Conversation *c =
        NEW(call, Ctxguard__V1__Conversation, ctxguard__v1__conversation__init);
    if (all == NULL || c == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    all->messages = (Ctxguard__V1__Message **)stored;
    all->n_messages = n;
    c->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
    c->messages = all;
    if (cc->request_conv != NULL) {
        c->n_tools = cc->request_conv->n_tools;
        c->tools = cc->request_conv->tools;
    }
    struct cg_err saved = call->err;
    cg_status st = cg_rpc_conv_in(call, "conversation", c, out);
    if (st != CG_OK) {
        *err = call->err;
        call->err = saved;
    }
    return st;
}

void cg_rpc_ctx_history_codec(struct cg_rpc_history_codec_ctx *ctx,
                              struct cg_ctx_history_codec *out)
{
    out->pack = codec_pack;
    out->unpack = codec_unpack;
    out->decode = codec_decode;
    out->ctx = ctx;
}

cg_status cg_rpc_ctx_check_session_id(struct cg_rpc_call *call, const char *session_id)
{
    cg_status st = check_session_id(call, "session_id", session_id);
    if (st == CG_OK)
        st = cg_rpc_session_check(call, session_id);
    return st;
}

static Ctxguard__V1__ArtifactInfo *artifact_out(struct cg_rpc_call *call,
                                                const struct cg_ctx_artifact *a);

cg_status cg_rpc_ctx_report_session(struct cg_rpc_call *call, bool dry_run,
                                    const struct cg_ctx_session_state *s,
                                    const struct cg_compress_result *r,
                                    Ctxguard__V1__CompressionReport *rep)
{
    rep->artifacts = cg_arena_alloc(call->arena, (s->n_artifacts + 1) * sizeof *rep->artifacts);
    if (rep->artifacts == NULL)
        return OOM(call);
    for (size_t i = 0; i < s->n_artifacts; i++) {
        Ctxguard__V1__ArtifactInfo *o = artifact_out(call, &s->artifacts[i]);
        if (o == NULL)
            return OOM(call);
        if (dry_run) /* nothing was stored: no ids to read it back by */
            o->artifact_id = o->compaction_id = (char *)"";
        rep->artifacts[rep->n_artifacts++] = o;
    }
    /* Changes name the artifact their message went to. */
    for (size_t i = 0; i < rep->n_changes && i < r->n_changes; i++)
        if (r->changes[i].artifact >= 0 && (size_t)r->changes[i].artifact < rep->n_artifacts)
            rep->changes[i]->artifact_id = rep->artifacts[r->changes[i].artifact]->artifact_id;
    rep->history_revision = s->revision;
    if (dry_run)
        return CG_OK;
    if ((rep->compaction_id = cg_arena_strdup(call->arena, s->compaction_id)) == NULL)
        return OOM(call);
    rep->history_messages_added = s->added;
    return CG_OK;
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
    struct cg_op op = cg_rpc_op(call);
    struct cg_ctx_artifact info;
    void *content;
    size_t len;
    cg_status st = cg_ctx_artifact_read(&env->svc, &op, req->artifact_id, req->offset, length,
                                        &info, &content, &len);
    /* An artifact of a session outside a scope-bound key is as unknown as another tenant's,
     * also when the offset is past its end (info is read then too). */
    if ((st == CG_OK || st == CG_OUT_OF_RANGE) &&
        !cg_rpc_scope_reachable(&call->principal, info.session_id, "")) {
        free(content);
        return cg_err_setr(&call->err, CG_NOT_FOUND, CG_ERR_ARTIFACT_NOT_FOUND,
                           "artifact_id: no such artifact");
    }
    if (st != CG_OK)
        return st;
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

static cg_status list_artifacts_out(struct cg_rpc_call *call,
                                    const struct cg_ctx_artifact_page *page,
                                    ProtobufCMessage **response)
{
    Ctxguard__V1__ListArtifactsResponse *resp =
        NEW(call, Ctxguard__V1__ListArtifactsResponse, ctxguard__v1__list_artifacts_response__init);
    if (resp == NULL ||
        (resp->artifacts = cg_arena_alloc(call->arena, ((size_t)page->count + 1) *
                                                           sizeof *resp->artifacts)) == NULL)
        return OOM(call);
    for (int i = 0; i < page->count; i++)
        if ((resp->artifacts[resp->n_artifacts++] = artifact_out(call, &page->rows[i])) == NULL)
            return OOM(call);
    if ((resp->next_page_token = cg_arena_strdup(call->arena, page->next_page_token)) == NULL)
        return OOM(call);
    *response = &resp->base;
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
    struct cg_op op = cg_rpc_op(call);
    struct cg_ctx_artifact_page page;
    st = cg_ctx_artifact_list(&env->svc, &op, req->session_id, req->tool_call_id, after, limit,
                              &page);
    if (st == CG_OK)
        st = list_artifacts_out(call, &page, response);
    cg_ctx_artifact_page_cleanup(&page);
    return st;
}

/* GetHistory's entries and the stored messages as one structured conversation *c (all in
 * the call's arena). */
static cg_status history_entries(struct cg_rpc_call *call, const struct cg_ctx_history_page *page,
                                 Ctxguard__V1__GetHistoryResponse *resp,
                                 Ctxguard__V1__Conversation **out)
{
    ProtobufCAllocator alloc;
    cg_rpc_allocator(call->arena, &alloc);
    size_t count = (size_t)page->count;
    Ctxguard__V1__MessageList *list =
        NEW(call, Ctxguard__V1__MessageList, ctxguard__v1__message_list__init);
    Ctxguard__V1__Conversation *c =
        NEW(call, Ctxguard__V1__Conversation, ctxguard__v1__conversation__init);
    if (list == NULL || c == NULL ||
        (list->messages = cg_arena_alloc(call->arena, (count + 1) * sizeof *list->messages)) ==
            NULL ||
        (resp->entries = cg_arena_alloc(call->arena, (count + 1) * sizeof *resp->entries)) == NULL)
        return OOM(call);
    for (size_t i = 0; i < count; i++) {
        const struct cg_ctx_history_row *row = &page->rows[i];
        ProtobufCMessage *m = protobuf_c_message_unpack(&ctxguard__v1__message__descriptor, &alloc,
                                                        row->len, row->message);
        Ctxguard__V1__HistoryEntry *e =
            NEW(call, Ctxguard__V1__HistoryEntry, ctxguard__v1__history_entry__init);
        if (m == NULL || e == NULL ||
            (e->compaction_id = cg_arena_strdup(call->arena, row->compaction_id)) == NULL)
            return cg_err_set(&call->err, CG_INTERNAL, "stored message %lld does not decode",
                              (long long)row->position);
        list->messages[list->n_messages++] = (Ctxguard__V1__Message *)m;
        e->position = row->position;
        e->revision = page->revision;
        e->received_at_unix_ms = row->received_at_ms;
        e->tokens = row->tokens;
        resp->entries[resp->n_entries++] = e;
    }
    c->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_MESSAGES;
    c->messages = list;
    *out = c;
    return CG_OK;
}

/* GetHistory's answer for one page, the conversation in the requested format. */
static cg_status history_out(struct cg_rpc_call *call, const struct cg_ctx_history_page *page,
                             int format, ProtobufCMessage **response)
{
    Ctxguard__V1__GetHistoryResponse *resp =
        NEW(call, Ctxguard__V1__GetHistoryResponse, ctxguard__v1__get_history_response__init);
    Ctxguard__V1__Conversation *c = NULL;
    cg_status st;
    if (resp == NULL)
        return OOM(call);
    if ((st = history_entries(call, page, resp, &c)) != CG_OK)
        return st;
    if (format == CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_UNSPECIFIED ||
        format == CTXGUARD__V1__CONVERSATION_FORMAT__CONVERSATION_FORMAT_STRUCTURED) {
        resp->conversation = c;
    } else {
        struct cg_conv *conv = NULL;
        if ((st = cg_rpc_conv_in(call, "conversation", c, &conv)) != CG_OK)
            return st;
        st = cg_rpc_conv_out(call, conv, format, &resp->conversation);
        cg_conv_free(conv);
        if (st != CG_OK)
            return st;
    }
    if ((resp->next_page_token = cg_arena_strdup(call->arena, page->next_page_token)) == NULL)
        return OOM(call);
    resp->total_messages = page->total_messages;
    resp->trim_boundary = page->trim_boundary;
    resp->revision = page->revision;
    resp->latest_revision = page->latest_revision;
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
    if ((int)req->response_format < 0 || (int)req->response_format > CG_RPC_CONV_FORMAT_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'response_format' has an unknown value %d",
                          (int)req->response_format);
    if (req->page_token[0] == '\0') {
        if (req->from_position < 0)
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'from_position' must not be negative");
        from = req->from_position;
    }
    struct cg_op op = cg_rpc_op(call);
    struct cg_ctx_history_page page;
    st = cg_ctx_history_read(&env->svc, &op, req->session_id, req->revision, from, limit, &page);
    if (st == CG_OK)
        st = history_out(call, &page, (int)req->response_format, response);
    cg_ctx_history_page_cleanup(&page);
    return st;
}

cg_status cg_rpc_context_delete_session(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response)
{
    const Ctxguard__V1__DeleteSessionRequest *req =
        (const Ctxguard__V1__DeleteSessionRequest *)request;
    cg_status st = cg_rpc_ctx_check_session_id(call, req->session_id);
    if (st != CG_OK)
        return st;
    Ctxguard__V1__DeleteSessionResponse *resp =
        NEW(call, Ctxguard__V1__DeleteSessionResponse, ctxguard__v1__delete_session_response__init);
    if (resp == NULL)
        return OOM(call);
    struct cg_op op = cg_rpc_op(call);
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    struct cg_ctx_deleted gone;
    if ((st = cg_ctx_session_delete(&env->svc, &op, req->session_id, &audit, &gone)) != CG_OK)
        return st;
    resp->deleted_messages = gone.messages;
    resp->deleted_artifacts = gone.artifacts;
    resp->deleted_compactions = gone.compactions;
    *response = &resp->base;
    return CG_OK;
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
    struct cg_op op = cg_rpc_op(call);
    struct cg_ctx_session sess;
    struct cg_ctx_stats t;
    if ((st = cg_ctx_stats_read(&env->svc, &op, req->session_id, req->since_unix_ms,
                                req->until_unix_ms, &sess, &t)) != CG_OK)
        return st;
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
    resp->current_tokens = t.latest_tokens;
    resp->context_window_tokens = t.latest_context_window;
    resp->effective_window_tokens = t.latest_effective_window;
    resp->window_utilization = t.latest_effective_window > 0
                                   ? (double)t.latest_tokens / (double)t.latest_effective_window
                                   : 0.0;
    resp->current_at_unix_ms = t.latest_ms;
    *response = &resp->base;
    return CG_OK;
}

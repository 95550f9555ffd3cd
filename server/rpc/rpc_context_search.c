/* rpc_context_search.c - ContextService.SearchHistory: a session's stored messages read a
 * page at a time through service/context_history.h, each decoded from its protobuf form and
 * searched part by part with core/textfind.h. A call stops at page_size matches or at its
 * share of work, and its page token says exactly where the next one goes on:
 * "h<position>.<part>.<byte>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/textfind.h"
#include "rpc/rpc_context_state.h"
#include "rpc/rpc_handlers.h"
#include "service/context_history.h"

#define MATCHES_DEFAULT 20
#define MATCHES_MAX 100
#define CONTEXT_DEFAULT 80
#define CONTEXT_MAX 1000
#define READ_PAGE 100          /* messages read from the store at a time */
#define WORK_MESSAGES 10000    /* one call's share of work */
#define WORK_BYTES (64u << 20) /* of text searched */
#define WORK_BYTES_REGEX (16u << 20)

/* Where a search goes on: a message, a part of it, a byte of that part. */
struct resume {
    int64_t position;
    uint32_t part;
    size_t byte;
};

static cg_status parse_resume(struct cg_rpc_call *call, const char *token, struct resume *r)
{
    long long pos;
    unsigned part;
    unsigned long long byte;
    int used = 0;
    if (sscanf(token, "h%lld.%u.%llu%n", &pos, &part, &byte, &used) != 3 || token[used] != '\0' ||
        pos < 0 || token[1] < '0' || token[1] > '9')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_token' is not valid");
    r->position = pos;
    r->part = part;
    r->byte = (size_t)byte;
    return CG_OK;
}

/* The searchable text of a part and its kind's name; NULL for an image. */
static const char *part_text(const Ctxguard__V1__MessagePart *p, size_t *len, const char **kind)
{
    const char *s = NULL;
    switch (p->kind_case) {
    case CTXGUARD__V1__MESSAGE_PART__KIND_TEXT:
        s = p->text, *kind = "text";
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_CALL:
        s = p->tool_call != NULL ? p->tool_call->arguments_json : NULL, *kind = "tool_call";
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_TOOL_RESULT:
        s = p->tool_result != NULL ? p->tool_result->content : NULL, *kind = "tool_result";
        break;
    case CTXGUARD__V1__MESSAGE_PART__KIND_REASONING:
        s = p->reasoning != NULL ? p->reasoning->text : NULL, *kind = "reasoning";
        break;
    default:
        break;
    }
    *len = s != NULL ? strlen(s) : 0;
    return s;
}

struct search {
    struct cg_rpc_call *call;
    const struct cg_textfind *find;
    size_t context;
    size_t want; /* matches per page */
    Ctxguard__V1__SearchHistoryResponse *resp;
    struct resume at; /* where the next match is looked for */
    bool full;        /* the page is full: at says where to go on */
    size_t work_bytes, work_bytes_max;
};

static cg_status add_match(struct search *s, const Ctxguard__V1__Message *m, uint32_t part,
                           const char *kind, const char *text, size_t len, size_t start,
                           size_t mlen)
{
    struct cg_rpc_call *call = s->call;
    Ctxguard__V1__HistoryMatch *hm =
        NEW(call, Ctxguard__V1__HistoryMatch, ctxguard__v1__history_match__init);
    size_t a, b;
    cg_textfind_snippet(text, len, start, mlen, s->context, &a, &b);
    char *snip = hm != NULL ? cg_arena_alloc(call->arena, b - a + 1) : NULL;
    if (snip == NULL)
        return OOM(call);
    memcpy(snip, text + a, b - a);
    snip[b - a] = '\0';
    hm->position = s->at.position;
    hm->role = m->role;
    hm->part_index = part;
    hm->part_kind = (char *)kind;
    hm->offset = (int64_t)start;
    hm->length = (int64_t)mlen;
    hm->snippet = snip;
    hm->snippet_offset = (int64_t)a;
    s->resp->matches[s->resp->n_matches++] = hm;
    return CG_OK;
}

/* The matches of one decoded message from s->at.part / s->at.byte on. */
static cg_status search_message(struct search *s, const Ctxguard__V1__Message *m)
{
    for (uint32_t k = s->at.part; k < m->n_parts; k++, s->at.byte = 0) {
        size_t len, start, mlen;
        const char *kind = NULL;
        const char *text = part_text(m->parts[k], &len, &kind);
        if (text == NULL)
            continue;
        s->work_bytes += len;
        size_t from = s->at.byte;
        while (from <= len && cg_textfind_next(s->find, text, len, from, &start, &mlen)) {
            if (s->resp->n_matches == s->want) {
                s->at.part = k;
                s->at.byte = start;
                s->full = true;
                return CG_OK;
            }
            cg_status st = add_match(s, m, k, kind, text, len, start, mlen);
            if (st != CG_OK)
                return st;
            from = start + mlen;
        }
    }
    return CG_OK;
}

/* Reads and searches until the page is full, the work share runs out or the history ends;
 * *more then says whether to go on at s->at. */
static cg_status search_history(struct search *s, const struct cg_rpc_env *env,
                                const char *session_id, bool *more)
{
    struct cg_rpc_call *call = s->call;
    struct cg_op op = cg_rpc_op(call);
    int64_t searched = 0;
    *more = false;
    for (;;) {
        struct cg_ctx_history_page page;
        cg_status st =
            cg_ctx_history_read(&env->svc, &op, session_id, 0, s->at.position, READ_PAGE, &page);
        if (st == CG_OK)
            s->resp->total_messages = page.total_messages;
        for (int i = 0; st == CG_OK && i < page.count && !s->full; i++) {
            const struct cg_ctx_history_row *row = &page.rows[i];
            if (row->position != s->at.position)
                s->at = (struct resume){.position = row->position};
            Ctxguard__V1__Message *m = (Ctxguard__V1__Message *)protobuf_c_message_unpack(
                &ctxguard__v1__message__descriptor, NULL, row->len, row->message);
            if (m == NULL) {
                st = cg_err_set(&call->err, CG_INTERNAL, "stored message %lld does not decode",
                                (long long)row->position);
                break;
            }
            st = search_message(s, m);
            protobuf_c_message_free_unpacked(&m->base, NULL);
            if (st != CG_OK || s->full)
                break;
            searched++;
            s->at = (struct resume){.position = row->position + 1};
            if (searched >= WORK_MESSAGES || s->work_bytes >= s->work_bytes_max) {
                *more = i + 1 < page.count || page.next_page_token[0] != '\0';
                cg_ctx_history_page_cleanup(&page);
                s->resp->messages_searched = searched;
                return CG_OK;
            }
        }
        bool end = page.next_page_token[0] == '\0';
        cg_ctx_history_page_cleanup(&page);
        if (st != CG_OK)
            return st;
        if (s->full) {
            *more = true;
            break;
        }
        if (end)
            break;
    }
    s->resp->messages_searched = searched;
    return CG_OK;
}

cg_status cg_rpc_context_search_history(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                        const ProtobufCMessage *request,
                                        ProtobufCMessage **response)
{
    const Ctxguard__V1__SearchHistoryRequest *req =
        (const Ctxguard__V1__SearchHistoryRequest *)request;
    cg_status st = cg_rpc_ctx_check_session_id(call, req->session_id);
    if (st != CG_OK)
        return st;
    if (req->page_size > MATCHES_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'page_size' must be 0..%d",
                          MATCHES_MAX);
    if (req->context_bytes > CONTEXT_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'context_bytes' must be 0..%d",
                          CONTEXT_MAX);
    struct search s = {
        .call = call,
        .context = req->context_bytes ? req->context_bytes : CONTEXT_DEFAULT,
        .want = req->page_size ? req->page_size : MATCHES_DEFAULT,
        .work_bytes_max = req->regex ? WORK_BYTES_REGEX : WORK_BYTES,
    };
    if (req->page_token[0] != '\0') {
        if ((st = parse_resume(call, req->page_token, &s.at)) != CG_OK)
            return st;
    } else if (req->from_position < 0) {
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'from_position' must not be negative");
    } else {
        s.at.position = req->from_position;
    }
    struct cg_textfind *find = NULL;
    if ((st = cg_textfind_new(req->query, strlen(req->query), req->regex, req->ignore_case, "query",
                              &find, &call->err)) != CG_OK)
        return st;
    s.find = find;
    s.resp =
        NEW(call, Ctxguard__V1__SearchHistoryResponse, ctxguard__v1__search_history_response__init);
    if (s.resp == NULL ||
        (s.resp->matches = cg_arena_alloc(call->arena, s.want * sizeof *s.resp->matches)) == NULL) {
        cg_textfind_free(find);
        return OOM(call);
    }
    bool more = false;
    st = search_history(&s, env, req->session_id, &more);
    cg_textfind_free(find);
    if (st != CG_OK)
        return st;
    char token[64] = "";
    if (more)
        snprintf(token, sizeof token, "h%lld.%u.%zu", (long long)s.at.position, s.at.part,
                 s.at.byte);
    if ((s.resp->next_page_token = cg_arena_strdup(call->arena, token)) == NULL)
        return OOM(call);
    *response = &s.resp->base;
    return CG_OK;
}

/* rpc_context_summarize.c - ContextService.Summarize: a conversation (or a range of it) to a
 * structured summary, by the LLM or the extractive summarizer (core/summary.h).
 *
 * Order of work, and why:
 * 1. Validate every field (the message names the field).
 * 2. Redact PII (core/redact.h) from a copy of the whole conversation before any summarizer
 *    sees it, with the pseudonym table of the request's session (kept in this process for
 *    recent sessions; without a session_id, one for the request): the same value gets the
 *    same label in every message and every summary of the session, so they stay coherent. The extractive summarizer reads the
 *    redacted copy too: its summary may be stored and must not carry raw values either.
 * 3. LLM (kind LLM, or AUTO with an LLM configured): the transcript is cut into chunks that fit
 *    the model (its context window from core/models.h, half of it for the input); one chunk is
 *    summarized at once, more are summarized one by one and then their summaries together
 *    (again in chunks if need be), so no input is too large. Every answer is checked: not
 *    empty, the six section headings present, and the final one smaller than the input.
 *    AUTO falls back to the extractive summary and says why (fallback_reason/detail);
 *    LLM answers FAILED_PRECONDITION when none is configured, UNAVAILABLE when it fails.
 *    Time: the LLM gets the call's deadline minus a reserve for the extractive fallback.
 * 4. Tokens are counted with the estimator of the request's model (the conversation's when
 *    the request names none).
 */
#include "rpc/rpc_handlers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "core/estimate.h"
#include "core/models.h"
#include "core/redact.h"
#include "core/summary.h"
#include "core/utf8.h"
#include "ctxguard/v1/context.pb-c.h"
#include "llm/llm.h"
#include "rpc/rpc_conv.h"

#define NEW(call, type, init)                                                                      \
    ({                                                                                             \
        type *m_ = cg_arena_alloc((call)->arena, sizeof(type));                                    \
        if (m_ != NULL)                                                                            \
            init(m_);                                                                              \
        m_;                                                                                        \
    })

#define OOM(call) cg_err_set(&(call)->err, CG_RESOURCE_EXHAUSTED, "out of memory")

#define LANGUAGE_MAX 35          /* characters of a BCP 47 tag */
#define MODEL_MAX 200            /* characters */
#define FALLBACK_RESERVE_MS 300  /* of the deadline, kept for the extractive fallback */
#define TOOL_RESULT_BYTES 2000   /* of each tool result the LLM reads */
#define CHUNK_BYTES_MIN 8192
#define CHUNK_BYTES_MAX (256u << 10)
#define LLM_CALLS_MAX 40         /* per request, all levels of a hierarchical summary */
#define LEVELS_MAX 4

/* Fallback reasons this file sets besides the client's (numbered as SummaryFallbackReason). */
#define REASON_NONE 0
#define REASON_NOT_SMALLER 7
#define REASON_REQUESTED 9

struct counter {
    cg_profile profile;
};

static int64_t count_tokens(void *arg, const char *text, size_t len)
{
    const struct counter *c = arg;
    return cg_estimate_text(c->profile, text, len);
}

/* ------------------------------------------------------------------ validation ------- */

static cg_status check_request(struct cg_rpc_call *call, const Ctxguard__V1__SummarizeRequest *req,
                               int64_t *target)
{
    *target = req->target_tokens == 0 ? CG_SUMMARY_TARGET_DEFAULT : req->target_tokens;
    if (*target < CG_SUMMARY_TARGET_MIN || *target > CG_SUMMARY_TARGET_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'target_tokens' must be %d..%d (0 means %d), got %lld",
                          CG_SUMMARY_TARGET_MIN, CG_SUMMARY_TARGET_MAX,
                          CG_SUMMARY_TARGET_DEFAULT, (long long)req->target_tokens);
    if (cg_utf8_length(req->focus, strlen(req->focus)) > CG_SUMMARY_FOCUS_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'focus' is longer than %d characters", CG_SUMMARY_FOCUS_MAX);
    size_t lang_len = strlen(req->language);
    if (lang_len > LANGUAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'language' is longer than %d characters", LANGUAGE_MAX);
    for (size_t i = 0; i < lang_len; i++) {
        char c = req->language[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-'))
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'language' must be a BCP 47 tag such as \"de\" or \"ja-JP\"");
    }
    if (req->summarizer == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_NONE)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'summarizer': NONE is for Compress only; use AUTO, LLM or "
                          "EXTRACTIVE");
    if ((int)req->summarizer < 0 ||
        (int)req->summarizer > CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_NONE)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'summarizer': unknown value %d",
                          (int)req->summarizer);
    cg_status st = cg_rpc_check_name(call, "model", req->model, MODEL_MAX, false);
    if (st != CG_OK)
        return st;
    st = cg_rpc_check_name(call, "session_id", req->session_id, 200, false);
    if (st != CG_OK)
        return st;
    if (req->from_position < 0 || req->to_position < 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field '%s' must not be negative",
                          req->from_position < 0 ? "from_position" : "to_position");
    if (req->conversation == NULL) {
        if (req->session_id[0] != '\0')
            return cg_err_set(&call->err, CG_UNIMPLEMENTED,
                              "summarizing a session's stored history needs the history "
                              "store (the compression cascade); send 'conversation'");
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'conversation' is required (or a session_id with history)");
    }
    if (req->from_position != 0 || req->to_position != 0)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "fields 'from_position' and 'to_position' apply to a session's "
                          "history only, not to 'conversation'");
    return CG_OK;
}

/* ------------------------------------------------------------------ redaction -------- */

/* Sessions' pseudonym tables (rpc.h). A table is used by one call at a time: its own mutex
 * is held while a call redacts; `users` keeps it from being dropped meanwhile. */
struct pseudonym_entry {
    char key[CG_UUID_LEN + 2 + 4 * 200]; /* tenant_id "/" session_id (<= 200 characters) */
    uint64_t last_used;
    unsigned users;
    pthread_mutex_t lock;
    struct cg_redact_session session;
};

struct cg_rpc_pseudonyms {
    pthread_mutex_t lock;
    uint64_t clock;
    size_t n;
    struct pseudonym_entry *entries[];
};

struct cg_rpc_pseudonyms *cg_rpc_pseudonyms_new(size_t max_sessions)
{
    struct cg_rpc_pseudonyms *p = calloc(1, sizeof *p + max_sessions * sizeof p->entries[0]);
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->n = max_sessions;
    return p;
}

void cg_rpc_pseudonyms_free(struct cg_rpc_pseudonyms *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n; i++) {
        if (p->entries[i] != NULL) {
            pthread_mutex_destroy(&p->entries[i]->lock);
            free(p->entries[i]);
        }
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static void seed_session(struct cg_redact_session *session)
{
    uint64_t seed[2] = {0, 0};
    if (cg_random_bytes(seed, sizeof seed) != CG_OK)
        seed[0] = (uint64_t)cg_mono_ns(); /* the seed only hides the hashes held in memory */
    cg_redact_session_init(session, seed[0], seed[1]);
}

/* The table of (tenant, session), made (or taken over from the least recently used idle one)
 * when new, locked for the caller; NULL when every slot is busy or memory is short (the
 * caller then uses a table of its own). Release with pseudonyms_release. */
static struct pseudonym_entry *pseudonyms_acquire(struct cg_rpc_pseudonyms *p, const char *tenant,
                                                  const char *session_id)
{
    char key[sizeof ((struct pseudonym_entry *)0)->key];
    snprintf(key, sizeof key, "%s/%s", tenant, session_id);
    struct pseudonym_entry *e = NULL, *victim = NULL;
    size_t free_slot = SIZE_MAX;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n; i++) {
        struct pseudonym_entry *x = p->entries[i];
        if (x == NULL) {
            if (free_slot == SIZE_MAX)
                free_slot = i;
        } else if (strcmp(x->key, key) == 0) {
            e = x;
            break;
        } else if (x->users == 0 && (victim == NULL || x->last_used < victim->last_used)) {
            victim = x;
        }
    }
    bool fresh = false;
    if (e == NULL && free_slot != SIZE_MAX) {
        e = calloc(1, sizeof *e);
        if (e != NULL) {
            pthread_mutex_init(&e->lock, NULL);
            p->entries[free_slot] = e;
            fresh = true;
        }
    } else if (e == NULL && victim != NULL) {
        e = victim;
        fresh = true;
    }
    if (e != NULL) {
        if (fresh)
            snprintf(e->key, sizeof e->key, "%s", key);
        e->users++;
        e->last_used = ++p->clock;
    }
    pthread_mutex_unlock(&p->lock);
    if (e == NULL)
        return NULL;
    pthread_mutex_lock(&e->lock);
    if (fresh)
        seed_session(&e->session);
    return e;
}

static void pseudonyms_release(struct cg_rpc_pseudonyms *p, struct pseudonym_entry *e)
{
    pthread_mutex_unlock(&e->lock);
    pthread_mutex_lock(&p->lock);
    e->users--;
    pthread_mutex_unlock(&p->lock);
}

struct redactor {
    struct cg_redact_session *session;
    struct cg_redact_buf buf;
    struct cg_redact_counts counts;
};

static cg_status redact_str(struct cg_rpc_call *call, struct redactor *r, struct cg_conv *dst,
                            const struct cg_str *in, struct cg_str *out)
{
    struct cg_err err = {0};
    cg_status st = cg_redact(NULL, r->session, in->ptr, in->len, &r->buf, &r->counts, &err);
    if (st != CG_OK)
        return cg_err_set(&call->err, st == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : st,
                          "field 'conversation': %s", err.msg);
    st = cg_conv_str(dst, r->buf.data != NULL ? r->buf.data : "", r->buf.len, out, &err);
    if (st != CG_OK)
        return cg_err_set(&call->err, st, "field 'conversation': %s", err.msg);
    return CG_OK;
}

/* A copy of src with every text a summarizer reads redacted. Images are left out (no
 * summarizer reads them); tool call ids and names are kept (they are not user text). */
static cg_status redact_conv(struct cg_rpc_call *call, struct redactor *r,
                             const struct cg_conv *src, struct cg_conv **out)
{
    struct cg_conv_limits limits = src->limits;
    limits.max_bytes = src->limits.max_bytes * 2; /* labels may be longer than values */
    struct cg_conv *dst = cg_conv_new(&limits);
    if (dst == NULL)
        return OOM(call);
    struct cg_err err = {0};
    cg_status st = CG_OK;
    for (size_t m = 0; m < src->n_messages && st == CG_OK; m++) {
        const struct cg_message *sm = &src->messages[m];
        struct cg_message *dm;
        st = cg_conv_add_message(dst, sm->role, &dm, &err);
        if (st != CG_OK) {
            cg_err_set(&call->err, st, "field 'conversation': %s", err.msg);
            break;
        }
        for (size_t p = 0; p < sm->n_parts && st == CG_OK; p++) {
            const struct cg_part *sp = &sm->parts[p];
            if (sp->kind == CG_PART_IMAGE)
                continue;
            struct cg_part *dp;
            st = cg_conv_add_part(dst, dm, sp->kind, &dp, &err);
            if (st != CG_OK) {
                cg_err_set(&call->err, st, "field 'conversation': %s", err.msg);
                break;
            }
            switch (sp->kind) {
            case CG_PART_TEXT:
                st = redact_str(call, r, dst, &sp->u.text, &dp->u.text);
                break;
            case CG_PART_TOOL_CALL:
                dp->u.tool_call.id = sp->u.tool_call.id;
                dp->u.tool_call.name = sp->u.tool_call.name;
                st = redact_str(call, r, dst, &sp->u.tool_call.arguments,
                                &dp->u.tool_call.arguments);
                break;
            case CG_PART_TOOL_RESULT:
                dp->u.tool_result.tool_call_id = sp->u.tool_result.tool_call_id;
                dp->u.tool_result.is_error = sp->u.tool_result.is_error;
                dp->u.tool_result.tool_name = sp->u.tool_result.tool_name;
                st = redact_str(call, r, dst, &sp->u.tool_result.content,
                                &dp->u.tool_result.content);
                break;
            case CG_PART_REASONING:
                if (!sp->u.reasoning.redacted)
                    st = redact_str(call, r, dst, &sp->u.reasoning.text, &dp->u.reasoning.text);
                break;
            default:
                break;
            }
        }
    }
    if (st != CG_OK) {
        cg_conv_free(dst);
        return st;
    }
    *out = dst;
    return CG_OK;
}

/* ------------------------------------------------------------------ the LLM ---------- */

struct llm_run {
    struct cg_rpc_call *call;
    struct cg_llm *llm;
    const char *language;
    const char *focus;
    int64_t target;
    int64_t deadline_ms;
    struct counter *counter;
    unsigned calls;
    uint32_t attempts;
    uint32_t chunks;
    int reason;       /* why it failed: a SummaryFallbackReason */
    char detail[200]; /* and in words */
};

static bool run_fail(struct llm_run *run, int reason, const char *fmt, const char *what)
{
    run->reason = reason;
    snprintf(run->detail, sizeof run->detail, fmt, what);
    return false;
}

/* One chat call: the prompt and one text. On success *answer is the malloc'd content. */
static bool llm_call(struct llm_run *run, const char *text, bool partial, int64_t target,
                     char **answer)
{
    if (run->calls >= LLM_CALLS_MAX)
        return run_fail(run, CG_LLM_ERROR, "the input needs more than %s LLM calls", "40");
    char *prompt = cg_summary_prompt(run->language, target, run->focus, strlen(run->focus),
                                     partial);
    if (prompt == NULL)
        return run_fail(run, CG_LLM_ERROR, "%s", "out of memory for the prompt");
    struct cg_llm_message msgs[2] = {
        {"system", prompt, strlen(prompt)},
        {"user", text, strlen(text)},
    };
    /* Room to answer: the target and some slack (the model does not count exactly). */
    struct cg_llm_request lreq = {.messages = msgs,
                                  .n_messages = 2,
                                  .max_tokens = (int)(target * 2 + 64),
                                  .deadline_ms = run->deadline_ms,
                                  .rid = run->call->request_id};
    struct cg_llm_reply reply;
    memset(&reply, 0, sizeof reply);
    cg_llm_result res = cg_llm_chat(run->llm, &lreq, &reply);
    run->calls++;
    run->attempts += (uint32_t)(reply.attempts > 0 ? reply.attempts : 0);
    free(prompt);
    if (res != CG_LLM_OK) {
        run->reason = (int)res;
        snprintf(run->detail, sizeof run->detail, "%s: %s", cg_llm_result_name(res),
                 reply.detail);
        cg_llm_reply_cleanup(&reply);
        return false;
    }
    /* The checks every answer passes: it parses into the six sections. */
    struct cg_summary parsed;
    cg_summary_init(&parsed);
    unsigned found = 0;
    struct cg_err err = {0};
    bool ok = cg_summary_parse(reply.content, reply.content_len, run->language, &parsed, &found,
                               &err) == CG_OK;
    cg_summary_cleanup(&parsed);
    if (!ok || found != (1u << CG_SUMMARY_SECTION_COUNT) - 1) {
        cg_llm_reply_cleanup(&reply);
        return run_fail(run, CG_LLM_INVALID_OUTPUT, "%s",
                        ok ? "the answer lacks some of the six section headings"
                           : "out of memory reading the answer");
    }
    *answer = reply.content;
    reply.content = NULL;
    cg_llm_reply_cleanup(&reply);
    return true;
}

/* Joins texts[0..n) with blank lines into one malloc'd string. */
static char *join(char **texts, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += strlen(texts[i]) + 2;
    char *out = malloc(len + 1);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(texts[i]);
        memcpy(out + pos, texts[i], l);
        pos += l;
        memcpy(out + pos, "\n\n", 2);
        pos += 2;
    }
    out[pos] = '\0';
    return out;
}

/* Cuts text into pieces of at most max bytes at line ends (or character boundaries). */
static char **split_text(const char *text, size_t max, size_t *n_out)
{
    size_t len = strlen(text), cap = len / max + 2, n = 0;
    char **out = calloc(cap, sizeof *out);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    while (pos < len) {
        size_t end = len - pos <= max ? len : pos + max;
        if (end < len) {
            size_t nl = end;
            while (nl > pos + max / 2 && text[nl - 1] != '\n')
                nl--;
            if (text[nl - 1] == '\n')
                end = nl;
            while (end > pos + 1 && ((unsigned char)text[end] & 0xc0) == 0x80)
                end--;
        }
        if (n == cap) {
            char **p = realloc(out, 2 * cap * sizeof *out);
            if (p == NULL)
                break;
            out = p;
            cap *= 2;
        }
        out[n] = strndup(text + pos, end - pos);
        if (out[n] == NULL)
            break;
        n++;
        pos = end;
    }
    if (pos < len) {
        cg_summary_chunks_free(out, n);
        return NULL;
    }
    *n_out = n;
    return out;
}

/* The LLM's summary of conv into *summary (malloc'd), hierarchically when it is long. */
static bool llm_summarize(struct llm_run *run, const struct cg_conv *conv, size_t chunk_bytes,
                          char **summary)
{
    char **chunks = NULL;
    size_t n = 0;
    struct cg_err err = {0};
    if (cg_summary_transcript(conv, 0, 0, chunk_bytes, TOOL_RESULT_BYTES, &chunks, &n, &err) !=
        CG_OK)
        return run_fail(run, CG_LLM_ERROR, "%s", err.msg);
    if (n == 0) {
        cg_summary_chunks_free(chunks, n);
        return run_fail(run, CG_LLM_INVALID_OUTPUT, "%s", "nothing to summarize");
    }
    run->chunks = n > 1 ? (uint32_t)n : 0;
    for (int level = 0; level < LEVELS_MAX; level++) {
        if (n == 1) {
            char *answer = NULL;
            bool ok = llm_call(run, chunks[0], false, run->target, &answer);
            cg_summary_chunks_free(chunks, n);
            if (ok)
                *summary = answer;
            return ok;
        }
        /* Each part gets a share of room, never less than the target. */
        char **partials = calloc(n, sizeof *partials);
        if (partials == NULL) {
            cg_summary_chunks_free(chunks, n);
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
        }
        bool ok = true;
        for (size_t i = 0; i < n && ok; i++)
            ok = llm_call(run, chunks[i], true, run->target, &partials[i]);
        cg_summary_chunks_free(chunks, n);
        if (!ok) {
            cg_summary_chunks_free(partials, n);
            return false;
        }
        char *joined = join(partials, n);
        cg_summary_chunks_free(partials, n);
        if (joined == NULL)
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
        chunks = split_text(joined, chunk_bytes, &n);
        free(joined);
        if (chunks == NULL)
            return run_fail(run, CG_LLM_ERROR, "%s", "out of memory");
    }
    cg_summary_chunks_free(chunks, n);
    return run_fail(run, CG_LLM_ERROR, "the summaries did not converge in %s levels", "4");
}

/* ------------------------------------------------------------------ the answer ------- */

static char **list_out(struct cg_rpc_call *call, const struct cg_summary_list *l, size_t *n)
{
    *n = 0;
    if (l->n == 0)
        return NULL;
    char **out = cg_arena_calloc(call->arena, l->n, sizeof *out);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < l->n; i++)
        if ((out[i] = cg_arena_strdup(call->arena, l->items[i])) == NULL)
            return NULL;
    *n = l->n;
    return out;
}

static char *joined_out(struct cg_rpc_call *call, const struct cg_summary_list *l)
{
    size_t len = 0;
    for (size_t i = 0; i < l->n; i++)
        len += strlen(l->items[i]) + 1;
    char *out = cg_arena_alloc(call->arena, len + 1);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    for (size_t i = 0; i < l->n; i++) {
        if (i > 0)
            out[pos++] = ' ';
        size_t n = strlen(l->items[i]);
        memcpy(out + pos, l->items[i], n);
        pos += n;
    }
    out[pos] = '\0';
    return out;
}

static cg_status fill_sections(struct cg_rpc_call *call, const struct cg_summary *s,
                               Ctxguard__V1__SummarySections **out)
{
    Ctxguard__V1__SummarySections *sec =
        NEW(call, Ctxguard__V1__SummarySections, ctxguard__v1__summary_sections__init);
    if (sec == NULL)
        return OOM(call);
    sec->intent = joined_out(call, &s->sections[CG_SUMMARY_INTENT]);
    sec->current_state = joined_out(call, &s->sections[CG_SUMMARY_STATE]);
    sec->progress = list_out(call, &s->sections[CG_SUMMARY_PROGRESS], &sec->n_progress);
    sec->key_decisions = list_out(call, &s->sections[CG_SUMMARY_DECISIONS], &sec->n_key_decisions);
    sec->next_steps = list_out(call, &s->sections[CG_SUMMARY_NEXT], &sec->n_next_steps);
    sec->important_details =
        list_out(call, &s->sections[CG_SUMMARY_DETAILS], &sec->n_important_details);
    if (sec->intent == NULL || sec->current_state == NULL ||
        (s->sections[CG_SUMMARY_PROGRESS].n > 0 && sec->progress == NULL) ||
        (s->sections[CG_SUMMARY_DECISIONS].n > 0 && sec->key_decisions == NULL) ||
        (s->sections[CG_SUMMARY_NEXT].n > 0 && sec->next_steps == NULL) ||
        (s->sections[CG_SUMMARY_DETAILS].n > 0 && sec->important_details == NULL))
        return OOM(call);
    *out = sec;
    return CG_OK;
}

static cg_status fill_redactions(struct cg_rpc_call *call, const struct cg_redact_counts *c,
                                 Ctxguard__V1__SummarizeResponse *resp)
{
    size_t n = 0;
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++)
        n += c->by_type[t] > 0;
    if (n == 0)
        return CG_OK;
    resp->redactions = cg_arena_calloc(call->arena, n, sizeof *resp->redactions);
    if (resp->redactions == NULL)
        return OOM(call);
    for (int t = 1; t < CG_PII_TYPE_COUNT; t++) {
        if (c->by_type[t] == 0)
            continue;
        Ctxguard__V1__PiiRedactionCount *rc =
            NEW(call, Ctxguard__V1__PiiRedactionCount, ctxguard__v1__pii_redaction_count__init);
        if (rc == NULL)
            return OOM(call);
        rc->type = (Ctxguard__V1__PiiType)t;
        rc->count = c->by_type[t];
        resp->redactions[resp->n_redactions++] = rc;
    }
    return CG_OK;
}

/* The model's context window gives the chunk size: half of it for the input, at about three
 * bytes a token, within bounds. */
static size_t chunk_bytes_for(const char *model)
{
    struct cg_model_info info;
    cg_models_lookup(model, &info);
    int64_t bytes = info.context_window / 2 * 3;
    if (bytes < (int64_t)CHUNK_BYTES_MIN)
        bytes = CHUNK_BYTES_MIN;
    if (bytes > (int64_t)CHUNK_BYTES_MAX)
        bytes = CHUNK_BYTES_MAX;
    return (size_t)bytes;
}

CG_HANDLER(cg_rpc_context_summarize)
{
    const Ctxguard__V1__SummarizeRequest *req = (const Ctxguard__V1__SummarizeRequest *)request;
    int64_t target;
    cg_status st = check_request(call, req, &target);
    if (st != CG_OK)
        return st;
    Ctxguard__V1__SummarizerKind kind = req->summarizer;
    if (kind == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_UNSPECIFIED)
        kind = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_AUTO;
    bool llm_ready = env->llm != NULL && cg_llm_is_configured(env->llm);
    if (kind == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM && !llm_ready)
        return cg_err_set(&call->err, CG_FAILED_PRECONDITION,
                          "field 'summarizer': LLM asked for but no LLM is configured "
                          "(llm_base_url)");

    struct cg_conv *conv = NULL, *red = NULL;
    struct redactor r = {0};
    struct cg_summary sum;
    cg_summary_init(&sum);
    char *llm_text = NULL;
    st = cg_rpc_conv_in(call, "conversation", req->conversation, &conv);
    if (st != CG_OK)
        goto out;
    if (conv->n_messages == 0) {
        st = cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'conversation' has no messages");
        goto out;
    }

    /* Redact first: nothing below sees the raw text. With a session_id the session's
     * pseudonym table is used (the same value keeps its label across its requests). */
    struct pseudonym_entry *shared = NULL;
    struct cg_redact_session *own = NULL;
    if (req->session_id[0] != '\0' && env->pseudonyms != NULL)
        shared = pseudonyms_acquire(env->pseudonyms, call->principal.tenant_id, req->session_id);
    if (shared != NULL) {
        r.session = &shared->session;
    } else {
        if ((own = malloc(sizeof *own)) == NULL) {
            st = OOM(call);
            goto out;
        }
        seed_session(own);
        r.session = own;
    }
    cg_redact_buf_init(&r.buf, conv->limits.max_bytes);
    st = redact_conv(call, &r, conv, &red);
    if (shared != NULL)
        pseudonyms_release(env->pseudonyms, shared);
    r.session = NULL;
    free(own);
    if (st != CG_OK)
        goto out;

    struct counter counter;
    struct cg_model_info info;
    cg_models_lookup(req->model[0] != '\0' ? req->model : conv->model.ptr, &info);
    counter.profile = info.profile;
    struct cg_estimate est;
    struct cg_err err = {0};
    if (cg_estimate_conv(red, counter.profile, 0, NULL, &est, &err) != CG_OK) {
        st = cg_err_set(&call->err, CG_INTERNAL, "estimating the conversation: %s", err.msg);
        goto out;
    }
    const char *language = req->language[0] != '\0' ? cg_summary_language(req->language)
                                                    : cg_summary_detect_language(red, 0, 0);

    Ctxguard__V1__SummarizeResponse *resp =
        NEW(call, Ctxguard__V1__SummarizeResponse, ctxguard__v1__summarize_response__init);
    if (resp == NULL) {
        st = OOM(call);
        goto out;
    }
    int reason = REASON_NONE;
    char detail[240] = "";
    if (kind == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_EXTRACTIVE) {
        reason = REASON_REQUESTED;
        snprintf(detail, sizeof detail, "the extractive summarizer was asked for");
    } else if (!llm_ready) {
        reason = CG_LLM_NOT_CONFIGURED;
        snprintf(detail, sizeof detail, "no LLM is configured (llm_base_url)");
    } else {
        struct llm_run run = {.call = call,
                              .llm = env->llm,
                              .language = language,
                              .focus = req->focus,
                              .target = target,
                              .counter = &counter};
        if (call->deadline_ms > 0)
            run.deadline_ms = call->deadline_ms - FALLBACK_RESERVE_MS;
        bool ok = llm_summarize(&run, red, chunk_bytes_for(env->config->llm_model), &llm_text);
        resp->llm_attempts = run.attempts;
        resp->chunks = run.chunks;
        resp->llm_model = cg_arena_strdup(call->arena, env->config->llm_model);
        if (ok) {
            int64_t tokens = count_tokens(&counter, llm_text, strlen(llm_text));
            if (tokens >= est.content_tokens) {
                ok = false;
                run.reason = REASON_NOT_SMALLER;
                snprintf(run.detail, sizeof run.detail,
                         "the LLM's summary (%lld tokens) is not smaller than the input (%lld)",
                         (long long)tokens, (long long)est.content_tokens);
            }
        }
        if (ok) {
            unsigned found = 0;
            snprintf(sum.language, sizeof sum.language, "%s", language);
            if (cg_summary_parse(llm_text, strlen(llm_text), language, &sum, &found, &err) !=
                CG_OK) {
                st = OOM(call);
                goto out;
            }
            sum.text = llm_text;
            sum.text_len = strlen(llm_text);
            llm_text = NULL;
            sum.tokens = count_tokens(&counter, sum.text, sum.text_len);
            sum.target_met = sum.tokens <= target;
            sum.messages = red->n_messages;
            resp->summarizer_used = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM;
        } else {
            if (kind == CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM) {
                st = cg_err_set(&call->err, CG_UNAVAILABLE, "the LLM summarizer failed: %s",
                                run.detail);
                goto out;
            }
            reason = run.reason;
            snprintf(detail, sizeof detail, "%s", run.detail);
        }
    }
    if (resp->summarizer_used != CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM) {
        struct cg_summary_opts opts = {.target_tokens = target,
                                       .count = count_tokens,
                                       .count_arg = &counter,
                                       .focus = req->focus,
                                       .focus_len = strlen(req->focus),
                                       .language = language};
        if (cg_summary_extract(red, &opts, &sum, &err) != CG_OK) {
            st = cg_err_set(&call->err, err.code == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : err.code,
                            "summarizing: %s", err.msg);
            goto out;
        }
        resp->summarizer_used = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_EXTRACTIVE;
        resp->fallback_reason = (Ctxguard__V1__SummaryFallbackReason)reason;
        resp->fallback_detail = cg_arena_strdup(call->arena, detail);
        if (reason != REASON_REQUESTED)
            cg_log(CG_LOG_INFO, "summarize", call->request_id,
                   "extractive fallback reason=%d detail=\"%s\"", reason, detail);
    }

    resp->summary = cg_arena_strdup(call->arena, sum.text);
    resp->input_tokens = est.content_tokens;
    resp->summary_tokens = sum.tokens;
    resp->target_met = sum.target_met;
    resp->language = cg_arena_strdup(call->arena, sum.language);
    resp->messages_summarized = (int64_t)sum.messages;
    if (resp->summary == NULL || resp->language == NULL ||
        (resp->fallback_detail == NULL && resp->summarizer_used !=
                                              CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM) ||
        (resp->llm_model == NULL && resp->llm_attempts > 0)) {
        st = OOM(call);
        goto out;
    }
    if (resp->fallback_detail == NULL)
        resp->fallback_detail = (char *)protobuf_c_empty_string;
    if (resp->llm_model == NULL)
        resp->llm_model = (char *)protobuf_c_empty_string;
    st = fill_sections(call, &sum, &resp->sections);
    if (st == CG_OK)
        st = fill_redactions(call, &r.counts, resp);
    if (st == CG_OK)
        *response = &resp->base;

out:
    free(llm_text);
    cg_summary_cleanup(&sum);
    cg_redact_buf_cleanup(&r.buf);
    cg_conv_free(red);
    cg_conv_free(conv);
    return st;
}

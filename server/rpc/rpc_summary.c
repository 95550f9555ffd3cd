/* rpc_summary.c - redaction before summarizing, and the LLM or extractive summarizer with
 * its fallbacks (rpc_summary.h).
 *
 * The LLM: the transcript of the messages is cut into chunks that fit the model (half of its
 * context window from core/models.h, at about three bytes a token); one chunk is summarized
 * at once, more are summarized one by one and then their summaries together (again in
 * chunks if need be), so no input is too large. Every answer must parse into the six
 * sections; the final one must also have fewer tokens than the messages it replaces.
 */
#include "rpc/rpc_summary.h"
#include "rpc/rpc_handlers.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "core/compress.h"
#include "core/estimate.h"
#include "llm/llm.h"
#include "store/store.h"

#define FALLBACK_RESERVE_MS 300 /* of the deadline, kept for the extractive fallback */
#define TOOL_RESULT_BYTES 2000  /* of each tool result the LLM reads */
#define CHUNK_BYTES_MIN 8192
#define CHUNK_BYTES_MAX (256u << 10)
#define LLM_CALLS_MAX 40 /* per request, all levels of a hierarchical summary */
#define LEVELS_MAX 4

/* Exact with an encoding (specials counted as text), else the estimator's profile. */
struct counter {
    cg_profile profile;
    const struct cg_tok_encoding *enc;
};

static int64_t count_tokens(void *arg, const char *text, size_t len)
{
    const struct counter *c = arg;
    return c->enc ? cg_tok_count(c->enc, text, len, false)
                  : cg_estimate_text(c->profile, text, len);
}

/* The tokens of messages [from, to) of conv, framing included, counted as Compress counts
 * them (exact with counter->enc); -1 when out of memory. */
static int64_t range_tokens(const struct counter *counter, const struct cg_conv *conv, size_t from,
                            size_t to)
{
    struct cg_compress_count_state cs = {.enc = counter->enc, .profile = counter->profile};
    struct cg_compress_counter cc;
    cg_compress_counter_init(&cc, &cs, conv);
    int64_t sum = 0;
    for (size_t m = from; m < to; m++) {
        int64_t t = cc.count_message(cc.ctx, &conv->messages[m]);
        if (t < 0)
            return -1;
        sum += t;
    }
    return sum;
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
    char key[sizeof((struct pseudonym_entry *)0)->key];
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
    struct cg_redact_options options;
    struct cg_redact_session *session;
    struct cg_redact_buf buf;
    struct cg_redact_counts counts;
    struct pseudonym_entry *shared; /* the session's table, or NULL */
    struct cg_redact_session *own;  /* else one of the call's own */
};

cg_status cg_rpc_tenant_redaction(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                  unsigned *types, bool *artifacts)
{
    *types = CG_PII_ALL;
    *artifacts = false;
    if (call->principal.tenant_id[0] == '\0' || env->svc.store == NULL)
        return CG_OK;
    struct cg_tenant t;
    struct cg_err serr = {0};
    cg_status st = cg_store_tenant_get(env->svc.store, call->principal.tenant_id, &t, &serr);
    if (st != CG_OK) {
        cg_log(CG_LOG_WARN, "summarize", call->request_id,
               "tenant settings unreadable (%s): every PII type is redacted", serr.msg);
        return st;
    }
    if (t.settings.redact_types != 0)
        *types = t.settings.redact_types & CG_PII_ALL;
    *artifacts = t.settings.redact_artifacts;
    return CG_OK;
}

/* Takes the pseudonym table for the call (the session's when it can) and the options. */
static cg_status redactor_open(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                               const char *session_id, unsigned types, size_t max_bytes,
                               struct redactor *r)
{
    memset(r, 0, sizeof *r);
    cg_redact_options_init(&r->options);
    r->options.enabled = types != 0 ? types & CG_PII_ALL : CG_PII_ALL;
    if (session_id != NULL && session_id[0] != '\0' && env->svc.pseudonyms != NULL)
        r->shared = pseudonyms_acquire(env->svc.pseudonyms, call->principal.tenant_id, session_id);
    if (r->shared != NULL) {
        r->session = &r->shared->session;
    } else {
        if ((r->own = malloc(sizeof *r->own)) == NULL)
            return OOM(call);
        seed_session(r->own);
        r->session = r->own;
    }
    cg_redact_buf_init(&r->buf, max_bytes);
    return CG_OK;
}

/* Releases what redactor_open took; on success adds the counts to counts. */
static void redactor_close(const struct cg_rpc_env *env, struct redactor *r, bool ok,
                           struct cg_redact_counts *counts)
{
    if (r->shared != NULL)
        pseudonyms_release(env->svc.pseudonyms, r->shared);
    free(r->own);
    cg_redact_buf_cleanup(&r->buf);
    if (ok && counts != NULL) {
        for (int t = 0; t < CG_PII_TYPE_COUNT; t++)
            counts->by_type[t] += r->counts.by_type[t];
        counts->session_full = counts->session_full || r->counts.session_full;
    }
}

static cg_status redact_str(struct cg_rpc_call *call, struct redactor *r, struct cg_conv *dst,
                            const struct cg_str *in, struct cg_str *out)
{
    struct cg_err err = {0};
    cg_status st = cg_redact(&r->options, r->session, in->ptr, in->len, &r->buf, &r->counts, &err);
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
static cg_status redact_copy(struct cg_rpc_call *call, struct redactor *r,
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

cg_status cg_rpc_redact_conv(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const char *session_id, unsigned types, const struct cg_conv *conv,
                             struct cg_conv **out, struct cg_redact_counts *counts)
{
    *out = NULL;
    struct redactor r;
    cg_status st = redactor_open(call, env, session_id, types, conv->limits.max_bytes, &r);
    if (st == CG_OK)
        st = redact_copy(call, &r, conv, out);
    redactor_close(env, &r, st == CG_OK, counts);
    return st;
}

cg_status cg_rpc_redact_texts(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                              const char *session_id, unsigned types, const char *field, size_t n,
                              const char *const *in, const size_t *in_len, size_t max_bytes,
                              char **out, size_t *out_len, struct cg_redact_counts *counts)
{
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    struct redactor r;
    cg_status st = redactor_open(call, env, session_id, types, max_bytes, &r);
    for (size_t i = 0; i < n && st == CG_OK; i++) {
        struct cg_err err = {0};
        st = cg_redact(&r.options, r.session, in[i], in_len[i], &r.buf, &r.counts, &err);
        if (st != CG_OK) {
            cg_err_set(&call->err, st == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : st, "field '%s': %s",
                       field, err.msg);
            break;
        }
        if ((out[i] = malloc(r.buf.len + 1)) == NULL) {
            st = OOM(call);
            break;
        }
        if (r.buf.len > 0)
            memcpy(out[i], r.buf.data, r.buf.len);
        out[i][r.buf.len] = '\0';
        out_len[i] = r.buf.len;
    }
    if (st != CG_OK) {
        for (size_t i = 0; i < n; i++) {
            free(out[i]);
            out[i] = NULL;
        }
    }
    redactor_close(env, &r, st == CG_OK, counts);
    return st;
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
    char *prompt =
        cg_summary_prompt(run->language, target, run->focus, strlen(run->focus), partial);
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
        snprintf(run->detail, sizeof run->detail, "%s: %s", cg_llm_result_name(res), reply.detail);
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
static bool llm_summarize(struct llm_run *run, const struct cg_conv *conv, size_t from, size_t to,
                          size_t chunk_bytes, char **summary)
{
    char **chunks = NULL;
    size_t n = 0;
    struct cg_err err = {0};
    if (cg_summary_transcript(conv, from, to, chunk_bytes, TOOL_RESULT_BYTES, &chunks, &n, &err) !=
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

/* ------------------------------------------------------------------ summarize ------- */

cg_status cg_rpc_summarize(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                           const struct cg_conv *conv, const struct cg_rpc_summary_opts *opts,
                           struct cg_rpc_summary_result *out)
{
    memset(out, 0, sizeof *out);
    cg_summary_init(&out->summary);
    size_t to = opts->to == 0 ? conv->n_messages : opts->to;
    if (opts->from >= to || to > conv->n_messages)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'conversation': messages [%zu, %zu) of %zu to summarize",
                          opts->from, to, conv->n_messages);
    bool llm_ready = env->svc.llm != NULL && cg_llm_is_configured(env->svc.llm);
    if (opts->kind == CG_RPC_SUMMARIZER_LLM && !llm_ready)
        return cg_err_setr(&call->err, CG_FAILED_PRECONDITION, CG_ERR_LLM_NOT_CONFIGURED,
                           "field 'summarizer': LLM asked for but no LLM is configured "
                           "(llm_base_url)");

    /* What the summary replaces, in tokens: the messages of the range. */
    struct counter counter = {opts->profile, opts->enc};
    struct cg_err err = {0};
    if ((out->input_tokens = range_tokens(&counter, conv, opts->from, to)) < 0)
        return OOM(call);
    const char *language = opts->language != NULL && opts->language[0] != '\0'
                               ? cg_summary_language(opts->language)
                               : cg_summary_detect_language(conv, opts->from, to);
    const char *focus = opts->focus != NULL ? opts->focus : "";

    if (opts->kind == CG_RPC_SUMMARIZER_EXTRACTIVE) {
        out->reason = CG_RPC_FALLBACK_REQUESTED;
        snprintf(out->detail, sizeof out->detail, "the extractive summarizer was asked for");
    } else if (!llm_ready) {
        out->reason = CG_LLM_NOT_CONFIGURED;
        snprintf(out->detail, sizeof out->detail, "no LLM is configured (llm_base_url)");
    } else {
        struct llm_run run = {.call = call,
                              .llm = env->svc.llm,
                              .language = language,
                              .focus = focus,
                              .target = opts->target_tokens,
                              .counter = &counter};
        if (call->deadline_ms > 0)
            run.deadline_ms = call->deadline_ms - FALLBACK_RESERVE_MS;
        char *text = NULL;
        bool ok = llm_summarize(&run, conv, opts->from, to,
                                chunk_bytes_for(env->svc.config->llm_model), &text);
        out->llm_attempts = run.attempts;
        out->chunks = run.chunks;
        if (ok) {
            int64_t tokens = count_tokens(&counter, text, strlen(text));
            if (tokens >= out->input_tokens) {
                ok = false;
                run.reason = CG_RPC_FALLBACK_NOT_SMALLER;
                snprintf(run.detail, sizeof run.detail,
                         "the LLM's summary (%lld tokens) is not smaller than the input (%lld)",
                         (long long)tokens, (long long)out->input_tokens);
            }
        }
        if (ok) {
            struct cg_summary *s = &out->summary;
            unsigned found = 0;
            snprintf(s->language, sizeof s->language, "%s", language);
            if (cg_summary_parse(text, strlen(text), language, s, &found, &err) != CG_OK) {
                free(text);
                return OOM(call);
            }
            s->text = text;
            s->text_len = strlen(text);
            s->tokens = count_tokens(&counter, s->text, s->text_len);
            s->target_met = s->tokens <= opts->target_tokens;
            s->messages = to - opts->from;
            out->used = CG_RPC_SUMMARIZER_LLM;
            return CG_OK;
        }
        free(text);
        if (opts->kind == CG_RPC_SUMMARIZER_LLM)
            return cg_err_setr(&call->err, CG_UNAVAILABLE, CG_ERR_LLM_UNAVAILABLE,
                               "the LLM summarizer failed: %s", run.detail);
        out->reason = run.reason;
        snprintf(out->detail, sizeof out->detail, "%s", run.detail);
    }

    struct cg_summary_opts sopts = {.target_tokens = opts->target_tokens,
                                    .count = count_tokens,
                                    .count_arg = &counter,
                                    .focus = focus,
                                    .focus_len = strlen(focus),
                                    .language = language,
                                    .from = opts->from,
                                    .to = to};
    if (cg_summary_extract(conv, &sopts, &out->summary, &err) != CG_OK)
        return cg_err_set(&call->err, err.code == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : err.code,
                          "summarizing: %s", err.msg);
    out->used = CG_RPC_SUMMARIZER_EXTRACTIVE;
    if (out->reason != CG_RPC_FALLBACK_REQUESTED)
        cg_log(CG_LOG_INFO, "summarize", call->request_id,
               "extractive fallback reason=%d detail=\"%s\"", out->reason, out->detail);
    return CG_OK;
}

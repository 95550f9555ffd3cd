/* compress.c - the cascade (see compress.h): a working list of message references into one
 * append-only store conversation, layers that each work on a copy of the list (so a failing
 * layer is simply dropped), and the report.
 */
#include "core/compress.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/compress_internal.h"
#include "core/conv_json.h"
#include "core/tok.h"
#include "core/utf8.h"
#include "core/validate.h"

/* One message of the working list: a message of the store conversation, the input message it
 * derives from (-1: inserted), its tokens and the last layer that changed it (0: none). */
struct entry {
    size_t msg;
    int64_t source;
    int64_t tokens;
    int layer;
    int64_t artifact;
};

struct list {
    struct entry *e;
    size_t n, cap;
    int64_t total; /* message tokens; the count is fixed + total */
};

struct run {
    const struct cg_compress_input *in;
    const struct cg_compress_policy *p;
    struct cg_compress_result *out;
    struct cg_err *err;
    struct cg_conv *store;
    int64_t fixed;
    int *dropped_by; /* per input message: the layer that dropped it */
    int64_t *input_tokens;
    /* The caller's counter; the built-in one with a count memo for this run (tok.h). */
    struct cg_compress_counter counter;
    struct cg_compress_count_state memo_state;
    int64_t started_ms;
    bool timed_out;
    size_t summary_at; /* list index of the message carrying this call's summary */
};

/* ------------------------------------------------------------------ basics ------------ */

static cg_status nomem(struct cg_err *err)
{
    if (err != NULL) {
        err->code = CG_RESOURCE_EXHAUSTED;
        snprintf(err->msg, sizeof err->msg, "conversation: out of memory while compressing");
    }
    return CG_RESOURCE_EXHAUSTED;
}

static void add_warningv(struct cg_compress_result *o, cg_compress_warning_code code, int64_t index,
                         const char *fmt, va_list ap)
{
    if (o->n_warnings == CG_COMPRESS_WARNINGS_MAX) {
        o->warnings_dropped++;
        return;
    }
    struct cg_compress_warning *w = &o->warnings[o->n_warnings++];
    w->code = code;
    w->message_index = index;
    vsnprintf(w->message, sizeof w->message, fmt, ap);
}

void cg_compress_add_warning(struct cg_compress_result *out, cg_compress_warning_code code,
                             int64_t message_index, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_warningv(out, code, message_index, fmt, ap);
    va_end(ap);
}

static void warn(struct run *r, cg_compress_warning_code code, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void warn(struct run *r, cg_compress_warning_code code, int64_t index, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    add_warningv(r->out, code, index, fmt, ap);
    va_end(ap);
}

static struct cg_message *msg_of(struct run *r, const struct entry *e)
{
    return &r->store->messages[e->msg];
}

static int64_t now(struct run *r)
{
    return r->in->clock != NULL ? r->in->clock(r->in->clock_ctx) : 0;
}

static bool list_push(struct list *l, struct entry e)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        struct entry *n = realloc(l->e, cap * sizeof *n);
        if (n == NULL)
            return false;
        l->e = n;
        l->cap = cap;
    }
    l->e[l->n++] = e;
    return true;
}

static bool list_copy(struct list *dst, const struct list *src)
{
    dst->e = malloc((src->n ? src->n : 1) * sizeof *dst->e);
    if (dst->e == NULL)
        return false;
    if (src->n > 0)
        memcpy(dst->e, src->e, src->n * sizeof *dst->e);
    dst->n = dst->cap = src->n;
    dst->total = src->total;
    return true;
}

static void list_take(struct list *dst, struct list *src)
{
    free(dst->e);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

static cg_status count(struct run *r, struct entry *e)
{
    int64_t t = r->counter.count_message(r->counter.ctx, msg_of(r, e));
    if (t < 0)
        return nomem(r->err);
    e->tokens = t;
    return CG_OK;
}

static void recount_total(struct list *l)
{
    l->total = 0;
    for (size_t i = 0; i < l->n; i++)
        l->total += l->e[i].tokens;
}

/* A new store message that starts as a shallow copy of e's (parts share strings, which the
 * store or the borrowed input owns); e then refers to it. Returns it (valid until the next
 * message is added) or NULL (err filled). */
static struct cg_message *derive(struct run *r, struct entry *e, bool with_parts)
{
    const struct cg_message src = *msg_of(r, e);
    struct cg_message *m;
    if (cg_conv_add_message(r->store, src.role, &m, r->err) != CG_OK)
        return NULL;
    m->name = src.name;
    m->pinned = src.pinned;
    m->lost_reasoning = src.lost_reasoning;
    m->form = src.form;
    m->extra = src.extra;
    for (size_t i = 0; with_parts && i < src.n_parts; i++) {
        struct cg_part *p;
        if (cg_conv_add_part(r->store, m, src.parts[i].kind, &p, r->err) != CG_OK)
            return NULL;
        *p = src.parts[i];
    }
    e->msg = r->store->n_messages - 1;
    return m;
}

static cg_status set_str(struct run *r, const char *s, size_t len, struct cg_str *out)
{
    return cg_conv_str(r->store, s, len, out, r->err);
}

/* Replaces part k's tool-call arguments (tool_call) or tool-result content of e's message
 * with text (len bytes; freed here). The message is derived first unless *derived says it was
 * already (it is then). */
static cg_status replace_part_text(struct run *r, struct entry *e, bool *derived, size_t k,
                                   bool tool_call, char *text, size_t len)
{
    struct cg_message *dm = *derived ? msg_of(r, e) : derive(r, e, true);
    cg_status st = CG_RESOURCE_EXHAUSTED;
    if (dm != NULL) {
        struct cg_part *pt = &dm->parts[k];
        st = set_str(r, text, len,
                     tool_call ? &pt->u.tool_call.arguments : &pt->u.tool_result.content);
        *derived = true;
    }
    free(text);
    return st;
}

/* e was changed by layer: marks it, counts it again and one more message affected. */
static cg_status changed_by(struct run *r, struct entry *e, int layer, uint32_t *affected)
{
    e->layer = layer;
    (*affected)++;
    return count(r, e);
}

static bool has_kind(const struct cg_message *m, cg_part_kind kind)
{
    for (size_t i = 0; i < m->n_parts; i++)
        if (m->parts[i].kind == kind)
            return true;
    return false;
}

/* A user message that starts a turn (not one carrying tool results). */
static bool turn_start(const struct cg_message *m)
{
    return m->role == CG_ROLE_USER && !has_kind(m, CG_PART_TOOL_RESULT);
}

/* Whether the caller pinned the entry's message: no layer changes, drops, offloads or
 * summarizes it (Message.pinned). */
static bool pinned(struct run *r, const struct entry *e)
{
    return msg_of(r, e)->pinned;
}

/* Where an entry's original is, as the output's pointers say it: "history 12" (a session's
 * history position) or "input 12" in buf; NULL for a message the cascade inserted. */
static const char *where_of(const struct run *r, const struct entry *e, char buf[32])
{
    if (e->source < 0) {
        buf[0] = '\0';
        return NULL;
    }
    snprintf(buf, 32, "%s %lld", r->in->history_positions ? "history" : "input",
             (long long)e->source);
    return buf;
}

/* The end of the turn that starts at or before i: the next turn start after i (or l->n). */
static size_t turn_end(struct run *r, const struct list *l, size_t i)
{
    size_t e = i + 1;
    while (e < l->n && !turn_start(msg_of(r, &l->e[e])))
        e++;
    return e;
}

/* Whether a message in [from, to) is pinned. */
static bool any_pinned(struct run *r, const struct list *l, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (pinned(r, &l->e[i]))
            return true;
    return false;
}

static bool disabled(const struct run *r, cg_compress_layer layer)
{
    return (r->p->disabled_layers & (1u << layer)) != 0;
}

static struct cg_compress_layer_result *layer_begin(struct run *r, cg_compress_layer layer,
                                                    const struct list *l, uint32_t pass)
{
    struct cg_compress_result *o = r->out;
    if (o->n_layers == CG_COMPRESS_LAYERS_MAX)
        o->n_layers--; /* cannot happen with <= 10 passes; keeps the array in bounds */
    struct cg_compress_layer_result *lr = &o->layers[o->n_layers++];
    memset(lr, 0, sizeof *lr);
    lr->layer = layer;
    lr->escalation_pass = pass;
    lr->tokens_before = lr->tokens_after = r->fixed + l->total;
    lr->duration_ms = now(r);
    return lr;
}

static void layer_end(struct run *r, struct cg_compress_layer_result *lr, const struct list *l,
                      cg_compress_outcome outcome, uint32_t affected)
{
    lr->outcome = outcome;
    lr->messages_affected = affected;
    lr->tokens_after = outcome == CG_OUTCOME_APPLIED ? r->fixed + l->total : lr->tokens_before;
    lr->duration_ms = now(r) - lr->duration_ms;
    if (outcome == CG_OUTCOME_NO_EFFECT && lr->detail[0] == '\0')
        snprintf(lr->detail, sizeof lr->detail, "nothing to reduce");
}

/* Ends a layer that failed: its list copy is dropped by the caller; the report says why. */
static void layer_failed(struct run *r, struct cg_compress_layer_result *lr, const struct list *l,
                         const char *why)
{
    snprintf(lr->detail, sizeof lr->detail, "%s", why);
    layer_end(r, lr, l, CG_OUTCOME_FAILED, 0);
    warn(r, CG_CWARN_LAYER_FAILED, -1, "%s failed: %s", cg_compress_layer_name(lr->layer), why);
}

/* ------------------------------------------------------------------ normalize --------- */

/* Removes parts[i] from a store message made by derive (its own part array). */
static void remove_part(struct cg_message *m, size_t i)
{
    memmove(&m->parts[i], &m->parts[i + 1], (m->n_parts - i - 1) * sizeof m->parts[0]);
    m->n_parts--;
}

static bool id_eq(const struct cg_str *a, const struct cg_str *b)
{
    return a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0;
}

/* A small open-addressing set of tool call ids -> value. */
struct idmap {
    const struct cg_str **keys;
    int64_t *vals;
    size_t cap;
};

static uint64_t hash(const struct cg_str *s)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < s->len; i++)
        h = (h ^ (unsigned char)s->ptr[i]) * 1099511628211ull;
    return h;
}

static bool idmap_init(struct idmap *m, size_t n)
{
    m->cap = 16;
    while (m->cap < n * 2 + 16)
        m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m->keys != NULL && m->vals != NULL;
}

static void idmap_free(struct idmap *m)
{
    free(m->keys);
    free(m->vals);
}

/* The slot of key (found or empty). */
static size_t idmap_slot(const struct idmap *m, const struct cg_str *key)
{
    size_t i = hash(key) & (m->cap - 1);
    while (m->keys[i] != NULL && !id_eq(m->keys[i], key))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int64_t *idmap_get(struct idmap *m, const struct cg_str *key)
{
    size_t i = idmap_slot(m, key);
    return m->keys[i] != NULL ? &m->vals[i] : NULL;
}

static void idmap_put(struct idmap *m, const struct cg_str *key, int64_t val)
{
    size_t i = idmap_slot(m, key);
    m->keys[i] = key;
    m->vals[i] = val;
}

static const char *const no_result_text = "[ctxguard: no result was recorded for this call]";

/* Tool pairing repair: orphan and superseded results dropped, dangling calls answered. */
/* Indexes the tool calls and results of l: calls maps a call id to the entry index of its
 * (first) call, last maps it to the global part position of its last result after that call.
 * keys (one slot per part) holds the ids the maps point at. */
static void index_pairs(struct run *r, const struct list *l, struct cg_str *keys,
                        struct idmap *calls, struct idmap *last)
{
    size_t nk = 0;
    int64_t pos = 0;
    for (size_t i = 0; i < l->n; i++) {
        const struct cg_message *m = msg_of(r, &l->e[i]);
        for (size_t k = 0; k < m->n_parts; k++, pos++) {
            const struct cg_part *p = &m->parts[k];
            if (p->kind == CG_PART_TOOL_CALL && m->role == CG_ROLE_ASSISTANT) {
                keys[nk] = p->u.tool_call.id;
                if (idmap_get(calls, &keys[nk]) == NULL)
                    idmap_put(calls, &keys[nk], (int64_t)i);
                nk++;
            } else if (p->kind == CG_PART_TOOL_RESULT) {
                keys[nk] = p->u.tool_result.tool_call_id;
                int64_t *c = idmap_get(calls, &keys[nk]);
                if (c != NULL && *c < (int64_t)i)
                    idmap_put(last, &keys[nk], pos);
                nk++;
            }
        }
    }
}

/* Whether the message of e (its parts from global position base) has a tool result that is
 * not the last result of a call before it. */
static bool has_unpaired_result(struct run *r, const struct entry *e, struct idmap *last,
                                int64_t base)
{
    const struct cg_message *m = msg_of(r, e);
    bool drop_some = false;
    for (size_t k = 0; k < m->n_parts; k++) {
        const struct cg_part *p = &m->parts[k];
        if (p->kind == CG_PART_TOOL_RESULT) {
            int64_t *lp = idmap_get(last, &p->u.tool_result.tool_call_id);
            if (lp == NULL || *lp != base + (int64_t)k)
                drop_some = true;
        }
    }
    return drop_some;
}

/* e's message (dm, derived) was changed by NORMALIZE: counted again, or, with nothing left,
 * marked dropped by NORMALIZE (*gone). */
static cg_status normalized(struct run *r, struct entry *e, const struct cg_message *dm,
                            uint32_t *affected, bool *gone)
{
    e->layer = CG_LAYER_NORMALIZE;
    (*affected)++;
    if (dm->n_parts == 0) {
        if (e->source >= 0)
            r->dropped_by[e->source] = CG_LAYER_NORMALIZE;
        *gone = true;
        return CG_OK;
    }
    return count(r, e);
}

/* Drops, from a derived copy of e's message, its orphan and superseded tool results;
 * *gone when nothing of the message is left (then it is marked dropped by NORMALIZE). */
static cg_status drop_unpaired_results(struct run *r, struct entry *e, struct idmap *last,
                                       int64_t base, uint32_t *affected, bool *gone)
{
    *gone = false;
    struct cg_message *dm = derive(r, e, true);
    if (dm == NULL)
        return CG_RESOURCE_EXHAUSTED;
    for (size_t k = dm->n_parts, orig = dm->n_parts; k-- > 0;) {
        (void)orig;
        const struct cg_part *p = &dm->parts[k];
        if (p->kind != CG_PART_TOOL_RESULT)
            continue;
        int64_t *lp = idmap_get(last, &p->u.tool_result.tool_call_id);
        if (lp == NULL || *lp != base + (int64_t)k) {
            warn(r, CG_CWARN_INPUT_REPAIRED, e->source, "%s tool result for \"%.*s\" dropped",
                 lp == NULL ? "orphan" : "superseded",
                 (int)(p->u.tool_result.tool_call_id.len > 64 ? 64
                                                              : p->u.tool_result.tool_call_id.len),
                 p->u.tool_result.tool_call_id.ptr);
            remove_part(dm, k);
        }
    }
    return normalized(r, e, dm, affected, gone);
}

/* Dangling calls of the assistant message nl->e[at] (source: its input index): an error
 * result pushed right after it (after the results that do follow it, so that a group stays
 * together). */
static cg_status add_missing_results(struct run *r, struct list *nl, size_t at, int64_t source,
                                     struct idmap *last, uint32_t *affected)
{
    const struct cg_message *am = msg_of(r, &nl->e[at]);
    if (am->role != CG_ROLE_ASSISTANT || !has_kind(am, CG_PART_TOOL_CALL))
        return CG_OK;
    /* The error results are pushed after it: keep its own index (the store may move). */
    size_t n_parts = am->n_parts;
    for (size_t k = 0; k < n_parts; k++) {
        am = msg_of(r, &nl->e[at]);
        if (am->parts[k].kind != CG_PART_TOOL_CALL)
            continue;
        struct cg_str id = am->parts[k].u.tool_call.id, name = am->parts[k].u.tool_call.name;
        if (idmap_get(last, &id) != NULL)
            continue;
        struct cg_message *tm;
        struct cg_part *tp;
        cg_status st;
        if ((st = cg_conv_add_message(r->store, CG_ROLE_TOOL, &tm, r->err)) != CG_OK ||
            (st = cg_conv_add_part(r->store, tm, CG_PART_TOOL_RESULT, &tp, r->err)) != CG_OK)
            return st;
        tp->u.tool_result.tool_call_id = id;
        tp->u.tool_result.tool_name = name;
        tp->u.tool_result.is_error = true;
        if ((st = set_str(r, no_result_text, strlen(no_result_text), &tp->u.tool_result.content)) !=
            CG_OK)
            return st;
        struct entry te = {r->store->n_messages - 1, -1, 0, CG_LAYER_NORMALIZE, -1};
        if ((st = count(r, &te)) != CG_OK)
            return st;
        warn(r, CG_CWARN_INPUT_REPAIRED, source,
             "tool call \"%.*s\" had no result; an error result was added",
             (int)(id.len > 64 ? 64 : id.len), id.ptr);
        (*affected)++;
        if (!list_push(nl, te))
            return nomem(r->err);
    }
    return CG_OK;
}

static cg_status repair_pairs(struct run *r, struct list *l, uint32_t *affected)
{
    size_t n_calls = 0;
    for (size_t i = 0; i < l->n; i++)
        n_calls += msg_of(r, &l->e[i])->n_parts;
    /* calls: id -> entry index of its call; last: id -> global position of its last result;
     * the struct cg_str keys point into messages, which are never moved below (derive adds
     * new ones and only the array of the store may move: keys are copied first). */
    struct cg_str *keys = malloc((n_calls + 1) * sizeof *keys);
    struct idmap calls = {0}, last = {0};
    cg_status st = CG_OK;
    if (keys == NULL || !idmap_init(&calls, n_calls) || !idmap_init(&last, n_calls)) {
        st = nomem(r->err);
        goto out;
    }
    index_pairs(r, l, keys, &calls, &last);
    struct list nl = {0};
    int64_t pos = 0;
    for (size_t i = 0; i < l->n; i++) {
        struct entry e = l->e[i];
        bool drop_some = has_unpaired_result(r, &e, &last, pos);
        int64_t base = pos;
        pos += (int64_t)msg_of(r, &e)->n_parts;
        if (drop_some) {
            bool gone = false;
            if ((st = drop_unpaired_results(r, &e, &last, base, affected, &gone)) != CG_OK)
                goto out_list;
            if (gone)
                continue;
        }
        if (!list_push(&nl, e)) {
            st = nomem(r->err);
            goto out_list;
        }
        if ((st = add_missing_results(r, &nl, nl.n - 1, e.source, &last, affected)) != CG_OK)
            goto out_list;
    }
    recount_total(&nl);
    list_take(l, &nl);
out_list:
    free(nl.e);
out:
    free(keys);
    idmap_free(&calls);
    idmap_free(&last);
    return st;
}

/* Dangling-call results were appended right after their assistant message; results that
 * follow in the input then come after them, which every dialect accepts (results of one
 * assistant message may come in any order). */

static bool has_checkpoint(const struct cg_str *s)
{
    static const char tag[] = "<checkpoint_id>";
    const char *p = s->ptr, *end = s->ptr + s->len;
    while ((size_t)(end - p) >= sizeof tag - 1 && (p = memchr(p, '<', (size_t)(end - p))) != NULL) {
        if ((size_t)(end - p) >= sizeof tag - 1 && memcmp(p, tag, sizeof tag - 1) == 0)
            return true;
        p++;
    }
    return false;
}

/* Whether the message of e has reasoning to drop or checkpoint tags to strip. */
static bool needs_cleanup(struct run *r, const struct entry *e, bool drop_reasoning)
{
    const struct cg_message *m = msg_of(r, e);
    bool touch = false;
    for (size_t k = 0; k < m->n_parts && !touch; k++) {
        const struct cg_part *p = &m->parts[k];
        if (p->kind == CG_PART_REASONING && drop_reasoning)
            touch = true;
        else if (m->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_TEXT &&
                 has_checkpoint(&p->u.text))
            touch = true;
        else if (p->kind == CG_PART_TOOL_RESULT && has_checkpoint(&p->u.tool_result.content))
            touch = true;
    }
    return touch;
}

/* On a derived copy of e's message: drops reasoning (when drop_reasoning) and strips the
 * checkpoint tags of assistant text and tool results; *gone when nothing is left (then it is
 * marked dropped by NORMALIZE). */
static cg_status clean_message(struct run *r, struct entry *e, bool drop_reasoning,
                               uint32_t *affected, bool *gone)
{
    *gone = false;
    struct cg_message *dm = derive(r, e, true);
    if (dm == NULL)
        return CG_RESOURCE_EXHAUSTED;
    for (size_t k = dm->n_parts; k-- > 0;) {
        struct cg_part *p = &dm->parts[k];
        struct cg_str *s = NULL;
        if (p->kind == CG_PART_REASONING && drop_reasoning) {
            remove_part(dm, k);
            dm->lost_reasoning = true;
            continue;
        }
        if (dm->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_TEXT)
            s = &p->u.text;
        else if (p->kind == CG_PART_TOOL_RESULT)
            s = &p->u.tool_result.content;
        char *txt;
        size_t len;
        if (s != NULL && cg__compress_strip_checkpoints(s->ptr, s->len, &txt, &len)) {
            cg_status st = set_str(r, txt, len, s);
            free(txt);
            if (st != CG_OK)
                return st;
        }
    }
    return normalized(r, e, dm, affected, gone);
}

/* Merges e's message into the last one of nl when both are user or both assistant;
 * *merged says whether it did (e is then dropped by NORMALIZE). */
static cg_status merge_into_previous(struct run *r, struct list *nl, const struct entry *e,
                                     uint32_t *affected, bool *merged)
{
    *merged = false;
    if (nl->n == 0)
        return CG_OK;
    struct entry *prev = &nl->e[nl->n - 1];
    const struct cg_message *pm = msg_of(r, prev);
    const struct cg_message *m = msg_of(r, e);
    if (pm->role != m->role || (m->role != CG_ROLE_USER && m->role != CG_ROLE_ASSISTANT))
        return CG_OK;
    const struct cg_message add = *m;
    struct cg_message *dm = derive(r, prev, true);
    if (dm == NULL)
        return CG_RESOURCE_EXHAUSTED;
    cg_status st;
    for (size_t k = 0; k < add.n_parts; k++) {
        struct cg_part *p;
        if ((st = cg_conv_add_part(r->store, dm, add.parts[k].kind, &p, r->err)))
            return st;
        *p = add.parts[k];
    }
    dm->form = CG_FORM_DEFAULT;
    dm->pinned = dm->pinned || add.pinned;
    prev->layer = CG_LAYER_NORMALIZE;
    if (e->source >= 0)
        r->dropped_by[e->source] = CG_LAYER_NORMALIZE;
    warn(r, CG_CWARN_INPUT_REPAIRED, e->source, "consecutive %s messages merged",
         cg_conv_role_name(add.role));
    (*affected)++;
    *merged = true;
    return count(r, prev);
}

/* Dialects that need a user turn first get one, written by ctxguard, not the user. */
static cg_status user_turn_first(struct run *r, struct list *l, uint32_t *affected)
{
    cg_dialect d = r->in->dialect;
    if (d != CG_DIALECT_ANTHROPIC && d != CG_DIALECT_GOOGLE)
        return CG_OK;
    size_t i = 0;
    while (i < l->n && cg_conv_role_is_system(msg_of(r, &l->e[i])->role))
        i++;
    if (i >= l->n || msg_of(r, &l->e[i])->role == CG_ROLE_USER)
        return CG_OK;
    struct cg_message *um;
    struct cg_part *tp;
    cg_status st;
    if ((st = cg_conv_add_message(r->store, CG_ROLE_USER, &um, r->err)) != CG_OK ||
        (st = cg_conv_add_part(r->store, um, CG_PART_TEXT, &tp, r->err)) != CG_OK ||
        (st = set_str(r, "[conversation start]", 20, &tp->u.text)) != CG_OK)
        return st;
    struct entry ue = {r->store->n_messages - 1, -1, 0, CG_LAYER_NORMALIZE, -1};
    if ((st = count(r, &ue)) != CG_OK || !list_push(l, ue))
        return st != CG_OK ? st : nomem(r->err);
    memmove(&l->e[i + 1], &l->e[i], (l->n - 1 - i) * sizeof l->e[0]);
    l->e[i] = ue;
    l->total += ue.tokens;
    warn(r, CG_CWARN_INPUT_REPAIRED, -1,
         "a user message was put first (the provider needs a user turn first)");
    (*affected)++;
    return CG_OK;
}

static cg_status normalize(struct run *r, struct list *l)
{
    struct cg_compress_layer_result *lr = layer_begin(r, CG_LAYER_NORMALIZE, l, 0);
    uint32_t affected = 0;
    cg_status st = repair_pairs(r, l, &affected);
    if (st != CG_OK)
        return st;
    bool drop_reasoning = r->in->model == NULL || !r->in->model->takes_reasoning;
    struct list nl = {0};
    for (size_t i = 0; i < l->n; i++) {
        struct entry e = l->e[i];
        bool gone = false, merged = false;
        if (needs_cleanup(r, &e, drop_reasoning) &&
            (st = clean_message(r, &e, drop_reasoning, &affected, &gone)) != CG_OK) {
            free(nl.e);
            return st;
        }
        if (gone)
            continue;
        if ((st = merge_into_previous(r, &nl, &e, &affected, &merged)) != CG_OK) {
            free(nl.e);
            return st;
        }
        if (merged)
            continue;
        if (!list_push(&nl, e)) {
            free(nl.e);
            return nomem(r->err);
        }
    }
    recount_total(&nl);
    list_take(l, &nl);
    if ((st = user_turn_first(r, l, &affected)) != CG_OK)
        return st;
    layer_end(r, lr, l, affected ? CG_OUTCOME_APPLIED : CG_OUTCOME_NO_EFFECT, affected);
    lr->tokens_before = r->out->tokens_before;
    return CG_OK;
}

/* ------------------------------------------------------------------ L0-L2 ------------- */

static const char *tool_name_of(struct run *r, const struct list *l, size_t upto,
                                const struct cg_str *id, size_t *len)
{
    for (size_t i = upto + 1; i-- > 0;) {
        const struct cg_message *m = msg_of(r, &l->e[i]);
        if (m->role != CG_ROLE_ASSISTANT)
            continue;
        for (size_t k = 0; k < m->n_parts; k++)
            if (m->parts[k].kind == CG_PART_TOOL_CALL && id_eq(&m->parts[k].u.tool_call.id, id)) {
                *len = m->parts[k].u.tool_call.name.len;
                return m->parts[k].u.tool_call.name.ptr;
            }
    }
    *len = 0;
    return "";
}

static cg_status offload(struct run *r, struct list *l, uint32_t *affected)
{
    const struct cg_compress_policy *p = r->p;
    for (size_t i = 0; i < l->n; i++) {
        if (pinned(r, &l->e[i]))
            continue;
        const struct cg_message *m = msg_of(r, &l->e[i]);
        for (size_t k = 0; k < msg_of(r, &l->e[i])->n_parts; k++) {
            m = msg_of(r, &l->e[i]);
            if (m->parts[k].kind != CG_PART_TOOL_RESULT)
                continue;
            const struct cg_tool_result *tr = &m->parts[k].u.tool_result;
            int64_t chars = (int64_t)cg_utf8_length(tr->content.ptr, tr->content.len);
            int64_t tokens = -1;
            if (chars <= p->offload_threshold_chars) {
                struct cg_message one = {.role = CG_ROLE_TOOL, .parts = &m->parts[k], .n_parts = 1};
                tokens = r->counter.count_message(r->counter.ctx, &one);
                if (tokens <= p->offload_threshold_tokens)
                    continue;
            }
            struct cg_compress_result *o = r->out;
            struct cg_compress_artifact *arts =
                realloc(o->artifacts, (o->n_artifacts + 1) * sizeof *arts);
            if (arts == NULL)
                return nomem(r->err);
            o->artifacts = arts;
            struct cg_compress_artifact *a = &arts[o->n_artifacts];
            memset(a, 0, sizeof *a);
            a->content = malloc(tr->content.len + 1);
            if (a->content == NULL)
                return nomem(r->err);
            memcpy(a->content, tr->content.ptr, tr->content.len);
            a->content[tr->content.len] = '\0';
            a->content_len = tr->content.len;
            a->source_index = l->e[i].source;
            a->part_index = k;
            a->is_json = cg_conv_json_is_valid(tr->content.ptr, tr->content.len, false);
            snprintf(a->tool_call_id, sizeof a->tool_call_id, "%.*s", (int)tr->tool_call_id.len,
                     tr->tool_call_id.ptr);
            size_t nlen;
            const char *name = tool_name_of(r, l, i, &tr->tool_call_id, &nlen);
            snprintf(a->tool_name, sizeof a->tool_name, "%.*s", (int)nlen, name);
            struct cg_message one = {.role = CG_ROLE_TOOL, .parts = &m->parts[k], .n_parts = 1};
            a->tokens = tokens >= 0 ? tokens : r->counter.count_message(r->counter.ctx, &one);
            size_t keep = cg__compress_utf8_cut(tr->content.ptr, tr->content.len,
                                                (size_t)p->offload_preview_bytes);
            a->preview_bytes = keep;
            char marker[240];
            int ml;
            if (r->in->name_artifact != NULL) {
                r->in->name_artifact(r->in->name_ctx, o->n_artifacts, a->id);
                a->id[sizeof a->id - 1] = '\0';
                ml = snprintf(marker, sizeof marker,
                              "\n[ctxguard: offloaded, %zu of %zu bytes shown; the whole result "
                              "is artifact %s (GetArtifact)]",
                              keep, tr->content.len, a->id);
            } else {
                ml = snprintf(marker, sizeof marker,
                              "\n[ctxguard: offloaded, %zu of %zu bytes shown; the whole result "
                              "is artifact %zu of this call]",
                              keep, tr->content.len, o->n_artifacts);
            }
            char *text = malloc(keep + (size_t)ml + 1);
            if (text == NULL)
                return nomem(r->err);
            memcpy(text, tr->content.ptr, keep);
            memcpy(text + keep, marker, (size_t)ml + 1);
            o->n_artifacts++;
            bool derived = false;
            cg_status st =
                replace_part_text(r, &l->e[i], &derived, k, false, text, keep + (size_t)ml);
            if (st != CG_OK)
                return st;
            l->e[i].artifact = (int64_t)o->n_artifacts - 1;
            if ((st = changed_by(r, &l->e[i], CG_LAYER_OFFLOAD, affected)) != CG_OK)
                return st;
        }
    }
    recount_total(l);
    return CG_OK;
}

static cg_status tool_results(struct run *r, struct list *l, uint32_t *affected)
{
    const struct cg_compress_policy *p = r->p;
    for (size_t i = 0; i < l->n; i++) {
        if (pinned(r, &l->e[i]))
            continue;
        const struct cg_message *m = msg_of(r, &l->e[i]);
        bool changed = false;
        for (size_t k = 0; k < msg_of(r, &l->e[i])->n_parts; k++) {
            m = msg_of(r, &l->e[i]);
            if (m->parts[k].kind != CG_PART_TOOL_RESULT)
                continue;
            const struct cg_str *c = &m->parts[k].u.tool_result.content;
            if ((int64_t)c->len <= p->tool_result_threshold_chars ||
                (int64_t)cg_utf8_length(c->ptr, c->len) <= p->tool_result_threshold_chars)
                continue;
            char *text, where[32];
            size_t len;
            if (!cg_compress_tool_text(c->ptr, c->len, (size_t)p->tool_result_target_chars,
                                       where_of(r, &l->e[i], where), &text, &len))
                continue;
            cg_status st = replace_part_text(r, &l->e[i], &changed, k, false, text, len);
            if (st != CG_OK)
                return st;
        }
        if (changed) {
            cg_status st = changed_by(r, &l->e[i], CG_LAYER_TOOL_RESULT, affected);
            if (st != CG_OK)
                return st;
        }
    }
    recount_total(l);
    return CG_OK;
}

static bool is_write_tool(const struct cg_compress_policy *p, const struct cg_str *name)
{
    for (size_t i = 0; i < p->n_write_tool_names; i++)
        if (strlen(p->write_tool_names[i]) == name->len &&
            memcmp(p->write_tool_names[i], name->ptr, name->len) == 0)
            return true;
    return false;
}

static cg_status write_compaction(struct run *r, struct list *l, uint32_t *affected)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct cg_message *m = msg_of(r, &l->e[i]);
        if (m->role != CG_ROLE_ASSISTANT || m->pinned)
            continue;
        bool changed = false;
        for (size_t k = 0; k < msg_of(r, &l->e[i])->n_parts; k++) {
            m = msg_of(r, &l->e[i]);
            const struct cg_part *pt = &m->parts[k];
            if (pt->kind != CG_PART_TOOL_CALL || !is_write_tool(r->p, &pt->u.tool_call.name))
                continue;
            char *text;
            size_t len;
            if (!cg__compress_write_args(pt->u.tool_call.arguments.ptr,
                                         pt->u.tool_call.arguments.len, &text, &len))
                continue;
            cg_status st = replace_part_text(r, &l->e[i], &changed, k, true, text, len);
            if (st != CG_OK)
                return st;
        }
        if (changed) {
            cg_status st = changed_by(r, &l->e[i], CG_LAYER_WRITE_COMPACTION, affected);
            if (st != CG_OK)
                return st;
        }
    }
    recount_total(l);
    return CG_OK;
}

/* ------------------------------------------------------------------ L3 ---------------- */

/* Whether s is a trim marker ("[trimmed]", "[trimmed: history 12]"). */
static bool is_trimmed(const struct cg_str *s)
{
    return s->len >= 9 && memcmp(s->ptr, "[trimmed", 8) == 0 && s->ptr[s->len - 1] == ']';
}

/* Whether the message holds anything trimming would change. */
static bool trimmable(const struct cg_message *m)
{
    if (m->pinned ||
        (m->role != CG_ROLE_ASSISTANT && m->role != CG_ROLE_TOOL && m->role != CG_ROLE_USER))
        return false;
    for (size_t k = 0; k < m->n_parts; k++) {
        const struct cg_part *p = &m->parts[k];
        if (m->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_TEXT && !is_trimmed(&p->u.text))
            return true;
        if (m->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_REASONING)
            return true;
        if (m->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_TOOL_CALL &&
            !(p->u.tool_call.arguments.len == 2 &&
              memcmp(p->u.tool_call.arguments.ptr, "{}", 2) == 0))
            return true;
        if (p->kind == CG_PART_TOOL_RESULT && !is_trimmed(&p->u.tool_result.content))
            return true;
    }
    return false;
}

/* Trims one entry in place (a new store message): assistant text and reasoning become one
 * marker text part that says where the original is ("[trimmed: history 12]"), arguments "{}"
 * (the marker then says where they were too), tool results the marker. User text stays. */
static cg_status trim_entry(struct run *r, struct entry *e)
{
    char where[32], marker[48];
    int mn = where_of(r, e, where) != NULL
                 ? snprintf(marker, sizeof marker, "[trimmed: %s]", where)
                 : snprintf(marker, sizeof marker, "%s", CG_COMPRESS_TRIMMED);
    struct cg_message *dm = derive(r, e, true);
    if (dm == NULL)
        return CG_RESOURCE_EXHAUSTED;
    bool had_text = false, cut_args = false;
    cg_status st;
    for (size_t k = dm->n_parts; k-- > 0;) {
        struct cg_part *p = &dm->parts[k];
        if (dm->role == CG_ROLE_ASSISTANT &&
            (p->kind == CG_PART_TEXT || p->kind == CG_PART_REASONING)) {
            if (p->kind == CG_PART_TEXT)
                had_text = true;
            else
                dm->lost_reasoning = true;
            remove_part(dm, k);
        } else if (dm->role == CG_ROLE_ASSISTANT && p->kind == CG_PART_TOOL_CALL) {
            const struct cg_str *a = &p->u.tool_call.arguments;
            cut_args = cut_args || !(a->len == 2 && memcmp(a->ptr, "{}", 2) == 0);
            if ((st = set_str(r, "{}", 2, &p->u.tool_call.arguments)) != CG_OK)
                return st;
        } else if (p->kind == CG_PART_TOOL_RESULT) {
            if ((st = set_str(r, marker, (size_t)mn, &p->u.tool_result.content)) != CG_OK)
                return st;
        }
    }
    if (dm->role == CG_ROLE_ASSISTANT && (had_text || cut_args || dm->n_parts == 0)) {
        /* The text goes first, as it was. */
        struct cg_part *p;
        if ((st = cg_conv_add_part(r->store, dm, CG_PART_TEXT, &p, r->err)) != CG_OK)
            return st;
        struct cg_part t = *p;
        memmove(&dm->parts[1], &dm->parts[0], (dm->n_parts - 1) * sizeof dm->parts[0]);
        dm->parts[0] = t;
        if ((st = set_str(r, marker, (size_t)mn, &dm->parts[0].u.text)) != CG_OK)
            return st;
    }
    e->layer = CG_LAYER_TRIM;
    return count(r, e);
}

/* The first entry index L3 may not trim: the keep_last-th last assistant message. */
static size_t trim_limit(struct run *r, const struct list *l, uint32_t keep_last)
{
    size_t limit = l->n;
    uint32_t seen = 0;
    while (limit > 0 && seen < keep_last) {
        limit--;
        if (msg_of(r, &l->e[limit])->role == CG_ROLE_ASSISTANT)
            seen++;
    }
    if (seen < keep_last)
        return 0;
    return limit;
}

/* Applies the boundary (input index) to the list: returns the messages changed. */
static cg_status trim_before(struct run *r, struct list *l, int64_t boundary, size_t limit,
                             uint32_t *affected, size_t *first_changed)
{
    for (size_t i = 0; i < l->n && i < limit; i++) {
        struct entry *e = &l->e[i];
        if (e->source < 0 || e->source >= boundary) {
            if (e->source >= boundary)
                break;
            continue;
        }
        if (!trimmable(msg_of(r, e)))
            continue;
        cg_status st = trim_entry(r, e);
        if (st != CG_OK)
            return st;
        if (*affected == 0 && first_changed != NULL)
            *first_changed = i;
        (*affected)++;
    }
    recount_total(l);
    return CG_OK;
}

/* Moves the boundary forward until the count is at or under goal (or the limit). */
static cg_status trim_move(struct run *r, struct list *l, int64_t goal, size_t limit,
                           int64_t *boundary, uint32_t *affected, size_t *first_changed)
{
    for (size_t i = 0; i < limit && r->fixed + l->total > goal; i++) {
        struct entry *e = &l->e[i];
        if (e->source < 0)
            continue;
        if (e->source >= *boundary)
            *boundary = e->source + 1;
        if (!trimmable(msg_of(r, e)))
            continue;
        int64_t before = e->tokens;
        cg_status st = trim_entry(r, e);
        if (st != CG_OK)
            return st;
        l->total += e->tokens - before;
        if (*affected == 0)
            *first_changed = i;
        (*affected)++;
    }
    return CG_OK;
}

/* ------------------------------------------------------------------ L4, L5 ------------ */

/* Index of the first entry after the system messages and primers, at a turn start (l->n when
 * there is none). */
static size_t primers_end(struct run *r, const struct list *l, uint32_t primers)
{
    size_t i = 0;
    while (i < l->n && cg_conv_role_is_system(msg_of(r, &l->e[i])->role))
        i++;
    i += primers;
    while (i < l->n && !turn_start(msg_of(r, &l->e[i])))
        i++;
    return i < l->n ? i : l->n;
}

/* The last turn start at or before l->n - recents (0 when none). */
static size_t recents_start(struct run *r, const struct list *l, uint32_t recents)
{
    if (l->n == 0)
        return 0;
    size_t i = recents >= l->n ? 0 : l->n - recents;
    if (i == l->n)
        i = l->n - 1;
    while (i > 0 && !turn_start(msg_of(r, &l->e[i])))
        i--;
    return i;
}

static void drop_range(struct run *r, struct list *l, size_t from, size_t to, int layer)
{
    for (size_t i = from; i < to; i++) {
        if (l->e[i].source >= 0)
            r->dropped_by[l->e[i].source] = layer;
        l->total -= l->e[i].tokens;
    }
    memmove(&l->e[from], &l->e[to], (l->n - to) * sizeof l->e[0]);
    l->n -= to - from;
}

/* The summarizer's text of the messages [a, c) of l (it reads them as they are now, given
 * alone) into *text (the caller frees it). *failed when the summarizer failed (lr->detail says why;
 * not an error of the run). */
static cg_status run_summarizer(struct run *r, const struct list *l, size_t a, size_t c,
                                struct cg_compress_layer_result *lr, char **text, bool *failed)
{
    *failed = false;
    struct cg_conv *view = cg_conv_new(NULL);
    if (view == NULL)
        return nomem(r->err);
    /* The span alone: the summarizer reads nothing else, and what it is given is copied (and
     * redacted, by the service's callback) whole. */
    cg_status st = CG_OK;
    for (size_t i = a; i < c && st == CG_OK; i++)
        st = cg_conv_copy_message(view, msg_of(r, &l->e[i]), r->err);
    struct cg_err serr = {0};
    if (st == CG_OK && r->in->summarize(r->in->summarize_ctx, view, 0, c - a,
                                        r->p->summary_max_tokens, text, &serr) != CG_OK) {
        snprintf(lr->detail, sizeof lr->detail, "summarizer: %.140s",
                 serr.msg[0] ? serr.msg : "failed");
        *failed = true;
    }
    cg_conv_free(view);
    return st;
}

/* The summary as the run's text, under a head that names the span it covers, input indexes
 * [first, last] (history positions in a session: ctxguard_recall reads them back). It becomes
 * the first part of the next turn's user message, since two user messages in a row are not
 * allowed everywhere. Frees text. */
static cg_status summary_text(struct run *r, char *text, int64_t first, int64_t last,
                              struct cg_str *out)
{
    char head[160];
    int hn = r->in->history_positions
                 ? snprintf(head, sizeof head,
                            "[ctxguard summary of messages %lld-%lld (session history positions; "
                            "ctxguard_recall reads the originals)]\n",
                            (long long)first, (long long)last)
                 : snprintf(head, sizeof head, "[ctxguard summary of input messages %lld-%lld]\n",
                            (long long)first, (long long)last);
    size_t tlen = text != NULL ? strlen(text) : 0;
    char *full = malloc((size_t)hn + tlen + 1);
    if (full == NULL) {
        free(text);
        return nomem(r->err);
    }
    memcpy(full, head, (size_t)hn);
    if (tlen)
        memcpy(full + hn, text, tlen);
    free(text);
    cg_status st = set_str(r, full, (size_t)hn + tlen, out);
    free(full);
    return st;
}

/* Where a summary span may start: after the system messages, the primers and the pinned turns
 * that follow them; at the message carrying this call's earlier summary when there is one (a
 * later summary takes the earlier one in). */
static size_t span_start(struct run *r, const struct list *l)
{
    if (r->out->has_summary)
        return r->summary_at;
    size_t a = primers_end(r, l, r->p->primers);
    while (a < l->n && any_pinned(r, l, a, turn_end(r, l, a)))
        a = turn_end(r, l, a);
    return a;
}

/* Replaces the whole turns [a, c) of l with one summary of them, carried as the first part of
 * the user message at c (a turn start, not pinned). With an earlier summary of this call at a,
 * the new one covers both spans. *ok when inserted; else lr->detail says why (not an error). */
static cg_status summarize_span(struct run *r, struct list *l, size_t a, size_t c, int layer,
                                struct cg_compress_layer_result *lr, bool *ok, uint32_t *affected)
{
    *ok = false;
    struct cg_compress_result *o = r->out;
    bool extend = o->has_summary;
    char *text = NULL;
    bool failed = false;
    cg_status st = run_summarizer(r, l, a, c, lr, &text, &failed);
    if (st != CG_OK || failed)
        return st;
    int64_t span = 0, first = -1, last = -1;
    for (size_t i = a; i < c; i++) {
        span += l->e[i].tokens;
        if (l->e[i].source >= 0) {
            if (first < 0)
                first = l->e[i].source;
            last = l->e[i].source;
        }
    }
    if (extend)
        first = o->summary_first;
    struct cg_message sm = {.role = CG_ROLE_USER};
    struct cg_part sp = {.kind = CG_PART_TEXT};
    if ((st = summary_text(r, text, first, last, &sp.u.text)) != CG_OK)
        return st;
    sm.parts = &sp;
    sm.n_parts = 1;
    int64_t summary_tokens = r->counter.count_message(r->counter.ctx, &sm);
    if (summary_tokens < 0)
        return nomem(r->err);
    if (summary_tokens >= span) {
        snprintf(lr->detail, sizeof lr->detail,
                 "the summary (%lld tokens) is not smaller than what it replaces (%lld)",
                 (long long)summary_tokens, (long long)span);
        return CG_OK;
    }
    struct cg_message *dm = derive(r, &l->e[c], true);
    if (dm == NULL)
        return CG_RESOURCE_EXHAUSTED;
    struct cg_part *np;
    if ((st = cg_conv_add_part(r->store, dm, CG_PART_TEXT, &np, r->err)) != CG_OK)
        return st;
    memmove(&dm->parts[1], &dm->parts[0], (dm->n_parts - 1) * sizeof dm->parts[0]);
    dm->parts[0] = sp;
    dm->form = CG_FORM_DEFAULT;
    l->e[c].layer = layer;
    int64_t before = l->e[c].tokens;
    if ((st = count(r, &l->e[c])) != CG_OK)
        return st;
    l->total += l->e[c].tokens - before;
    *affected = (uint32_t)(c - a) + 1;
    drop_range(r, l, a, c, layer);
    /* An extended summary replaces the earlier one: what that one replaced, plus the new span
     * less the earlier summary's own tokens. */
    o->summary_replaced_tokens =
        extend ? o->summary_replaced_tokens + span - o->summary_tokens : span;
    o->has_summary = true;
    o->summary_first = first;
    o->summary_last = last;
    o->summary_tokens = summary_tokens;
    o->summary_output_index = (int64_t)a;
    r->summary_at = a;
    *ok = true;
    return CG_OK;
}

/* L4: whole turns after the primers, oldest first, until the count with a summary of
 * summary_max_tokens in their place is at or under goal, or the recents (or a pinned turn)
 * are reached; then they are replaced by that summary (user text never goes without one). */
static cg_status window(struct run *r, struct list *l, int64_t goal, uint32_t recents,
                        struct cg_compress_layer_result *lr, bool *ok, uint32_t *affected)
{
    *ok = false;
    size_t a = span_start(r, l), limit = recents_start(r, l, recents);
    size_t c = a, prev = a;
    int64_t span = 0, reserve = r->p->summary_max_tokens;
    while (c < limit && r->fixed + l->total - span + reserve > goal) {
        size_t e = turn_end(r, l, c);
        if (e > limit || any_pinned(r, l, c, e))
            break;
        for (size_t i = c; i < e; i++)
            span += l->e[i].tokens;
        prev = c;
        c = e;
    }
    /* The message at c carries the summary: it must exist and not be pinned. */
    if (c < l->n && pinned(r, &l->e[c]))
        c = prev;
    if (c <= a || c >= l->n) {
        snprintf(lr->detail, sizeof lr->detail,
                 "no whole turn between %u primers and %u recents (but pinned ones)", r->p->primers,
                 recents);
        return CG_OK;
    }
    return summarize_span(r, l, a, c, CG_LAYER_WINDOW, lr, ok, affected);
}

/* L5: the oldest summarize_ratio of the turns between the primers and the last turn. */
static cg_status summarize(struct run *r, struct list *l, struct cg_compress_layer_result *lr,
                           bool *ok, uint32_t *affected)
{
    *ok = false;
    size_t a = span_start(r, l), last = recents_start(r, l, 0);
    if (a >= last) {
        snprintf(lr->detail, sizeof lr->detail,
                 "no turns between the primers and the last turn (but pinned ones)");
        return CG_OK;
    }
    size_t want = a + (size_t)((double)(last - a) * r->p->summarize_ratio + 0.5);
    size_t c = want < a + 1 ? a + 1 : want;
    while (c < last && !turn_start(msg_of(r, &l->e[c])))
        c++;
    if (c > last)
        c = last;
    /* The message at c takes the summary as its first part: it may not be pinned either. */
    size_t prev = a;
    for (size_t t = a; t < c; prev = t, t = turn_end(r, l, t))
        if (any_pinned(r, l, t, turn_end(r, l, t))) {
            c = t;
            break;
        }
    if (pinned(r, &l->e[c])) {
        if (prev == a) {
            snprintf(lr->detail, sizeof lr->detail,
                     "no turns to summarize before a pinned message takes the summary");
            return CG_OK;
        }
        c = prev;
    }
    return summarize_span(r, l, a, c, CG_LAYER_SUMMARIZE, lr, ok, affected);
}

/* ------------------------------------------------------------------ the cascade ------- */

static bool out_of_time(struct run *r)
{
    if (r->in->clock == NULL)
        return false;
    if (now(r) - r->started_ms >= (int64_t)r->p->time_budget_ms)
        r->timed_out = true;
    return r->timed_out;
}

typedef cg_status (*simple_layer_fn)(struct run *r, struct list *l, uint32_t *affected);

/* Runs a per-message layer transactionally on a copy of the list. */
static cg_status run_simple(struct run *r, struct list *l, cg_compress_layer layer,
                            simple_layer_fn fn, bool needed)
{
    struct cg_compress_layer_result *lr = layer_begin(r, layer, l, 0);
    if (disabled(r, layer)) {
        snprintf(lr->detail, sizeof lr->detail, "disabled by the policy");
        layer_end(r, lr, l, CG_OUTCOME_DISABLED, 0);
        return CG_OK;
    }
    if (!needed) {
        layer_end(r, lr, l, CG_OUTCOME_NOT_NEEDED, 0);
        return CG_OK;
    }
    struct list work;
    if (!list_copy(&work, l))
        return nomem(r->err);
    uint32_t affected = 0;
    size_t n_art = r->out->n_artifacts;
    cg_status st = fn(r, &work, &affected);
    if (st != CG_OK) {
        /* Out of memory or a cap inside a layer: the layer's changes are dropped and the
         * report says why; the cascade goes on with what it had. */
        for (size_t i = n_art; i < r->out->n_artifacts; i++)
            free(r->out->artifacts[i].content);
        r->out->n_artifacts = n_art;
        free(work.e);
        layer_failed(r, lr, l, r->err->msg);
        memset(r->err, 0, sizeof *r->err);
        return CG_OK;
    }
    list_take(l, &work);
    layer_end(r, lr, l, affected ? CG_OUTCOME_APPLIED : CG_OUTCOME_NO_EFFECT, affected);
    return CG_OK;
}

static cg_status run_trim(struct run *r, struct list *l, int64_t *boundary, bool move, int64_t goal,
                          uint32_t keep_last, uint32_t pass)
{
    struct cg_compress_layer_result *lr = layer_begin(r, CG_LAYER_TRIM, l, pass);
    if (disabled(r, CG_LAYER_TRIM)) {
        snprintf(lr->detail, sizeof lr->detail, "disabled by the policy");
        layer_end(r, lr, l, CG_OUTCOME_DISABLED, 0);
        return CG_OK;
    }
    struct list work;
    if (!list_copy(&work, l))
        return nomem(r->err);
    uint32_t affected = 0;
    size_t first = 0;
    int64_t b = *boundary;
    size_t limit = trim_limit(r, &work, keep_last);
    cg_status st = trim_before(r, &work, b, work.n, &affected, &first);
    if (st == CG_OK && move && r->fixed + work.total > goal)
        st = trim_move(r, &work, goal, limit, &b, &affected, &first);
    if (st != CG_OK) {
        free(work.e);
        layer_failed(r, lr, l, r->err->msg);
        memset(r->err, 0, sizeof *r->err);
        return CG_OK;
    }
    if (b > *boundary) {
        /* What the provider cached after the old boundary is lost: the output from the first
         * message this call changed. */
        int64_t lost = 0;
        for (size_t i = first; affected > 0 && i < work.n; i++)
            lost += work.e[i].tokens;
        r->out->cache_tokens_invalidated += lost;
        snprintf(lr->detail, sizeof lr->detail, "boundary moved from %lld to %lld",
                 (long long)*boundary, (long long)b);
        *boundary = b;
    } else if (affected) {
        snprintf(lr->detail, sizeof lr->detail, "boundary kept at %lld", (long long)b);
    } else if (!move) {
        layer_end(r, lr, l, CG_OUTCOME_NOT_NEEDED, 0);
        free(work.e);
        return CG_OK;
    }
    list_take(l, &work);
    layer_end(r, lr, l, affected ? CG_OUTCOME_APPLIED : CG_OUTCOME_NO_EFFECT, affected);
    return CG_OK;
}

/* L4 (the sliding window, down to goal above the recents) and L5 (the oldest part of the
 * middle) on a copy of the list: both replace whole turns with one summary, so both need a
 * summarizer; a failed summary drops the layer's changes. */
static cg_status run_span(struct run *r, struct list *l, cg_compress_layer layer, uint32_t pass,
                          bool needed, int64_t goal, uint32_t recents)
{
    struct cg_compress_layer_result *lr = layer_begin(r, layer, l, pass);
    if (disabled(r, layer)) {
        snprintf(lr->detail, sizeof lr->detail, "disabled by the policy");
        layer_end(r, lr, l, CG_OUTCOME_DISABLED, 0);
        return CG_OK;
    }
    if (!needed) {
        layer_end(r, lr, l, CG_OUTCOME_NOT_NEEDED, 0);
        return CG_OK;
    }
    if (r->in->summarize == NULL) {
        snprintf(lr->detail, sizeof lr->detail, "turns go only under a summary: %s",
                 r->in->no_summary_reason ? r->in->no_summary_reason : "no summarizer given");
        layer_end(r, lr, l, CG_OUTCOME_SKIPPED, 0);
        return CG_OK;
    }
    if (layer == CG_LAYER_SUMMARIZE && r->out->has_summary) {
        snprintf(lr->detail, sizeof lr->detail, "one summary per call (the sliding window's)");
        layer_end(r, lr, l, CG_OUTCOME_SKIPPED, 0);
        return CG_OK;
    }
    struct list work;
    if (!list_copy(&work, l))
        return nomem(r->err);
    bool ok;
    uint32_t affected = 0;
    cg_status st = layer == CG_LAYER_WINDOW ? window(r, &work, goal, recents, lr, &ok, &affected)
                                            : summarize(r, &work, lr, &ok, &affected);
    if (st != CG_OK || !ok) {
        free(work.e);
        if (st != CG_OK) {
            snprintf(lr->detail, sizeof lr->detail, "%s", r->err->msg);
            memset(r->err, 0, sizeof *r->err);
        }
        if (lr->detail[0] == '\0')
            snprintf(lr->detail, sizeof lr->detail, "the summary failed");
        if (strncmp(lr->detail, "no ", 3) == 0) {
            layer_end(r, lr, l, CG_OUTCOME_NO_EFFECT, 0);
        } else {
            char why[CG_COMPRESS_DETAIL_MAX];
            snprintf(why, sizeof why, "%s", lr->detail);
            layer_failed(r, lr, l, why);
        }
        return CG_OK;
    }
    list_take(l, &work);
    if (layer == CG_LAYER_WINDOW)
        snprintf(lr->detail, sizeof lr->detail,
                 "%u messages replaced by a summary of input messages %lld-%lld (recents %u)",
                 affected - 1, (long long)r->out->summary_first, (long long)r->out->summary_last,
                 recents);
    layer_end(r, lr, l, CG_OUTCOME_APPLIED, affected);
    return CG_OK;
}

/* The output conversation: the list's messages deep-copied, with the input's tools and
 * top-level fields. */
static cg_status build_output(struct run *r, const struct list *l)
{
    const struct cg_conv *in = r->in->conv;
    struct cg_conv *conv = cg_conv_new(&in->limits);
    if (conv == NULL)
        return nomem(r->err);
    cg_status st = CG_OK;
    for (size_t i = 0; i < l->n && st == CG_OK; i++)
        st = cg_conv_copy_message(conv, msg_of(r, &l->e[i]), r->err);
    for (size_t i = 0; i < in->n_tools && st == CG_OK; i++) {
        struct cg_tool_def *t;
        const struct cg_tool_def *s = &in->tools[i];
        if ((st = cg_conv_add_tool(conv, &t, r->err)) != CG_OK)
            break;
        if ((st = cg_conv_str(conv, s->name.ptr, s->name.len, &t->name, r->err)) == CG_OK &&
            (st = cg_conv_str(conv, s->description.ptr, s->description.len, &t->description,
                              r->err)) == CG_OK &&
            (st = cg_conv_str(conv, s->parameters.ptr, s->parameters.len, &t->parameters,
                              r->err)) == CG_OK &&
            (st = cg_conv_str(conv, s->type.ptr, s->type.len, &t->type, r->err)) == CG_OK)
            st = cg_conv_str(conv, s->extra.ptr, s->extra.len, &t->extra, r->err);
    }
    if (st == CG_OK &&
        (st = cg_conv_str(conv, in->model.ptr, in->model.len, &conv->model, r->err)) == CG_OK)
        st = cg_conv_str(conv, in->top_extra.ptr, in->top_extra.len, &conv->top_extra, r->err);
    if (st != CG_OK) {
        cg_conv_free(conv);
        return st;
    }
    conv->origin = in->origin;
    conv->top_is_object = in->top_is_object;
    conv->has_tools_key = in->has_tools_key;
    conv->tools_external = in->tools_external;
    conv->system_form = in->system_form;
    conv->snake_keys = in->snake_keys;
    r->out->conv = conv;
    return CG_OK;
}

static cg_status report(struct run *r, const struct list *l)
{
    struct cg_compress_result *o = r->out;
    size_t n_in = r->in->conv->n_messages;
    o->messages_after = (int64_t)l->n;
    o->tokens_after = r->fixed + l->total;
    o->source_indexes = malloc((l->n ? l->n : 1) * sizeof *o->source_indexes);
    o->changes = malloc((n_in ? n_in : 1) * sizeof *o->changes);
    int64_t *out_of = malloc((n_in ? n_in : 1) * sizeof *out_of);
    if (o->source_indexes == NULL || o->changes == NULL || out_of == NULL) {
        free(out_of);
        return nomem(r->err);
    }
    for (size_t i = 0; i < n_in; i++)
        out_of[i] = -1;
    for (size_t i = 0; i < l->n; i++) {
        o->source_indexes[i] = l->e[i].source;
        if (l->e[i].source >= 0)
            out_of[l->e[i].source] = (int64_t)i;
    }
    for (size_t s = 0; s < n_in; s++) {
        int64_t oi = out_of[s];
        const struct entry *e = oi >= 0 ? &l->e[oi] : NULL;
        if (e != NULL && e->layer == 0)
            continue;
        struct cg_compress_change *c = &o->changes[o->n_changes++];
        c->source_index = (int64_t)s;
        c->output_index = oi;
        c->layer = e != NULL ? (cg_compress_layer)e->layer : (cg_compress_layer)r->dropped_by[s];
        c->tokens_before = r->input_tokens[s];
        c->tokens_after = e != NULL ? e->tokens : 0;
        c->artifact = e != NULL ? e->artifact : -1;
    }
    for (size_t i = 0; i < o->n_artifacts; i++) {
        int64_t src = o->artifacts[i].source_index;
        o->artifacts[i].output_index = src >= 0 ? out_of[src] : -1;
    }
    free(out_of);
    return CG_OK;
}

static cg_status validate_output(struct run *r)
{
    struct cg_validate_input vin = {.conv = r->out->conv, .dialect = r->in->dialect};
    struct cg_validate_result vr;
    cg_status st = cg_validate(&vin, &vr, r->err);
    if (st != CG_OK)
        return st;
    if (!vr.valid) {
        const struct cg_issue *is = cg_validate_first_error(&vr);
        if (r->err != NULL) {
            r->err->code = CG_FAILED_PRECONDITION;
            snprintf(r->err->msg, sizeof r->err->msg,
                     "conversation: cannot be repaired for this provider: %s (%.60s)",
                     is ? cg_validate_kind_name(is->kind) : "invalid", is ? is->message : "");
        }
        st = CG_FAILED_PRECONDITION;
    }
    cg_validate_result_free(&vr);
    return st;
}

/* The input's own checks (the policy is checked apart). */
static cg_status input_check(const struct cg_compress_input *in, struct cg_err *err)
{
    if (in->conv == NULL || in->context_window <= 0 || in->external_prompt_tokens < 0 ||
        in->trim_boundary < 0 || in->counter.count_message == NULL) {
        err->code = CG_INVALID_ARGUMENT;
        snprintf(err->msg, sizeof err->msg, "%s",
                 in->conv == NULL                 ? "conversation: required"
                 : in->context_window <= 0        ? "context_window_tokens: must be positive"
                 : in->trim_boundary < 0          ? "trim_boundary: must not be negative"
                 : in->external_prompt_tokens < 0 ? "external_prompt_tokens: must not be negative"
                                                  : "counter: required");
        return CG_INVALID_ARGUMENT;
    }
    return CG_OK;
}

/* The run's store starts as a shallow copy of the input (strings stay the input's), one
 * counted entry of l per input message. */
static cg_status load_input(struct run *r, struct list *l)
{
    const struct cg_conv *conv = r->in->conv;
    size_t n_in = conv->n_messages;
    cg_status st;
    r->store->limits.max_bytes = CG_CONV_MAX_BYTES;
    r->store->limits.max_messages = n_in * 3 + 64;
    for (size_t i = 0; i < n_in; i++) {
        struct entry e = {0, (int64_t)i, 0, 0, -1};
        const struct cg_message *src = &conv->messages[i];
        struct cg_message *m;
        if ((st = cg_conv_add_message(r->store, src->role, &m, r->err)) != CG_OK)
            return st;
        m->name = src->name;
        m->pinned = src->pinned;
        m->form = src->form;
        m->extra = src->extra;
        for (size_t k = 0; k < src->n_parts; k++) {
            struct cg_part *pt;
            if ((st = cg_conv_add_part(r->store, m, src->parts[k].kind, &pt, r->err)) != CG_OK)
                return st;
            *pt = src->parts[k];
        }
        e.msg = i;
        if ((st = count(r, &e)) != CG_OK)
            return st;
        r->input_tokens[i] = e.tokens;
        if (!list_push(l, e))
            return nomem(r->err);
    }
    return CG_OK;
}

/* The effective window: the model's minus the system prompt, tools, reserved output and
 * what the caller adds; and the trigger, target and ceiling in tokens. */
static void set_window(struct run *r, const struct list *l)
{
    const struct cg_compress_input *in = r->in;
    const struct cg_compress_policy *p = r->p;
    struct cg_compress_result *out = r->out;
    int64_t system = 0;
    for (size_t i = 0; i < l->n; i++)
        if (cg_conv_role_is_system(msg_of(r, &l->e[i])->role))
            system += l->e[i].tokens;
    int64_t eff = in->context_window - system - r->fixed - p->reserved_output_tokens -
                  in->external_prompt_tokens;
    if (eff < 1)
        eff = 1;
    double trigger = p->trigger_ratio * (p->prompt_cache_hint ? 1.1 : 1.0);
    if (trigger > p->ceiling_ratio)
        trigger = p->ceiling_ratio;
    out->effective_window = eff;
    out->trigger_tokens = (int64_t)((double)eff * trigger);
    out->target_tokens = (int64_t)((double)eff * p->target_ratio);
    out->ceiling_tokens = (int64_t)((double)eff * p->ceiling_ratio);
    /* An absolute target (a budget's room, CheckBudget's compress_to_tokens): the layers aim
     * at it and the cascade runs whenever the count is over it. */
    if (p->target_tokens > 0 && p->target_tokens < out->target_tokens)
        out->target_tokens = p->target_tokens;
    if (p->target_tokens > 0 && p->target_tokens < out->trigger_tokens)
        out->trigger_tokens = p->target_tokens;
}

/* L0-L2, the per-message layers: in TRIMMING on every triggered call (prefix stability),
 * else while over the target. */
static cg_status per_message_layers(struct run *r, struct list *l)
{
    const struct cg_compress_input *in = r->in;
    struct cg_compress_result *out = r->out;
    bool trimming = r->p->strategy == CG_STRATEGY_TRIMMING;
    int64_t target = out->target_tokens;
    cg_status st;
#define NEED() (out->triggered && (trimming || r->fixed + l->total > target))
    if (!in->offload) {
        struct cg_compress_layer_result *lr = layer_begin(r, CG_LAYER_OFFLOAD, l, 0);
        snprintf(lr->detail, sizeof lr->detail, "%s",
                 in->offload_skip_reason ? in->offload_skip_reason : "offload not enabled");
        layer_end(r, lr, l,
                  disabled(r, CG_LAYER_OFFLOAD) ? CG_OUTCOME_DISABLED
                  : NEED()                      ? CG_OUTCOME_SKIPPED
                                                : CG_OUTCOME_NOT_NEEDED,
                  0);
    } else if ((st = run_simple(r, l, CG_LAYER_OFFLOAD, offload, NEED())) != CG_OK) {
        return st;
    }
    if ((st = run_simple(r, l, CG_LAYER_TOOL_RESULT, tool_results, NEED())) != CG_OK ||
        (st = run_simple(r, l, CG_LAYER_WRITE_COMPACTION, write_compaction, NEED())) != CG_OK)
        return st;
#undef NEED
    return CG_OK;
}

/* L3: the old boundary always applies (the prefix the caller already sent); it moves only
 * over the trigger (TRIMMING) or the target, to below trim_goal. */
static cg_status trim_to_boundary(struct run *r, struct list *l, int64_t *boundary,
                                  int64_t trim_goal)
{
    const struct cg_compress_policy *p = r->p;
    struct cg_compress_result *out = r->out;
    bool trimming = p->strategy == CG_STRATEGY_TRIMMING;
    /* Apply the old boundary first (no move) to see whether a move is needed. */
    cg_status st = run_trim(r, l, boundary, false, 0, p->keep_last_assistant, 0);
    if (st != CG_OK)
        return st;
    int64_t now_count = r->fixed + l->total;
    bool move = out->triggered && (trimming ? now_count > out->trigger_tokens || r->in->force ||
                                                  now_count > out->ceiling_tokens
                                            : now_count > out->target_tokens);
    if (!move)
        return CG_OK;
    /* The first L3 result only applied the old boundary; fold the move into it. */
    r->out->n_layers--;
    struct cg_compress_layer_result keep = r->out->layers[r->out->n_layers];
    if ((st = run_trim(r, l, boundary, true, trim_goal, p->keep_last_assistant, 0)) != CG_OK)
        return st;
    struct cg_compress_layer_result *lr = &r->out->layers[r->out->n_layers - 1];
    lr->tokens_before = keep.tokens_before;
    lr->messages_affected += keep.messages_affected;
    if (keep.outcome == CG_OUTCOME_APPLIED)
        lr->outcome = CG_OUTCOME_APPLIED;
    return CG_OK;
}

/* Escalation while over goal: fewer recents each pass (none on the last), assistant
 * messages no longer protected from trimming on the last. */
static cg_status escalate(struct run *r, struct list *l, int64_t *boundary, int64_t goal,
                          int64_t trim_to)
{
    const struct cg_compress_policy *p = r->p;
    struct cg_compress_result *out = r->out;
    for (uint32_t pass = 1; pass <= p->max_escalation_passes; pass++) {
        if (!out->triggered || r->fixed + l->total <= goal)
            break;
        if (out_of_time(r)) {
            warn(r, CG_CWARN_TIME_BUDGET_EXHAUSTED, -1,
                 "the time budget of %u ms ran out before escalation pass %u", p->time_budget_ms,
                 pass);
            break;
        }
        bool last = pass == p->max_escalation_passes;
        uint32_t recents = last ? 0 : p->recents >> pass;
        out->escalation_passes = pass;
        cg_status st;
        if ((st = run_trim(r, l, boundary, true, trim_to, last ? 0 : p->keep_last_assistant / 2,
                           pass)) != CG_OK ||
            (st = run_span(r, l, CG_LAYER_WINDOW, pass, r->fixed + l->total > goal, trim_to,
                           recents)) != CG_OK ||
            (st = run_span(r, l, CG_LAYER_SUMMARIZE, pass, r->fixed + l->total > goal, 0, 0)) !=
                CG_OK)
            return st;
    }
    return CG_OK;
}

/* The cascade on the loaded input: normalize, L0-L2, L3, L4 and L5, then escalation. */
static cg_status cascade(struct run *r, struct list *l, int64_t *boundary)
{
    const struct cg_compress_policy *p = r->p;
    struct cg_compress_result *out = r->out;
    cg_status st;
    if ((st = normalize(r, l)) != CG_OK)
        return st;
    int64_t target = out->target_tokens, ceiling = out->ceiling_tokens;
    out->triggered = r->in->force || r->fixed + l->total > out->trigger_tokens;
    bool trimming = p->strategy == CG_STRATEGY_TRIMMING;
    if ((st = per_message_layers(r, l)) != CG_OK)
        return st;
    int64_t hyst_goal = (int64_t)((double)out->trigger_tokens * p->hysteresis_ratio);
    int64_t trim_goal = target < hyst_goal ? target : hyst_goal;
    if ((st = trim_to_boundary(r, l, boundary, trim_goal)) != CG_OK)
        return st;
    /* L4 and L5: SUMMARIZING while over the target, TRIMMING only over the ceiling. */
    int64_t goal = trimming ? ceiling : target;
    bool need = out->triggered && r->fixed + l->total > goal;
    if ((st = run_span(r, l, CG_LAYER_WINDOW, 0, need, trimming ? trim_goal : target,
                       p->recents)) != CG_OK)
        return st;
    need = out->triggered && r->fixed + l->total > goal;
    if ((st = run_span(r, l, CG_LAYER_SUMMARIZE, 0, need, 0, 0)) != CG_OK)
        return st;
    return escalate(r, l, boundary, goal, trimming ? trim_goal : target);
}

/* The output and its report, the warnings of a target or ceiling missed, the checks. */
static cg_status finish(struct run *r, struct list *l)
{
    struct cg_compress_result *out = r->out;
    int64_t target = out->target_tokens, ceiling = out->ceiling_tokens;
    cg_status st;
    if ((st = build_output(r, l)) != CG_OK || (st = report(r, l)) != CG_OK)
        return st;
    out->target_reached = !out->triggered || out->tokens_after <= target;
    out->under_ceiling = out->tokens_after <= ceiling;
    int64_t pinned_tokens = 0, pinned_messages = 0;
    for (size_t i = 0; i < l->n; i++)
        if (pinned(r, &l->e[i])) {
            pinned_tokens += l->e[i].tokens;
            pinned_messages++;
        }
    if (out->triggered && !out->target_reached && pinned_messages > 0)
        warn(r, CG_CWARN_TARGET_UNREACHABLE, -1,
             "%lld tokens after compression, target %lld: %lld pinned messages (%lld tokens) "
             "stay whole, with system and user text, recent turns and primers",
             (long long)out->tokens_after, (long long)target, (long long)pinned_messages,
             (long long)pinned_tokens);
    else if (out->triggered && !out->target_reached)
        warn(r, CG_CWARN_TARGET_UNREACHABLE, -1,
             "%lld tokens after compression, target %lld: what is left (system and user text, "
             "recent turns, primers) does not fit",
             (long long)out->tokens_after, (long long)target);
    if (!out->under_ceiling)
        warn(r, CG_CWARN_CEILING_EXCEEDED, -1, "%lld tokens after compression, ceiling %lld",
             (long long)out->tokens_after, (long long)ceiling);
    return validate_output(r);
}

cg_status cg_compress_run(const struct cg_compress_input *in, const struct cg_compress_policy *p,
                          struct cg_compress_result *out, struct cg_err *err)
{
    struct cg_err local = {0};
    if (err == NULL)
        err = &local;
    memset(out, 0, sizeof *out);
    cg_status st = cg_compress_policy_check(p, err);
    if (st != CG_OK || (st = input_check(in, err)) != CG_OK)
        return st;
    const struct cg_conv *conv = in->conv;
    size_t n_in = conv->n_messages;
    struct run r = {.in = in, .p = p, .out = out, .err = err};
    struct list l = {0};
    r.counter = in->counter;
    if (cg__compress_counter_is_builtin(&in->counter)) {
        r.memo_state = *(const struct cg_compress_count_state *)in->counter.ctx;
        if (r.memo_state.enc != NULL && r.memo_state.cache == NULL &&
            (r.memo_state.cache = cg_tok_cache_new()) != NULL)
            r.counter.ctx = &r.memo_state;
    }
    r.store = cg_conv_new(&conv->limits);
    r.dropped_by = calloc(n_in ? n_in : 1, sizeof *r.dropped_by);
    r.input_tokens = calloc(n_in ? n_in : 1, sizeof *r.input_tokens);
    if (r.store == NULL || r.dropped_by == NULL || r.input_tokens == NULL) {
        st = nomem(err);
        goto out;
    }
    r.fixed = in->counter.fixed_tokens;
    r.started_ms = now(&r);
    if ((st = load_input(&r, &l)) != CG_OK)
        goto out;
    recount_total(&l);
    out->messages_before = (int64_t)n_in;
    out->tokens_before = r.fixed + l.total;
    set_window(&r, &l);
    if (!in->counter.exact)
        warn(&r, CG_CWARN_ESTIMATED_COUNTS, -1, "counts are estimates (no exact tokenizer)");

    int64_t boundary = in->trim_boundary;
    if (boundary > (int64_t)n_in) {
        warn(&r, CG_CWARN_BOUNDARY_ADJUSTED, -1,
             "trim_boundary %lld is past the end of the conversation; clamped to %zu",
             (long long)boundary, n_in);
        boundary = (int64_t)n_in;
    }
    out->boundary_before = boundary;
    if ((st = cascade(&r, &l, &boundary)) != CG_OK)
        goto out;
    out->boundary_after = boundary;
    out->boundary_moved = boundary != out->boundary_before;
    st = finish(&r, &l);
out:
    free(l.e);
    free(r.dropped_by);
    free(r.input_tokens);
    if (r.counter.ctx == &r.memo_state)
        cg_tok_cache_free(r.memo_state.cache);
    cg_conv_free(r.store);
    if (st != CG_OK)
        cg_compress_result_free(out);
    return st;
}

void cg_compress_result_free(struct cg_compress_result *r)
{
    if (r == NULL)
        return;
    cg_conv_free(r->conv);
    for (size_t i = 0; i < r->n_artifacts; i++)
        free(r->artifacts[i].content);
    free(r->artifacts);
    free(r->source_indexes);
    free(r->changes);
    memset(r, 0, sizeof *r);
}

/* validate.c - the dialect rules of validate.h in one forward pass, with a hash table of tool
 * call ids. */
#include "core/validate.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"

/* One tool call as the pass sees it. */
struct call {
    const struct cg_str *id;
    size_t message, part;
    unsigned results;
    bool open;     /* awaiting its results */
    bool reported; /* dangling already said */
};

struct state {
    const struct cg_validate_input *in;
    cg_dialect d;
    struct cg_validate_result *out;
    size_t cap;
    struct call *calls;
    size_t n_calls;
    size_t open_lo, open_hi; /* the open calls are among calls[open_lo..open_hi) */
    size_t *table;           /* open addressing: index + 1 into calls, 0 empty */
    size_t table_size;
    size_t *tool_table; /* the same for the names of the tool definitions */
    size_t tool_table_size;
    bool oom;
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

/* The first call with this id, or NULL. */
static struct call *find(struct state *s, const struct cg_str *id)
{
    if (s->table_size == 0)
        return NULL;
    size_t mask = s->table_size - 1;
    for (size_t i = hash_bytes(id->ptr, id->len) & mask;; i = (i + 1) & mask) {
        size_t slot = s->table[i];
        if (slot == 0)
            return NULL;
        struct call *c = &s->calls[slot - 1];
        if (c->id->len == id->len && memcmp(c->id->ptr, id->ptr, id->len) == 0)
            return c;
    }
}

static void insert(struct state *s, size_t index)
{
    size_t mask = s->table_size - 1;
    const struct cg_str *id = s->calls[index].id;
    size_t i = hash_bytes(id->ptr, id->len) & mask;
    while (s->table[i] != 0)
        i = (i + 1) & mask;
    s->table[i] = index + 1;
}

static cg_severity sev(struct state *s, cg_severity openai, cg_severity anthropic,
                       cg_severity google, cg_severity generic)
{
    switch (s->d) {
    case CG_DIALECT_OPENAI:
        return openai;
    case CG_DIALECT_ANTHROPIC:
        return anthropic;
    case CG_DIALECT_GOOGLE:
        return google;
    default:
        return generic;
    }
}

#define E CG_SEVERITY_ERROR
#define W CG_SEVERITY_WARNING
#define NONE ((cg_severity)0)

static void add(struct state *s, cg_issue_kind kind, cg_severity severity, int64_t message,
                int64_t part, const struct cg_str *tool_call_id, const char *fmt, ...)
    CG_PRINTF(7, 8);
static void add(struct state *s, cg_issue_kind kind, cg_severity severity, int64_t message,
                int64_t part, const struct cg_str *tool_call_id, const char *fmt, ...)
{
    if (severity == NONE)
        return;
    struct cg_validate_result *out = s->out;
    if (severity == E)
        out->errors++;
    else
        out->warnings++;
    if (out->n == CG_VALIDATE_MAX_ISSUES) {
        out->truncated = true;
        return;
    }
    if (out->n == s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 16;
        if (ncap > CG_VALIDATE_MAX_ISSUES)
            ncap = CG_VALIDATE_MAX_ISSUES;
        struct cg_issue *p = realloc(out->issues, ncap * sizeof *p);
        if (p == NULL) {
            s->oom = true;
            return;
        }
        out->issues = p;
        s->cap = ncap;
    }
    struct cg_issue *is = &out->issues[out->n];
    out->n++;
    memset(is, 0, sizeof *is);
    is->kind = kind;
    is->severity = severity;
    is->message_index = message;
    is->part_index = part;
    if (tool_call_id != NULL) {
        size_t n = tool_call_id->len < CG_CONV_ID_MAX ? tool_call_id->len : CG_CONV_ID_MAX;
        memcpy(is->tool_call_id, tool_call_id->ptr, n);
        is->tool_call_id[n] = '\0';
    }
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(is->message, sizeof is->message, fmt, ap) < 0)
        is->message[0] = '\0';
    va_end(ap);
}

/* Pairing: OpenAI and Anthropic want results right after the call's message. */
static bool strict_pairing(const struct state *s)
{
    return s->d == CG_DIALECT_OPENAI || s->d == CG_DIALECT_ANTHROPIC;
}

/* Reports the still-open calls of the last assistant message as dangling. */
static void close_open_calls(struct state *s, const char *why)
{
    size_t lo = s->open_lo, hi = s->open_hi;
    s->open_lo = s->open_hi = 0;
    for (size_t i = lo; i < hi; i++) {
        struct call *c = &s->calls[i];
        if (!c->open)
            continue;
        c->open = false;
        if (c->results == 0 && !c->reported) {
            c->reported = true;
            add(s, CG_ISSUE_DANGLING_TOOL_CALL, E, (int64_t)c->message, (int64_t)c->part, c->id,
                "tool call \"%.60s\" has no result %s", c->id->ptr, why);
        }
    }
}

static bool text_is_empty(const struct cg_str *t)
{
    for (size_t i = 0; i < t->len; i++)
        if (t->ptr[i] != ' ' && t->ptr[i] != '\n' && t->ptr[i] != '\t' && t->ptr[i] != '\r')
            return false;
    return true;
}

/* Hashes the tool definitions' names (a conversation may have many calls and many tools). */
static bool index_tools(struct state *s)
{
    const struct cg_conv *conv = s->in->conv;
    if (conv->n_tools == 0)
        return true;
    s->tool_table_size = 16;
    while (s->tool_table_size < 2 * conv->n_tools)
        s->tool_table_size *= 2;
    s->tool_table = calloc(s->tool_table_size, sizeof *s->tool_table);
    if (s->tool_table == NULL)
        return false;
    size_t mask = s->tool_table_size - 1;
    for (size_t t = 0; t < conv->n_tools; t++) {
        const struct cg_str *name = &conv->tools[t].name;
        size_t i = hash_bytes(name->ptr, name->len) & mask;
        while (s->tool_table[i] != 0)
            i = (i + 1) & mask;
        s->tool_table[i] = t + 1;
    }
    return true;
}

static bool known_tool(const struct state *s, const struct cg_str *name)
{
    const struct cg_conv *conv = s->in->conv;
    size_t mask = s->tool_table_size - 1;
    for (size_t i = hash_bytes(name->ptr, name->len) & mask; s->tool_table[i] != 0;
         i = (i + 1) & mask) {
        const struct cg_str *t = &conv->tools[s->tool_table[i] - 1].name;
        if (t->len == name->len && memcmp(t->ptr, name->ptr, name->len) == 0)
            return true;
    }
    return false;
}

/* Collects every tool call, reporting duplicate ids. */
static bool collect_calls(struct state *s)
{
    const struct cg_conv *conv = s->in->conv;
    size_t n = 0;
    for (size_t mi = 0; mi < conv->n_messages; mi++)
        for (size_t pi = 0; pi < conv->messages[mi].n_parts; pi++)
            n += conv->messages[mi].parts[pi].kind == CG_PART_TOOL_CALL;
    if (n == 0)
        return true;
    s->calls = calloc(n, sizeof *s->calls);
    s->table_size = 16;
    while (s->table_size < 2 * n)
        s->table_size *= 2;
    s->table = calloc(s->table_size, sizeof *s->table);
    if (s->calls == NULL || s->table == NULL)
        return false;
    for (size_t mi = 0; mi < conv->n_messages; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        for (size_t pi = 0; pi < m->n_parts; pi++) {
            if (m->parts[pi].kind != CG_PART_TOOL_CALL)
                continue;
            const struct cg_str *id = &m->parts[pi].u.tool_call.id;
            if (find(s, id) != NULL) {
                add(s, CG_ISSUE_DUPLICATE_TOOL_CALL_ID, E, (int64_t)mi, (int64_t)pi, id,
                    "tool call id \"%.60s\" is used more than once", id->ptr);
                continue;
            }
            s->calls[s->n_calls] = (struct call){.id = id, .message = mi, .part = pi};
            insert(s, s->n_calls++);
        }
    }
    return true;
}

/* Parts the message's role cannot carry, arguments and tool names. */
static void check_parts(struct state *s, size_t mi, const struct cg_message *m)
{
    bool system = cg_conv_role_is_system(m->role);
    for (size_t pi = 0; pi < m->n_parts; pi++) {
        const struct cg_part *p = &m->parts[pi];
        const char *bad = NULL;
        switch (p->kind) {
        case CG_PART_TEXT:
            if (m->role == CG_ROLE_TOOL)
                bad = "text outside a tool result";
            else if (m->n_parts > 1 && p->u.text.len == 0)
                add(s, CG_ISSUE_EMPTY_MESSAGE, sev(s, NONE, E, NONE, NONE), (int64_t)mi,
                    (int64_t)pi, NULL, "empty text block");
            break;
        case CG_PART_TOOL_CALL: {
            if (m->role != CG_ROLE_ASSISTANT) {
                bad = "a tool call outside an assistant message";
                break;
            }
            const struct cg_tool_call *tc = &p->u.tool_call;
            if (tc->arguments.len > 0 &&
                !cg_conv_json_is_valid(tc->arguments.ptr, tc->arguments.len, true))
                add(s, CG_ISSUE_INVALID_TOOL_ARGUMENTS, sev(s, W, E, E, W), (int64_t)mi,
                    (int64_t)pi, &tc->id, "arguments of \"%.60s\" are not a JSON object",
                    tc->name.ptr);
            if (s->tool_table != NULL && !known_tool(s, &tc->name))
                add(s, CG_ISSUE_UNKNOWN_TOOL, W, (int64_t)mi, (int64_t)pi, &tc->id,
                    "tool \"%.60s\" is not among the tool definitions", tc->name.ptr);
            break;
        }
        case CG_PART_TOOL_RESULT:
            if (m->role != CG_ROLE_TOOL && m->role != CG_ROLE_USER)
                bad = "a tool result outside a tool or user message";
            break;
        case CG_PART_IMAGE:
            if (m->role == CG_ROLE_ASSISTANT || system)
                bad = "an image in an assistant or system message";
            break;
        case CG_PART_REASONING:
            if (m->role != CG_ROLE_ASSISTANT)
                bad = "reasoning outside an assistant message";
            break;
        }
        if (bad != NULL)
            add(s, CG_ISSUE_PART_NOT_ALLOWED, E, (int64_t)mi, (int64_t)pi, NULL, "%s (%s message)",
                bad, cg_conv_role_name(m->role));
    }
}

static bool has_content(const struct cg_message *m)
{
    for (size_t pi = 0; pi < m->n_parts; pi++) {
        const struct cg_part *p = &m->parts[pi];
        if (p->kind != CG_PART_TEXT || !text_is_empty(&p->u.text))
            return true;
    }
    return false;
}

static bool has_results(const struct cg_message *m)
{
    for (size_t pi = 0; pi < m->n_parts; pi++)
        if (m->parts[pi].kind == CG_PART_TOOL_RESULT)
            return true;
    return false;
}

static void check_results(struct state *s, size_t mi, const struct cg_message *m)
{
    for (size_t pi = 0; pi < m->n_parts; pi++) {
        const struct cg_part *p = &m->parts[pi];
        if (p->kind != CG_PART_TOOL_RESULT)
            continue;
        const struct cg_str *id = &p->u.tool_result.tool_call_id;
        struct call *c = find(s, id);
        if (c == NULL || c->message >= mi) {
            add(s, CG_ISSUE_ORPHAN_TOOL_RESULT, E, (int64_t)mi, (int64_t)pi, id,
                "tool result for \"%.60s\" answers no earlier tool call", id->ptr);
            continue;
        }
        if (c->results > 0) {
            add(s, CG_ISSUE_DUPLICATE_TOOL_RESULT, sev(s, E, E, W, W), (int64_t)mi, (int64_t)pi, id,
                "a second result for tool call \"%.60s\"", id->ptr);
            continue;
        }
        if (!c->open && strict_pairing(s)) {
            add(s, CG_ISSUE_ORPHAN_TOOL_RESULT, E, (int64_t)mi, (int64_t)pi, id,
                "tool result for \"%.60s\" does not directly follow its call (message %zu)",
                id->ptr, c->message);
            c->results++;
            continue;
        }
        c->results++;
    }
}

static int cmp_issue(const struct cg_issue *x, const struct cg_issue *y)
{
    uint64_t mx = x->message_index < 0 ? UINT64_MAX : (uint64_t)x->message_index;
    uint64_t my = y->message_index < 0 ? UINT64_MAX : (uint64_t)y->message_index;
    if (mx != my)
        return mx < my ? -1 : 1;
    if (x->part_index != y->part_index)
        return x->part_index < y->part_index ? -1 : 1;
    return 0;
}

/* Sorts by message and part, keeping the order of equal ones. */
static bool sort_issues(struct state *s)
{
    size_t n = s->out->n;
    if (n < 2)
        return true;
    struct cg_issue *copy = malloc(n * sizeof *copy);
    size_t *order = malloc(n * sizeof *order);
    if (copy == NULL || order == NULL) {
        free(copy);
        free(order);
        return false;
    }
    memcpy(copy, s->out->issues, n * sizeof *copy);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    /* Insertion sort on an almost-sorted list (issues come in message order but for dangling
     * calls, reported when their turn ends), stable by construction. */
    for (size_t i = 1; i < n; i++) {
        size_t v = order[i], j = i;
        while (j > 0 && cmp_issue(&copy[order[j - 1]], &copy[v]) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    for (size_t i = 0; i < n; i++)
        s->out->issues[i] = copy[order[i]];
    free(copy);
    free(order);
    return true;
}

/* The tool calls of assistant message mi (m) now wait for their results. */
static void open_calls(struct state *s, size_t mi, const struct cg_message *m)
{
    for (size_t pi = 0; pi < m->n_parts; pi++)
        if (m->parts[pi].kind == CG_PART_TOOL_CALL) {
            struct call *c = find(s, &m->parts[pi].u.tool_call.id);
            if (c != NULL && c->message == mi && c->part == pi) {
                size_t at = (size_t)(c - s->calls);
                if (s->open_lo == s->open_hi)
                    s->open_lo = s->open_hi = at;
                if (at < s->open_lo)
                    s->open_lo = at;
                if (at >= s->open_hi)
                    s->open_hi = at + 1;
                c->open = true;
            }
        }
}

/* The prompt's size against the window and the reserved output (with counts only). */
static void check_window(struct state *s)
{
    const struct cg_validate_input *in = s->in;
    int64_t headroom = in->context_window - in->prompt_tokens;
    if (headroom < 0)
        add(s, CG_ISSUE_EXCEEDS_CONTEXT_WINDOW, E, -1, -1, NULL,
            "the prompt (%lld tokens) is larger than the window (%lld)",
            (long long)in->prompt_tokens, (long long)in->context_window);
    else if (in->reserved_output_tokens > 0 && headroom < in->reserved_output_tokens)
        add(s, CG_ISSUE_HEADROOM_BELOW_RESERVE, sev(s, E, E, W, W), -1, -1, NULL,
            "%lld tokens left for the answer, %lld reserved", (long long)headroom,
            (long long)in->reserved_output_tokens);
}

cg_status cg_validate(const struct cg_validate_input *in, struct cg_validate_result *out,
                      struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    struct state s = {.in = in, .out = out, .d = in->dialect};
    if (s.d == CG_DIALECT_UNSPECIFIED)
        s.d = CG_DIALECT_GENERIC;
    const struct cg_conv *conv = in->conv;
    if (!collect_calls(&s) || !index_tools(&s))
        s.oom = true;
    bool seen_non_system = false, results_open = false;
    int last_turn = 0; /* 0 none, CG_ROLE_USER or CG_ROLE_ASSISTANT */
    bool last_was_tool = false;
    for (size_t mi = 0; mi < conv->n_messages && !s.oom; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        bool system = cg_conv_role_is_system(m->role);
        bool result_msg = m->role == CG_ROLE_TOOL || (m->role == CG_ROLE_USER && has_results(m));

        /* Pairing: a non-result message ends the results of the last assistant message. */
        if (!result_msg && strict_pairing(&s))
            close_open_calls(&s, "right after the message that made it");
        if (m->role == CG_ROLE_ASSISTANT)
            close_open_calls(&s, "before the next assistant message");
        if (s.d == CG_DIALECT_ANTHROPIC && results_open && m->role == CG_ROLE_USER && result_msg)
            close_open_calls(&s, "in the user message right after the call");
        check_results(&s, mi, m);
        results_open = m->role == CG_ROLE_USER && result_msg;

        /* Roles. */
        if (system) {
            if (seen_non_system)
                add(&s, CG_ISSUE_SYSTEM_NOT_FIRST, sev(&s, NONE, E, E, W), (int64_t)mi, -1, NULL,
                    "a %s message after the conversation started", cg_conv_role_name(m->role));
        } else {
            int turn = m->role == CG_ROLE_ASSISTANT ? CG_ROLE_ASSISTANT : CG_ROLE_USER;
            if (!seen_non_system && turn != CG_ROLE_USER)
                add(&s, CG_ISSUE_WRONG_FIRST_ROLE, sev(&s, NONE, E, E, W), (int64_t)mi, -1, NULL,
                    "the first message after the system prompt is from the %s",
                    cg_conv_role_name(m->role));
            /* Tool results and the user message right after them make one user turn. */
            bool merged = last_was_tool && (m->role == CG_ROLE_TOOL || m->role == CG_ROLE_USER);
            if (last_turn == turn && !merged)
                add(&s, CG_ISSUE_NON_ALTERNATING_ROLES, sev(&s, NONE, E, E, W), (int64_t)mi, -1,
                    NULL, "two %s turns in a row", turn == CG_ROLE_USER ? "user" : "assistant");
            last_turn = turn;
            last_was_tool = m->role == CG_ROLE_TOOL;
            seen_non_system = true;
        }

        /* Content. */
        check_parts(&s, mi, m);
        if (!has_content(m)) {
            bool final_assistant = m->role == CG_ROLE_ASSISTANT && mi + 1 == conv->n_messages;
            cg_severity openai = m->role == CG_ROLE_ASSISTANT ? E : W;
            cg_severity anthropic = final_assistant ? NONE : E;
            add(&s, CG_ISSUE_EMPTY_MESSAGE, sev(&s, openai, anthropic, E, W), (int64_t)mi, -1, NULL,
                "the %s message has no content", cg_conv_role_name(m->role));
        }

        /* This message's own calls now wait for their results. */
        if (m->role == CG_ROLE_ASSISTANT)
            open_calls(&s, mi, m);
    }
    if (!s.oom)
        close_open_calls(&s, "before the end of the conversation");

    if (in->have_counts && in->context_window > 0 && !s.oom)
        check_window(&s);
    if (!s.oom && !sort_issues(&s))
        s.oom = true;
    free(s.calls);
    free(s.table);
    free(s.tool_table);
    if (s.oom) {
        cg_validate_result_free(out);
        if (err != NULL) {
            err->code = CG_RESOURCE_EXHAUSTED;
            snprintf(err->msg, sizeof err->msg, "out of memory validating the conversation");
        }
        return CG_RESOURCE_EXHAUSTED;
    }
    out->valid = out->errors == 0;
    return CG_OK;
}

void cg_validate_result_free(struct cg_validate_result *r)
{
    if (r == NULL)
        return;
    free(r->issues);
    memset(r, 0, sizeof *r);
}

cg_dialect cg_validate_dialect(cg_dialect requested, cg_conv_origin origin,
                               const struct cg_model_info *model)
{
    if (requested != CG_DIALECT_UNSPECIFIED)
        return requested;
    if (origin == CG_CONV_ORIGIN_OPENAI || origin == CG_CONV_ORIGIN_RESPONSES)
        return CG_DIALECT_OPENAI;
    if (origin == CG_CONV_ORIGIN_ANTHROPIC)
        return CG_DIALECT_ANTHROPIC;
    if (origin == CG_CONV_ORIGIN_GEMINI)
        return CG_DIALECT_GOOGLE;
    if (model != NULL && model->known && model->dialect != CG_DIALECT_UNSPECIFIED)
        return model->dialect;
    return CG_DIALECT_GENERIC;
}

const char *cg_validate_kind_name(cg_issue_kind kind)
{
    static const char *const names[] = {"UNSPECIFIED",
                                        "ORPHAN_TOOL_RESULT",
                                        "DANGLING_TOOL_CALL",
                                        "WRONG_FIRST_ROLE",
                                        "NON_ALTERNATING_ROLES",
                                        "HEADROOM_BELOW_RESERVE",
                                        "EXCEEDS_CONTEXT_WINDOW",
                                        "SYSTEM_NOT_FIRST",
                                        "DUPLICATE_TOOL_CALL_ID",
                                        "DUPLICATE_TOOL_RESULT",
                                        "EMPTY_MESSAGE",
                                        "INVALID_TOOL_ARGUMENTS",
                                        "UNKNOWN_TOOL",
                                        "PART_NOT_ALLOWED"};
    return kind >= 1 && kind <= CG_ISSUE_PART_NOT_ALLOWED ? names[kind] : "UNKNOWN";
}

const struct cg_issue *cg_validate_first_error(const struct cg_validate_result *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->issues[i].severity == CG_SEVERITY_ERROR)
            return &r->issues[i];
    return NULL;
}

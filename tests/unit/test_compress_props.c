/* test_compress_props.c - the cascade's invariants (DESIGN.md §4) over thousands of generated
 * conversations (seeded PRNG, so a failure names a reproducible seed): the output passes
 * cg_validate; user and system text parts are input parts, in order, and system text is
 * never dropped; the target (ceiling for TRIMMING) is reached whenever it is reachable; the
 * same input and boundary give byte-identical output; over a 200-turn session compressed
 * every turn the prompt prefix stays unchanged on at least 90 % of turns.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/tokdata.h"
#include "core/compress.h"
#include "core/conv_json.h"
#include "core/tok.h"
#include "core/validate.h"

struct rng {
    uint64_t s;
};

static uint64_t next(struct rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static unsigned pick(struct rng *r, unsigned n)
{
    return (unsigned)(next(r) % n);
}

static const char *const words[] = {"the",  "build", "fails", "on",     "runner", "timeout",
                                    "250",  "ms",    "in",    "config", "file",   "db-91",
                                    "port", "5432",  "why",   "error",  "stack",  "trace",
                                    "ok",   "fix",   "retry", "queue",  "über",   "日本語"};

/* n random words into buf (NUL-terminated); returns the length. */
static size_t text(struct rng *r, char *buf, size_t cap, size_t n_words)
{
    size_t len = 0;
    for (size_t i = 0; i < n_words && len + 32 < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? " " : "",
                                words[pick(r, sizeof words / sizeof words[0])]);
    buf[len] = '\0';
    return len;
}

static size_t json_blob(struct rng *r, char *buf, size_t cap, size_t n)
{
    size_t len = 0;
    bool array = pick(r, 2);
    len += (size_t)snprintf(buf, cap, array ? "[" : "{");
    for (size_t i = 0; i < n && len + 200 < cap; i++) {
        if (array)
            len += (size_t)snprintf(buf + len, cap - len, "%s{\"id\":%zu,\"name\":\"item %zu\"}",
                                    i ? "," : "", i, i * 7);
        else
            len += (size_t)snprintf(buf + len, cap - len, "%s\"k%zu\":\"value %zu %s\"",
                                    i ? "," : "", i, i, words[pick(r, 20)]);
    }
    len += (size_t)snprintf(buf + len, cap - len, array ? "]" : "}");
    return len;
}

static void add_text(struct cg_conv *c, cg_role role, const char *s, size_t len)
{
    struct cg_message *m;
    struct cg_part *p;
    struct cg_err err;
    cr_assert_eq(cg_conv_add_message(c, role, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(c, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(c, s, len, &p->u.text, &err), CG_OK);
}

#define BUF (64 * 1024)

/* A conversation of `turns` turns with tool pairs, long and JSON outputs, reasoning, writes,
 * and (when `broken`) an orphan result and a dangling call to repair. */
static struct cg_conv *generate(struct rng *r, int turns, bool broken)
{
    struct cg_conv *c = cg_conv_new(NULL);
    static char buf[BUF];
    struct cg_err err;
    size_t len;
    if (pick(r, 4) != 0) {
        len = text(r, buf, BUF, 5 + pick(r, 40));
        add_text(c, CG_ROLE_SYSTEM, buf, len);
    }
    int call_id = 0;
    for (int t = 0; t < turns; t++) {
        len = text(r, buf, BUF, 1 + (pick(r, 10) == 0 ? 300 + pick(r, 600) : pick(r, 30)));
        add_text(c, CG_ROLE_USER, buf, len);
        int steps = (int)pick(r, 4);
        for (int s = 0; s < steps; s++) {
            struct cg_message *m;
            struct cg_part *p;
            cr_assert_eq(cg_conv_add_message(c, CG_ROLE_ASSISTANT, &m, &err), CG_OK);
            if (pick(r, 3) == 0) {
                cr_assert_eq(cg_conv_add_part(c, m, CG_PART_REASONING, &p, &err), CG_OK);
                len = text(r, buf, BUF, 10 + pick(r, 50));
                cr_assert_eq(cg_conv_str(c, buf, len, &p->u.reasoning.text, &err), CG_OK);
            }
            if (pick(r, 2) == 0) {
                cr_assert_eq(cg_conv_add_part(c, m, CG_PART_TEXT, &p, &err), CG_OK);
                len = text(r, buf, BUF, 3 + pick(r, 60));
                cr_assert_eq(cg_conv_str(c, buf, len, &p->u.text, &err), CG_OK);
            }
            int calls = 1 + (int)pick(r, 3);
            int first = call_id;
            for (int k = 0; k < calls; k++) {
                m = &c->messages[c->n_messages - 1];
                cr_assert_eq(cg_conv_add_part(c, m, CG_PART_TOOL_CALL, &p, &err), CG_OK);
                char id[32];
                int n = snprintf(id, sizeof id, "call_%d", call_id++);
                cr_assert_eq(cg_conv_str(c, id, (size_t)n, &p->u.tool_call.id, &err), CG_OK);
                bool write = pick(r, 4) == 0;
                const char *name = write ? "write_file" : "read_file";
                cr_assert_eq(cg_conv_str(c, name, strlen(name), &p->u.tool_call.name, &err), CG_OK);
                char args[4096];
                char body[3000];
                text(r, body, sizeof body, write ? 50 + pick(r, 300) : 1);
                n = snprintf(args, sizeof args, "{\"path\":\"src/f%d.c\",\"content\":\"%s\"}", k,
                             body);
                cr_assert_eq(cg_conv_str(c, args, (size_t)n, &p->u.tool_call.arguments, &err),
                             CG_OK);
            }
            bool dangling = broken && pick(r, 8) == 0;
            for (int k = 0; k < calls; k++) {
                if (dangling && k == calls - 1)
                    break;
                cr_assert_eq(cg_conv_add_message(c, CG_ROLE_TOOL, &m, &err), CG_OK);
                cr_assert_eq(cg_conv_add_part(c, m, CG_PART_TOOL_RESULT, &p, &err), CG_OK);
                char id[32];
                int n = snprintf(id, sizeof id, "call_%d", first + k);
                cr_assert_eq(cg_conv_str(c, id, (size_t)n, &p->u.tool_result.tool_call_id, &err),
                             CG_OK);
                unsigned kind = pick(r, 6);
                if (kind == 0)
                    len = json_blob(r, buf, BUF, 50 + pick(r, 800));
                else if (kind == 1)
                    len = text(r, buf, BUF, 2000 + pick(r, 4000));
                else
                    len = text(r, buf, BUF, 5 + pick(r, 100));
                cr_assert_eq(cg_conv_str(c, buf, len, &p->u.tool_result.content, &err), CG_OK);
            }
            if (broken && pick(r, 10) == 0) {
                cr_assert_eq(cg_conv_add_message(c, CG_ROLE_TOOL, &m, &err), CG_OK);
                cr_assert_eq(cg_conv_add_part(c, m, CG_PART_TOOL_RESULT, &p, &err), CG_OK);
                cr_assert_eq(cg_conv_str(c, "ghost", 5, &p->u.tool_result.tool_call_id, &err),
                             CG_OK);
                cr_assert_eq(cg_conv_str(c, "orphan", 6, &p->u.tool_result.content, &err), CG_OK);
            }
        }
        len = text(r, buf, BUF, 2 + pick(r, 80));
        add_text(c, CG_ROLE_ASSISTANT, buf, len);
    }
    return c;
}

static char *to_json(const struct cg_conv *conv)
{
    char *out;
    size_t len;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, CG_CONV_JSON_OPENAI, &out, &len, &err), CG_OK, "%s",
                 err.msg);
    return out;
}

static bool is_ctxguard_text(const struct cg_str *s)
{
    return (s->len >= 9 && memcmp(s->ptr, "[ctxguard", 9) == 0) ||
           (s->len == 20 && memcmp(s->ptr, "[conversation start]", 20) == 0);
}

/* User and system text parts of the output are input ones, in order; every system part of
 * the input is in the output. */
static void check_text_kept(const struct cg_conv *in, const struct cg_conv *out, uint64_t seed)
{
    size_t im = 0, ip = 0;
    size_t system_in = 0, system_out = 0;
    for (size_t i = 0; i < in->n_messages; i++)
        if (cg_conv_role_is_system(in->messages[i].role))
            system_in += in->messages[i].n_parts;
    for (size_t m = 0; m < out->n_messages; m++) {
        const struct cg_message *om = &out->messages[m];
        if (om->role != CG_ROLE_USER && !cg_conv_role_is_system(om->role))
            continue;
        for (size_t k = 0; k < om->n_parts; k++) {
            if (om->parts[k].kind != CG_PART_TEXT || is_ctxguard_text(&om->parts[k].u.text))
                continue;
            if (cg_conv_role_is_system(om->role))
                system_out++;
            const struct cg_str *want = &om->parts[k].u.text;
            bool found = false;
            for (; im < in->n_messages && !found; im++, ip = 0) {
                const struct cg_message *m2 = &in->messages[im];
                if (m2->role != om->role) {
                    continue;
                }
                for (; ip < m2->n_parts; ip++) {
                    const struct cg_part *p = &m2->parts[ip];
                    if (p->kind == CG_PART_TEXT && p->u.text.len == want->len &&
                        memcmp(p->u.text.ptr, want->ptr, want->len) == 0) {
                        found = true;
                        ip++;
                        break;
                    }
                }
                if (found)
                    break;
            }
            cr_assert(found, "seed %llu: output message %zu part %zu is not an input text",
                      (unsigned long long)seed, m, k);
        }
    }
    cr_assert_eq(system_in, system_out, "seed %llu: system text dropped", (unsigned long long)seed);
}

static struct cg_tok_encoding *load_o200k(void)
{
    struct cg_tokdata data;
    struct cg_err err = {0};
    if (cg_tokdata_load(NULL, "o200k_base", &data, &err) != CG_OK)
        return NULL;
    struct cg_tok_encoding *enc = NULL;
    if (cg_tok_encoding_new(data.data, data.len, &enc, &err) != CG_OK)
        enc = NULL;
    cg_tokdata_cleanup(&data);
    return enc;
}

struct setup {
    struct cg_compress_count_state state;
    struct cg_compress_input in;
    struct cg_compress_policy p;
    struct cg_model_info model;
};

static void make_setup(struct setup *s, struct rng *r, const struct cg_conv *c,
                       const struct cg_tok_encoding *enc)
{
    memset(s, 0, sizeof *s);
    s->state.enc = enc;
    s->state.profile = CG_PROFILE_OPENAI;
    cg_models_lookup(pick(r, 2) ? "gpt-4o" : "claude-sonnet-4", &s->model);
    const cg_dialect dialects[] = {CG_DIALECT_OPENAI, CG_DIALECT_ANTHROPIC, CG_DIALECT_GENERIC};
    s->in.conv = c;
    s->in.model = &s->model;
    s->in.dialect = dialects[pick(r, 3)];
    s->in.context_window = 2000 + pick(r, 60000);
    s->in.offload = pick(r, 2);
    cg_compress_counter_init(&s->in.counter, &s->state, c);
    cg_compress_policy_defaults(&s->p,
                                pick(r, 3) == 0 ? CG_STRATEGY_TRIMMING : CG_STRATEGY_SUMMARIZING,
                                cg_preset_get(1 + (int)pick(r, 3)));
    s->p.reserved_output_tokens = pick(r, 2) ? 0 : 1000;
}

/* A conservative floor: what is left when every assistant and tool message is trimmed or
 * dropped and every user and system message kept. */
static int64_t floor_tokens(const struct setup *s, const struct cg_conv *c)
{
    int64_t total = s->in.counter.fixed_tokens;
    for (size_t i = 0; i < c->n_messages; i++) {
        const struct cg_message *m = &c->messages[i];
        if (m->role == CG_ROLE_USER || cg_conv_role_is_system(m->role))
            total += s->in.counter.count_message(s->in.counter.ctx, m);
        else
            total += 40;
    }
    return total + 40;
}

/* A counter cg_compress_run does not recognise as its built-in one: the same counts without
 * the run's count memo. */
static int64_t plain_count(void *ctx, const struct cg_message *m)
{
    const struct cg_compress_counter *inner = ctx;
    return inner->count_message(inner->ctx, m);
}

Test(compress_props, generated_conversations_keep_every_invariant, .timeout = 240)
{
    struct cg_tok_encoding *enc = load_o200k();
    int reachable = 0, reached = 0, triggered = 0;
    const int N = 2500;
    for (uint64_t seed = 1; seed <= (uint64_t)N; seed++) {
        struct rng r = {seed * 0x9E3779B97F4A7C15ull + 1};
        struct cg_conv *c = generate(&r, 1 + (int)pick(&r, 25), pick(&r, 3) == 0);
        struct setup s;
        make_setup(&s, &r, c, seed % 10 == 0 ? enc : NULL);
        s.in.trim_boundary = pick(&r, 4) == 0 ? pick(&r, (unsigned)c->n_messages + 1) : 0;
        struct cg_compress_result a, b;
        struct cg_err err = {0};
        cr_assert_eq(cg_compress_run(&s.in, &s.p, &a, &err), CG_OK, "seed %llu: %s",
                     (unsigned long long)seed, err.msg);
        /* Valid for the dialect. */
        struct cg_validate_input vin = {.conv = a.conv, .dialect = s.in.dialect};
        struct cg_validate_result vr;
        cr_assert_eq(cg_validate(&vin, &vr, &err), CG_OK);
        cr_assert(vr.valid, "seed %llu: output invalid: %s", (unsigned long long)seed,
                  vr.n ? vr.issues[0].message : "");
        cg_validate_result_free(&vr);
        check_text_kept(c, a.conv, seed);
        /* Report consistency. */
        cr_assert_eq(a.messages_after, (int64_t)a.conv->n_messages);
        cr_assert_eq(a.target_reached, !a.triggered || a.tokens_after <= a.target_tokens);
        cr_assert_geq(a.boundary_after, a.boundary_before);
        if (a.triggered)
            triggered++;
        /* Reached whenever reachable. */
        int64_t goal = s.p.strategy == CG_STRATEGY_TRIMMING ? a.ceiling_tokens : a.target_tokens;
        if (a.triggered && floor_tokens(&s, c) <= goal) {
            reachable++;
            cr_assert_leq(a.tokens_after, goal, "seed %llu: %lld > %lld (strategy %d)",
                          (unsigned long long)seed, (long long)a.tokens_after, (long long)goal,
                          s.p.strategy);
            reached++;
        }
        /* Deterministic, and the same without the run's count memo (2 seeds in 3, exact
         * counts among them). */
        struct cg_compress_input again = s.in;
        if (seed % 3 != 1) {
            again.counter.count_message = plain_count;
            again.counter.ctx = &s.in.counter;
        }
        cr_assert_eq(cg_compress_run(&again, &s.p, &b, &err), CG_OK);
        char *ja = to_json(a.conv), *jb = to_json(b.conv);
        cr_assert_str_eq(ja, jb, "seed %llu: two runs differ", (unsigned long long)seed);
        cr_assert_eq(a.boundary_after, b.boundary_after);
        cr_assert_eq(a.tokens_before, b.tokens_before, "seed %llu", (unsigned long long)seed);
        cr_assert_eq(a.tokens_after, b.tokens_after, "seed %llu", (unsigned long long)seed);
        cr_assert_eq(a.n_layers, b.n_layers);
        for (size_t k = 0; k < a.n_layers; k++)
            cr_assert(a.layers[k].tokens_before == b.layers[k].tokens_before &&
                          a.layers[k].tokens_after == b.layers[k].tokens_after,
                      "seed %llu: layer %zu counts differ", (unsigned long long)seed, k);
        free(ja);
        free(jb);
        cg_compress_result_free(&a);
        cg_compress_result_free(&b);
        cg_conv_free(c);
    }
    cr_log_info("%d conversations, %d triggered, %d reachable, %d reached", N, triggered, reachable,
                reached);
    cr_assert_gt(triggered, N / 4, "the generator must exercise the cascade");
    cr_assert_gt(reachable, N / 8);
    cg_tok_encoding_free(enc);
}

/* Output messages [0, n) of the previous turn, as JSON texts, against this turn's. */
static bool prefix_kept(const struct cg_conv *prev, const struct cg_conv *cur)
{
    if (prev == NULL)
        return true;
    if (cur->n_messages < prev->n_messages)
        return false;
    struct cg_conv *a = cg_conv_new(NULL), *b = cg_conv_new(NULL);
    struct cg_err err;
    for (size_t i = 0; i < prev->n_messages; i++) {
        cr_assert_eq(cg_conv_copy_message(a, &prev->messages[i], &err), CG_OK);
        cr_assert_eq(cg_conv_copy_message(b, &cur->messages[i], &err), CG_OK);
    }
    char *ja = to_json(a), *jb = to_json(b);
    bool same = strcmp(ja, jb) == 0;
    free(ja);
    free(jb);
    cg_conv_free(a);
    cg_conv_free(b);
    return same;
}

Test(compress_props, long_session_keeps_the_prompt_prefix, .timeout = 240)
{
    struct rng r = {42};
    struct cg_conv *full = generate(&r, 200, false);
    /* The turns: the conversation up to each user message. */
    size_t starts[256], n_turns = 0;
    for (size_t i = 0; i < full->n_messages && n_turns < 256; i++)
        if (full->messages[i].role == CG_ROLE_USER)
            starts[n_turns++] = i;
    cr_assert_eq(n_turns, 200);
    struct cg_conv *prev = NULL;
    int64_t boundary = 0;
    int kept = 0, moves = 0, triggered = 0;
    for (size_t t = 1; t <= n_turns; t++) {
        size_t end = t < n_turns ? starts[t] : full->n_messages;
        struct cg_conv *c = cg_conv_new(NULL);
        struct cg_err err = {0};
        for (size_t i = 0; i < end; i++)
            cr_assert_eq(cg_conv_copy_message(c, &full->messages[i], &err), CG_OK);
        struct setup s;
        memset(&s, 0, sizeof s);
        s.state.profile = CG_PROFILE_OPENAI;
        cg_models_lookup("gpt-4o", &s.model);
        s.in.conv = c;
        s.in.model = &s.model;
        s.in.dialect = CG_DIALECT_OPENAI;
        s.in.context_window = 128000;
        s.in.trim_boundary = boundary;
        cg_compress_counter_init(&s.in.counter, &s.state, c);
        cg_compress_policy_defaults(&s.p, CG_STRATEGY_TRIMMING, NULL);
        struct cg_compress_result res;
        cr_assert_eq(cg_compress_run(&s.in, &s.p, &res, &err), CG_OK, "turn %zu: %s", t, err.msg);
        cr_assert_leq(res.tokens_after, res.ceiling_tokens, "turn %zu", t);
        if (prefix_kept(prev, res.conv))
            kept++;
        moves += res.boundary_moved;
        triggered += res.triggered;
        boundary = res.boundary_after;
        cg_conv_free(prev);
        prev = res.conv;
        res.conv = NULL;
        cg_compress_result_free(&res);
        cg_conv_free(c);
    }
    cr_log_info("200 turns: prefix kept on %d, %d boundary moves, %d triggered", kept, moves,
                triggered);
    cr_assert_gt(triggered, 50, "the session must grow past the trigger");
    cr_assert_gt(moves, 0);
    cr_assert_geq(kept, 180, "prefix unchanged on %d of 200 turns", kept);
    cg_conv_free(prev);
    cg_conv_free(full);
}

static bool same_str(const struct cg_str *a, const struct cg_str *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

/* Whether b is a as it came in: role and every part (reasoning aside: a model that takes
 * none gets none, pinned or not). */
static bool same_message(const struct cg_message *a, const struct cg_message *b)
{
    size_t i = 0, j = 0;
    if (a->role != b->role)
        return false;
    for (;; i++, j++) {
        while (i < a->n_parts && a->parts[i].kind == CG_PART_REASONING)
            i++;
        while (j < b->n_parts && b->parts[j].kind == CG_PART_REASONING)
            j++;
        if (i == a->n_parts || j == b->n_parts)
            return i == a->n_parts && j == b->n_parts;
        const struct cg_part *p = &a->parts[i], *q = &b->parts[j];
        if (p->kind != q->kind)
            return false;
        bool same =
            p->kind == CG_PART_TEXT ? same_str(&p->u.text, &q->u.text)
            : p->kind == CG_PART_TOOL_CALL
                ? same_str(&p->u.tool_call.id, &q->u.tool_call.id) &&
                      same_str(&p->u.tool_call.name, &q->u.tool_call.name) &&
                      same_str(&p->u.tool_call.arguments, &q->u.tool_call.arguments)
            : p->kind == CG_PART_TOOL_RESULT
                ? same_str(&p->u.tool_result.tool_call_id, &q->u.tool_result.tool_call_id) &&
                      same_str(&p->u.tool_result.content, &q->u.tool_result.content)
                : true;
        if (!same)
            return false;
    }
}

/* A summarizer that answers a short text, so that the summary layer runs. */
static cg_status short_summary(void *ctx, const struct cg_conv *conv, size_t from, size_t to,
                               int64_t target_tokens, char **out, struct cg_err *err)
{
    (void)ctx;
    (void)conv;
    (void)target_tokens;
    (void)err;
    char text[64];
    snprintf(text, sizeof text, "messages %zu to %zu happened", from, to);
    *out = strdup(text);
    return *out != NULL ? CG_OK : CG_NOMEM;
}

/* Message.pinned: whatever the strategy, window, offload or summarizer, every pinned input
 * message is in the output, unchanged, and a target the pins make unreachable is said. */
Test(compress_props, pinned_messages_are_kept_verbatim, .timeout = 240)
{
    const int N = 1500;
    int pinned_total = 0, pressed = 0, unreachable_said = 0;
    for (uint64_t seed = 1; seed <= (uint64_t)N; seed++) {
        struct rng r = {seed * 0xD1B54A32D192ED03ull + 7};
        struct cg_conv *c = generate(&r, 2 + (int)pick(&r, 25), false);
        unsigned odds = 2 + pick(&r, 8); /* about one message in `odds` pinned */
        for (size_t i = 0; i < c->n_messages; i++)
            if (!cg_conv_role_is_system(c->messages[i].role) && pick(&r, odds) == 0) {
                c->messages[i].pinned = true;
                pinned_total++;
            }
        struct setup s;
        make_setup(&s, &r, c, NULL);
        s.in.context_window = 1000 + pick(&r, 20000); /* mostly under pressure */
        if (pick(&r, 2) == 0)
            s.in.summarize = short_summary;
        s.in.force = pick(&r, 4) == 0;
        struct cg_compress_result a;
        struct cg_err err = {0};
        cr_assert_eq(cg_compress_run(&s.in, &s.p, &a, &err), CG_OK, "seed %llu: %s",
                     (unsigned long long)seed, err.msg);
        if (a.triggered)
            pressed++;
        for (size_t src = 0; src < c->n_messages; src++) {
            if (!c->messages[src].pinned)
                continue;
            int64_t at = -1;
            for (size_t o = 0; o < a.conv->n_messages && at < 0; o++)
                if (a.source_indexes[o] == (int64_t)src)
                    at = (int64_t)o;
            cr_assert_geq(at, 0, "seed %llu: pinned message %zu dropped", (unsigned long long)seed,
                          src);
            cr_assert(same_message(&c->messages[src], &a.conv->messages[at]),
                      "seed %llu: pinned message %zu changed", (unsigned long long)seed, src);
        }
        bool pins_left = false;
        for (size_t o = 0; o < a.conv->n_messages; o++)
            pins_left = pins_left || a.conv->messages[o].pinned;
        if (a.triggered && !a.target_reached) {
            bool said = false;
            for (size_t w = 0; w < a.n_warnings; w++)
                said = said || (a.warnings[w].code == CG_CWARN_TARGET_UNREACHABLE &&
                                (!pins_left || strstr(a.warnings[w].message, "pinned") != NULL));
            cr_assert(said, "seed %llu: target missed without a warning naming the pins",
                      (unsigned long long)seed);
            unreachable_said++;
        }
        cg_compress_result_free(&a);
        cg_conv_free(c);
    }
    cr_log_info("%d conversations, %d pinned messages, %d triggered, %d unreachable", N,
                pinned_total, pressed, unreachable_said);
    cr_assert_gt(pressed, N / 2, "the generator must press the pins");
}

/* The span [*first, *last] a summary part names in its head, when s is one. */
static bool summary_span(const struct cg_str *s, long long *first, long long *last)
{
    static const char head[] = "[ctxguard summary of ";
    if (s->len < sizeof head || memcmp(s->ptr, head, sizeof head - 1) != 0)
        return false;
    const char *p = strstr(s->ptr, "messages ");
    return p != NULL && sscanf(p, "messages %lld-%lld", first, last) == 2;
}

/* Issue 16, item 2: whatever the strategy, window, pins or escalation, every user text of the
 * input is in the output verbatim or inside the span a summary message names; with no
 * summarizer none goes at all. */
Test(compress_props, user_turns_go_only_under_a_summary_naming_them, .timeout = 240)
{
    const int N = 1500;
    int summarized = 0, pressed = 0, trimming_pressed = 0;
    for (uint64_t seed = 1; seed <= (uint64_t)N; seed++) {
        struct rng r = {seed * 0x94D049BB133111EBull + 3};
        struct cg_conv *c = generate(&r, 2 + (int)pick(&r, 40), pick(&r, 4) == 0);
        for (size_t i = 0; i < c->n_messages; i++)
            if (!cg_conv_role_is_system(c->messages[i].role) && pick(&r, 12) == 0)
                c->messages[i].pinned = true;
        struct setup s;
        make_setup(&s, &r, c, NULL);
        s.in.context_window = 800 + pick(&r, 12000);
        bool with_summary = pick(&r, 3) != 0;
        if (with_summary)
            s.in.summarize = short_summary;
        s.in.history_positions = pick(&r, 2);
        s.in.force = pick(&r, 4) == 0;
        s.p.max_escalation_passes = pick(&r, 4);
        struct cg_compress_result a;
        struct cg_err err = {0};
        cr_assert_eq(cg_compress_run(&s.in, &s.p, &a, &err), CG_OK, "seed %llu: %s",
                     (unsigned long long)seed, err.msg);
        if (a.triggered) {
            pressed++;
            trimming_pressed += s.p.strategy == CG_STRATEGY_TRIMMING;
        }
        long long first = -1, last = -2;
        int summaries = 0;
        for (size_t o = 0; o < a.conv->n_messages; o++) {
            const struct cg_message *m = &a.conv->messages[o];
            for (size_t k = 0; k < m->n_parts; k++)
                if (m->role == CG_ROLE_USER && m->parts[k].kind == CG_PART_TEXT &&
                    summary_span(&m->parts[k].u.text, &first, &last))
                    summaries++;
        }
        cr_assert_leq(summaries, 1, "seed %llu: one summary per call", (unsigned long long)seed);
        cr_assert_eq(summaries, a.has_summary, "seed %llu", (unsigned long long)seed);
        if (a.has_summary) {
            summarized++;
            cr_assert(first == a.summary_first && last == a.summary_last,
                      "seed %llu: the head names %lld-%lld, the report %lld-%lld",
                      (unsigned long long)seed, first, last, (long long)a.summary_first,
                      (long long)a.summary_last);
        }
        for (size_t src = 0; src < c->n_messages; src++) {
            const struct cg_message *im = &c->messages[src];
            if (im->role != CG_ROLE_USER)
                continue;
            for (size_t k = 0; k < im->n_parts; k++) {
                if (im->parts[k].kind != CG_PART_TEXT)
                    continue;
                const struct cg_str *want = &im->parts[k].u.text;
                bool kept = false;
                for (size_t o = 0; o < a.conv->n_messages && !kept; o++) {
                    const struct cg_message *om = &a.conv->messages[o];
                    for (size_t q = 0; q < om->n_parts && !kept; q++)
                        kept = om->role == CG_ROLE_USER && om->parts[q].kind == CG_PART_TEXT &&
                               same_str(&om->parts[q].u.text, want);
                }
                bool covered = (long long)src >= first && (long long)src <= last;
                cr_assert(kept || (with_summary && covered),
                          "seed %llu: user message %zu is neither kept nor under a summary "
                          "(summary %lld-%lld)",
                          (unsigned long long)seed, src, first, last);
            }
        }
        cg_compress_result_free(&a);
        cg_conv_free(c);
    }
    cr_log_info("%d conversations, %d triggered (%d trimming), %d summarized", N, pressed,
                trimming_pressed, summarized);
    cr_assert_gt(summarized, N / 5, "the generator must make the window summarize");
    cr_assert_gt(trimming_pressed, N / 20);
}

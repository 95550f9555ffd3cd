/* summary.c - the extractive summarizer: sentences of the conversation scored and chosen
 * into the six sections within the target tokens (see summary.h for what it does and why). */
#include "core/summary.h"

#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/estimate.h"
#include "core/json_fast.h"
#include "core/summary_internal.h"
#include "core/summary_words.h"

#define SENTENCES_MAX 200000             /* sentences considered (hostile input stays bounded) */
#define TOOL_SCAN_PER_RESULT (64u << 10) /* bytes of one tool result mined for details */
#define TOOL_SCAN_TOTAL (4u << 20)       /* bytes of all tool results mined */
#define ITEM_MAX 240                     /* bytes of one item before it is cut */
#define INTENT_MAX 280                   /* bytes of the session intent */
#define TOOL_LINE_MIN 12
#define TOOL_LINE_MAX 300
#define FOCUS_TERMS_MAX 16
#define PATHS_MAX 6
#define TOOL_LINE_BYTES 160 /* the tool-activity line stops naming files past this */
#define TOOL_NAMES_MAX 8

struct sent {
    const char *p;
    size_t len;
    uint32_t msg;
    uint32_t order;
    cg_role role;
    bool from_tool;
    uint64_t hash;
    uint32_t freq; /* occurrences of the same text (on the representative) */
    bool repeat;   /* not the first occurrence */
    double spec;
    unsigned focus_hits; /* terms of the caller's focus it names */
    bool fact;           /* a user's fact (user_fact), decided once by score() */
    struct cg__summary_words w;
    double score;
    int section;
    bool chosen, mandatory;
    int64_t cost;
    char *item; /* the item text (malloc'd) once considered */
};

struct tool_count {
    const char *name;
    size_t len;
    unsigned count;
};

struct st {
    const struct cg_conv *conv;
    const struct cg_summary_opts *opts;
    size_t from, to;
    struct sent *s;
    size_t n, cap;
    bool oom;
    char focus[FOCUS_TERMS_MAX][32];
    size_t n_focus;
    struct tool_count tools[TOOL_NAMES_MAX];
    size_t n_tools;
    unsigned other_tool_calls;
    const char *paths[PATHS_MAX];
    size_t path_len[PATHS_MAX];
    size_t n_paths;
    size_t tool_bytes;
    int64_t target;
};

static int64_t default_count(void *arg, const char *text, size_t len)
{
    (void)arg;
    return cg_estimate_text(CG_PROFILE_OPENAI, text, len);
}

static int64_t count(const struct st *st, const char *text, size_t len)
{
    if (st->opts->count != NULL)
        return st->opts->count(st->opts->count_arg, text, len);
    return default_count(NULL, text, len);
}

void cg_summary_init(struct cg_summary *summary)
{
    memset(summary, 0, sizeof *summary);
    strcpy(summary->language, "en");
}

void cg_summary_cleanup(struct cg_summary *summary)
{
    if (summary == NULL)
        return;
    free(summary->text);
    for (int s = 0; s < CG_SUMMARY_SECTION_COUNT; s++) {
        for (size_t i = 0; i < summary->sections[s].n; i++)
            free(summary->sections[s].items[i]);
        free(summary->sections[s].items);
    }
    char lang[CG_SUMMARY_LANG_MAX];
    memcpy(lang, summary->language, sizeof lang);
    cg_summary_init(summary);
    memcpy(summary->language, lang, sizeof lang);
}

/* ------------------------------------------------------------------ sentences ---------- */

static uint64_t norm_hash(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ULL;
    bool space = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            space = true;
            continue;
        }
        if (space) {
            h ^= ' ';
            h *= 1099511628211ULL;
            space = false;
        }
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c + 32);
        h ^= c;
        h *= 1099511628211ULL;
    }
    return h;
}

static void trim_sentence(const char **p, size_t *len)
{
    const char *s = *p;
    size_t n = *len;
    for (;;) {
        while (n > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\r' || s[0] == '>'))
            s++, n--;
        if (n >= 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && s[1] == ' ') {
            s += 2, n -= 2;
            continue;
        }
        if (n >= 1 && s[0] == '#') {
            while (n > 0 && s[0] == '#')
                s++, n--;
            continue;
        }
        break;
    }
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        n--;
    *p = s;
    *len = n;
}

static struct sent *add_sentence(struct st *st, const char *p, size_t len, size_t msg, cg_role role,
                                 bool from_tool)
{
    trim_sentence(&p, &len);
    if (len < 4 || st->n >= SENTENCES_MAX)
        return NULL;
    if (st->n == st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 256;
        struct sent *s = realloc(st->s, cap * sizeof *s);
        if (s == NULL) {
            st->oom = true;
            return NULL;
        }
        st->s = s;
        st->cap = cap;
    }
    struct sent *s = &st->s[st->n];
    memset(s, 0, sizeof *s);
    s->p = p;
    s->len = len;
    s->msg = (uint32_t)msg;
    s->order = (uint32_t)st->n;
    s->role = role;
    s->from_tool = from_tool;
    s->section = -1;
    st->n++;
    return s;
}

/* Splits text into sentences: at line ends, at . ! ? before white space or the end, and after
 * the CJK full stop, exclamation and question marks. */
static void split_sentences(struct st *st, const char *s, size_t len, size_t msg, cg_role role)
{
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t end = 0, next = 0;
        if (c == '\n') {
            end = i, next = i + 1;
        } else if ((c == '.' || c == '!' || c == '?') &&
                   (i + 1 == len || s[i + 1] == ' ' || s[i + 1] == '\n' || s[i + 1] == '\t')) {
            end = i + 1, next = i + 1;
        } else if (c == 0xe3 && i + 2 < len && (unsigned char)s[i + 1] == 0x80 &&
                   (unsigned char)s[i + 2] == 0x82) {
            end = i + 3, next = i + 3;
        } else if (c == 0xef && i + 2 < len && (unsigned char)s[i + 1] == 0xbc &&
                   ((unsigned char)s[i + 2] == 0x81 || (unsigned char)s[i + 2] == 0x9f)) {
            end = i + 3, next = i + 3;
        } else {
            continue;
        }
        if (end > start)
            add_sentence(st, s + start, end - start, msg, role, false);
        start = next;
        i = next - 1;
    }
    if (len > start)
        add_sentence(st, s + start, len - start, msg, role, false);
}

/* An earlier ctxguard summary that a later one takes in (Compress puts it, under a head that
 * names its span, first in the user message after the span). */
#define PRIOR_HEAD "[ctxguard summary of "

/* The lines of an earlier summary as sentences, without its head and its section headings
 * (those are the summarizer's own words, not anything said: taken as sentences, the head
 * became the next summary's intent). Its items keep their order, so its intent stays first. */
static void split_prior_summary(struct st *st, const char *s, size_t len, size_t msg, cg_role role)
{
    const char *nl = memchr(s, '\n', len);
    size_t at = nl != NULL ? (size_t)(nl - s) + 1 : len; /* past the head line */
    while (at < len) {
        const char *line = s + at;
        const char *end = memchr(line, '\n', len - at);
        size_t n = end != NULL ? (size_t)(end - line) : len - at;
        if (n > 0 && line[0] != '#')
            split_sentences(st, line, n, msg, role);
        at += n + 1;
    }
}

/* Lines of a tool result that read like statements carrying details (or errors) become
 * low-weight candidates. */
static void mine_tool_result(struct st *st, const char *s, size_t len, size_t msg)
{
    if (len > TOOL_SCAN_PER_RESULT)
        len = TOOL_SCAN_PER_RESULT;
    if (st->tool_bytes >= TOOL_SCAN_TOTAL)
        return;
    if (len > TOOL_SCAN_TOTAL - st->tool_bytes)
        len = TOOL_SCAN_TOTAL - st->tool_bytes;
    st->tool_bytes += len;
    size_t pos = 0;
    while (pos < len) {
        const char *line = s + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - pos;
        pos += n + 1;
        if (n < TOOL_LINE_MIN || n > TOOL_LINE_MAX)
            continue;
        /* Mostly words: letters and spaces make at least half of the line. */
        size_t letters = 0, spaces = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)line[i];
            letters += (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
            spaces += c == ' ';
        }
        if (spaces < 2 || (letters + spaces) * 2 < n)
            continue;
        /* Statements are made of words: most space-separated pieces are letters only
         * (listings, tables and dumps are mostly numbers and symbols). */
        size_t pieces = 0, words = 0;
        for (size_t i = 0; i < n;) {
            while (i < n && line[i] == ' ')
                i++;
            if (i >= n)
                break;
            size_t start = i;
            bool all_letters = true;
            while (i < n && line[i] != ' ') {
                unsigned char c = (unsigned char)line[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80))
                    all_letters = false;
                i++;
            }
            pieces++;
            words += all_letters && i - start >= 2;
        }
        if (words * 3 < pieces * 2) {
            /* Error lines are kept whatever their shape: they say what went wrong. */
            char lc[TOOL_LINE_MAX + 3];
            struct cg__summary_words w;
            size_t ln = cg__summary_lower(line, n, lc, sizeof lc);
            cg__summary_markers(lc, ln, true, &w);
            if (!w.error)
                continue;
        }
        add_sentence(st, line, n, msg, CG_ROLE_TOOL, true);
    }
}

static void note_tool_call(struct st *st, const struct cg_tool_call *tc)
{
    size_t i;
    for (i = 0; i < st->n_tools; i++)
        if (st->tools[i].len == tc->name.len &&
            memcmp(st->tools[i].name, tc->name.ptr, tc->name.len) == 0)
            break;
    if (i == st->n_tools) {
        if (st->n_tools == TOOL_NAMES_MAX) {
            st->other_tool_calls++;
            i = SIZE_MAX;
        } else {
            st->tools[st->n_tools++] = (struct tool_count){tc->name.ptr, tc->name.len, 0};
        }
    }
    if (i != SIZE_MAX)
        st->tools[i].count++;
    /* Paths the call names: string arguments whose key speaks of a path or a file. */
    if (tc->arguments.len == 0 || tc->arguments.len > (1u << 20))
        return;
    json_t *args = cg_json_load(tc->arguments.ptr, tc->arguments.len, 0, NULL);
    if (args == NULL)
        return;
    if (json_is_object(args)) {
        const char *key;
        json_t *value;
        json_object_foreach(args, key, value)
        {
            if (!json_is_string(value) ||
                (strstr(key, "path") == NULL && strstr(key, "file") == NULL))
                continue;
            /* The path lives in the conversation's text: point into the arguments. */
            const char *v = json_string_value(value);
            size_t vl = json_string_length(value);
            if (vl == 0 || vl > 200)
                continue;
            const char *at = NULL;
            for (size_t k = 0; k + vl <= tc->arguments.len; k++)
                if (memcmp(tc->arguments.ptr + k, v, vl) == 0) {
                    at = tc->arguments.ptr + k;
                    break;
                }
            if (at == NULL)
                continue;
            size_t j;
            for (j = 0; j < st->n_paths; j++)
                if (st->path_len[j] == vl && memcmp(st->paths[j], at, vl) == 0)
                    break;
            if (j < st->n_paths) { /* move to the end: most recent last */
                for (; j + 1 < st->n_paths; j++) {
                    st->paths[j] = st->paths[j + 1];
                    st->path_len[j] = st->path_len[j + 1];
                }
                st->n_paths--;
            } else if (st->n_paths == PATHS_MAX) {
                memmove(st->paths, st->paths + 1, (PATHS_MAX - 1) * sizeof st->paths[0]);
                memmove(st->path_len, st->path_len + 1, (PATHS_MAX - 1) * sizeof st->path_len[0]);
                st->n_paths--;
            }
            st->paths[st->n_paths] = at;
            st->path_len[st->n_paths++] = vl;
        }
    }
    json_decref(args);
}

static void collect(struct st *st)
{
    for (size_t m = st->from; m < st->to && !st->oom; m++) {
        const struct cg_message *msg = &st->conv->messages[m];
        if (cg_conv_role_is_system(msg->role))
            continue;
        for (size_t p = 0; p < msg->n_parts; p++) {
            const struct cg_part *part = &msg->parts[p];
            switch (part->kind) {
            case CG_PART_TEXT:
                if (msg->role == CG_ROLE_TOOL)
                    mine_tool_result(st, part->u.text.ptr, part->u.text.len, m);
                else if (part->u.text.len >= strlen(PRIOR_HEAD) &&
                         memcmp(part->u.text.ptr, PRIOR_HEAD, strlen(PRIOR_HEAD)) == 0)
                    split_prior_summary(st, part->u.text.ptr, part->u.text.len, m, msg->role);
                else
                    split_sentences(st, part->u.text.ptr, part->u.text.len, m, msg->role);
                break;
            case CG_PART_TOOL_CALL:
                note_tool_call(st, &part->u.tool_call);
                break;
            case CG_PART_TOOL_RESULT:
                mine_tool_result(st, part->u.tool_result.content.ptr,
                                 part->u.tool_result.content.len, m);
                break;
            default:
                break;
            }
        }
    }
}

/* ------------------------------------------------------------------ scoring ------------ */

static void count_repeats(struct st *st)
{
    size_t size = 16;
    while (size < st->n * 2)
        size *= 2;
    size_t *table = calloc(size, sizeof *table);
    if (table == NULL) {
        st->oom = true;
        return;
    }
    for (size_t i = 0; i < st->n; i++) {
        struct sent *s = &st->s[i];
        s->hash = norm_hash(s->p, s->len);
        size_t h = (size_t)s->hash & (size - 1);
        for (;;) {
            if (table[h] == 0) {
                table[h] = i + 1;
                s->freq = 1;
                break;
            }
            struct sent *rep = &st->s[table[h] - 1];
            if (rep->hash == s->hash) {
                rep->freq++;
                s->repeat = true;
                break;
            }
            h = (h + 1) & (size - 1);
        }
    }
    free(table);
}

static void parse_focus(struct st *st)
{
    const char *f = st->opts->focus;
    size_t len = f != NULL ? st->opts->focus_len : 0;
    size_t i = 0;
    while (i < len && st->n_focus < FOCUS_TERMS_MAX) {
        while (i < len && (f[i] == ' ' || f[i] == ',' || f[i] == '\n' || f[i] == '\t'))
            i++;
        size_t start = i;
        while (i < len && !(f[i] == ' ' || f[i] == ',' || f[i] == '\n' || f[i] == '\t'))
            i++;
        size_t n = i - start;
        if (n >= 3 && n < sizeof st->focus[0] - 1) {
            for (size_t k = 0; k < n; k++) {
                unsigned char c = (unsigned char)f[start + k];
                st->focus[st->n_focus][k] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            }
            st->focus[st->n_focus][n] = '\0';
            st->n_focus++;
        }
    }
}

static bool is_word_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether term occurs in lc[0..n) as a whole word (ASCII word bytes around it differ). */
static bool has_term(const char *lc, size_t n, const char *term)
{
    size_t tn = strlen(term);
    const char *at = lc;
    while ((at = memmem(at, n - (size_t)(at - lc), term, tn)) != NULL) {
        bool left = at == lc || !is_word_byte((unsigned char)at[-1]) ||
                    !is_word_byte((unsigned char)term[0]);
        bool right = (size_t)(at - lc) + tn >= n || !is_word_byte((unsigned char)at[tn]) ||
                     !is_word_byte((unsigned char)term[tn - 1]);
        if (left && right)
            return true;
        at++;
    }
    return false;
}

/* Whether a sentence is prose someone wrote rather than a pasted line of output: it starts
 * with a word (not a timestamp, a bracket or a quote), names no log level, and has words of
 * lower-case letters (or, in scripts without them, letters past ASCII). */
static bool prose(const struct sent *s)
{
    static const char *const levels[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE", "FATAL"};
    unsigned char c0 = s->len > 0 ? (unsigned char)s->p[0] : 0;
    if (c0 == 0 || (c0 >= '0' && c0 <= '9') || strchr("[{<(\"'|#>$", c0) != NULL)
        return false;
    size_t words = 0, high = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->p[i];
        high += c >= 0x80;
        bool start = i == 0 || s->p[i - 1] == ' ';
        if (start && c >= 'a' && c <= 'z' && i + 1 < s->len && s->p[i + 1] >= 'a' &&
            s->p[i + 1] <= 'z')
            words++;
        if (start && c >= 'A' && c <= 'Z')
            for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
                size_t n = strlen(levels[k]);
                if (i + n <= s->len && memcmp(s->p + i, levels[k], n) == 0 &&
                    (i + n == s->len || s->p[i + n] == ' ' || s->p[i + n] == ']' ||
                     s->p[i + n] == ':'))
                    return false;
            }
    }
    return words >= 3 || high >= 6;
}

/* Whether a sentence names something: a capitalized word past its first (a person, a
 * product) or a hyphenated name ("geo-lookup"). */
static bool names_something(const struct sent *s)
{
    for (size_t i = 1; i + 2 < s->len; i++) {
        unsigned char c = (unsigned char)s->p[i], n = (unsigned char)s->p[i + 1];
        bool start = s->p[i - 1] == ' ' && !(i >= 2 && strchr(".!?", s->p[i - 2]) != NULL);
        if (start && c >= 'A' && c <= 'Z' && n >= 'a' && n <= 'z')
            return true;
        if (c == '-' && isalpha((unsigned char)s->p[i - 1]) && isalpha(n))
            return true;
    }
    return false;
}

/* A user's sentence of prose with specifics (names, numbers, paths, versions) or a
 * decision: what the user told the agent, which no later turn may repeat. score() decides it
 * once per sentence (s->fact); sorting reads the flag. */
static bool user_fact(const struct sent *s)
{
    return s->role == CG_ROLE_USER && !s->from_tool && !s->repeat &&
           (s->spec >= 2 || s->w.decision || names_something(s)) && prose(s);
}

static void score(struct st *st)
{
    char lc[512];
    double total = st->n > 0 ? (double)st->n : 1;
    for (size_t i = 0; i < st->n; i++) {
        struct sent *s = &st->s[i];
        if (s->repeat)
            continue;
        size_t n = cg__summary_lower(s->p, s->len, lc, sizeof lc);
        cg__summary_markers(lc, n, s->from_tool, &s->w);
        s->spec = cg__summary_spec(s->p, s->len);
        double v = s->spec;
        if (s->w.decision)
            v += 4;
        if (s->w.progress && s->role == CG_ROLE_ASSISTANT)
            v += 1;
        if (s->w.next)
            v += 1;
        if (s->role == CG_ROLE_USER)
            v += names_something(s) ? 3 : 1; /* a user naming someone or something */
        s->fact = user_fact(s);
        unsigned hits = 0;
        for (size_t f = 0; f < st->n_focus && hits < 3; f++)
            if (has_term(lc, n, st->focus[f]))
                hits++;
        v += 4.0 * hits;
        s->focus_hits = hits;
        v += (double)s->order / total; /* later wins a tie: it is closer to now */
        if (s->from_tool) {
            if (s->w.error)
                v += 2;
            v *= 0.4;
            /* Progress and next-step words in tool output are not the session's. */
            s->w.progress = s->w.next = s->w.decision = false;
        }
        if (s->freq >= 3)
            v /= (double)(s->freq - 1); /* said again and again: boilerplate */
        s->score = v;
        bool content = s->spec >= 2 || s->w.decision || hits > 0 || (s->from_tool && s->w.error);
        if (s->w.decision && !s->from_tool)
            s->section = CG_SUMMARY_DECISIONS;
        else if (s->w.progress && s->role == CG_ROLE_ASSISTANT && (content || s->freq < 3))
            s->section = CG_SUMMARY_PROGRESS;
        else if (s->w.next && !s->from_tool && (content || s->order * 10 >= st->n * 6))
            s->section = CG_SUMMARY_NEXT;
        else if (content && (s->spec >= 2 || hits > 0))
            s->section = CG_SUMMARY_DETAILS;
        else if (content)
            s->section = s->from_tool ? CG_SUMMARY_DETAILS : CG_SUMMARY_PROGRESS;
        else if (s->fact)
            s->section = CG_SUMMARY_DETAILS; /* a name said by the user is a detail */
    }
}

/* ------------------------------------------------------------------ selection ---------- */

/* A copy of s[0..len) cut to at most max bytes at a character boundary (at a space when
 * one is near), with an ellipsis when cut. */
static char *cut_copy(const char *s, size_t len, size_t max)
{
    bool cut = len > max;
    size_t n = cut ? max : len;
    if (cut) {
        while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
            n--;
        size_t sp = n;
        while (sp > max * 2 / 3 && s[sp] != ' ')
            sp--;
        if (s[sp] == ' ')
            n = sp;
    }
    char *out = malloc(n + 4);
    if (out == NULL)
        return NULL;
    memcpy(out, s, n);
    if (cut)
        memcpy(out + n, "\xe2\x80\xa6", 3), n += 3;
    out[n] = '\0';
    /* Line breaks would break the rendering's lines. */
    for (size_t i = 0; i < n; i++)
        if (out[i] == '\n' || out[i] == '\r' || out[i] == '\t')
            out[i] = ' ';
    return out;
}

/* A short lead-in clause without details ("Note:", "For the record,", "Übrigens,") costs
 * tokens and says nothing: the item starts after it. */
static size_t lead_in(const char *p, size_t len)
{
    size_t words = 1;
    for (size_t i = 0; i < len && i < 40; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c >= '0' && c <= '9') || c == '/' || c == '_' || c == '=' || c == '`' ||
            (c == '.' && i + 1 < len && p[i + 1] != ' '))
            return 0;
        if (c == ' ')
            words++;
        if ((c == ',' || c == ':') && i + 1 < len && p[i + 1] == ' ') {
            if (words > 4 || len - (i + 2) < 20)
                return 0;
            /* A clause that words a decision, progress or a next step is the point. */
            char lc[64];
            struct cg__summary_words w;
            size_t n = cg__summary_lower(p, i, lc, sizeof lc);
            cg__summary_markers(lc, n, false, &w);
            if (w.decision || w.progress || w.next)
                return 0;
            return i + 2;
        }
    }
    return 0;
}

static bool set_item(struct st *st, struct sent *s, size_t max)
{
    if (s->item != NULL)
        return true;
    size_t skip = s->mandatory ? 0 : lead_in(s->p, s->len);
    s->item = cut_copy(s->p + skip, s->len - skip, max);
    if (s->item == NULL) {
        st->oom = true;
        return false;
    }
    s->cost = count(st, s->item, strlen(s->item)) + 2; /* "- " and the line end */
    return true;
}

static struct sent *first_user(struct st *st)
{
    for (size_t i = 0; i < st->n; i++)
        if (st->s[i].role == CG_ROLE_USER)
            return &st->s[i];
    return st->n > 0 && !st->s[0].from_tool ? &st->s[0] : NULL;
}

/* The assistant's latest substantive sentence: not boilerplate, of some length. */
static struct sent *current_state(struct st *st)
{
    struct sent *fallback = NULL;
    unsigned looked = 0;
    for (size_t i = st->n; i-- > 0 && looked < 24;) {
        struct sent *s = &st->s[i];
        if (s->role != CG_ROLE_ASSISTANT)
            continue;
        looked++;
        struct sent *rep = s;
        if (s->repeat) { /* the representative holds the counts */
            for (size_t k = 0; k < i; k++)
                if (!st->s[k].repeat && st->s[k].hash == s->hash) {
                    rep = &st->s[k];
                    break;
                }
        }
        if (fallback == NULL)
            fallback = rep;
        if (rep->freq < 3 && rep->len >= 20 && !rep->w.next)
            return rep;
        if (rep->w.progress && fallback != NULL && !fallback->w.progress)
            fallback = rep;
    }
    return fallback;
}

static struct sent *representative(struct st *st, size_t i)
{
    struct sent *s = &st->s[i];
    if (s->repeat)
        for (size_t j = 0; j < i; j++)
            if (!st->s[j].repeat && st->s[j].hash == s->hash)
                return &st->s[j];
    return s;
}

/* The latest user request: the first sentence of the last user message that is not filler
 * said again and again ("Thanks, continue."); the last one when all are. */
static struct sent *pending_request(struct st *st)
{
    struct sent *last = NULL;
    unsigned looked = 0;
    for (size_t i = st->n; i-- > 0 && looked < 8;) {
        if (st->s[i].role != CG_ROLE_USER)
            continue;
        uint32_t msg = st->s[i].msg;
        size_t k = i;
        while (k > 0 && st->s[k - 1].msg == msg)
            k--;
        i = k; /* the loop goes on before this message */
        looked++;
        struct sent *s = representative(st, k);
        if (last == NULL)
            last = s;
        if (s->freq < 3 && s->len >= 12)
            return s;
    }
    return last;
}

/* What the caller's focus names comes first, then what users stated, then what people said
 * before what tools printed (errors first); then by score. */
static int by_score_desc(const void *a, const void *b)
{
    const struct sent *x = *(const struct sent *const *)a, *y = *(const struct sent *const *)b;
    if ((x->focus_hits > 0) != (y->focus_hits > 0))
        return x->focus_hits > 0 ? -1 : 1;
    if (x->fact != y->fact)
        return x->fact ? -1 : 1;
    if (x->from_tool != y->from_tool)
        return x->from_tool ? 1 : -1;
    if (x->from_tool && x->w.error != y->w.error)
        return x->w.error ? -1 : 1; /* of tool output, errors first */
    if (x->score != y->score)
        return x->score < y->score ? 1 : -1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int by_order(const void *a, const void *b)
{
    const struct sent *x = *(const struct sent *const *)a, *y = *(const struct sent *const *)b;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The tool-activity line: "Tool calls: read_file (12), edit_file (3); src/a.c, b.yaml". */
static char *tool_line(struct st *st, const struct cg__summary_lang *lang)
{
    if (st->n_tools == 0)
        return NULL;
    struct cg__summary_buf b = {0};
    char num[32];
    cg__summary_buf_str(&b, lang->tool_calls);
    cg__summary_buf_str(&b, ": ");
    for (size_t i = 0; i < st->n_tools; i++) {
        if (i > 0)
            cg__summary_buf_str(&b, ", ");
        cg__summary_buf_add(&b, st->tools[i].name, st->tools[i].len);
        snprintf(num, sizeof num, " (%u)", st->tools[i].count);
        cg__summary_buf_str(&b, num);
    }
    if (st->other_tool_calls > 0) {
        snprintf(num, sizeof num, ", +%u", st->other_tool_calls);
        cg__summary_buf_str(&b, num);
    }
    /* The files touched last, while the line stays short. */
    for (size_t i = st->n_paths; i-- > 0;) {
        if (b.len + st->path_len[i] > TOOL_LINE_BYTES)
            break;
        cg__summary_buf_str(&b, i + 1 == st->n_paths ? "; " : ", ");
        cg__summary_buf_add(&b, st->paths[i], st->path_len[i]);
    }
    if (b.failed) {
        free(b.data);
        st->oom = true;
        return NULL;
    }
    for (size_t i = 0; i < b.len; i++)
        if (b.data[i] == '\n' || b.data[i] == '\r')
            b.data[i] = ' ';
    return b.data;
}

static void out_clear_sections(struct cg_summary *out)
{
    for (int s = 0; s < CG_SUMMARY_SECTION_COUNT; s++) {
        for (size_t i = 0; i < out->sections[s].n; i++)
            free(out->sections[s].items[i]);
        free(out->sections[s].items);
        out->sections[s].items = NULL;
        out->sections[s].n = 0;
    }
}

/* Fills out's sections with the chosen sentences (conversation order) and renders. */
static cg_status build(struct st *st, struct sent **chosen, size_t n_chosen, const char *tools,
                       bool with_tools, struct cg_summary *out, struct cg_err *err)
{
    out_clear_sections(out);
    qsort(chosen, n_chosen, sizeof *chosen, by_order);
    if (with_tools && tools != NULL &&
        !cg__summary_list_add(&out->sections[CG_SUMMARY_PROGRESS], tools, strlen(tools)))
        return cg_err_set(err, CG_NOMEM, "out of memory for the summary");
    for (size_t i = 0; i < n_chosen; i++) {
        struct sent *s = chosen[i];
        if (!s->chosen)
            continue;
        struct cg_summary_list *l = &out->sections[s->section];
        if (!cg__summary_list_add(l, s->item, strlen(s->item)))
            return cg_err_set(err, CG_NOMEM, "out of memory for the summary");
    }
    cg_status st_ = cg_summary_render(out, err);
    if (st_ != CG_OK)
        return st_;
    out->tokens = count(st, out->text, out->text_len);
    return CG_OK;
}

/* When the skeleton alone is too big: the tool line goes, then the request, then the
 * state, then the intent is cut shorter and shorter (must: intent, state, request). */
static cg_status shrink_skeleton(struct st *st, struct sent **pool, size_t n_chosen,
                                 const char *tools, bool *with_tools, struct sent *const must[3],
                                 struct cg_summary *out, struct cg_err *err)
{
    struct sent *intent = must[0], *state = must[1], *request = must[2];
    cg_status rc = CG_OK;
    for (int step = 0; out->tokens > st->target && step < 12; step++) {
        if (*with_tools) {
            *with_tools = false;
        } else if (request != NULL && request->chosen && request != intent) {
            request->chosen = false;
        } else if (state != NULL && state->chosen && state != intent) {
            state->chosen = false;
        } else if (intent != NULL && strlen(intent->item) > 8) {
            size_t keep = strlen(intent->item) / 2;
            char *shorter = cut_copy(intent->item, strlen(intent->item), keep);
            if (shorter == NULL)
                return cg_err_set(err, CG_NOMEM, "out of memory summarizing");
            free(intent->item);
            intent->item = shorter;
        } else {
            break;
        }
        rc = build(st, pool, n_chosen, tools, *with_tools, out, err);
        if (rc != CG_OK)
            return rc;
    }
    return rc;
}

/* Users' facts come first (by_score_desc): when they would not all fit beside the
 * skeleton, the tool line goes, then the pending request, then the current state, while
 * that makes room (the intent stays). */
static cg_status room_for_user_facts(struct st *st, struct sent **pool, size_t n_chosen,
                                     const char *tools, bool *with_tools,
                                     struct sent *const must[3], struct cg_summary *out,
                                     struct cg_err *err)
{
    int64_t need = 0;
    for (size_t i = 0; i < st->n; i++) {
        struct sent *s = &st->s[i];
        if (s->chosen || s->mandatory || s->section < 0 || !s->fact)
            continue;
        if (!set_item(st, s, ITEM_MAX))
            return cg_err_set(err, CG_NOMEM, "out of memory summarizing");
        need += s->cost;
    }
    int64_t room = st->target - st->target / 50 - 2;
    struct sent *state = must[1], *request = must[2];
    cg_status rc = CG_OK;
    while (rc == CG_OK && out->tokens + need > room) {
        if (*with_tools)
            *with_tools = false;
        else if (request != NULL && request->chosen && request != must[0])
            request->chosen = false;
        else if (state != NULL && state->chosen && state != must[0])
            state->chosen = false;
        else
            break;
        rc = build(st, pool, n_chosen, tools, *with_tools, out, err);
    }
    return rc;
}

/* The rest by score while it fits, after the n_chosen items of pool. Costs are summed per
 * item (a small margin covers what joining changes); the rendered text is counted at the end
 * and trimmed if over. */
static cg_status fill_by_score(struct st *st, struct sent **pool, size_t n_chosen,
                               const char *tools, bool with_tools, struct cg_summary *out,
                               struct cg_err *err)
{
    int64_t target = st->target;
    size_t n_cand = 0;
    struct sent **cand = pool + n_chosen;
    for (size_t i = 0; i < st->n; i++) {
        struct sent *s = &st->s[i];
        if (!s->repeat && !s->chosen && !s->mandatory && s->section >= 0)
            cand[n_cand++] = s;
    }
    qsort(cand, n_cand, sizeof *cand, by_score_desc);
    int64_t used = out->tokens;
    int64_t room = target - target / 50 - 2;
    size_t kept = n_chosen;
    for (size_t i = 0; i < n_cand && used < room; i++) {
        struct sent *s = cand[i];
        /* A cheap lower bound of the cost first: a token per 6 bytes at best. */
        if ((int64_t)(s->len < ITEM_MAX ? s->len : ITEM_MAX) / 6 > room - used)
            continue;
        if (!set_item(st, s, s->from_tool ? ITEM_MAX * 2 / 3 : ITEM_MAX))
            return cg_err_set(err, CG_NOMEM, "out of memory summarizing");
        if (used + s->cost > room)
            continue;
        s->chosen = true;
        used += s->cost;
        pool[kept++] = s;
    }
    cg_status rc = build(st, pool, kept, tools, with_tools, out, err);
    while (rc == CG_OK && out->tokens > target) {
        /* Drop the lowest-scored optional item and count again. */
        struct sent *low = NULL;
        for (size_t i = 0; i < kept; i++)
            if (pool[i]->chosen && !pool[i]->mandatory &&
                (low == NULL || pool[i]->score < low->score))
                low = pool[i];
        if (low == NULL)
            break;
        low->chosen = false;
        rc = build(st, pool, kept, tools, with_tools, out, err);
    }
    if (rc == CG_OK)
        out->target_met = out->tokens <= target;
    return rc;
}

cg_status cg_summary_extract(const struct cg_conv *conv, const struct cg_summary_opts *opts,
                             struct cg_summary *out, struct cg_err *err)
{
    cg_summary_init(out);
    if (conv == NULL || opts == NULL)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "no conversation");
    int64_t target = opts->target_tokens == 0 ? CG_SUMMARY_TARGET_DEFAULT : opts->target_tokens;
    if (target < 1 || target > CG_SUMMARY_TARGET_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "target_tokens: must be 1..%d, got %lld",
                          CG_SUMMARY_TARGET_MAX, (long long)opts->target_tokens);
    size_t to = opts->to == 0 ? conv->n_messages : opts->to;
    if (opts->from >= to || to > conv->n_messages)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "messages [%zu, %zu) out of the conversation's %zu", opts->from, to,
                          conv->n_messages);

    struct st st = {.conv = conv, .opts = opts, .from = opts->from, .to = to, .target = target};
    const char *lang_tag = opts->language != NULL && opts->language[0] != '\0'
                               ? cg_summary_language(opts->language)
                               : cg_summary_detect_language(conv, opts->from, to);
    snprintf(out->language, sizeof out->language, "%s", lang_tag);
    out->messages = to - opts->from;
    const struct cg__summary_lang *lang = cg__summary_lang_get(lang_tag);

    cg_status rc = CG_OK;
    struct sent **pool = NULL;
    char *tools = NULL;
    parse_focus(&st);
    collect(&st);
    if (!st.oom)
        count_repeats(&st);
    if (st.oom) {
        rc = cg_err_set(err, CG_NOMEM, "out of memory summarizing");
        goto out;
    }
    score(&st);
    tools = tool_line(&st, lang);
    if (st.oom) {
        rc = cg_err_set(err, CG_NOMEM, "out of memory summarizing");
        goto out;
    }

    /* The skeleton: headings, the intent, the current state and the pending request. */
    pool = malloc((st.n + 4) * sizeof *pool);
    if (pool == NULL) {
        rc = cg_err_set(err, CG_NOMEM, "out of memory summarizing");
        goto out;
    }
    size_t n_chosen = 0;
    struct sent *intent = first_user(&st);
    struct sent *state = current_state(&st);
    struct sent *request = pending_request(&st);
    struct sent *must[3] = {intent, state, request};
    int must_section[3] = {CG_SUMMARY_INTENT, CG_SUMMARY_STATE, CG_SUMMARY_NEXT};
    size_t must_max[3] = {INTENT_MAX, ITEM_MAX, ITEM_MAX};
    for (int k = 0; k < 3; k++) {
        struct sent *s = must[k];
        if (s == NULL || s->chosen)
            continue;
        s->section = must_section[k];
        s->chosen = s->mandatory = true;
        if (!set_item(&st, s, must_max[k])) {
            rc = cg_err_set(err, CG_NOMEM, "out of memory summarizing");
            goto out;
        }
        pool[n_chosen++] = s;
    }
    bool with_tools = tools != NULL;
    rc = build(&st, pool, n_chosen, tools, with_tools, out, err);
    if (rc != CG_OK)
        goto out;
    rc = shrink_skeleton(&st, pool, n_chosen, tools, &with_tools, must, out, err);
    if (rc == CG_OK)
        rc = room_for_user_facts(&st, pool, n_chosen, tools, &with_tools, must, out, err);
    if (rc != CG_OK)
        goto out;
    rc = fill_by_score(&st, pool, n_chosen, tools, with_tools, out, err);

out:
    for (size_t i = 0; i < st.n; i++)
        free(st.s[i].item);
    free(st.s);
    free(pool);
    free(tools);
    return rc;
}

/* textfind.c - see textfind.h. Substrings by memchr on the first byte then memcmp (or a
 * lower-cased compare); regular expressions by glibc's regexec with REG_STARTEND, so texts
 * with NUL bytes inside are searched whole.
 */
#include "core/textfind.h"

#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/utf8.h"

struct cg_textfind {
    bool regex, icase;
    char *query; /* plain: the query (lower-cased when icase) */
    size_t len;
    regex_t re;
};

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

/* ------------------------------------------------------------------ pattern cost ---- */

/* glibc's regcomp copies a repeated subexpression once per repetition ("a+" becomes "aa*",
 * "(x){2,5}" five copies) and computes closures over the copies, so a short hostile pattern
 * ("a+++...", "((a*)*)*...", nested counted groups) makes it allocate gigabytes or run for
 * minutes. Before regcomp sees a pattern, this walk refuses stacked repetition operators
 * (POSIX leaves them undefined anyway), repetitions nested more than REPEAT_NEST_MAX deep and
 * expansions past COST_MAX nodes, and finds back-references (the one construct that makes
 * matching itself exponential). */
#define COST_MAX 2000.0
#define DEPTH_MAX 32
#define REPEAT_NEST_MAX 2

struct walk {
    const char *p, *end;
    bool backref, bad;
    int depth;
};

static double alternatives(struct walk *w, int *nest);

/* A bracket expression from just after its '['. */
static void skip_bracket(struct walk *w)
{
    if (w->p < w->end && *w->p == '^')
        w->p++;
    if (w->p < w->end && *w->p == ']')
        w->p++;
    while (w->p < w->end && *w->p != ']') {
        if (*w->p == '[' && w->p + 1 < w->end &&
            (w->p[1] == ':' || w->p[1] == '.' || w->p[1] == '=')) {
            char close = w->p[1];
            w->p += 2;
            while (w->p + 1 < w->end && !(w->p[0] == close && w->p[1] == ']'))
                w->p++;
            w->p += w->p + 1 < w->end ? 2 : 1;
            continue;
        }
        w->p++;
    }
    if (w->p < w->end)
        w->p++;
}

/* One atom's nodes (a group's include its inside) and, in *nest, how deep repetitions nest
 * inside it. */
static double atom(struct walk *w, int *nest)
{
    *nest = 0;
    char c = *w->p++;
    switch (c) {
    case '(': {
        if (++w->depth > DEPTH_MAX) {
            w->bad = true;
            return 1;
        }
        double inner = alternatives(w, nest);
        w->depth--;
        if (w->p < w->end && *w->p == ')')
            w->p++;
        return inner + 1;
    }
    case '[':
        skip_bracket(w);
        return 1;
    case '\\':
        if (w->p < w->end) {
            if (*w->p >= '1' && *w->p <= '9')
                w->backref = true;
            w->p++;
        }
        return 1;
    default:
        return 1;
    }
}

static bool is_repeat(char c)
{
    return c == '*' || c == '+' || c == '?' || c == '{';
}

/* The copies the repetition operator after an atom makes of it (1 when there is none); a
 * second operator right after marks the walk bad. */
static double repetition(struct walk *w, bool *repeated)
{
    *repeated = w->p < w->end && is_repeat(*w->p);
    if (!*repeated)
        return 1;
    double factor = 1;
    char c = *w->p;
    if (c == '+') {
        factor = 2;
        w->p++;
    } else if (c == '{') {
        const char *q = w->p + 1;
        double n = 0, m = -1;
        while (q < w->end && *q >= '0' && *q <= '9' && n <= COST_MAX)
            n = n * 10 + (*q++ - '0');
        if (q < w->end && *q == ',') {
            q++;
            if (q < w->end && *q >= '0' && *q <= '9')
                for (m = 0; q < w->end && *q >= '0' && *q <= '9' && m <= COST_MAX; q++)
                    m = m * 10 + (*q - '0');
        }
        while (q < w->end && *q != '}')
            q++;
        w->p = q < w->end ? q + 1 : q;
        factor = (m > n ? m : n) + 1;
    } else {
        w->p++;
    }
    if (w->p < w->end && is_repeat(*w->p))
        w->bad = true; /* "a**", "a+{2}": stacked */
    return factor;
}

/* A sequence of pieces, then '|' and more, up to ')' or the end; *nest as atom's. */
static double alternatives(struct walk *w, int *nest)
{
    double total = 0;
    *nest = 0;
    while (w->p < w->end && *w->p != ')' && total <= COST_MAX && !w->bad) {
        if (*w->p == '|') {
            w->p++;
            continue;
        }
        int inner;
        bool repeated;
        double a = atom(w, &inner);
        total += a * repetition(w, &repeated);
        inner += repeated;
        if (inner > *nest)
            *nest = inner;
    }
    if (*nest > REPEAT_NEST_MAX)
        w->bad = true;
    return total;
}

/* Whether regcomp may see q[0..len) (see above); *backref when it has a back-reference. */
static bool pattern_ok(const char *q, size_t len, bool *backref)
{
    struct walk w = {.p = q, .end = q + len};
    double total = 0;
    while (w.p < w.end && total <= COST_MAX && !w.bad) {
        int nest;
        total += alternatives(&w, &nest);
        if (w.p < w.end) /* an unbalanced ')': regcomp decides */
            w.p++;
    }
    *backref = w.backref;
    return !w.bad && total <= COST_MAX;
}

/* ------------------------------------------------------------------ finder ------------ */

cg_status cg_textfind_new(const char *query, size_t len, bool regex, bool ignore_case,
                          const char *field, struct cg_textfind **out, struct cg_err *err)
{
    *out = NULL;
    size_t bad;
    if (len == 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is required", field);
    if (len > CG_TEXTFIND_QUERY_MAX)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is %zu bytes (at most %d)", field,
                          len, CG_TEXTFIND_QUERY_MAX);
    if (memchr(query, '\0', len) != NULL || !cg_utf8_valid(query, len, &bad))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s' must be UTF-8 text without NUL bytes", field);
    bool backref = false;
    if (regex && !pattern_ok(query, len, &backref))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s': the pattern is too complex (stacked repetitions such as "
                          "\"a**\", repetitions nested more than %d deep, groups nested more "
                          "than %d deep, or an expansion past %d parts)",
                          field, REPEAT_NEST_MAX, DEPTH_MAX, (int)COST_MAX);
    if (backref)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "field '%s': back-references (\\1..\\9) are not supported", field);
    struct cg_textfind *f = calloc(1, sizeof *f);
    if (f == NULL || (f->query = malloc(len + 1)) == NULL) {
        free(f);
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    }
    f->regex = regex;
    f->icase = ignore_case;
    f->len = len;
    for (size_t i = 0; i < len; i++)
        f->query[i] = ignore_case && !regex ? (char)lower((unsigned char)query[i]) : query[i];
    f->query[len] = '\0';
    if (regex) {
        int rc = regcomp(&f->re, f->query, REG_EXTENDED | (ignore_case ? REG_ICASE : 0));
        if (rc != 0) {
            char why[128];
            regerror(rc, &f->re, why, sizeof why);
            free(f->query);
            free(f);
            return cg_err_set(err, CG_INVALID_ARGUMENT, "field '%s' is not a valid pattern: %s",
                              field, why);
        }
    }
    *out = f;
    return CG_OK;
}

static bool find_plain(const struct cg_textfind *f, const char *text, size_t len, size_t from,
                       size_t *start)
{
    if (len < f->len)
        return false;
    const unsigned char *q = (const unsigned char *)f->query;
    for (size_t i = from; i + f->len <= len; i++) {
        const unsigned char *t = (const unsigned char *)text + i;
        if (!f->icase) {
            const unsigned char *hit = memchr(t, q[0], len - f->len + 1 - i);
            if (hit == NULL)
                return false;
            i = (size_t)(hit - (const unsigned char *)text);
            if (memcmp(text + i, f->query, f->len) == 0) {
                *start = i;
                return true;
            }
            continue;
        }
        size_t k = 0;
        while (k < f->len && lower(t[k]) == q[k])
            k++;
        if (k == f->len) {
            *start = i;
            return true;
        }
    }
    return false;
}

bool cg_textfind_next(const struct cg_textfind *f, const char *text, size_t len, size_t from,
                      size_t *start, size_t *mlen)
{
    if (!f->regex) {
        if (!find_plain(f, text, len, from, start))
            return false;
        *mlen = f->len;
        return true;
    }
    while (from <= len) {
        regmatch_t m = {.rm_so = (regoff_t)from, .rm_eo = (regoff_t)len};
        int flags = REG_STARTEND | (from > 0 ? REG_NOTBOL : 0);
        if (regexec(&f->re, text, 1, &m, flags) != 0)
            return false;
        if (m.rm_eo > m.rm_so) {
            *start = (size_t)m.rm_so;
            *mlen = (size_t)(m.rm_eo - m.rm_so);
            return true;
        }
        /* An empty match: look again one character on. */
        size_t next = (size_t)m.rm_so + 1;
        while (next < len && ((unsigned char)text[next] & 0xC0) == 0x80)
            next++;
        from = next;
    }
    return false;
}

void cg_textfind_free(struct cg_textfind *f)
{
    if (f == NULL)
        return;
    if (f->regex)
        regfree(&f->re);
    free(f->query);
    free(f);
}

void cg_textfind_snippet(const char *text, size_t len, size_t start, size_t mlen, size_t context,
                         size_t *from, size_t *to)
{
    size_t a = start > context ? start - context : 0;
    size_t b = start + mlen + context < len ? start + mlen + context : len;
    while (a > 0 && ((unsigned char)text[a] & 0xC0) == 0x80)
        a--;
    while (b < len && ((unsigned char)text[b] & 0xC0) == 0x80)
        b++;
    *from = a;
    *to = b;
}

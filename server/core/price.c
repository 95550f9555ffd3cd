/* price.c - parsing the price table and pricing token counts. */
#include "core/price.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cg_status fail(struct cg_err *err, struct cg_price_table *t, int index, const char *entry,
                      size_t len, const char *why)
{
    t->n = 0;
    if (err != NULL) {
        err->code = CG_CONFIG;
        snprintf(err->msg, sizeof err->msg, "prices: entry %d ('%.*s'): %s", index,
                 (int)(len > 60 ? 60 : len), entry, why);
    }
    return CG_CONFIG;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One decimal number in [0, CG_PRICE_MAX_USD] from s[0..len). */
static bool parse_number(const char *s, size_t len, double *out)
{
    char buf[48];
    while (len > 0 && is_space(*s)) {
        s++;
        len--;
    }
    while (len > 0 && is_space(s[len - 1]))
        len--;
    if (len == 0 || len >= sizeof buf)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || s[i] == '.'))
            return false; /* no signs, exponents, inf or nan */
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    double v = strtod(buf, &end);
    if (*end != '\0' || !isfinite(v) || v < 0 || v > CG_PRICE_MAX_USD)
        return false;
    *out = v;
    return true;
}

cg_status cg_price_parse(const char *text, struct cg_price_table *t, struct cg_err *err)
{
    t->n = 0;
    int index = 0;
    const char *p = text;
    while (*p) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        const char *entry = p;
        p = semi ? semi + 1 : p + len;
        /* trim */
        while (len > 0 && is_space(*entry)) {
            entry++;
            len--;
        }
        while (len > 0 && is_space(entry[len - 1]))
            len--;
        if (len == 0)
            continue;
        index++;
        if (t->n == CG_PRICE_ENTRIES_MAX)
            return fail(err, t, index, entry, len, "more entries than the table holds (256)");
        const char *eq = memchr(entry, '=', len);
        if (eq == NULL)
            return fail(err, t, index, entry, len, "expected MODEL=INPUT/OUTPUT");
        size_t mlen = (size_t)(eq - entry);
        while (mlen > 0 && is_space(entry[mlen - 1]))
            mlen--;
        struct cg_price *pr = &t->entries[t->n];
        memset(pr, 0, sizeof *pr);
        if (mlen > 0 && entry[mlen - 1] == '*') {
            pr->prefix = true;
            mlen--;
        }
        if (mlen == 0 && !pr->prefix)
            return fail(err, t, index, entry, len, "empty model name");
        if (mlen > CG_PRICE_MODEL_MAX)
            return fail(err, t, index, entry, len, "model name longer than 200 bytes");
        for (size_t i = 0; i < mlen; i++)
            if ((unsigned char)entry[i] < 0x21 || entry[i] == '=' || entry[i] == '/')
                return fail(err, t, index, entry, len, "bad character in the model name");
        memcpy(pr->model, entry, mlen);
        pr->model[mlen] = '\0';

        double v[4];
        int nv = 0;
        const char *q = eq + 1, *stop = entry + len;
        while (q <= stop && nv < 5) {
            const char *slash = memchr(q, '/', (size_t)(stop - q));
            const char *field_end = slash ? slash : stop;
            if (nv == 4 || !parse_number(q, (size_t)(field_end - q), &v[nv]))
                return fail(err, t, index, entry, len,
                            nv == 4 ? "at most 4 prices (input/output/cache_read/cache_write)"
                                    : "prices are decimal dollars per million tokens, 0..1000000");
            nv++;
            if (!slash)
                break;
            q = slash + 1;
        }
        if (nv < 2)
            return fail(err, t, index, entry, len, "needs at least INPUT/OUTPUT");
        pr->input = v[0];
        pr->output = v[1];
        pr->cache_read = nv > 2 ? v[2] : v[0];
        pr->cache_write = nv > 3 ? v[3] : v[0];
        for (int k = 0; k < t->n; k++)
            if (t->entries[k].prefix == pr->prefix && strcmp(t->entries[k].model, pr->model) == 0)
                return fail(err, t, index, entry, len, "model listed twice");
        t->n++;
    }
    return CG_OK;
}

/* Whether s is exactly n decimal digits. */
static bool digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return s[n] == '\0';
}

/* Whether model is name or one of its dated snapshots: name, '-' or '@', then a date
 * (YYYYMMDD or YYYY-MM-DD) or a three-digit version (NNN), and nothing more. So
 * "claude-opus-4" does not take "claude-opus-4-9" (another model), only
 * "claude-opus-4-20250514". */
static bool name_or_snapshot(const char *name, size_t len, const char *model)
{
    if (strncmp(name, model, len) != 0)
        return false;
    const char *rest = model + len;
    if (*rest == '\0')
        return true;
    if (*rest != '-' && *rest != '@')
        return false;
    rest++;
    return digits(rest, 8) || digits(rest, 3) ||
           (strlen(rest) == 10 && rest[4] == '-' && rest[7] == '-' &&
            digits((char[]){rest[0], rest[1], rest[2], rest[3], rest[5], rest[6], rest[8], rest[9],
                            '\0'},
                   8));
}

cg_status cg_price_merge(struct cg_price_table *t, const struct cg_price_table *o,
                         struct cg_err *err)
{
    for (int i = 0; i < o->n; i++) {
        int k = 0;
        while (k < t->n && !(t->entries[k].prefix == o->entries[i].prefix &&
                             strcmp(t->entries[k].model, o->entries[i].model) == 0))
            k++;
        if (k == t->n && t->n == CG_PRICE_ENTRIES_MAX)
            return cg_err_set(err, CG_CONFIG,
                              "prices: the built-in table and the setting hold more than %d "
                              "models together",
                              CG_PRICE_ENTRIES_MAX);
        t->entries[k] = o->entries[i];
        if (k == t->n)
            t->n++;
    }
    return CG_OK;
}

const struct cg_price *cg_price_lookup(const struct cg_price_table *t, const char *model)
{
    const struct cg_price *best = NULL;
    size_t best_len = 0;
    bool best_named = false; /* best matched by name or snapshot, not by prefix */
    for (int i = 0; i < t->n; i++) {
        const struct cg_price *pr = &t->entries[i];
        /* Every kind of match starts model with the entry's name: a different first byte
         * rules the entry out without reading further (most of the table, on every call). */
        if (pr->model[0] != model[0] && pr->model[0] != '\0')
            continue;
        size_t len = strlen(pr->model);
        if (!pr->prefix && strcmp(pr->model, model) == 0)
            return pr; /* exact beats any other */
        bool named = !pr->prefix && name_or_snapshot(pr->model, len, model);
        bool prefixed = pr->prefix && strncmp(pr->model, model, len) == 0;
        if (named ? !best_named || len > best_len
                  : prefixed && !best_named && (best == NULL || len > best_len)) {
            best = pr;
            best_len = len;
            best_named = named;
        }
    }
    return best;
}

static double part(int64_t tokens, double usd_per_mtok)
{
    /* dollars per million tokens = micros per token */
    return tokens > 0 ? (double)tokens * usd_per_mtok : 0.0;
}

int64_t cg_price_cost(const struct cg_price *pr, int64_t input, int64_t output, int64_t cache_read,
                      int64_t cache_write)
{
    double micros = part(input, pr->input) + part(output, pr->output) +
                    part(cache_read, pr->cache_read) + part(cache_write, pr->cache_write);
    if (!(micros < 9.2e18))
        return INT64_MAX;
    return (int64_t)floor(micros + 0.5);
}

/* fuzz_redact.c - the PII redactor (core/redact) on arbitrary bytes.
 *
 * Invariants checked on every input (a violation traps):
 * - with room enough the call succeeds; with a cap below the output's size it fails with
 *   RESOURCE_EXHAUSTED and hands out nothing;
 * - the spans are in order, disjoint, inside the input, of known types, and as many per type
 *   as the counts say;
 * - the output is exactly the input with each span replaced by its well-formed label
 *   `<TYPE_N>` (so no detected value survives in place and nothing else changes);
 * - a detected value (one with a character that no label holds) occurs in the output, away
 *   from the labels, fewer times than in the input;
 * - the same value gets the same number within the call;
 * - redacting the output again never matches inside a label.
 * The first byte picks the enabled types, so per-type switches are fuzzed too.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/redact.h"

#define SPANS_MAX 4096

/* Occurrences of needle in hay that do not overlap [skip_start[k], skip_end[k]) (sorted). */
static size_t occurrences(const char *hay, size_t hay_len, const char *needle, size_t len,
                          const size_t *skip_start, const size_t *skip_end, size_t nskip)
{
    size_t count = 0, k = 0;
    for (const char *p = hay; (size_t)(p - hay) + len <= hay_len; p++) {
        p = memmem(p, hay_len - (size_t)(p - hay), needle, len);
        if (p == NULL)
            break;
        size_t a = (size_t)(p - hay);
        while (k < nskip && skip_end[k] <= a)
            k++;
        if (k == nskip || skip_start[k] >= a + len)
            count++;
    }
    return count;
}

static int label_char_only(const char *s, size_t len)
{
    for (size_t k = 0; k < len; k++) {
        char c = s[k];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '<' || c == '>'))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cg_redact_session session;
    static struct cg_redact_span items[SPANS_MAX], items2[SPANS_MAX];
    static size_t label_start[SPANS_MAX], label_end[SPANS_MAX];
    if (size < 1 || size > (1u << 20))
        return 0;
    struct cg_redact_options opt;
    cg_redact_options_init(&opt);
    opt.enabled = data[0] == 0xff ? CG_PII_ALL : ((unsigned)data[0] << 1) & CG_PII_ALL;
    const char *in = (const char *)data + 1;
    size_t len = size - 1;

    cg_redact_session_init(&session, size, 7);
    struct cg_redact_buf out;
    struct cg_redact_counts counts = {0};
    struct cg_redact_spans spans = {.items = items, .cap = SPANS_MAX};
    struct cg_err err;
    cg_redact_buf_init(&out, 32 * len + 64);
    if (cg_redact_with_spans(&opt, &session, in, len, &out, &counts, &spans, &err) != CG_OK)
        __builtin_trap();
    if (out.data[out.len] != '\0')
        __builtin_trap();

    /* spans: ordered, disjoint, typed, counted */
    int64_t per_type[CG_PII_TYPE_COUNT] = {0};
    size_t prev_end = 0;
    for (size_t k = 0; k < spans.len; k++) {
        const struct cg_redact_span *sp = &items[k];
        if (sp->len == 0 || sp->start < prev_end || sp->start + sp->len > len ||
            cg_pii_type_name(sp->type) == NULL || !(opt.enabled & CG_PII_BIT(sp->type)) ||
            sp->number == 0)
            __builtin_trap();
        prev_end = sp->start + sp->len;
        per_type[sp->type]++;
    }
    if (spans.dropped == 0)
        for (int t = 0; t < CG_PII_TYPE_COUNT; t++)
            if (per_type[t] != counts.by_type[t])
                __builtin_trap();

    /* the output is the input with the spans replaced by their labels */
    if (spans.dropped == 0) {
        size_t i = 0, o = 0;
        for (size_t k = 0; k <= spans.len; k++) {
            size_t stop = k < spans.len ? items[k].start : len;
            if (o + (stop - i) > out.len || memcmp(out.data + o, in + i, stop - i) != 0)
                __builtin_trap();
            o += stop - i;
            i = stop;
            if (k == spans.len)
                break;
            char want[64];
            const char *name = cg_pii_type_name(items[k].type);
            size_t nl = strlen(name);
            want[0] = '<';
            memcpy(want + 1, name, nl);
            want[1 + nl] = '_';
            char digits[12];
            int nd = 0;
            uint32_t v = items[k].number;
            do {
                digits[nd++] = (char)('0' + v % 10);
                v /= 10;
            } while (v > 0);
            size_t wl = 2 + nl;
            while (nd > 0)
                want[wl++] = digits[--nd];
            want[wl++] = '>';
            if (o + wl > out.len || memcmp(out.data + o, want, wl) != 0)
                __builtin_trap();
            label_start[k] = o;
            label_end[k] = o + wl;
            o += wl;
            i += items[k].len;
        }
        if (o != out.len)
            __builtin_trap();
    }

    /* a value is gone from where it was; the same value keeps its number */
    for (size_t k = 0; k < spans.len && k < 64; k++) {
        const struct cg_redact_span *sp = &items[k];
        if (spans.dropped == 0 && sp->len >= 3 && !label_char_only(in + sp->start, sp->len) &&
            occurrences(out.data, out.len, in + sp->start, sp->len, label_start, label_end,
                        spans.len) >= occurrences(in, len, in + sp->start, sp->len, NULL, NULL, 0))
            __builtin_trap();
        for (size_t j = k + 1; j < spans.len && j < 64; j++)
            if (items[j].type == sp->type && items[j].len == sp->len &&
                memcmp(in + items[j].start, in + sp->start, sp->len) == 0 &&
                items[j].number != sp->number)
                __builtin_trap();
    }

    /* redacting the output again leaves every label whole (a neighbour's context can change,
     * so new values may be found around them: `1+f3::1+14155550100` -> `+<IPV6_1>+1415...`) */
    if (spans.dropped == 0) {
        struct cg_redact_buf again;
        struct cg_redact_spans second = {.items = items2, .cap = SPANS_MAX};
        cg_redact_buf_init(&again, 32 * out.len + 64);
        cg_redact_session_init(&session, 1, 2);
        if (cg_redact_with_spans(&opt, &session, out.data, out.len, &again, NULL, &second, &err) !=
            CG_OK)
            __builtin_trap();
        size_t k = 0;
        for (size_t j = 0; j < second.len; j++) {
            size_t a = items2[j].start, b = a + items2[j].len;
            while (k < spans.len && label_end[k] <= a)
                k++;
            if (k < spans.len && label_start[k] < b)
                __builtin_trap();
        }
        cg_redact_buf_cleanup(&again);
    }

    /* a cap below the output's size: refused, nothing handed out */
    if (out.len > 0) {
        size_t full = out.len;
        struct cg_redact_buf small;
        cg_redact_buf_init(&small, full - 1);
        struct cg_redact_counts none = {0};
        cg_redact_session_init(&session, size, 7); /* as fresh as the first call's */
        if (cg_redact(&opt, &session, in, len, &small, &none, &err) != CG_RESOURCE_EXHAUSTED ||
            small.len != 0 || none.by_type[CG_PII_EMAIL] != 0)
            __builtin_trap();
        cg_redact_buf_cleanup(&small);
    }
    cg_redact_buf_cleanup(&out);
    return 0;
}

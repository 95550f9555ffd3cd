/* pb_pack_check.c - the CheckBudget answer written by hand, field by field (pb_pack.h).
 *
 * CheckBudget is the call an orchestrator makes before every model call, and its answer
 * (four levels of nineteen fields, most of them zero) is the one the server packs most.
 * The descriptor-driven walk of pb_pack.c spends most of its time choosing what to do with
 * each field; here every field's number and type are known, so a zero costs a compare and a
 * value a few stores. Same direction as cg_pb_write_back: fields last to first, written down
 * from the end of the buffer. The bytes are protobuf-c's (tests/unit/test_pb_pack.c packs
 * random answers with both); a message that does not have the fields this file knows (the
 * proto changed, fields kept unknown) is declined and packed by the generic walk.
 */
#include <string.h>

#include "ctxguard/v1/budget.pb-c.h"
#include "rpc/pb_pack.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pb_pack_check.c writes doubles in the host's byte order: little-endian only"
#endif

/* The write position: p moves down towards lo; NULL once something did not fit. */
struct back {
    uint8_t *lo;
    uint8_t *p;
};

static inline void room(struct back *b, size_t n)
{
    if (b->p != NULL && (size_t)(b->p - b->lo) < n)
        b->p = NULL;
}

static inline void varint(struct back *b, uint64_t v)
{
    size_t n = 1;
    for (uint64_t x = v; x >= 0x80; x >>= 7)
        n++;
    room(b, n);
    if (b->p == NULL)
        return;
    b->p -= n;
    uint8_t *q = b->p;
    for (; v >= 0x80; v >>= 7)
        *q++ = (uint8_t)(v | 0x80);
    *q = (uint8_t)v;
}

/* The key of field number f with wire type w (varint 0, 64-bit 1, length-delimited 2). */
static inline void key(struct back *b, unsigned f, unsigned w)
{
    varint(b, (uint64_t)f << 3 | w);
}

/* int64, uint32 and uint64 fields: the value as a varint, nothing when zero. */
static inline void u64(struct back *b, unsigned f, uint64_t v)
{
    if (v != 0) {
        varint(b, v);
        key(b, f, 0);
    }
}

/* Enums (and int32) are sign-extended to ten bytes when negative, as protobuf-c writes them. */
static inline void enum32(struct back *b, unsigned f, int v)
{
    u64(b, f, (uint64_t)(int64_t)v);
}

static inline void flag(struct back *b, unsigned f, protobuf_c_boolean v)
{
    u64(b, f, v ? 1 : 0);
}

/* A double: eight bytes; 0.0 and -0.0 are not written. */
static inline void dbl(struct back *b, unsigned f, double v)
{
    if (v == 0)
        return;
    room(b, 8);
    if (b->p == NULL)
        return;
    b->p -= 8;
    memcpy(b->p, &v, 8);
    key(b, f, 1);
}

/* A string: its bytes, their length, the key; NULL or "" not written. */
static inline void text(struct back *b, unsigned f, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0)
        return;
    room(b, n);
    if (b->p == NULL)
        return;
    b->p -= n;
    memcpy(b->p, s, n);
    varint(b, n);
    key(b, f, 2);
}

/* After a sub-message's fields were written down to b->p from end: its length and key. */
static inline void wrap(struct back *b, unsigned f, const uint8_t *end)
{
    if (b->p == NULL)
        return;
    varint(b, (uint64_t)(end - b->p));
    key(b, f, 2);
}

/* Whether m is an instance of d with exactly n fields and none kept unknown: what this file
 * knows how to write. */
static bool known(const ProtobufCMessage *m, const ProtobufCMessageDescriptor *d, unsigned n)
{
    return m->descriptor == d && d->n_fields == n && m->n_unknown_fields == 0;
}

static bool scope(struct back *b, const Ctxguard__V1__Scope *s)
{
    if (!known(&s->base, &ctxguard__v1__scope__descriptor, 4))
        return false;
    flag(b, 4, s->tenant);
    text(b, 3, s->agent_id);
    text(b, 2, s->task_id);
    text(b, 1, s->session_id);
    return true;
}

static bool level(struct back *b, const Ctxguard__V1__LevelStatus *l)
{
    if (!known(&l->base, &ctxguard__v1__level_status__descriptor, 19))
        return false;
    enum32(b, 19, (int)l->state);
    dbl(b, 18, l->warning_ratio);
    u64(b, 17, l->backpressure_delay_ms);
    enum32(b, 16, (int)l->decision);
    u64(b, 15, (uint64_t)l->reserved_cost_micros);
    u64(b, 14, (uint64_t)l->used_cost_micros);
    u64(b, 13, (uint64_t)l->limit_cost_micros);
    dbl(b, 12, l->projected_ratio);
    dbl(b, 11, l->usage_ratio);
    u64(b, 10, (uint64_t)l->remaining_tokens);
    u64(b, 9, (uint64_t)l->approved_extra_tokens);
    u64(b, 8, (uint64_t)l->allocated_tokens);
    u64(b, 7, (uint64_t)l->reserved_tokens);
    u64(b, 6, (uint64_t)l->used_tokens);
    u64(b, 5, (uint64_t)l->limit_tokens);
    enum32(b, 4, (int)l->mode);
    flag(b, 3, l->has_budget);
    if (l->scope != NULL) {
        uint8_t *end = b->p;
        if (!scope(b, l->scope))
            return false;
        wrap(b, 2, end);
    }
    enum32(b, 1, (int)l->level);
    return true;
}

static bool reason(struct back *b, const Ctxguard__V1__DecisionReason *r)
{
    if (!known(&r->base, &ctxguard__v1__decision_reason__descriptor, 3))
        return false;
    text(b, 3, r->message);
    enum32(b, 2, (int)r->level);
    enum32(b, 1, (int)r->code);
    return true;
}

uint8_t *cg_pb_write_back_check(const ProtobufCMessage *m, uint8_t *buf, size_t cap, size_t *len)
{
    const Ctxguard__V1__CheckBudgetResponse *a = (const Ctxguard__V1__CheckBudgetResponse *)m;
    struct back b = {buf, buf + cap};
    *len = 0;
    if (!known(m, &ctxguard__v1__check_budget_response__descriptor, 14))
        return NULL;
    u64(&b, 14, (uint64_t)a->compress_to_tokens);
    u64(&b, 13, (uint64_t)a->evaluated_at_unix_ms);
    enum32(&b, 12, (int)a->source);
    u64(&b, 11, (uint64_t)a->estimated_cost_micros);
    enum32(&b, 10, (int)a->approval_state);
    text(&b, 9, a->approval_id);
    for (size_t k = a->n_reasons; k-- > 0 && b.p != NULL;) {
        uint8_t *end = b.p; /* a NULL element is an empty message, as protobuf-c writes it */
        if (a->reasons[k] != NULL && !reason(&b, a->reasons[k]))
            return NULL;
        wrap(&b, 8, end);
    }
    u64(&b, 7, (uint64_t)a->available_tokens);
    dbl(&b, 6, a->tightest_ratio);
    enum32(&b, 5, (int)a->tightest_level);
    for (size_t k = a->n_levels; k-- > 0 && b.p != NULL;) {
        uint8_t *end = b.p;
        if (a->levels[k] != NULL && !level(&b, a->levels[k]))
            return NULL;
        wrap(&b, 4, end);
    }
    u64(&b, 3, a->delay_held_ms);
    u64(&b, 2, a->backpressure_delay_ms);
    enum32(&b, 1, (int)a->decision);
    if (b.p == NULL)
        return NULL;
    *len = (size_t)(buf + cap - b.p);
    return b.p;
}

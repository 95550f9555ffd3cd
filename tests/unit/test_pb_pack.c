/* test_pb_pack.c - the two-walk packer (rpc/pb_pack.h) writes protobuf-c's own bytes.
 *
 * Every message type the API has (the requests and answers of the method table and every
 * message inside them) is filled with random values, edge values more often than not
 * (zeros, -0.0, NaN, negative enums, the widest integers, NULL and empty strings, long
 * strings whose length takes two bytes, oneofs, packed and plain repeated fields, nested
 * messages) and packed by both; the bytes must be the same. A field added to a .proto is
 * covered without a change here.
 */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/arena.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "rpc/pb_pack.h"
#include "rpc/rpc.h"
#include "rpc/rpc_methods.h"

#define TYPES_MAX 512
#define DEPTH_MAX 3

struct gen {
    struct cg_arena *arena;
    uint64_t rng;
};

static uint64_t next(struct gen *g)
{
    g->rng ^= g->rng << 13;
    g->rng ^= g->rng >> 7;
    g->rng ^= g->rng << 17;
    return g->rng;
}

static uint64_t pick(struct gen *g, const uint64_t *values, size_t n)
{
    return next(g) % 3 == 0 ? next(g) : values[next(g) % n];
}

static const char *random_string(struct gen *g)
{
    static const size_t lens[] = {0, 1, 5, 127, 128, 300};
    size_t len = lens[next(g) % 6];
    char *s = cg_arena_alloc(g->arena, len + 1);
    cr_assert(s != NULL);
    for (size_t i = 0; i < len; i++)
        s[i] = (char)('a' + next(g) % 26);
    s[len] = '\0';
    return s;
}

static ProtobufCMessage *random_message(struct gen *g, const ProtobufCMessageDescriptor *d,
                                        int depth);

/* A random value of f's type at v (a repeated field's element when element). */
static void random_value(struct gen *g, const ProtobufCFieldDescriptor *f, void *v, int depth,
                         bool element)
{
    static const uint64_t v32[] = {0,     1,          127,        128,       16383,
                                   16384, 0x7fffffff, 0x80000000, 0xffffffff};
    static const uint64_t v64[] = {
        0, 1, 127, 128, 0x7fffffffffffffffULL, 0x8000000000000000ULL, 0xffffffffffffffffULL};
    static const double dbl[] = {0.0, -0.0, 1.5, -2.25e300, 5e-324};
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL:
        *(protobuf_c_boolean *)v = (protobuf_c_boolean)(next(g) % 2);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        *(float *)v = next(g) % 4 == 0 ? NAN : (float)dbl[next(g) % 5];
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        *(double *)v = next(g) % 6 == 0 ? NAN : dbl[next(g) % 5];
        break;
    case PROTOBUF_C_TYPE_STRING:
        *(const char **)v = !element && next(g) % 4 == 0 ? NULL : random_string(g);
        break;
    case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *b = v;
        const char *s = random_string(g);
        b->len = strlen(s);
        b->data = (uint8_t *)(uintptr_t)s;
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE:
        *(ProtobufCMessage **)v = !element && (depth >= DEPTH_MAX || next(g) % 4 == 0)
                                      ? NULL
                                      : random_message(g, f->descriptor, depth + 1);
        break;
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_UINT64:
        *(uint64_t *)v = pick(g, v64, sizeof v64 / sizeof v64[0]);
        break;
    default: /* 32-bit integers and enums (negative ones too) */
        *(uint32_t *)v = (uint32_t)pick(g, v32, sizeof v32 / sizeof v32[0]);
        break;
    }
}

static ProtobufCMessage *random_message(struct gen *g, const ProtobufCMessageDescriptor *d,
                                        int depth)
{
    ProtobufCMessage *m = cg_arena_alloc(g->arena, d->sizeof_message);
    cr_assert(m != NULL);
    d->message_init(m);
    char *base = (char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        void *member = base + f->offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t count = depth >= DEPTH_MAX ? 0 : next(g) % 4;
            char *array = cg_arena_calloc(g->arena, count + 1, cg_pb_element_size(f->type));
            cr_assert(array != NULL);
            for (size_t k = 0; k < count; k++)
                random_value(g, f, array + k * cg_pb_element_size(f->type), depth, true);
            *(size_t *)(void *)(base + f->quantifier_offset) = count;
            *(char **)member = array;
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (next(g) % 2 == 0) { /* this member is the oneof's case (a later one may win) */
                *(uint32_t *)(void *)(base + f->quantifier_offset) = f->id;
                random_value(g, f, member, depth, false);
            }
        } else {
            random_value(g, f, member, depth, false);
            if (f->label == PROTOBUF_C_LABEL_OPTIONAL)
                *(protobuf_c_boolean *)(void *)(base + f->quantifier_offset) =
                    (protobuf_c_boolean)(next(g) % 2);
        }
    }
    return m;
}

/* Every message type reachable from d, once, into types. */
static void collect(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor **types,
                    size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        if (types[i] == d)
            return;
    cr_assert_lt(*n, TYPES_MAX);
    types[(*n)++] = d;
    for (unsigned i = 0; i < d->n_fields; i++)
        if (d->fields[i].type == PROTOBUF_C_TYPE_MESSAGE)
            collect(d->fields[i].descriptor, types, n);
}

/* Packs m with both packers; false (and the bytes not compared) when pb_pack declines. */
static bool same_bytes(const ProtobufCMessage *m, const char *what)
{
    static struct cg_pb_sizes sizes;
    size_t n = 0;
    if (!cg_pb_size(m, &sizes, &n))
        return false;
    size_t want = protobuf_c_message_get_packed_size(m);
    cr_assert_eq(n, want, "%s: size %zu, protobuf-c says %zu", what, n, want);
    uint8_t *ours = malloc(n + 1), *theirs = malloc(n + 1);
    cr_assert(ours != NULL && theirs != NULL);
    cr_assert_eq(cg_pb_write(m, &sizes, ours), n, "%s: wrote other than its size", what);
    cr_assert_eq(protobuf_c_message_pack(m, theirs), n);
    cr_assert(memcmp(ours, theirs, n) == 0, "%s: bytes differ from protobuf-c's", what);
    /* The one-walk writer: the same bytes in a buffer of exactly their size and in a larger
     * one (ending at its end); one byte short, NULL. */
    uint8_t *back = malloc(n + 64);
    cr_assert(back != NULL);
    size_t blen = 1;
    uint8_t *start = cg_pb_write_back(m, back, n, &blen);
    cr_assert(start == back && blen == n, "%s: the backward walk, exact room", what);
    cr_assert(memcmp(start, theirs, n) == 0, "%s: backward bytes differ from protobuf-c's", what);
    start = cg_pb_write_back(m, back, n + 64, &blen);
    cr_assert(start == back + 64 && blen == n, "%s: the backward walk, more room", what);
    cr_assert(memcmp(start, theirs, n) == 0, "%s: backward bytes differ", what);
    if (n > 0)
        cr_assert_null(cg_pb_write_back(m, back, n - 1, &blen), "%s: one byte short", what);
    free(back);
    free(ours);
    free(theirs);
    return true;
}

Test(pb_pack, every_api_message_packs_as_protobuf_c_does)
{
    static const ProtobufCMessageDescriptor *types[TYPES_MAX];
    size_t ntypes = 0;
    for (size_t i = 0; i < cg_rpc_method_count; i++) {
        collect(cg_rpc_method_table[i].request_desc, types, &ntypes);
        collect(cg_rpc_method_table[i].response_desc, types, &ntypes);
    }
    cr_assert_gt(ntypes, 50, "only %zu message types found", ntypes);
    struct gen g = {cg_arena_new(1 << 16, 256u << 20), 0x9e3779b97f4a7c15ULL};
    cr_assert(g.arena != NULL);
    size_t packed = 0;
    for (size_t t = 0; t < ntypes; t++) {
        for (int round = 0; round < 40; round++) {
            ProtobufCMessage *m = random_message(&g, types[t], 0);
            packed += same_bytes(m, types[t]->name);
        }
    }
    /* Declined only for too many sub-messages, which random messages this small never have */
    cr_assert_eq(packed, ntypes * 40);
    /* The CheckBudget answer's own writer takes every random answer (not the generic walk's
     * fallback) and writes protobuf-c's bytes; it declines every other message. */
    const ProtobufCMessageDescriptor *check = &ctxguard__v1__check_budget_response__descriptor;
    for (int round = 0; round < 400; round++) {
        ProtobufCMessage *m = random_message(&g, check, 0);
        size_t want = protobuf_c_message_get_packed_size(m), len = 0;
        uint8_t *theirs = malloc(want + 1), *buf = malloc(want + 16);
        cr_assert(theirs != NULL && buf != NULL);
        protobuf_c_message_pack(m, theirs);
        uint8_t *start = cg_pb_write_back_check(m, buf, want + 16, &len);
        cr_assert(start != NULL && len == want, "round %d: %zu bytes, want %zu", round, len, want);
        cr_assert(memcmp(start, theirs, want) == 0, "round %d: bytes differ", round);
        if (want > 0)
            cr_assert_null(cg_pb_write_back_check(m, buf, want - 1, &len), "one byte short");
        free(theirs);
        free(buf);
    }
    for (size_t t = 0; t < ntypes; t++) {
        size_t len;
        uint8_t buf[64];
        if (types[t] != check)
            cr_assert_null(
                cg_pb_write_back_check(random_message(&g, types[t], 0), buf, sizeof buf, &len),
                "%s", types[t]->name);
    }
    cg_arena_free(g.arena);
}

Test(pb_pack, declines_unknown_fields_and_too_many_submessages)
{
    struct gen g = {cg_arena_new(1 << 16, 64u << 20), 42};
    cr_assert(g.arena != NULL);
    const ProtobufCMessageDescriptor *d = cg_rpc_method_table[0].response_desc;
    ProtobufCMessage *m = random_message(&g, d, 0);
    ProtobufCMessageUnknownField unknown = {
        .tag = 999, .wire_type = 0, .len = 1, .data = (uint8_t *)"\x01"};
    m->n_unknown_fields = 1;
    m->unknown_fields = &unknown;
    struct cg_pb_sizes sizes;
    size_t n;
    cr_assert_not(cg_pb_size(m, &sizes, &n), "fields kept unknown are left to protobuf-c");
    uint8_t buf[4096];
    cr_assert_null(cg_pb_write_back(m, buf, sizeof buf, &n), "by both walks");

    /* A message with a repeated message field, CG_PB_SUBMESSAGES_MAX + 1 elements long. */
    const ProtobufCMessageDescriptor *types[TYPES_MAX];
    size_t ntypes = 0;
    for (size_t i = 0; i < cg_rpc_method_count; i++)
        collect(cg_rpc_method_table[i].response_desc, types, &ntypes);
    const ProtobufCFieldDescriptor *rf = NULL;
    const ProtobufCMessageDescriptor *owner = NULL;
    for (size_t t = 0; t < ntypes && rf == NULL; t++)
        for (unsigned i = 0; i < types[t]->n_fields && rf == NULL; i++)
            if (types[t]->fields[i].label == PROTOBUF_C_LABEL_REPEATED &&
                types[t]->fields[i].type == PROTOBUF_C_TYPE_MESSAGE)
                rf = &types[t]->fields[i], owner = types[t];
    cr_assert(rf != NULL);
    ProtobufCMessage *big = cg_arena_alloc(g.arena, owner->sizeof_message);
    owner->message_init(big);
    size_t count = CG_PB_SUBMESSAGES_MAX + 1;
    ProtobufCMessage **elems = cg_arena_calloc(g.arena, count, sizeof *elems);
    const ProtobufCMessageDescriptor *ed = rf->descriptor;
    for (size_t k = 0; k < count; k++) {
        elems[k] = cg_arena_alloc(g.arena, ed->sizeof_message);
        ed->message_init(elems[k]);
    }
    *(size_t *)(void *)((char *)big + rf->quantifier_offset) = count;
    *(ProtobufCMessage ***)(void *)((char *)big + rf->offset) = elems;
    cr_assert_not(cg_pb_size(big, &sizes, &n), "too many sub-messages are left to protobuf-c");
    *(size_t *)(void *)((char *)big + rf->quantifier_offset) = CG_PB_SUBMESSAGES_MAX;
    cr_assert(same_bytes(big, owner->name), "as many as it keeps sizes for are packed");
    cg_arena_free(g.arena);
}

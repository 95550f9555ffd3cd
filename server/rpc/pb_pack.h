/* pb_pack.h - protobuf-c messages to bytes, each message sized once.
 *
 * protobuf_c_message_pack sizes a sub-message again at every level above it (a message
 * nested twice is sized three times): a CheckBudget answer, four levels of twenty fields,
 * took 1.4 µs to pack on this machine's kind, about as long as deciding it. This packer
 * walks a message twice: the first walk sizes every message once and keeps the sizes of
 * the sub-messages in the order the second walk, which writes, meets them. The bytes are
 * protobuf-c's own (tests/unit/test_pb_pack.c compares them on random values of every
 * message of the API); a message it does not take (fields kept unknown by a decode, more
 * than CG_PB_SUBMESSAGES_MAX sub-messages) is left to protobuf-c by the caller.
 */
#ifndef CG_RPC_PB_PACK_H
#define CG_RPC_PB_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#define CG_PB_SUBMESSAGES_MAX 256

/* The sizes of a message's sub-messages, in the order both walks meet them. */
struct cg_pb_sizes {
    uint32_t n;    /* sizes kept by cg_pb_size */
    uint32_t next; /* the next one cg_pb_write reads */
    uint32_t size[CG_PB_SUBMESSAGES_MAX];
};

/* The bytes one element of a repeated field of type t takes in its array (protobuf-c's
 * layout: 8 for the 64-bit types, pointers for strings and messages, ...). */
size_t cg_pb_element_size(ProtobufCType t);

/* The encoded size of m into *size, its sub-messages' sizes into s (which it resets).
 * False, with nothing promised in s, when m has fields kept unknown, more than
 * CG_PB_SUBMESSAGES_MAX sub-messages, or a size past 4 GiB: pack it with protobuf-c. */
bool cg_pb_size(const ProtobufCMessage *m, struct cg_pb_sizes *s, size_t *size);

/* Writes m, sized by cg_pb_size into s just before (m unchanged since), to out, which
 * holds that size. Returns the bytes written: the size, or 0 when s does not match m. */
size_t cg_pb_write(const ProtobufCMessage *m, struct cg_pb_sizes *s, uint8_t *out);

/* Writes m in one walk, from the end of buf (cap bytes) down: the bytes are those of
 * cg_pb_write, starting at the pointer returned, *len of them. NULL when they do not fit
 * in cap or m has fields kept unknown: size it and write it (above), or leave it to
 * protobuf-c. The one walk makes it the faster for an answer that fits a small buffer. */
uint8_t *cg_pb_write_back(const ProtobufCMessage *m, uint8_t *buf, size_t cap, size_t *len);

/* cg_pb_write_back for the CheckBudget answer, written by hand (pb_pack_check.c), which
 * cg_pb_write_back tries first: NULL for any other message, one this file does not know
 * (fields kept unknown, a proto with other fields) or no room. */
uint8_t *cg_pb_write_back_check(const ProtobufCMessage *m, uint8_t *buf, size_t cap, size_t *len);

#endif

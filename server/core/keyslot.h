/* keyslot.h - Redis Cluster's key slots and the redirections of its nodes, as pure logic.
 *
 * A Redis Cluster splits the key space into CG_KEYSLOT_COUNT slots: a key's slot is the
 * CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key modulo 16384, where the
 * key is replaced by its hash tag when it has one: the bytes between the first '{' and the
 * first '}' after it, when there is at least one byte between them ("{user}.a" and
 * "{user}.b" share a slot; "{}x" and "x{" are hashed whole). A node that does not serve a
 * key's slot answers "MOVED <slot> <host>:<port>" (the slot lives there now) or
 * "ASK <slot> <host>:<port>" (this one command goes there, after ASKING, during a
 * migration).
 *
 * No I/O, no globals; every function is thread-safe.
 */
#ifndef CG_CORE_KEYSLOT_H
#define CG_CORE_KEYSLOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CG_KEYSLOT_COUNT 16384
#define CG_KEYSLOT_HOST_MAX 255

/* The CRC16 of len bytes of buf (XMODEM, as Redis Cluster uses it: "123456789" gives
 * 0x31C3). buf may be NULL when len is 0. */
uint16_t cg_keyslot_crc16(const char *buf, size_t len);

/* The slot (0..16383) of a key of len bytes, hash tag rule included. */
int cg_keyslot_of(const char *key, size_t len);

/* What a redirection says. */
typedef enum {
    CG_KEYSLOT_NOT_REDIRECT = 0, /* another reply (or a malformed redirection) */
    CG_KEYSLOT_MOVED,            /* the slot moved for good: update the map */
    CG_KEYSLOT_ASK,              /* this command only: ASKING, then the command, there */
} cg_keyslot_redirect_kind;

struct cg_keyslot_redirect {
    int slot;                           /* 0..16383 */
    char host[CG_KEYSLOT_HOST_MAX + 1]; /* "" when the node did not say (same host as asked) */
    int port;                           /* 1..65535 */
};

/* Parses the text of an error reply (len bytes, not necessarily NUL-terminated, hostile:
 * bounded and checked) as "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (the
 * host may be an IPv6 address: the port follows the last ':'). Fills *out only for a
 * well-formed redirection; anything else is CG_KEYSLOT_NOT_REDIRECT. */
cg_keyslot_redirect_kind cg_keyslot_redirect_parse(const char *text, size_t len,
                                                   struct cg_keyslot_redirect *out);

#endif

/* arena.h - a per-call bump allocator, freed once when the call completes.
 *
 * Everything a call decodes, builds and encodes lives in its arena. The arena
 * has a cap: an allocation that would take it past the cap fails (NULL), so a
 * hostile request cannot make one call eat the machine's memory.
 * Not thread-safe: an arena belongs to one call, used by one thread at a time.
 */
#ifndef CG_BASE_ARENA_H
#define CG_BASE_ARENA_H

#include <stdarg.h>
#include <stddef.h>

#include "base/status.h"

struct cg_arena;

/* A new arena whose first block holds `first_block` bytes and whose total
 * allocations may not pass `cap` bytes. Returns NULL when out of memory. */
struct cg_arena *cg_arena_new(size_t first_block, size_t cap);

/* Frees the arena and everything allocated from it. NULL is a no-op. */
void cg_arena_free(struct cg_arena *arena);

/* Frees everything but the first block, so the arena can serve another call. */
void cg_arena_reset(struct cg_arena *arena);

/* size bytes aligned for any type, or NULL when the cap is reached or memory is out. */
void *cg_arena_alloc(struct cg_arena *arena, size_t size);

/* Like cg_arena_alloc, zero-filled; n*size is checked for overflow. */
void *cg_arena_calloc(struct cg_arena *arena, size_t n, size_t size);

/* Copies len bytes and a terminating NUL. NULL on failure. */
char *cg_arena_strndup(struct cg_arena *arena, const char *s, size_t len);

/* Copies a NUL-terminated string. NULL on failure. */
char *cg_arena_strdup(struct cg_arena *arena, const char *s);

/* printf into the arena. NULL on failure. */
char *cg_arena_sprintf(struct cg_arena *arena, const char *fmt, ...) CG_PRINTF(2, 3);

/* Bytes handed out so far (what counts against the cap). */
size_t cg_arena_used(const struct cg_arena *arena);

#endif

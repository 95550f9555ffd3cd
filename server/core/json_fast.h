/* json_fast.h - a fast path for jansson's json_loadb on the JSON that is usually sent.
 *
 * jansson's reader takes its input one character at a time through a stream callback (with
 * a UTF-8 check per character and a second pass over every string): ~50-80 MB/s, two thirds
 * of a Compress of a 1 MB conversation. Here yajl (libyajl-dev) tokenizes and unescapes in
 * runs and its callbacks build the same jansson values with jansson's own constructors
 * (json_object_setn_new_nocheck, json_stringn_nocheck, json_integer, json_real, in input
 * order), so what it returns is what json_loadb returns for the same text and flags.
 *
 * It is a strict subset: anything it is not sure about (a syntax error, invalid UTF-8, a
 * number it would not convert exactly as jansson does, a NUL in a key, deep nesting, out of
 * memory, and every place where yajl is laxer than jansson: see json_fast.c) makes it give up
 * and return NULL, and the caller then runs json_loadb, which gives the value or the error it
 * always gave. Correctness never depends on this file.
 *
 * Pure: no I/O, no globals; thread-safe.
 */
#ifndef CG_CORE_JSON_FAST_H
#define CG_CORE_JSON_FAST_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* A flag of this reader only (never passed on to jansson): the caller has checked that the
 * whole text is valid UTF-8 (a protobuf string field, say), so strings are not checked again
 * but for their \u escapes (pieces of it cut at quotes, with escapes replaced). */
#define CG_JSON_FAST_UTF8_CHECKED ((size_t)1 << 24)

/* The value json_loadb(text, len, flags) would return, flags among JSON_DECODE_ANY,
 * JSON_ALLOW_NUL and CG_JSON_FAST_UTF8_CHECKED (others: NULL); NULL when this reader gives up
 * (see above), which it also does when objects and arrays nest more than max_depth deep (the
 * top one is depth 1; max_depth <= 0 or over 512: 512). */
json_t *cg_json_fast_load(const char *text, size_t len, size_t flags, int max_depth);

/* Whether json_loadb(text, len, flags) would succeed (and give an object when need_object),
 * as cg_json_fast_load without building the value: 1 yes, 0 it gives up (ask jansson), -1 no
 * for sure (jansson refuses the first token: plain text is told apart without a parse). */
int cg_json_fast_check(const char *text, size_t len, size_t flags, bool need_object, int max_depth);

/* json_loadb's result, through the fast path first. */
json_t *cg_json_load(const char *text, size_t len, size_t flags, json_error_t *error);

#endif

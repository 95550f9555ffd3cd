/* tokenizers.h - the exact tokenizers (core/tok.h) of the process, built once at start from
 * the `token_data_dir` files and shared read-only by every thread for the life of the server.
 */
#ifndef CG_SERVICE_TOKENIZERS_H
#define CG_SERVICE_TOKENIZERS_H

#include "base/status.h"
#include "core/models.h"
#include "core/tok.h"
#include "service/service.h"

/* Loads both encodings from dir (cl100k_base.cgtok, o200k_base.cgtok; base/tokdata.h; NULL
 * or "": the default directory) into *out. On error returns CG_CONFIG or CG_NOMEM with err
 * naming the file and the problem, and *out is empty. Release with cg_tokenizers_cleanup. */
cg_status cg_tokenizers_load(const char *dir, struct cg_tokenizers *out,
                             struct cg_err *err) CG_MUST_CHECK;

/* Frees what cg_tokenizers_load built and empties *t (an empty one is a no-op). No call may
 * be using it. */
void cg_tokenizers_cleanup(struct cg_tokenizers *t);

/* The loaded exact tokenizer of encoding e (o200k_base or cl100k_base); NULL for any other
 * encoding or when t is NULL: count with the estimator then. */
const struct cg_tok_encoding *cg_tokenizer(const struct cg_tokenizers *t, cg_encoding e);

#endif

/* tokenizers.c - the exact tokenizers of the process: loaded once at start from the rank
 * files of `token_data_dir`, then read by every thread.
 */
#include <string.h>

#include "base/tokdata.h"
#include "service/tokenizers.h"

static cg_status load_one(const char *dir, const char *name, struct cg_tok_encoding **out,
                          struct cg_err *err)
{
    struct cg_tokdata data;
    cg_status st = cg_tokdata_load(dir, name, &data, err);
    if (st != CG_OK)
        return st;
    struct cg_err terr;
    cg_err_clear(&terr);
    st = cg_tok_encoding_new(data.data, data.len, out, &terr);
    cg_tokdata_cleanup(&data);
    if (st == CG_NOMEM)
        return cg_err_set(err, CG_NOMEM, "%s/%s.cgtok: out of memory", dir, name);
    if (st != CG_OK)
        return cg_err_set(err, CG_CONFIG, "%s/%s.cgtok: corrupt rank data: %s", dir, name,
                          terr.msg);
    return CG_OK;
}

cg_status cg_tokenizers_load(const char *dir, struct cg_tokenizers *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    char default_dir[4096];
    if (dir == NULL || dir[0] == '\0') {
        cg_status st = cg_tokdata_default_dir(default_dir, sizeof default_dir, err);
        if (st != CG_OK)
            return st;
        dir = default_dir;
    }
    cg_status st = load_one(dir, "cl100k_base", &out->cl100k_base, err);
    if (st == CG_OK)
        st = load_one(dir, "o200k_base", &out->o200k_base, err);
    if (st != CG_OK)
        cg_tokenizers_cleanup(out);
    return st;
}

void cg_tokenizers_cleanup(struct cg_tokenizers *t)
{
    cg_tok_encoding_free(t->cl100k_base);
    cg_tok_encoding_free(t->o200k_base);
    memset(t, 0, sizeof *t);
}

const struct cg_tok_encoding *cg_tokenizer(const struct cg_tokenizers *t, cg_encoding e)
{
    if (t == NULL)
        return NULL;
    if (e == CG_ENCODING_CL100K_BASE)
        return t->cl100k_base;
    if (e == CG_ENCODING_O200K_BASE)
        return t->o200k_base;
    return NULL;
}

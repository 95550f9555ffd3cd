/* op_err.c - the errors every service sets the same way on an operation (service/op_err.h).
 */
#include "service/op_err.h"

cg_status cg_op_store_error(const struct cg_op *op, const struct cg_err *serr)
{
    *op->err = *serr;
    if (op->err->msg[0] == '\0')
        cg_err_set(op->err, serr->code, "%s", cg_status_str(serr->code));
    return serr->code;
}

cg_status cg_op_oom(const struct cg_op *op)
{
    return cg_err_set(op->err, CG_RESOURCE_EXHAUSTED, "out of memory");
}

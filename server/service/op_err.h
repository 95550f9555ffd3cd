/* op_err.h - the errors every service sets the same way on an operation (service/op_err.c).
 */
#ifndef CG_SERVICE_OP_ERR_H
#define CG_SERVICE_OP_ERR_H

#include "base/status.h"
#include "service/service.h"

/* Copies a store error into op->err (its status's name when the store said nothing) and
 * returns its code. */
cg_status cg_op_store_error(const struct cg_op *op, const struct cg_err *serr);

/* RESOURCE_EXHAUSTED "out of memory" into op->err. */
cg_status cg_op_oom(const struct cg_op *op);

#endif

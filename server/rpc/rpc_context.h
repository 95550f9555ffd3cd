/* rpc_context.h - what ContextService's handler files share. Internal to rpc/. (The
 * calibration hook of Commit and RecordUsage is service/calibration.h.)
 */
#ifndef CG_RPC_CONTEXT_H
#define CG_RPC_CONTEXT_H

#include "core/models.h"
#include "core/tok.h"
#include "rpc/rpc.h"
#include "store/store.h"

#endif

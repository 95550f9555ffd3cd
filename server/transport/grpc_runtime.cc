// grpc_runtime.cc - see grpc_runtime.h.
#include "transport/grpc_runtime.h"

#include <absl/synchronization/mutex.h>

extern "C" void cg_grpc_runtime_release_mode(void)
{
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

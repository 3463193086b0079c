// Cross Memory Attach (CMA): a receiver copies a large message straight out of the
// sender's buffer with process_vm_readv, one copy instead of two through shared
// memory. The kernel allows it when the reader may ptrace the target; with Yama's
// ptrace_scope=1 sibling processes may not, unless the target named them (or anyone)
// with prctl(PR_SET_PTRACER). Containers and CI machines often forbid it entirely,
// hence the probe at connect time and the staged fallback.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_CMA_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_CMA_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace loom {
namespace shm_internal {

// AllowCmaFromAnyProcess lets other processes of this user read this one's memory
// under Yama ptrace_scope=1 (PR_SET_PTRACER_ANY). A no-op without Yama.
void AllowCmaFromAnyProcess();

// ReadFromProcess copies `destination.size()` bytes at `remote_address` in process
// `pid` into `destination`. Errors wrap errno: Unavailable for ESRCH (the process is
// gone), PermissionDenied for EPERM, Internal otherwise, each naming the call.
absl::Status ReadFromProcess(pid_t pid, uint64_t remote_address, absl::Span<std::byte> destination);

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_CMA_H_

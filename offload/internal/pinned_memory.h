// Page-locking of host memory for the host pool. Two implementations, chosen by the
// build: pinned_memory_cuda.cc (cudaHostRegister, under --config=cuda) and
// pinned_memory_none.cc (everything FailedPrecondition).
#ifndef LOOM_OFFLOAD_INTERNAL_PINNED_MEMORY_H_
#define LOOM_OFFLOAD_INTERNAL_PINNED_MEMORY_H_

#include <cstddef>

#include "absl/status/status.h"

namespace loom {
namespace offload_internal {

// PinningAvailable returns OK when memory can be page-locked for device copies here,
// else FailedPrecondition saying why (not built with CUDA, no usable device).
absl::Status PinningAvailable();

// Pin page-locks [data, data + bytes) (page-aligned); Unpin undoes it. Pin returns
// ResourceExhausted when the driver refuses (the locked-memory limit).
absl::Status Pin(void* data, size_t bytes);
void Unpin(void* data);

}  // namespace offload_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_INTERNAL_PINNED_MEMORY_H_

// What memory a pointer refers to, as the CUDA driver sees it, for the argument checks
// of GpuAdamWStep and DeviceStager: a kernel given a host pointer, or an asynchronous
// copy given pageable memory, should be an error naming the span, not a fault or a
// silently synchronous copy.
#ifndef LOOM_OFFLOAD_GPU_INTERNAL_POINTER_CHECKS_H_
#define LOOM_OFFLOAD_GPU_INTERNAL_POINTER_CHECKS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace gpu_internal {

// CheckDeviceMemory returns OK when [data, data + bytes) is memory of CUDA device
// `device` (cudaMalloc or managed); InvalidArgument "<who>: <what> (<address>) is
// <kind>, not memory of CUDA device <device>" otherwise; the CUDA error if the query
// fails. Empty ranges are OK.
absl::Status CheckDeviceMemory(absl::string_view who, absl::string_view what, const void* data,
                               size_t bytes, int device);

// CheckPinnedHostMemory returns OK when [data, data + bytes) is page-locked host memory
// (cudaHostAlloc or cudaHostRegister, e.g. a HostMemoryPool block); InvalidArgument
// naming what it is otherwise. Empty ranges are OK.
absl::Status CheckPinnedHostMemory(absl::string_view who, absl::string_view what, const void* data,
                                   size_t bytes);

// CheckHostMemory returns OK for any host memory, pinned or pageable; InvalidArgument
// for device memory.
absl::Status CheckHostMemory(absl::string_view who, absl::string_view what, const void* data,
                             size_t bytes);

// Overlap returns whether two byte ranges share a byte (empty ranges share none).
bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

}  // namespace gpu_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_INTERNAL_POINTER_CHECKS_H_

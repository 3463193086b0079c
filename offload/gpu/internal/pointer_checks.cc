#include "offload/gpu/internal/pointer_checks.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace gpu_internal {
namespace {

struct Where {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = -1;
};

absl::StatusOr<Where> Query(const void* p) {
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, p);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Not sticky, but leave nothing for a later call to report.
    return CudaStatus(error, "cudaPointerGetAttributes(&attributes, p)");
  }
  return Where{attributes.type, attributes.device};
}

std::string Describe(const Where& where) {
  switch (where.type) {
    case cudaMemoryTypeUnregistered: return "pageable host memory";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return absl::StrCat("memory of CUDA device ", where.device);
    case cudaMemoryTypeManaged: return "managed memory";
  }
  return absl::StrCat("memory of unknown type ", static_cast<int>(where.type));
}

// Both ends of the range, so a span that runs off a registered block is caught.
absl::StatusOr<Where> QueryRange(const void* data, size_t bytes) {
  LOOM_ASSIGN_OR_RETURN(const Where first, Query(data));
  LOOM_ASSIGN_OR_RETURN(const Where last, Query(static_cast<const std::byte*>(data) + bytes - 1));
  if (last.type != first.type || last.device != first.device) return last;
  return first;
}

absl::Status Wrong(absl::string_view who, absl::string_view what, const void* data,
                   const Where& where, absl::string_view wanted) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s (%p) is %s, not %s", who, what, data, Describe(where), wanted));
}

}  // namespace

absl::Status CheckDeviceMemory(absl::string_view who, absl::string_view what, const void* data,
                               size_t bytes, int device) {
  if (bytes == 0) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(const Where where, QueryRange(data, bytes));
  const bool on_device =
      (where.type == cudaMemoryTypeDevice || where.type == cudaMemoryTypeManaged) &&
      where.device == device;
  if (!on_device) {
    return Wrong(who, what, data, where, absl::StrCat("memory of CUDA device ", device));
  }
  return absl::OkStatus();
}

absl::Status CheckPinnedHostMemory(absl::string_view who, absl::string_view what, const void* data,
                                   size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(const Where where, QueryRange(data, bytes));
  if (where.type != cudaMemoryTypeHost) {
    return Wrong(who, what, data, where,
                 "pinned host memory (a HostMemoryPool block under --config=cuda, "
                 "cudaHostAlloc or cudaHostRegister)");
  }
  return absl::OkStatus();
}

absl::Status CheckHostMemory(absl::string_view who, absl::string_view what, const void* data,
                             size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(const Where where, QueryRange(data, bytes));
  if (where.type != cudaMemoryTypeHost && where.type != cudaMemoryTypeUnregistered) {
    return Wrong(who, what, data, where, "host memory");
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a);
  const uintptr_t b0 = reinterpret_cast<uintptr_t>(b);
  return a_bytes != 0 && b_bytes != 0 && a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

}  // namespace gpu_internal
}  // namespace loom

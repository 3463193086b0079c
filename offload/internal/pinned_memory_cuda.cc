// Built with CUDA: memory is registered with the driver (cudaHostRegister), which
// page-locks it and maps it for asynchronous device copies.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace offload_internal {

absl::Status PinningAvailable() {
  int devices = 0;
  const cudaError_t error = cudaGetDeviceCount(&devices);
  if (error != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        "pinned host memory needs a CUDA device: cudaGetDeviceCount failed: ",
        cudaGetErrorString(error)));
  }
  if (devices == 0) {
    return absl::FailedPreconditionError("pinned host memory needs a CUDA device; none found");
  }
  return absl::OkStatus();
}

absl::Status Pin(void* data, size_t bytes) {
  const cudaError_t error = cudaHostRegister(data, bytes, cudaHostRegisterDefault);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Clear the sticky error so later calls are not blamed.
    return absl::ResourceExhaustedError(absl::StrCat("cudaHostRegister of ", bytes,
                                                     " bytes failed: ", cudaGetErrorString(error)));
  }
  return absl::OkStatus();
}

void Unpin(void* data) { cudaHostUnregister(data); }

}  // namespace offload_internal
}  // namespace loom

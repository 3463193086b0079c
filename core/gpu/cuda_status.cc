#include "core/gpu/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status CudaStatus(cudaError_t error, absl::string_view call) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (", static_cast<int>(error),
                   "): ", cudaGetErrorString(error));
  switch (error) {
    case cudaErrorMemoryAllocation: return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver: return absl::FailedPreconditionError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer: return absl::InvalidArgumentError(message);
    default: return absl::InternalError(message);
  }
}

absl::StatusOr<int> CudaDeviceCountOrZero() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // Clears the error, so later calls report their own.
    return 0;
  }
  if (error != cudaSuccess) return CudaStatus(error, "cudaGetDeviceCount(&count)");
  return count;
}

}  // namespace loom

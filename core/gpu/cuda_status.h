// CUDA errors as absl::Status: every CUDA runtime call of Loom goes through
// LOOM_CUDA_RETURN_IF_ERROR, so a failure names the call as written and carries
// cudaGetErrorName / cudaGetErrorString, with a status code a caller can act on.
//
// Example:
//   void* p = nullptr;
//   LOOM_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
//   // on failure: ResourceExhausted "cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation
//   //             (2): out of memory"
#ifndef LOOM_CORE_GPU_CUDA_STATUS_H_
#define LOOM_CORE_GPU_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// CudaStatus: OK for cudaSuccess; otherwise a Status naming `call`, with the error's
// name, number and text. Codes: ResourceExhausted for an allocation failure,
// FailedPrecondition for no device or driver, InvalidArgument for an invalid value,
// device or pointer, Internal for the rest.
absl::Status CudaStatus(cudaError_t error, absl::string_view call);

// CudaDeviceCountOrZero returns the number of visible devices, 0 where the machine
// has no GPU or no driver (so GPU tests can skip); other errors as CudaStatus.
absl::StatusOr<int> CudaDeviceCountOrZero();

}  // namespace loom

// LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpy(...)) returns CudaStatus from the enclosing
// function (which returns Status or StatusOr) when the call does not succeed.
#define LOOM_CUDA_RETURN_IF_ERROR(expr)                                    \
  do {                                                                     \
    const cudaError_t loom_cuda_error_ = (expr);                           \
    if (loom_cuda_error_ != cudaSuccess) {                                 \
      return ::loom::CudaStatus(loom_cuda_error_, #expr);                  \
    }                                                                      \
  } while (false)

#endif  // LOOM_CORE_GPU_CUDA_STATUS_H_

#include "core/gpu/cuda_probe.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_probe_kernels.h"
#include "core/status_macros.h"

namespace loom {
namespace {

absl::Status CudaError(const char* call, cudaError_t error) {
  return absl::InternalError(absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (",
                                          static_cast<int>(error), "): ", cudaGetErrorString(error)));
}

}  // namespace

absl::StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) return 0;
  if (error != cudaSuccess) return CudaError("cudaGetDeviceCount", error);
  return count;
}

absl::StatusOr<std::vector<float>> AddOnDevice(absl::Span<const float> a,
                                               absl::Span<const float> b) {
  if (a.size() != b.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddOnDevice: a has ", a.size(), " elements, b has ", b.size()));
  }
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCount());
  if (devices == 0) return absl::FailedPreconditionError("AddOnDevice: no CUDA device");
  std::vector<float> out(a.size());
  if (a.empty()) return out;
  const cuda_probe_internal::CudaResult result =
      cuda_probe_internal::AddVectors(a.data(), b.data(), out.data(), a.size());
  if (result.call != nullptr) return CudaError(result.call, static_cast<cudaError_t>(result.error));
  return out;
}

absl::StatusOr<std::string> NcclVersion() {
  int version = 0;
  const ncclResult_t result = ncclGetVersion(&version);
  if (result != ncclSuccess) {
    return absl::InternalError(absl::StrCat("ncclGetVersion failed: ", ncclGetErrorString(result)));
  }
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return absl::StrCat(version / 10000, ".", version / 100 % 100, ".", version % 100);
}

}  // namespace loom

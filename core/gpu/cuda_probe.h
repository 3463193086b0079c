// CUDA probe: the smallest GPU target, proving that --config=cuda builds .cu code
// with nvcc, links the CUDA runtime and NCCL, and that tests skip cleanly on machines
// without a GPU. Plain C++ header: CPU code may include it.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(int devices, CudaDeviceCount());   // 0 on a CPU-only machine
//   LOOM_ASSIGN_OR_RETURN(std::vector<float> sum,
//                         AddOnDevice({1, 2, 3}, {10, 20, 30}));   // {11, 22, 33}
//   NcclVersion();                                            // e.g. "2.28.3"
#ifndef LOOM_CORE_GPU_CUDA_PROBE_H_
#define LOOM_CORE_GPU_CUDA_PROBE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

// CudaDeviceCount returns the number of visible CUDA devices: 0 when the machine has
// no GPU or no driver (cudaErrorNoDevice, cudaErrorInsufficientDriver). Other CUDA
// errors become Internal with the call and cudaGetErrorString's text.
absl::StatusOr<int> CudaDeviceCount();

// AddOnDevice returns a + b computed by a kernel on device 0. InvalidArgument for
// different lengths; FailedPrecondition when there is no device; Internal naming the
// failing CUDA call otherwise.
absl::StatusOr<std::vector<float>> AddOnDevice(absl::Span<const float> a,
                                               absl::Span<const float> b);

// NcclVersion returns the version of the NCCL library linked in ("2.28.3"); Internal
// with ncclGetErrorString's text if NCCL cannot report it.
absl::StatusOr<std::string> NcclVersion();

}  // namespace loom

#endif  // LOOM_CORE_GPU_CUDA_PROBE_H_

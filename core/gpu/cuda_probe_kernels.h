// Kernels of the CUDA probe, with a C++-only interface (no CUDA types) so the .cc
// side can turn their error codes into absl::Status. Internal to core/gpu.
#ifndef LOOM_CORE_GPU_CUDA_PROBE_KERNELS_H_
#define LOOM_CORE_GPU_CUDA_PROBE_KERNELS_H_

#include <cstddef>

namespace loom {
namespace cuda_probe_internal {

// The CUDA call that failed (or nullptr) and its cudaError_t value.
struct CudaResult {
  const char* call = nullptr;
  int error = 0;
};

// AddVectors copies a and b to device 0, adds them with a kernel, and copies the sum
// back to `out`. All pointers are host pointers to n floats.
CudaResult AddVectors(const float* a, const float* b, float* out, size_t n);

}  // namespace cuda_probe_internal
}  // namespace loom

#endif  // LOOM_CORE_GPU_CUDA_PROBE_KERNELS_H_

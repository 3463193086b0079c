#include <cuda_runtime.h>

#include "core/gpu/cuda_probe_kernels.h"

namespace loom {
namespace cuda_probe_internal {
namespace {

__global__ void AddKernel(const float* a, const float* b, float* out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

#define LOOM_CUDA_PROBE_CHECK(call)                              \
  do {                                                           \
    const cudaError_t loom_error = (call);                       \
    if (loom_error != cudaSuccess) {                             \
      result = CudaResult{#call, static_cast<int>(loom_error)};  \
      goto cleanup;                                              \
    }                                                            \
  } while (false)

CudaResult AddVectors(const float* a, const float* b, float* out, size_t n) {
  CudaResult result;
  float* device = nullptr;  // One allocation holding a, b and the sum.
  const size_t bytes = n * sizeof(float);
  constexpr unsigned kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  LOOM_CUDA_PROBE_CHECK(cudaSetDevice(0));
  LOOM_CUDA_PROBE_CHECK(cudaMalloc(&device, 3 * bytes));
  LOOM_CUDA_PROBE_CHECK(cudaMemcpy(device, a, bytes, cudaMemcpyHostToDevice));
  LOOM_CUDA_PROBE_CHECK(cudaMemcpy(device + n, b, bytes, cudaMemcpyHostToDevice));
  AddKernel<<<blocks, kThreads>>>(device, device + n, device + 2 * n, n);
  LOOM_CUDA_PROBE_CHECK(cudaGetLastError());
  LOOM_CUDA_PROBE_CHECK(cudaMemcpy(out, device + 2 * n, bytes, cudaMemcpyDeviceToHost));
cleanup:
  if (device != nullptr) cudaFree(device);
  return result;
}

#undef LOOM_CUDA_PROBE_CHECK

}  // namespace cuda_probe_internal
}  // namespace loom

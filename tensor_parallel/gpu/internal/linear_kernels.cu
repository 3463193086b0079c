#include <cuda_runtime.h>

#include "tensor_parallel/gpu/internal/linear_kernels.h"

namespace loom {
namespace gpu_linear_internal {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill an H100 several times; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 4096;

int Blocks(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

__global__ void AddBiasKernel(float* y, int64_t rows, int64_t cols, int64_t ld, const float* bias) {
  const int64_t total = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    const int64_t i = e / cols, j = e % cols;
    y[i * ld + j] += bias[j];
  }
}

// One thread per column, rows in order: SumRows's order. Adjacent threads read
// adjacent columns, so each row is one coalesced read.
__global__ void SumRowsKernel(const float* g, int64_t rows, int64_t cols, int64_t ld, float* sums) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += stride) {
    float sum = 0.0f;
    for (int64_t i = 0; i < rows; ++i) sum += g[i * ld + j];
    sums[j] = sum;
  }
}

}  // namespace

int LaunchAddBias(float* y, int64_t rows, int64_t cols, int64_t ld, const float* bias,
                  void* stream) {
  if (rows == 0 || cols == 0) return 0;
  AddBiasKernel<<<Blocks(rows * cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      y, rows, cols, ld, bias);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSumRows(const float* g, int64_t rows, int64_t cols, int64_t ld, float* sums,
                  void* stream) {
  if (cols == 0) return 0;
  SumRowsKernel<<<Blocks(cols), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, rows, cols, ld,
                                                                                  sums);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace gpu_linear_internal
}  // namespace loom

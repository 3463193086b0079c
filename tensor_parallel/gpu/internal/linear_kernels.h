// The element-wise passes around the linear layers' GEMMs on a GPU, in the same
// summation order as the CPU layers' AddBias and SumRows (layers/internal/layer_math),
// so their results are bitwise those of the CPU for the same inputs. Interface in
// plain C++ (the stream as void*, errors as cudaError_t values) so that nvcc sees no
// other header; gpu_linear.cc turns the codes into Status. Internal to
// tensor_parallel/gpu.
#ifndef LOOM_TENSOR_PARALLEL_GPU_INTERNAL_LINEAR_KERNELS_H_
#define LOOM_TENSOR_PARALLEL_GPU_INTERNAL_LINEAR_KERNELS_H_

#include <cstdint>

namespace loom {
namespace gpu_linear_internal {

// LaunchAddBias enqueues y[i * ld + j] += bias[j] for i < rows, j < cols on `stream`
// (a cudaStream_t). Device pointers. Returns the launch's cudaError_t (0 = success).
int LaunchAddBias(float* y, int64_t rows, int64_t cols, int64_t ld, const float* bias,
                  void* stream);

// LaunchSumRows enqueues sums[j] = sum over i of g[i * ld + j] (from 0.0f, rows in
// order, in f32) for j < cols on `stream`. Device pointers. Returns the launch's
// cudaError_t (0 = success).
int LaunchSumRows(const float* g, int64_t rows, int64_t cols, int64_t ld, float* sums,
                  void* stream);

}  // namespace gpu_linear_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_GPU_INTERNAL_LINEAR_KERNELS_H_

// Kernels of device_reduce.h behind a plain C++ interface: CUDA runtime types only, no
// Abseil and no Loom enums, because nvcc compiles the .cu side without Loom's deps.
// The caller (device_reduce.cc) validates the arguments and turns the result into an
// absl::Status. Internal to core/gpu.
#ifndef LOOM_CORE_GPU_DEVICE_REDUCE_KERNELS_H_
#define LOOM_CORE_GPU_DEVICE_REDUCE_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace loom {
namespace device_reduce_internal {

// The element types, mirroring loom::DType (mapped by name, not by value).
enum class KernelType : int { kF32, kF64, kF16, kBF16, kI8, kU8, kI32, kI64 };

// The element-wise ops. There is no avg: it is a sum, divided once at the end.
enum class KernelOp : int { kSum, kProd, kMin, kMax };

// The outcome of a launch: on failure, the CUDA call that failed and its error. For a
// kernel launch `kernel` is true, `call` is the kernel's name and `blocks` / `threads`
// its launch shape, so the caller can spell out the launch.
struct LaunchResult {
  const char* call = nullptr;
  cudaError_t error = cudaSuccess;
  bool kernel = false;
  unsigned blocks = 0;
  unsigned threads = 0;
};

// LaunchReduce enqueues out[i] = op(a[i], b[i]) for i in [0, count) on `stream` of the
// current device. Preconditions (checked by the caller): count > 0; the pointers are
// non-null device-accessible memory aligned to the element size; out is exactly a, b,
// or disjoint from both. Pointers that share their offset within 16 bytes take the
// vectorized path (16-byte loads and stores), others the scalar one.
LaunchResult LaunchReduce(KernelOp op, KernelType type, const void* a, const void* b, void* out,
                          size_t count, cudaStream_t stream);

// LaunchFinishAverage enqueues buf[i] /= num_ranks, with the rounding of
// collectives/reduce FinishAverage. Preconditions: count > 0, num_ranks > 1, buf
// non-null and aligned to the element size.
LaunchResult LaunchFinishAverage(KernelType type, void* buf, size_t count, int64_t num_ranks,
                                 cudaStream_t stream);

}  // namespace device_reduce_internal
}  // namespace loom

#endif  // LOOM_CORE_GPU_DEVICE_REDUCE_KERNELS_H_

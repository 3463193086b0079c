// The AdamW kernel behind gpu_adamw.h, with a plain interface (no absl, no CUDA
// types beyond the runtime API's) so that nvcc, which sees only this header and the
// .cu file, and the C++ side share it. Callers outside this package use GpuAdamWStep,
// which validates its arguments and derives the constants.
#ifndef LOOM_OFFLOAD_GPU_GPU_ADAMW_KERNELS_H_
#define LOOM_OFFLOAD_GPU_GPU_ADAMW_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom {
namespace gpu_adamw_internal {

// StepConstants: the per-step scalars, derived on the host exactly as the CPU AdamW
// derives them (in double, rounded to float once), so both paths use the same bits.
struct StepConstants {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float grad_scale;
  float eps;
  float decay;         // 1 - lr * weight_decay
  float step_size;     // lr / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
};

// Which 16-bit copy of the updated params the kernel writes, if any.
enum class HalfKind : int32_t { kNone, kBF16, kF16 };

// StepArgs: device pointers to `count` elements each (`half` null for kNone).
struct StepArgs {
  float* params;
  const float* grads;
  float* exp_avg;
  float* exp_avg_sq;
  uint16_t* half;
  int64_t count;
  HalfKind half_kind;
};

// LaunchAdamWStep enqueues the fused step on `stream` and returns the launch's error
// (cudaSuccess, or what cudaGetLastError reported right after it). count 0 launches
// nothing.
cudaError_t LaunchAdamWStep(const StepConstants& constants, const StepArgs& args,
                            cudaStream_t stream);

}  // namespace gpu_adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_GPU_ADAMW_KERNELS_H_

// The AdamW kernel behind gpu_adamw.h, with a plain interface (no absl, no CUDA
// types beyond the runtime API's) so that nvcc, which sees only this header and the
// .cu file, and the C++ side share it. Callers outside this package use GpuAdamWStep,
// which validates its arguments and derives the constants.
#ifndef LOOM_OFFLOAD_GPU_GPU_ADAMW_KERNELS_H_
#define LOOM_OFFLOAD_GPU_GPU_ADAMW_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "offload/adamw/internal/kernels.h"

namespace loom {
namespace gpu_adamw_internal {

// The CPU AdamW's per-step constants and 16-bit copy kinds (a plain header, so nvcc
// sees it too): the host derives the constants with the CPU's DeriveStepConstants, so
// both paths multiply by the same floats.
using StepConstants = adamw_internal::StepConstants;
using HalfKind = adamw_internal::HalfKind;

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

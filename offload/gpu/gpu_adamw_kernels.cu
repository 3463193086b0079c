// The fused AdamW element update, the same sequence of single-rounding IEEE float
// operations as offload/adamw/internal/adamw_scalar.cc:
//
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * (g * g)
//   d = sqrt(v) * (1 / sqrt(1 - beta2^step)) + eps
//   p = p * (1 - lr * weight_decay) - (lr / (1 - beta1^step)) * (m / d)
//
// Every operation is an explicit round-to-nearest intrinsic (__fmul_rn, __fadd_rn,
// __fsub_rn, __fdiv_rn, __fsqrt_rn): nvcc never contracts those into a fused
// multiply-add, and the division and square root are the correctly rounded ones
// (not the approximate forms --use_fast_math would pick). So the GPU step gives the
// CPU AdamW's bits, which is what gpu_adamw_test checks.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "offload/gpu/gpu_adamw_kernels.h"

namespace loom {
namespace gpu_adamw_internal {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any current device several times over; the grid-stride loop
// covers larger arrays.
constexpr int64_t kMaxBlocks = 1 << 16;

// As core/half.h's ToBFloat16: round to nearest even; NaN keeps sign and payload
// with the quiet bit set.
__device__ __forceinline__ uint16_t ToBFloat16Bits(float value) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// As core/half.h's ToFloat16: __float2half_rn is IEEE round to nearest even
// (subnormals and overflow to Inf included); NaN as the CPU path writes it.
__device__ __forceinline__ uint16_t ToFloat16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7E00u | ((abs >> 13) & 0x3FFu));
  }
  return __half_as_ushort(__float2half_rn(value));
}

__global__ void AdamWStepKernel(const StepConstants c, float* __restrict__ params,
                                const float* __restrict__ grads, float* __restrict__ exp_avg,
                                float* __restrict__ exp_avg_sq, uint16_t* __restrict__ half,
                                const int64_t count, const HalfKind half_kind) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const float g = __fmul_rn(grads[i], c.grad_scale);
    const float m = __fadd_rn(__fmul_rn(c.beta1, exp_avg[i]), __fmul_rn(c.one_minus_beta1, g));
    const float v =
        __fadd_rn(__fmul_rn(c.beta2, exp_avg_sq[i]), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
    const float d = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bc2), c.eps);
    const float p =
        __fsub_rn(__fmul_rn(params[i], c.decay), __fmul_rn(c.step_size, __fdiv_rn(m, d)));
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (half_kind == HalfKind::kBF16) {
      half[i] = ToBFloat16Bits(p);
    } else if (half_kind == HalfKind::kF16) {
      half[i] = ToFloat16Bits(p);
    }
  }
}

}  // namespace

cudaError_t LaunchAdamWStep(const StepConstants& constants, const StepArgs& args,
                            cudaStream_t stream) {
  if (args.count <= 0) return cudaSuccess;
  int64_t blocks = (args.count + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  AdamWStepKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      constants, args.params, args.grads, args.exp_avg, args.exp_avg_sq, args.half, args.count,
      args.half_kind);
  return cudaGetLastError();
}

}  // namespace gpu_adamw_internal
}  // namespace loom

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

// One element's update (the sequence above); returns the new parameter.
__device__ __forceinline__ float UpdateOne(const StepConstants& c, float& p, float grad, float& m,
                                           float& v) {
  const float g = __fmul_rn(grad, c.grad_scale);
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(c.one_minus_beta2, __fmul_rn(g, g)));
  const float d = __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bc2), c.eps);
  p = __fsub_rn(__fmul_rn(p, c.decay), __fmul_rn(c.step_size, __fdiv_rn(m, d)));
  return p;
}

__device__ __forceinline__ uint16_t HalfBits(float p, HalfKind kind) {
  return kind == HalfKind::kBF16 ? ToBFloat16Bits(p) : ToFloat16Bits(p);
}

__global__ void AdamWStepKernel(const StepConstants c, float* __restrict__ params,
                                const float* __restrict__ grads, float* __restrict__ exp_avg,
                                float* __restrict__ exp_avg_sq, uint16_t* __restrict__ half,
                                const int64_t count, const HalfKind half_kind) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float p = params[i], m = exp_avg[i], v = exp_avg_sq[i];
    UpdateOne(c, p, grads[i], m, v);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (half_kind != HalfKind::kNone) half[i] = HalfBits(p, half_kind);
  }
}

// The same update, four elements a thread through 16-byte loads and stores (every
// array 16-byte aligned, the half copy 8-byte aligned; count4 = count / 4, the rest
// left to AdamWStepKernel): more bytes in flight a thread, so the step runs nearer
// the memory's bandwidth. Each element's arithmetic is UpdateOne's, so the bits are
// the scalar kernel's.
__global__ void AdamWStep4Kernel(const StepConstants c, float4* __restrict__ params,
                                 const float4* __restrict__ grads, float4* __restrict__ exp_avg,
                                 float4* __restrict__ exp_avg_sq, uint2* __restrict__ half,
                                 const int64_t count4, const HalfKind half_kind) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count4;
       i += stride) {
    float4 p = params[i], m = exp_avg[i], v = exp_avg_sq[i];
    const float4 g = grads[i];
    UpdateOne(c, p.x, g.x, m.x, v.x);
    UpdateOne(c, p.y, g.y, m.y, v.y);
    UpdateOne(c, p.z, g.z, m.z, v.z);
    UpdateOne(c, p.w, g.w, m.w, v.w);
    params[i] = p;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (half_kind != HalfKind::kNone) {
      uint2 bits;
      bits.x = static_cast<uint32_t>(HalfBits(p.x, half_kind)) |
               (static_cast<uint32_t>(HalfBits(p.y, half_kind)) << 16);
      bits.y = static_cast<uint32_t>(HalfBits(p.z, half_kind)) |
               (static_cast<uint32_t>(HalfBits(p.w, half_kind)) << 16);
      half[i] = bits;
    }
  }
}

bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

int64_t BlocksFor(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return blocks > kMaxBlocks ? kMaxBlocks : blocks;
}

}  // namespace

cudaError_t LaunchAdamWStep(const StepConstants& constants, const StepArgs& args,
                            cudaStream_t stream) {
  if (args.count <= 0) return cudaSuccess;
  const bool has_half = args.half_kind != HalfKind::kNone;
  const bool vector = Aligned(args.params, 16) && Aligned(args.grads, 16) &&
                      Aligned(args.exp_avg, 16) && Aligned(args.exp_avg_sq, 16) &&
                      (!has_half || Aligned(args.half, 8));
  int64_t done = 0;
  if (vector && args.count >= 4) {
    const int64_t count4 = args.count / 4;
    AdamWStep4Kernel<<<static_cast<unsigned>(BlocksFor(count4)), kThreads, 0, stream>>>(
        constants, reinterpret_cast<float4*>(args.params),
        reinterpret_cast<const float4*>(args.grads), reinterpret_cast<float4*>(args.exp_avg),
        reinterpret_cast<float4*>(args.exp_avg_sq),
        has_half ? reinterpret_cast<uint2*>(args.half) : nullptr, count4, args.half_kind);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    done = count4 * 4;
  }
  if (done == args.count) return cudaSuccess;
  AdamWStepKernel<<<static_cast<unsigned>(BlocksFor(args.count - done)), kThreads, 0, stream>>>(
      constants, args.params + done, args.grads + done, args.exp_avg + done,
      args.exp_avg_sq + done, has_half ? args.half + done : nullptr, args.count - done,
      args.half_kind);
  return cudaGetLastError();
}

}  // namespace gpu_adamw_internal
}  // namespace loom

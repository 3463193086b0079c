// Causal attention without the [s, s] matrices (FlashAttention-2's tiling) for
// device_gpt_model.h's bf16 path: bf16 Q, K, V in head layout [b * heads, s, d],
// 64 x 64 tiles on the tensor cores (WMMA, f32 accumulation), the softmax online in
// f32, the output's log-sum-exp kept per row for the backward, which recomputes the
// probabilities tile by tile. head_dim 64 or 128 (FlashSupported).
//
// Plain C++ interface (CUDA runtime types only); the caller sizes the buffers.
#ifndef LOOM_MODELS_GPT_GPU_FLASH_ATTENTION_KERNELS_H_
#define LOOM_MODELS_GPT_GPU_FLASH_ATTENTION_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom {
namespace gpt_gpu {

bool FlashSupported(int64_t head_dim);

// out [bh, s, d] (bf16) = softmax(scale q k^T, causal) v; lse [bh * s] (f32) the
// rows' log-sum-exp of the scaled scores.
cudaError_t FlashForward(const void* q, const void* k, const void* v, void* out, float* lse,
                         int64_t bh, int64_t s, int64_t d, float scale, cudaStream_t stream);

// delta [b * heads * s] = rowsum(dctx * ctx) per (sequence, head, position), from
// ctx and dctx in [s, b, heads * d] (bf16): FlashBackward's D.
cudaError_t AttentionDelta(const void* ctx, const void* dctx, float* delta, int64_t s, int64_t b,
                           int64_t heads, int64_t d, cudaStream_t stream);

// The gradients of FlashForward for dout [bh, s, d] (bf16): dq, dk, dv [bh, s, d]
// (bf16). dq_accum is scratch of bh * s * d floats (zeroed here).
cudaError_t FlashBackward(const void* q, const void* k, const void* v, const void* dout,
                          const float* lse, const float* delta, void* dq, void* dk, void* dv,
                          float* dq_accum, int64_t bh, int64_t s, int64_t d, float scale,
                          cudaStream_t stream);

}  // namespace gpt_gpu
}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPU_FLASH_ATTENTION_KERNELS_H_

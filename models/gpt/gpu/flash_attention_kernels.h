// Causal attention without the [s, s] matrices (FlashAttention-2's tiling) for
// device_gpt_model.h's bf16 path: bf16 Q, K, V in any layout whose head_dim elements
// are contiguous (the model reads them in place in its [s, b, 3h] QKV rows and writes
// the output in its [s, b, h] rows, so no permute runs), 64 x 64 tiles on the tensor
// cores (mma.sync, f32 accumulation), the softmax online in f32 on the accumulators,
// the output's log-sum-exp kept per row for the backward, which recomputes the
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

// Where the d contiguous elements of (sequence bi, head j, position si) of an operand
// start: bi * batch + j * head + si * row elements from its pointer. The head layout
// [b * heads, s, d] is {heads * s * d, s * d, d}; the model's row layout [s, b, W] with
// the heads side by side in W columns is {W, d, b * W}.
struct AttentionStrides {
  int64_t batch = 0, head = 0, row = 0;
};

// The head layout's strides, and the row layout's for rows of `width` elements.
AttentionStrides HeadLayout(int64_t heads, int64_t s, int64_t d);
AttentionStrides RowLayout(int64_t b, int64_t width, int64_t d);

// out = softmax(scale q k^T, causal) v for each of the b * heads (sequence, head)
// pairs, bf16 q, k, v (qkv_strides) and out (out_strides); lse [b * heads * s] (f32,
// index (bi * heads + j) * s + si) the rows' log-sum-exp of the scaled scores.
cudaError_t FlashForward(const void* q, const void* k, const void* v,
                         const AttentionStrides& qkv_strides, void* out,
                         const AttentionStrides& out_strides, float* lse, int64_t b,
                         int64_t heads, int64_t s, int64_t d, float scale, cudaStream_t stream);

// delta [b * heads * s] = rowsum(dctx * ctx) per (sequence, head, position), from
// ctx and dctx in [s, b, heads * d] (bf16): FlashBackward's D.
cudaError_t AttentionDelta(const void* ctx, const void* dctx, float* delta, int64_t s, int64_t b,
                           int64_t heads, int64_t d, cudaStream_t stream);

// The gradients of FlashForward for dout (out_strides): dq, dk, dv (bf16, grad_strides).
// dq_accum is scratch of b * heads * s * d floats (zeroed here).
cudaError_t FlashBackward(const void* q, const void* k, const void* v,
                          const AttentionStrides& qkv_strides, const void* dout,
                          const AttentionStrides& out_strides, const float* lse,
                          const float* delta, void* dq, void* dk, void* dv,
                          const AttentionStrides& grad_strides, float* dq_accum, int64_t b,
                          int64_t heads, int64_t s, int64_t d, float scale, cudaStream_t stream);

}  // namespace gpt_gpu
}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPU_FLASH_ATTENTION_KERNELS_H_

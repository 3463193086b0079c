// The GPT block's element-wise and row-wise kernels on CUDA device memory, written
// once for device_gpt_model.h: embeddings, layer norm, bias + GELU, residual adds,
// causal softmax, the split of the QKV projection into heads and back, cross-entropy
// with its log-sum-exp, column sums (bias and norm gradients), sums of squares.
//
// A plain C++ interface (CUDA runtime types only, no Abseil): nvcc compiles the .cu
// side without Loom's deps. The caller (device_gpt_model.cc) sizes every buffer and
// turns the returned cudaError_t into an absl::Status.
//
// "Operand" tensors, the ones a matrix product reads, are of the model's compute type:
// f32, or bf16 when `bf16` is true (`void*` then holds __nv_bfloat16). Everything else
// (the residual stream, pre-activation values, statistics, gradients of the residual
// stream) is f32. Every reduction accumulates in f32 in a fixed order, so a run is
// repeatable; the one exception is the token embedding's gradient (atomic adds).
//
// Layouts follow models/gpt: activations are rows r = position * batch + sequence of
// width h ([s, b, h]); tokens and targets are [b, s]; attention heads are
// [b * heads, s, head_dim] ("head layout"), sequence-major.
#ifndef LOOM_MODELS_GPT_GPU_GPT_KERNELS_H_
#define LOOM_MODELS_GPT_GPU_GPT_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom {
namespace gpt_gpu {

// x[s, b, h] = token[tokens[b, s]] + position[s].
cudaError_t EmbedForward(const int32_t* tokens, const float* token, const float* position,
                         float* x, int64_t b, int64_t s, int64_t h, cudaStream_t stream);
// dposition[s] += sum over b of dx (in order); dtoken[tokens] += dx (atomic).
cudaError_t EmbedBackward(const float* dx, const int32_t* tokens, float* dtoken, float* dposition,
                          int64_t b, int64_t s, int64_t h, cudaStream_t stream);

// y = LayerNorm(x) * gamma + beta per row of n; y is an operand (compute type).
cudaError_t LayerNormForward(const float* x, const float* gamma, const float* beta, float eps,
                             void* y, float* mean, float* rstd, int64_t rows, int64_t n, bool bf16,
                             cudaStream_t stream);
// dx = residual + LayerNorm's input gradient for output gradient dy (residual may be
// null; dx may alias residual). dx_operand, if not null, gets a compute-type copy of
// dx. The parameter gradients are LayerNormParamGrads's.
cudaError_t LayerNormBackward(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, const float* residual, float* dx,
                              void* dx_operand, int64_t rows, int64_t n, bool bf16,
                              cudaStream_t stream);
// dgamma += sum over rows of dy * xhat; dbeta += sum over rows of dy. `partial` is
// scratch of ColumnPartialFloats(rows, n) floats.
cudaError_t LayerNormParamGrads(const float* x, const float* mean, const float* rstd,
                                const float* dy, float* dgamma, float* dbeta, float* partial,
                                int64_t rows, int64_t n, cudaStream_t stream);

// LayerNormBackward, LayerNormParamGrads and, with dx_sum not null, dx_sum[c] += sum
// over rows of the dx written (ColumnSumAdd of dx: the bias gradient that reads it) in
// one pass over x, dy and dx where n is a multiple of 4 up to 1024, the three kernels
// otherwise. `partial` is scratch of ColumnPartialFloats(rows, n) floats.
cudaError_t LayerNormBackwardWithGrads(const float* x, const float* gamma, const float* mean,
                                       const float* rstd, const float* dy, const float* residual,
                                       float* dx, void* dx_operand, float* dgamma, float* dbeta,
                                       float* dx_sum, float* partial, int64_t rows, int64_t n,
                                       bool bf16, cudaStream_t stream);

// out[c] += sum over rows of x[r, c]; x is f32 (x_bf16 false) or bf16. `partial`
// is scratch of ColumnPartialFloats(rows, n) floats.
cudaError_t ColumnSumAdd(const void* x, bool x_bf16, float* out, float* partial, int64_t rows,
                         int64_t n, cudaStream_t stream);
int64_t ColumnPartialFloats(int64_t rows, int64_t n);

// out = x + y + bias[c] (f32; out may alias x or y).
cudaError_t BiasResidual(const float* x, const float* y, const float* bias, float* out,
                         int64_t rows, int64_t n, cudaStream_t stream);

// out = x + y + bias (BiasResidual; out may alias x or y), then LayerNormForward of
// out into ln_y, mean and rstd: one pass over the rows where they fit a warp (n a
// multiple of 4, at most 2048), the two kernels otherwise.
cudaError_t BiasResidualLayerNorm(const float* x, const float* y, const float* bias, float* out,
                                  const float* gamma, const float* beta, float eps, void* ln_y,
                                  float* mean, float* rstd, int64_t rows, int64_t n, bool bf16,
                                  cudaStream_t stream);

// y [rows, n] (bf16) = x + bias (f32 x, bias [n]): the QKV product's bias, with the
// rows kept in place for flash attention, which reads them by stride.
cudaError_t BiasToBf16(const float* x, const float* bias, void* y, int64_t rows, int64_t n,
                       cudaStream_t stream);

// pre += bias (in place, in the operand type: the FC product's output, kept for the
// backward); g = GELU(pre) (operand).
cudaError_t BiasGeluForward(void* pre, const float* bias, void* g, int64_t rows, int64_t n,
                            bool bf16, cudaStream_t stream);
// dpre = dg * GELU'(pre), all three in the operand type.
cudaError_t GeluBackward(const void* pre, const void* dg, void* dpre, int64_t count, bool bf16,
                         cudaStream_t stream);
// GeluBackward over [rows, n], and dbias[c] += the column sums of the dpre it writes
// (ColumnSumAdd's, `partial` its scratch): the FC bias's gradient in the same pass.
cudaError_t GeluBackwardBiasGrad(const void* pre, const void* dg, void* dpre, float* dbias,
                                 float* partial, int64_t rows, int64_t n, bool bf16,
                                 cudaStream_t stream);

// qkv [s, b, 3h] (f32, a product's output) + bias -> q, k, v in head layout (operands).
cudaError_t SplitQkv(const float* qkv, const float* bias, void* q, void* k, void* v, int64_t s,
                     int64_t b, int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream);
// dq, dk, dv in head layout -> dqkv [s, b, 3h] (all operands).
cudaError_t MergeQkv(const void* dq, const void* dk, const void* dv, void* dqkv, int64_t s,
                     int64_t b, int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream);
// Head layout <-> [s, b, h], operands both (to_heads: rows -> heads).
cudaError_t PermuteHeads(const void* in, void* out, bool to_heads, int64_t s, int64_t b,
                         int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream);

// Over [rows, s] scores (f32: softmax amplifies their absolute error, so they are
// never rounded to bf16), rows = b * heads * s (row i of each [s, s] block is query
// i): p = softmax over keys 0..i of the scores, 0 past i (an operand; with f32 it
// may be the scores' own memory).
cudaError_t CausalSoftmaxForward(const float* scores, void* p, int64_t rows, int64_t s, bool bf16,
                                 cudaStream_t stream);
// In place over dp: ds = scale * p * (dp - sum_k p_k dp_k), 0 past the diagonal.
cudaError_t CausalSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t s, float scale,
                                  bool bf16, cudaStream_t stream);

// Cross-entropy of logits [s, b, vocab] (f32) against targets [b, s]. row_loss[r] =
// lse(r) - logits[r, target]; with dlogits (an operand) not null, dlogits = (softmax -
// onehot) * grad_scale. Targets outside [0, vocab) are counted in *bad_targets (int,
// device) and contribute nothing.
cudaError_t CrossEntropy(const float* logits, const int32_t* targets, float* row_loss,
                         void* dlogits, float grad_scale, int* bad_targets, int64_t b, int64_t s,
                         int64_t vocab, bool bf16, cudaStream_t stream);

// *out += scale * sum of x[0, count) (f32 in, f64 out; one block, fixed order).
cudaError_t SumInto(const float* x, int64_t count, double scale, double* out,
                    cudaStream_t stream);
// *out = sum of x[i]^2 over [0, count) in f64; `partial` is scratch of
// SquaresPartialDoubles() doubles.
cudaError_t SumSquares(const float* x, int64_t count, double* partial, double* out,
                       cudaStream_t stream);
int64_t SquaresPartialDoubles();

// bf16 copy of f32 values (round to nearest even).
cudaError_t ToBf16(const float* x, void* y, int64_t count, cudaStream_t stream);

}  // namespace gpt_gpu
}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPU_GPT_KERNELS_H_

// The backends behind Gemm(..., GemmPrecision::kBf16), each callable on its own, for tests that
// compare them and benchmarks that time them (private to //tensor_parallel/layers).
//
// Example:
//   LOOM_RETURN_IF_ERROR(GemmBf16On(Bf16Backend::kOpenBlas, a, Transpose::kNo, b,
//                                   Transpose::kYes, c, 1.0f, 0.0f));
//   // c = round_bf16(a) * round_bf16(b)^T through cblas_sgemm, on any CPU
//   GemmBf16On(Bf16Backend::kOneDnn, ...);
//   // Unavailable: "this CPU (or OS) has no AVX512_BF16" where oneDNN cannot run it
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_GEMM_BACKENDS_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_GEMM_BACKENDS_H_

#include "absl/status/status.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace gemm_internal {

enum class Bf16Backend {
  kAuto,      // what Gemm picks: oneDNN where it can run the product, else OpenBLAS
  kOneDnn,    // oneDNN's bf16 matmul only (internal/onednn_gemm.h)
  kOpenBlas,  // cblas_sgemm on the bf16-rounded inputs widened back to f32
};

// GemmBf16On is GemmBf16(a, trans_a, b, trans_b, c, alpha, beta) on `backend`,
// ignoring any GemmEngine installed on the thread: the same checks and errors, and kOneDnn returns
// oneDNN's Unavailable instead of falling back.
absl::Status GemmBf16On(Bf16Backend backend, GemmBf16Input a, Transpose trans_a,
                        GemmBf16Input b, Transpose trans_b, MatrixView c, float alpha,
                        float beta);

}  // namespace gemm_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_GEMM_BACKENDS_H_

// Gemm: the one matrix multiply of the parallel layers, row-major, with the shapes
// checked first (a wrong shape is an InvalidArgument naming both operands, never a
// BLAS abort or an overrun), in one of two precisions (GemmPrecision):
//   kF32   f32 through OpenBLAS's cblas_sgemm;
//   kBf16  A and B rounded to bf16, products accumulated in f32: oneDNN's bf16 matmul
//          where the CPU has AVX512_BF16, otherwise OpenBLAS on the rounded inputs.
//
// Threads: each product runs on GemmThreads() threads, one unless SetGemmThreads says
// otherwise: parts of the product on the calling thread and its own parked helpers
// (core/parallel_for.h), the same threads that run the rank's element-wise passes.
// Tensor-parallel ranks run as threads of one process in tests and benchmarks, each
// calling Gemm at once with helpers of its own, so the training job gives GEMM threads
// only where ranks x threads fit the host (--threads_per_rank). A kF32 product is cut
// into one part of C's rows (or columns) per thread, each one single-threaded OpenBLAS
// call, never splitting the inner dimension, so every element is the same k-ordered
// sum at every thread count (gemm_test checks the bits at the GPT shapes); kBf16 on oneDNN is bitwise the
// same from call to call at one thread count (across counts oneDNN promises nothing;
// measured, the GPT shapes gave the same bits at 1 and 2). OpenBLAS's own pool is
// kept at one thread, and a ThreadSanitizer build keeps kBf16 off oneDNN (TSan cannot
// see either library's pool synchronize).
//
// Example:
//   std::vector<float> a = {1, 2, 3, 4, 5, 6};        // [2,3]
//   std::vector<float> b = {1, 0, 0, 1, 1, 1};        // [3,2]
//   std::vector<float> c(4);
//   LOOM_RETURN_IF_ERROR(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2),
//                             Transpose::kNo, Dense(absl::MakeSpan(c), 2, 2)));
//   // c == {4, 5, 10, 11}
//   a[0] = 1.00390625f;                               // 1 + 2^-8: a bf16 tie
//   LOOM_RETURN_IF_ERROR(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2),
//                             Transpose::kNo, Dense(absl::MakeSpan(c), 2, 2), 1.0f, 0.0f,
//                             GemmPrecision::kBf16));
//   // c == {4, 5, 10, 11}: a[0] was rounded to 1 (ties to even)
//   Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kNo, ...);
//   // InvalidArgument: "Gemm: op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {

enum class Transpose { kNo, kYes };

// A row-major matrix of `rows` x `cols` inside `data`, rows `ld` elements apart
// (ld >= cols; a sub-matrix of a wider one, e.g. one attention head's columns).
struct ConstMatrixView {
  absl::Span<const float> data;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};
struct MatrixView {
  absl::Span<float> data;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

// A row-major bf16 matrix, laid out as ConstMatrixView: a kBf16 product's input that
// the caller already holds rounded (a weight's bf16 compute copy, or an activation
// used by two products), so that Gemm need not round it again.
struct ConstBf16MatrixView {
  absl::Span<const BFloat16> data;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t ld = 0;
};

// Dense returns the view of a packed rows x cols matrix (ld = cols).
inline ConstMatrixView Dense(absl::Span<const float> data, int64_t rows, int64_t cols) {
  return ConstMatrixView{data, rows, cols, cols};
}
inline MatrixView Dense(absl::Span<float> data, int64_t rows, int64_t cols) {
  return MatrixView{data, rows, cols, cols};
}
inline ConstBf16MatrixView Dense(absl::Span<const BFloat16> data, int64_t rows, int64_t cols) {
  return ConstBf16MatrixView{data, rows, cols, cols};
}

// CheckMatrixLayout returns InvalidArgument, prefixed by `who` ("Gemm: A"), unless the
// view's sizes are non-negative, ld >= cols (and >= 1 when it is non-empty) and its
// span holds every row: the one check of a view's layout for Gemm and the kernels
// that slice views (flash and ring attention).
absl::Status CheckMatrixLayout(int64_t rows, int64_t cols, int64_t ld, size_t span_size,
                               absl::string_view who);
template <typename View>
absl::Status CheckMatrixLayout(const View& v, absl::string_view who) {
  return CheckMatrixLayout(v.rows, v.cols, v.ld, v.data.size(), who);
}

// GemmPrecision: what Gemm's products multiply.
//   kF32   the f32 inputs as they are.
//   kBf16  A and B rounded to bf16 first (to nearest, ties to even, as core/half.h's
//          ToBFloat16), each product of two bf16 values exact in f32, accumulated in
//          f32 (C, alpha and beta stay f32): what a layer with bf16 weights and
//          activations computes. Against the exact product of the rounded inputs, an
//          element of C is off by at most (k + 2) * 2^-24 * (|alpha| * sum_p |a_ip b_pj|
//          + |beta c_ij|): f32 sums in any order, then alpha and beta (gemm_test asserts
//          it on both backends). On oneDNN, AVX512_BF16 also flushes subnormal inputs
//          and sums (below 2^-126) to zero.
enum class GemmPrecision { kF32, kBf16 };

// Gemm computes C = alpha * op(A) * op(B) + beta * C, where op transposes when asked,
// in `precision`. Returns InvalidArgument (naming the shapes) when op(A) is not
// [m,k], op(B) not [k,n] and C not [m,n], when a view's ld is below its cols, when a
// view's span is too short for its rows and ld, or (naming it) for a precision outside
// the enum. Empty products (m, n or k zero) are fine: C is then only scaled by beta.
// With beta = 0, C is only written, never read: it may start uninitialized (even NaN).
// kBf16 keeps per-thread scratch (the rounded inputs, up to the largest product the
// thread has run): ResourceExhausted if it cannot grow; Internal for a oneDNN
// failure at run time.
//
// Gemm runs on OpenBLAS (kBf16: oneDNN where it can) unless the calling thread has
// installed a GemmEngine (ScopedGemmEngine): then, after the same checks, every
// non-empty product goes to it, kBf16 ones with the bf16-rounded inputs.
absl::Status Gemm(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                  MatrixView c, float alpha = 1.0f, float beta = 0.0f,
                  GemmPrecision precision = GemmPrecision::kF32);

// GemmBf16Input: one input of GemmBf16, either f32 (rounded to bf16 inside, as
// Gemm's kBf16 rounds) or already bf16 (used as it is).
class GemmBf16Input {
 public:
  GemmBf16Input(const ConstMatrixView& f32) : f32_(f32) {}  // NOLINT: implicit on purpose
  GemmBf16Input(const ConstBf16MatrixView& bf16)             // NOLINT
      : bf16_(bf16), is_bf16_(true) {}
  bool is_bf16() const { return is_bf16_; }
  const ConstMatrixView& f32() const { return f32_; }
  const ConstBf16MatrixView& bf16() const { return bf16_; }
  int64_t rows() const { return is_bf16_ ? bf16_.rows : f32_.rows; }
  int64_t cols() const { return is_bf16_ ? bf16_.cols : f32_.cols; }
  int64_t ld() const { return is_bf16_ ? bf16_.ld : f32_.ld; }

 private:
  ConstMatrixView f32_;
  ConstBf16MatrixView bf16_;
  bool is_bf16_ = false;
};

// GemmBf16 is Gemm(..., GemmPrecision::kBf16) whose inputs may each be given already
// in bf16: the same checks, result and bound (a bf16 input holds what rounding the f32
// one would give), without rounding those inputs again. Where the product runs off
// oneDNN, bf16 inputs are widened to f32 for OpenBLAS or the GemmEngine.
//
//   // w16: a weight's bf16 compute copy, [n,k]; x: f32 activations, [m,k]
//   LOOM_RETURN_IF_ERROR(GemmBf16(Dense(x, m, k), Transpose::kNo, Dense(w16, n, k),
//                                 Transpose::kYes, Dense(y, m, n)));
absl::Status GemmBf16(GemmBf16Input a, Transpose trans_a, GemmBf16Input b, Transpose trans_b,
                      MatrixView c, float alpha = 1.0f, float beta = 0.0f);

// GemmBf16WithBias is GemmBf16 (alpha 1, beta 0) that also adds `bias`, n values, to
// every row of C: C = op(A) op(B) + 1 bias^T, each element the f32 product plus its
// bias in one f32 addition, so the bits of GemmBf16 followed by the addition. On
// oneDNN the addition is the product's own epilogue (no second pass over C); off it,
// it follows the product on the rank's threads. InvalidArgument as GemmBf16, or
// naming both counts when bias does not hold n values.
//
//   // y [m,n] = bf16(x) bf16(w)^T + b, the bias of a linear layer
//   LOOM_RETURN_IF_ERROR(GemmBf16WithBias(Dense(x, m, k), Transpose::kNo, Dense(w16, n, k),
//                                         Transpose::kYes, Dense(y, m, n), b));
absl::Status GemmBf16WithBias(GemmBf16Input a, Transpose trans_a, GemmBf16Input b,
                              Transpose trans_b, MatrixView c, absl::Span<const float> bias);

// GemmPrecisionName returns "f32" or "bf16" ("unknown" outside the enum).
absl::string_view GemmPrecisionName(GemmPrecision precision);

// GemmBackendName says where Gemm's products of `precision` run on this thread and
// machine, for reports: "OpenBLAS", "oneDNN (brg:avx512_core_bf16)" (the
// implementation oneDNN picks for a GPT-sized product), "OpenBLAS on bf16-rounded
// inputs (<why oneDNN is not used>)", or the installed GemmEngine's name.
std::string GemmBackendName(GemmPrecision precision);

// GemmEngine: somewhere else to run Gemm's products, such as a GPU
// (tensor_parallel/gpu/cublas_gemm_engine.h), for every layer a thread runs without
// the layers knowing. Run gets checked, non-empty host views (m, n, k >= 1, each within
// 32 bits) and must leave C as Gemm would, within the engine's stated bound; the
// columns of C's rows past c.cols (ld > cols) must stay untouched.
class GemmEngine {
 public:
  virtual ~GemmEngine() = default;
  virtual absl::string_view name() const = 0;
  virtual absl::Status Run(ConstMatrixView a, Transpose trans_a, ConstMatrixView b,
                           Transpose trans_b, MatrixView c, float alpha, float beta) = 0;
};

// ScopedGemmEngine installs `engine` for Gemm calls on the constructing thread until it
// is destroyed (then the one before it, if any, is back). The engine must outlive it.
//
//   CublasGemmEngine gpu = ...;
//   {
//     ScopedGemmEngine on_gpu(&gpu);
//     model.ForwardStage(...);   // every Gemm of this thread runs on the GPU
//   }
class ScopedGemmEngine {
 public:
  explicit ScopedGemmEngine(GemmEngine* engine);
  ~ScopedGemmEngine();
  ScopedGemmEngine(const ScopedGemmEngine&) = delete;
  ScopedGemmEngine& operator=(const ScopedGemmEngine&) = delete;

 private:
  GemmEngine* previous_;
};

// SetGemmThreads sets the threads each product uses, process-wide: it sets core's
// ComputeThreads() (core/parallel_for.h), which the parts of a product (and a rank's
// element-wise passes) run on, and keeps OpenBLAS's own pool at one thread. Call it
// before the threads that run Gemm start. InvalidArgument naming the value outside
// [1, 1024].
absl::Status SetGemmThreads(int threads);

// GemmThreads returns the threads set (1 by default): ComputeThreads().
int GemmThreads();

// CurrentGemmEngine returns the engine installed on this thread, or nullptr (OpenBLAS).
GemmEngine* CurrentGemmEngine();

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_

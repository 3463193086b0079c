// Gemm: the one matrix multiply of the parallel layers, row-major f32 through
// OpenBLAS's cblas_sgemm, with the shapes checked first (a wrong shape is an
// InvalidArgument naming both operands, never a BLAS abort or an overrun).
//
// Threads: OpenBLAS runs each product on GemmThreads() threads of its own pool, one
// unless SetGemmThreads says otherwise. Tensor-parallel ranks run as threads of one
// process in tests and benchmarks, each calling Gemm at once; a pool per caller on top
// would oversubscribe the cores, so the training job gives BLAS threads only where
// ranks x threads fit the host (--threads_per_rank). OpenBLAS splits a product's rows
// and columns between its threads, never the inner dimension, so the result is
// bitwise the same at every thread count (gemm_test checks it). A ThreadSanitizer
// build keeps OpenBLAS on the calling thread (TSan cannot see its pool synchronize).
//
// Example:
//   std::vector<float> a = {1, 2, 3, 4, 5, 6};        // [2,3]
//   std::vector<float> b = {1, 0, 0, 1, 1, 1};        // [3,2]
//   std::vector<float> c(4);
//   LOOM_RETURN_IF_ERROR(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2),
//                             Transpose::kNo, Dense(absl::MakeSpan(c), 2, 2)));
//   // c == {4, 5, 10, 11}
//   Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kNo, ...);
//   // InvalidArgument: "Gemm: op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

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

// Dense returns the view of a packed rows x cols matrix (ld = cols).
inline ConstMatrixView Dense(absl::Span<const float> data, int64_t rows, int64_t cols) {
  return ConstMatrixView{data, rows, cols, cols};
}
inline MatrixView Dense(absl::Span<float> data, int64_t rows, int64_t cols) {
  return MatrixView{data, rows, cols, cols};
}

// Gemm computes C = alpha * op(A) * op(B) + beta * C, where op transposes when asked.
// Returns InvalidArgument (naming the shapes) when op(A) is not [m,k], op(B) not
// [k,n] and C not [m,n], when a view's ld is below its cols, or when a view's span
// is too short for its rows and ld. Empty products (m, n or k zero) are fine: C is
// then only scaled by beta.
//
// Gemm runs on OpenBLAS unless the calling thread has installed a GemmEngine
// (ScopedGemmEngine): then, after the same checks, every non-empty product goes to it.
absl::Status Gemm(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                  MatrixView c, float alpha = 1.0f, float beta = 0.0f);

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

// SetGemmThreads sets the threads OpenBLAS uses for each product, process-wide. Call
// it before the threads that run Gemm start (OpenBLAS's setting is global, not per
// caller). InvalidArgument naming the value outside [1, 1024].
absl::Status SetGemmThreads(int threads);

// GemmThreads returns the threads set (1 by default).
int GemmThreads();

// CurrentGemmEngine returns the engine installed on this thread, or nullptr (OpenBLAS).
GemmEngine* CurrentGemmEngine();

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_GEMM_H_

#include "tensor_parallel/layers/gemm.h"

#include <cblas.h>

#include <atomic>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/compute_timer.h"

namespace loom {
namespace {

std::string Shape(int64_t rows, int64_t cols) { return absl::StrCat("[", rows, ",", cols, "]"); }

template <typename View>
absl::Status CheckView(const View& v, const char* name) {
  // An empty view never reaches BLAS (see Gemm), so only a non-empty one needs ld >= 1.
  if (v.rows < 0 || v.cols < 0 || v.ld < v.cols || (v.rows > 0 && v.cols > 0 && v.ld < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: ", name, " is ", Shape(v.rows, v.cols),
                                                   " with ld ", v.ld, "; need ld >= cols"));
  }
  const int64_t needed = v.rows == 0 || v.cols == 0 ? 0 : (v.rows - 1) * v.ld + v.cols;
  if (static_cast<int64_t>(v.data.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: ", name, " is ", Shape(v.rows, v.cols),
                                                   " with ld ", v.ld, ", needing ", needed,
                                                   " elements, but its span has ",
                                                   v.data.size()));
  }
  return absl::OkStatus();
}

// The engine ScopedGemmEngine installed on this thread (nullptr: OpenBLAS).
thread_local GemmEngine* current_engine = nullptr;

// The threads OpenBLAS is given for `requested`. Under ThreadSanitizer, one: its pool
// hands work to its threads through spin-waits in uninstrumented code, which TSan
// cannot see, so it would report OpenBLAS's own writes as races. The products' bits do
// not depend on the count (see the header), so the program TSan checks computes the
// same; GemmThreads() still says what was asked.
int BlasThreadsFor(int requested) {
#if defined(__SANITIZE_THREAD__)
  (void)requested;
  return 1;
#else
  return requested;
#endif
}

// OpenBLAS's thread count: the default is applied on the first product unless
// SetGemmThreads came first (see the header).
std::mutex blas_threads_mutex;
int blas_threads = 1;            // guarded by blas_threads_mutex
std::atomic<bool> blas_threads_applied{false};

void ApplyBlasThreadsOnce() {
  if (blas_threads_applied.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  if (blas_threads_applied.load(std::memory_order_relaxed)) return;
  openblas_set_num_threads(BlasThreadsFor(blas_threads));
  blas_threads_applied.store(true, std::memory_order_release);
}

}  // namespace

absl::Status Gemm(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                  MatrixView c, float alpha, float beta) {
  const ScopedComputeTimer timer(ComputeKind::kGemm);  // the job's step breakdown
  if (absl::Status s = CheckView(a, "A"); !s.ok()) return s;
  if (absl::Status s = CheckView(b, "B"); !s.ok()) return s;
  if (absl::Status s = CheckView(c, "C"); !s.ok()) return s;
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols : a.rows;
  const int64_t k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows;
  const int64_t n = tb ? b.rows : b.cols;
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: op(A) is ", Shape(m, k), " but op(B) is ",
                                                   Shape(kb, n), ": inner dimensions differ"));
  }
  if (c.rows != m || c.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: op(A) ", Shape(m, k), " x op(B) ",
                                                   Shape(kb, n), " is ", Shape(m, n),
                                                   " but C is ", Shape(c.rows, c.cols)));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    // BLAS would accept this, but lda/ldb of empty operands are easy to get wrong;
    // the product is zero, so only the beta scaling remains.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        float& x = c.data[static_cast<size_t>(i * c.ld + j)];
        x = beta == 0.0f ? 0.0f : beta * x;
      }
    }
    return absl::OkStatus();
  }
  constexpr int64_t kMaxBlasInt = (int64_t{1} << 31) - 1;
  for (int64_t v : {m, n, k, a.ld, b.ld, c.ld}) {
    if (v > kMaxBlasInt) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gemm: dimension or ld ", v, " exceeds the 32-bit BLAS interface (m=", m, " n=", n,
          " k=", k, ")"));
    }
  }
  if (current_engine != nullptr) {
    return current_engine->Run(a, trans_a, b, trans_b, c, alpha, beta);
  }
  ApplyBlasThreadsOnce();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha,
              a.data.data(), static_cast<blasint>(a.ld), b.data.data(),
              static_cast<blasint>(b.ld), beta, c.data.data(), static_cast<blasint>(c.ld));
  return absl::OkStatus();
}

absl::Status SetGemmThreads(int threads) {
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetGemmThreads: ", threads, " threads; need 1 to 1024"));
  }
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  blas_threads = threads;
  openblas_set_num_threads(BlasThreadsFor(threads));
  blas_threads_applied.store(true, std::memory_order_release);
  return absl::OkStatus();
}

int GemmThreads() {
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  return blas_threads;
}

ScopedGemmEngine::ScopedGemmEngine(GemmEngine* engine) : previous_(current_engine) {
  current_engine = engine;
}

ScopedGemmEngine::~ScopedGemmEngine() { current_engine = previous_; }

GemmEngine* CurrentGemmEngine() { return current_engine; }

}  // namespace loom

#include "tensor_parallel/layers/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/aligned_buffer.h"
#include "core/compute_timer.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/mutex.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/internal/gemm_backends.h"
#include "tensor_parallel/layers/internal/onednn_gemm.h"

namespace loom {
namespace {

std::string Shape(int64_t rows, int64_t cols) { return absl::StrCat("[", rows, ",", cols, "]"); }

template <typename View>
absl::Status CheckView(const View& v, const char* name) {
  return CheckMatrixLayout(v, absl::StrCat("Gemm: ", name));
}

// The engine ScopedGemmEngine installed on this thread (nullptr: OpenBLAS).
thread_local GemmEngine* current_engine = nullptr;

// OpenBLAS runs every call on its caller (one thread: the rank's threads split the
// products, OpenBlasGemm below), set before the first product. Its own pool would
// also hand work over through spin-waits in uninstrumented code, which
// ThreadSanitizer cannot see.
Mutex blas_threads_mutex;
std::atomic<bool> blas_threads_applied{false};

void ApplyBlasThreadsOnce() {
  if (blas_threads_applied.load(std::memory_order_acquire)) return;
  MutexLock lock(&blas_threads_mutex);
  if (blas_threads_applied.load(std::memory_order_relaxed)) return;
  openblas_set_num_threads(1);
  blas_threads_applied.store(true, std::memory_order_release);
}

// The checked dimensions of a product: op(A) [m,k], op(B) [k,n].
struct Dims {
  int64_t m, n, k;
};

absl::StatusOr<Dims> CheckGemm(const GemmBf16Input& a, Transpose trans_a, const GemmBf16Input& b,
                               Transpose trans_b, const MatrixView& c) {
  const auto check = [](const GemmBf16Input& v, const char* name) {
    return v.is_bf16() ? CheckView(v.bf16(), name) : CheckView(v.f32(), name);
  };
  LOOM_RETURN_IF_ERROR(check(a, "A"));
  LOOM_RETURN_IF_ERROR(check(b, "B"));
  LOOM_RETURN_IF_ERROR(CheckView(c, "C"));
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols() : a.rows();
  const int64_t k = ta ? a.rows() : a.cols();
  const int64_t kb = tb ? b.cols() : b.rows();
  const int64_t n = tb ? b.rows() : b.cols();
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: op(A) is ", Shape(m, k), " but op(B) is ",
                                                   Shape(kb, n), ": inner dimensions differ"));
  }
  if (c.rows != m || c.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: op(A) ", Shape(m, k), " x op(B) ",
                                                   Shape(kb, n), " is ", Shape(m, n),
                                                   " but C is ", Shape(c.rows, c.cols)));
  }
  if (m == 0 || n == 0 || k == 0) return Dims{m, n, k};
  constexpr int64_t kMaxBlasInt = (int64_t{1} << 31) - 1;
  for (int64_t v : {m, n, k, a.ld(), b.ld(), c.ld}) {
    if (v > kMaxBlasInt) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gemm: dimension or ld ", v, " exceeds the 32-bit BLAS interface (m=", m, " n=", n,
          " k=", k, ")"));
    }
  }
  return Dims{m, n, k};
}

// ScaleByBeta leaves C = beta * C, the whole product when k is 0. BLAS would accept
// k = 0, but lda/ldb of empty operands are easy to get wrong.
void ScaleByBeta(const MatrixView& c, float beta) {
  for (int64_t i = 0; i < c.rows; ++i) {
    for (int64_t j = 0; j < c.cols; ++j) {
      float& x = c.data[static_cast<size_t>(i * c.ld + j)];
      x = beta == 0.0f ? 0.0f : beta * x;
    }
  }
}

// CheckedProduct checks a product and finishes an empty one (m or n zero: nothing
// to do; k zero: C scaled by beta): the dimensions of a product left to run, or
// nullopt when it is done.
absl::StatusOr<std::optional<Dims>> CheckedProduct(const GemmBf16Input& a, Transpose trans_a,
                                                   const GemmBf16Input& b, Transpose trans_b,
                                                   const MatrixView& c, float beta) {
  LOOM_ASSIGN_OR_RETURN(const Dims d, CheckGemm(a, trans_a, b, trans_b, c));
  if (d.m == 0 || d.n == 0) return std::nullopt;
  if (d.k == 0) {
    ScaleByBeta(c, beta);
    return std::nullopt;
  }
  return d;
}

// Sgemm is one cblas_sgemm call on OpenBLAS's calling thread.
void Sgemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == Transpose::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Transpose::kYes ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// OpenBlasGemm runs a checked, non-empty product through cblas_sgemm on the rank's
// threads: C's rows are cut into one part per thread, in multiples of kPartAlign,
// each part an independent single-threaded call. As in OpenBLAS's own threading, the
// inner dimension is never split, and every element of C is the same k-ordered sum
// whichever part holds it, so the bits do not depend on the thread count (gemm_test
// checks the GPT shapes at 1 to 3 threads, on the host's kernels and capped to
// AVX2's and AVX-512's). That holds only where the parts line up with the kernel's
// own blocks: OpenBLAS's Haswell and Zen sgemm (AVX2) sum the last rows of a part
// that is not a multiple of 24 rows, and any part of C's columns (its own M) that
// does not match its blocking of the whole, in another order; so the cut is by rows
// only, at multiples of 24 (SkylakeX's and Cooperlake's kernels keep the bits at any
// multiple of 16 rows and of 24). A part keeps at least kMinPartMacs multiply-adds, far above the
// 64^3 below which OpenBLAS switches to its small-matrix kernels. One part per
// thread (not fixed blocks) packs the shared operand once per thread. (OpenBLAS's own
// pool stays at one thread: its workers spin-wait for about a millisecond after each
// product and took the cores from the rank's element-wise work and attention; one
// team per rank now serves all three.)
constexpr int64_t kPartAlign = 24;
constexpr int64_t kMinPartMacs = int64_t{1} << 20;

void OpenBlasGemm(const ConstMatrixView& a, Transpose trans_a, const ConstMatrixView& b,
                  Transpose trans_b, const MatrixView& c, const Dims& d, float alpha, float beta) {
  ApplyBlasThreadsOnce();
  const int64_t span = d.m;
  const int64_t parts = std::clamp<int64_t>(
      std::min({int64_t{ComputeThreads()}, span / kPartAlign, d.m * d.n * d.k / kMinPartMacs}),
      1, span);
  // Part p covers rows [first(p), first(p + 1)): near-equal runs of kPartAlign-row units.
  const int64_t units = (span + kPartAlign - 1) / kPartAlign;
  const auto first = [&](int64_t p) { return std::min(span, p * units / parts * kPartAlign); };
  const auto part = [&](int64_t p) {
    const int64_t begin = first(p), count = first(p + 1) - begin;
    // Rows [begin, begin + count) of op(A) and of C.
    const float* a_rows = a.data.data() + (trans_a == Transpose::kYes ? begin : begin * a.ld);
    Sgemm(trans_a, trans_b, count, d.n, d.k, alpha, a_rows, a.ld, b.data.data(), b.ld, beta,
          c.data.data() + begin * c.ld, c.ld);
  };
  if (parts == 1) return part(0);
  // Each part writes its own piece of C, so no part can fail the others.
  ParallelFor(parts, static_cast<int>(parts), [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) part(p);
    return absl::OkStatus();
  }).IgnoreError();
}

// The scratch of the bf16 path off oneDNN, one per thread, grown to the largest
// operands the thread has multiplied and kept: the rounded A and B packed dense
// (ld = cols) as bf16, and widened back to f32 for OpenBLAS and GemmEngines. Nothing
// is allocated in the steady state.
struct Bf16Scratch {
  AlignedBuffer<BFloat16> a16, b16;
  AlignedBuffer<float> a32, b32;
};

template <typename T>
absl::StatusOr<absl::Span<T>> Reserve(AlignedBuffer<T>& buffer, size_t size) {
  if (buffer.size() < size) {
    LOOM_ASSIGN_OR_RETURN(buffer, AlignedBuffer<T>::CreateUninitialized(size));
  }
  return buffer.span().first(size);
}

// RoundToBf16 packs the stored rows x cols of `v` densely into `buffer`, rounded to
// bf16. The size fits: v's span holds at least rows x cols elements (CheckView).
absl::StatusOr<absl::Span<const BFloat16>> RoundToBf16(const ConstMatrixView& v,
                                                       AlignedBuffer<BFloat16>& buffer) {
  const size_t cols = static_cast<size_t>(v.cols);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<BFloat16> out,
                        Reserve(buffer, static_cast<size_t>(v.rows) * cols));
  if (v.ld == v.cols) {
    LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(v.data.first(out.size()), out));
  } else {
    for (size_t i = 0; i < static_cast<size_t>(v.rows); ++i) {
      LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(v.data.subspan(i * static_cast<size_t>(v.ld), cols),
                                            out.subspan(i * cols, cols)));
    }
  }
  return absl::Span<const BFloat16>(out);
}

// Widened returns the dense f32 view of the rounded `packed` (rows x cols of `like`).
absl::StatusOr<ConstMatrixView> Widened(absl::Span<const BFloat16> packed,
                                        const ConstMatrixView& like,
                                        AlignedBuffer<float>& buffer) {
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> out, Reserve(buffer, packed.size()));
  LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(packed, out));
  return Dense(absl::Span<const float>(out), like.rows, like.cols);
}

// AsF32 returns `input` as the dense f32 view of its bf16 rounding, for OpenBLAS and
// GemmEngines: an f32 input is rounded and widened back, a bf16 one only widened.
absl::StatusOr<ConstMatrixView> AsF32(const GemmBf16Input& input, AlignedBuffer<BFloat16>& b16,
                                      AlignedBuffer<float>& b32) {
  if (!input.is_bf16()) {
    LOOM_ASSIGN_OR_RETURN(const absl::Span<const BFloat16> packed,
                          RoundToBf16(input.f32(), b16));
    return Widened(packed, input.f32(), b32);
  }
  const ConstBf16MatrixView& v = input.bf16();
  const size_t cols = static_cast<size_t>(v.cols);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> out,
                        Reserve(b32, static_cast<size_t>(v.rows) * cols));
  for (size_t i = 0; i < static_cast<size_t>(v.rows); ++i) {
    LOOM_RETURN_IF_ERROR(ConvertBF16ToF32(v.data.subspan(i * static_cast<size_t>(v.ld), cols),
                                          out.subspan(i * cols, cols)));
  }
  return Dense(absl::Span<const float>(out), v.rows, v.cols);
}

// Bf16Gemm runs a checked, non-empty kBf16 product on `backend`, or on `engine` when
// one is given (then with the rounded inputs widened back to f32).
absl::Status Bf16Gemm(gemm_internal::Bf16Backend backend, GemmEngine* engine,
                      const GemmBf16Input& a, Transpose trans_a, const GemmBf16Input& b,
                      Transpose trans_b, const MatrixView& c, const Dims& d, float alpha,
                      float beta) {
  using gemm_internal::Bf16Backend;
  if (engine == nullptr && backend != Bf16Backend::kOpenBlas) {
    const absl::Status onednn =
        gemm_internal::OneDnnBf16Gemm(a, trans_a, b, trans_b, c, alpha, beta,
                                      ComputeThreads());
    if (!absl::IsUnavailable(onednn) || backend == Bf16Backend::kOneDnn) return onednn;
  }
  thread_local Bf16Scratch scratch;
  LOOM_ASSIGN_OR_RETURN(const ConstMatrixView a32, AsF32(a, scratch.a16, scratch.a32));
  LOOM_ASSIGN_OR_RETURN(const ConstMatrixView b32, AsF32(b, scratch.b16, scratch.b32));
  if (engine != nullptr) return engine->Run(a32, trans_a, b32, trans_b, c, alpha, beta);
  OpenBlasGemm(a32, trans_a, b32, trans_b, c, d, alpha, beta);
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                  MatrixView c, float alpha, float beta, GemmPrecision precision) {
  const ScopedComputeTimer timer(ComputeKind::kGemm);  // the job's step breakdown
  if (precision != GemmPrecision::kF32 && precision != GemmPrecision::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: precision ", static_cast<int>(precision),
                                                   " is neither kF32 nor kBf16"));
  }
  if (precision == GemmPrecision::kBf16) return GemmBf16(a, trans_a, b, trans_b, c, alpha, beta);
  LOOM_ASSIGN_OR_RETURN(const std::optional<Dims> d,
                        CheckedProduct(a, trans_a, b, trans_b, c, beta));
  if (!d.has_value()) return absl::OkStatus();
  if (current_engine != nullptr) {
    return current_engine->Run(a, trans_a, b, trans_b, c, alpha, beta);
  }
  OpenBlasGemm(a, trans_a, b, trans_b, c, *d, alpha, beta);
  return absl::OkStatus();
}

absl::Status GemmBf16(GemmBf16Input a, Transpose trans_a, GemmBf16Input b, Transpose trans_b,
                      MatrixView c, float alpha, float beta) {
  const ScopedComputeTimer timer(ComputeKind::kGemm);
  LOOM_ASSIGN_OR_RETURN(const std::optional<Dims> d,
                        CheckedProduct(a, trans_a, b, trans_b, c, beta));
  if (!d.has_value()) return absl::OkStatus();
  return Bf16Gemm(gemm_internal::Bf16Backend::kAuto, current_engine, a, trans_a, b, trans_b, c,
                  *d, alpha, beta);
}

absl::Status GemmBf16WithBias(GemmBf16Input a, Transpose trans_a, GemmBf16Input b,
                              Transpose trans_b, MatrixView c, absl::Span<const float> bias) {
  const ScopedComputeTimer timer(ComputeKind::kGemm);
  if (static_cast<int64_t>(bias.size()) != c.cols) {
    return absl::InvalidArgumentError(absl::StrCat("GemmBf16WithBias: bias has ", bias.size(),
                                                   " values; C has ", c.cols, " columns"));
  }
  LOOM_ASSIGN_OR_RETURN(const std::optional<Dims> d,
                        CheckedProduct(a, trans_a, b, trans_b, c, 0.0f));
  if (!d.has_value()) {
    if (c.rows == 0 || c.cols == 0) return absl::OkStatus();
  } else if (current_engine == nullptr) {
    const absl::Status onednn = gemm_internal::OneDnnBf16Gemm(
        a, trans_a, b, trans_b, c, 1.0f, 0.0f, ComputeThreads(), bias.data());
    if (!absl::IsUnavailable(onednn)) return onednn;
  }
  if (d.has_value()) {
    LOOM_RETURN_IF_ERROR(Bf16Gemm(gemm_internal::Bf16Backend::kAuto, current_engine, a, trans_a, b,
                                  trans_b, c, *d, 1.0f, 0.0f));
  }
  // Off oneDNN (or k = 0, where C is 0): the addition after the product, by rows.
  const size_t cols = static_cast<size_t>(c.cols);
  ParallelForEach(c.rows, std::max<int64_t>(1, kElementwiseGrain / c.cols),
                  [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      float* const row = c.data.data() + r * c.ld;
      const float* const add = bias.data();  // not Span's checked operator[] (hardened Abseil)
      for (size_t j = 0; j < cols; ++j) row[j] += add[j];
    }
  });
  return absl::OkStatus();
}

namespace gemm_internal {

absl::Status GemmBf16On(Bf16Backend backend, GemmBf16Input a, Transpose trans_a,
                        GemmBf16Input b, Transpose trans_b, MatrixView c, float alpha,
                        float beta) {
  LOOM_ASSIGN_OR_RETURN(const std::optional<Dims> d,
                        CheckedProduct(a, trans_a, b, trans_b, c, beta));
  if (!d.has_value()) return absl::OkStatus();
  return Bf16Gemm(backend, nullptr, a, trans_a, b, trans_b, c, *d, alpha, beta);
}

}  // namespace gemm_internal

absl::string_view GemmPrecisionName(GemmPrecision precision) {
  switch (precision) {
    case GemmPrecision::kF32:
      return "f32";
    case GemmPrecision::kBf16:
      return "bf16";
  }
  return "unknown";
}

std::string GemmBackendName(GemmPrecision precision) {
  if (current_engine != nullptr) return std::string(current_engine->name());
  if (precision != GemmPrecision::kBf16) return "OpenBLAS";
  if (const absl::Status usable = gemm_internal::OneDnnBf16Usable(); !usable.ok()) {
    return absl::StrCat("OpenBLAS on bf16-rounded inputs (", usable.message(), ")");
  }
  // The implementation oneDNN picks for a GPT block's forward product (rows 256,
  // hidden 256, MLP 1024) at this process's thread count.
  const absl::StatusOr<std::string> impl = gemm_internal::OneDnnBf16Implementation(
      256, 1024, 256, Transpose::kNo, Transpose::kYes, GemmThreads());
  if (!impl.ok()) {
    return absl::StrCat("OpenBLAS on bf16-rounded inputs (", impl.status().message(), ")");
  }
  return absl::StrCat("oneDNN (", *impl, ")");
}

absl::Status CheckMatrixLayout(int64_t rows, int64_t cols, int64_t ld, size_t span_size,
                               absl::string_view who) {
  // An empty view never reaches BLAS (see Gemm), so only a non-empty one needs ld >= 1.
  if (rows < 0 || cols < 0 || ld < cols || (rows > 0 && cols > 0 && ld < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(who, " is ", Shape(rows, cols), " with ld ",
                                                   ld, "; need ld >= cols"));
  }
  const int64_t needed = rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
  if (static_cast<int64_t>(span_size) < needed) {
    return absl::InvalidArgumentError(absl::StrCat(who, " is ", Shape(rows, cols), " with ld ",
                                                   ld, ", needing ", needed,
                                                   " elements, but its span has ", span_size));
  }
  return absl::OkStatus();
}

absl::Status SetGemmThreads(int threads) {
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetGemmThreads: ", threads, " threads; need 1 to 1024"));
  }
  MutexLock lock(&blas_threads_mutex);
  LOOM_RETURN_IF_ERROR(SetComputeThreads(threads));
  openblas_set_num_threads(1);
  blas_threads_applied.store(true, std::memory_order_release);
  return absl::OkStatus();
}

int GemmThreads() { return ComputeThreads(); }

ScopedGemmEngine::ScopedGemmEngine(GemmEngine* engine) : previous_(current_engine) {
  current_engine = engine;
}

ScopedGemmEngine::~ScopedGemmEngine() { current_engine = previous_; }

GemmEngine* CurrentGemmEngine() { return current_engine; }

}  // namespace loom

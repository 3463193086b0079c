// Gemm against plain-loop products for every transpose combination, strided
// (sub-matrix) views, beta accumulation and empty shapes; and the shape errors.
// GemmPrecision::kBf16 on each backend (oneDNN where the CPU has AVX512_BF16, the
// OpenBLAS fallback everywhere) against a double-precision product of the
// bf16-rounded inputs, within the bound stated in gemm.h, elementwise.
#include "tensor_parallel/layers/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/half.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/internal/gemm_backends.h"
#include "tensor_parallel/layers/internal/onednn_gemm.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using gemm_internal::Bf16Backend;
using gemm_internal::GemmBf16On;

std::vector<float> Random(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

TEST(GemmTest, HeaderExample) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c(4);
  ASSERT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2)),
              IsOk());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
}

// CheckAllTransposesStridedWithBeta multiplies m x k by k x n for every transpose
// combination through views with ld > cols, C = 0.5 AB + 2 C, on `threads` threads,
// and compares every element (the padding too) with a double-precision loop.
void CheckAllTransposesStridedWithBeta(int64_t m, int64_t n, int64_t k, int threads) {
  constexpr int64_t pad = 3;
  const int before = GemmThreads();
  ASSERT_THAT(SetGemmThreads(threads), IsOk());
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      // Stored shapes, with `pad` extra columns so ld > cols.
      const int64_t ar = ta == Transpose::kNo ? m : k, ac = ta == Transpose::kNo ? k : m;
      const int64_t br = tb == Transpose::kNo ? k : n, bc = tb == Transpose::kNo ? n : k;
      const std::vector<float> a = Random(ar * (ac + pad), 1), b = Random(br * (bc + pad), 2);
      std::vector<float> c = Random(m * (n + pad), 3);
      const std::vector<float> c0 = c;
      auto A = [&](int64_t i, int64_t p) {
        return ta == Transpose::kNo ? a[i * (ac + pad) + p] : a[p * (ac + pad) + i];
      };
      auto B = [&](int64_t p, int64_t j) {
        return tb == Transpose::kNo ? b[p * (bc + pad) + j] : b[j * (bc + pad) + p];
      };
      ASSERT_THAT(Gemm(ConstMatrixView{a, ar, ac, ac + pad}, ta, ConstMatrixView{b, br, bc, bc + pad},
                       tb, MatrixView{absl::MakeSpan(c), m, n, n + pad}, 0.5f, 2.0f),
                  IsOk());
      int wrong = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n + pad; ++j) {
          double expected = static_cast<double>(c0[i * (n + pad) + j]);
          if (j < n) {
            double dot = 0;
            for (int64_t p = 0; p < k; ++p) dot += static_cast<double>(A(i, p)) * static_cast<double>(B(p, j));
            expected = 0.5 * dot + 2.0 * expected;
          }
          // |a|, |b|, |c| <= 1: f32 rounding of k products stays far below 1e-5 * k.
          if (std::abs(static_cast<double>(c[i * (n + pad) + j]) - expected) >
              1e-5 * static_cast<double>(k)) {
            if (++wrong <= 5) {
              ADD_FAILURE() << m << "x" << n << "x" << k << " at " << threads << " threads, "
                            << (ta == Transpose::kYes ? "T" : "N")
                            << (tb == Transpose::kYes ? "T" : "N") << ": c[" << i << "," << j
                            << "] = " << c[i * (n + pad) + j] << ", expected " << expected;
            }
          }
        }
      }
      EXPECT_EQ(wrong, 0);
    }
  }
  ASSERT_THAT(SetGemmThreads(before), IsOk());
}

TEST(GemmTest, AllTransposesStridedWithBeta) { CheckAllTransposesStridedWithBeta(5, 7, 9, 1); }

// Products large enough to be cut into parts of C's rows (taller than wide) or
// columns (wider than tall), of unequal sizes at 3 threads, on 1 to 3 threads.
TEST(GemmTest, AllTransposesStridedWithBetaInBlocks) {
  for (int threads : {1, 2, 3}) {
    CheckAllTransposesStridedWithBeta(300, 200, 64, threads);
    CheckAllTransposesStridedWithBeta(200, 300, 64, threads);
  }
}

// beta = 0 writes C without reading it: a C of NaNs (an uninitialized output) gives
// the product, whole or cut into blocks.
TEST(GemmTest, BetaZeroNeverReadsC) {
  for (const int64_t m : {4, 300}) {
    const int64_t n = 200, k = 64;
    const std::vector<float> a = Random(m * k, 7), b = Random(k * n, 8);
    std::vector<float> c(static_cast<size_t>(m * n), std::nanf(""));
    for (const GemmPrecision precision : {GemmPrecision::kF32, GemmPrecision::kBf16}) {
      ASSERT_THAT(Gemm(Dense(a, m, k), Transpose::kNo, Dense(b, k, n), Transpose::kNo,
                       Dense(absl::MakeSpan(c), m, n), 1.0f, 0.0f, precision),
                  IsOk());
      EXPECT_EQ(std::count_if(c.begin(), c.end(), [](float x) { return !std::isfinite(x); }), 0)
          << m << " rows, " << GemmPrecisionName(precision);
      std::fill(c.begin(), c.end(), std::nanf(""));
    }
  }
}

// The training job's --threads_per_rank rests on this: the product's bits do not
// depend on how many threads it is split over. The shapes are the GPT
// blocks' (rows = 2 sequences of 128 tokens, hidden 256, MLP 1024): forward NT,
// input gradient NN, weight gradient TN, and a square one large enough that every
// thread gets work.
TEST(GemmTest, ThreadCountDoesNotChangeTheBits) {
  struct Case {
    int64_t m, n, k;
    Transpose ta, tb;
  };
  const Case cases[] = {{256, 768, 256, Transpose::kNo, Transpose::kYes},
                        {256, 256, 1024, Transpose::kNo, Transpose::kNo},
                        {1024, 256, 256, Transpose::kYes, Transpose::kNo},
                        {512, 512, 512, Transpose::kNo, Transpose::kNo},
                        // Parts of unequal sizes; a product wider than tall.
                        {300, 200, 64, Transpose::kYes, Transpose::kYes},
                        {200, 300, 64, Transpose::kNo, Transpose::kYes}};
  const int before = GemmThreads();
  for (const Case& t : cases) {
    const int64_t ar = t.ta == Transpose::kNo ? t.m : t.k, ac = t.ta == Transpose::kNo ? t.k : t.m;
    const int64_t br = t.tb == Transpose::kNo ? t.k : t.n, bc = t.tb == Transpose::kNo ? t.n : t.k;
    const std::vector<float> a = Random(ar * ac, 5), b = Random(br * bc, 6);
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      ASSERT_THAT(SetGemmThreads(threads), IsOk());
      EXPECT_EQ(GemmThreads(), threads);
      std::vector<float> c(static_cast<size_t>(t.m * t.n));
      ASSERT_THAT(Gemm(Dense(a, ar, ac), t.ta, Dense(b, br, bc), t.tb,
                       Dense(absl::MakeSpan(c), t.m, t.n)),
                  IsOk());
      results.push_back(std::move(c));
    }
    EXPECT_EQ(results[0], results[1]) << t.m << "x" << t.n << "x" << t.k << " at 2 threads";
    EXPECT_EQ(results[0], results[2]) << t.m << "x" << t.n << "x" << t.k << " at 3 threads";
  }
  ASSERT_THAT(SetGemmThreads(before), IsOk());
}

TEST(GemmTest, SetGemmThreadsRefusesOutOfRange) {
  EXPECT_THAT(SetGemmThreads(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("SetGemmThreads: 0 threads; need 1 to 1024")));
  EXPECT_THAT(SetGemmThreads(1025),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1025 threads")));
}

TEST(GemmTest, EmptyInnerDimensionScalesByBeta) {
  std::vector<float> c = {1, 2, 3, 4};
  ASSERT_THAT(Gemm(Dense(absl::Span<const float>(), 2, 0), Transpose::kNo,
                   Dense(absl::Span<const float>(), 0, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2), 1.0f, 0.5f),
              IsOk());
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1, 1.5f, 2}));
  ASSERT_THAT(Gemm(Dense(absl::Span<const float>(), 0, 3), Transpose::kNo,
                   Dense(absl::Span<const float>(), 3, 0), Transpose::kNo,
                   Dense(absl::Span<float>(), 0, 0)),
              IsOk());
}

TEST(GemmTest, ShapeErrorsNameTheShapes) {
  std::vector<float> a(6), c(4);
  EXPECT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ")));
  EXPECT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kYes,
                   Dense(absl::MakeSpan(c), 1, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is [2,2] but C is [1,4]")));
  EXPECT_THAT(Gemm(Dense(a, 3, 3), Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 3, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("A is [3,3] with ld 3, needing 9 elements, but its span has 6")));
  EXPECT_THAT(Gemm(ConstMatrixView{a, 2, 3, 2}, Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("with ld 2; need ld >= cols")));
}

// An engine that computes in double, the textbook way, and counts its products: Gemm
// must hand it every non-empty product of the installing thread, after its checks.
class DoubleEngine : public GemmEngine {
 public:
  absl::string_view name() const override { return "double"; }
  absl::Status Run(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                   MatrixView c, float alpha, float beta) override {
    ++calls;
    const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
    const int64_t k = ta ? a.rows : a.cols;
    for (int64_t i = 0; i < c.rows; ++i) {
      for (int64_t j = 0; j < c.cols; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = ta ? static_cast<double>(a.data[p * a.ld + i])
                              : static_cast<double>(a.data[i * a.ld + p]);
          const double y = tb ? static_cast<double>(b.data[j * b.ld + p])
                              : static_cast<double>(b.data[p * b.ld + j]);
          sum += x * y;
        }
        float& out = c.data[i * c.ld + j];
        out = static_cast<float>(
            static_cast<double>(alpha) * sum +
            (beta == 0.0f ? 0.0 : static_cast<double>(beta) * static_cast<double>(out)));
      }
    }
    return absl::OkStatus();
  }
  int calls = 0;
};

TEST(GemmEngineTest, TheInstallingThreadsProductsGoToTheEngineAndOnlyThose) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(5 * 7), b(7 * 3);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  std::vector<float> blas(5 * 3), engine_c(5 * 3);
  ASSERT_THAT(Gemm(Dense(a, 5, 7), Transpose::kNo, Dense(b, 7, 3), Transpose::kNo,
                   Dense(absl::MakeSpan(blas), 5, 3)),
              IsOk());
  EXPECT_EQ(CurrentGemmEngine(), nullptr);

  DoubleEngine engine;
  {
    ScopedGemmEngine scoped(&engine);
    EXPECT_EQ(CurrentGemmEngine(), &engine);
    ASSERT_THAT(Gemm(Dense(a, 5, 7), Transpose::kNo, Dense(b, 7, 3), Transpose::kNo,
                     Dense(absl::MakeSpan(engine_c), 5, 3)),
                IsOk());
    EXPECT_EQ(engine.calls, 1);
    // Shape errors and empty products stay Gemm's: the engine never sees them.
    EXPECT_THAT(Gemm(Dense(a, 5, 7), Transpose::kNo, Dense(a, 5, 7), Transpose::kNo,
                     Dense(absl::MakeSpan(engine_c), 5, 3)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inner dimensions differ")));
    EXPECT_THAT(Gemm(Dense(absl::Span<const float>(), 0, 3), Transpose::kNo,
                     Dense(absl::Span<const float>(), 3, 0), Transpose::kNo,
                     Dense(absl::Span<float>(), 0, 0)),
                IsOk());
    EXPECT_EQ(engine.calls, 1);
    // Another thread keeps OpenBLAS.
    std::thread other([&] { EXPECT_EQ(CurrentGemmEngine(), nullptr); });
    other.join();
    // Nested scopes restore the outer engine.
    DoubleEngine inner;
    {
      ScopedGemmEngine nested(&inner);
      EXPECT_EQ(CurrentGemmEngine(), &inner);
    }
    EXPECT_EQ(CurrentGemmEngine(), &engine);
  }
  EXPECT_EQ(CurrentGemmEngine(), nullptr);
  // Different summation, same product: within k * eps * sum |a||b| (here k = 7, |x| < 1).
  for (size_t i = 0; i < blas.size(); ++i) {
    EXPECT_NEAR(engine_c[i], blas[i], 7 * 7 * 1.2e-7) << i;
  }
}

// ---------------------------------------------------------------------------------
// GemmPrecision::kBf16.

double RoundedBf16(float x) { return static_cast<double>(ToFloat(ToBFloat16(x))); }

// One kBf16 product: stored operands with `pad` extra columns (ld > cols), C with
// `pad` extra columns that must stay untouched.
struct Bf16Case {
  int64_t m, n, k;
  Transpose ta, tb;
  int64_t pad;
  float alpha, beta;

  std::string Name() const {
    return absl::StrCat(ta == Transpose::kYes ? "T" : "N", tb == Transpose::kYes ? "T" : "N", " ",
                        m, "x", n, "x", k, " pad ", pad, " alpha ", alpha, " beta ", beta);
  }
  int64_t a_rows() const { return ta == Transpose::kNo ? m : k; }
  int64_t a_cols() const { return ta == Transpose::kNo ? k : m; }
  int64_t b_rows() const { return tb == Transpose::kNo ? k : n; }
  int64_t b_cols() const { return tb == Transpose::kNo ? n : k; }
};

struct Bf16Operands {
  std::vector<float> a, b, c0;
};

Bf16Operands MakeOperands(const Bf16Case& t, unsigned seed) {
  Bf16Operands op;
  op.a = Random(static_cast<size_t>(t.a_rows() * (t.a_cols() + t.pad)), seed);
  op.b = Random(static_cast<size_t>(t.b_rows() * (t.b_cols() + t.pad)), seed + 1);
  op.c0 = Random(static_cast<size_t>(t.m * (t.n + t.pad)), seed + 2);
  return op;
}

// Which inputs of a kBf16 product the caller hands over already rounded (GemmBf16).
enum class PreRounded { kNone, kA, kB, kBoth };

std::vector<BFloat16> ToBf16(const std::vector<float>& v) {
  std::vector<BFloat16> out;
  for (const float x : v) out.push_back(ToBFloat16(x));
  return out;
}

// RunBf16 returns C after the product on `backend` (kAuto: through Gemm itself, or
// GemmBf16 when an input is pre-rounded), with the stored operands' layouts kept.
absl::StatusOr<std::vector<float>> RunBf16(Bf16Backend backend, const Bf16Case& t,
                                           const Bf16Operands& op,
                                           PreRounded pre = PreRounded::kNone) {
  std::vector<float> c = op.c0;
  const std::vector<BFloat16> a16 = ToBf16(op.a), b16 = ToBf16(op.b);
  const ConstMatrixView a{op.a, t.a_rows(), t.a_cols(), t.a_cols() + t.pad};
  const ConstMatrixView b{op.b, t.b_rows(), t.b_cols(), t.b_cols() + t.pad};
  const bool a_is_bf16 = pre == PreRounded::kA || pre == PreRounded::kBoth;
  const bool b_is_bf16 = pre == PreRounded::kB || pre == PreRounded::kBoth;
  const GemmBf16Input ai = a_is_bf16 ? GemmBf16Input(ConstBf16MatrixView{a16, a.rows, a.cols, a.ld})
                                     : GemmBf16Input(a);
  const GemmBf16Input bi = b_is_bf16 ? GemmBf16Input(ConstBf16MatrixView{b16, b.rows, b.cols, b.ld})
                                     : GemmBf16Input(b);
  const MatrixView cv{absl::MakeSpan(c), t.m, t.n, t.n + t.pad};
  absl::Status s;
  if (backend != Bf16Backend::kAuto) {
    s = GemmBf16On(backend, ai, t.ta, bi, t.tb, cv, t.alpha, t.beta);
  } else if (pre == PreRounded::kNone) {
    s = Gemm(a, t.ta, b, t.tb, cv, t.alpha, t.beta, GemmPrecision::kBf16);
  } else {
    s = GemmBf16(ai, t.ta, bi, t.tb, cv, t.alpha, t.beta);
  }
  if (!s.ok()) return s;
  return c;
}

// Bf16Reference: per element of C (m x n), the double product of the rounded inputs
// with alpha and beta applied, gemm.h's bound on a kBf16 result's error from it, and
// the same product of the unrounded inputs.
struct Bf16Reference {
  std::vector<double> expected, bound, unrounded;
};

Bf16Reference Reference(const Bf16Case& t, const Bf16Operands& op) {
  const int64_t lda = t.a_cols() + t.pad, ldb = t.b_cols() + t.pad, ldc = t.n + t.pad;
  // op(A) row-major [m,k] and op(B) transposed [n,k], so the inner loop is contiguous.
  std::vector<float> a(static_cast<size_t>(t.m * t.k)), bt(static_cast<size_t>(t.n * t.k));
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t p = 0; p < t.k; ++p) {
      a[i * t.k + p] = t.ta == Transpose::kNo ? op.a[i * lda + p] : op.a[p * lda + i];
    }
  }
  for (int64_t j = 0; j < t.n; ++j) {
    for (int64_t p = 0; p < t.k; ++p) {
      bt[j * t.k + p] = t.tb == Transpose::kNo ? op.b[p * ldb + j] : op.b[j * ldb + p];
    }
  }
  constexpr double kUnit = 1.0 / (1 << 24);  // 2^-24, f32's unit roundoff
  const double alpha = static_cast<double>(t.alpha), beta = static_cast<double>(t.beta);
  Bf16Reference ref;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < t.n; ++j) {
      double dot = 0, abs_dot = 0, unrounded = 0;
      for (int64_t p = 0; p < t.k; ++p) {
        const float x = a[i * t.k + p], y = bt[j * t.k + p];
        const double product = RoundedBf16(x) * RoundedBf16(y);
        dot += product;
        abs_dot += std::fabs(product);
        unrounded += static_cast<double>(x) * static_cast<double>(y);
      }
      const double c0 = static_cast<double>(op.c0[static_cast<size_t>(i * ldc + j)]);
      const double beta_c = t.beta == 0.0f ? 0.0 : beta * c0;
      ref.expected.push_back(alpha * dot + beta_c);
      ref.bound.push_back(static_cast<double>(t.k + 2) * kUnit *
                          (std::fabs(alpha) * abs_dot + std::fabs(beta_c)));
      ref.unrounded.push_back(alpha * unrounded + beta_c);
    }
  }
  return ref;
}

// Bf16Error: how far a kBf16 result is from the reference, as the largest ratio of
// |error| to the bound over the elements, and from the product of the unrounded
// inputs (to show the rounding happened).
struct Bf16Error {
  double max_ratio_to_bound = 0;  // must be <= 1
  double max_abs_error = 0;
  double max_abs_vs_unrounded = 0;
  double max_bound = 0;
  bool pad_untouched = true;
};

Bf16Error Measure(const Bf16Case& t, const Bf16Operands& op, const Bf16Reference& ref,
                  const std::vector<float>& c) {
  const int64_t ldc = t.n + t.pad;
  Bf16Error e;
  for (int64_t i = 0; i < t.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = static_cast<size_t>(i * ldc + j);
      if (j >= t.n) {
        e.pad_untouched = e.pad_untouched && c[at] == op.c0[at];
        continue;
      }
      const size_t r = static_cast<size_t>(i * t.n + j);
      const double got = static_cast<double>(c[at]);
      const double err = std::fabs(got - ref.expected[r]);
      e.max_abs_error = std::max(e.max_abs_error, err);
      e.max_bound = std::max(e.max_bound, ref.bound[r]);
      e.max_ratio_to_bound =
          std::max(e.max_ratio_to_bound, ref.bound[r] > 0 ? err / ref.bound[r] : err);
      e.max_abs_vs_unrounded = std::max(e.max_abs_vs_unrounded, std::fabs(got - ref.unrounded[r]));
    }
  }
  return e;
}

std::vector<Bf16Case> Bf16Cases() {
  struct Shape {
    int64_t m, n, k;
  };
  // Ragged shapes (nothing a multiple of a vector or block), a one-element product
  // and one of a GPT block's sizes.
  const Shape shapes[] = {{1, 1, 1}, {17, 33, 65}, {300, 7, 129}, {64, 96, 256}};
  struct Scale {
    float alpha, beta;
  };
  const Scale scales[] = {{1.0f, 0.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}};
  std::vector<Bf16Case> cases;
  for (const Shape& s : shapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (int64_t pad : {0, 3}) {
          for (const Scale& sc : scales) {
            cases.push_back({s.m, s.n, s.k, ta, tb, pad, sc.alpha, sc.beta});
          }
        }
      }
    }
  }
  return cases;
}

const char* BackendName(Bf16Backend backend) {
  switch (backend) {
    case Bf16Backend::kAuto:
      return "Gemm";
    case Bf16Backend::kOneDnn:
      return "oneDNN";
    case Bf16Backend::kOpenBlas:
      return "OpenBLAS";
  }
  return "?";
}

class GemmBf16BackendTest : public ::testing::TestWithParam<Bf16Backend> {};

// Every case within gemm.h's bound of the double product of the rounded inputs, the
// columns of C past n untouched, and (for k > 1) farther than the bound from the
// product of the unrounded inputs somewhere: the inputs really were rounded.
TEST_P(GemmBf16BackendTest, WithinTheBoundOfTheRoundedInputsProduct) {
  const Bf16Backend backend = GetParam();
  if (backend == Bf16Backend::kOneDnn) {
    if (const absl::Status usable = gemm_internal::OneDnnBf16Usable(); !usable.ok()) {
      GTEST_SKIP() << "oneDNN's bf16 path does not run here: " << usable;
    }
  }
  double worst_ratio = 0, worst_error = 0;
  std::string worst;
  unsigned seed = 100;
  for (const Bf16Case& t : Bf16Cases()) {
    SCOPED_TRACE(t.Name());
    const Bf16Operands op = MakeOperands(t, seed += 3);
    LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> c, RunBf16(backend, t, op));
    const Bf16Error e = Measure(t, op, Reference(t, op), c);
    EXPECT_LE(e.max_ratio_to_bound, 1.0) << "error " << e.max_abs_error;
    EXPECT_TRUE(e.pad_untouched);
    if (t.k > 1) {
      EXPECT_GT(e.max_abs_vs_unrounded, e.max_bound);
    }
    if (e.max_ratio_to_bound > worst_ratio) {
      worst_ratio = e.max_ratio_to_bound;
      worst_error = e.max_abs_error;
      worst = t.Name();
    }
  }
  std::printf("%s: worst error %.3g = %.3f of the bound (%s)\n", BackendName(backend), worst_error,
              worst_ratio, worst.c_str());
}

INSTANTIATE_TEST_SUITE_P(Backends, GemmBf16BackendTest,
                         ::testing::Values(Bf16Backend::kAuto, Bf16Backend::kOneDnn,
                                           Bf16Backend::kOpenBlas),
                         [](const ::testing::TestParamInfo<Bf16Backend>& param_info) {
                           return std::string(BackendName(param_info.param));
                         });

// Inputs handed over in bf16 (GemmBf16) give the product of the f32 inputs' rounding:
// within the same bound, the pad of C untouched, and on OpenBLAS the same bits (the
// same widened values reach the same call). On oneDNN a bf16 input is read in place,
// with its own leading dimension, so the part may run another kernel: the same bits
// only where the layout equals the packed one (no pad, A not transposed).
TEST_P(GemmBf16BackendTest, PreRoundedInputsGiveTheRoundedProduct) {
  const Bf16Backend backend = GetParam();
  if (backend == Bf16Backend::kOneDnn) {
    if (const absl::Status usable = gemm_internal::OneDnnBf16Usable(); !usable.ok()) {
      GTEST_SKIP() << "oneDNN's bf16 path does not run here: " << usable;
    }
  }
  const bool on_onednn = backend == Bf16Backend::kOneDnn ||
                         (backend == Bf16Backend::kAuto && gemm_internal::OneDnnBf16Usable().ok());
  unsigned seed = 500;
  int bitwise_checked = 0;
  for (const Bf16Case& t : Bf16Cases()) {
    const Bf16Operands op = MakeOperands(t, seed += 3);
    LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> from_f32, RunBf16(backend, t, op));
    const Bf16Reference ref = Reference(t, op);
    for (const PreRounded pre : {PreRounded::kA, PreRounded::kB, PreRounded::kBoth}) {
      SCOPED_TRACE(absl::StrCat(t.Name(), " pre-rounded ", static_cast<int>(pre)));
      LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> c, RunBf16(backend, t, op, pre));
      const Bf16Error e = Measure(t, op, ref, c);
      EXPECT_LE(e.max_ratio_to_bound, 1.0) << "error " << e.max_abs_error;
      EXPECT_TRUE(e.pad_untouched);
      const bool same_layout = t.pad == 0 && (t.ta == Transpose::kNo || pre == PreRounded::kB);
      if (!on_onednn || same_layout) {
        ++bitwise_checked;
        EXPECT_EQ(c, from_f32);
      }
    }
  }
  EXPECT_GT(bitwise_checked, 0);
}

// A bf16 input is held to the same layout checks as an f32 one.
TEST(GemmBf16Test, PreRoundedInputsAreChecked) {
  const std::vector<BFloat16> w(6);
  const std::vector<float> x(6);
  std::vector<float> y(4);
  EXPECT_THAT(GemmBf16(Dense(absl::MakeConstSpan(x), 2, 3), Transpose::kNo,
                       ConstBf16MatrixView{w, 2, 3, 4}, Transpose::kYes,
                       Dense(absl::MakeSpan(y), 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Gemm: B is [2,3] with ld 4, needing 7 elements, but its span "
                                 "has 6")));
  EXPECT_THAT(GemmBf16(Dense(absl::MakeConstSpan(x), 2, 3), Transpose::kNo,
                       Dense(absl::MakeConstSpan(w), 2, 3), Transpose::kNo,
                       Dense(absl::MakeSpan(y), 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("inner dimensions differ")));
  LOOM_EXPECT_OK(GemmBf16(Dense(absl::MakeConstSpan(x), 2, 3), Transpose::kNo,
                          Dense(absl::MakeConstSpan(w), 2, 3), Transpose::kYes,
                          Dense(absl::MakeSpan(y), 2, 2)));
  EXPECT_EQ(y, std::vector<float>(4, 0.0f));
}

// The header's example: 1 + 2^-8 is a bf16 tie and rounds to even, 1.
TEST(GemmBf16Test, HeaderExample) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {1, 0, 0, 1, 1, 1};
  std::vector<float> c(4);
  a[0] = 1.00390625f;
  ASSERT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2), 1.0f, 0.0f, GemmPrecision::kBf16),
              IsOk());
  EXPECT_EQ(c, (std::vector<float>{4, 5, 10, 11}));
  ASSERT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2)),
              IsOk());
  EXPECT_EQ(c[0], 4.00390625f);  // f32 keeps it
}

// Where the CPU has AVX512_BF16, oneDNN and the OpenBLAS fallback agree at the GPT
// model's shapes (forward NT, input gradient NN, weight gradient TN; C with ld > n
// in one) within twice the bound, each being within the bound of the same exact
// product, at 1 and at 2 GEMM threads (then split into parts: onednn_gemm.h); oneDNN
// picks a hardware kernel, never its reference loops; and at one thread count the
// bits repeat.
TEST(GemmBf16Test, OneDnnAgreesWithTheFallbackAtGptShapes) {
  if (const absl::Status usable = gemm_internal::OneDnnBf16Usable(); !usable.ok()) {
    GTEST_SKIP() << "oneDNN's bf16 path does not run here: " << usable;
  }
  const Bf16Case cases[] = {{256, 768, 256, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f},
                            {256, 256, 1024, Transpose::kNo, Transpose::kNo, 0, 1.0f, 0.0f},
                            {1024, 256, 256, Transpose::kYes, Transpose::kNo, 16, 1.0f, 1.0f}};
  const int before = GemmThreads();
  unsigned seed = 7;
  for (const Bf16Case& t : cases) {
    SCOPED_TRACE(t.Name());
    const Bf16Operands op = MakeOperands(t, seed += 3);
    const Bf16Reference ref = Reference(t, op);
    LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> openblas,
                              RunBf16(Bf16Backend::kOpenBlas, t, op));
    const Bf16Error e2 = Measure(t, op, ref, openblas);
    EXPECT_LE(e2.max_ratio_to_bound, 1.0);
    for (int threads : {1, 2}) {
      ASSERT_THAT(SetGemmThreads(threads), IsOk());
      LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> onednn,
                                RunBf16(Bf16Backend::kOneDnn, t, op));
      LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> again,
                                RunBf16(Bf16Backend::kOneDnn, t, op));
      EXPECT_EQ(again, onednn) << threads << " threads";
      const Bf16Error e1 = Measure(t, op, ref, onednn);
      EXPECT_LE(e1.max_ratio_to_bound, 1.0) << threads << " threads";
      EXPECT_TRUE(e1.pad_untouched);
      double diff = 0;
      for (size_t i = 0; i < onednn.size(); ++i) {
        diff = std::max(
            diff, std::fabs(static_cast<double>(onednn[i]) - static_cast<double>(openblas[i])));
      }
      EXPECT_LE(diff, 2 * e1.max_bound);
      LOOM_ASSERT_OK_AND_ASSIGN(
          const std::string impl,
          gemm_internal::OneDnnBf16Implementation(t.m, t.n, t.k, t.ta, t.tb, threads));
      EXPECT_THAT(impl, ::testing::Not(::testing::StartsWith("ref")));
      std::printf(
          "%s, %d threads: oneDNN %s, |oneDNN - OpenBLAS| <= %.3g; errors %.3g and %.3g "
          "(bound %.3g)\n",
          t.Name().c_str(), threads, impl.c_str(), diff, e1.max_abs_error, e2.max_abs_error,
          e1.max_bound);
    }
  }
  ASSERT_THAT(SetGemmThreads(before), IsOk());
}

// GemmBf16WithBias is GemmBf16 followed by adding the bias to every row, bit for
// bit, on oneDNN (the bias in the product's epilogue) and off it: a sweep of shapes
// (GPT's, odd sizes, padded C, one to several row parts, an empty inner dimension),
// f32 or pre-rounded weights, at one and two GEMM threads. A bias of another length
// is refused by its counts.
TEST(GemmBf16Test, BiasInTheProductIsTheProductThenTheAddition) {
  const Bf16Case cases[] = {{256, 768, 256, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f},
                            {256, 1024, 256, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f},
                            {256, 256, 1024, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f},
                            {37, 29, 13, Transpose::kNo, Transpose::kYes, 3, 1.0f, 0.0f},
                            {300, 45, 70, Transpose::kNo, Transpose::kNo, 5, 1.0f, 0.0f},
                            {64, 17, 0, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f}};
  const int before = GemmThreads();
  unsigned seed = 91;
  for (const Bf16Case& t : cases) {
    for (const PreRounded pre : {PreRounded::kNone, PreRounded::kB}) {
      for (const int threads : {1, 2}) {
        SCOPED_TRACE(absl::StrCat(t.Name(), pre == PreRounded::kB ? ", bf16 weights" : "", ", ",
                                  threads, " threads"));
        ASSERT_THAT(SetGemmThreads(threads), IsOk());
        const Bf16Operands op = MakeOperands(t, seed += 3);
        const std::vector<float> bias = Random(static_cast<size_t>(t.n), seed + 100);
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> expected,
                                  RunBf16(Bf16Backend::kAuto, t, op, pre));
        for (int64_t r = 0; r < t.m; ++r) {
          for (int64_t j = 0; j < t.n; ++j) expected[r * (t.n + t.pad) + j] += bias[j];
        }
        std::vector<float> c = op.c0;
        const std::vector<BFloat16> b16 = ToBf16(op.b);
        const ConstMatrixView a{op.a, t.a_rows(), t.a_cols(), t.a_cols() + t.pad};
        const ConstMatrixView b{op.b, t.b_rows(), t.b_cols(), t.b_cols() + t.pad};
        const GemmBf16Input bi = pre == PreRounded::kB
                                     ? GemmBf16Input(ConstBf16MatrixView{b16, b.rows, b.cols, b.ld})
                                     : GemmBf16Input(b);
        ASSERT_THAT(GemmBf16WithBias(a, t.ta, bi, t.tb,
                                     MatrixView{absl::MakeSpan(c), t.m, t.n, t.n + t.pad}, bias),
                    IsOk());
        ASSERT_EQ(c.size(), expected.size());
        for (size_t i = 0; i < c.size(); ++i) {
          ASSERT_EQ(std::memcmp(&c[i], &expected[i], sizeof(float)), 0)
              << "element " << i << ": " << c[i] << ", expected " << expected[i];
        }
      }
    }
  }
  ASSERT_THAT(SetGemmThreads(before), IsOk());
  std::vector<float> a(6), c(4), short_bias(1);
  EXPECT_THAT(GemmBf16WithBias(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kYes,
                               Dense(absl::MakeSpan(c), 2, 2), short_bias),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GemmBf16WithBias: bias has 1 values; C has 2 columns")));
}

// Tensor-parallel ranks call Gemm at once from threads of one process: several
// threads, each with its own shapes (some shared), give bitwise what one thread
// alone gives (one product at a time, the same primitives and scratch sizes), at one
// and at two GEMM threads.
TEST(GemmBf16Test, ConcurrentCallersGetTheSingleThreadBits) {
  // The first is large enough to be split at 2 GEMM threads (onednn_gemm.h).
  const Bf16Case cases[] = {{256, 96, 256, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f},
                            {17, 33, 65, Transpose::kYes, Transpose::kNo, 3, 0.5f, 2.0f},
                            {300, 7, 129, Transpose::kNo, Transpose::kNo, 0, 1.0f, 1.0f},
                            {64, 96, 256, Transpose::kNo, Transpose::kYes, 0, 1.0f, 0.0f}};
  constexpr int kCases = 4, kRepeats = 8;
  const int before = GemmThreads();
  for (int threads : {1, 2}) {
    ASSERT_THAT(SetGemmThreads(threads), IsOk());
    std::vector<Bf16Operands> ops;
    std::vector<std::vector<float>> alone;
    for (int i = 0; i < kCases; ++i) {
      ops.push_back(MakeOperands(cases[i], 40 + 3 * static_cast<unsigned>(i)));
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> c,
                                RunBf16(Bf16Backend::kAuto, cases[i], ops[i]));
      alone.push_back(std::move(c));
    }
    std::vector<std::thread> callers;
    std::vector<int> mismatches(kCases, 0);
    for (int i = 0; i < kCases; ++i) {
      callers.emplace_back([&, i] {
        for (int r = 0; r < kRepeats; ++r) {
          const absl::StatusOr<std::vector<float>> c =
              RunBf16(Bf16Backend::kAuto, cases[i], ops[i]);
          if (!c.ok() || *c != alone[static_cast<size_t>(i)]) ++mismatches[static_cast<size_t>(i)];
        }
      });
    }
    for (std::thread& t : callers) t.join();
    for (int i = 0; i < kCases; ++i) {
      EXPECT_EQ(mismatches[static_cast<size_t>(i)], 0)
          << cases[i].Name() << " at " << threads << " GEMM threads";
    }
  }
  ASSERT_THAT(SetGemmThreads(before), IsOk());
}

// kBf16 checks as kF32 does, and refuses a precision outside the enum by value.
TEST(GemmBf16Test, BadInputNamesTheShapes) {
  std::vector<float> a(6), c(4);
  EXPECT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2), 1.0f, 0.0f, GemmPrecision::kBf16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ")));
  EXPECT_THAT(Gemm(Dense(a, 3, 3), Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 3, 2), 1.0f, 0.0f, GemmPrecision::kBf16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("A is [3,3] with ld 3, needing 9 elements, but its span has 6")));
  EXPECT_THAT(GemmBf16On(Bf16Backend::kOpenBlas, Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3),
                         Transpose::kYes, Dense(absl::MakeSpan(c), 1, 4), 1.0f, 0.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is [2,2] but C is [1,4]")));
  EXPECT_THAT(Gemm(Dense(a, 2, 3), Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(c), 2, 2), 1.0f, 0.0f, static_cast<GemmPrecision>(7)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Gemm: precision 7 is neither kF32 nor kBf16")));
  // An empty inner dimension only scales C, as in f32.
  std::vector<float> d = {1, 2, 3, 4};
  ASSERT_THAT(Gemm(Dense(absl::Span<const float>(), 2, 0), Transpose::kNo,
                   Dense(absl::Span<const float>(), 0, 2), Transpose::kNo,
                   Dense(absl::MakeSpan(d), 2, 2), 1.0f, 0.5f, GemmPrecision::kBf16),
              IsOk());
  EXPECT_EQ(d, (std::vector<float>{0.5f, 1, 1.5f, 2}));
}

// An installed GemmEngine keeps priority for kBf16 products, and gets the rounded
// inputs: the double engine's result is the rounded product, to f32 rounding.
TEST(GemmBf16Test, AnInstalledEngineGetsTheRoundedInputs) {
  const Bf16Case t{5, 3, 7, Transpose::kNo, Transpose::kYes, 2, 1.0f, 0.0f};
  const Bf16Operands op = MakeOperands(t, 11);
  DoubleEngine engine;
  std::vector<float> c;
  {
    ScopedGemmEngine scoped(&engine);
    EXPECT_EQ(GemmBackendName(GemmPrecision::kBf16), "double");
    LOOM_ASSERT_OK_AND_ASSIGN(c, RunBf16(Bf16Backend::kAuto, t, op));
  }
  EXPECT_EQ(engine.calls, 1);
  const Bf16Error e = Measure(t, op, Reference(t, op), c);
  EXPECT_LE(e.max_abs_error, 4 * 6e-8);  // one f32 rounding of values below 4
  EXPECT_TRUE(e.pad_untouched);
}

TEST(GemmBf16Test, BackendNames) {
  EXPECT_EQ(GemmPrecisionName(GemmPrecision::kF32), "f32");
  EXPECT_EQ(GemmPrecisionName(GemmPrecision::kBf16), "bf16");
  EXPECT_EQ(GemmBackendName(GemmPrecision::kF32), "OpenBLAS");
  const std::string bf16 = GemmBackendName(GemmPrecision::kBf16);
  std::printf("bf16 backend: %s\n", bf16.c_str());
  if (gemm_internal::OneDnnBf16Usable().ok()) {
    // The kernel oneDNN picks is the host's (brg:avx512_core_bf16,
    // brg:avx512_core_amx_bf16, ...): the name says it, the test does not assert which.
    EXPECT_THAT(bf16, HasSubstr("oneDNN ("));
  } else {
    EXPECT_THAT(bf16, HasSubstr("OpenBLAS on bf16-rounded inputs"));
  }
}

}  // namespace
}  // namespace loom

// Gemm against plain-loop products for every transpose combination, strided
// (sub-matrix) views, beta accumulation and empty shapes; and the shape errors.
#include "tensor_parallel/layers/gemm.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

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

TEST(GemmTest, AllTransposesStridedWithBeta) {
  constexpr int64_t m = 5, n = 7, k = 9, pad = 3;
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
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n + pad; ++j) {
          double expected = static_cast<double>(c0[i * (n + pad) + j]);
          if (j < n) {
            double dot = 0;
            for (int64_t p = 0; p < k; ++p) dot += static_cast<double>(A(i, p)) * static_cast<double>(B(p, j));
            expected = 0.5 * dot + 2.0 * expected;
          }
          EXPECT_NEAR(c[i * (n + pad) + j], expected, 1e-5) << i << "," << j;
        }
      }
    }
  }
}

// The training job's --threads_per_rank rests on this: the product's bits do not
// depend on how many threads OpenBLAS splits it over. The shapes are the GPT
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
                        {512, 512, 512, Transpose::kNo, Transpose::kNo}};
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
          const double x = ta ? double{a.data[p * a.ld + i]} : double{a.data[i * a.ld + p]};
          const double y = tb ? double{b.data[j * b.ld + p]} : double{b.data[p * b.ld + j]};
          sum += x * y;
        }
        float& out = c.data[i * c.ld + j];
        out = static_cast<float>(double{alpha} * sum + (beta == 0.0f ? 0.0 : double{beta} * double{out}));
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

}  // namespace
}  // namespace loom

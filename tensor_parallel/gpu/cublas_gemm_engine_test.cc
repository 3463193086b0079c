#include "tensor_parallel/gpu/cublas_gemm_engine.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/gpu/internal/gpu_testing.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

using ::loom::gpu_testing::FirstOutOfBound;
using ::loom::gpu_testing::Gamma;
using ::loom::gpu_testing::HasDevice;
using ::loom::gpu_testing::RandomValues;
using ::testing::HasSubstr;

TEST(CublasGemmEngineTest, RefusesANonPositiveTimeout) {
  EXPECT_THAT(CublasGemmEngine::Create({.device = 0, .timeout = absl::ZeroDuration()}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("timeout is 0; it must be > 0")));
}

TEST(CublasGemmEngineTest, NeedsADevice) {
  if (HasDevice()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_THAT(CublasGemmEngine::Create({}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("CUDA")));
}

TEST(CublasGemmEngineTest, RejectsADeviceOutOfRange) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  EXPECT_THAT(CublasGemmEngine::Create({.device = 1000}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1000")));
}

// Gemm through the engine against Gemm on OpenBLAS, for strided views (ld > cols) of
// every operand, both transposes and beta zero and not: within the bound of
// gpu_testing.h (2 gamma(k + 2) S per element), and C's columns past cols untouched.
TEST(CublasGemmEngineTest, GemmOnTheEngineMatchesOpenBlasWithinTheBound) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<CublasGemmEngine> engine, CublasGemmEngine::Create({}));
  const int64_t m = 67, n = 45, k = 129, pad = 3;
  uint32_t seed = 1;
  int64_t runs = 0;
  for (const Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (const Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      for (const float beta : {0.0f, 0.75f}) {
        const int64_t a_rows = ta == Transpose::kNo ? m : k, a_cols = ta == Transpose::kNo ? k : m;
        const int64_t b_rows = tb == Transpose::kNo ? k : n, b_cols = tb == Transpose::kNo ? n : k;
        const std::vector<float> a = RandomValues(a_rows * (a_cols + pad), seed++);
        const std::vector<float> b = RandomValues(b_rows * (b_cols + pad), seed++);
        std::vector<float> c0 = RandomValues(m * (n + pad), seed++);
        const float sentinel = 12345.0f;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = n; j < n + pad; ++j) c0[i * (n + pad) + j] = sentinel;
        }
        const ConstMatrixView av{a, a_rows, a_cols, a_cols + pad};
        const ConstMatrixView bv{b, b_rows, b_cols, b_cols + pad};
        std::vector<float> cpu = c0, gpu = c0;
        const float alpha = 1.25f;
        ASSERT_THAT(
            Gemm(av, ta, bv, tb, MatrixView{absl::MakeSpan(cpu), m, n, n + pad}, alpha, beta),
            IsOk());
        {
          ScopedGemmEngine on_gpu(engine.get());
          ASSERT_THAT(
              Gemm(av, ta, bv, tb, MatrixView{absl::MakeSpan(gpu), m, n, n + pad}, alpha, beta),
              IsOk());
        }
        ++runs;
        std::vector<double> bound(gpu.size(), 0.0);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n + pad; ++j) {
            if (j >= n) {
              EXPECT_EQ(gpu[i * (n + pad) + j], sentinel) << "padding at " << i << "," << j;
              continue;
            }
            double s = std::fabs(double{beta} * double{c0[i * (n + pad) + j]});
            for (int64_t p = 0; p < k; ++p) {
              const float x =
                  ta == Transpose::kNo ? av.data[i * av.ld + p] : av.data[p * av.ld + i];
              const float y =
                  tb == Transpose::kNo ? bv.data[p * bv.ld + j] : bv.data[j * bv.ld + p];
              s += std::fabs(double{alpha} * double{x} * double{y});
            }
            bound[i * (n + pad) + j] = 2 * Gamma(k + 2) * s;
          }
        }
        EXPECT_EQ(FirstOutOfBound(gpu, cpu, bound), "")
            << "ta=" << static_cast<int>(ta) << " tb=" << static_cast<int>(tb) << " beta=" << beta;
      }
    }
  }
  EXPECT_EQ(engine->products(), runs);
  EXPECT_GT(engine->bytes_to_device(), 0);
  EXPECT_EQ(engine->bytes_to_host(), runs * m * n * 4);
}

}  // namespace
}  // namespace loom

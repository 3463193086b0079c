// GpuGemm against the CPU Gemm (tensor_parallel/layers/gemm.h). On every machine:
// the cuBLAS error texts, the shape errors (word for word Gemm's, prefixed
// "GpuGemm:"), the empty handle, and CublasHandle::Create without a device. With a
// CUDA device: seeded distinct inputs, shapes 1x1x1 to 513x257x129, every transpose
// pair, strided views, alpha/beta accumulation, compared per element within the
// bound of internal/gpu_testing.h; empty products; host memory refused.
#include "tensor_parallel/gpu/cublas_gemm.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/gpu/internal/gpu_testing.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

using ::loom::gpu_testing::FirstOutOfBound;
using ::loom::gpu_testing::FromDevice;
using ::loom::gpu_testing::Gamma;
using ::loom::gpu_testing::HasDevice;
using ::loom::gpu_testing::RandomValues;
using ::loom::gpu_testing::ToDevice;
using ::testing::HasSubstr;

absl::Time Deadline() { return absl::Now() + absl::Seconds(60); }

const char* Name(Transpose t) { return t == Transpose::kNo ? "N" : "T"; }

TEST(CublasStatusTest, NamesTheCallAndTheError) {
  EXPECT_THAT(CublasStatus(CUBLAS_STATUS_SUCCESS, "cublasCreate(&h)"), IsOk());
  EXPECT_THAT(CublasStatus(CUBLAS_STATUS_INVALID_VALUE, "cublasSgemm(h, ...)"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cublasSgemm(h, ...) failed: CUBLAS_STATUS_INVALID_VALUE (7): ")));
  EXPECT_THAT(CublasStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate(&h)"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cublasCreate(&h) failed: CUBLAS_STATUS_ALLOC_FAILED (3)")));
  EXPECT_THAT(CublasStatus(CUBLAS_STATUS_NOT_INITIALIZED, "x"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("CUBLAS_STATUS_NOT_INITIALIZED (1)")));
  EXPECT_THAT(
      CublasStatus(CUBLAS_STATUS_NOT_SUPPORTED, "x"),
      StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("CUBLAS_STATUS_NOT_SUPPORTED (15)")));
  EXPECT_THAT(CublasStatus(CUBLAS_STATUS_EXECUTION_FAILED, "x"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("CUBLAS_STATUS_EXECUTION_FAILED")));
}

// The shapes are checked before the handle, so these need no device; each text is
// the CPU Gemm's with "Gemm:" spelled "GpuGemm:".
TEST(GpuGemmTest, ShapeErrorsAreGemmsWordForWord) {
  const std::vector<float> a(6);
  std::vector<float> c(4);
  const CublasHandle none;
  struct Case {
    ConstMatrixView a;
    Transpose ta;
    ConstMatrixView b;
    Transpose tb;
    MatrixView c;
    std::string text;
  };
  const std::vector<Case> cases = {
      {Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kNo,
       Dense(absl::MakeSpan(c), 2, 2),
       "GpuGemm: op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ"},
      {Dense(a, 2, 3), Transpose::kNo, Dense(a, 2, 3), Transpose::kYes,
       Dense(absl::MakeSpan(c), 1, 4),
       "GpuGemm: op(A) [2,3] x op(B) [3,2] is [2,2] but C is [1,4]"},
      {Dense(a, 3, 3), Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
       Dense(absl::MakeSpan(c), 3, 2),
       "GpuGemm: A is [3,3] with ld 3, needing 9 elements, but its span has 6"},
      {ConstMatrixView{a, 2, 3, 2}, Transpose::kNo, Dense(a, 3, 2), Transpose::kNo,
       Dense(absl::MakeSpan(c), 2, 2), "GpuGemm: A is [2,3] with ld 2; need ld >= cols"},
      {Dense(a, 2, 3), Transpose::kYes, Dense(a, 2, 3), Transpose::kNo,
       MatrixView{absl::MakeSpan(c), 3, 3, 3},
       "GpuGemm: C is [3,3] with ld 3, needing 9 elements, but its span has 4"},
  };
  for (const Case& t : cases) {
    const absl::Status gpu = GpuGemm(none, t.a, t.ta, t.b, t.tb, t.c);
    EXPECT_THAT(gpu, StatusIs(absl::StatusCode::kInvalidArgument, t.text));
    std::vector<float> cpu_c(c.size());
    const absl::Status cpu =
        Gemm(t.a, t.ta, t.b, t.tb, MatrixView{absl::MakeSpan(cpu_c), t.c.rows, t.c.cols, t.c.ld});
    EXPECT_EQ(absl::StrReplaceAll(cpu.message(), {{"Gemm:", "GpuGemm:"}}), gpu.message());
  }
}

TEST(GpuGemmTest, ValidShapesNeedAHandle) {
  const std::vector<float> a(6), b(6);
  std::vector<float> c(4);
  EXPECT_THAT(GpuGemm(CublasHandle(), Dense(a, 2, 3), Transpose::kNo, Dense(b, 3, 2),
                      Transpose::kNo, Dense(absl::MakeSpan(c), 2, 2)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("GpuGemm: the cuBLAS handle is empty")));
}

TEST(CublasHandleTest, CreateNeedsADevice) {
  if (HasDevice()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_THAT(CublasHandle::Create(CudaStream()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

// A stream and a handle on device 0 (only with a device).
struct Gpu {
  CudaStream stream;
  CublasHandle cublas;
};

absl::StatusOr<Gpu> MakeGpu(CublasMath math = CublasMath::kPedantic) {
  Gpu gpu;
  LOOM_ASSIGN_OR_RETURN(gpu.stream, CudaStream::Create(0));
  LOOM_ASSIGN_OR_RETURN(gpu.cublas, CublasHandle::Create(gpu.stream, math));
  return gpu;
}

TEST(GpuGemmTest, HeaderExample) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Gpu gpu, MakeGpu());
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer a, ToDevice(std::vector<float>{1, 2, 3, 4, 5, 6}));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer b, ToDevice(std::vector<float>{1, 0, 0, 1, 1, 1}));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer c, ToDevice(std::vector<float>(4, -1.0f)));
  ASSERT_THAT(GpuGemm(gpu.cublas, Dense(AsDeviceFloats(std::as_const(a)), 2, 3), Transpose::kNo,
                      Dense(AsDeviceFloats(std::as_const(b)), 3, 2), Transpose::kNo,
                      Dense(AsDeviceFloats(c), 2, 2)),
              IsOk());
  ASSERT_THAT(gpu.stream.Synchronize(Deadline()), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> result, FromDevice(c));
  EXPECT_EQ(result, (std::vector<float>{4, 5, 10, 11}));
}

struct GemmCase {
  int64_t m, n, k;
};

// RunAndCompare runs one product on the GPU and on the CPU from the same seeded
// inputs (stored with `pad` extra columns, so ld > cols when pad > 0) and compares
// every element of C, padding included (which both must leave untouched).
void RunAndCompare(Gpu& gpu, const GemmCase& s, Transpose ta, Transpose tb, float alpha, float beta,
                   int64_t pad, uint32_t seed) {
  const std::string where =
      absl::StrCat("m=", s.m, " n=", s.n, " k=", s.k, " op(A)=", Name(ta), " op(B)=", Name(tb),
                   " alpha=", alpha, " beta=", beta, " pad=", pad, " seed=", seed);
  SCOPED_TRACE(where);
  const bool ta_yes = ta == Transpose::kYes, tb_yes = tb == Transpose::kYes;
  const int64_t ar = ta_yes ? s.k : s.m, ac = ta_yes ? s.m : s.k;
  const int64_t br = tb_yes ? s.n : s.k, bc = tb_yes ? s.k : s.n;
  const int64_t lda = ac + pad, ldb = bc + pad, ldc = s.n + pad;
  const std::vector<float> a = RandomValues(ar * lda, seed);
  const std::vector<float> b = RandomValues(br * ldb, seed + 1);
  const std::vector<float> c0 = RandomValues(s.m * ldc, seed + 2);

  std::vector<float> cpu = c0;
  ASSERT_THAT(Gemm(ConstMatrixView{a, ar, ac, lda}, ta, ConstMatrixView{b, br, bc, ldb}, tb,
                   MatrixView{absl::MakeSpan(cpu), s.m, s.n, ldc}, alpha, beta),
              IsOk());

  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer da, ToDevice(a));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer db, ToDevice(b));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer dc, ToDevice(c0));
  ASSERT_THAT(GpuGemm(gpu.cublas, ConstMatrixView{AsDeviceFloats(std::as_const(da)), ar, ac, lda},
                      ta, ConstMatrixView{AsDeviceFloats(std::as_const(db)), br, bc, ldb}, tb,
                      MatrixView{AsDeviceFloats(dc), s.m, s.n, ldc}, alpha, beta),
              IsOk());
  ASSERT_THAT(gpu.stream.Synchronize(Deadline()), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> result, FromDevice(dc));

  auto A = [&](int64_t i, int64_t p) { return ta_yes ? a[p * lda + i] : a[i * lda + p]; };
  auto B = [&](int64_t p, int64_t j) { return tb_yes ? b[j * ldb + p] : b[p * ldb + j]; };
  std::vector<double> bound(c0.size(), 0.0);  // padding: exact
  const double gamma2 = 2 * Gamma(s.k + 2);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double abs_sum = 0;
      for (int64_t p = 0; p < s.k; ++p) abs_sum += std::fabs(double{A(i, p)} * double{B(p, j)});
      bound[i * ldc + j] = gamma2 * (std::fabs(double{alpha}) * abs_sum +
                                     std::fabs(double{beta}) * std::fabs(double{c0[i * ldc + j]}));
    }
  }
  EXPECT_EQ(FirstOutOfBound(result, cpu, bound), "");
}

TEST(GpuGemmTest, MatchesCpuGemmEveryTransposeAndShape) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Gpu gpu, MakeGpu());
  const std::vector<GemmCase> shapes = {{1, 1, 1}, {7, 13, 5}, {128, 256, 64}, {513, 257, 129}};
  struct Scale {
    float alpha, beta;
  };
  const std::vector<Scale> scales = {{1.0f, 0.0f}, {-0.75f, 1.5f}};
  uint32_t seed = 0x9e3779b9u;
  for (const GemmCase& s : shapes) {
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        for (const Scale& scale : scales) {
          for (int64_t pad : {0, 3}) {
            RunAndCompare(gpu, s, ta, tb, scale.alpha, scale.beta, pad, seed += 3);
          }
        }
      }
    }
  }
}

TEST(GpuGemmTest, DefaultMathAlsoWithinTheBound) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Gpu gpu, MakeGpu(CublasMath::kDefault));
  RunAndCompare(gpu, {513, 257, 129}, Transpose::kNo, Transpose::kYes, 1.0f, 0.0f, 0, 17);
  RunAndCompare(gpu, {128, 256, 64}, Transpose::kYes, Transpose::kNo, 0.5f, 2.0f, 1, 23);
}

TEST(GpuGemmTest, EmptyInnerDimensionScalesByBeta) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Gpu gpu, MakeGpu());
  // C [2,2] inside rows of 3 (ld 3): the third column must stay.
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer c, ToDevice(std::vector<float>{1, 2, 9, 3, 4, 9}));
  ASSERT_THAT(GpuGemm(gpu.cublas, Dense(absl::Span<const float>(), 2, 0), Transpose::kNo,
                      Dense(absl::Span<const float>(), 0, 2), Transpose::kNo,
                      MatrixView{AsDeviceFloats(c), 2, 2, 3}, 1.0f, 0.5f),
              IsOk());
  ASSERT_THAT(gpu.stream.Synchronize(Deadline()), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> scaled, FromDevice(c));
  EXPECT_EQ(scaled, (std::vector<float>{0.5f, 1, 9, 1.5f, 2, 9}));

  // beta = 0 does not read C: NaNs become zeros, as in Gemm.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer poisoned,
                            ToDevice(std::vector<float>{nan, nan, 9, nan, nan, 9}));
  // Transposed operands: A is [k,m] = [0,2] and B is [n,k] = [2,0].
  ASSERT_THAT(GpuGemm(gpu.cublas, Dense(absl::Span<const float>(), 0, 2), Transpose::kYes,
                      Dense(absl::Span<const float>(), 2, 0), Transpose::kYes,
                      MatrixView{AsDeviceFloats(poisoned), 2, 2, 3}),
              IsOk());
  ASSERT_THAT(gpu.stream.Synchronize(Deadline()), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> zeroed, FromDevice(poisoned));
  EXPECT_EQ(zeroed, (std::vector<float>{0, 0, 9, 0, 0, 9}));

  // Nothing to compute: fine, and C's (empty) span is never touched.
  EXPECT_THAT(GpuGemm(gpu.cublas, Dense(absl::Span<const float>(), 0, 3), Transpose::kNo,
                      Dense(absl::Span<const float>(), 3, 0), Transpose::kNo,
                      Dense(absl::Span<float>(), 0, 0)),
              IsOk());
}

TEST(GpuGemmTest, RefusesHostMemory) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Gpu gpu, MakeGpu());
  const std::vector<float> host_a = RandomValues(6, 1);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer b, ToDevice(RandomValues(6, 2)));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer c, ToDevice(RandomValues(4, 3)));
  EXPECT_THAT(GpuGemm(gpu.cublas, Dense(host_a, 2, 3), Transpose::kNo,
                      Dense(AsDeviceFloats(std::as_const(b)), 3, 2), Transpose::kNo,
                      Dense(AsDeviceFloats(c), 2, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GpuGemm: A is unregistered host memory; need device memory of "
                                 "device 0")));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer pinned,
                            DeviceBuffer::Allocate(MemorySpace::kHostPinned, 4 * sizeof(float)));
  EXPECT_THAT(
      GpuGemm(gpu.cublas, Dense(AsDeviceFloats(std::as_const(b)), 2, 3), Transpose::kNo,
              Dense(AsDeviceFloats(std::as_const(b)), 3, 2), Transpose::kNo,
              Dense(AsDeviceFloats(pinned), 2, 2)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GpuGemm: C is pinned host memory")));
}

}  // namespace
}  // namespace loom

#include "tensor_parallel/layers/gemm_throughput.h"

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// A plausible rate in both precisions: above 0.1 GFLOP/s (any build, any x86-64
// host, under a sanitizer) and below 100 TFLOP/s (no CPU core of today does that
// much per GEMM thread, AMX included). The rate itself is not asserted.
TEST(GemmThroughputTest, MeasuresAPlausibleRateInEachPrecision) {
  for (const GemmPrecision precision : {GemmPrecision::kF32, GemmPrecision::kBf16}) {
    LOOM_ASSERT_OK_AND_ASSIGN(const double flops,
                              MeasureGemmThroughput(precision, absl::Milliseconds(5), 128));
    EXPECT_GT(flops, 1e8) << GemmPrecisionName(precision);
    EXPECT_LT(flops, 1e14 * GemmThreads()) << GemmPrecisionName(precision);
  }
}

TEST(GemmThroughputTest, RefusesBadSizesAndDurations) {
  EXPECT_THAT(MeasureGemmThroughput(GemmPrecision::kF32, absl::Milliseconds(5), 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n = 0 is not in [16, 8192]")));
  EXPECT_THAT(MeasureGemmThroughput(GemmPrecision::kF32, absl::Milliseconds(5), 8193),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n = 8193")));
  EXPECT_THAT(MeasureGemmThroughput(GemmPrecision::kF32, absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duration 0 is not in")));
  EXPECT_THAT(MeasureGemmThroughput(GemmPrecision::kF32, absl::Seconds(11)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duration 11s")));
}

}  // namespace
}  // namespace loom

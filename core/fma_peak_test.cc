#include "core/fma_peak.h"

#include <cmath>
#include <string>

#include "absl/time/time.h"
#include "core/cpu_features.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(FmaPeakTest, MeasuresAPlausibleRateOnTheBestTarget) {
  LOOM_ASSERT_OK_AND_ASSIGN(FmaPeak peak, MeasureFmaPeak(absl::Milliseconds(20)));
  // At least one scalar FMA per nanosecond; at most two 512-bit FMA pipes at 8 GHz
  // (2 x 16 lanes x 2 FLOP x 8e9), far above any CPU made so far.
  EXPECT_GT(peak.flops_per_core, 2e9);
  EXPECT_LT(peak.flops_per_core, 512e9);
  EXPECT_TRUE(std::isfinite(peak.flops_per_core));
  // The best target Highway compiled and this CPU runs (the list is best first).
  EXPECT_EQ(peak.vector_target, hwy::TargetName(hwy::SupportedAndGeneratedTargets().front()));
  EXPECT_FALSE(peak.cpu_model.empty());
  EXPECT_EQ(peak.cpu_model, CpuModelName());
  // The bf16 peak: measured exactly where the CPU has AVX512_BF16, and then of the
  // f32 one's order (two products per f32 lane: at least as fast in theory; the two
  // 20 ms windows can see different load, and under ASan on a busy host bf16 measured
  // 0.87 of f32, so the bound is half) and at most eight 512-bit dot products per cycle
  // at 8 GHz.
  if (CpuSupportsAvx512Bf16()) {
    EXPECT_GT(peak.bf16_flops_per_core, peak.flops_per_core * 0.5);
    EXPECT_LT(peak.bf16_flops_per_core, 4096e9);
  } else {
    EXPECT_EQ(peak.bf16_flops_per_core, 0.0);
  }
}

TEST(FmaPeakTest, RefusesDurationsOutsideItsRange) {
  EXPECT_THAT(MeasureFmaPeak(absl::ZeroDuration()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duration 0 must be positive and at most 10s")));
  EXPECT_THAT(MeasureFmaPeak(absl::Seconds(11)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duration 11s")));
}

}  // namespace
}  // namespace loom

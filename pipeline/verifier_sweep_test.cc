// Every generated schedule through Lower and Verify (both point-to-point
// semantics): p = 1..16 ranks, m = 1..64 microbatches, v = 1..4 virtual stages
// where interleaving allows them (m a multiple of p). Every combination: about 5,000
// schedules, a few seconds in fastbuild.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/verifier.h"

namespace loom {
namespace {

constexpr int64_t kMaxRanks = 16;
constexpr int64_t kMaxMicrobatches = 64;
constexpr int64_t kMaxVirtualStages = 4;

void ExpectVerified(const absl::StatusOr<Schedule>& schedule, const std::string& what) {
  ASSERT_THAT(schedule, IsOk()) << what;
  // The compute-only form (Verify lowers it) and the lowered form both pass.
  absl::StatusOr<Schedule> lowered = Lower(*schedule);
  ASSERT_THAT(lowered, IsOk()) << what;
  EXPECT_THAT(Verify(*lowered), IsOk()) << what;
}

class SweepTest : public ::testing::TestWithParam<PipelineScheduleKind> {};

TEST_P(SweepTest, EveryScheduleVerifies) {
  const PipelineScheduleKind kind = GetParam();
  int64_t count = 0;
  for (int64_t p = 1; p <= kMaxRanks; ++p) {
    for (int64_t m = 1; m <= kMaxMicrobatches; ++m) {
      if (kind != PipelineScheduleKind::kInterleaved1F1B) {
        ExpectVerified(MakeSchedule(kind, p, m),
                       absl::StrCat(PipelineScheduleName(kind), " p=", p, " m=", m));
        ++count;
        continue;
      }
      if (m % p != 0) continue;
      for (int64_t v = 1; v <= kMaxVirtualStages; ++v) {
        ExpectVerified(MakeInterleaved1F1BSchedule(p, m, v),
                       absl::StrCat("interleaved-1f1b p=", p, " m=", m, " v=", v));
        ++count;
      }
    }
  }
  EXPECT_GT(count, 0);
  RecordProperty("schedules", static_cast<int>(count));
}

INSTANTIATE_TEST_SUITE_P(AllGenerators, SweepTest,
                         ::testing::Values(PipelineScheduleKind::kGPipe,
                                           PipelineScheduleKind::k1F1B,
                                           PipelineScheduleKind::kInterleaved1F1B,
                                           PipelineScheduleKind::kZeroBubbleH1,
                                           PipelineScheduleKind::kZeroBubbleV),
                         [](const ::testing::TestParamInfo<PipelineScheduleKind>& param_info) {
                           std::string name(PipelineScheduleName(param_info.param));
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace loom

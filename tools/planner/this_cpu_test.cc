// FitToJobRun: a data-parallel calibration run fits the same constants as a one-rank
// run whose rank did the same work in the same seconds, and its exposed gradient
// communication is not taken for overhead; runs it cannot fit are refused, naming why.
#include "tools/planner/this_cpu.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace planner {
namespace {

using ::testing::HasSubstr;

DeviceSpec Device() {
  DeviceSpec d = CpuDeviceDefaults();
  d.peak_f32_flops = 1.2e11;
  d.peak_bf16_flops = 2.4e11;
  d.memory_bandwidth = 2.0e10;
  return d;
}

// One rank computing 8 sequences of 128 tokens (a train --summary_json, as parsed).
JobRun OneRank() {
  JobRun run;
  run.shape.layers = 4;
  run.shape.hidden = 512;
  run.shape.heads = 8;
  run.shape.seq_len = 128;
  run.shape.vocab = 256;
  run.config.dtype = ComputeDtype::kF32;
  run.config.microbatch_size = 8;
  run.global_batch = 8;
  run.threads_per_rank = 1;
  run.compute_seconds = 0.30;
  run.gemm_seconds = 0.21;
  run.attention_seconds = 0.04;
  run.optimizer_seconds = 0.03;
  run.step_seconds = 0.35;
  return run;
}

TEST(FitToJobRunTest, ADataParallelRunFitsAsOneRankDoingItsShare) {
  const JobRun one = OneRank();
  JobRun two = one;
  two.config.dp = 2;
  two.global_batch = 16;           // 8 sequences on each rank, as `one`
  two.dp_comm_seconds = 0.05;      // exposed, priced by the step model itself
  two.step_seconds = one.step_seconds + two.dp_comm_seconds;
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec a, FitToJobRun(Device(), one));
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec b, FitToJobRun(Device(), two));
  EXPECT_DOUBLE_EQ(a.gemm_max_efficiency, b.gemm_max_efficiency);
  EXPECT_DOUBLE_EQ(a.attention_efficiency, b.attention_efficiency);
  EXPECT_DOUBLE_EQ(a.elementwise_passes, b.elementwise_passes);
  EXPECT_NEAR(a.step_overhead_seconds, 0.02, 1e-12);
  EXPECT_NEAR(b.step_overhead_seconds, 0.02, 1e-12);
  // The fit is not a constant: twice the seconds for the same work halves it.
  JobRun slow = one;
  slow.gemm_seconds *= 2;
  slow.compute_seconds += one.gemm_seconds;
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec c, FitToJobRun(Device(), slow));
  EXPECT_NEAR(c.gemm_max_efficiency, a.gemm_max_efficiency / 2, 1e-12);
}

TEST(FitToJobRunTest, RefusesRunsItCannotFitNamingWhy) {
  JobRun tp = OneRank();
  tp.config.tp = 2;
  EXPECT_THAT(FitToJobRun(Device(), tp),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("tp=2")));
  JobRun uneven = OneRank();
  uneven.config.dp = 3;
  uneven.global_batch = 16;
  EXPECT_THAT(FitToJobRun(Device(), uneven),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("global batch 16 is not a multiple of dp 3")));
  JobRun no_gemm = OneRank();
  no_gemm.gemm_seconds = 0;
  EXPECT_THAT(FitToJobRun(Device(), no_gemm),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not split")));
}

}  // namespace
}  // namespace planner
}  // namespace loom

// FitToJobRun: a data-parallel calibration run fits the same constants as a one-rank
// run whose rank did the same work in the same seconds, and its exposed gradient
// communication is not taken for overhead; runs it cannot fit are refused, naming why.
// FitToJobRuns: two microbatch sizes fit the row and per-microbatch terms too.
#include "tools/planner/this_cpu.h"

#include "core/status_matchers.h"
#include "tools/planner/model_flops.h"
#include "tools/planner/step_model.h"
#include "topology/memory_estimate.h"
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

// The constants two calibration runs are made of: products at E * width * rows / (rows
// + R), attention at A of that, element-wise P passes over the activations and G
// over each microbatch's weight gradients.
struct Truth {
  double e = 0.7, r = 96, a = 0.4, p = 5, g = 3;
};

// A one-rank run of `micro_batch` sequences a microbatch (8 in all) timed as `truth`
// says, by the formulas FitToJobRuns inverts (written out here on their own).
JobRun Timed(const Truth& truth, int64_t micro_batch) {
  JobRun run = OneRank();
  run.config.microbatch_size = micro_batch;
  const DeviceSpec d = Device();
  const TransformerShape& s = run.shape;
  const double h = 512, seq = 128, layers = 4, tokens = 8 * seq;
  const double rows = static_cast<double>(micro_batch) * seq;
  const double microbatches = 8.0 / static_cast<double>(micro_batch);
  const double efficiency = truth.e * h / (h + d.gemm_half_width) * rows / (rows + truth.r);
  const double gemm_flops = tokens * (layers * 2 * LayerMatrixParameters(s) * 3 + 3 * 2 * h * 256);
  run.gemm_seconds = gemm_flops / (d.peak_f32_flops * efficiency);
  run.attention_seconds = tokens * layers * 4 * seq * h * 3 / (d.peak_f32_flops * efficiency * truth.a);
  FusedAttentionActivationOptions o;
  o.hidden_size = 512;
  o.num_heads = 8;
  o.vocab = 256;
  o.seq_len = 128;
  o.micro_batch_size = micro_batch;
  o.layers = 1;
  const double layer_bytes = static_cast<double>(*EstimateFusedAttentionActivationBytes(o));
  const double rest = (truth.p * microbatches * layers * layer_bytes +
                       truth.g * microbatches * layers * 4 * LayerMatrixParameters(s)) /
                      d.memory_bandwidth;
  run.compute_seconds = run.gemm_seconds + run.attention_seconds + rest;
  run.step_seconds = run.compute_seconds + run.optimizer_seconds + 0.01;
  return run;
}

// The step model's compute for `run`'s job on `device`: one rank, one stage, so the
// pipeline is every microbatch's forward and backward back to back.
double PredictedCompute(const DeviceSpec& device, const JobRun& run) {
  StepInput in;
  in.shape = run.shape;
  in.global_batch = run.global_batch;
  in.device = device;
  // Links the one-rank job never uses, but the model asks of every device.
  in.device.intra_node_bandwidth = in.device.inter_node_bandwidth = 1e10;
  in.gpus_per_node = 1;
  in.config = run.config;
  const absl::StatusOr<StepPrediction> p = PredictStep(in);
  EXPECT_THAT(p.status(), IsOk());
  return p.ok() ? p->pipeline_seconds : 0;
}

// Two microbatch sizes separate what one run cannot: the products' loss at few rows
// and the gradients' per-microbatch passes. The fit recovers the constants the runs
// were timed with, and the step model then predicts both runs' compute; fitted to
// the 8-sequence run alone it misses the 4 x 2 run by more than a tenth.
TEST(FitToJobRunsTest, TwoMicrobatchSizesFitRowsAndGradientPasses) {
  const Truth truth;
  const JobRun wide = Timed(truth, 8), narrow = Timed(truth, 2);
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec fit, FitToJobRuns(Device(), {wide, narrow}));
  EXPECT_NEAR(fit.gemm_max_efficiency, truth.e, 1e-9);
  EXPECT_NEAR(fit.gemm_half_rows, truth.r, 1e-6);
  EXPECT_NEAR(fit.attention_efficiency, truth.a, 1e-9);
  EXPECT_NEAR(fit.elementwise_passes, truth.p, 1e-6);
  EXPECT_NEAR(fit.grad_accumulate_passes, truth.g, 1e-6);
  EXPECT_NEAR(fit.step_overhead_seconds, 0.01, 1e-9);
  for (const JobRun& run : {wide, narrow}) {
    EXPECT_NEAR(PredictedCompute(fit, run) / run.compute_seconds, 1, 1e-9)
        << "micro_batch " << run.config.microbatch_size;
  }
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec one, FitToJobRun(Device(), wide));
  EXPECT_EQ(one.gemm_half_rows, 0);
  EXPECT_EQ(one.grad_accumulate_passes, 0);
  EXPECT_NEAR(PredictedCompute(one, wide) / wide.compute_seconds, 1, 1e-9);
  EXPECT_LT(PredictedCompute(one, narrow) / narrow.compute_seconds, 0.9);
}

TEST(FitToJobRunsTest, RunsOfOneMicrobatchSizeFitAsOneRun) {
  const JobRun run = Timed(Truth(), 4);
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec one, FitToJobRun(Device(), run));
  LOOM_ASSERT_OK_AND_ASSIGN(const DeviceSpec two, FitToJobRuns(Device(), {run, run}));
  EXPECT_DOUBLE_EQ(one.gemm_max_efficiency, two.gemm_max_efficiency);
  EXPECT_DOUBLE_EQ(one.elementwise_passes, two.elementwise_passes);
  EXPECT_EQ(two.gemm_half_rows, 0);
  EXPECT_EQ(two.grad_accumulate_passes, 0);
}

TEST(FitToJobRunsTest, RefusesRunsThatDoNotFitTogetherNamingThem) {
  EXPECT_THAT(FitToJobRuns(Device(), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no calibration run")));
  JobRun dp2 = Timed(Truth(), 2);
  dp2.config.dp = 2;
  dp2.global_batch = 16;
  EXPECT_THAT(FitToJobRuns(Device(), {Timed(Truth(), 8), dp2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dp 1 and 2")));
  JobRun wider = Timed(Truth(), 2);
  wider.shape.hidden = 1024;
  EXPECT_THAT(FitToJobRuns(Device(), {Timed(Truth(), 8), wider}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden 512 and 1024")));
}

}  // namespace
}  // namespace planner
}  // namespace loom

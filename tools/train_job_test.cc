#include "tools/train_job.h"

#include <cmath>
#include <vector>

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TrainJobOptions Small(int64_t steps) {
  TrainJobOptions options;  // dp 2, tp 2, pp 2, zero 3, cpu offload
  options.steps = steps;
  return options;
}

// The default mesh learns, and ends where one rank training the same model on
// the same global batch ends: within 1e-5 of the largest parameter.
TEST(TrainJobTest, DefaultMeshLearnsAndMatchesOneRank) {
  const TrainJobOptions options = Small(12);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  ASSERT_EQ(summary.steps.size(), 12u);
  EXPECT_LT(summary.final_loss, summary.steps.front().loss - 0.3);
  EXPECT_NEAR(summary.uniform_loss, std::log(64.0), 1e-12);
  EXPECT_GT(summary.sharded_state_bytes_per_rank, 0);
  EXPECT_GT(summary.peak_model_state_bytes_per_rank, summary.sharded_state_bytes_per_rank);
  EXPECT_GT(summary.comm_bytes_per_rank_per_step, 0);
  EXPECT_EQ(summary.final_params.size(), 8u);
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, summary));
  EXPECT_GT(reference.max_abs_param, 0.01);
  EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
  EXPECT_NEAR(reference.reference_final_loss, summary.final_loss, 1e-4);
}

std::vector<std::vector<float>> Values(const TrainSummary& summary) {
  std::vector<std::vector<float>> out;
  for (const RankParameters& rank : summary.final_params) {
    out.insert(out.end(), rank.values.begin(), rank.values.end());
  }
  return out;
}

// With two data-parallel ranks an average is one addition whatever the algorithm,
// so ZeRO-3 (reduce-scatter of shards) and plain data parallelism (all-reduce)
// step to the same bits.
TEST(TrainJobTest, Zero3AndPlainDataParallelAgreeBitwise) {
  TrainJobOptions options = Small(4);
  options.tp = 1;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary zero3, RunTrainJob(options, nullptr));
  options.zero = 0;
  options.offload = OffloadKind::kNone;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  EXPECT_EQ(Values(zero3), Values(plain));
  EXPECT_EQ(zero3.final_loss, plain.final_loss);
  // ZeRO-3 keeps a quarter of the optimizer state... per dp rank: less in all.
  EXPECT_LT(zero3.sharded_state_bytes_per_rank, plain.peak_model_state_bytes_per_rank);
}

// Recomputing activations drops them in forward and gives the same gradients.
TEST(TrainJobTest, FullRecomputeHoldsLessAndChangesNothing) {
  TrainJobOptions options = Small(3);
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary none, RunTrainJob(options, nullptr));
  options.recompute = Recompute::kFull;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary full, RunTrainJob(options, nullptr));
  EXPECT_EQ(Values(none), Values(full));
  EXPECT_LT(full.peak_activation_bytes_per_rank, none.peak_activation_bytes_per_rank);
}

TEST(TrainJobTest, Bf16AndInterleavedTrain) {
  TrainJobOptions options = Small(8);
  options.dtype = DType::kBF16;
  options.schedule = PipelineScheduleKind::kInterleaved1F1B;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  EXPECT_LT(summary.final_loss, summary.steps.front().loss - 0.2);
}

TEST(TrainJobTest, BadOptionsAreOneClearLine) {
  TrainJobOptions options = Small(1);
  options.pp = 3;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--layers 4 is not divisible by the 3 pipeline stages (--pp 3)")));
  options = Small(1);
  options.microbatches = 1;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--microbatches 1 is fewer than --pp 2")));
  options = Small(1);
  options.tp = 3;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model: ")));
  options = Small(1);
  options.zero = 2;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("--zero 2 is not built yet")));
  options = Small(1);
  options.schedule = PipelineScheduleKind::kZeroBubbleH1;
  EXPECT_THAT(ValidateTrainJob(options),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("--schedule zb-h1")));
  options = Small(1);
  options.zero = 0;
  options.dtype = DType::kBF16;
  EXPECT_THAT(RunTrainJob(options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--dtype bf16 needs --zero 3")));
}

}  // namespace
}  // namespace loom

// Context parallelism in the job (--cp): every mesh with a cp axis trains to the
// one-rank reference within the bound the job already holds (the loss reported as
// the sum of the cp ranks' shares, the gradients averaged over dp x cp), the same
// run twice gives the same bits, and a rank's activations shrink with cp.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tools/training/cp_comm_choice.h"
#include "tools/training/internal/summary_testing.h"
#include "tools/training/reference.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

using training_testing::ByName;

struct CpCase {
  std::string name;
  int dp, tp, pp, cp;
  CpLayout layout;
  CpComm comm;
  int64_t seq_len;
  int zero;
  PipelineScheduleKind schedule;
};

TrainJobOptions OptionsOf(const CpCase& c) {
  TrainJobOptions o;  // 4 layers, hidden 64, heads 4, vocab 64
  o.dp = c.dp;
  o.tp = c.tp;
  o.pp = c.pp;
  o.cp = c.cp;
  o.cp_layout = c.layout;
  o.cp_comm = c.comm;
  o.model.seq_len = c.seq_len;
  o.zero = c.zero;
  o.offload = OffloadKind::kNone;
  o.schedule = c.schedule;
  o.microbatches = 2 * c.pp;
  o.steps = 6;
  return o;
}

class TrainJobCpTest : public ::testing::TestWithParam<CpCase> {};

// Each mesh learns and ends within 1e-5 of the largest parameter of one rank
// training the same global batch, its loss (the cp sum) within 1e-4 of the
// reference's; every cp and dp replica holds the same parameters (ByName).
TEST_P(TrainJobCpTest, MatchesTheOneRankReference) {
  const TrainJobOptions options = OptionsOf(GetParam());
  LOOM_ASSERT_OK(ValidateTrainJob(options));
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  ASSERT_EQ(summary.steps.size(), 6u);
  EXPECT_LT(summary.final_loss, summary.steps.front().loss - 0.2);
  EXPECT_EQ(summary.final_params.size(),
            static_cast<size_t>(options.dp * options.tp * options.pp * options.cp));
  ByName(summary);
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, summary));
  EXPECT_GT(reference.max_abs_param, 0.01);
  EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
  EXPECT_NEAR(reference.reference_final_loss, summary.final_loss, 1e-4);
  // Every step's loss, not only the last: the cp shares add up from the start.
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary again, RunTrainJob(options, nullptr));
  ASSERT_EQ(again.steps.size(), summary.steps.size());
  for (size_t i = 0; i < again.steps.size(); ++i) {
    EXPECT_EQ(again.steps[i].loss, summary.steps[i].loss) << "step " << i + 1;
  }
  EXPECT_EQ(ByName(again), ByName(summary));  // bitwise, run to run
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, TrainJobCpTest,
    ::testing::Values(
        // The meshes: cp 2 with tp 2 and dp 2 (8 ranks, ZeRO-3 over dp x cp);
        // cp 4 alone; cp 4 on a sequence that does not divide into 2 cp chunks.
        CpCase{"cp2_tp2_dp2", 2, 2, 1, 2, CpLayout::kZigzag, CpComm::kRing, 32, 3,
               PipelineScheduleKind::k1F1B},
        CpCase{"cp4", 1, 1, 1, 4, CpLayout::kZigzag, CpComm::kRing, 32, 3,
               PipelineScheduleKind::k1F1B},
        CpCase{"cp4_seq250", 1, 1, 1, 4, CpLayout::kZigzag, CpComm::kRing, 250, 3,
               PipelineScheduleKind::k1F1B},
        // The all-to-all variant on the same meshes (cp divides each tp rank's heads).
        CpCase{"a2a_cp2_tp2_dp2", 2, 2, 1, 2, CpLayout::kZigzag, CpComm::kAllToAll, 32, 3,
               PipelineScheduleKind::k1F1B},
        CpCase{"a2a_cp4_seq250", 1, 1, 1, 4, CpLayout::kZigzag, CpComm::kAllToAll, 250, 3,
               PipelineScheduleKind::k1F1B},
        // cp 3 with the contiguous layout, under a pipeline of two stages per rank
        // (ZB-V, split backward) and plain data parallelism.
        CpCase{"cp3_contiguous_pp2_zbv_zero0", 1, 1, 2, 3, CpLayout::kContiguous,
               CpComm::kRing, 37, 0, PipelineScheduleKind::kZeroBubbleV}),
    [](const ::testing::TestParamInfo<CpCase>& param) { return param.param.name; });

// At seq_len 1024 a rank at cp = k holds 1 / k of cp = 1's activations (its rows
// of every saved tensor; nothing of size seq_len x seq_len), within the 1.1 / k,
// and exactly topology/memory_estimate's fused-attention estimate.
TEST(TrainJobCpMemoryTest, PeakActivationsShrinkWithCp) {
  TrainJobOptions o;
  o.dp = 1;
  o.tp = 1;
  o.pp = 1;
  o.zero = 0;
  o.offload = OffloadKind::kNone;
  o.model.seq_len = 1024;
  o.model.layers = 2;
  o.microbatches = 1;
  o.micro_batch = 1;
  o.steps = 1;
  std::vector<int64_t> peak;
  for (int cp : {1, 2, 4}) {
    o.cp = cp;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(o, nullptr));
    peak.push_back(summary.peak_activation_bytes_per_rank);
    // topology/memory_estimate predicts it to the byte.
    EXPECT_EQ(summary.estimated_activation_bytes_per_rank, summary.peak_activation_bytes_per_rank)
        << "cp " << cp;
  }
  ASSERT_GT(peak[0], 0);
  for (int i : {1, 2}) {
    const int k = i == 1 ? 2 : 4;
    EXPECT_LE(static_cast<double>(peak[i]), 1.1 / k * static_cast<double>(peak[0]))
        << "cp " << k << ": " << peak[i] << " bytes against cp 1's " << peak[0];
  }
}

// --cp_comm auto picks the variant that sends fewer elements per layer, and says
// why; a2a only where cp divides each tp rank's heads. ValidateTrainJob refuses an
// a2a that does not fit in one line.
TEST(TrainJobCpCommTest, AutoPicksByTrafficAndA2aNeedsDivisibleHeads) {
  TrainJobOptions o;  // heads 4, hidden 64, seq 32, micro_batch 2
  o.tp = 1;
  o.cp = 1;
  LOOM_ASSERT_OK_AND_ASSIGN(CpCommChoice choice, ChooseCpComm(o));
  EXPECT_EQ(choice.comm, CpComm::kRing);
  EXPECT_EQ(choice.why, "cp 1: no context parallelism");
  o.cp = 4;
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o));
  EXPECT_EQ(choice.comm, CpComm::kAllToAll);
  // rank 0 at seq 32, cp 4, d 16: the ring sends (6 + 14) x 8 x 16 per head, 4 heads
  // and 2 sequences; a2a the formula of ulysses_attention.h.
  EXPECT_NE(choice.why.find("the ring 20480"), std::string::npos) << choice.why;
  o.cp = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o));
  EXPECT_EQ(choice.comm, CpComm::kRing);
  EXPECT_NE(choice.why.find("a2a needs cp 3 to divide each tp rank's 4 heads"),
            std::string::npos)
      << choice.why;
  o.cp_comm = CpComm::kAllToAll;
  EXPECT_THAT(ValidateTrainJob(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       testing::HasSubstr("--cp_comm a2a needs --cp 3 to divide each tp "
                                          "rank's 4 heads (--heads 4 / --tp 1)")));
}

}  // namespace
}  // namespace loom

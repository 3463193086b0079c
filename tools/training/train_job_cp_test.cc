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
#include "tensor_parallel/layers/ulysses_attention.h"
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

// --cp_comm auto prices each variant's exposed communication per layer and
// microbatch (cp_comm_choice.h) and says why; a2a only where cp divides each tp
// rank's heads. ValidateTrainJob refuses an a2a that does not fit in one line.
TEST(TrainJobCpCommTest, AutoPricesExposedCommunication) {
  TrainJobOptions o;  // heads 4, hidden 64 (d 16), seq 32, micro_batch 2
  o.tp = 1;
  o.cp = 1;
  const CpCostInputs inputs;  // alpha 2 us, beta 1 / 5 GB/s, 50 GFLOP/s
  LOOM_ASSERT_OK_AND_ASSIGN(CpCommChoice choice, ChooseCpComm(o, inputs));
  EXPECT_EQ(choice.comm, CpComm::kRing);
  EXPECT_EQ(choice.why, "cp 1: no context parallelism");
  o.cp = 4;
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o, inputs));
  // Rank 0 holds 8 rows; a hop carries 4 heads x 2 sequences x 8 rows x 16 f32 for
  // each of K and V (8,192 bytes), twice that backward (K, V, dK, dV), and the dK,
  // dV home 8,192 bytes. The mean rank's 32 x 33 / 2 / 4 = 132 visible pairs cost
  // 4 x 16 x 4 x 2 x 132 flops forward, a quarter of it per block, 2.5 times backward.
  const double alpha = 2e-6, beta = 1.0 / 5e9;
  const double forward_block = 4.0 * 16 * 4 * 2 * 132 / 50e9 / 4;
  const double ring = 3 * (alpha + 8192 * beta - forward_block) +
                      3 * (alpha + 16384 * beta - 2.5 * forward_block) + alpha + 8192 * beta;
  EXPECT_NEAR(choice.ring_seconds, ring, 1e-12);
  // a2a: 4 all-to-alls of 3 messages, and ulysses_attention.h's elements (rank 0,
  // 4 heads: forward 4 x 8 x 16 x 3 x 3 / 4 + ..., exactly UlyssesAttentionSentElements).
  LOOM_ASSERT_OK_AND_ASSIGN(const UlyssesAttentionTraffic a2a,
                            UlyssesAttentionSentElements(32, 4, 0, CpLayout::kZigzag, 4, 16));
  EXPECT_NEAR(choice.a2a_seconds,
              12 * alpha + beta * 4.0 * 2 * static_cast<double>(a2a.forward + a2a.backward),
              1e-12);
  // At these sizes the calls' latency decides: the ring's hops are few and small.
  EXPECT_EQ(choice.comm, CpComm::kRing) << choice.why;
  EXPECT_NE(choice.why.find("default constants: alpha 2 us, beta 5 GB/s, attention 50 GFLOP/s"),
            std::string::npos)
      << choice.why;
  // A long sequence on a fast attention kernel (a GPU's rate) leaves the ring's hops
  // uncovered, and a2a, which sends about 2 / cp of the bytes, wins.
  o.model.seq_len = 1024;
  CpCostInputs fast = inputs;
  fast.attention_flops_per_second = 100e12;
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o, fast));
  EXPECT_EQ(choice.comm, CpComm::kAllToAll) << choice.why;
  EXPECT_LT(choice.a2a_seconds, choice.ring_seconds);
  // The same sequence on a CPU core's rate: the ring hides its hops (only the last
  // one home is exposed) and wins.
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o, inputs));
  EXPECT_EQ(choice.comm, CpComm::kRing) << choice.why;
  // cp 3 does not divide 4 heads: the ring, and the reason.
  o.cp = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ChooseCpComm(o, fast));
  EXPECT_EQ(choice.comm, CpComm::kRing);
  EXPECT_LT(choice.a2a_seconds, 0);
  EXPECT_NE(choice.why.find("a2a needs cp 3 to divide each tp rank's 4 heads"),
            std::string::npos)
      << choice.why;
  // Constants that cannot price anything.
  CpCostInputs bad = inputs;
  bad.beta = 0;
  EXPECT_THAT(ChooseCpComm(o, bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                             testing::HasSubstr("beta 0 must be finite and > 0")));
  o.cp_comm = CpComm::kAllToAll;
  EXPECT_THAT(ValidateTrainJob(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       testing::HasSubstr("--cp_comm a2a needs --cp 3 to divide each tp "
                                          "rank's 4 heads (--heads 4 / --tp 1)")));
}

}  // namespace
}  // namespace loom

// The training job at shapes chosen for their size (a realistic width, GPT-2's
// vocabulary over tp 4) against plain data parallelism and the one-rank
// reference. Tagged `sweep` with tools/training:shape_sweep_test: the suite runs
// them; the sanitizer steps do not, since their threads and code paths are
// train_job_test's at a small width, which both sanitizers run.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/training/internal/summary_testing.h"
#include "tools/training/reference.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

using training_testing::RankValues;
using training_testing::SmallJob;
using training_testing::SmallPlainJob;

// A realistic width, above every size threshold (hidden 512: each block a unit of
// 3.1 M elements, the head's final norm 512 elements, once split from the head):
// every ZeRO stage trains in both pass directions to the bits of plain data
// parallelism and to the one-rank reference, and the activation estimate holds.
TEST(TrainJobShapesTest, EveryZeroStageAtHidden512MatchesPlainDataParallel) {
  TrainJobOptions options = SmallPlainJob(2);
  options.model.hidden = 512;
  options.model.heads = 8;
  options.model.layers = 2;
  options.model.seq_len = 16;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary plain, RunTrainJob(options, nullptr));
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, plain));
  EXPECT_LT(reference.max_abs_param_diff, 1e-5 * reference.max_abs_param);
  for (const int zero : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("zero ", zero));
    options.zero = zero;
    options.defer_reduce_scatter = zero == 3;
    LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary sharded, RunTrainJob(options, nullptr));
    EXPECT_EQ(RankValues(sharded), RankValues(plain));
    EXPECT_EQ(sharded.estimated_activation_bytes_per_rank,
              sharded.peak_activation_bytes_per_rank);
    EXPECT_EQ(sharded.dp_traffic.recomputed_forwards, 0);
  }
}

// GPT-2's vocabulary over tp 4: 50,257 rows split as evenly as they go (12,565
// on the first rank, 12,564 on the others; no padding rows, so nothing to exclude
// from the softmax or the checkpoints), trained to the one-rank reference.
TEST(TrainJobShapesTest, Gpt2VocabularyOverTp4MatchesOneRank) {
  TrainJobOptions options = SmallJob(2);
  options.dp = 1;
  options.pp = 1;
  options.tp = 4;
  options.zero = 0;
  options.offload = OffloadKind::kNone;
  options.model.vocab = 50257;
  options.model.seq_len = 16;
  LOOM_ASSERT_OK_AND_ASSIGN(const TrainSummary summary, RunTrainJob(options, nullptr));
  LOOM_ASSERT_OK_AND_ASSIGN(const ReferenceComparison reference,
                            CompareWithReference(options, summary));
  // The f32 bound of the shape sweep (1e-4), not this file's 1e-5: AdamW divides
  // each row's gradient by its own RMS, and most of 50,257 rows get gradients near
  // 1e-8, whose last bits follow the order of the softmax sums (4 shards against
  // one, in the host's SIMD target). Measured: 1.03e-5 on AMD Zen 4, under 1.0e-5
  // on an Intel Xeon (AMX).
  EXPECT_LT(reference.max_abs_param_diff, 1e-4 * reference.max_abs_param);
  EXPECT_EQ(summary.estimated_activation_bytes_per_rank, summary.peak_activation_bytes_per_rank);
  ASSERT_EQ(summary.final_params.size(), 4u);
  for (const RankParameters& rank : summary.final_params) {
    for (const GptParameter& p : rank.params) {
      if (p.name == "embed.token") {
        EXPECT_EQ(p.full_shape[0], 50257);
        EXPECT_EQ(p.shape[0], rank.tp_rank == 0 ? 12565 : 12564);
      }
    }
  }
}

}  // namespace
}  // namespace loom

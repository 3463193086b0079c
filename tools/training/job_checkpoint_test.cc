#include "tools/training/job_checkpoint.h"

#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// The manifest's model line is what the first checkpoints wrote: the same fields,
// ffn resolved, the epsilon with nine digits.
TEST(JobCheckpointTest, GptModelFieldsAreTheManifestsModelLine) {
  GptConfig model;
  model.vocab = 301;
  model.hidden = 320;
  model.heads = 5;
  model.layers = 6;
  model.seq_len = 48;
  const ModelFields fields = GptModelFields(model);
  const ModelFields want = {{"vocab", "301"},  {"seq_len", "48"}, {"hidden", "320"},
                            {"heads", "5"},    {"layers", "6"},   {"ffn", "1280"},
                            {"layer_norm_eps", "9.99999975e-06"}};
  EXPECT_EQ(fields, want);
}

// A column-split parameter is a run per row of each tp shard; a replicated one is
// saved by tp rank 0 alone; the runs are models/gpt's ShardRuns.
TEST(JobCheckpointTest, TensorsCarryEachShardsRuns) {
  GptParameter w;
  w.name = "w";
  w.full_shape = {3, 4};
  w.shape = {3, 2};
  w.split = TpSplit::kColumns;
  GptParameter g;
  g.name = "g";
  g.full_shape = {4};
  g.shape = {4};
  for (int rank = 0; rank < 2; ++rank) {
    LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<CheckpointTensor> tensors,
                              CheckpointTensorsOf({w, g}, 2, rank));
    ASSERT_EQ(tensors.size(), 2u);
    EXPECT_EQ(tensors[0].name, "w");
    EXPECT_EQ(tensors[0].full_shape, (std::vector<int64_t>{3, 4}));
    ASSERT_EQ(tensors[0].runs.size(), 3u);
    for (int64_t row = 0; row < 3; ++row) {
      EXPECT_EQ(tensors[0].runs[static_cast<size_t>(row)].full_offset, row * 4 + rank * 2);
      EXPECT_EQ(tensors[0].runs[static_cast<size_t>(row)].length, 2);
    }
    EXPECT_TRUE(tensors[0].saved_here);
    EXPECT_EQ(tensors[1].saved_here, rank == 0);
    ASSERT_EQ(tensors[1].runs.size(), 1u);
    EXPECT_EQ(tensors[1].runs[0].length, 4);
  }
}

TEST(JobCheckpointTest, MetaNamesTheMeshThatSaved) {
  TrainJobOptions options;
  const CheckpointMeta meta = MetaOf(options, 12);
  EXPECT_EQ(meta.step, 12);
  EXPECT_EQ(meta.saved_by, "dp=2 tp=2 pp=2 cp=1 schedule=1f1b zero=3 dtype=f32 offload=cpu");
  EXPECT_EQ(meta.model, GptModelFields(options.model));
}

}  // namespace
}  // namespace loom

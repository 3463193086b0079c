#include "pipeline/stage_layout.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(StageLayoutTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout loop, StageLayout::Loop(4, 2));
  EXPECT_EQ(loop.num_stages(), 8);
  EXPECT_EQ(loop.RankOf(5), 1);
  EXPECT_THAT(loop.StagesOf(1), ElementsAre(1, 5));
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout v, StageLayout::VShape(4));
  EXPECT_THAT(v.StagesOf(1), ElementsAre(1, 6));
  EXPECT_EQ(v.RankOf(7), 0);
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout uneven, StageLayout::Loop(4)->WithLayers(30, {7, 8, 8, 7}));
  EXPECT_EQ(uneven.FirstLayer(2), 15);
  EXPECT_THAT(StageLayout::Loop(4)->WithLayers(30, {8, 8, 8, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers_per_stage (8,8,8,8) covers 32 layers, the model has 30")));
}

TEST(StageLayoutTest, DefaultIsOneRankOneStage) {
  const StageLayout layout;
  EXPECT_EQ(layout.num_ranks(), 1);
  EXPECT_EQ(layout.num_stages(), 1);
  EXPECT_EQ(layout.RankOf(0), 0);
  EXPECT_EQ(layout, *StageLayout::Loop(1));
  EXPECT_EQ(layout.ToString(), "loop p=1 v=1");
}

// Loop: stage s on rank s mod p, for every p and v up to 8.
TEST(StageLayoutTest, LoopPlacesStageModuloRanks) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t v = 1; v <= 8; ++v) {
      LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::Loop(p, v));
      EXPECT_EQ(layout.placement(), StagePlacement::kLoop);
      EXPECT_EQ(layout.num_stages(), p * v);
      std::vector<int> seen(p * v, 0);
      for (int64_t s = 0; s < p * v; ++s) EXPECT_EQ(layout.RankOf(s), s % p);
      for (int64_t r = 0; r < p; ++r) {
        const std::vector<int64_t> stages = layout.StagesOf(r);
        ASSERT_EQ(static_cast<int64_t>(stages.size()), v);
        for (int64_t c = 0; c < v; ++c) {
          EXPECT_EQ(stages[c], c * p + r);
          ++seen[stages[c]];
        }
      }
      for (int count : seen) EXPECT_EQ(count, 1);
    }
  }
}

// V-shape: rank r holds r and 2p-1-r; the turn (stages p-1, p) stays on rank p-1.
TEST(StageLayoutTest, VShapeFoldsTheStages) {
  for (int64_t p = 1; p <= 8; ++p) {
    LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::VShape(p));
    EXPECT_EQ(layout.placement(), StagePlacement::kVShape);
    EXPECT_EQ(layout.num_stages(), 2 * p);
    EXPECT_EQ(layout.stages_per_rank(), 2);
    for (int64_t r = 0; r < p; ++r) {
      EXPECT_THAT(layout.StagesOf(r), ElementsAre(r, 2 * p - 1 - r));
      EXPECT_EQ(layout.RankOf(r), r);
      EXPECT_EQ(layout.RankOf(2 * p - 1 - r), r);
    }
    EXPECT_EQ(layout.RankOf(p - 1), layout.RankOf(p));
  }
  EXPECT_EQ(StageLayout::VShape(4)->ToString(), "v-shape p=4");
}

TEST(StageLayoutTest, OutOfRangeQueries) {
  const StageLayout layout = *StageLayout::Loop(2, 2);
  EXPECT_EQ(layout.RankOf(-1), -1);
  EXPECT_EQ(layout.RankOf(4), -1);
  EXPECT_THAT(layout.StagesOf(2), ElementsAre());
  EXPECT_THAT(layout.StagesOf(-1), ElementsAre());
}

TEST(StageLayoutTest, RejectsBadCounts) {
  EXPECT_THAT(StageLayout::Loop(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("num_ranks=0, stages_per_rank=1")));
  EXPECT_THAT(StageLayout::Loop(4, 0), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("num_ranks=4, stages_per_rank=0")));
  EXPECT_THAT(
      StageLayout::Loop(int64_t{1} << 12, int64_t{1} << 12),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("num_ranks=4096 x stages_per_rank=4096 is more than 1048576 stages")));
  EXPECT_THAT(StageLayout::VShape(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got num_ranks=0")));
}

TEST(StageLayoutTest, UnevenLayers) {
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout,
                            StageLayout::Loop(2, 2)->WithLayers(10, {2, 3, 4, 1}));
  EXPECT_TRUE(layout.has_layers());
  EXPECT_EQ(layout.num_layers(), 10);
  EXPECT_THAT(layout.layers_per_stage(), ElementsAre(2, 3, 4, 1));
  EXPECT_EQ(layout.FirstLayer(0), 0);
  EXPECT_EQ(layout.FirstLayer(1), 2);
  EXPECT_EQ(layout.FirstLayer(3), 9);
  EXPECT_EQ(layout.ToString(), "loop p=2 v=2 layers=2,3,4,1");
  // Stages without layers are allowed (an embedding-only first stage, say).
  EXPECT_THAT(StageLayout::Loop(2)->WithLayers(3, {0, 3}), IsOk());
  EXPECT_FALSE(StageLayout::Loop(2)->has_layers());
}

TEST(StageLayoutTest, LayoutMustCoverTheModelExactly) {
  const StageLayout layout = *StageLayout::Loop(4);
  EXPECT_THAT(layout.WithLayers(30, {7, 8, 8}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers_per_stage has 3 entries (7,8,8), the layout loop p=4 v=1 "
                                 "has 4 stages")));
  EXPECT_THAT(layout.WithLayers(30, {7, 8, 8, 6}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers_per_stage (7,8,8,6) covers 29 layers, the model has 30")));
  EXPECT_THAT(layout.WithLayers(30, {7, -1, 8, 16}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("layers_per_stage[1]=-1 is negative")));
  EXPECT_THAT(layout.WithLayers(-1, {0, 0, 0, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_layers=-1 is negative")));
  EXPECT_THAT(layout.WithLayers(10, {int64_t{1} << 62, int64_t{1} << 62, int64_t{1} << 62, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("covers more than 2^63 layers, the model has 10")));
}

TEST(StageLayoutTest, EvenLayers) {
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::VShape(2)->WithEvenLayers(8));
  EXPECT_THAT(layout.layers_per_stage(), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(StageLayout::Loop(4)->WithEvenLayers(30),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_layers=30 does not split evenly over the 4 stages of loop "
                                 "p=4 v=1")));
}

// Balanced layers: the even split where it divides, the inner stages first
// otherwise, every stage at least one layer, always adding up to the model.
TEST(StageLayoutTest, BalancedLayers) {
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::Loop(4)->WithBalancedLayers(30));
  EXPECT_THAT(layout.layers_per_stage(), ElementsAre(7, 8, 8, 7));
  LOOM_ASSERT_OK_AND_ASSIGN(layout, StageLayout::Loop(2)->WithBalancedLayers(5));
  EXPECT_THAT(layout.layers_per_stage(), ElementsAre(3, 2));
  LOOM_ASSERT_OK_AND_ASSIGN(layout, StageLayout::VShape(2)->WithBalancedLayers(8));
  EXPECT_THAT(layout.layers_per_stage(), ElementsAre(2, 2, 2, 2));
  EXPECT_THAT(BalancedLayerCounts(126, 16), ElementsAre(7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                                                        8, 8, 7));
  for (int64_t stages = 1; stages <= 9; ++stages) {
    for (int64_t layers = stages; layers <= 40; ++layers) {
      const std::vector<int64_t> counts = BalancedLayerCounts(layers, stages);
      int64_t total = 0, most = 0, least = layers;
      for (const int64_t n : counts) {
        total += n;
        most = std::max(most, n);
        least = std::min(least, n);
      }
      EXPECT_EQ(total, layers) << layers << " over " << stages;
      EXPECT_LE(most - least, 1) << layers << " over " << stages;
      EXPECT_GE(least, 1) << layers << " over " << stages;
    }
  }
  EXPECT_THAT(StageLayout::Loop(4)->WithBalancedLayers(3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_layers=3 is fewer than the 4 stages of loop p=4 v=1")));
}

}  // namespace
}  // namespace loom

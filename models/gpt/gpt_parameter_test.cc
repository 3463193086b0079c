#include "models/gpt/gpt_parameter.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

GptParameter Meta(std::vector<int64_t> full_shape, TpSplit split, int64_t parts) {
  GptParameter p;
  p.name = "w";
  p.full_shape = std::move(full_shape);
  p.split = split;
  p.parts = parts;
  return p;
}

// The shards' runs cover the whole tensor exactly once, and cut the same elements,
// in the same order, as ShardOf: what a mesh-independent checkpoint relies on.
TEST(ShardRunsTest, RunsTileTheTensorAndMatchShardOf) {
  const GptParameter cases[] = {Meta({24, 8}, TpSplit::kRows, 3),     // attention [Q; K; V]
                                Meta({8, 12}, TpSplit::kColumns, 1),  // MLP up-projection
                                Meta({8, 30}, TpSplit::kColumns, 3),  // parts with uneven tp shares
                                Meta({16}, TpSplit::kRows, 1),        // a bias
                                Meta({8}, TpSplit::kReplicated, 1)};  // layer norm
  for (const GptParameter& p : cases) {
    const int64_t n =
        p.full_shape.size() == 2 ? p.full_shape[0] * p.full_shape[1] : p.full_shape[0];
    std::vector<float> full(static_cast<size_t>(n));
    std::iota(full.begin(), full.end(), 0.0f);
    for (int tp : {1, 2, 3, 4}) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (int rank = 0; rank < tp; ++rank) {
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<ShardRun> runs, ShardRuns(p, tp, rank));
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> shard, ShardOf(p, full, tp, rank));
        std::vector<float> by_runs;
        for (const ShardRun& run : runs) {
          ASSERT_GE(run.full_offset, 0);
          ASSERT_LE(run.full_offset + run.length, n);
          for (int64_t i = run.full_offset; i < run.full_offset + run.length; ++i) {
            ++seen[static_cast<size_t>(i)];
            by_runs.push_back(full[static_cast<size_t>(i)]);
          }
        }
        EXPECT_EQ(by_runs, shard) << p.full_shape[0] << " tp " << tp << " rank " << rank;
      }
      const int copies = p.split == TpSplit::kReplicated ? tp : 1;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[static_cast<size_t>(i)], copies) << "element " << i << " tp " << tp;
      }
    }
  }
}

TEST(ShardRunsTest, BadRankOrShapeIsInvalidArgument) {
  EXPECT_THAT(ShardRuns(Meta({8, 12}, TpSplit::kColumns, 1), 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 is outside tp 2")));
  EXPECT_THAT(ShardRuns(Meta({8, 10}, TpSplit::kColumns, 3), 2, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("in 3 parts")));
}

}  // namespace
}  // namespace loom

#include "tensor_parallel/placement.h"

#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<int64_t> Lengths(int64_t size, int shards, ShardRule rule) {
  std::vector<int64_t> out;
  for (int i = 0; i < shards; ++i) out.push_back(ShardExtentOf(size, shards, i, rule).length);
  return out;
}

TEST(ShardExtentTest, DocumentedExamples) {
  EXPECT_THAT(Lengths(10, 4, ShardRule::kChunk), ElementsAre(3, 3, 3, 1));
  EXPECT_THAT(Lengths(5, 4, ShardRule::kChunk), ElementsAre(2, 2, 1, 0));
  EXPECT_THAT(Lengths(2, 4, ShardRule::kChunk), ElementsAre(1, 1, 0, 0));
  EXPECT_THAT(Lengths(10, 4, ShardRule::kBalanced), ElementsAre(3, 3, 2, 2));
  EXPECT_THAT(Lengths(2, 4, ShardRule::kBalanced), ElementsAre(1, 1, 0, 0));
  EXPECT_EQ(ShardExtentOf(10, 4, 3, ShardRule::kChunk), (ShardExtent{9, 1}));
  EXPECT_EQ(ShardExtentOf(10, 4, 3, ShardRule::kBalanced), (ShardExtent{8, 2}));
}

// Every size up to 40 and shard count up to 9: pieces are contiguous, in order, cover
// [0, size) exactly; chunk pieces are ceil(size/k) but for the tail, as torch.chunk;
// balanced pieces differ by at most one, larger first.
TEST(ShardExtentTest, ExhaustiveSmallCases) {
  for (int64_t size = 0; size <= 40; ++size) {
    for (int k = 1; k <= 9; ++k) {
      for (ShardRule rule : {ShardRule::kChunk, ShardRule::kBalanced}) {
        int64_t next = 0, smallest = size, largest = 0;
        const int64_t chunk = (size + k - 1) / k;
        for (int i = 0; i < k; ++i) {
          const ShardExtent e = ShardExtentOf(size, k, i, rule);
          ASSERT_EQ(e.offset, next) << size << " " << k << " " << i;
          ASSERT_GE(e.length, 0);
          next += e.length;
          smallest = std::min(smallest, e.length);
          largest = std::max(largest, e.length);
          if (rule == ShardRule::kChunk) {
            // torch.chunk: pieces of `chunk` while elements remain.
            ASSERT_EQ(e.length, std::max<int64_t>(0, std::min(chunk, size - chunk * i)))
                << size << " " << k << " " << i;
          } else if (i > 0) {
            ASSERT_LE(e.length, ShardExtentOf(size, k, i - 1, rule).length);
          }
        }
        ASSERT_EQ(next, size) << size << " " << k;
        if (rule == ShardRule::kBalanced) {
          ASSERT_LE(largest - smallest, 1) << size << " " << k;
        }
      }
    }
  }
}

TEST(ShardExtentTest, ValidateNamesTheValues) {
  LOOM_EXPECT_OK(ValidateShardArgs(0, 1, 0));
  EXPECT_THAT(ValidateShardArgs(5, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard 0 of 0 of a dimension of size 5")));
  EXPECT_THAT(ValidateShardArgs(5, 2, 2), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("shard 2 of 2")));
  EXPECT_THAT(ValidateShardArgs(-1, 2, 0), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("size -1")));
}

TEST(PlacementTest, StringsRoundTrip) {
  const std::vector<Placement> p = {Placement::Replicate(), Placement::Shard(2),
                                    Placement::Partial(ReduceOp::kMax), Placement::Partial()};
  EXPECT_EQ(PlacementsString(p), "[R, S(2), P(max), P(sum)]");
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Placement> back, ParsePlacements(PlacementsString(p)));
  EXPECT_EQ(back, p);
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Placement> plain, ParsePlacements("P(avg),S(0)"));
  EXPECT_THAT(plain, ElementsAre(Placement::Partial(ReduceOp::kAvg), Placement::Shard(0)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<Placement> none, ParsePlacements("[]"));
  EXPECT_TRUE(none.empty());
  EXPECT_NE(Placement::Partial(ReduceOp::kSum), Placement::Partial(ReduceOp::kMax));
  EXPECT_NE(Placement::Shard(0), Placement::Shard(1));
  EXPECT_NE(Placement::Shard(0), Placement::Replicate());
}

TEST(PlacementTest, ParseErrorsNameTheItem) {
  EXPECT_THAT(ParsePlacements("R,S(x)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("placement 'S(x)'")));
  EXPECT_THAT(ParsePlacements("P(mean)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("placement 'P(mean)'")));
  EXPECT_THAT(ParsePlacements("S(-1)"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("placement 'S(-1)'")));
  EXPECT_THAT(ParsePlacements("[R"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no closing")));
}

TEST(PlacementTest, ValidateAgainstTensorAndMesh) {
  LOOM_EXPECT_OK(ValidatePlacements({Placement::Shard(1), Placement::Replicate()}, 2, 2));
  EXPECT_THAT(ValidatePlacements({Placement::Shard(0)}, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("have 1 entries; the mesh has 2")));
  EXPECT_THAT(ValidatePlacements({Placement::Replicate(), Placement::Shard(2)}, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("S(2) on mesh dim 1 shards dim 2 of a tensor of rank 2")));
}

}  // namespace
}  // namespace loom

#include "collectives/collective_kind.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(CollectiveKindTest, NamesRoundTrip) {
  for (CollectiveKind kind : AllCollectiveKinds()) {
    EXPECT_THAT(ParseCollectiveKind(CollectiveKindName(kind)), IsOkAndHolds(kind));
  }
  EXPECT_EQ(CollectiveKindName(CollectiveKind::kAllReduce), "all_reduce");
  EXPECT_THAT(ParseCollectiveKind("allreduce"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown collective \"allreduce\"; expected one of all_reduce, ")));
}

TEST(AlgorithmTest, NamesRoundTripWithAliases) {
  for (Algorithm algorithm : AllAlgorithms()) {
    EXPECT_THAT(ParseAlgorithm(AlgorithmName(algorithm)), IsOkAndHolds(algorithm));
  }
  EXPECT_THAT(ParseAlgorithm("auto"), IsOkAndHolds(Algorithm::kAuto));
  EXPECT_THAT(ParseAlgorithm("tree"), IsOkAndHolds(Algorithm::kBinomialTree));
  EXPECT_THAT(ParseAlgorithm("dbtree"), IsOkAndHolds(Algorithm::kDoubleBinaryTree));
  EXPECT_THAT(ParseAlgorithm("rabenseifner"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown algorithm \"rabenseifner\"; expected one of auto, ring")));
}

}  // namespace
}  // namespace loom

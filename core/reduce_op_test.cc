#include "core/reduce_op.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ReduceOpTest, NamesRoundTrip) {
  EXPECT_EQ(AllReduceOps().size(), 5u);
  for (ReduceOp op : AllReduceOps()) {
    EXPECT_THAT(ParseReduceOp(ReduceOpName(op)), IsOkAndHolds(op));
  }
  EXPECT_EQ(ReduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_THAT(ParseReduceOp("MAX"), IsOkAndHolds(ReduceOp::kMax));
}

TEST(ReduceOpTest, RejectsUnknownNames) {
  EXPECT_THAT(ParseReduceOp("mean"), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("unknown reduce op \"mean\"")));
}

}  // namespace
}  // namespace loom

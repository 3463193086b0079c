#include "collectives/direct.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/internal/algorithm_testing.h"
#include "collectives/internal/call_context.h"
#include "collectives/transport/inproc/inproc_harness.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace collectives_internal {
namespace {

using ::testing::HasSubstr;

AlgorithmUnderTest Direct() {
  AlgorithmUnderTest direct;
  direct.all_reduce = DirectAllReduce;
  direct.reduce_scatter = DirectReduceScatter;
  direct.all_gather = DirectAllGather;
  direct.broadcast = DirectBroadcast;
  direct.reduce = DirectReduce;
  direct.gather = DirectGather;
  direct.scatter = DirectScatter;
  direct.barrier = DirectBarrier;
  direct.reduce_scatter_blocks = DirectReduceScatterBlocks;
  direct.all_gather_blocks = DirectAllGatherBlocks;
  // Deterministic mode's promise: the rank-order fold, and the other blocks kept.
  direct.rank_order_bitwise = true;
  direct.blocks_leave_the_rest = true;
  return direct;
}

// The shared matrix, where i32 max leaves out the largest count (it only repeats
// f32's data movement and costs the most under ThreadSanitizer), and every dtype x op.
std::vector<AlgorithmCase> Cases() {
  MatrixOptions matrix;
  matrix.largest_count_first_type_only = true;
  DTypeOpOptions types;
  types.worlds = {3, 5};
  types.counts = {3, 1000};
  return Concat({Matrix(Direct(), matrix), DTypeOpMatrix(Direct(), types)});
}

class DirectMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(DirectMatrixTest, MatchesTheReference) { LOOM_EXPECT_OK(CheckCase(Direct(), GetParam())); }

INSTANTIATE_TEST_SUITE_P(Shared, DirectMatrixTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(DirectTest, WrongSizesAreInvalidArgument) {
  std::vector<float> four(4), three(3);
  const auto body = [&](const CallContext& ctx) -> absl::Status {
    CollectiveArgs args;
    args.count = 4;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(four));
    args.output = BufferView::Of(absl::MakeSpan(three));
    EXPECT_THAT(DirectAllReduce(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("direct all_reduce on rank 0 of 1, count 4: output has 3 "
                                   "elements, expected 4")));
    EXPECT_THAT(DirectBarrier(ctx, args), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("input has 4 elements, expected 0")));
    args.count = 3;
    EXPECT_THAT(DirectGather(ctx, args), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("input has 4 elements, expected 3")));
    args.root = -1;
    EXPECT_THAT(DirectScatter(ctx, args), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("root -1 is not a rank of 1")));
    std::vector<int32_t> ints(4);
    EXPECT_THAT(
        DirectReduceScatterBlocks(ctx, ReduceOp::kSum,
                                  ConstBufferView::Of(absl::MakeConstSpan(four)),
                                  BufferView::Of(absl::MakeSpan(ints))),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input has 4 f32, output 4 i32")));
    return absl::OkStatus();
  };
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), 1, body)));
}

TEST(DirectTest, RanksThatDisagreeOnTheCountFailAndReturn) {
  for (const absl::Status& status :
       RunInPlace(DirectAllReduce, CollectiveKind::kAllReduce, {4, 5, 4}, DType::kF32,
                  kDefaultChunkBytes, absl::Seconds(10))) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bytes")));
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

#include "collectives/halving_doubling.h"

#include <cstddef>
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

AlgorithmUnderTest HalvingDoubling() {
  AlgorithmUnderTest hd;
  hd.all_reduce = HalvingDoublingAllReduce;
  hd.reduce_scatter = HalvingDoublingReduceScatter;
  hd.all_gather = HalvingDoublingAllGather;
  return hd;
}

// The shared matrix on every world up to 8 (powers of two and not) and 16 (four
// halvings): its 65537-element all-reduces on 3, 5, 6 and 7 ranks take the radix
// step, the smaller ones the fold. And every dtype x op on a power of two, a
// non-power of two with one rank folded in and one with three, at a count that
// leaves uneven blocks. The first type runs in 4 KiB chunks in and out of place, so
// the pipelined middle exchange (the last halving and the first doubling as one)
// cuts each direction into its most chunks, of uneven sizes, with the input and the
// output apart as well as shared.
std::vector<AlgorithmCase> Cases() {
  MatrixOptions matrix;
  matrix.worlds = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  matrix.small_chunks = MatrixChunks::kFirstType;
  DTypeOpOptions types;
  types.worlds = {4, 5, 7};
  types.counts = {1001};
  types.both_placements = false;
  // Every dtype x op through the radix step as well (at least
  // kHalvingDoublingRadixBytes for every dtype) on 12 ranks; the matrix above has 6.
  DTypeOpOptions radix;
  radix.worlds = {12};  // blocks of 4 (two halvings, nearest first) around m = 3
  radix.counts = {kHalvingDoublingRadixBytes + 3};
  radix.both_placements = false;
  return Concat({Matrix(HalvingDoubling(), matrix), DTypeOpMatrix(HalvingDoubling(), types),
                 DTypeOpMatrix(HalvingDoubling(), radix)});
}

class HalvingDoublingMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(HalvingDoublingMatrixTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(HalvingDoubling(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Shared, HalvingDoublingMatrixTest, ::testing::ValuesIn(Cases()),
                         CaseName);

// Over long paths the middle exchange sends its halving chunks a window at a time
// (ChunksInFlight): all 8 chunks at once on the 4 ms path, 6 of 8 on the 100 us one,
// against 2 where nothing is measured (the matrix above).
INSTANTIATE_TEST_SUITE_P(LongPath, HalvingDoublingMatrixTest,
                         ::testing::ValuesIn(LongPathCases(Matrix(HalvingDoubling()))), CaseName);

// A Scratch that outlives calls of different sizes and kinds, as in a communicator.
TEST(HalvingDoublingTest, CallsOfDifferentSizesAndKindsShareScratchAndTags) {
  const int world = 6;
  auto harness = MakeInprocHarness();
  const RankInputs big = MakeInputs(DType::kI64, ReduceOp::kSum, world, world * 999, 1);
  const RankInputs small = MakeInputs(DType::kI64, ReduceOp::kSum, world, world * 2, 2);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*harness, world, [&](const CallContext& ctx) {
    for (const RankInputs* inputs : {&small, &big, &small}) {
      const size_t count = inputs->count / world;
      std::vector<std::byte> block(count * sizeof(int64_t)), all(inputs->bytes_per_rank());
      CollectiveArgs args;
      args.count = count;
      args.input = inputs->View(ctx.rank());
      args.output = MutableViewOf(block, DType::kI64);
      LOOM_RETURN_IF_ERROR(HalvingDoublingReduceScatter(ctx, args));
      LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, ctx.rank() * count, args.output));
      args.input = args.output;
      args.output = MutableViewOf(all, DType::kI64);
      LOOM_RETURN_IF_ERROR(HalvingDoublingAllGather(ctx, args));
      LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));
      args.count = inputs->count;
      args.input = inputs->View(ctx.rank());
      LOOM_RETURN_IF_ERROR(HalvingDoublingAllReduce(ctx, args));
      LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));
    }
    return absl::OkStatus();
  })));
}

TEST(HalvingDoublingTest, RejectsBadArgumentsNamingTheValues) {
  auto harness = MakeInprocHarness();
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, 3, [&](const CallContext& ctx) {
    std::vector<float> nine(9), three(3), two(2);
    std::vector<int8_t> bytes(3);
    CollectiveArgs args;
    args.count = 3;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(nine));
    args.output = BufferView::Of(absl::MakeSpan(two));
    EXPECT_THAT(HalvingDoublingReduceScatter(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("HalvingDoublingReduceScatter on rank ", ctx.rank(),
                                                " of ", ctx.size(),
                                                ", count 3: output has 2 elements, expected 3"))));
    args.output = BufferView::Of(absl::MakeSpan(bytes));
    EXPECT_THAT(HalvingDoublingReduceScatter(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input is f32 but output is i8")));
    // In place must mean the rank's own block, not any overlap.
    args.output = BufferView::Of(absl::MakeSpan(nine).subspan(1, 3));
    EXPECT_THAT(HalvingDoublingReduceScatter(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("at byte offset 4 but is not block ", ctx.rank()))));
    args.input = ConstBufferView::Of(absl::MakeConstSpan(three));
    args.output = BufferView::Of(absl::MakeSpan(three));
    EXPECT_THAT(HalvingDoublingAllGather(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("output has 3 elements, expected 9")));
    args.output = BufferView::Of(absl::MakeSpan(two));
    EXPECT_THAT(HalvingDoublingAllReduce(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("output has 2 elements, expected 3")));
    return absl::OkStatus();
  })));
}

TEST(HalvingDoublingTest, APeerThatNeverCallsIsAnErrorNotAHang) {
  const std::vector<absl::Status> statuses = RunInPlace(
      HalvingDoublingAllReduce, CollectiveKind::kAllReduce, {100, 100, 100, 100, kNeverCalls, 100},
      DType::kF64, kDefaultChunkBytes, absl::Milliseconds(500));
  for (int r : {0, 1, 2, 3, 5}) EXPECT_FALSE(statuses[r].ok()) << r;
  EXPECT_THAT(statuses[5], StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

#include "collectives/binomial_tree.h"

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

AlgorithmUnderTest BinomialTree() {
  AlgorithmUnderTest tree;
  tree.all_reduce = BinomialAllReduce;
  tree.broadcast = BinomialBroadcast;
  tree.reduce = BinomialReduce;
  tree.gather = BinomialGather;
  tree.scatter = BinomialScatter;
  tree.barrier = BinomialBarrier;
  return tree;
}

// The shared matrix on every world up to 8 (the trees of 6 and 7 ranks are
// incomplete) and 16, roots 0, 1 (a subtree of its own) and n-1 (rotated ranks), and
// every dtype x op in 4 KiB chunks. Its 65537-element all-reduces on 3 ranks and more
// run on two trees, and so does every dtype x op at kBinomialTwoTreeBytes + 3
// elements on 5 ranks.
std::vector<AlgorithmCase> Cases() {
  MatrixOptions matrix;
  matrix.worlds = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  matrix.roots = MatrixRoots::kFirstSecondAndLast;
  DTypeOpOptions types;
  types.worlds = {3, 8};
  types.counts = {1, 1000};
  types.both_placements = false;
  types.chunk_bytes = kSmallChunkBytes;
  DTypeOpOptions two_trees;
  two_trees.worlds = {5};
  two_trees.counts = {kBinomialTwoTreeBytes + 3};
  two_trees.both_placements = false;
  return Concat({Matrix(BinomialTree(), matrix), DTypeOpMatrix(BinomialTree(), types),
                 DTypeOpMatrix(BinomialTree(), two_trees)});
}

class BinomialTreeMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(BinomialTreeMatrixTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(BinomialTree(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Shared, BinomialTreeMatrixTest, ::testing::ValuesIn(Cases()), CaseName);

// Over a path every rank knows alike (CallContext::agreed_path: a 4 ms round trip at
// 250 MB/s, and a shorter one) the broadcast, the reduce and the all-reduce's passes
// keep up to kMaxChunksInFlight chunks in flight: on 2..8 and 16 ranks, one tree and
// two or more, in chunks of 4 KiB so that 65537 elements are many windows long.
std::vector<AlgorithmCase> TreeLongPathCases() { return LongPathCases(Matrix(BinomialTree())); }

class BinomialTreeLongPathTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(BinomialTreeLongPathTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(BinomialTree(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(LongPath, BinomialTreeLongPathTest,
                         ::testing::ValuesIn(TreeLongPathCases()), CaseName);

TEST(BinomialTreeTest, TheAgreedPathSetsTheWindow) {
  CallContext ctx;
  EXPECT_EQ(AgreedChunksInFlight(ctx, 4096, 2), 2);  // nothing known
  ctx.agreed_path = {absl::Microseconds(100), 1e8};   // 10,000 bytes in flight
  // 2 x 10,000 bytes over 4 KiB chunks, rounded up, and one more.
  EXPECT_EQ(AgreedChunksInFlight(ctx, 4096, 2), 6);
  EXPECT_EQ(AgreedChunksInFlight(ctx, 1 << 20, 2), 2);
  EXPECT_EQ(AgreedChunksInFlight(ctx, 16, 2), kMaxChunksInFlight);
  // The trees' window for a call: never more than its chunks, never below 2.
  ctx.chunk_bytes = 4096;
  EXPECT_EQ(AgreedWindow(ctx, 1024 * 100, DType::kF32), 6);  // 100 chunks of 4 KiB
  EXPECT_EQ(AgreedWindow(ctx, 1024 * 3, DType::kF32), 3);    // 3 chunks
  EXPECT_EQ(AgreedWindow(ctx, 10, DType::kF32), 2);          // 1 chunk
  ctx.agreed_path = {};
  EXPECT_EQ(AgreedWindow(ctx, 1024 * 100, DType::kF32), 2);  // nothing known
}

// A Scratch that outlives calls of different sizes and kinds, as in a communicator.
TEST(BinomialTreeTest, CallsOfDifferentSizesShareScratchAndTags) {
  const int world = 6;
  auto harness = MakeInprocHarness();
  const RankInputs big = MakeInputs(DType::kF64, ReduceOp::kSum, world, 5000, 1);
  const RankInputs small = MakeInputs(DType::kF64, ReduceOp::kSum, world, 7, 2);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, world,
      [&](const CallContext& ctx) {
        for (const RankInputs* inputs : {&big, &small, &big}) {
          std::vector<std::byte> out(inputs->bytes_per_rank());
          CollectiveArgs args;
          args.kind = CollectiveKind::kReduce;
          args.root = 4;
          args.count = inputs->count;
          args.input = inputs->View(ctx.rank());
          args.output = MutableViewOf(out, DType::kF64);
          LOOM_RETURN_IF_ERROR(BinomialReduce(ctx, args));
          if (ctx.rank() == 4) {
            LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));
          }
          args.kind = CollectiveKind::kAllReduce;
          LOOM_RETURN_IF_ERROR(BinomialAllReduce(ctx, args));
          LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));
        }
        return absl::OkStatus();
      },
      /*chunk_bytes=*/1024)));
}

TEST(BinomialTreeTest, RejectsBadArgumentsNamingTheValues) {
  auto harness = MakeInprocHarness();
  std::vector<float> in(4), out(3), big(12);
  const ConstBufferView input = ConstBufferView::Of(absl::MakeConstSpan(in));
  const BufferView output = BufferView::Of(absl::MakeSpan(out));
  const std::vector<absl::Status> statuses =
      RunAlgorithmRanks(*harness, 3, [&](const CallContext& ctx) -> absl::Status {
        CollectiveArgs args;
        args.count = 4;
        args.input = input;
        args.output = output;
        args.root = 3;
        EXPECT_THAT(BinomialBroadcast(ctx, args),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("BinomialBroadcast: root 3 is not a rank of 3")));
        args.root = 0;
        EXPECT_THAT(BinomialAllReduce(ctx, args),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("output has 3 elements, expected 4")));
        std::vector<int32_t> ints(4);
        args.output = BufferView::Of(absl::MakeSpan(ints));
        EXPECT_THAT(BinomialAllReduce(ctx, args),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr("input is f32 but output is i32")));
        if (ctx.rank() == 0) {
          std::vector<float> gathered(12);
          args.output = BufferView::Of(absl::MakeSpan(gathered));
          args.input = Slice(ConstBufferView(args.output), 2, 4);
          EXPECT_THAT(BinomialGather(ctx, args),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("overlaps the 12-element one at byte offset 8 but is not block 0")));
          args.input = input;
          args.output = BufferView::Of(absl::MakeSpan(big).subspan(1));
          EXPECT_THAT(BinomialGather(ctx, args),
                      StatusIs(absl::StatusCode::kInvalidArgument,
                               HasSubstr("output has 11 elements, expected 12")));
        }
        return absl::OkStatus();
      });
  LOOM_EXPECT_OK(AllOk(statuses));
}

TEST(BinomialTreeTest, MismatchedCountsAcrossRanksFailInsteadOfHanging) {
  // Rank 3 believes in one more element than the others: its message to rank 2 has
  // the wrong size (both sides see it); the others learn of the failure by their
  // deadline at the latest.
  const std::vector<absl::Status> statuses =
      RunInPlace(BinomialAllReduce, CollectiveKind::kAllReduce, {8, 8, 8, 9}, DType::kI64,
                 kDefaultChunkBytes, absl::Seconds(2));
  EXPECT_THAT(statuses[3], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("sent 72 bytes with tag 0 to rank 2")));
  for (const absl::Status& status : statuses) EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

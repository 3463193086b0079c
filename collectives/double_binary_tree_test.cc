#include "collectives/double_binary_tree.h"

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

int Children(const BinaryTreeLinks& links) {
  return (links.children[0] >= 0 ? 1 : 0) + (links.children[1] >= 0 ? 1 : 0);
}

// The two trees are consistent spanning binary trees of depth <= ceil(log2 n) with
// the documented roots, and together give no rank more than two children: the load
// balance that lets both halves move at full bandwidth (Sanders, Speck, Träff 2009).
TEST(DoubleBinaryTreeLinksTest, TwoSpanningTreesWithAtMostTwoChildrenPerRankInAll) {
  for (int n = 1; n <= 130; ++n) {
    int log2n = 0;
    while ((1 << log2n) < n) ++log2n;
    for (int tree : {0, 1}) {
      const int want_root = tree == 0 || n == 1 ? 0 : n % 2 == 0 ? n - 1 : 1;
      for (int r = 0; r < n; ++r) {
        const BinaryTreeLinks links = DoubleBinaryTreeLinks(n, r, tree);
        EXPECT_EQ(links.parent < 0, r == want_root) << "n " << n << " tree " << tree << " rank " << r;
        if (links.children[0] < 0) {
          EXPECT_LT(links.children[1], 0);
        }
        for (int child : links.children) {
          if (child < 0) continue;
          ASSERT_LT(child, n);
          EXPECT_EQ(DoubleBinaryTreeLinks(n, child, tree).parent, r)
              << "n " << n << " tree " << tree << " child " << child << " of " << r;
        }
        int depth = 0;
        for (int up = r; (up = DoubleBinaryTreeLinks(n, up, tree).parent) >= 0;) {
          ASSERT_LE(++depth, log2n) << "n " << n << " tree " << tree << " rank " << r;
        }
      }
    }
    for (int r = 0; r < n; ++r) {
      const int in_0 = Children(DoubleBinaryTreeLinks(n, r, 0));
      const int in_1 = Children(DoubleBinaryTreeLinks(n, r, 1));
      EXPECT_LE(in_0 + in_1, 2) << "n " << n << " rank " << r;
      // Mirrored (even n): interior in one tree, a leaf in the other. Shifted (odd
      // n): rank 0, the root of tree 0 with its single child, is the one exception.
      if (n % 2 == 0 || r != 0) {
        EXPECT_TRUE(in_0 == 0 || in_1 == 0) << "n " << n << " rank " << r;
      }
    }
  }
  const BinaryTreeLinks two = DoubleBinaryTreeLinks(4, 2, 0);
  EXPECT_EQ(two.parent, 0);
  EXPECT_EQ(two.children[0], 1);
  EXPECT_EQ(two.children[1], 3);
  EXPECT_EQ(DoubleBinaryTreeLinks(4, 2, 1).parent, 1);
  EXPECT_EQ(DoubleBinaryTreeLinks(4, 9, 0).parent, -1);
}

AlgorithmUnderTest DoubleBinaryTree() {
  AlgorithmUnderTest trees;
  trees.all_reduce = DoubleBinaryTreeAllReduce;
  return trees;
}

// The shared matrix on every world up to 8 (mirrored and shifted trees, complete or
// not) and 16, and every dtype x op with 64-byte chunks, so that count 1000 runs in
// dozens of rounds.
std::vector<AlgorithmCase> Cases() {
  MatrixOptions matrix;
  matrix.worlds = {1, 2, 3, 4, 5, 6, 7, 8, 16};
  DTypeOpOptions types;
  types.worlds = {3, 6, 16};
  types.counts = {1, 1000};
  types.both_placements = false;
  types.chunk_bytes = 64;
  return Concat({Matrix(DoubleBinaryTree(), matrix), DTypeOpMatrix(DoubleBinaryTree(), types)});
}

class DoubleBinaryTreeMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(DoubleBinaryTreeMatrixTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(DoubleBinaryTree(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Shared, DoubleBinaryTreeMatrixTest, ::testing::ValuesIn(Cases()),
                         CaseName);

// Over a path every rank knows alike (CallContext::agreed_path) the trees run with a
// lag of w - 1 rounds a level for a window of w chunks (5 and 31 rounds here), on
// 2..8 and 16 ranks, in 4 KiB chunks so that 65537 elements are many windows long.
class DoubleBinaryTreeLongPathTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(DoubleBinaryTreeLongPathTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(DoubleBinaryTree(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(LongPath, DoubleBinaryTreeLongPathTest,
                         ::testing::ValuesIn(LongPathCases(Matrix(DoubleBinaryTree()))),
                         CaseName);

// A Scratch that outlives calls of different sizes, as in a communicator, and one
// chunk per element (the most rounds a call can have).
TEST(DoubleBinaryTreeTest, CallsOfDifferentSizesShareScratchAndTags) {
  const int world = 7;
  auto harness = MakeInprocHarness();
  const RankInputs big = MakeInputs(DType::kBF16, ReduceOp::kSum, world, 3001, 1);
  const RankInputs small = MakeInputs(DType::kBF16, ReduceOp::kSum, world, 5, 2);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, world,
      [&](const CallContext& ctx) {
        for (const RankInputs* inputs : {&small, &big, &small}) {
          std::vector<std::byte> out(inputs->bytes_per_rank());
          CollectiveArgs args;
          args.count = inputs->count;
          args.input = inputs->View(ctx.rank());
          args.output = MutableViewOf(out, DType::kBF16);
          LOOM_RETURN_IF_ERROR(DoubleBinaryTreeAllReduce(ctx, args));
          LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));
        }
        return absl::OkStatus();
      },
      /*chunk_bytes=*/1)));
}

TEST(DoubleBinaryTreeTest, RejectsBadArgumentsNamingTheValues) {
  auto harness = MakeInprocHarness();
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, 2, [&](const CallContext& ctx) {
    std::vector<float> in(4), out(3);
    std::vector<double> doubles(4);
    CollectiveArgs args;
    args.count = 4;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(in));
    args.output = BufferView::Of(absl::MakeSpan(out));
    EXPECT_THAT(DoubleBinaryTreeAllReduce(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input has 4 elements and output 3, want count 4")));
    args.output = BufferView::Of(absl::MakeSpan(doubles));
    EXPECT_THAT(DoubleBinaryTreeAllReduce(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input is f32 but output is f64")));
    return absl::OkStatus();
  })));
}

TEST(DoubleBinaryTreeTest, APeerThatNeverCallsIsADeadlineNotAHang) {
  const std::vector<absl::Status> statuses = RunInPlace(
      DoubleBinaryTreeAllReduce, CollectiveKind::kAllReduce,
      {1000, 1000, kNeverCalls, 1000, 1000}, DType::kF32, /*chunk_bytes=*/256,
      absl::Milliseconds(500));
  for (int r : {0, 1, 3, 4}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_)) << r;
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

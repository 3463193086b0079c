#include "collectives/double_binary_tree.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
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

constexpr size_t kSmallChunk = size_t{4} << 10;
constexpr size_t kDefaultChunk = size_t{256} << 10;

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

struct Case {
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool in_place = false;
  size_t chunk_bytes = kDefaultChunk;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("w", c.world, "_n", c.count, "_", DTypeName(c.dtype), "_",
                      ReduceOpName(c.op), c.in_place ? "_inplace" : "_outofplace", "_chunk",
                      c.chunk_bytes);
}

std::vector<size_t> Counts(int world) {
  std::vector<size_t> counts = {0, 1, 3, static_cast<size_t>(world - 1), 1000, 65537};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

// Every world x count x place; in place runs with 4 KiB chunks so that large counts
// are pipelined through many rounds, out of place with the default chunk.
std::vector<Case> Matrix(DType dtype, ReduceOp op) {
  std::vector<Case> cases;
  for (int world : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
    for (size_t count : Counts(world)) {
      for (bool in_place : {false, true}) {
        Case c;
        c.world = world;
        c.count = count;
        c.dtype = dtype;
        c.op = op;
        c.in_place = in_place;
        c.chunk_bytes = in_place ? kSmallChunk : kDefaultChunk;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

// Every dtype x op on a few worlds and counts; 64-byte chunks make count 1000 run
// in dozens of rounds.
std::vector<Case> DTypeOpProduct() {
  std::vector<Case> cases;
  for (int world : {3, 6, 16}) {
    for (size_t count : {size_t{1}, size_t{1000}}) {
      for (DType dtype : AllDTypes()) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
          Case c;
          c.world = world;
          c.count = count;
          c.dtype = dtype;
          c.op = op;
          c.in_place = (cases.size() % 2) == 1;
          c.chunk_bytes = 64;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

std::vector<Case> Concat(std::vector<Case> a, const std::vector<Case>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class DoubleBinaryTreeAllReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(DoubleBinaryTreeAllReduceTest, EveryRankHoldsTheSameReduction) {
  const Case c = GetParam();
  const RankInputs inputs =
      MakeInputs(c.dtype, c.op, c.world, c.count, c.world * 7919 + c.count + 13 * int(c.dtype));
  // input[r] starts as a copy of the seeded input, so writing to an out-of-place
  // input shows; outputs start as garbage.
  std::vector<std::vector<std::byte>> input = inputs.data;
  std::vector<std::vector<std::byte>> output(
      c.world, std::vector<std::byte>(inputs.bytes_per_rank(), std::byte{0xCD}));
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.op = c.op;
        args.count = c.count;
        args.output = MutableViewOf(c.in_place ? input[r] : output[r], c.dtype);
        args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(input[r], c.dtype);
        LOOM_RETURN_IF_ERROR(DoubleBinaryTreeAllReduce(ctx, args));
        // Rank 0 against the inputs here; the others bit for bit against rank 0
        // below, which checks them as fully with one reference computation, not n.
        if (r != 0) return absl::OkStatus();
        return ExpectReduction(inputs, c.op, 0, args.output);
      },
      c.chunk_bytes)));
  const auto& results = c.in_place ? input : output;
  for (int r = 1; r < c.world; ++r) {
    LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(results[0], c.dtype), ViewOf(results[r], c.dtype),
                                   absl::StrCat("rank ", r, " against rank 0")));
  }
  if (!c.in_place) {
    for (int r = 0; r < c.world; ++r) {
      LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(r), ViewOf(input[r], c.dtype),
                                     absl::StrCat("rank ", r, "'s out-of-place input")));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(F32SumAndI32Max, DoubleBinaryTreeAllReduceTest,
                         ::testing::ValuesIn(Concat(Matrix(DType::kF32, ReduceOp::kSum),
                                                    Matrix(DType::kI32, ReduceOp::kMax))),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(DTypesAndOps, DoubleBinaryTreeAllReduceTest,
                         ::testing::ValuesIn(DTypeOpProduct()), CaseName);

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
  auto harness = MakeInprocHarness();
  const std::vector<absl::Status> statuses = RunAlgorithmRanks(
      *harness, 5,
      [&](const CallContext& ctx) {
        if (ctx.rank() == 2) return absl::OkStatus();  // never joins
        std::vector<float> data(1000, 1.0f);
        CollectiveArgs args;
        args.count = data.size();
        args.output = BufferView::Of(absl::MakeSpan(data));
        args.input = args.output;
        return DoubleBinaryTreeAllReduce(ctx, args);
      },
      /*chunk_bytes=*/256, absl::Milliseconds(500));
  for (int r : {0, 1, 3, 4}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_)) << r;
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

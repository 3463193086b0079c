#include "collectives/hierarchical.h"

#include <atomic>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/binomial_tree.h"
#include "collectives/direct.h"
#include "collectives/double_binary_tree.h"
#include "collectives/internal/algorithm_testing.h"
#include "collectives/transport/inproc/inproc_harness.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace collectives_internal {
namespace {

using ::testing::HasSubstr;

// Under a sanitizer 16 ranks run the first (dtype, op) only: 16 threads at 65537
// elements are the slowest cases there (8 s each under TSan on 2 cores), and the
// smaller worlds run every pair through the same code. The suite runs them all.
std::vector<std::pair<DType, ReduceOp>> SanitizerSubset(
    const std::vector<std::pair<DType, ReduceOp>>& dtype_ops, int world) {
  if (kUnderSanitizer && world >= 16) return {dtype_ops.front()};
  return dtype_ops;
}

// (world, ranks per node, count, in place)
using Param = std::tuple<std::pair<int, int>, size_t, bool>;

class HierarchicalTest : public ::testing::TestWithParam<Param> {};

TEST_P(HierarchicalTest, MatchesTheReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto layout = std::get<0>(GetParam());
  const auto count = std::get<1>(GetParam());
  const auto in_place = std::get<2>(GetParam());
  const auto world = std::get<0>(layout);
  const auto per_node = std::get<1>(layout);
  const std::vector<std::pair<DType, ReduceOp>> dtype_ops = {
      {DType::kF32, ReduceOp::kSum}, {DType::kI32, ReduceOp::kMax}, {DType::kBF16, ReduceOp::kSum}};
  for (const auto& dtype_op : SanitizerSubset(dtype_ops, world)) {
    const DType dtype = dtype_op.first;
    const ReduceOp op = dtype_op.second;
    const RankInputs inputs = MakeInputs(dtype, op, world, count, 31 + per_node);
    auto harness = MakeInprocHarness();
    LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, world, [&](const CallContext& base) -> absl::Status {
      CallContext ctx = base;
      ctx.ranks_per_node = per_node;
      std::vector<std::byte> mine = inputs.data[ctx.rank()], out(mine.size());
      CollectiveArgs args;
      args.kind = CollectiveKind::kAllReduce;
      args.op = op;
      args.count = count;
      args.input = ViewOf(mine, dtype);
      args.output = in_place ? MutableViewOf(mine, dtype) : MutableViewOf(out, dtype);
      LOOM_RETURN_IF_ERROR(HierarchicalAllReduce(ctx, args));
      if (!in_place) {
        LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(ctx.rank()), ViewOf(mine, dtype), "input"));
      }
      return ExpectReduction(inputs, op, 0, args.output);
    }, /*chunk_bytes=*/4096)));
  }
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto& [layout, count, in_place] = info.param;
  return absl::StrCat("world", layout.first, "_per_node", layout.second, "_count", count,
                      in_place ? "_in_place" : "_out_of_place");
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HierarchicalTest,
    ::testing::Combine(::testing::Values(std::make_pair(4, 2), std::make_pair(6, 3), std::make_pair(6, 2),
                                         std::make_pair(8, 4), std::make_pair(8, 2), std::make_pair(16, 4),
                                         std::make_pair(3, 1), std::make_pair(4, 4)),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{3}, size_t{1000}, size_t{65537}),
                       ::testing::Bool()),
    ParamName);

// The node-aware forms of the node-blind all-reduces (ByNodes): (world, ranks per
// node), count, and the algorithm between nodes.
struct Across {
  const char* name;
  AllReduceFn by_nodes;  // what the algorithm table runs
  AllReduceFn flat;      // the algorithm's own file, node-blind
};
const Across kAcross[] = {
    {"direct", ByNodes<DirectAllReduce>, DirectAllReduce},
    {"tree", ByNodes<BinomialAllReduce>, BinomialAllReduce},
    {"dbtree", ByNodes<DoubleBinaryTreeAllReduce>, DoubleBinaryTreeAllReduce},
};
using NodeAwareParam = std::tuple<std::pair<int, int>, size_t, int>;

class NodeAwareTest : public ::testing::TestWithParam<NodeAwareParam> {};

// Every element within the float bound of the reference, and the same bits on every
// rank: sizes below kNodeAwareBytes (flat), at it, and above it uneven by k and by
// the chunk size, on layouts of 2..8 nodes with 2..4 ranks each.
TEST_P(NodeAwareTest, MatchesTheReferenceWithTheSameBitsOnEveryRank) {
  const auto layout = std::get<0>(GetParam());
  const auto count = std::get<1>(GetParam());
  const Across across = kAcross[std::get<2>(GetParam())];
  const int world = layout.first;
  const int per_node = layout.second;
  const std::vector<std::pair<DType, ReduceOp>> dtype_ops = {{DType::kF32, ReduceOp::kSum},
                                                             {DType::kI32, ReduceOp::kMax},
                                                             {DType::kBF16, ReduceOp::kSum},
                                                             {DType::kF64, ReduceOp::kProd}};
  for (const auto& dtype_op : SanitizerSubset(dtype_ops, world)) {
    const DType dtype = dtype_op.first;
    const ReduceOp op = dtype_op.second;
    const uint64_t seed = 57 + 1000 * static_cast<uint64_t>(world) + count;
    SCOPED_TRACE(absl::StrCat(across.name, " ", DTypeName(dtype), " seed ", seed));
    const RankInputs inputs = MakeInputs(dtype, op, world, count, seed);
    std::vector<std::vector<std::byte>> outputs(world);
    auto harness = MakeInprocHarness();
    LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, world, [&](const CallContext& base) -> absl::Status {
      CallContext ctx = base;
      ctx.ranks_per_node = per_node;
      std::vector<std::byte> mine = inputs.data[ctx.rank()];
      std::vector<std::byte> out = Garbage(mine.size());
      CollectiveArgs args;
      args.kind = CollectiveKind::kAllReduce;
      args.op = op;
      args.count = count;
      args.input = ViewOf(mine, dtype);
      args.output = MutableViewOf(out, dtype);
      LOOM_RETURN_IF_ERROR(across.by_nodes(ctx, args));
      LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(ctx.rank()), ViewOf(mine, dtype), "input"));
      outputs[ctx.rank()] = out;  // each rank writes only its own slot
      return ExpectReduction(inputs, op, 0, args.output);
    }, /*chunk_bytes=*/4096)));
    for (int r = 1; r < world; ++r) {
      LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(outputs[0], dtype), ViewOf(outputs[r], dtype),
                                     absl::StrCat("rank ", r, " against rank 0")));
    }
  }
}

std::string NodeAwareName(const ::testing::TestParamInfo<NodeAwareParam>& info) {
  const auto& [layout, count, across] = info.param;
  return absl::StrCat(kAcross[across].name, "_world", layout.first, "_per_node", layout.second,
                      "_count", count);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, NodeAwareTest,
    ::testing::Combine(::testing::Values(std::make_pair(4, 2), std::make_pair(6, 2), std::make_pair(6, 3),
                                         std::make_pair(8, 2), std::make_pair(9, 3), std::make_pair(16, 2),
                                         std::make_pair(16, 4)),
                       ::testing::Values(size_t{0}, size_t{3}, size_t{1000}, size_t{16384},
                                         size_t{65537}),
                       ::testing::Range(0, 3)),
    NodeAwareName);

// Where ByNodes stays flat (below kNodeAwareBytes, one node, one rank per node) it is
// the algorithm's own file, bit for bit; above it on several nodes it is not direct's
// rank-order fold, which is why deterministic mode never runs it.
TEST(NodeAwareTest, IsTheFlatAlgorithmWhereItDoesNotRunByNodes) {
  constexpr int kWorld = 6;
  struct Shape {
    int per_node;
    size_t count;  // f32 elements
    bool by_nodes;
  };
  for (const Shape shape : {Shape{2, kNodeAwareBytes / 4 - 1, false}, Shape{0, 65537, false},
                            Shape{6, 65537, false}, Shape{1, 65537, false},
                            Shape{2, kNodeAwareBytes / 4, true}}) {
    EXPECT_EQ(AllReduceByNodes(kWorld, shape.per_node, shape.count * 4), shape.by_nodes)
        << shape.per_node << " per node, " << shape.count;
    for (const Across& across : kAcross) {
      SCOPED_TRACE(absl::StrCat(across.name, ", ", shape.per_node, " per node, ", shape.count));
      const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, kWorld, shape.count, 7);
      std::atomic<int> differing{0};
      auto harness = MakeInprocHarness();
      LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, kWorld, [&](const CallContext& base) -> absl::Status {
        CallContext ctx = base;
        ctx.ranks_per_node = shape.per_node;
        std::vector<std::byte> by_nodes(inputs.bytes_per_rank()), flat(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.op = ReduceOp::kSum;
        args.count = shape.count;
        args.input = inputs.View(ctx.rank());
        args.output = MutableViewOf(by_nodes, DType::kF32);
        LOOM_RETURN_IF_ERROR(across.by_nodes(ctx, args));
        CallContext next = ctx;
        next.tag_base += kMaxSteps;
        args.output = MutableViewOf(flat, DType::kF32);
        LOOM_RETURN_IF_ERROR(across.flat(next, args));
        if (by_nodes != flat) differing.fetch_add(1);
        return absl::OkStatus();
      })));
      // Seeded sums of 6 distinct floats in another association differ somewhere in
      // 65536 elements; the flat forms are the same code, so the same bits.
      EXPECT_EQ(differing.load(), shape.by_nodes ? kWorld : 0);
    }
  }
}

TEST(HierarchicalTest, RejectsLayoutsThatDoNotDivideTheGroup) {
  auto harness = MakeInprocHarness();
  const std::vector<absl::Status> results = RunAlgorithmRanks(*harness, 6, [&](const CallContext& base) {
    CallContext ctx = base;
    ctx.ranks_per_node = 4;
    std::vector<float> data(8);
    CollectiveArgs args;
    args.count = data.size();
    args.input = ConstBufferView::Of(absl::MakeSpan(data));
    args.output = BufferView::Of(absl::MakeSpan(data));
    return HierarchicalAllReduce(ctx, args);
  });
  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("over 6 ranks with 4 ranks per node")));
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

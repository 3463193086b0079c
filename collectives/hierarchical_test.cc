#include "collectives/hierarchical.h"

#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/internal/algorithm_testing.h"
#include "collectives/transport/inproc/inproc_harness.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace collectives_internal {
namespace {

using ::testing::HasSubstr;

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
  for (const auto& dtype_op : {std::pair{DType::kF32, ReduceOp::kSum},
                                std::pair{DType::kI32, ReduceOp::kMax},
                                std::pair{DType::kBF16, ReduceOp::kSum}}) {
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

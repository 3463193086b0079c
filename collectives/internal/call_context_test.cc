#include "collectives/internal/call_context.h"

#include <cstddef>
#include <vector>

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

TEST(BlockTest, BlocksTileTheRangeAndDifferByAtMostOne) {
  for (size_t count : {0, 1, 3, 7, 1000, 65537}) {
    for (int parts : {1, 2, 3, 5, 16}) {
      size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const BlockRange block = Block(count, parts, i);
        EXPECT_EQ(block.offset, next) << count << " in " << parts << ", block " << i;
        EXPECT_LE(block.count, count / parts + 1);
        EXPECT_GE(block.count, count / parts);
        next += block.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  EXPECT_EQ(Block(7, 3, 0).count, 3u);
  EXPECT_EQ(Block(7, 3, 2).offset, 5u);
}

TEST(ScratchTest, GrowsAndKeepsAlignment) {
  Scratch scratch;
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<std::byte> small, scratch.Get(1, 10));
  EXPECT_EQ(small.size(), 10u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data()) % 64, 0u);
  LOOM_ASSERT_OK_AND_ASSIGN(absl::Span<std::byte> large, scratch.Get(1, 1 << 20));
  EXPECT_EQ(large.size(), size_t{1} << 20);
  EXPECT_THAT(scratch.Get(-1, 1), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slot -1")));
}

TEST(ReduceToTest, OutOfPlaceAndAliased) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, out(3);
  LOOM_ASSERT_OK(ReduceTo(ReduceOp::kSum, ConstBufferView::Of(absl::MakeSpan(a)),
                          ConstBufferView::Of(absl::MakeSpan(b)), BufferView::Of(absl::MakeSpan(out))));
  EXPECT_THAT(out, ::testing::ElementsAre(11, 22, 33));
  LOOM_ASSERT_OK(ReduceTo(ReduceOp::kMax, ConstBufferView::Of(absl::MakeSpan(a)),
                          ConstBufferView::Of(absl::MakeSpan(b)), BufferView::Of(absl::MakeSpan(b))));
  EXPECT_THAT(b, ::testing::ElementsAre(10, 20, 30));
  EXPECT_THAT(Copy(ConstBufferView::Of(absl::MakeSpan(a)), BufferView::Of(absl::MakeSpan(out).subspan(1))),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("copy of 3 f32 into 2 f32")));
}

TEST(ExchangeTest, RingNeighboursSwapAndTheCheckersSeeIt) {
  const int world = 5;
  const RankInputs inputs = MakeInputs(DType::kI32, ReduceOp::kSum, world, 33, 11);
  auto harness = MakeInprocHarness();
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*harness, world, [&](const CallContext& ctx) {
    std::vector<std::byte> got(inputs.bytes_per_rank());
    const int right = (ctx.rank() + 1) % world, left = (ctx.rank() + world - 1) % world;
    LOOM_RETURN_IF_ERROR(Exchange(ctx, 3, right, inputs.View(ctx.rank()), left,
                                  MutableViewOf(got, DType::kI32)));
    return ExpectSameBytes(inputs.View(left), ViewOf(got, DType::kI32), "from the left");
  })));
}

TEST(CheckersTest, ReportTheFirstWrongElement) {
  const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, 3, 8, 5);
  std::vector<std::byte> sum = RankOrderReduce(inputs, ReduceOp::kSum, 0, 8);
  LOOM_EXPECT_OK(ExpectReduction(inputs, ReduceOp::kSum, 0, ViewOf(sum, DType::kF32)));
  float* values = reinterpret_cast<float*>(sum.data());
  values[6] += 0.01f;
  EXPECT_THAT(ExpectReduction(inputs, ReduceOp::kSum, 0, ViewOf(sum, DType::kF32)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("sum of 3 ranks, element 6: got")));
  EXPECT_THAT(ExpectSameBytes(inputs.View(0), inputs.View(1), "rank 1"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("rank 1: element 0 is")));
  const RankInputs ints = MakeInputs(DType::kI8, ReduceOp::kProd, 4, 100, 5);
  std::vector<std::byte> prod = RankOrderReduce(ints, ReduceOp::kProd, 10, 90);
  LOOM_EXPECT_OK(ExpectReduction(ints, ReduceOp::kProd, 10, ViewOf(prod, DType::kI8)));
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

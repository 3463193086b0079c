#include "collectives/halving_doubling.h"

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

struct Case {
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool in_place = false;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("w", c.world, "_n", c.count, "_", DTypeName(c.dtype), "_",
                      ReduceOpName(c.op), c.in_place ? "_inplace" : "_outofplace");
}

std::vector<size_t> Counts(int world) {
  std::vector<size_t> counts = {0, 1, 3, static_cast<size_t>(world - 1), 1000, 65537};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

constexpr int kWorlds[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};

// Every world (powers of two and not, 16 with four halvings) x count x place.
std::vector<Case> Matrix(DType dtype, ReduceOp op) {
  std::vector<Case> cases;
  for (int world : kWorlds) {
    for (size_t count : Counts(world)) {
      for (bool in_place : {false, true}) {
        cases.push_back(Case{world, count, dtype, op, in_place});
      }
    }
  }
  return cases;
}

// Every dtype x op on a power of two, a non-power of two with one rank folded in
// and one with three, at a count that leaves uneven blocks.
std::vector<Case> DTypeOpProduct() {
  std::vector<Case> cases;
  for (int world : {4, 5, 7}) {
    for (DType dtype : AllDTypes()) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
        cases.push_back(Case{world, 1001, dtype, op, (cases.size() % 2) == 1});
      }
    }
  }
  return cases;
}

// Every dtype (the element width is all that matters to a copy), on every world.
std::vector<Case> DTypeRotation() {
  std::vector<Case> cases;
  int index = 0;
  for (int world : kWorlds) {
    for (size_t count : {size_t{1}, size_t{77}}) {
      const DType dtype = AllDTypes()[index++ % AllDTypes().size()];
      cases.push_back(Case{world, count, dtype, ReduceOp::kSum, (index % 2) == 0});
    }
  }
  return cases;
}

std::vector<Case> Concat(std::vector<Case> a, const std::vector<Case>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

uint64_t Seed(const Case& c) {
  return static_cast<uint64_t>(c.world) * 7919 + c.count * 31 + static_cast<uint64_t>(c.dtype) * 3 +
         static_cast<uint64_t>(c.op);
}

class HalvingDoublingAllReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(HalvingDoublingAllReduceTest, EveryRankHoldsTheSameReduction) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  // input[r] starts as a copy of the seeded input, so writing to an out-of-place
  // input shows; outputs start as garbage.
  std::vector<std::vector<std::byte>> input = inputs.data;
  std::vector<std::vector<std::byte>> output(
      c.world, std::vector<std::byte>(inputs.bytes_per_rank(), std::byte{0xCD}));
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*harness, c.world, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args;
    args.kind = CollectiveKind::kAllReduce;
    args.op = c.op;
    args.count = c.count;
    args.output = MutableViewOf(c.in_place ? input[r] : output[r], c.dtype);
    args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(input[r], c.dtype);
    LOOM_RETURN_IF_ERROR(HalvingDoublingAllReduce(ctx, args));
    // Rank 0 against the inputs here; the others bit for bit against rank 0
    // below, which checks them as fully with one reference computation, not n.
    if (r != 0) return absl::OkStatus();
    return ExpectReduction(inputs, c.op, 0, args.output);
  })));
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

INSTANTIATE_TEST_SUITE_P(F32SumAndI32Max, HalvingDoublingAllReduceTest,
                         ::testing::ValuesIn(Concat(Matrix(DType::kF32, ReduceOp::kSum),
                                                    Matrix(DType::kI32, ReduceOp::kMax))),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(DTypesAndOps, HalvingDoublingAllReduceTest,
                         ::testing::ValuesIn(DTypeOpProduct()), CaseName);

class HalvingDoublingReduceScatterTest : public ::testing::TestWithParam<Case> {};

TEST_P(HalvingDoublingReduceScatterTest, RankRHoldsBlockROfTheReduction) {
  const Case c = GetParam();
  const size_t total = c.world * c.count;
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, total, Seed(c));
  std::vector<std::vector<std::byte>> input = inputs.data;
  std::vector<std::vector<std::byte>> output(
      c.world, std::vector<std::byte>(c.count * DTypeSize(c.dtype), std::byte{0xCD}));
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*harness, c.world, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args;
    args.kind = CollectiveKind::kReduceScatter;
    args.op = c.op;
    args.count = c.count;
    args.input = ViewOf(input[r], c.dtype);
    args.output = c.in_place ? Slice(MutableViewOf(input[r], c.dtype), r * c.count, c.count)
                             : MutableViewOf(output[r], c.dtype);
    LOOM_RETURN_IF_ERROR(HalvingDoublingReduceScatter(ctx, args));
    return ExpectReduction(inputs, c.op, r * c.count, args.output);
  })));
  // The input is only read: out of place entirely, in place outside the own block.
  for (int r = 0; r < c.world; ++r) {
    const ConstBufferView want = inputs.View(r);
    const ConstBufferView got = ViewOf(input[r], c.dtype);
    const size_t own = c.in_place ? r * c.count : total;
    LOOM_EXPECT_OK(ExpectSameBytes(Slice(want, 0, own), Slice(got, 0, own),
                                   absl::StrCat("rank ", r, "'s input before its block")));
    const size_t after = c.in_place ? own + c.count : total;
    LOOM_EXPECT_OK(ExpectSameBytes(Slice(want, after, total - after), Slice(got, after, total - after),
                                   absl::StrCat("rank ", r, "'s input after its block")));
  }
}

INSTANTIATE_TEST_SUITE_P(F32SumAndI32Max, HalvingDoublingReduceScatterTest,
                         ::testing::ValuesIn(Concat(Matrix(DType::kF32, ReduceOp::kSum),
                                                    Matrix(DType::kI32, ReduceOp::kMax))),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(DTypesAndOps, HalvingDoublingReduceScatterTest,
                         ::testing::ValuesIn(DTypeOpProduct()), CaseName);

class HalvingDoublingAllGatherTest : public ::testing::TestWithParam<Case> {};

TEST_P(HalvingDoublingAllGatherTest, EveryRankHoldsEveryBlockInRankOrder) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  const size_t block_bytes = inputs.bytes_per_rank();
  std::vector<std::vector<std::byte>> input = inputs.data;
  std::vector<std::vector<std::byte>> output(
      c.world, std::vector<std::byte>(c.world * block_bytes, std::byte{0xCD}));
  if (c.in_place) {
    for (int r = 0; r < c.world; ++r) {
      std::copy(input[r].begin(), input[r].end(), output[r].begin() + r * block_bytes);
    }
  }
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*harness, c.world, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    CollectiveArgs args;
    args.kind = CollectiveKind::kAllGather;
    args.count = c.count;
    args.output = MutableViewOf(output[r], c.dtype);
    args.input = c.in_place ? Slice(ConstBufferView(args.output), r * c.count, c.count)
                            : ViewOf(input[r], c.dtype);
    LOOM_RETURN_IF_ERROR(HalvingDoublingAllGather(ctx, args));
    for (int from = 0; from < c.world; ++from) {
      LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(from),
                                           Slice(ConstBufferView(args.output), from * c.count, c.count),
                                           absl::StrCat("rank ", r, "'s block ", from)));
    }
    return absl::OkStatus();
  })));
  for (int r = 0; r < c.world; ++r) {
    LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(r), ViewOf(input[r], c.dtype),
                                   absl::StrCat("rank ", r, "'s input")));
  }
}

INSTANTIATE_TEST_SUITE_P(F32, HalvingDoublingAllGatherTest,
                         ::testing::ValuesIn(Matrix(DType::kF32, ReduceOp::kSum)), CaseName);
INSTANTIATE_TEST_SUITE_P(DTypes, HalvingDoublingAllGatherTest,
                         ::testing::ValuesIn(DTypeRotation()), CaseName);

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
  auto harness = MakeInprocHarness();
  const std::vector<absl::Status> statuses = RunAlgorithmRanks(
      *harness, 6,
      [&](const CallContext& ctx) {
        if (ctx.rank() == 4) return absl::OkStatus();  // never joins
        std::vector<double> data(100, 1.0);
        CollectiveArgs args;
        args.count = data.size();
        args.output = BufferView::Of(absl::MakeSpan(data));
        args.input = args.output;
        return HalvingDoublingAllReduce(ctx, args);
      },
      size_t{256} << 10, absl::Milliseconds(500));
  for (int r : {0, 1, 2, 3, 5}) EXPECT_FALSE(statuses[r].ok()) << r;
  EXPECT_THAT(statuses[5], StatusIs(absl::StatusCode::kDeadlineExceeded, ::testing::_));
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

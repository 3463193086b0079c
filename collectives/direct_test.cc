#include "collectives/direct.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
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

struct DirectCase {
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool in_place = false;
  int root = 0;

  uint64_t seed() const {
    return static_cast<uint64_t>(world) * 1000003 + count * 31 + static_cast<uint64_t>(dtype) * 7 +
           static_cast<uint64_t>(op) * 3 + static_cast<uint64_t>(root);
  }
};

std::string CaseName(const ::testing::TestParamInfo<DirectCase>& info) {
  const DirectCase& c = info.param;
  return absl::StrCat("w", c.world, "_n", c.count, "_", DTypeName(c.dtype), "_", ReduceOpName(c.op),
                      c.in_place ? "_inplace" : "_outofplace", "_root", c.root);
}

// Counts: empty, one element, odd, fewer than ranks, and large odd ones.
std::vector<size_t> CountsFor(int world) {
  std::vector<size_t> counts = {0, 1, 3};
  const size_t fewer = static_cast<size_t>(world - 1);
  if (fewer != 0 && fewer != 1 && fewer != 3) counts.push_back(fewer);
  counts.push_back(1000);
  counts.push_back(65537);
  return counts;
}

// Every world x count x placement (x root 0 and world-1), for f32 sum and i32 max;
// i32 max leaves out the largest count, which only repeats f32's data movement and
// costs the most under ThreadSanitizer.
std::vector<DirectCase> Matrix(bool rooted) {
  std::vector<DirectCase> cases;
  for (int world : {1, 2, 3, 4, 5, 8, 16}) {
    for (size_t count : CountsFor(world)) {
      for (bool in_place : {false, true}) {
        std::vector<int> roots = {0};
        if (rooted && world > 1) roots.push_back(world - 1);
        for (int root : roots) {
          cases.push_back({world, count, DType::kF32, ReduceOp::kSum, in_place, root});
          if (count != 65537) {
            cases.push_back({world, count, DType::kI32, ReduceOp::kMax, in_place, root});
          }
        }
      }
    }
  }
  return cases;
}

// Every dtype x op on a few worlds and counts.
std::vector<DirectCase> Types(bool rooted) {
  std::vector<DirectCase> cases;
  for (DType dtype : AllDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int world : {3, 5}) {
        for (size_t count : {size_t{3}, size_t{1000}}) {
          for (bool in_place : {false, true}) {
            cases.push_back({world, count, dtype, op, in_place, rooted ? world - 1 : 0});
          }
        }
      }
    }
  }
  return cases;
}

// Garbage fills an output before a call, so that an element the algorithm never
// wrote shows.
std::vector<std::byte> Garbage(size_t bytes) {
  return std::vector<std::byte>(bytes, std::byte{0x5A});
}

ConstBufferView Part(const std::vector<std::byte>& bytes, DType dtype, size_t offset,
                     size_t count) {
  return Slice(ViewOf(bytes, dtype), offset, count);
}

// The bitwise reference: the sequential fold in rank order.
std::vector<std::byte> Reference(const RankInputs& inputs, ReduceOp op, size_t first,
                                 size_t count) {
  return RankOrderReduce(inputs, op, first, count);
}

// Outputs collects each rank's result; each rank's thread writes only its own entry.
using Outputs = std::vector<std::vector<std::byte>>;

class DirectAllReduceTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectAllReduceTest, EveryRankHoldsTheRankOrderFoldBitwise) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.op = c.op;
        args.count = c.count;
        args.input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(ctx.rank());
        args.output = MutableViewOf(out, c.dtype);
        return DirectAllReduce(ctx, args);
      })));
  const std::vector<std::byte> want = Reference(inputs, c.op, 0, c.count);
  for (int r = 0; r < c.world; ++r) {
    LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(want, c.dtype), ViewOf(outputs[r], c.dtype),
                                   absl::StrCat("rank ", r)));
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectAllReduceTest, ::testing::ValuesIn(Matrix(false)), CaseName);
INSTANTIATE_TEST_SUITE_P(Types, DirectAllReduceTest, ::testing::ValuesIn(Types(false)), CaseName);

class DirectReduceScatterTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectReduceScatterTest, RankHoldsTheRankOrderFoldOfItsBlockBitwise) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.world * c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        const int r = ctx.rank();
        std::vector<std::byte>& out = outputs[r];
        CollectiveArgs args;
        args.kind = CollectiveKind::kReduceScatter;
        args.op = c.op;
        args.count = c.count;
        if (c.in_place) {
          out = inputs.data[r];
          args.input = ViewOf(out, c.dtype);
          args.output = Slice(MutableViewOf(out, c.dtype), r * c.count, c.count);
        } else {
          out = Garbage(c.count * DTypeSize(c.dtype));
          args.input = inputs.View(r);
          args.output = MutableViewOf(out, c.dtype);
        }
        return DirectReduceScatter(ctx, args);
      })));
  for (int r = 0; r < c.world; ++r) {
    const std::vector<std::byte> want = Reference(inputs, c.op, r * c.count, c.count);
    LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(want, c.dtype),
                                   Part(outputs[r], c.dtype, c.in_place ? r * c.count : 0, c.count),
                                   absl::StrCat("rank ", r)));
  }
}

// Scaled: where one side of a call is world * count elements (reduce-scatter's
// input, gathers' output), the largest count is scaled down to keep that side about
// 65537 elements (still odd).
std::vector<DirectCase> Scaled(std::vector<DirectCase> cases) {
  for (DirectCase& c : cases) {
    if (c.count == 65537) c.count = (65537 / c.world) | 1;
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectReduceScatterTest,
                         ::testing::ValuesIn(Scaled(Matrix(false))), CaseName);
INSTANTIATE_TEST_SUITE_P(Types, DirectReduceScatterTest, ::testing::ValuesIn(Types(false)),
                         CaseName);

class DirectReduceTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectReduceTest, RootHoldsTheRankOrderFoldBitwise) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  std::vector<std::byte> result;
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        CollectiveArgs args;
        args.kind = CollectiveKind::kReduce;
        args.op = c.op;
        args.root = c.root;
        args.count = c.count;
        args.input = inputs.View(ctx.rank());
        if (ctx.rank() != c.root) return DirectReduce(ctx, args);
        result = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        args.output = MutableViewOf(result, c.dtype);
        if (c.in_place) args.input = args.output;
        return DirectReduce(ctx, args);
      })));
  const std::vector<std::byte> want = Reference(inputs, c.op, 0, c.count);
  LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(want, c.dtype), ViewOf(result, c.dtype), "root"));
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectReduceTest, ::testing::ValuesIn(Matrix(true)), CaseName);
INSTANTIATE_TEST_SUITE_P(Types, DirectReduceTest, ::testing::ValuesIn(Types(true)), CaseName);

// Data movement only: f32 and i8 stand for every dtype.
std::vector<DirectCase> MovementCases(bool rooted) {
  std::vector<DirectCase> cases;
  for (const DirectCase& c : Matrix(rooted)) {
    if (c.dtype == DType::kF32) cases.push_back(c);
    if (c.dtype == DType::kI32 && c.count == 1000) {
      DirectCase bytes = c;
      bytes.dtype = DType::kI8;
      cases.push_back(bytes);
    }
  }
  return cases;
}

class DirectAllGatherTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectAllGatherTest, EveryRankGetsEveryInput) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        const int r = ctx.rank();
        std::vector<std::byte>& out = outputs[r];
        out = Garbage(c.world * inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllGather;
        args.count = c.count;
        args.output = MutableViewOf(out, c.dtype);
        args.input = inputs.View(r);
        if (c.in_place) {
          const BufferView mine = Slice(args.output, r * c.count, c.count);
          LOOM_RETURN_IF_ERROR(Copy(inputs.View(r), mine));
          args.input = mine;
        }
        return DirectAllGather(ctx, args);
      })));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(b),
                                     Part(outputs[r], c.dtype, b * c.count, c.count),
                                     absl::StrCat("rank ", r, ", block ", b)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectAllGatherTest,
                         ::testing::ValuesIn(Scaled(MovementCases(false))), CaseName);

class DirectBroadcastTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectBroadcastTest, EveryRankGetsTheRootsInput) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, 1, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        const bool is_root = ctx.rank() == c.root;
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = is_root && c.in_place ? inputs.data[0] : Garbage(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kBroadcast;
        args.root = c.root;
        args.count = c.count;
        args.output = MutableViewOf(out, c.dtype);
        if (is_root) args.input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(0);
        return DirectBroadcast(ctx, args);
      })));
  for (int r = 0; r < c.world; ++r) {
    LOOM_EXPECT_OK(
        ExpectSameBytes(inputs.View(0), ViewOf(outputs[r], c.dtype), absl::StrCat("rank ", r)));
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectBroadcastTest, ::testing::ValuesIn(MovementCases(true)),
                         CaseName);

class DirectGatherScatterTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectGatherScatterTest, GatherGivesTheRootEveryInput) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  std::vector<std::byte> result;
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        CollectiveArgs args;
        args.kind = CollectiveKind::kGather;
        args.root = c.root;
        args.count = c.count;
        args.input = inputs.View(ctx.rank());
        if (ctx.rank() != c.root) return DirectGather(ctx, args);
        result = Garbage(c.world * inputs.bytes_per_rank());
        args.output = MutableViewOf(result, c.dtype);
        if (c.in_place) {
          const BufferView mine = Slice(args.output, c.root * c.count, c.count);
          LOOM_RETURN_IF_ERROR(Copy(inputs.View(c.root), mine));
          args.input = mine;
        }
        return DirectGather(ctx, args);
      })));
  for (int b = 0; b < c.world; ++b) {
    LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(b), Part(result, c.dtype, b * c.count, c.count),
                                   absl::StrCat("block ", b)));
  }
}

TEST_P(DirectGatherScatterTest, ScatterGivesEveryRankItsBlockOfTheRootsInput) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, 1, c.world * c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        const int r = ctx.rank();
        const bool is_root = r == c.root;
        std::vector<std::byte>& out = outputs[r];
        CollectiveArgs args;
        args.kind = CollectiveKind::kScatter;
        args.root = c.root;
        args.count = c.count;
        if (is_root && c.in_place) {
          out = inputs.data[0];
          args.input = ViewOf(out, c.dtype);
          args.output = Slice(MutableViewOf(out, c.dtype), r * c.count, c.count);
        } else {
          out = Garbage(c.count * DTypeSize(c.dtype));
          if (is_root) args.input = inputs.View(0);
          args.output = MutableViewOf(out, c.dtype);
        }
        return DirectScatter(ctx, args);
      })));
  for (int r = 0; r < c.world; ++r) {
    const size_t at = r == c.root && c.in_place ? r * c.count : 0;
    LOOM_EXPECT_OK(ExpectSameBytes(Part(inputs.data[0], c.dtype, r * c.count, c.count),
                                   Part(outputs[r], c.dtype, at, c.count),
                                   absl::StrCat("rank ", r)));
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectGatherScatterTest,
                         ::testing::ValuesIn(Scaled(MovementCases(true))), CaseName);

// The building blocks, with the contracts the Communicator relies on.
class DirectBlocksTest : public ::testing::TestWithParam<DirectCase> {};

TEST_P(DirectBlocksTest, ReduceScatterBlocksFoldsRankBlockAndLeavesTheRest) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        const ConstBufferView input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(ctx.rank());
        return DirectReduceScatterBlocks(ctx, c.op, input, MutableViewOf(out, c.dtype));
      })));
  const std::vector<std::byte> untouched = Garbage(inputs.bytes_per_rank());
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      const BlockRange block = Block(c.count, c.world, b);
      const ConstBufferView got = Slice(ViewOf(outputs[r], c.dtype), block);
      if (b == r) {
        const std::vector<std::byte> want = Reference(inputs, c.op, block.offset, block.count);
        LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(want, c.dtype), got, absl::StrCat("rank ", r)));
      } else {
        const ConstBufferView before =
            Slice(c.in_place ? inputs.View(r) : ViewOf(untouched, c.dtype), block);
        LOOM_EXPECT_OK(ExpectSameBytes(before, got, absl::StrCat("rank ", r, ", other block ", b)));
      }
    }
  }
}

TEST_P(DirectBlocksTest, AllGatherBlocksSpreadsEveryRanksBlock) {
  const DirectCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(
      AllOk(RunAlgorithmRanks(*MakeInprocHarness(), c.world, [&](const CallContext& ctx) {
        std::vector<std::byte>& buffer = outputs[ctx.rank()];
        buffer = Garbage(inputs.bytes_per_rank());
        const BlockRange mine = Block(c.count, c.world, ctx.rank());
        LOOM_RETURN_IF_ERROR(Copy(Slice(inputs.View(ctx.rank()), mine),
                                  Slice(MutableViewOf(buffer, c.dtype), mine)));
        return DirectAllGatherBlocks(ctx, MutableViewOf(buffer, c.dtype));
      })));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      const BlockRange block = Block(c.count, c.world, b);
      LOOM_EXPECT_OK(ExpectSameBytes(Slice(inputs.View(b), block),
                                     Slice(ViewOf(outputs[r], c.dtype), block),
                                     absl::StrCat("rank ", r, ", block ", b)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectBlocksTest, ::testing::ValuesIn(MovementCases(false)),
                         CaseName);

class DirectBarrierTest : public ::testing::TestWithParam<int> {};

TEST_P(DirectBarrierTest, NoRankLeavesBeforeEveryRankEntered) {
  const int world = GetParam();
  constexpr int kRounds = 5;
  std::vector<std::atomic<int>> entered(kRounds);
  for (auto& e : entered) e.store(0);
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), world, [&](const CallContext& ctx) {
    for (int round = 0; round < kRounds; ++round) {
      // A different rank is late to each round.
      if (ctx.rank() == round % world) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      entered[round].fetch_add(1);
      LOOM_RETURN_IF_ERROR(DirectBarrier(ctx, CollectiveArgs{}));
      const int seen = entered[round].load();
      if (seen != world) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank(), " left round ", round,
                                                " when only ", seen, " of ", world,
                                                " had entered"));
      }
    }
    return absl::OkStatus();
  })));
}

INSTANTIATE_TEST_SUITE_P(Worlds, DirectBarrierTest, ::testing::Values(1, 2, 3, 4, 5, 8, 16));

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
  const auto statuses = RunAlgorithmRanks(
      *MakeInprocHarness(), 3,
      [&](const CallContext& ctx) {
        std::vector<float> data(ctx.rank() == 1 ? 5 : 4, 1.0f);
        CollectiveArgs args;
        args.count = data.size();
        args.input = ConstBufferView::Of(absl::MakeConstSpan(data));
        args.output = BufferView::Of(absl::MakeSpan(data));
        return DirectAllReduce(ctx, args);
      },
      size_t{256} << 10, absl::Seconds(10));
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bytes")));
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

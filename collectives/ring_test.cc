#include "collectives/ring.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

constexpr size_t kDefaultChunk = size_t{256} << 10;
// Small enough that a 65537-element buffer is cut into many chunks per block.
constexpr size_t kSmallChunk = size_t{4} << 10;

struct RingCase {
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool in_place = false;
  size_t chunk_bytes = kDefaultChunk;
  int root = 0;

  uint64_t seed() const {
    return static_cast<uint64_t>(world) * 1000003 + count * 31 + static_cast<uint64_t>(dtype) * 7 +
           static_cast<uint64_t>(op) * 3 + static_cast<uint64_t>(root);
  }
};

std::string CaseName(const ::testing::TestParamInfo<RingCase>& info) {
  const RingCase& c = info.param;
  return absl::StrCat("w", c.world, "_n", c.count, "_", DTypeName(c.dtype), "_", ReduceOpName(c.op),
                      c.in_place ? "_inplace" : "_outofplace", "_chunk", c.chunk_bytes, "_root",
                      c.root);
}

const std::vector<int>& Worlds() {
  static const std::vector<int> worlds = {1, 2, 3, 4, 5, 8, 16};
  return worlds;
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

// Every world x count x placement, for f32 sum (chunked small) and i32 max.
std::vector<RingCase> Matrix(bool rooted) {
  std::vector<RingCase> cases;
  for (int world : Worlds()) {
    for (size_t count : CountsFor(world)) {
      for (bool in_place : {false, true}) {
        std::vector<int> roots = {0};
        if (rooted && world > 1) roots.push_back(world - 1);
        for (int root : roots) {
          cases.push_back({world, count, DType::kF32, ReduceOp::kSum, in_place, kSmallChunk, root});
          cases.push_back(
              {world, count, DType::kI32, ReduceOp::kMax, in_place, kDefaultChunk, root});
        }
      }
    }
  }
  return cases;
}

// Every dtype x op on a few worlds and counts, with chunks of 256 bytes so that even
// 1000 elements pipeline through many chunks.
std::vector<RingCase> Types(bool rooted) {
  std::vector<RingCase> cases;
  for (DType dtype : AllDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int world : {3, 5}) {
        for (size_t count : {size_t{3}, size_t{1000}}) {
          for (bool in_place : {false, true}) {
            cases.push_back({world, count, dtype, op, in_place, 256, rooted ? world - 1 : 0});
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

// CheckReduction is ExpectReduction, except for f64 sums and products: ExpectReduction
// computes its reference in double, which for f64 inputs rounds as often as the
// algorithm does, so its bound of n roundoffs need not cover both errors (a 3-rank
// product came out 4 roundoffs from it). Those are checked against a long double
// reference (64-bit significand) with the same bound.
absl::Status CheckReduction(const RankInputs& inputs, ReduceOp op, size_t first,
                            ConstBufferView got) {
  if (inputs.dtype != DType::kF64 || (op != ReduceOp::kSum && op != ReduceOp::kProd)) {
    return ExpectReduction(inputs, op, first, got);
  }
  const auto load = [](ConstBufferView view, size_t i) {
    double value;
    std::memcpy(&value, view.data() + i * sizeof(double), sizeof(double));
    return static_cast<long double>(value);
  };
  const int world = static_cast<int>(inputs.data.size());
  for (size_t i = 0; i < got.size(); ++i) {
    long double exact = load(inputs.View(0), first + i);
    long double magnitude = std::fabs(exact);
    for (int r = 1; r < world; ++r) {
      const long double x = load(inputs.View(r), first + i);
      exact = op == ReduceOp::kSum ? exact + x : exact * x;
      magnitude += std::fabs(x);
    }
    const long double bound =
        world * std::ldexp(1.0L, -53) * (op == ReduceOp::kSum ? magnitude : std::fabs(exact)) +
        static_cast<long double>(std::numeric_limits<double>::min());
    const long double error = std::fabs(load(got, i) - exact);
    if (!(error <= bound)) {
      return absl::InternalError(
          absl::StrCat(ReduceOpName(op), " of ", world, " ranks, element ", first + i, ": got ",
                       static_cast<double>(load(got, i)), ", want ", static_cast<double>(exact),
                       " within ", static_cast<double>(bound)));
    }
  }
  return absl::OkStatus();
}

// Outputs collects each rank's result; each rank's thread writes only its own entry.
using Outputs = std::vector<std::vector<std::byte>>;

class RingAllReduceTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllReduceTest, EveryRankHoldsTheReduction) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.op = c.op;
        args.count = c.count;
        args.input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(ctx.rank());
        args.output = MutableViewOf(out, c.dtype);
        return RingAllReduce(ctx, args);
      },
      c.chunk_bytes)));
  LOOM_EXPECT_OK(CheckReduction(inputs, c.op, 0, ViewOf(outputs[0], c.dtype)));
  for (int r = 1; r < c.world; ++r) {
    LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(outputs[0], c.dtype), ViewOf(outputs[r], c.dtype),
                                   absl::StrCat("rank ", r, " vs rank 0")));
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingAllReduceTest, ::testing::ValuesIn(Matrix(false)), CaseName);
INSTANTIATE_TEST_SUITE_P(Types, RingAllReduceTest, ::testing::ValuesIn(Types(false)), CaseName);
// One element per chunk: the most messages, empty chunks in the shorter blocks.
INSTANTIATE_TEST_SUITE_P(TinyChunks, RingAllReduceTest,
                         ::testing::Values(RingCase{4, 37, DType::kF64, ReduceOp::kSum, false, 1},
                                           RingCase{5, 1001, DType::kI8, ReduceOp::kSum, true, 1},
                                           RingCase{3, 2, DType::kF16, ReduceOp::kMin, true, 1}),
                         CaseName);

class RingReduceScatterTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingReduceScatterTest, RankHoldsItsBlockOfTheReduction) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.world * c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
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
        return RingReduceScatter(ctx, args);
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    const size_t at = c.in_place ? r * c.count : 0;
    LOOM_EXPECT_OK(
        CheckReduction(inputs, c.op, r * c.count, Part(outputs[r], c.dtype, at, c.count)))
        << "rank " << r;
  }
}

// A reduce-scatter's input is world * count elements: the largest count is scaled down
// to keep about 65537 elements per rank (still odd, still many chunks per block).
std::vector<RingCase> ReduceScatterCases() {
  std::vector<RingCase> cases = Matrix(false);
  for (RingCase& c : cases) {
    if (c.count == 65537) c.count = (65537 / c.world) | 1;
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingReduceScatterTest, ::testing::ValuesIn(ReduceScatterCases()),
                         CaseName);
INSTANTIATE_TEST_SUITE_P(Types, RingReduceScatterTest, ::testing::ValuesIn(Types(false)), CaseName);

class RingAllGatherTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllGatherTest, EveryRankHoldsEveryBlock) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        std::vector<std::byte>& out = outputs[r];
        out = Garbage(c.world * inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllGather;
        args.count = c.count;
        args.output = MutableViewOf(out, c.dtype);
        if (c.in_place) {
          const BufferView mine = Slice(args.output, r * c.count, c.count);
          LOOM_RETURN_IF_ERROR(Copy(inputs.View(r), mine));
          args.input = mine;
        } else {
          args.input = inputs.View(r);
        }
        return RingAllGather(ctx, args);
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(b),
                                     Part(outputs[r], c.dtype, b * c.count, c.count),
                                     absl::StrCat("rank ", r, ", block ", b)));
    }
  }
}

// All-gather only moves bytes: one- and two-byte elements stand for every dtype. Its
// output is world * count elements, so the largest count is scaled down as for
// reduce-scatter.
std::vector<RingCase> GatherCases() {
  std::vector<RingCase> cases;
  for (const RingCase& c : ReduceScatterCases()) {
    RingCase gather = c;
    gather.dtype = c.dtype == DType::kF32 ? DType::kBF16 : DType::kI8;
    cases.push_back(gather);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingAllGatherTest, ::testing::ValuesIn(GatherCases()), CaseName);

class RingBroadcastTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingBroadcastTest, EveryRankHoldsTheRootsInput) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, 1, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        const bool is_root = ctx.rank() == c.root;
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = is_root && c.in_place ? inputs.data[0] : Garbage(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.kind = CollectiveKind::kBroadcast;
        args.root = c.root;
        args.count = c.count;
        args.output = MutableViewOf(out, c.dtype);
        if (is_root) args.input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(0);
        return RingBroadcast(ctx, args);
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    LOOM_EXPECT_OK(
        ExpectSameBytes(inputs.View(0), ViewOf(outputs[r], c.dtype), absl::StrCat("rank ", r)));
  }
}

std::vector<RingCase> BroadcastCases() {
  std::vector<RingCase> cases;
  for (const RingCase& c : Matrix(true)) {
    if (c.dtype == DType::kF32) cases.push_back(c);  // 4 KiB chunks: a long chain pipeline
  }
  cases.push_back(RingCase{5, 1000, DType::kU8, ReduceOp::kSum, false, 1, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingBroadcastTest, ::testing::ValuesIn(BroadcastCases()),
                         CaseName);

class RingReduceTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingReduceTest, RootHoldsTheReduction) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  std::vector<std::byte> result;
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        CollectiveArgs args;
        args.kind = CollectiveKind::kReduce;
        args.op = c.op;
        args.root = c.root;
        args.count = c.count;
        args.input = inputs.View(ctx.rank());
        if (ctx.rank() != c.root) return RingReduce(ctx, args);
        result = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        args.output = MutableViewOf(result, c.dtype);
        if (c.in_place) args.input = args.output;
        return RingReduce(ctx, args);
      },
      c.chunk_bytes)));
  LOOM_EXPECT_OK(CheckReduction(inputs, c.op, 0, ViewOf(result, c.dtype)));
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingReduceTest, ::testing::ValuesIn(Matrix(true)), CaseName);
INSTANTIATE_TEST_SUITE_P(Types, RingReduceTest, ::testing::ValuesIn(Types(true)), CaseName);

// The building blocks on their own, with the contracts the Communicator relies on.
class RingBlocksTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingBlocksTest, ReduceScatterBlocksLeavesRankBlockReduced) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        std::vector<std::byte>& out = outputs[ctx.rank()];
        out = c.in_place ? inputs.data[ctx.rank()] : Garbage(inputs.bytes_per_rank());
        const ConstBufferView input = c.in_place ? ViewOf(out, c.dtype) : inputs.View(ctx.rank());
        return RingReduceScatterBlocks(ctx, c.op, input, MutableViewOf(out, c.dtype));
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    const BlockRange mine = Block(c.count, c.world, r);
    LOOM_EXPECT_OK(
        CheckReduction(inputs, c.op, mine.offset, Slice(ViewOf(outputs[r], c.dtype), mine)))
        << "rank " << r;
  }
}

TEST_P(RingBlocksTest, AllGatherBlocksSpreadsEveryRanksBlock) {
  const RingCase c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, c.seed());
  Outputs outputs(c.world);
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), c.world,
      [&](const CallContext& ctx) {
        std::vector<std::byte>& buffer = outputs[ctx.rank()];
        buffer = Garbage(inputs.bytes_per_rank());
        const BlockRange mine = Block(c.count, c.world, ctx.rank());
        LOOM_RETURN_IF_ERROR(Copy(Slice(inputs.View(ctx.rank()), mine),
                                  Slice(MutableViewOf(buffer, c.dtype), mine)));
        return RingAllGatherBlocks(ctx, MutableViewOf(buffer, c.dtype));
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    for (int b = 0; b < c.world; ++b) {
      const BlockRange block = Block(c.count, c.world, b);
      LOOM_EXPECT_OK(ExpectSameBytes(Slice(inputs.View(b), block),
                                     Slice(ViewOf(outputs[r], c.dtype), block),
                                     absl::StrCat("rank ", r, ", block ", b)));
    }
  }
}

std::vector<RingCase> BlocksCases() {
  std::vector<RingCase> cases;
  for (const RingCase& c : Matrix(false)) {
    if (c.dtype == DType::kF32) cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, RingBlocksTest, ::testing::ValuesIn(BlocksCases()), CaseName);

TEST(RingTest, CallsReuseScratchAndTagsOnOneContext) {
  const int world = 5;
  const RankInputs big = MakeInputs(DType::kF32, ReduceOp::kSum, world, 5000, 1);
  const RankInputs small = MakeInputs(DType::kF32, ReduceOp::kSum, world, world * 7, 2);
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(
      *MakeInprocHarness(), world,
      [&](const CallContext& ctx) -> absl::Status {
        const int r = ctx.rank();
        for (const RankInputs* inputs : {&small, &big, &small}) {
          std::vector<std::byte> buffer = inputs->data[r];
          CollectiveArgs args;
          args.op = ReduceOp::kSum;
          args.count = inputs->count;
          args.input = ViewOf(buffer, DType::kF32);
          args.output = MutableViewOf(buffer, DType::kF32);
          LOOM_RETURN_IF_ERROR(RingAllReduce(ctx, args));
          LOOM_RETURN_IF_ERROR(CheckReduction(*inputs, ReduceOp::kSum, 0, args.output));

          std::vector<std::byte> block(inputs->bytes_per_rank() / world);
          args.count = inputs->count / world;
          args.input = inputs->View(r);
          args.output = MutableViewOf(block, DType::kF32);
          LOOM_RETURN_IF_ERROR(RingReduceScatter(ctx, args));
          LOOM_RETURN_IF_ERROR(
              CheckReduction(*inputs, ReduceOp::kSum, r * args.count, args.output));
        }
        return absl::OkStatus();
      },
      /*chunk_bytes=*/512)));
}

TEST(RingTest, WrongSizesAreInvalidArgument) {
  std::vector<float> four(4), three(3);
  const auto body = [&](const CallContext& ctx) -> absl::Status {
    CollectiveArgs args;
    args.count = 4;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(four));
    args.output = BufferView::Of(absl::MakeSpan(three));
    EXPECT_THAT(RingAllReduce(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("ring all_reduce on rank 0 of 1, count 4: output has 3 "
                                   "elements, expected 4")));
    args.count = 3;
    EXPECT_THAT(RingReduceScatter(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input has 4 elements, expected 3")));
    args.root = 1;
    EXPECT_THAT(RingBroadcast(ctx, args), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("root 1 is not a rank of 1")));
    std::vector<int32_t> ints(4);
    EXPECT_THAT(
        RingReduceScatterBlocks(ctx, ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(four)),
                                BufferView::Of(absl::MakeSpan(ints))),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input has 4 f32, output 4 i32")));
    return absl::OkStatus();
  };
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), 1, body)));
}

TEST(RingTest, RanksThatDisagreeOnTheCountFailAndReturn) {
  // Rank 1 reduces 6 elements, rank 0 only 4: the transport sees the first pair of
  // mismatched messages on both sides, and both ranks return (with their requests
  // cancelled, so nothing writes their buffers after they are freed).
  const auto statuses = RunAlgorithmRanks(
      *MakeInprocHarness(), 2,
      [&](const CallContext& ctx) {
        std::vector<float> data(ctx.rank() == 0 ? 4 : 6, 1.0f);
        CollectiveArgs args;
        args.count = data.size();
        args.input = ConstBufferView::Of(absl::MakeConstSpan(data));
        args.output = BufferView::Of(absl::MakeSpan(data));
        return RingAllReduce(ctx, args);
      },
      kDefaultChunk, absl::Seconds(10));
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bytes")));
  }
}

TEST(RingTest, ARankThatAbortsFailsEveryRankAndNoneHangs) {
  // Rank 2 aborts before the others call. Its neighbours see Unavailable at once; the
  // ranks beyond them are left waiting on neighbours that cancelled their requests,
  // and give up at the deadline. Every rank must return, with its buffers released by
  // the transport (ASan would see a late write into a freed buffer). The others start
  // only once rank 2 has aborted: a neighbour that ran ahead would hand its first
  // chunks to rank 2 as buffered sends and then wait on a stalled ring until the
  // deadline (a loaded CI machine started rank 2's thread late so, once).
  const int world = 5;
  const RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, world, 20000, 3);
  absl::Notification aborted;
  const auto statuses = RunAlgorithmRanks(
      *MakeInprocHarness(), world,
      [&](const CallContext& ctx) {
        if (ctx.rank() == 2) {
          ctx.transport->Abort(absl::AbortedError("rank 2 gives up"));
          aborted.Notify();
          return absl::AbortedError("rank 2 gives up");
        }
        if (!aborted.WaitForNotificationWithTimeout(absl::Seconds(30))) {
          return absl::InternalError("rank 2 did not abort within 30s");
        }
        std::vector<std::byte> out = Garbage(inputs.bytes_per_rank());
        CollectiveArgs args;
        args.count = inputs.count;
        args.input = inputs.View(ctx.rank());
        args.output = MutableViewOf(out, DType::kF32);
        return RingAllReduce(ctx, args);
      },
      kSmallChunk, absl::Seconds(1));
  for (int r = 0; r < world; ++r) {
    EXPECT_THAT(statuses[r].code(),
                ::testing::AnyOf(absl::StatusCode::kUnavailable,
                                 absl::StatusCode::kDeadlineExceeded, absl::StatusCode::kAborted))
        << "rank " << r << ": " << statuses[r];
  }
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 2")));
  EXPECT_THAT(statuses[3], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("rank 2")));
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

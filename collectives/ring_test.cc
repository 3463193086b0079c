#include "collectives/ring.h"

#include <cstddef>
#include <cstdint>
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

AlgorithmUnderTest Ring() {
  AlgorithmUnderTest ring;
  ring.all_reduce = RingAllReduce;
  ring.reduce_scatter = RingReduceScatter;
  ring.all_gather = RingAllGather;
  ring.broadcast = RingBroadcast;
  ring.reduce = RingReduce;
  ring.reduce_scatter_blocks = RingReduceScatterBlocks;
  ring.all_gather_blocks = RingAllGatherBlocks;
  return ring;
}

// The shared matrix (f32 sum and every copy in small chunks, in and out of place;
// i32 max in the default chunk), and every dtype x op with chunks of 256 bytes, so
// that even 1000 elements pipeline through many chunks.
std::vector<AlgorithmCase> Cases() {
  MatrixOptions matrix;
  matrix.small_chunks = MatrixChunks::kFirstType;
  DTypeOpOptions types;
  types.worlds = {3, 5};
  types.counts = {3, 1000};
  types.chunk_bytes = 256;
  // One element per chunk: the most messages, empty chunks in the shorter blocks.
  const std::vector<AlgorithmCase> tiny_chunks = {
      {CollectiveKind::kAllReduce, 4, 37, DType::kF64, ReduceOp::kSum, false, 0, 1},
      {CollectiveKind::kAllReduce, 5, 1001, DType::kI8, ReduceOp::kSum, true, 0, 1},
      {CollectiveKind::kAllReduce, 3, 2, DType::kF16, ReduceOp::kMin, true, 0, 1},
      {CollectiveKind::kBroadcast, 5, 1000, DType::kU8, ReduceOp::kSum, false, 2, 1}};
  return Concat({Matrix(Ring(), matrix), DTypeOpMatrix(Ring(), types), tiny_chunks});
}

// Over a long path (a 4 ms round trip at 250 MB/s, and a shorter one) the ring keeps
// up to kMaxChunksInFlight chunks in flight; every collective it has, on 2, 3 and 5
// ranks, in chunks of 4 KiB so that 65537 elements are many windows long, with one
// rank's window different from the others' (the ring does not need them alike).
std::vector<AlgorithmCase> RingLongPathCases() {
  return LongPathCases(Matrix(Ring()), /*worlds=*/{2, 3, 5});
}

TEST(RingTest, ALongPathWidensTheWindowToItsBandwidthDelayProduct) {
  const int world = 3;
  const PathEstimate path = {absl::Microseconds(100), 1e8};  // 10,000 bytes in flight
  std::vector<absl::Status> statuses = RunAlgorithmRanks(
      *WithPath(MakeInprocHarness(), path), world, [&](const CallContext& ctx) -> absl::Status {
        const int right = (ctx.rank() + 1) % world;
        // 2 x 10,000 bytes over 4 KiB chunks, rounded up, and one more.
        const int window = ChunksInFlight(ctx, 4096, {right}, 2);
        if (window != 6) return absl::InternalError(absl::StrCat("window ", window));
        if (ChunksInFlight(ctx, 1 << 20, {right}, 2) != 2) return absl::InternalError("1 MiB");
        if (ChunksInFlight(ctx, 16, {right}, 2) != kMaxChunksInFlight) {
          return absl::InternalError("16 bytes");
        }
        // Itself: nothing measured.
        if (ChunksInFlight(ctx, 4096, {ctx.rank()}, 3) != 3) return absl::InternalError("self");
        return absl::OkStatus();
      });
  LOOM_EXPECT_OK(AllOk(statuses));
  // A ring rank times the round trip to its right and the rate from its left: the
  // window takes the one from each.
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(
      *WithPaths(MakeInprocHarness(),
                 [](int rank, int peer) {
                   if (peer == (rank + 1) % world) return PathEstimate{absl::Microseconds(100), 0};
                   return PathEstimate{absl::ZeroDuration(), 1e8};
                 }),
      world, [&](const CallContext& ctx) -> absl::Status {
        const int right = (ctx.rank() + 1) % world;
        const int left = (ctx.rank() + world - 1) % world;
        if (ChunksInFlight(ctx, 4096, {right}, 2) != 2) return absl::InternalError("right alone");
        const int window = ChunksInFlight(ctx, 4096, {left, right}, 2);
        return window == 6 ? absl::OkStatus()
                           : absl::InternalError(absl::StrCat("left and right: window ", window));
      })));
  // Without a path estimate the window is the least one.
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), world, [&](const CallContext& ctx) {
    return ChunksInFlight(ctx, 16, {(ctx.rank() + 1) % world}, 2) == 2
               ? absl::OkStatus()
               : absl::InternalError("no path, yet a wider window");
  })));
}

class RingLongPathTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(RingLongPathTest, MatchesTheReference) { LOOM_EXPECT_OK(CheckCase(Ring(), GetParam())); }

INSTANTIATE_TEST_SUITE_P(LongPath, RingLongPathTest, ::testing::ValuesIn(RingLongPathCases()),
                         CaseName);

class RingMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(RingMatrixTest, MatchesTheReference) { LOOM_EXPECT_OK(CheckCase(Ring(), GetParam())); }

INSTANTIATE_TEST_SUITE_P(Shared, RingMatrixTest, ::testing::ValuesIn(Cases()), CaseName);

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
          LOOM_RETURN_IF_ERROR(ExpectReduction(*inputs, ReduceOp::kSum, 0, args.output));

          std::vector<std::byte> block(inputs->bytes_per_rank() / world);
          args.count = inputs->count / world;
          args.input = inputs->View(r);
          args.output = MutableViewOf(block, DType::kF32);
          LOOM_RETURN_IF_ERROR(RingReduceScatter(ctx, args));
          LOOM_RETURN_IF_ERROR(
              ExpectReduction(*inputs, ReduceOp::kSum, r * args.count, args.output));
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
  for (const absl::Status& status :
       RunInPlace(RingAllReduce, CollectiveKind::kAllReduce, {4, 6}, DType::kF32,
                  kDefaultChunkBytes, absl::Seconds(10))) {
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
      kSmallChunkBytes, absl::Seconds(1));
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

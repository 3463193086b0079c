#include "collectives/binomial_tree.h"

#include <algorithm>
#include <atomic>
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

// One call shape. Rooted kinds use `root`; copy-only kinds ignore `op`.
struct Case {
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool in_place = false;
  size_t chunk_bytes = kDefaultChunk;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat("w", c.world, "_n", c.count, "_", DTypeName(c.dtype), "_",
                      ReduceOpName(c.op), "_root", c.root, c.in_place ? "_inplace" : "_outofplace",
                      "_chunk", c.chunk_bytes);
}

std::vector<size_t> Counts(int world) {
  std::vector<size_t> counts = {0, 1, 3, static_cast<size_t>(world - 1), 1000, 65537};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

std::vector<int> Roots(int world) {
  std::vector<int> roots = {0, std::min(1, world - 1), world - 1};
  std::sort(roots.begin(), roots.end());
  roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
  return roots;
}

constexpr int kWorlds[] = {1, 2, 3, 4, 5, 6, 7, 8, 16};

// Every world x count x place (in place with a 4 KiB chunk, so that large counts are
// pipelined in many chunks; out of place with the default chunk), with `roots`
// for rooted kinds. `rotate_dtypes` cycles through every dtype instead of `dtype`
// (copy-only kinds, where the dtype only changes the element width).
std::vector<Case> Matrix(DType dtype, ReduceOp op, bool rooted, bool rotate_dtypes) {
  std::vector<Case> cases;
  int index = 0;
  for (int world : kWorlds) {
    for (size_t count : Counts(world)) {
      // The largest count runs with one root (world - 1: rotated ranks) only,
      // which keeps the test fast under the sanitizers.
      const std::vector<int> roots =
          !rooted ? std::vector<int>{0} : count == 65537 ? std::vector<int>{world - 1} : Roots(world);
      for (int root : roots) {
        for (bool in_place : {false, true}) {
          Case c;
          c.world = world;
          c.count = count;
          c.dtype = rotate_dtypes ? AllDTypes()[index++ % AllDTypes().size()] : dtype;
          c.op = op;
          c.root = root;
          c.in_place = in_place;
          c.chunk_bytes = in_place ? kSmallChunk : kDefaultChunk;
          cases.push_back(c);
        }
      }
    }
  }
  return cases;
}

// Every dtype x op, on a few worlds and counts, 4 KiB chunks.
std::vector<Case> DTypeOpProduct(bool rooted) {
  std::vector<Case> cases;
  for (int world : {3, 8}) {
    for (size_t count : {size_t{1}, size_t{1000}}) {
      for (DType dtype : AllDTypes()) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
          Case c;
          c.world = world;
          c.count = count;
          c.dtype = dtype;
          c.op = op;
          c.root = rooted ? world - 1 : 0;
          c.in_place = (cases.size() % 2) == 1;
          c.chunk_bytes = kSmallChunk;
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

uint64_t Seed(const Case& c) {
  return static_cast<uint64_t>(c.world) * 7919 + c.count * 31 + static_cast<uint64_t>(c.dtype) * 3 +
         static_cast<uint64_t>(c.op);
}

// Per-rank buffers of one run. `input[r]` starts as a copy of the seeded input, so a
// run that writes into an out-of-place input shows.
struct Buffers {
  Buffers(const RankInputs& inputs, size_t output_elements, const Case& c) {
    for (int r = 0; r < c.world; ++r) {
      input.push_back(inputs.data[r]);
      output.emplace_back(output_elements * DTypeSize(c.dtype), std::byte{0xCD});
    }
  }
  std::vector<std::vector<std::byte>> input;
  std::vector<std::vector<std::byte>> output;
};

absl::Status ExpectInputsUntouched(const RankInputs& inputs, const Buffers& buffers) {
  for (size_t r = 0; r < buffers.input.size(); ++r) {
    LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(r), ViewOf(buffers.input[r], inputs.dtype),
                                         absl::StrCat("rank ", r, "'s out-of-place input")));
  }
  return absl::OkStatus();
}

class BinomialAllReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinomialAllReduceTest, EveryRankHoldsTheSameReduction) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  Buffers buffers(inputs, c.count, c);
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        std::vector<std::byte>& out = c.in_place ? buffers.input[r] : buffers.output[r];
        CollectiveArgs args;
        args.kind = CollectiveKind::kAllReduce;
        args.op = c.op;
        args.count = c.count;
        args.output = MutableViewOf(out, c.dtype);
        args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(buffers.input[r], c.dtype);
        LOOM_RETURN_IF_ERROR(BinomialAllReduce(ctx, args));
        // Rank 0 against the inputs here; the others bit for bit against rank 0
        // below, which checks them as fully with one reference computation, not n.
        if (r != 0) return absl::OkStatus();
        return ExpectReduction(inputs, c.op, 0, args.output);
      },
      c.chunk_bytes)));
  const auto& results = c.in_place ? buffers.input : buffers.output;
  for (int r = 1; r < c.world; ++r) {
    LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(results[0], c.dtype), ViewOf(results[r], c.dtype),
                                   absl::StrCat("rank ", r, " against rank 0")));
  }
  if (!c.in_place) {
    LOOM_EXPECT_OK(ExpectInputsUntouched(inputs, buffers));
  }
}

INSTANTIATE_TEST_SUITE_P(
    F32SumAndI32Max, BinomialAllReduceTest,
    ::testing::ValuesIn(Concat(Matrix(DType::kF32, ReduceOp::kSum, false, false),
                               Matrix(DType::kI32, ReduceOp::kMax, false, false))),
    CaseName);
INSTANTIATE_TEST_SUITE_P(DTypesAndOps, BinomialAllReduceTest,
                         ::testing::ValuesIn(DTypeOpProduct(false)), CaseName);

class BinomialReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinomialReduceTest, RootHoldsTheReductionAndOthersAreUntouched) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  Buffers buffers(inputs, c.count, c);
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        CollectiveArgs args;
        args.kind = CollectiveKind::kReduce;
        args.op = c.op;
        args.root = c.root;
        args.count = c.count;
        if (r == c.root) {
          args.output =
              MutableViewOf(c.in_place ? buffers.input[r] : buffers.output[r], c.dtype);
        }
        args.input = c.in_place && r == c.root ? ConstBufferView(args.output)
                                               : ViewOf(buffers.input[r], c.dtype);
        LOOM_RETURN_IF_ERROR(BinomialReduce(ctx, args));
        if (r != c.root) return absl::OkStatus();
        return ExpectReduction(inputs, c.op, 0, args.output);
      },
      c.chunk_bytes)));
  for (int r = 0; r < c.world; ++r) {
    if (c.in_place && r == c.root) continue;
    LOOM_EXPECT_OK(ExpectSameBytes(inputs.View(r), ViewOf(buffers.input[r], c.dtype),
                                   absl::StrCat("rank ", r, "'s input")));
  }
}

INSTANTIATE_TEST_SUITE_P(
    F32SumAndI32Max, BinomialReduceTest,
    ::testing::ValuesIn(Concat(Matrix(DType::kF32, ReduceOp::kSum, true, false),
                               Matrix(DType::kI32, ReduceOp::kMax, true, false))),
    CaseName);
INSTANTIATE_TEST_SUITE_P(DTypesAndOps, BinomialReduceTest,
                         ::testing::ValuesIn(DTypeOpProduct(true)), CaseName);

class BinomialBroadcastTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinomialBroadcastTest, EveryRankHoldsTheRootsBytes) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  Buffers buffers(inputs, c.count, c);
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        CollectiveArgs args;
        args.kind = CollectiveKind::kBroadcast;
        args.root = c.root;
        args.count = c.count;
        // In place: the root broadcasts from its output; others pass no input.
        args.output = MutableViewOf(c.in_place && r == c.root ? buffers.input[r] : buffers.output[r],
                                    c.dtype);
        if (r == c.root) {
          args.input = c.in_place ? ConstBufferView(args.output) : ViewOf(buffers.input[r], c.dtype);
        }
        LOOM_RETURN_IF_ERROR(BinomialBroadcast(ctx, args));
        return ExpectSameBytes(inputs.View(c.root), args.output, absl::StrCat("rank ", r));
      },
      c.chunk_bytes)));
  LOOM_EXPECT_OK(ExpectInputsUntouched(inputs, buffers));
}

INSTANTIATE_TEST_SUITE_P(AllWorldsCountsRootsDTypes, BinomialBroadcastTest,
                         ::testing::ValuesIn(Matrix(DType::kF32, ReduceOp::kSum, true, true)),
                         CaseName);

class BinomialGatherTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinomialGatherTest, RootHoldsEveryBlockInRankOrder) {
  const Case c = GetParam();
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  Buffers buffers(inputs, c.world * c.count, c);
  const size_t block_bytes = inputs.bytes_per_rank();
  if (c.in_place) {
    std::copy(inputs.data[c.root].begin(), inputs.data[c.root].end(),
              buffers.output[c.root].begin() + c.root * block_bytes);
  }
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        CollectiveArgs args;
        args.kind = CollectiveKind::kGather;
        args.root = c.root;
        args.count = c.count;
        args.input = ViewOf(buffers.input[r], c.dtype);
        if (r == c.root) {
          args.output = MutableViewOf(buffers.output[r], c.dtype);
          if (c.in_place) args.input = Slice(ConstBufferView(args.output), r * c.count, c.count);
        }
        LOOM_RETURN_IF_ERROR(BinomialGather(ctx, args));
        if (r != c.root) return absl::OkStatus();
        for (int from = 0; from < c.world; ++from) {
          LOOM_RETURN_IF_ERROR(ExpectSameBytes(inputs.View(from),
                                               Slice(ConstBufferView(args.output), from * c.count, c.count),
                                               absl::StrCat("block ", from)));
        }
        return absl::OkStatus();
      },
      c.chunk_bytes)));
  LOOM_EXPECT_OK(ExpectInputsUntouched(inputs, buffers));
}

INSTANTIATE_TEST_SUITE_P(AllWorldsCountsRootsDTypes, BinomialGatherTest,
                         ::testing::ValuesIn(Matrix(DType::kF32, ReduceOp::kSum, true, true)),
                         CaseName);

class BinomialScatterTest : public ::testing::TestWithParam<Case> {};

TEST_P(BinomialScatterTest, EveryRankHoldsItsBlockOfTheRootsInput) {
  const Case c = GetParam();
  // The root's input is every rank's seeded input, concatenated in rank order.
  const RankInputs inputs = MakeInputs(c.dtype, c.op, c.world, c.count, Seed(c));
  std::vector<std::byte> root_input;
  for (const auto& data : inputs.data) root_input.insert(root_input.end(), data.begin(), data.end());
  const std::vector<std::byte> original = root_input;
  std::vector<std::vector<std::byte>> outputs(
      c.world, std::vector<std::byte>(inputs.bytes_per_rank(), std::byte{0xCD}));
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(
      *harness, c.world,
      [&](const CallContext& ctx) {
        const int r = ctx.rank();
        CollectiveArgs args;
        args.kind = CollectiveKind::kScatter;
        args.root = c.root;
        args.count = c.count;
        args.output = MutableViewOf(outputs[r], c.dtype);
        if (r == c.root) {
          args.input = ViewOf(root_input, c.dtype);
          if (c.in_place) args.output = Slice(MutableViewOf(root_input, c.dtype), r * c.count, c.count);
        }
        LOOM_RETURN_IF_ERROR(BinomialScatter(ctx, args));
        return ExpectSameBytes(inputs.View(r), args.output, absl::StrCat("rank ", r));
      },
      c.chunk_bytes)));
  LOOM_EXPECT_OK(ExpectSameBytes(ViewOf(original, c.dtype), ViewOf(root_input, c.dtype),
                                 "the root's input"));
}

INSTANTIATE_TEST_SUITE_P(AllWorldsCountsRootsDTypes, BinomialScatterTest,
                         ::testing::ValuesIn(Matrix(DType::kF32, ReduceOp::kSum, true, true)),
                         CaseName);

class BinomialBarrierTest : public ::testing::TestWithParam<int> {};

TEST_P(BinomialBarrierTest, NoRankLeavesBeforeAllArrived) {
  const int world = GetParam();
  std::atomic<int> arrived{0};
  auto harness = MakeInprocHarness();
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*harness, world, [&](const CallContext& ctx) {
    for (int round = 1; round <= 3; ++round) {
      arrived.fetch_add(1);
      LOOM_RETURN_IF_ERROR(BinomialBarrier(ctx, CollectiveArgs{}));
      // Nobody can have entered the next round's barrier before everybody left
      // this one, so the count is exactly round * world here.
      const int seen = arrived.load();
      if (seen < round * world) {
        return absl::InternalError(absl::StrCat("rank ", ctx.rank(), " left barrier ", round,
                                                " after ", seen, " arrivals"));
      }
      LOOM_RETURN_IF_ERROR(BinomialBarrier(ctx, CollectiveArgs{}));
    }
    return absl::OkStatus();
  })));
}

INSTANTIATE_TEST_SUITE_P(Worlds, BinomialBarrierTest, ::testing::ValuesIn(kWorlds));

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
  auto harness = MakeInprocHarness();
  const std::vector<absl::Status> statuses = RunAlgorithmRanks(
      *harness, 4,
      [&](const CallContext& ctx) {
        // Rank 3 believes in one more element than the others.
        const size_t count = ctx.rank() == 3 ? 9 : 8;
        std::vector<int64_t> data(count, ctx.rank());
        CollectiveArgs args;
        args.count = count;
        args.output = BufferView::Of(absl::MakeSpan(data));
        args.input = args.output;
        return BinomialAllReduce(ctx, args);
      },
      kDefaultChunk, absl::Seconds(2));
  // Rank 3's message to rank 2 has the wrong size (both sides see it); the others
  // learn of the failure by their deadline at the latest.
  EXPECT_THAT(statuses[3], StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr("sent 72 bytes with tag 0 to rank 2")));
  for (const absl::Status& status : statuses) EXPECT_FALSE(status.ok());
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

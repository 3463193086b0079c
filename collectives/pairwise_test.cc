#include "collectives/pairwise.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
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

AlgorithmUnderTest Pairwise() {
  AlgorithmUnderTest pairwise;
  pairwise.all_to_all = PairwiseAllToAll;
  return pairwise;
}

class PairwiseMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(PairwiseMatrixTest, MatchesTheReference) {
  LOOM_EXPECT_OK(CheckCase(Pairwise(), GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Shared, PairwiseMatrixTest, ::testing::ValuesIn(Matrix(Pairwise())),
                         CaseName);

// SendMatrix: counts[i][j] elements go from rank i to rank j; about one in four is
// empty, the rest up to `max_count`, seeded.
std::vector<std::vector<size_t>> SendMatrix(int world, size_t max_count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<size_t>> counts(world, std::vector<size_t>(world));
  for (auto& row : counts) {
    for (size_t& entry : row) entry = rng() % 4 == 0 ? 0 : 1 + rng() % max_count;
  }
  return counts;
}

// Offset of block `index` in a buffer packed with `counts` in rank order.
size_t OffsetOf(const std::vector<size_t>& counts, int index) {
  size_t offset = 0;
  for (int k = 0; k < index; ++k) offset += counts[k];
  return offset;
}

// All-to-allv, which only this algorithm has: `count` is the largest block.
class PairwiseAllToAllVTest : public ::testing::TestWithParam<AlgorithmCase> {};

TEST_P(PairwiseAllToAllVTest, EveryBlockLandsAtItsOffset) {
  const AlgorithmCase c = GetParam();
  const int world = c.world;
  const auto matrix = SendMatrix(world, std::max<size_t>(c.count, 1), c.seed());
  std::vector<std::vector<size_t>> send(world), recv(world, std::vector<size_t>(world));
  size_t longest = 0;
  for (int i = 0; i < world; ++i) {
    send[i] = matrix[i];
    for (int j = 0; j < world; ++j) recv[j][i] = matrix[i][j];
  }
  for (int i = 0; i < world; ++i) {
    longest = std::max({longest, OffsetOf(send[i], world), OffsetOf(recv[i], world)});
  }
  // Inputs of `longest` elements; rank r sends the first sum(send[r]) of them.
  const RankInputs inputs = MakeInputs(c.dtype, ReduceOp::kSum, world, longest, c.seed());
  std::vector<std::vector<std::byte>> outputs(world);  // each rank's thread writes its own
  LOOM_ASSERT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), world, [&](const CallContext& ctx) {
    const int r = ctx.rank();
    std::vector<std::byte>& out = outputs[r];
    out = c.in_place ? inputs.data[r] : Garbage(inputs.bytes_per_rank());
    CollectiveArgs args;
    args.kind = CollectiveKind::kAllToAllV;
    args.send_counts = send[r];
    args.recv_counts = recv[r];
    args.input =
        Slice(c.in_place ? ViewOf(out, c.dtype) : inputs.View(r), 0, OffsetOf(send[r], world));
    args.output = Slice(MutableViewOf(out, c.dtype), 0, OffsetOf(recv[r], world));
    return PairwiseAllToAllV(ctx, args);
  })));
  for (int r = 0; r < world; ++r) {
    for (int b = 0; b < world; ++b) {
      LOOM_EXPECT_OK(
          ExpectSameBytes(Slice(inputs.View(b), OffsetOf(send[b], r), matrix[b][r]),
                          Slice(ViewOf(outputs[r], c.dtype), OffsetOf(recv[r], b), matrix[b][r]),
                          absl::StrCat("rank ", r, ", block from rank ", b)));
    }
  }
}

std::vector<AlgorithmCase> VCases() {
  std::vector<AlgorithmCase> cases;
  AlgorithmCase c;
  c.kind = CollectiveKind::kAllToAllV;
  for (int world : {1, 2, 3, 4, 5, 8, 16}) {
    for (size_t max_count : {size_t{1}, size_t{7}, size_t{3001}}) {
      for (bool in_place : {false, true}) {
        c.world = world;
        c.count = max_count;
        c.in_place = in_place;
        cases.push_back(c);
      }
    }
  }
  c.world = 4;
  c.count = 100;
  for (DType dtype : {DType::kI8, DType::kI64}) {
    c.dtype = dtype;
    c.in_place = dtype == DType::kI64;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Matrix, PairwiseAllToAllVTest, ::testing::ValuesIn(VCases()), CaseName);

TEST(PairwiseTest, BuffersThatDoNotFitTheCountsAreInvalidArgument) {
  std::vector<float> six(6), five(5);
  const auto body = [&](const CallContext& ctx) -> absl::Status {
    CollectiveArgs args;
    args.count = 3;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(six));
    args.output = BufferView::Of(absl::MakeSpan(five));
    EXPECT_THAT(PairwiseAllToAll(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("pairwise all_to_all on rank 0 of 1, count 3: input has 6 "
                                   "elements, expected 3")));
    const std::vector<size_t> one = {6}, two = {3, 3}, five_counts = {5};
    args.send_counts = two;
    args.recv_counts = one;
    EXPECT_THAT(
        PairwiseAllToAllV(ctx, args),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("send_counts has 2 entries and recv_counts 1, expected 1 each")));
    args.send_counts = one;
    EXPECT_THAT(PairwiseAllToAllV(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("recv_counts add up to 6 elements but output has 5")));
    args.recv_counts = five_counts;
    EXPECT_THAT(PairwiseAllToAllV(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("send_counts[0] = 6 but recv_counts[0] = 5")));
    args.send_counts = five_counts;
    EXPECT_THAT(PairwiseAllToAllV(ctx, args),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("send_counts add up to 5 elements but input has 6")));
    return absl::OkStatus();
  };
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), 1, body)));
}

TEST(PairwiseTest, CountsOverflowingSizeTAreInvalidArgument) {
  std::vector<float> one(1);
  const std::vector<size_t> huge = {~size_t{0}, 2}, ones = {0, 1};
  LOOM_EXPECT_OK(AllOk(RunAlgorithmRanks(*MakeInprocHarness(), 2, [&](const CallContext& ctx) {
    CollectiveArgs args;
    args.input = ConstBufferView::Of(absl::MakeConstSpan(one));
    args.output = BufferView::Of(absl::MakeSpan(one));
    args.send_counts = huge;
    args.recv_counts = ones;
    EXPECT_THAT(
        PairwiseAllToAllV(ctx, args),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("send_counts overflow at entry 1")));
    return absl::OkStatus();
  })));
}

TEST(PairwiseTest, RanksThatDisagreeOnABlockSizeFailAndReturn) {
  // Rank 1 sends 2 elements to rank 0, which expects 3: both fail at that step.
  const std::vector<size_t> two_two = {2, 2}, two_three = {2, 3};
  const auto statuses = RunAlgorithmRanks(
      *MakeInprocHarness(), 2,
      [&](const CallContext& ctx) {
        std::vector<float> in(4), out(ctx.rank() == 0 ? 5 : 4);
        CollectiveArgs args;
        args.input = ConstBufferView::Of(absl::MakeConstSpan(in));
        args.output = BufferView::Of(absl::MakeSpan(out));
        args.send_counts = two_two;
        args.recv_counts = ctx.rank() == 0 ? two_three : two_two;
        return PairwiseAllToAllV(ctx, args);
      },
      size_t{256} << 10, absl::Seconds(10));
  for (const absl::Status& status : statuses) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("bytes")));
  }
}

}  // namespace
}  // namespace collectives_internal
}  // namespace loom

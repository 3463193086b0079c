#include "zero3/gradient_all_reducer.h"

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "collectives/inproc_ranks_testing.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Each rank's seeded, distinct values; the average over ranks is the reference.
std::vector<float> Values(int rank, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed * 131 + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// Spans of several sizes (one element, a ragged middle, one above 1 MiB) enqueued
// back to back on each rank: each equals the whole buffer's all-reduce, bitwise
// (one operation per element either way, at dp 2 and with a deterministic
// communicator at 3 and 4).
TEST(GradientAllReducerTest, UnitsEqualTheWholeBufferAllReduce) {
  const uint32_t seed = 20261125;
  std::cout << "seed " << seed << "\n";
  const std::vector<int64_t> sizes = {1, 7, 1000, 333, (int64_t{1} << 18) + 5, 64};
  int64_t total = 0;
  for (const int64_t n : sizes) total += n;
  for (const int ranks : {2, 3, 4}) {
    SCOPED_TRACE(testing::Message() << ranks << " ranks");
    CommunicatorOptions options = InprocTestOptions();
    options.deterministic = ranks > 2;
    RunInprocRanks(ranks, [&](int rank, Communicator& comm) {
      std::vector<float> reference = Values(rank, total, seed);
      std::vector<float> units = reference;
      ASSERT_THAT(comm.AllReduce(absl::MakeSpan(reference), ReduceOp::kAvg), IsOk());
      absl::StatusOr<std::shared_ptr<GradientAllReducer>> reducer =
          GradientAllReducer::Create(&comm, {});
      ASSERT_THAT(reducer.status(), IsOk());
      int64_t offset = 0, ticket = 0;
      for (const int64_t n : sizes) {
        ticket = (*reducer)->Enqueue(absl::MakeSpan(units).subspan(
            static_cast<size_t>(offset), static_cast<size_t>(n)));
        offset += n;
      }
      EXPECT_EQ(ticket, static_cast<int64_t>(sizes.size()));
      ASSERT_THAT((*reducer)->Wait(ticket), IsOk());
      for (size_t i = 0; i < units.size(); ++i) {
        ASSERT_EQ(units[i], reference[i]) << "element " << i << " rank " << rank;
      }
      EXPECT_GE((*reducer)->busy_seconds(), 0.0);
      EXPECT_THAT((*reducer)->Wait(0), IsOk());
    }, options);
  }
}

// The rank's own thread computes while the reducer's thread communicates: the
// second unit is enqueued after the first is (likely) running, and both are right.
TEST(GradientAllReducerTest, ReusesItsThreadAcrossSteps) {
  RunInprocRanks(2, [&](int rank, Communicator& comm) {
    absl::StatusOr<std::shared_ptr<GradientAllReducer>> reducer =
        GradientAllReducer::Create(&comm, {});
    ASSERT_THAT(reducer.status(), IsOk());
    for (int step = 0; step < 20; ++step) {
      std::vector<float> a(100, static_cast<float>(rank + step));
      std::vector<float> b(3, static_cast<float>(2 * rank));
      const int64_t first = (*reducer)->Enqueue(absl::MakeSpan(a));
      const int64_t second = (*reducer)->Enqueue(absl::MakeSpan(b));
      ASSERT_THAT((*reducer)->Wait(second), IsOk());
      EXPECT_EQ(first + 1, second);
      EXPECT_EQ(a[99], 0.5f + static_cast<float>(step));  // (step + step + 1) / 2
      EXPECT_EQ(b[0], 1.0f);                               // (0 + 2) / 2
    }
    EXPECT_EQ((*reducer)->enqueued(), 40);
  });
}

// A failed all-reduce (the peer aborted its communicator) is every later Wait's
// error, and nothing hangs.
TEST(GradientAllReducerTest, AFailureIsEveryLaterWaitsError) {
  CommunicatorOptions options = InprocTestOptions();
  options.timeout = absl::Seconds(2);
  RunInprocRanks(2, [&](int rank, Communicator& comm) {
    if (rank == 1) return;  // never joins: rank 0's all-reduce times out
    absl::StatusOr<std::shared_ptr<GradientAllReducer>> reducer =
        GradientAllReducer::Create(&comm, {});
    ASSERT_THAT(reducer.status(), IsOk());
    std::vector<float> a(10, 1.0f), b(10, 1.0f);
    (*reducer)->Enqueue(absl::MakeSpan(a));
    const int64_t second = (*reducer)->Enqueue(absl::MakeSpan(b));
    const absl::Status status = (*reducer)->Wait(second);
    EXPECT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr("gradient all-reduce 1"));
    EXPECT_EQ((*reducer)->Wait(second).code(), status.code());
  }, options);
}

TEST(GradientAllReducerTest, BadOptionsAreRefused) {
  EXPECT_THAT(GradientAllReducer::Create(nullptr, {}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null communicator")));
  RunInprocRanks(1, [&](int, Communicator& comm) {
    GradientAllReducerOptions options;
    options.wait_timeout = absl::ZeroDuration();
    EXPECT_THAT(GradientAllReducer::Create(&comm, options).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("wait_timeout")));
  });
}

}  // namespace
}  // namespace loom

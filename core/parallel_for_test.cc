// ParallelFor: every index is visited exactly once, on at most as many threads as asked
// (and at most n), ranges contiguous and near-equal, two ranges really at once; errors
// come back; nested calls run inline; bad arguments are refused with the value.
// ParallelForEach: the same on ComputeThreads(), short passes on the caller.
#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ParallelForTest, VisitsEveryIndexOnceInNearEqualRanges) {
  for (const int threads : {1, 2, 3, 8}) {
    for (const int64_t n : {0, 1, 2, 7, 64}) {
      std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
      Mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      std::set<std::thread::id> ids;
      LOOM_ASSERT_OK(ParallelFor(n, threads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
        MutexLock lock(&mu);
        ranges.emplace_back(begin, end);
        ids.insert(std::this_thread::get_id());
        return absl::OkStatus();
      }));
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(visits[i].load(), 1) << "n " << n << " threads " << threads << " index " << i;
      }
      const size_t want = static_cast<size_t>(std::min<int64_t>(threads, n));
      EXPECT_EQ(ranges.size(), want) << "n " << n << " threads " << threads;
      // A helper slow to wake leaves its range to another thread.
      EXPECT_GE(ids.size(), want > 0 ? 1u : 0u);
      EXPECT_LE(ids.size(), want) << "n " << n << " threads " << threads;
      for (const auto& [begin, end] : ranges) {
        EXPECT_GE(end - begin, n / threads);
        EXPECT_LE(end - begin, n / threads + 1);
      }
    }
  }
}

// Range 0 waits (with a deadline) until range 1 has started: two threads run at once.
TEST(ParallelForTest, TwoRangesRunAtOnce) {
  std::atomic<bool> second_started{false};
  LOOM_ASSERT_OK(ParallelFor(2, 2, [&](int64_t begin, int64_t) -> absl::Status {
    if (begin == 1) {
      second_started.store(true);
      return absl::OkStatus();
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!second_started.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        return absl::DeadlineExceededError("range 1 never started beside range 0");
      }
      std::this_thread::yield();
    }
    return absl::OkStatus();
  }));
}

TEST(ParallelForTest, NestedCallsRunInlineOnTheirThread) {
  std::vector<std::atomic<int>> visits(4 * 6);
  std::atomic<int> moved{0};
  LOOM_ASSERT_OK(ParallelFor(4, 2, [&](int64_t begin, int64_t end) -> absl::Status {
    const std::thread::id outer = std::this_thread::get_id();
    for (int64_t i = begin; i < end; ++i) {
      LOOM_RETURN_IF_ERROR(ParallelFor(6, 2, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != outer) moved.fetch_add(1);
        for (int64_t j = b; j < e; ++j) visits[static_cast<size_t>(i * 6 + j)].fetch_add(1);
        return absl::OkStatus();
      }));
    }
    return absl::OkStatus();
  }));
  for (size_t k = 0; k < visits.size(); ++k) EXPECT_EQ(visits[k].load(), 1) << k;
  EXPECT_EQ(moved.load(), 0);
}

TEST(ParallelForTest, ComputeThreadsAreSetProcessWide) {
  const int before = ComputeThreads();
  EXPECT_EQ(before, 1);
  LOOM_ASSERT_OK(SetComputeThreads(3));
  EXPECT_EQ(ComputeThreads(), 3);
  EXPECT_THAT(SetComputeThreads(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("SetComputeThreads: 0 threads")));
  EXPECT_THAT(SetComputeThreads(1025), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("1025 threads; need 1 to 1024")));
  EXPECT_EQ(ComputeThreads(), 3);
  LOOM_ASSERT_OK(SetComputeThreads(before));
}

TEST(ParallelForEachTest, SplitsOnlyPassesOfAtLeastTwoGrains) {
  const int before = ComputeThreads();
  LOOM_ASSERT_OK(SetComputeThreads(4));
  // {n, grain, the most ranges allowed}
  const int64_t cases[][3] = {{0, 8, 0}, {1, 8, 1}, {15, 8, 1}, {16, 8, 2}, {40, 8, 4},
                              {1000, 8, 4}, {5, 0, 4}, {3, -2, 3}};
  for (const auto& c : cases) {
    const int64_t n = c[0], grain = c[1];
    std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
    Mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    ParallelForEach(n, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
      MutexLock lock(&mu);
      ranges.emplace_back(begin, end);
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(visits[static_cast<size_t>(i)].load(), 1);
    EXPECT_EQ(static_cast<int64_t>(ranges.size()), c[2]) << "n " << n << " grain " << grain;
    for (const auto& [begin, end] : ranges) {
      EXPECT_GE(end - begin, std::min<int64_t>(n, std::max<int64_t>(grain, 1)))
          << "n " << n << " grain " << grain;
    }
  }
  LOOM_ASSERT_OK(SetComputeThreads(before));
}

TEST(ParallelForTest, ReturnsTheFirstRangesError) {
  const absl::Status status = ParallelFor(4, 4, [](int64_t begin, int64_t) {
    return begin >= 2 ? absl::InternalError(absl::StrCat("range at ", begin)) : absl::OkStatus();
  });
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInternal, HasSubstr("range at 2")));
}

TEST(ParallelForTest, RefusesBadArguments) {
  auto body = [](int64_t, int64_t) { return absl::OkStatus(); };
  EXPECT_THAT(ParallelFor(8, 0, body), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("threads 0 must be in [1, 1024]")));
  EXPECT_THAT(ParallelFor(8, 1025, body),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("threads 1025")));
  EXPECT_THAT(ParallelFor(-1, 2, body),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n -1 must be >= 0")));
}

}  // namespace
}  // namespace loom

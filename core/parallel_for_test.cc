// ParallelFor: every index is visited exactly once, on as many threads as asked (at
// most n), ranges contiguous and near-equal; errors come back; bad arguments are
// refused with the value.
#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> ranges;
      std::set<std::thread::id> ids;
      LOOM_ASSERT_OK(ParallelFor(n, threads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) visits[i].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ranges.emplace_back(begin, end);
        ids.insert(std::this_thread::get_id());
        return absl::OkStatus();
      }));
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(visits[i].load(), 1) << "n " << n << " threads " << threads << " index " << i;
      }
      const size_t want = static_cast<size_t>(std::min<int64_t>(threads, n));
      EXPECT_EQ(ranges.size(), want) << "n " << n << " threads " << threads;
      EXPECT_EQ(ids.size(), want) << "n " << n << " threads " << threads;
      for (const auto& [begin, end] : ranges) {
        EXPECT_GE(end - begin, n / threads);
        EXPECT_LE(end - begin, n / threads + 1);
      }
    }
  }
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

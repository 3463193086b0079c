// HelperTeam: every part runs exactly once, on up to `threads` threads, from several
// calling threads at once (each with its own team); the first failing part's status
// comes back; idle helpers sleep and wake for the next job.
#include "core/internal/helper_team.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace core_internal {
namespace {

using ::testing::HasSubstr;

TEST(HelperTeamTest, EveryPartRunsOnceOnAtMostThreadsThreads) {
  HelperTeam& team = HelperTeam::ForThisThread();
  for (int threads : {1, 2, 3, 4}) {
    for (int parts : {0, 1, 2, 5, 64}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(parts));
      Mutex mu;
      std::set<std::thread::id> ids;
      ASSERT_THAT(team.Run(threads, parts,
                           [&](int i) {
                             runs[static_cast<size_t>(i)].fetch_add(1);
                             MutexLock lock(&mu);
                             ids.insert(std::this_thread::get_id());
                             return absl::OkStatus();
                           }),
                  IsOk());
      for (int i = 0; i < parts; ++i) {
        EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << threads << " " << parts << " " << i;
      }
      EXPECT_LE(static_cast<int>(ids.size()), std::max(1, std::min(threads, parts)));
    }
  }
  EXPECT_EQ(team.helpers(), 3);
}

TEST(HelperTeamTest, ReturnsTheLowestFailingPart) {
  HelperTeam& team = HelperTeam::ForThisThread();
  for (int threads : {1, 2, 4}) {
    const absl::Status s = team.Run(threads, 8, [](int i) {
      return i == 3 || i == 6 ? absl::InternalError(absl::StrCat("part ", i)) : absl::OkStatus();
    });
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("part 3"))) << threads;
  }
}

// A Run from inside a part runs its parts inline on that thread: no helpers of
// helpers, every part still once, errors still returned.
TEST(HelperTeamTest, NestedRunRunsInline) {
  HelperTeam& team = HelperTeam::ForThisThread();
  constexpr int kOuter = 4, kInner = 5;
  std::vector<std::atomic<int>> runs(kOuter * kInner);
  std::vector<int> inner_threads(kOuter, 0);
  const absl::Status s = team.Run(2, kOuter, [&](int i) -> absl::Status {
    const std::thread::id outer_id = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
    const absl::Status inner = HelperTeam::ForThisThread().Run(2, kInner, [&](int j) {
      runs[static_cast<size_t>(i * kInner + j)].fetch_add(1);
      if (std::this_thread::get_id() != outer_id) elsewhere.fetch_add(1);
      return j == 4 && i == 2 ? absl::InternalError("inner 2.4") : absl::OkStatus();
    });
    inner_threads[static_cast<size_t>(i)] = elsewhere.load();
    return inner;
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal, HasSubstr("inner 2.4")));
  for (int k = 0; k < kOuter * kInner; ++k) EXPECT_EQ(runs[static_cast<size_t>(k)].load(), 1) << k;
  for (int i = 0; i < kOuter; ++i) EXPECT_EQ(inner_threads[static_cast<size_t>(i)], 0) << i;
}

// Tensor-parallel ranks: four callers, each with a team of its own, many jobs each,
// some spaced out so that their helpers go to sleep in between.
TEST(HelperTeamTest, CallersRunTheirJobsAtOnce) {
  constexpr int kCallers = 4, kJobs = 200, kParts = 7;
  std::vector<std::thread> callers;
  std::vector<int64_t> sums(kCallers, 0);
  std::vector<int> failures(kCallers, 0);
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      HelperTeam& team = HelperTeam::ForThisThread();
      for (int job = 0; job < kJobs; ++job) {
        std::vector<int64_t> out(kParts, 0);
        const absl::Status s = team.Run(2, kParts, [&](int i) {
          out[static_cast<size_t>(i)] = int64_t{1000} * job + i;
          return absl::OkStatus();
        });
        if (!s.ok()) ++failures[static_cast<size_t>(c)];
        for (int64_t v : out) sums[static_cast<size_t>(c)] += v;
        if (job % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  for (std::thread& t : callers) t.join();
  const int64_t expected = int64_t{1000} * kParts * (kJobs * (kJobs - 1) / 2) +
                           int64_t{kJobs} * (kParts * (kParts - 1) / 2);
  for (int c = 0; c < kCallers; ++c) {
    EXPECT_EQ(failures[static_cast<size_t>(c)], 0);
    EXPECT_EQ(sums[static_cast<size_t>(c)], expected) << "caller " << c;
  }
}

}  // namespace
}  // namespace core_internal
}  // namespace loom

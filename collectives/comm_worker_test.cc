#include "collectives/comm_worker.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/idle_wait.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "core/thread_priority.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(CommWorkerTest, JobsRunInSubmissionOrder) {
  std::vector<int> order;  // written by the worker only, read after Wait
  CommWorker worker;
  CommWorker::Ticket last = 0;
  for (int i = 0; i < 100; ++i) {
    last = worker.Submit([&order, i] {
      order.push_back(i);
      return absl::OkStatus();
    });
  }
  LOOM_ASSERT_OK(worker.Wait(last, absl::Now() + absl::Seconds(30)));
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
}

// Jobs wait for peers by napping (core/idle_wait.h); the creator keeps yielding.
TEST(CommWorkerTest, JobsNapWhenIdleTheCreatorYields) {
  IdleWait inside = IdleWait::kYield;
  CommWorker worker;
  const CommWorker::Ticket t = worker.Submit([&inside] {
    inside = ThisThreadIdleWait();
    return absl::OkStatus();
  });
  LOOM_ASSERT_OK(worker.Wait(t, absl::Now() + absl::Seconds(30)));
  EXPECT_EQ(inside, IdleWait::kNap);
  EXPECT_EQ(ThisThreadIdleWait(), IdleWait::kYield);
}

TEST(CommWorkerTest, TheFirstErrorStaysWithLaterTicketsOnly) {
  CommWorker worker;
  std::atomic<bool> ran_after{false};
  const CommWorker::Ticket ok = worker.Submit([] { return absl::OkStatus(); });
  const CommWorker::Ticket bad = worker.Submit([] { return absl::UnavailableError("peer 3 gone"); });
  const CommWorker::Ticket after = worker.Submit([&ran_after] {
    ran_after = true;
    return absl::OkStatus();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  LOOM_EXPECT_OK(worker.Wait(ok, deadline));
  EXPECT_THAT(worker.Wait(bad, deadline),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 3 gone")));
  EXPECT_THAT(worker.Wait(after, deadline), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 3 gone")));
  EXPECT_THAT(worker.WaitAll(deadline), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer 3 gone")));
  EXPECT_FALSE(ran_after);  // dropped: a collective after a failed one is not run
}

TEST(CommWorkerTest, AWaitPastItsDeadlineSaysSo) {
  std::atomic<bool> release{false};
  CommWorker worker;
  const CommWorker::Ticket stuck = worker.Submit([&release] {
    while (!release.load()) absl::SleepFor(absl::Milliseconds(1));
    return absl::OkStatus();
  });
  EXPECT_THAT(worker.Wait(stuck, absl::Now() + absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("collective job 1 has not finished by its deadline (0 of 1")));
  release.store(true);
  LOOM_EXPECT_OK(worker.Wait(stuck, absl::Now() + absl::Seconds(30)));
}

// The jobs run at the raised priority where the process may raise it, and at the
// creator's where it may not, with the refusal said; a boost of 0 changes nothing.
TEST(CommWorkerTest, JobsRunRaisedAboveTheCreatorOrTheRefusalIsSaid) {
  LOOM_ASSERT_OK_AND_ASSIGN(const int creator, ThisThreadNice());
  const auto nice_of_jobs = [](CommWorker& worker) {
    int seen = 99;
    const CommWorker::Ticket t = worker.Submit([&seen] {
      LOOM_ASSIGN_OR_RETURN(seen, ThisThreadNice());
      return absl::OkStatus();
    });
    LOOM_EXPECT_OK(worker.Wait(t, absl::Now() + absl::Seconds(30)));
    return seen;
  };
  CommWorker raised;
  if (raised.priority().ok()) {
    EXPECT_EQ(nice_of_jobs(raised), std::max(-20, creator - 10));
  } else {
    EXPECT_THAT(raised.priority(),
                StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("setpriority")));
    EXPECT_EQ(nice_of_jobs(raised), creator);
  }
  CommWorkerOptions plain_options;
  plain_options.priority_boost = 0;
  CommWorker plain(plain_options);
  LOOM_EXPECT_OK(plain.priority());
  EXPECT_EQ(nice_of_jobs(plain), creator);
  LOOM_ASSERT_OK_AND_ASSIGN(const int creator_after, ThisThreadNice());
  EXPECT_EQ(creator_after, creator);
}

}  // namespace
}  // namespace loom

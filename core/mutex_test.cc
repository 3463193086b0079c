#include "core/mutex.h"

#include <chrono>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

class Counter {
 public:
  void Add(int n) {
    MutexLock lock(&mu_);
    total_ += n;
    changed_.SignalAll();
  }
  bool AwaitAtLeast(int n, absl::Time deadline) {
    MutexLock lock(&mu_);
    while (total_ < n) {
      if (!changed_.WaitWithDeadline(&mu_, deadline)) return total_ >= n;
    }
    return true;
  }
  int total() {
    MutexLock lock(&mu_);
    return total_;
  }

 private:
  Mutex mu_;
  CondVar changed_;
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST(MutexTest, ThreadsAddingUnderTheLockLoseNoUpdate) {
  Counter counter;
  constexpr int kThreads = 4;
  constexpr int kAdds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counter, t] {
      for (int i = 0; i < kAdds; ++i) counter.Add(t + 1);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(counter.total(), kAdds * (1 + 2 + 3 + 4));
}

TEST(MutexTest, AWaiterWakesWhenAnotherThreadMeetsItsCondition) {
  Counter counter;
  std::thread adder([&counter] {
    for (int i = 0; i < 10; ++i) counter.Add(1);
  });
  EXPECT_TRUE(counter.AwaitAtLeast(10, absl::Now() + absl::Seconds(60)));
  adder.join();
  EXPECT_EQ(counter.total(), 10);
}

TEST(MutexTest, AWaitGivesUpAtItsDeadline) {
  Counter counter;
  counter.Add(1);
  const absl::Time start = absl::Now();
  EXPECT_FALSE(counter.AwaitAtLeast(2, start + absl::Milliseconds(50)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  // A deadline already past returns at once, still reporting the condition.
  EXPECT_TRUE(counter.AwaitAtLeast(1, absl::InfinitePast()));
  EXPECT_FALSE(counter.AwaitAtLeast(2, absl::InfinitePast()));
}

TEST(MutexTest, TimeoutAndSteadyDeadlineWaitsReportTimingOut) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  EXPECT_FALSE(cv.WaitWithTimeout(&mu, absl::Milliseconds(20)));
  EXPECT_FALSE(cv.WaitWithTimeout(&mu, absl::ZeroDuration()));
  EXPECT_FALSE(
      cv.WaitUntil(&mu, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)));
  // A far deadline is a long wait, not an overflow into the past: woken by a signal,
  // it reports no timeout.
  std::thread signaller([&mu, &cv] {
    MutexLock inner(&mu);  // taken once the waiter sleeps (the wait releases mu)
    cv.SignalAll();
  });
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, absl::Now() + absl::Hours(24 * 365 * 1000)));
  signaller.join();
  // The lock is held again after each wait: TryLock from here must fail.
  std::thread other([&mu] {
    const bool got = mu.TryLock();
    if (got) mu.Unlock();
    EXPECT_FALSE(got);
  });
  other.join();
}

}  // namespace
}  // namespace loom

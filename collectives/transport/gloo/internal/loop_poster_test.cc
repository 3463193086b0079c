// LoopPoster (loop_poster.h) on a real gloo TCP device: functions run on one thread
// that is not the caller's (gloo's loop), in the order each caller queued them, and
// none runs once Stop has returned.
#include "collectives/transport/gloo/internal/loop_poster.h"

#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "core/mutex.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace loom {
namespace gloo_internal {
namespace {

// A one-shot signal on core's Mutex (std::mutex, which TSan sees; Debian's absl is
// not instrumented, so its Notification's ordering would be invisible to it).
class Flag {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    set_ = true;
    cv_.SignalAll();
  }
  bool WaitFor(absl::Duration timeout) {
    MutexLock lock(&mu_);
    const absl::Time deadline = absl::Now() + timeout;
    while (!set_) {
      if (!cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    return set_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool set_ ABSL_GUARDED_BY(mu_) = false;
};

std::shared_ptr<gloo::transport::Device> LoopbackDevice() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return gloo::transport::tcp::CreateDevice(attr);
}

TEST(LoopPosterTest, RunsEachCallersFunctionsInOrderOnOneOtherThread) {
  absl::StatusOr<std::unique_ptr<LoopPoster>> poster = LoopPoster::Create(LoopbackDevice());
  LOOM_ASSERT_OK(poster.status());
  constexpr int kCallers = 4;
  constexpr int kPerCaller = 2000;
  // Written only on the loop thread; read after the last function said so.
  std::vector<std::vector<int>> seen(kCallers);
  std::vector<std::thread::id> ran_on;
  std::atomic<int> left{kCallers * kPerCaller};
  Flag all_ran;
  std::vector<std::thread> callers;
  for (int caller = 0; caller < kCallers; ++caller) {
    callers.emplace_back([&, caller] {
      for (int i = 0; i < kPerCaller; ++i) {
        (*poster)->Run([&, caller, i] {
          seen[caller].push_back(i);
          ran_on.push_back(std::this_thread::get_id());
          if (left.fetch_sub(1) == 1) all_ran.Notify();
        });
      }
    });
  }
  for (std::thread& thread : callers) thread.join();
  ASSERT_TRUE(all_ran.WaitFor(absl::Seconds(60)));
  for (int caller = 0; caller < kCallers; ++caller) {
    ASSERT_EQ(seen[caller].size(), static_cast<size_t>(kPerCaller)) << "caller " << caller;
    for (int i = 0; i < kPerCaller; ++i) ASSERT_EQ(seen[caller][i], i) << "caller " << caller;
  }
  for (const std::thread::id id : ran_on) {
    EXPECT_EQ(id, ran_on.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
  (*poster)->Stop();
}

TEST(LoopPosterTest, NothingRunsAfterStopAndQueuedWorkIsDropped) {
  std::shared_ptr<gloo::transport::Device> device = LoopbackDevice();
  absl::StatusOr<std::unique_ptr<LoopPoster>> poster = LoopPoster::Create(device);
  LOOM_ASSERT_OK(poster.status());
  // The first function holds the loop until the test lets it go, so the second is
  // still queued when Stop begins; Stop waits for the first to end.
  Flag first_started, release;
  std::atomic<int> ran{0};
  (*poster)->Run([&] {
    first_started.Notify();
    release.WaitFor(absl::Seconds(60));
    ran.fetch_add(1);
  });
  (*poster)->Run([&] { ran.fetch_add(100); });
  ASSERT_TRUE(first_started.WaitFor(absl::Seconds(30)));
  int ran_when_stopped = -1;
  std::thread stopper([&] {
    (*poster)->Stop();
    ran_when_stopped = ran.load();
  });
  // Stop must not return while the first function still runs.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  release.Notify();
  stopper.join();
  EXPECT_EQ(ran_when_stopped, 1);  // Stop returned only after the first one ended
  EXPECT_EQ(ran.load(), 1);  // the first ran to its end; the queued one was dropped
  (*poster)->Run([&] { ran.fetch_add(1000); });  // after Stop: dropped
  // The loop ticks every 10 ms at most; a function that slipped through would show.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ran.load(), 1);
}

TEST(LoopPosterTest, RefusesNoDeviceNamingIt) {
  absl::StatusOr<std::unique_ptr<LoopPoster>> poster = LoopPoster::Create(nullptr);
  EXPECT_EQ(poster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(poster.status().message().find("TCP device, got none"), std::string::npos)
      << poster.status();
}

}  // namespace
}  // namespace gloo_internal
}  // namespace loom

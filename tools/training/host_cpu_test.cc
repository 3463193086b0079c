#include "tools/training/host_cpu.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(HostCpuTest, ParsesTheAggregateLine) {
  // A real /proc/stat's head: the aggregate line, then per-CPU lines.
  const char* text =
      "cpu  4705 356 584 3699176 23060 0 277 11 7 3\n"
      "cpu0 1393280 32966 572056 13343292 6130 0 17875 0 0 0\n"
      "intr 114930548 113199788 3 0 5 263 0 4\n";
  LOOM_ASSERT_OK_AND_ASSIGN(const HostCpuTimes t, ParseHostCpuTimes(text));
  EXPECT_EQ(t.idle, 3699176u + 23060u);
  EXPECT_EQ(t.total, 4705u + 356 + 584 + 3699176 + 23060 + 0 + 277 + 11);  // no guest
  // An old kernel's four fields.
  LOOM_ASSERT_OK_AND_ASSIGN(const HostCpuTimes old, ParseHostCpuTimes("cpu 1 2 3 4\n"));
  EXPECT_EQ(old.idle, 4u);
  EXPECT_EQ(old.total, 10u);
}

TEST(HostCpuTest, RefusesTextWithoutTheLine) {
  EXPECT_THAT(ParseHostCpuTimes("intr 1 2\ncpu0 1 2 3 4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no aggregate")));
  EXPECT_THAT(ParseHostCpuTimes("cpu  1 2 x 4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cpu  1 2 x 4")));
}

TEST(HostCpuTest, BusyFractionIsTheShareNotIdle) {
  EXPECT_DOUBLE_EQ(BusyFraction({100, 400}, {130, 500}), 0.7);
  EXPECT_DOUBLE_EQ(BusyFraction({100, 400}, {200, 500}), 0.0);
  EXPECT_DOUBLE_EQ(BusyFraction({100, 400}, {100, 400}), 0.0);  // no tick
  EXPECT_DOUBLE_EQ(BusyFraction({100, 500}, {90, 400}), 0.0);   // reversed
}

// The host's counters move, and a thread spinning on a CPU makes them count busy
// time: at least a little of the interval is busy (the bound is loose because
// other work on the host and the tick granularity blur it).
TEST(HostCpuTest, ASpinningThreadShowsAsBusy) {
  LOOM_ASSERT_OK_AND_ASSIGN(const HostCpuTimes before, ReadHostCpuTimes());
  std::atomic<bool> stop{false};
  std::thread spin([&stop]() {
    volatile uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) n = n + 1;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  stop = true;
  spin.join();
  LOOM_ASSERT_OK_AND_ASSIGN(const HostCpuTimes after, ReadHostCpuTimes());
  EXPECT_GT(after.total, before.total);
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  EXPECT_GT(BusyFraction(before, after), 0.5 / cpus);
}

}  // namespace
}  // namespace loom

// ScopedComputeTimer: a scope's wall time goes to its kind on its own thread; nested
// timers count once, as the outermost kind; other threads keep their own totals.
#include "core/compute_timer.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace loom {
namespace {

void Sleep(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(ComputeTimerTest, AddsTheScopesTimeToItsKind) {
  const double gemm = ThreadComputeSeconds(ComputeKind::kGemm);
  const double attention = ThreadComputeSeconds(ComputeKind::kAttention);
  {
    const ScopedComputeTimer timer(ComputeKind::kGemm);
    Sleep(20);
  }
  EXPECT_GE(ThreadComputeSeconds(ComputeKind::kGemm) - gemm, 0.019);
  EXPECT_EQ(ThreadComputeSeconds(ComputeKind::kAttention), attention);
}

TEST(ComputeTimerTest, NestedTimersCountOnceAsTheOutermost) {
  const double gemm = ThreadComputeSeconds(ComputeKind::kGemm);
  const double attention = ThreadComputeSeconds(ComputeKind::kAttention);
  {
    const ScopedComputeTimer outer(ComputeKind::kAttention);
    Sleep(10);
    {
      const ScopedComputeTimer inner(ComputeKind::kGemm);
      Sleep(10);
    }
  }
  EXPECT_EQ(ThreadComputeSeconds(ComputeKind::kGemm), gemm);
  EXPECT_GE(ThreadComputeSeconds(ComputeKind::kAttention) - attention, 0.019);
  // After the outer scope ends, a GEMM counts again.
  {
    const ScopedComputeTimer timer(ComputeKind::kGemm);
    Sleep(5);
  }
  EXPECT_GT(ThreadComputeSeconds(ComputeKind::kGemm), gemm);
}

TEST(ComputeTimerTest, EachThreadHasItsOwnTotals) {
  const double here = ThreadComputeSeconds(ComputeKind::kGemm);
  double there_before = -1;
  std::thread other([&] {
    there_before = ThreadComputeSeconds(ComputeKind::kGemm);
    const ScopedComputeTimer timer(ComputeKind::kGemm);
    Sleep(10);
  });
  other.join();
  EXPECT_EQ(there_before, 0.0);
  EXPECT_EQ(ThreadComputeSeconds(ComputeKind::kGemm), here);
}

}  // namespace
}  // namespace loom

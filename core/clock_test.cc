#include "core/clock.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// loom::Now and absl::Now read the same clock: deadlines made with one are
// checked with the other.
TEST(ClockTest, AgreesWithAbslNow) {
  for (int i = 0; i < 100; ++i) {
    const absl::Time before = absl::Now();
    const absl::Time now = Now();
    const absl::Time after = absl::Now();
    // absl::Now interpolates between its samples of the same clock: allow it a
    // little drift either way.
    EXPECT_GE(now, before - absl::Milliseconds(1));
    EXPECT_LE(now, after + absl::Milliseconds(1));
  }
}

TEST(ClockTest, AdvancesWithASleep) {
  const absl::Time start = Now();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_GE(Now() - start, absl::Milliseconds(19));
}

// CoarseNow never runs ahead of Now and trails it by about a tick: more when the
// kernel's tick runs late (seen: 6 ms on a 4 ms tick in a VM), so the bound here is
// loose, but far below any deadline Loom builds from it.
TEST(ClockTest, CoarseNowTrailsNow) {
  const absl::Duration tick = CoarseResolution();
  EXPECT_GT(tick, absl::ZeroDuration());
  EXPECT_LE(tick, absl::Milliseconds(100));
  for (int i = 0; i < 1000; ++i) {
    const absl::Time coarse = CoarseNow();
    const absl::Time now = Now();
    EXPECT_LE(coarse, now);
    EXPECT_GE(coarse, now - tick - absl::Milliseconds(100));
  }
}

TEST(ClockTest, CoarseNowAdvancesWithASleep) {
  const absl::Time start = CoarseNow();
  absl::SleepFor(absl::Milliseconds(20) + 2 * CoarseResolution());
  EXPECT_GE(CoarseNow() - start, absl::Milliseconds(19));
}

}  // namespace
}  // namespace loom

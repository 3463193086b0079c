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

}  // namespace
}  // namespace loom

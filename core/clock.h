// Now / CoarseNow: the current wall-clock time as an absl::Time, each read with one
// vDSO clock_gettime.
//
// Loom reads the clock on the latency path of every collective call (deadlines,
// flight records, the transports' wait loops). Debian's absl::Now() interpolates
// its own cycle clock and costs about 78 ns on this project's machines; the vDSO
// clock_gettime(CLOCK_REALTIME) it is built on costs about 24 ns, and
// CLOCK_REALTIME_COARSE, which only reads the time the kernel stored at its last
// tick, about 7 ns. All three read the same clock, so times from any of them
// compare correctly; the coarse one lags by about one tick (CoarseResolution(),
// 4 ms on a 250 Hz kernel), more when the tick itself runs late (6 ms seen in a VM).
//
// Use Now() to measure; CoarseNow() where a few milliseconds do not matter, such as
// the start of a deadline of seconds (adding CoarseResolution() makes up for the
// usual lag; a late tick can still make such a deadline fire a few ms early).
//
// Example:
//   const absl::Time deadline = loom::CoarseNow() + loom::CoarseResolution() + absl::Seconds(30);
//   while (!done() && loom::Now() < deadline) Poll();
#ifndef LOOM_CORE_CLOCK_H_
#define LOOM_CORE_CLOCK_H_

#include <time.h>

#include <cstdint>
#include <limits>

#include "absl/time/time.h"

namespace loom {

namespace clock_internal {
// FromTimespec avoids absl::TimeFromTimespec, an out-of-line call chain in
// Debian's shared Abseil; int64 nanoseconds since 1970 last until 2262.
inline absl::Time FromTimespec(const timespec& t) {
  return absl::FromUnixNanos(static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec);
}
}  // namespace clock_internal

inline absl::Time Now() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return clock_internal::FromTimespec(now);
}

// CoarseNow is never ahead of Now(), and usually within CoarseResolution() of it.
inline absl::Time CoarseNow() {
  timespec now;
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return clock_internal::FromTimespec(now);
}

// NowNanos / CoarseNowNanos: the same readings as int64 nanoseconds since 1970, for
// arithmetic on the latency path. (absl::Time and absl::Duration arithmetic and
// conversions such as ToUnixNanos are out-of-line calls into Debian's shared Abseil;
// the int64 forms are a few instructions.)
inline int64_t NowNanos() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}
inline int64_t CoarseNowNanos() {
  timespec now;
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
}

// DeadlineAfterNanos returns the time `budget_nanos` (>= 0) after `start_unix_nanos`,
// absl::InfiniteFuture() where that is past what int64 nanoseconds hold (such as an
// infinite timeout, which absl::ToInt64Nanoseconds saturates to the int64 maximum).
inline absl::Time DeadlineAfterNanos(int64_t start_unix_nanos, int64_t budget_nanos) {
  if (budget_nanos > std::numeric_limits<int64_t>::max() - start_unix_nanos) {
    return absl::InfiniteFuture();
  }
  return absl::FromUnixNanos(start_unix_nanos + budget_nanos);
}

// CoarseResolution is the tick of CoarseNow (clock_getres), read once.
inline absl::Duration CoarseResolution() {
  static const absl::Duration resolution = [] {
    timespec res;
    if (clock_getres(CLOCK_REALTIME_COARSE, &res) != 0) return absl::Milliseconds(10);
    return absl::DurationFromTimespec(res);
  }();
  return resolution;
}

}  // namespace loom

#endif  // LOOM_CORE_CLOCK_H_

// Now: the current wall-clock time as an absl::Time, read with one clock_gettime.
//
// Loom reads the clock on the latency path of every collective call (deadlines,
// flight records, the transports' wait loops). Debian's absl::Now() interpolates
// its own cycle clock and costs about 78 ns on this project's machines; the vDSO
// clock_gettime(CLOCK_REALTIME) it is built on costs about 20 ns. Both read the
// same clock, so deadlines from either compare correctly.
//
// Example:
//   const absl::Time deadline = loom::Now() + absl::Seconds(30);
//   while (!done() && loom::Now() < deadline) Poll();
#ifndef LOOM_CORE_CLOCK_H_
#define LOOM_CORE_CLOCK_H_

#include <time.h>

#include "absl/time/time.h"

namespace loom {

inline absl::Time Now() {
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return absl::TimeFromTimespec(now);
}

}  // namespace loom

#endif  // LOOM_CORE_CLOCK_H_

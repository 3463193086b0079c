// HostCpu: how busy this host's CPUs were over an interval, from the kernel's
// counters in /proc/stat (all CPUs, all processes). The job reports it beside the
// step breakdown because a rank's wall-clock waits mean different things on an
// oversubscribed host: when 8 ranks and their communication threads share 2
// cores, a rank waiting for a gathered unit while the others compute leaves no
// CPU idle, and only idle CPUs are time lost to waiting.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(HostCpuTimes before, ReadHostCpuTimes());
//   ...the step...
//   LOOM_ASSIGN_OR_RETURN(HostCpuTimes after, ReadHostCpuTimes());
//   double busy = BusyFraction(before, after);   // 0.97: 3% of CPU time idle
//   ParseHostCpuTimes("intr 1 2");
//   // InvalidArgument: "/proc/stat: no aggregate \"cpu \" line in ..."
#ifndef LOOM_TOOLS_TRAINING_HOST_CPU_H_
#define LOOM_TOOLS_TRAINING_HOST_CPU_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// The aggregate "cpu" line of /proc/stat, in clock ticks since boot: `idle`
// counts idle and iowait, `total` every state (steal and guest included).
struct HostCpuTimes {
  uint64_t idle = 0;
  uint64_t total = 0;
};

// ParseHostCpuTimes reads the aggregate line out of /proc/stat's text.
// InvalidArgument naming the text when it has no such line or fewer than four
// numbers on it.
absl::StatusOr<HostCpuTimes> ParseHostCpuTimes(absl::string_view proc_stat);

// ReadHostCpuTimes reads /proc/stat now. Unavailable when it cannot be read.
absl::StatusOr<HostCpuTimes> ReadHostCpuTimes();

// ProcessPageFaults returns the page faults this process has taken since it
// started, minor and major (getrusage): a step that touches memory it has not
// touched before (a fresh allocation of pages the allocator got from the kernel)
// takes one per page. -1 where getrusage fails.
int64_t ProcessPageFaults();

// BusyFraction returns the share of the CPUs' time between the two readings that
// was not idle, in [0, 1]; 0 when no tick passed (or the readings are reversed).
double BusyFraction(const HostCpuTimes& before, const HostCpuTimes& after);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_HOST_CPU_H_

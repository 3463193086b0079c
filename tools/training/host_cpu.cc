#include "tools/training/host_cpu.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom {

int64_t ProcessPageFaults() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return -1;
  return static_cast<int64_t>(usage.ru_minflt) + static_cast<int64_t>(usage.ru_majflt);
}

absl::StatusOr<HostCpuTimes> ParseHostCpuTimes(absl::string_view proc_stat) {
  for (const absl::string_view line : absl::StrSplit(proc_stat, '\n')) {
    if (!absl::StartsWith(line, "cpu ")) continue;
    std::vector<uint64_t> ticks;
    for (const absl::string_view field :
         absl::StrSplit(line.substr(4), ' ', absl::SkipWhitespace())) {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(field, &value)) break;
      ticks.push_back(value);
    }
    if (ticks.size() < 4) break;
    HostCpuTimes times;
    // user nice system idle iowait irq softirq steal guest guest_nice; guest and
    // guest_nice are already counted in user and nice.
    const size_t counted = std::min<size_t>(ticks.size(), 8);
    for (size_t i = 0; i < counted; ++i) times.total += ticks[i];
    times.idle = ticks[3] + (ticks.size() > 4 ? ticks[4] : 0);
    return times;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("/proc/stat: no aggregate \"cpu \" line with at least 4 numbers in \"",
                   proc_stat.substr(0, 80), "\""));
}

absl::StatusOr<HostCpuTimes> ReadHostCpuTimes() {
  std::ifstream in("/proc/stat");
  if (!in) return absl::UnavailableError("/proc/stat: cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return ParseHostCpuTimes(text.str());
}

double BusyFraction(const HostCpuTimes& before, const HostCpuTimes& after) {
  if (after.total <= before.total || after.idle < before.idle) return 0.0;
  const double total = static_cast<double>(after.total - before.total);
  const double idle = static_cast<double>(after.idle - before.idle);
  return std::max(0.0, std::min(1.0, 1.0 - idle / total));
}

}  // namespace loom

// A long run's resources stay flat: the training job, on the README's default mesh
// (dp 2 x tp 2 x pp 2 thread ranks, ZeRO-3, CPU-offloaded AdamW) with a small model,
// samples this process's /proc and malloc's statistics after every step, and fails
// when its heap grows per step (a least-squares slope over the steps after the
// warm-up), or when open files or memory mappings are more at the end than after
// the warm-up.
// Before the job kept running totals, every step's report stayed in its summary:
// about 300 bytes a step, which this slope sees. (That the steady state takes no
// page faults is steady_state_faults_test's, in a process of its own.)
#include <dirent.h>
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "tools/training/malloc_policy.h"
#include "tools/training/train_job.h"

namespace loom {
namespace {

// VmRSS in bytes, from /proc/self/status.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    int64_t kib = 0;
    if (absl::SimpleAtoi(rest, &kib)) return kib * 1024;
  }
  return -1;
}

int64_t OpenFiles() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int64_t count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

int64_t Mappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int64_t count = 0;
  while (std::getline(maps, line)) ++count;
  return count;
}

// The least-squares slope of y over x.
double Slope(const std::vector<double>& x, const std::vector<double>& y) {
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= static_cast<double>(x.size());
  my /= static_cast<double>(y.size());
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  return sxx > 0 ? sxy / sxx : 0;
}

TEST(FlatMemoryTest, ResidentMemoryFilesAndMappingsDoNotGrowPerStep) {
  ReuseFreedMemory();  // the policy //tools:train runs under
  TrainJobOptions options;  // the README's default mesh: dp 2, tp 2, pp 2, zero 3, cpu offload
  options.model.vocab = 64;
  options.model.hidden = 32;
  options.model.heads = 2;
  options.model.layers = 2;
  options.model.seq_len = 8;
  options.micro_batch = 1;
  options.microbatches = 2;
  constexpr int64_t kSteps = 1500, kWarm = 300;
  options.steps = kSteps;
  // The reports the summary keeps: reached long before the warm-up ends, so what
  // the slope measures is what grows without bound.
  options.step_history = 64;
  // Reserved up front: the samples themselves must not grow the heap.
  std::vector<double> steps, resident, heap;
  for (std::vector<double>* samples : {&steps, &resident, &heap}) {
    samples->reserve(static_cast<size_t>(kSteps - kWarm + 1));
  }
  int64_t files_warm = 0, maps_warm = 0, files_end = 0, maps_end = 0;
  absl::StatusOr<TrainSummary> summary = RunTrainJob(options, [&](const StepReport& r) {
    if (r.step < kWarm) return;
    steps.push_back(static_cast<double>(r.step));
    resident.push_back(static_cast<double>(ResidentBytes()));
    heap.push_back(static_cast<double>(mallinfo2().uordblks));
    if (r.step == kWarm) {
      files_warm = OpenFiles();
      maps_warm = Mappings();
    }
    files_end = OpenFiles();
    maps_end = Mappings();
  });
  LOOM_ASSERT_OK(summary.status());
  ASSERT_EQ(static_cast<int64_t>(steps.size()), kSteps - kWarm + 1);
  ASSERT_GT(resident.front(), 0);
  EXPECT_EQ(summary->steps.size(), 64u);
  const double slope = Slope(steps, resident);
  const double heap_slope = Slope(steps, heap);
  std::cout << "resident " << resident.front() << " bytes at step " << kWarm << ", "
            << resident.back() << " at step " << kSteps << "; slope " << slope
            << " bytes/step; heap in use " << heap.front() << " -> " << heap.back()
            << ", slope " << heap_slope << " bytes/step; open files " << files_warm << " -> "
            << files_end
            << "; mappings " << maps_warm << " -> " << maps_end << "\n";
  // The live heap (all of malloc's arenas) is the figure without page-level noise.
  // Keeping every step's report grew it by 233 bytes a step here (this test with
  // an unbounded step_history; the binary's own list of lines added ~80 more).
  // What remains, about 14 bytes a step, is not found yet (issue 54's note): the
  // bound catches the old growth and anything larger, and is to come down to a few
  // bytes when it is found.
  EXPECT_LT(heap_slope, 64.0) << "the heap grows per step";
  EXPECT_LE(files_end, files_warm) << "open files grew over the run";
  EXPECT_LE(maps_end, maps_warm + 2) << "memory mappings grew over the run";  // malloc's arenas
}

}  // namespace
}  // namespace loom

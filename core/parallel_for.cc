#include "core/parallel_for.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "core/internal/helper_team.h"

namespace loom {
namespace {

constexpr int kMaxThreads = 1024;

std::atomic<int> compute_threads{1};

// RunRanges runs body over `parts` near-equal ranges of [0, n) on the caller's team:
// range p is [p * n / parts, (p + 1) * n / parts), so sizes differ by at most one.
absl::Status RunRanges(int64_t n, int parts,
                       absl::FunctionRef<absl::Status(int64_t, int64_t)> body) {
  if (parts <= 1) return n == 0 ? absl::OkStatus() : body(0, n);
  const auto begin_of = [&](int64_t p) { return p * n / parts; };
  return core_internal::HelperTeam::ForThisThread().Run(
      parts, parts, [&](int p) { return body(begin_of(p), begin_of(p + 1)); });
}

}  // namespace

absl::Status ParallelFor(int64_t n, int threads,
                         absl::FunctionRef<absl::Status(int64_t begin, int64_t end)> body) {
  if (threads < 1 || threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParallelFor: threads ", threads, " must be in [1, ", kMaxThreads, "]"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelFor: n ", n, " must be >= 0"));
  }
  return RunRanges(n, static_cast<int>(std::min<int64_t>(threads, n)), body);
}

absl::Status SetComputeThreads(int threads) {
  if (threads < 1 || threads > kMaxThreads) {
    return absl::InvalidArgumentError(absl::StrCat("SetComputeThreads: ", threads,
                                                   " threads; need 1 to ", kMaxThreads));
  }
  compute_threads.store(threads, std::memory_order_relaxed);
  return absl::OkStatus();
}

int ComputeThreads() { return compute_threads.load(std::memory_order_relaxed); }

void ParallelForEach(int64_t n, int64_t grain,
                     absl::FunctionRef<void(int64_t begin, int64_t end)> body) {
  if (n <= 0) return;
  const int64_t parts = std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, ComputeThreads());
  // The body cannot fail, so neither can the ranges.
  RunRanges(n, static_cast<int>(parts), [&](int64_t begin, int64_t end) {
    body(begin, end);
    return absl::OkStatus();
  }).IgnoreError();
}

}  // namespace loom

#include "core/parallel_for.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status ParallelFor(int64_t n, int threads,
                         const std::function<absl::Status(int64_t begin, int64_t end)>& body) {
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParallelFor: threads ", threads, " must be in [1, 1024]"));
  }
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat("ParallelFor: n ", n, " must be >= 0"));
  }
  const int64_t parts = std::min<int64_t>(threads, n);
  if (parts <= 1) return n == 0 ? absl::OkStatus() : body(0, n);
  // Range p is [p * n / parts, (p + 1) * n / parts): sizes differ by at most one.
  auto begin_of = [&](int64_t p) { return p * n / parts; };
  std::vector<absl::Status> results(static_cast<size_t>(parts));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(parts - 1));
  for (int64_t p = 1; p < parts; ++p) {
    workers.emplace_back([&, p] { results[p] = body(begin_of(p), begin_of(p + 1)); });
  }
  results[0] = body(0, begin_of(1));
  for (std::thread& worker : workers) worker.join();
  for (const absl::Status& status : results) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace loom

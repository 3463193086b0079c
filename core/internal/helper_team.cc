#include "core/internal/helper_team.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace loom {
namespace core_internal {
namespace {

// PollFor returns whether done() became true within kSpinMicros, yielding the CPU
// between looks.
template <typename Done>
bool PollFor(const Done& done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(HelperTeam::kSpinMicros);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Whether this thread is running a part now (Run then runs inline).
thread_local bool in_part = false;

// RunPart runs one part with in_part set.
absl::Status RunPart(absl::FunctionRef<absl::Status(int)> part, int i) {
  const bool outer = in_part;
  in_part = true;
  absl::Status status = part(i);
  in_part = outer;
  return status;
}

}  // namespace

HelperTeam& HelperTeam::ForThisThread() {
  thread_local HelperTeam team;
  return team;
}

HelperTeam::~HelperTeam() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.SignalAll();
  for (std::thread& helper : threads_) helper.join();
}

void HelperTeam::Drain(absl::FunctionRef<absl::Status(int)> part,
                       absl::Span<absl::Status> results) {
  const int parts = static_cast<int>(results.size());
  for (int i = next_.fetch_add(1, std::memory_order_relaxed); i < parts;
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    results[static_cast<size_t>(i)] = RunPart(part, i);
  }
}

void HelperTeam::HelperLoop(int index, uint64_t seen) {
  while (true) {
    PollFor([&] { return generation_.load(std::memory_order_acquire) != seen; });
    const absl::FunctionRef<absl::Status(int)>* part = nullptr;
    absl::Span<absl::Status> results;
    {
      MutexLock lock(&mu_);
      while (generation_.load(std::memory_order_relaxed) == seen) work_cv_.Wait(&mu_);
      seen = generation_.load(std::memory_order_relaxed);
      if (stop_) return;
      // A job already over (its caller ran the parts) or not for this many helpers.
      if (!job_open_ || index >= participants_) continue;
      active_.fetch_add(1, std::memory_order_relaxed);
      // The job stays open, and these stay put, until the caller sees active_ at 0.
      part = part_;
      results = absl::MakeSpan(results_);
    }
    Drain(*part, results);
    bool last;
    {
      MutexLock lock(&mu_);
      last = active_.fetch_sub(1, std::memory_order_acq_rel) == 1;
    }
    if (last) done_cv_.Signal();
  }
}

absl::Status HelperTeam::Run(int threads, int parts, absl::FunctionRef<absl::Status(int)> part) {
  if (threads <= 1 || parts <= 1 || in_part) {
    for (int i = 0; i < parts; ++i) {
      if (absl::Status s = RunPart(part, i); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  const int helpers = std::min(threads - 1, parts - 1);
  while (static_cast<int>(threads_.size()) < helpers) {
    uint64_t generation;
    {
      MutexLock lock(&mu_);
      generation = generation_.load(std::memory_order_relaxed);
    }
    const int index = static_cast<int>(threads_.size());
    threads_.emplace_back([this, index, generation] { HelperLoop(index, generation); });
  }
  absl::Span<absl::Status> results;
  {
    MutexLock lock(&mu_);
    part_ = &part;
    results_.assign(static_cast<size_t>(parts), absl::OkStatus());  // keeps its capacity
    results = absl::MakeSpan(results_);
    participants_ = helpers;
    job_open_ = true;
    next_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.SignalAll();
  Drain(part, results);
  // Every part is taken; wait for the helpers still running one (not for those that
  // have not woken: they will find the job closed).
  PollFor([&] { return active_.load(std::memory_order_acquire) == 0; });
  MutexLock lock(&mu_);
  while (active_.load(std::memory_order_relaxed) != 0) done_cv_.Wait(&mu_);
  job_open_ = false;
  part_ = nullptr;
  for (const absl::Status& s : results_) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace core_internal
}  // namespace loom

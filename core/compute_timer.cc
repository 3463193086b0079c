#include "core/compute_timer.h"

namespace loom {

namespace {

struct ThreadTotals {
  bool running = false;
  double seconds[kComputeKinds] = {};
};

ThreadTotals& Totals() {
  thread_local ThreadTotals totals;
  return totals;
}

}  // namespace

ScopedComputeTimer::ScopedComputeTimer(ComputeKind kind)
    : kind_(kind), outermost_(!Totals().running) {
  if (outermost_) {
    Totals().running = true;
    start_ = std::chrono::steady_clock::now();
  }
}

ScopedComputeTimer::~ScopedComputeTimer() {
  if (!outermost_) return;
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
  ThreadTotals& totals = Totals();
  totals.seconds[static_cast<int>(kind_)] += elapsed.count();
  totals.running = false;
}

double ThreadComputeSeconds(ComputeKind kind) { return Totals().seconds[static_cast<int>(kind)]; }

}  // namespace loom

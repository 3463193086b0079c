// Per-thread time by kind of compute, for a training step's breakdown: the GEMMs, the
// attention kernels, and (by difference) everything else a rank's compute does.
//
// A ScopedComputeTimer adds the wall time of its scope to the calling thread's total
// for its kind. Timers nest: only the outermost running timer of a thread counts,
// so the GEMMs inside an attention kernel count as attention, not twice. Work that a
// timed scope hands to other threads (ParallelFor) is inside the scope's wall time.
// Reading is per thread too: a rank reads its own thread's totals before and after
// a step and takes the difference. Cost: two steady-clock reads per outermost scope.
//
// Example:
//   const double before = ThreadComputeSeconds(ComputeKind::kGemm);
//   {
//     const ScopedComputeTimer timer(ComputeKind::kGemm);
//     cblas_sgemm(...);
//   }
//   const double gemm_seconds = ThreadComputeSeconds(ComputeKind::kGemm) - before;
#ifndef LOOM_CORE_COMPUTE_TIMER_H_
#define LOOM_CORE_COMPUTE_TIMER_H_

#include <chrono>

namespace loom {

enum class ComputeKind { kGemm = 0, kAttention = 1 };
inline constexpr int kComputeKinds = 2;

class ScopedComputeTimer {
 public:
  explicit ScopedComputeTimer(ComputeKind kind);
  ~ScopedComputeTimer();
  ScopedComputeTimer(const ScopedComputeTimer&) = delete;
  ScopedComputeTimer& operator=(const ScopedComputeTimer&) = delete;

 private:
  ComputeKind kind_;
  bool outermost_;
  std::chrono::steady_clock::time_point start_;
};

// ThreadComputeSeconds returns the calling thread's total for `kind` since it started.
double ThreadComputeSeconds(ComputeKind kind);

}  // namespace loom

#endif  // LOOM_CORE_COMPUTE_TIMER_H_

// HelperTeam: the parked helper threads of one calling thread, which a rank's work is
// spread over: ParallelFor (core/parallel_for.h) and Gemm's bf16 path use it (it is
// internal to Loom; embedders call ParallelFor).
//
// Each calling thread has a team of its own, so tensor-parallel ranks running as
// threads of one process split their products at the same time without waiting for
// each other (ranks x threads stay within the host's CPUs, as the training job
// checks). Parts are handed out one at a time from a shared counter: a helper that
// is slow to wake (a busy host) leaves its parts to the caller, which waits only for
// helpers that took one; and which thread runs a part never changes its result.
//
// Waiting: a helper first polls for work, yielding the CPU, for kSpinMicros after its
// last part, then sleeps on a condition variable. The caller does the same while the
// last parts finish. (OpenMP's default wait, spinning on the CPU for about a
// millisecond, made oneDNN's two-thread products 2 to 13 times slower than one thread
// whenever another thread wanted that core: tensor_parallel/README.md.)
//
// Example:
//   LOOM_RETURN_IF_ERROR(HelperTeam::ForThisThread().Run(/*threads=*/2, /*parts=*/2,
//       [&](int part) { return MultiplyRows(part); }));   // each part once
#ifndef LOOM_CORE_INTERNAL_HELPER_TEAM_H_
#define LOOM_CORE_INTERNAL_HELPER_TEAM_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/mutex.h"

namespace loom {
namespace core_internal {

class HelperTeam {
 public:
  // How long an idle helper (and a caller waiting for its last parts) polls before
  // it sleeps.
  static constexpr int64_t kSpinMicros = 200;

  // ForThisThread returns the calling thread's team: its helpers are created on
  // first need and joined when the thread exits.
  static HelperTeam& ForThisThread();

  HelperTeam() = default;
  HelperTeam(const HelperTeam&) = delete;
  HelperTeam& operator=(const HelperTeam&) = delete;
  ~HelperTeam();

  // Run calls part(i) once for every i in [0, parts), on the calling thread and up to
  // threads - 1 helpers, and returns when every call has returned: OK, or the status
  // of the lowest-numbered part that failed. threads <= 1 or parts <= 1 runs the
  // parts inline, in order; so does a Run called from inside a part (of any team), so
  // nested parallel work never starts helpers of helpers beyond the rank's threads.
  absl::Status Run(int threads, int parts, absl::FunctionRef<absl::Status(int)> part);

  // helpers returns how many helper threads the team has started.
  int helpers() const { return static_cast<int>(threads_.size()); }

 private:
  void HelperLoop(int index, uint64_t seen) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs parts from next_ until none are left, putting part i's status in results[i]:
  // the job's results_, which a helper looks up under mu_ when it joins the job.
  void Drain(absl::FunctionRef<absl::Status(int)> part, absl::Span<absl::Status> results);

  std::vector<std::thread> threads_;  // only the owning thread touches it

  Mutex mu_;                             // guards the job fields below
  CondVar work_cv_;                      // generation_ changed
  CondVar done_cv_;                      // active_ dropped to 0
  std::atomic<uint64_t> generation_{0};  // bumped per job and to stop; written under mu_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool job_open_ ABSL_GUARDED_BY(mu_) = false;  // helpers may still join the job
  int participants_ ABSL_GUARDED_BY(mu_) = 0;   // helpers with index < this may join it
  std::atomic<int> active_{0};  // helpers that joined and are not done; written under mu_
  const absl::FunctionRef<absl::Status(int)>* part_ ABSL_GUARDED_BY(mu_) = nullptr;
  // One per part; each element is written, outside mu_, by the thread running its part.
  std::vector<absl::Status> results_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> next_{0};  // the next part to hand out
};

}  // namespace core_internal
}  // namespace loom

#endif  // LOOM_CORE_INTERNAL_HELPER_TEAM_H_

// WorkerPool: a process-wide set of parked threads that AdamWStep spreads its tiles over,
// so that a step of a small array does not pay for creating threads.
//
// Example:
//   WorkerPool::Shared().Run(/*threads=*/2, /*num_tasks=*/100, [&](int64_t task) {
//     Process(task);   // each task exactly once, on the caller or one worker
//   });
//
// Run hands tasks out one at a time from a shared counter, so which thread runs which task
// varies from call to call; callers must make each task's result independent of that
// (AdamWStep's tiles are). Runs from different threads take turns.
//
// Synchronization uses std::mutex / std::condition_variable rather than absl::Mutex:
// Debian's Abseil is a prebuilt library without ThreadSanitizer annotations, so TSan could
// not see absl::Mutex's happens-before edges (see inproc_transport.cc).
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_WORKER_POOL_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_WORKER_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace loom {
namespace adamw_internal {

class WorkerPool {
 public:
  // Shared returns the process-wide pool. Its threads are created on first need and live,
  // parked, until the process exits.
  static WorkerPool& Shared();

  WorkerPool() = default;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  // Joins the workers (a pool other than Shared() may be destroyed).
  ~WorkerPool();

  // Run calls task(i) once for every i in [0, num_tasks), on the calling thread and up to
  // threads - 1 workers, and returns when every call has returned. threads <= 1 or
  // num_tasks <= 1 runs everything inline on the caller, in order.
  void Run(int threads, int64_t num_tasks, absl::FunctionRef<void(int64_t)> task);

 private:
  void WorkerLoop(int index, uint64_t seen);
  // Takes tasks from next_ until none are left.
  void Drain(absl::FunctionRef<void(int64_t)> task, int64_t num_tasks);

  std::mutex run_mu_;  // One Run at a time; guards workers_.
  std::vector<std::thread> workers_;

  std::mutex mu_;                    // Guards the job fields below.
  std::condition_variable work_cv_;  // Signalled when generation_ changes.
  std::condition_variable done_cv_;  // Signalled when busy_ drops to 0.
  uint64_t generation_ = 0;          // Bumped per job (and to stop).
  bool stop_ = false;
  int participants_ = 0;  // Workers with index < this join the job.
  int busy_ = 0;          // Participants not yet done with the job.
  const absl::FunctionRef<void(int64_t)>* task_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_{0};  // The next task to hand out.
};

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_WORKER_POOL_H_

// ThreadPoolExecutor: the portable I/O engine. A fixed set of worker threads, each
// issuing one blocking pread/pwrite/fdatasync at a time, so `threads` operations are in
// flight across all concurrent Run calls. Each worker owns one BounceBuffer.
//
// Example:
//   auto executor = ThreadPoolExecutor::Create(/*threads=*/4);
//   LOOM_RETURN_IF_ERROR((*executor)->Run(n, prepare, complete));
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_THREAD_POOL_EXECUTOR_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_THREAD_POOL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"
#include "offload/disk/internal/io_executor.h"

namespace loom {
namespace disk_internal {

class ThreadPoolExecutor final : public IoExecutor {
 public:
  // Create starts `threads` workers; InvalidArgument unless threads >= 1.
  static absl::StatusOr<std::unique_ptr<ThreadPoolExecutor>> Create(int threads);

  // Joins the workers; no Run may be in progress.
  ~ThreadPoolExecutor() override;

  absl::Status Run(size_t count, const PrepareFn& prepare, const CompleteFn& complete) override;
  int MaxInFlight() const override { return static_cast<int>(workers_.size()); }

 private:
  using Task = std::function<void(BounceBuffer& bounce)>;

  explicit ThreadPoolExecutor(int threads);
  void Schedule(Task task) ABSL_LOCKS_EXCLUDED(mu_);
  void WorkerLoop(int worker) ABSL_LOCKS_EXCLUDED(mu_);

  Mutex mu_;
  CondVar work_;  // a task was queued, or stopping_ set
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<BounceBuffer> bounce_;  // one per worker, touched only by that worker
  std::vector<std::thread> workers_;
};

// PerformBlocking runs one operation with pread/pwrite/fdatasync, retrying short
// transfers and EINTR; a read that reaches end of file early is DataLoss.
absl::Status PerformBlocking(const IoOp& op);

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_THREAD_POOL_EXECUTOR_H_

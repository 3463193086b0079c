// UringExecutor: the io_uring I/O engine (liburing). Each Run borrows a "lane" — one
// ring of `queue_depth` entries plus `queue_depth` bounce buffers — from a pool (a new
// lane is created when every pooled one is busy), submits up to queue_depth operations,
// reaps completions on the calling thread and refills the ring as slots free up.
//
// Never hangs: when no completion arrives within `timeout`, Run cancels what is in
// flight (IORING_OP_ASYNC_CANCEL) and returns DeadlineExceeded. If the kernel cannot
// cancel them within another `timeout`, the lane (ring and bounce buffers) is
// deliberately leaked rather than freed under the kernel's feet, and the message says
// so; a direct read into the caller's memory could then still land later.
//
// Example:
//   LOOM_RETURN_IF_ERROR(UringExecutor::Probe());   // FailedPrecondition under seccomp
//   auto executor = UringExecutor::Create(/*queue_depth=*/32, absl::Seconds(60));
//   LOOM_RETURN_IF_ERROR((*executor)->Run(n, prepare, complete));
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_URING_EXECUTOR_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_URING_EXECUTOR_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "offload/disk/internal/io_executor.h"

namespace loom {
namespace disk_internal {

class UringExecutor final : public IoExecutor {
 public:
  // Probe returns OK when this process may create an io_uring that supports read,
  // write and fsync; FailedPrecondition naming the failing call and strerror otherwise
  // (e.g. "io_uring_queue_init(4): Operation not permitted" under a seccomp filter).
  static absl::Status Probe();

  // Create makes an executor with one ready lane; InvalidArgument unless
  // 1 <= queue_depth <= 4096 and timeout > 0; FailedPrecondition as Probe.
  static absl::StatusOr<std::unique_ptr<UringExecutor>> Create(int queue_depth,
                                                               absl::Duration timeout);

  ~UringExecutor() override;

  absl::Status Run(size_t count, const PrepareFn& prepare, const CompleteFn& complete) override;
  int MaxInFlight() const override { return queue_depth_; }

 private:
  struct Lane;

  UringExecutor(int queue_depth, absl::Duration timeout);
  absl::StatusOr<std::unique_ptr<Lane>> AcquireLane() ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseLane(std::unique_ptr<Lane> lane) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RunOnLane(Lane& lane, size_t count, const PrepareFn& prepare,
                         const CompleteFn& complete, bool& abandon);

  const int queue_depth_;
  const absl::Duration timeout_;
  Mutex mu_;
  std::vector<std::unique_ptr<Lane>> idle_lanes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_URING_EXECUTOR_H_

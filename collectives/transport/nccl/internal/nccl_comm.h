// NcclComm: one rank's NCCL communicator in non-blocking mode, with the CUDA stream
// all of its work runs on, and waits that have deadlines. The nccl transport's
// point-to-point endpoint and its native collectives share one, so their work is
// ordered on the one stream.
//
// Every NCCL call is made under the object's lock, so Break (ncclCommAbort) may come
// from any thread while another drives the communicator: a wait releases the lock
// between polls and returns the break's status once it has happened.
//
// Failure. An NCCL error (returned, or reported later by ncclCommGetAsyncError)
// aborts the communicator: it is unusable afterwards (NCCL's state is unknown), and
// every later call returns the error. A deadline is the caller's to judge: Group and
// Await return DeadlineExceeded and leave the work in flight; the caller names what
// was pending and calls Break.
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_COMM_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_COMM_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/gpu/cuda_stream.h"
#include "core/mutex.h"

namespace loom {
namespace nccl_internal {

struct NcclCommOptions {
  // Polls of a wait that only yield the CPU before it sleeps 50 us between polls.
  int spin_iterations = 4000;
  // How long the destructor waits for ncclCommFinalize before it aborts instead.
  absl::Duration close_timeout = absl::Seconds(10);
};

class NcclComm {
 public:
  // Init creates rank `rank` of `size` ranks of the communicator `id` on `device`
  // (ncclCommInitRankConfig with config.blocking = 0), and polls
  // ncclCommGetAsyncError until it is ready or `deadline` passes (then aborts it:
  // DeadlineExceeded naming the rank, size and device). NCCL errors as NcclStatus
  // (a rank of the same id on the same device is NCCL's "Duplicate GPU", Internal or
  // FailedPrecondition); CUDA errors as CudaStatus.
  static absl::StatusOr<std::unique_ptr<NcclComm>> Init(const ncclUniqueId& id, int rank, int size,
                                                        int device, absl::Time deadline,
                                                        NcclCommOptions options);

  // The destructor finalizes the communicator (bounded by close_timeout) when all of
  // its work has completed, and aborts it otherwise.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

  // Group runs `enqueue` (NCCL calls on the communicator and stream it is given)
  // between ncclGroupStart and ncclGroupEnd, then waits until NCCL has put the work
  // on the stream (a non-blocking communicator does so in the background; point-to-
  // point connections to new peers are made there, which needs the peers). The
  // status of the first failing call, or DeadlineExceeded at `deadline`.
  absl::Status Group(absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> enqueue,
                     absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // OnStream runs `enqueue` (plain CUDA work, such as a device copy) on the stream.
  absl::Status OnStream(absl::FunctionRef<absl::Status(cudaStream_t)> enqueue)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Record marks the work on the stream so far and returns the mark's number
  // (increasing from 1).
  absl::StatusOr<uint64_t> Record() ABSL_LOCKS_EXCLUDED(mu_);
  // Await waits until the work up to mark `mark` has completed, polling the stream's
  // progress and ncclCommGetAsyncError. DeadlineExceeded (saying how long it waited)
  // at `deadline`; an NCCL or CUDA error aborts the communicator and is returned.
  absl::Status Await(uint64_t mark, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Break aborts the communicator (ncclCommAbort: NCCL stops its kernels) unless it
  // already is, and makes `reason` what every later call returns (the first reason
  // stays). Any thread.
  void Break(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // health returns OK, or the reason the communicator was aborted.
  absl::Status health() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  NcclComm(ncclComm_t comm, CudaStream stream, int rank, int size, int device,
           NcclCommOptions options);
  void BreakLocked(const absl::Status& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pause lets a wait's `polls`-th poll give the CPU away.
  void Pause(int polls) const;
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  const int rank_, size_, device_;
  const NcclCommOptions options_;
  mutable Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // null once aborted or closed
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  CudaStream stream_ ABSL_GUARDED_BY(mu_);
  // Marks recorded and not known to be complete, oldest first, and events to reuse.
  std::deque<std::pair<uint64_t, CudaEvent>> marks_ ABSL_GUARDED_BY(mu_);
  std::vector<CudaEvent> spare_events_ ABSL_GUARDED_BY(mu_);
  uint64_t last_mark_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_mark_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace nccl_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NCCL_COMM_H_

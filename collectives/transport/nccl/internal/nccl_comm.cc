#include "collectives/transport/nccl/internal/nccl_comm.h"

#include <sched.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/nccl/internal/nccl_call.h"
#include "core/gpu/cuda_status.h"
#include "core/mutex.h"
#include "core/status_macros.h"

namespace loom {
namespace nccl_internal {

absl::StatusOr<std::unique_ptr<NcclComm>> NcclComm::Init(const ncclUniqueId& id, int rank, int size,
                                                         int device, absl::Time deadline,
                                                         NcclCommOptions options) {
  LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device));  // sets the device
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: init, group ends and finalize return at once and finish in the
  // background, so every wait below can have a deadline and end in ncclCommAbort.
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    absl::Status status =
        NcclStatus(started, "ncclCommInitRankConfig(&comm, size, id, rank, &config)", comm);
    if (comm != nullptr) ncclCommAbort(comm);
    return status;
  }
  const absl::Time start = absl::Now();
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &state);
    absl::Status status;
    if (asked != ncclSuccess) {
      status = NcclStatus(asked, "ncclCommGetAsyncError(comm, &state)", comm);
    } else if (state == ncclSuccess) {
      return std::unique_ptr<NcclComm>(
          new NcclComm(comm, std::move(stream), rank, size, device, options));
    } else if (state != ncclInProgress) {
      status = NcclStatus(state, "ncclCommInitRankConfig(&comm, size, id, rank, &config)", comm);
    } else if (absl::Now() >= deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("nccl rank ", rank, ": the NCCL communicator of ", size, " ranks (device ",
                       device, ") was not ready after ", absl::FormatDuration(absl::Now() - start),
                       " (do all ranks connect, each on a device of its own?)"));
    }
    if (!status.ok()) {
      ncclCommAbort(comm);
      return status;
    }
    if (polls < options.spin_iterations) {
      sched_yield();
    } else {
      absl::SleepFor(absl::Microseconds(50));
    }
  }
}

NcclComm::NcclComm(ncclComm_t comm, CudaStream stream, int rank, int size, int device,
                   NcclCommOptions options)
    : rank_(rank),
      size_(size),
      device_(device),
      options_(options),
      comm_(comm),
      stream_(std::move(stream)) {}

NcclComm::~NcclComm() { Close(); }

void NcclComm::Close() {
  MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  cudaSetDevice(device_);
  bool idle = true;
  for (const auto& [mark, event] : marks_) {
    if (cudaEventQuery(event.get()) != cudaSuccess) idle = false;
  }
  // Finalize waits for the peers' side of the work to be quiescent too, so it is
  // bounded; work still in flight (requests never waited for) is aborted at once.
  if (idle && ncclCommFinalize(comm_) == ncclInProgress) {
    const absl::Time deadline = absl::Now() + options_.close_timeout;
    ncclResult_t state = ncclInProgress;
    for (int polls = 0; state == ncclInProgress && absl::Now() < deadline; ++polls) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state == ncclInProgress) Pause(polls);
    }
    idle = state == ncclSuccess;
  }
  if (idle) {
    ncclCommDestroy(comm_);
  } else {
    ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

void NcclComm::Pause(int polls) const {
  if (polls < options_.spin_iterations) {
    sched_yield();
  } else {
    absl::SleepFor(absl::Microseconds(50));
  }
}

absl::Status NcclComm::Group(absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> enqueue,
                             absl::Time deadline) {
  {
    MutexLock lock(&mu_);
    if (!health_.ok()) return health_;
    absl::Status status = CudaStatus(cudaSetDevice(device_), "cudaSetDevice(device)");
    if (status.ok()) status = NcclStatus(ncclGroupStart(), "ncclGroupStart()", comm_);
    if (!status.ok()) return status;
    status = enqueue(comm_, stream_.get());
    // The group is ended even when a call in it failed, so this thread's NCCL group
    // state is clean for the next one.
    const ncclResult_t ended = ncclGroupEnd();
    if (status.ok()) status = NcclStatus(ended, "ncclGroupEnd()", comm_);
    if (!status.ok()) {
      BreakLocked(status);
      return status;
    }
  }
  const absl::Time start = absl::Now();
  for (int polls = 0;; ++polls) {
    {
      MutexLock lock(&mu_);
      if (!health_.ok()) return health_;
      ncclResult_t state = ncclInProgress;
      const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
      absl::Status status;
      if (asked != ncclSuccess) {
        status = NcclStatus(asked, "ncclCommGetAsyncError(comm, &state)", comm_);
      } else if (state == ncclSuccess) {
        return absl::OkStatus();
      } else if (state != ncclInProgress) {
        status = NcclStatus(state, "ncclGroupEnd() (in the background)", comm_);
      }
      if (!status.ok()) {
        BreakLocked(status);
        return status;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("NCCL had not enqueued the group after ",
                                                      absl::FormatDuration(absl::Now() - start)));
    }
    Pause(polls);
  }
}

absl::Status NcclComm::OnStream(absl::FunctionRef<absl::Status(cudaStream_t)> enqueue) {
  MutexLock lock(&mu_);
  if (!health_.ok()) return health_;
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  return enqueue(stream_.get());
}

absl::StatusOr<uint64_t> NcclComm::Record() {
  MutexLock lock(&mu_);
  if (!health_.ok()) return health_;
  CudaEvent event;
  if (spare_events_.empty()) {
    LOOM_ASSIGN_OR_RETURN(event, CudaEvent::Create(device_));
  } else {
    event = std::move(spare_events_.back());
    spare_events_.pop_back();
  }
  LOOM_RETURN_IF_ERROR(event.Record(stream_));
  marks_.emplace_back(++last_mark_, std::move(event));
  return last_mark_;
}

absl::Status NcclComm::Await(uint64_t mark, absl::Time deadline) {
  const absl::Time start = absl::Now();
  for (int polls = 0;; ++polls) {
    {
      MutexLock lock(&mu_);
      if (!health_.ok()) return health_;
      if (mark <= completed_mark_) return absl::OkStatus();
      // Errors NCCL found in the background (a peer's connection closed, a CUDA
      // error in its proxy) end the wait at once rather than at the deadline.
      ncclResult_t state = ncclSuccess;
      const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
      absl::Status status;
      if (asked != ncclSuccess) {
        status = NcclStatus(asked, "ncclCommGetAsyncError(comm, &state)", comm_);
      } else if (state != ncclSuccess && state != ncclInProgress) {
        status = NcclStatus(state, "NCCL work in flight", comm_);
      } else {
        // The stream runs in order: once the newest complete mark is found, every
        // older one is complete too.
        for (auto it = marks_.begin(); it != marks_.end() && it->first <= mark; ++it) {
          const cudaError_t done = cudaEventQuery(it->second.get());
          if (done == cudaErrorNotReady) break;
          if (done != cudaSuccess) {
            status = CudaStatus(done, "cudaEventQuery(event)");
            break;
          }
          completed_mark_ = it->first;
        }
        while (!marks_.empty() && marks_.front().first <= completed_mark_) {
          spare_events_.push_back(std::move(marks_.front().second));
          marks_.pop_front();
        }
        if (status.ok() && mark <= completed_mark_) return absl::OkStatus();
      }
      if (!status.ok()) {
        BreakLocked(status);
        return status;
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("NCCL work not finished after ", absl::FormatDuration(absl::Now() - start)));
    }
    Pause(polls);
  }
}

void NcclComm::Break(const absl::Status& reason) {
  MutexLock lock(&mu_);
  BreakLocked(reason);
}

void NcclComm::BreakLocked(const absl::Status& reason) {
  if (health_.ok()) {
    health_ =
        reason.ok() ? absl::AbortedError(absl::StrCat("nccl rank ", rank_, ": aborted")) : reason;
  }
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

absl::Status NcclComm::health() const {
  MutexLock lock(&mu_);
  return health_;
}

}  // namespace nccl_internal
}  // namespace loom

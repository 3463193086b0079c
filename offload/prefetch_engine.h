// PrefetchEngine: runs tensor transfers between memory tiers on worker threads,
// ahead of their use, so that compute on tensor k overlaps the transfer of k+1.
//
// A transfer is any function that fills (or drains) a buffer: a read from the disk
// tier, the decoding of a compressed copy, a copy into pinned memory. The engine
// starts transfers in the order they were submitted (one FIFO queue served by
// `workers` threads); each submission returns a ticket, and Wait(ticket) returns the
// transfer's status, with the tensor's name put in front of any error, so an I/O
// error surfaces where the data is needed. Cancel drops a transfer that has not
// started and asks a running one to stop (through its CancelToken).
//
// PrefetchStream (below) builds double buffering on it: a fixed set of host buffers
// and an in-order walk over a list of tensors.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<PrefetchEngine> engine,
//                         PrefetchEngine::Create({.workers = 2}));
//   LOOM_ASSIGN_OR_RETURN(PrefetchEngine::Ticket t, engine->Submit("layer3.m",
//       [&](const CancelToken& cancel) { return tier->Read("layer3.m", buffer); }));
//   ... compute on something else ...
//   LOOM_RETURN_IF_ERROR(engine->Wait(t, absl::Now() + absl::Seconds(30)));
//   // On a failed read: DataLoss "prefetch of 'layer3.m': <the tier's message>".
#ifndef LOOM_OFFLOAD_PREFETCH_ENGINE_H_
#define LOOM_OFFLOAD_PREFETCH_ENGINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace loom {

// CancelToken: a transfer polls it between pieces of work and may return early
// (with any status) once it reads true.
class CancelToken {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  friend class PrefetchEngine;
  std::atomic<bool> cancelled_{false};
};

struct PrefetchEngineOptions {
  // Threads that run transfers; at least 1. Two keep a disk busy while a decode
  // runs; more only help with several slow tiers.
  int workers = 2;
  // Transfers submitted and not yet waited for, at most; Submit past it is
  // ResourceExhausted (a caller that never waits would otherwise grow the queue
  // without bound).
  int max_outstanding = 1024;
};

class PrefetchEngine {
 public:
  using Ticket = uint64_t;
  using Transfer = absl::AnyInvocable<absl::Status(const CancelToken&)>;

  // Create starts the workers. InvalidArgument for workers < 1 or > 256, or
  // max_outstanding < 1.
  static absl::StatusOr<std::unique_ptr<PrefetchEngine>> Create(
      const PrefetchEngineOptions& options);

  // The destructor cancels what is queued, asks running transfers to stop and joins
  // the workers.
  ~PrefetchEngine();
  PrefetchEngine(const PrefetchEngine&) = delete;
  PrefetchEngine& operator=(const PrefetchEngine&) = delete;

  // Submit queues `transfer` for the tensor `name` (used in errors). It starts after
  // every transfer submitted before it has started. ResourceExhausted past
  // max_outstanding; FailedPrecondition after Shutdown.
  absl::StatusOr<Ticket> Submit(absl::string_view name, Transfer transfer)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Wait blocks until the transfer finished and returns its status, prefixed
  // "prefetch of '<name>': " when not OK; Cancelled if it was cancelled before it
  // finished; DeadlineExceeded (naming the tensor and whether it had started) if
  // `deadline` passes first, in which case the ticket stays valid. NotFound for a
  // ticket never issued or already waited for.
  absl::Status Wait(Ticket ticket, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Outstanding returns whether `ticket` was issued and not yet waited for (after a
  // DeadlineExceeded from Wait it tells the engine's deadline from the transfer's).
  bool Outstanding(Ticket ticket) const ABSL_LOCKS_EXCLUDED(mu_);

  // Cancel drops a queued transfer, or signals a running one to stop; Wait then
  // returns Cancelled with `reason`. A finished transfer is left as it is. NotFound
  // for an unknown ticket.
  absl::Status Cancel(Ticket ticket, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  // Shutdown cancels everything queued or running and stops accepting work; it
  // returns once the workers have exited. Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_, join_mu_);

  // Counters, for tests and tuning.
  struct Stats {
    int64_t submitted = 0;
    int64_t completed = 0;  // Finished OK.
    int64_t failed = 0;     // Finished with an error, cancellations not included.
    int64_t cancelled = 0;
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class State { kQueued, kRunning, kDone };
  struct Task {
    std::string name;
    Transfer transfer;
    State state = State::kQueued;
    absl::Status status;
    std::string cancel_reason;
    // Shared with the running worker, which reads it without the lock.
    std::unique_ptr<CancelToken> token = std::make_unique<CancelToken>();
  };

  explicit PrefetchEngine(const PrefetchEngineOptions& options);
  void WorkerLoop() ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(Ticket ticket, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  const PrefetchEngineOptions options_;
  mutable Mutex mu_;
  CondVar work_;      // Signalled on Submit and Shutdown.
  CondVar finished_;  // Signalled when a task reaches kDone.
  absl::flat_hash_map<Ticket, Task> tasks_ ABSL_GUARDED_BY(mu_);
  std::deque<Ticket> queue_ ABSL_GUARDED_BY(mu_);
  Ticket next_ticket_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  Mutex join_mu_;  // Two Shutdown calls must not join one thread twice.
  std::vector<std::thread> workers_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace loom

#endif  // LOOM_OFFLOAD_PREFETCH_ENGINE_H_

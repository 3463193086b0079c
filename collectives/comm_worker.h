// CommWorker: one thread that runs a rank's collectives in the order they were
// submitted, so that the caller's compute overlaps them and every rank still makes
// its collective calls in one agreed order (the order of submission). Each job's
// completion is waited on with a deadline.
//
// The thread runs at a higher priority than its creator (CommWorkerOptions,
// core/thread_priority.h): its jobs are latency-bound hand-shakes with peers that
// need little CPU, and on a host with more busy threads than cores a wake-up at
// the compute threads' priority waits out a time slice at every hand-shake. For the
// same reason its waits on a polled transport nap rather than yield once they have
// spun (core/idle_wait.h).
//
// Example:
//   CommWorker worker;
//   CommWorker::Ticket t = worker.Submit([&] { return comm->AllGather(in, out); });
//   ...compute...
//   LOOM_RETURN_IF_ERROR(worker.Wait(t, absl::Now() + absl::Minutes(1)));
#ifndef LOOM_COLLECTIVES_COMM_WORKER_H_
#define LOOM_COLLECTIVES_COMM_WORKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace loom {

struct CommWorkerOptions {
  // Nice steps the thread is raised above its creator (0: the creator's priority).
  // Where the process may not raise priorities (no CAP_SYS_NICE, RLIMIT_NICE too
  // low) the thread keeps its creator's: priority() says so.
  int priority_boost = 10;
};

class CommWorker {
 public:
  using Ticket = int64_t;  // jobs are numbered 1, 2, ... in submission order

  explicit CommWorker(const CommWorkerOptions& options = {});
  // The destructor runs what was submitted, then joins the thread.
  ~CommWorker();
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;

  // Submit queues `job`; it runs after every job submitted before it, unless one
  // of those failed: then it is dropped without running (its Wait reports the
  // first error), since a collective after a failed one would pair wrong calls.
  Ticket Submit(std::function<absl::Status()> job) ABSL_LOCKS_EXCLUDED(mu_);
  // Wait returns once job `ticket` (and so every earlier one) has run: the first
  // error of the jobs up to it, or OK. DeadlineExceeded naming the ticket if it
  // has not run by `deadline`.
  absl::Status Wait(Ticket ticket, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // WaitAll waits for everything submitted so far.
  absl::Status WaitAll(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // priority: OK once the thread runs raised by options.priority_boost (or the
  // boost is 0); else why it was refused (core/thread_priority.h's error). The
  // thread is raised before the constructor returns.
  absl::Status priority() const ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return priority_;
  }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  mutable Mutex mu_;
  CondVar work_;  // a job was queued, or stopping
  CondVar done_;  // a job finished
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  Ticket submitted_ ABSL_GUARDED_BY(mu_) = 0;
  Ticket finished_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);  // sticky: later waits report it too
  Ticket first_error_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status priority_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_COMM_WORKER_H_

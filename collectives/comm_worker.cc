#include "collectives/comm_worker.h"

#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/idle_wait.h"
#include "core/mutex.h"
#include "core/thread_priority.h"

namespace loom {

CommWorker::CommWorker(const CommWorkerOptions& options) {
  // The raise is the thread's own (nice is per thread); the constructor waits for
  // it so that priority() is settled when it returns.
  bool raised = false;
  thread_ = std::thread([this, &raised, boost = options.priority_boost] {
    // Its jobs wait for peers beside the creator's compute: nap, never yield
    // (core/idle_wait.h says why).
    SetThisThreadIdleWait(IdleWait::kNap);
    absl::Status priority = RaiseThisThreadPriority(boost);
    {
      MutexLock lock(&mu_);
      priority_ = std::move(priority);
      raised = true;
    }
    done_.SignalAll();
    Loop();
  });
  MutexLock lock(&mu_);
  while (!raised) done_.Wait(&mu_);
}

CommWorker::~CommWorker() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_.SignalAll();
  thread_.join();
}

CommWorker::Ticket CommWorker::Submit(std::function<absl::Status()> job) {
  Ticket ticket;
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_.Signal();
  return ticket;
}

absl::Status CommWorker::Wait(Ticket ticket, absl::Time deadline) {
  MutexLock lock(&mu_);
  while (finished_ < ticket) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "collective job ", ticket, " has not finished by its deadline (", finished_, " of ",
          submitted_, " submitted jobs done)"));
    }
    done_.WaitWithTimeout(&mu_, left);
  }
  if (!first_error_.ok() && first_error_ticket_ <= ticket) return first_error_;
  return absl::OkStatus();
}

absl::Status CommWorker::WaitAll(absl::Time deadline) {
  Ticket last;
  {
    MutexLock lock(&mu_);
    last = submitted_;
  }
  return Wait(last, deadline);
}

void CommWorker::Loop() {
  MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<absl::Status()> job = std::move(queue_.front());
    queue_.pop_front();
    // After a failure the later jobs are dropped, not run: they are collectives
    // whose peers may be gone or, after a failed agreement check, at another
    // point, where running them would pair the wrong calls or wait out a deadline.
    const bool skip = !first_error_.ok();
    mu_.Unlock();
    absl::Status status = skip ? absl::OkStatus() : job();
    job = nullptr;  // its captures go before the waiters hear it finished
    mu_.Lock();
    ++finished_;
    if (!status.ok() && first_error_.ok()) {
      first_error_ = std::move(status);
      first_error_ticket_ = finished_;
    }
    done_.SignalAll();
  }
}

}  // namespace loom

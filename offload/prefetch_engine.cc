#include "offload/prefetch_engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

absl::StatusOr<std::unique_ptr<PrefetchEngine>> PrefetchEngine::Create(
    const PrefetchEngineOptions& options) {
  if (options.workers < 1 || options.workers > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefetch engine: workers=", options.workers, " must be in [1, 256]"));
  }
  if (options.max_outstanding < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefetch engine: max_outstanding=", options.max_outstanding, " must be at least 1"));
  }
  std::unique_ptr<PrefetchEngine> engine(new PrefetchEngine(options));
  PrefetchEngine* const raw = engine.get();
  {
    MutexLock lock(&raw->join_mu_);
    for (int i = 0; i < options.workers; ++i) {
      raw->workers_.emplace_back([raw] { raw->WorkerLoop(); });
    }
  }
  return engine;
}

PrefetchEngine::PrefetchEngine(const PrefetchEngineOptions& options) : options_(options) {}

PrefetchEngine::~PrefetchEngine() { Shutdown(); }

absl::StatusOr<PrefetchEngine::Ticket> PrefetchEngine::Submit(absl::string_view name,
                                                              Transfer transfer) {
  MutexLock lock(&mu_);
  if (stopping_) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefetch of '", name, "': the engine was shut down"));
  }
  if (tasks_.size() >= static_cast<size_t>(options_.max_outstanding)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prefetch of '", name, "': ", tasks_.size(),
        " transfers are outstanding (submitted, not waited for), the limit is ",
        options_.max_outstanding));
  }
  const Ticket ticket = next_ticket_++;
  Task& task = tasks_[ticket];
  task.name = std::string(name);
  task.transfer = std::move(transfer);
  queue_.push_back(ticket);
  ++stats_.submitted;
  work_.Signal();
  return ticket;
}

void PrefetchEngine::WorkerLoop() {
  while (true) {
    Ticket ticket = 0;
    Transfer transfer;
    const CancelToken* token = nullptr;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) work_.Wait(&mu_);
      if (queue_.empty()) return;  // Stopping, and nothing left to hand out.
      ticket = queue_.front();
      queue_.pop_front();
      Task& task = tasks_.at(ticket);
      task.state = State::kRunning;
      transfer = std::move(task.transfer);
      token = task.token.get();
    }
    // The token outlives the call: a running task is never erased (Wait erases only
    // finished ones, and Shutdown joins the workers before the map goes).
    absl::Status status = transfer(*token);
    transfer = nullptr;  // Release what the transfer captured before reporting.
    Finish(ticket, std::move(status));
  }
}

void PrefetchEngine::Finish(Ticket ticket, absl::Status status) {
  MutexLock lock(&mu_);
  Task& task = tasks_.at(ticket);
  task.state = State::kDone;
  if (task.token->cancelled()) {
    task.status = absl::CancelledError(
        absl::StrCat("prefetch of '", task.name, "' was cancelled: ", task.cancel_reason));
    ++stats_.cancelled;
  } else if (!status.ok()) {
    task.status = absl::Status(
        status.code(), absl::StrCat("prefetch of '", task.name, "': ", status.message()));
    ++stats_.failed;
  } else {
    ++stats_.completed;
  }
  finished_.SignalAll();
}

absl::Status PrefetchEngine::Wait(Ticket ticket, absl::Time deadline) {
  MutexLock lock(&mu_);
  auto it = tasks_.find(ticket);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "prefetch engine: ticket ", ticket, " was never issued or was already waited for"));
  }
  // Looked up afresh after every wake-up: other tickets come and go meanwhile. After a
  // timeout the state is looked at once more: it may have finished as time ran out.
  while (tasks_.at(ticket).state != State::kDone) {
    if (!finished_.WaitWithDeadline(&mu_, deadline)) break;
  }
  if (tasks_.at(ticket).state != State::kDone) {
    const Task& task = tasks_.at(ticket);
    return absl::DeadlineExceededError(absl::StrCat(
        "prefetch of '", task.name, "' did not finish by the deadline ",
        absl::FormatTime(deadline), " (",
        task.state == State::kQueued ? "still queued behind earlier transfers" : "running",
        ")"));
  }
  absl::Status status = std::move(tasks_.at(ticket).status);
  tasks_.erase(ticket);
  return status;
}

bool PrefetchEngine::Outstanding(Ticket ticket) const {
  MutexLock lock(&mu_);
  return tasks_.contains(ticket);
}

absl::Status PrefetchEngine::Cancel(Ticket ticket, absl::string_view reason) {
  MutexLock lock(&mu_);
  auto it = tasks_.find(ticket);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "prefetch engine: cannot cancel ticket ", ticket, ": never issued or already waited for"));
  }
  Task& task = it->second;
  switch (task.state) {
    case State::kDone:
      break;
    case State::kRunning:
      task.cancel_reason = std::string(reason);
      task.token->cancelled_.store(true, std::memory_order_release);
      break;
    case State::kQueued:
      for (auto q = queue_.begin(); q != queue_.end(); ++q) {
        if (*q == ticket) {
          queue_.erase(q);
          break;
        }
      }
      task.transfer = nullptr;
      task.state = State::kDone;
      task.status = absl::CancelledError(
          absl::StrCat("prefetch of '", task.name, "' was cancelled: ", reason));
      ++stats_.cancelled;
      finished_.SignalAll();
      break;
  }
  return absl::OkStatus();
}

void PrefetchEngine::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      for (auto& [ticket, task] : tasks_) {
        if (task.state == State::kRunning) {
          task.cancel_reason = "the engine is shutting down";
          task.token->cancelled_.store(true, std::memory_order_release);
        } else if (task.state == State::kQueued) {
          task.transfer = nullptr;
          task.state = State::kDone;
          task.status = absl::CancelledError(
              absl::StrCat("prefetch of '", task.name, "' was cancelled: the engine shut down"));
          ++stats_.cancelled;
        }
      }
      queue_.clear();
      work_.SignalAll();
      finished_.SignalAll();
    }
  }
  MutexLock join_lock(&join_mu_);
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

PrefetchEngine::Stats PrefetchEngine::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace loom

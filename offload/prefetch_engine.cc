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
  for (int i = 0; i < options.workers; ++i) {
    engine->workers_.emplace_back([raw = engine.get()] { raw->WorkerLoop(); });
  }
  return engine;
}

PrefetchEngine::PrefetchEngine(const PrefetchEngineOptions& options) : options_(options) {}

PrefetchEngine::~PrefetchEngine() { Shutdown(); }

absl::StatusOr<PrefetchEngine::Ticket> PrefetchEngine::Submit(absl::string_view name,
                                                              Transfer transfer) {
  std::lock_guard<std::mutex> lock(mu_);
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
  work_.notify_one();
  return ticket;
}

void PrefetchEngine::WorkerLoop() {
  while (true) {
    Ticket ticket = 0;
    Transfer transfer;
    const CancelToken* token = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
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
  std::lock_guard<std::mutex> lock(mu_);
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
  finished_.notify_all();
}

absl::Status PrefetchEngine::Wait(Ticket ticket, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = tasks_.find(ticket);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "prefetch engine: ticket ", ticket, " was never issued or was already waited for"));
  }
  // Looked up afresh after every wake-up: other tickets come and go meanwhile.
  auto done = [this, ticket] { return tasks_.at(ticket).state == State::kDone; };
  if (!finished_.wait_until(lock, absl::ToChronoTime(deadline), done)) {
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
  std::lock_guard<std::mutex> lock(mu_);
  return tasks_.contains(ticket);
}

absl::Status PrefetchEngine::Cancel(Ticket ticket, absl::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
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
      finished_.notify_all();
      break;
  }
  return absl::OkStatus();
}

void PrefetchEngine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
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
      work_.notify_all();
      finished_.notify_all();
    }
  }
  std::lock_guard<std::mutex> join_lock(join_mu_);  // Two Shutdown calls must not join one thread twice.
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

PrefetchEngine::Stats PrefetchEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace loom

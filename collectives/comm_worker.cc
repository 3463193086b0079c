#include "collectives/comm_worker.h"

#include <chrono>
#include <functional>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace loom {

CommWorker::CommWorker() : thread_([this] { Loop(); }) {}

CommWorker::~CommWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_all();
  thread_.join();
}

CommWorker::Ticket CommWorker::Submit(std::function<absl::Status()> job) {
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
    ticket = ++submitted_;
  }
  work_.notify_one();
  return ticket;
}

absl::Status CommWorker::Wait(Ticket ticket, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  while (finished_ < ticket) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "collective job ", ticket, " has not finished by its deadline (", finished_, " of ",
          submitted_, " submitted jobs done)"));
    }
    done_.wait_for(lock, absl::ToChronoNanoseconds(left));
  }
  if (!first_error_.ok() && first_error_ticket_ <= ticket) return first_error_;
  return absl::OkStatus();
}

absl::Status CommWorker::WaitAll(absl::Time deadline) {
  Ticket last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = submitted_;
  }
  return Wait(last, deadline);
}

void CommWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to run
    std::function<absl::Status()> job = std::move(queue_.front());
    queue_.pop_front();
    // After a failure the later jobs are dropped, not run: they are collectives
    // whose peers may be gone or, after a failed agreement check, at another
    // point, where running them would pair the wrong calls or wait out a deadline.
    const bool skip = !first_error_.ok();
    lock.unlock();
    absl::Status status = skip ? absl::OkStatus() : job();
    job = nullptr;  // its captures go before the waiters hear it finished
    lock.lock();
    ++finished_;
    if (!status.ok() && first_error_.ok()) {
      first_error_ = std::move(status);
      first_error_ticket_ = finished_;
    }
    done_.notify_all();
  }
}

}  // namespace loom

#include "zero3/gradient_all_reducer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

absl::StatusOr<std::shared_ptr<GradientAllReducer>> GradientAllReducer::Create(
    Communicator* dp, const GradientAllReducerOptions& options) {
  if (dp == nullptr) return absl::InvalidArgumentError("GradientAllReducer: null communicator");
  if (options.wait_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("GradientAllReducer: wait_timeout ",
                                                   absl::FormatDuration(options.wait_timeout),
                                                   " is not positive"));
  }
  std::shared_ptr<GradientAllReducer> reducer(new GradientAllReducer(dp, options));
  reducer->thread_ = std::thread([raw = reducer.get()] { raw->Run(); });
  return reducer;
}

GradientAllReducer::GradientAllReducer(Communicator* dp, const GradientAllReducerOptions& options)
    : dp_(dp), options_(options) {}

GradientAllReducer::~GradientAllReducer() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

int64_t GradientAllReducer::Enqueue(absl::Span<float> data) {
  MutexLock lock(&mu_);
  queue_.push_back(data);
  changed_.SignalAll();
  return ++enqueued_;
}

absl::Status GradientAllReducer::Wait(int64_t ticket) {
  const absl::Time deadline = absl::Now() + options_.wait_timeout;
  MutexLock lock(&mu_);
  while (done_ < ticket && error_.ok()) {
    if (!changed_.WaitWithDeadline(&mu_, deadline) && done_ < ticket && error_.ok()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "GradientAllReducer: all-reduce ", done_ + 1, " of ", ticket, " not done after ",
          absl::FormatDuration(options_.wait_timeout)));
    }
  }
  return error_;
}

int64_t GradientAllReducer::enqueued() const {
  MutexLock lock(&mu_);
  return enqueued_;
}

double GradientAllReducer::busy_seconds() const {
  MutexLock lock(&mu_);
  return busy_seconds_;
}

void GradientAllReducer::Run() {
  while (true) {
    absl::Span<float> data;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stop_) changed_.Wait(&mu_);
      if (stop_) return;
      data = queue_.front();
      queue_.pop_front();
      if (!error_.ok()) {
        // After a failure nothing more is reduced: the group's collectives no
        // longer match. Each ticket still completes, carrying the error.
        ++done_;
        changed_.SignalAll();
        continue;
      }
    }
    const absl::Time start = absl::Now();
    absl::Status status = dp_->AllReduce(data, options_.op);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    MutexLock lock(&mu_);
    busy_seconds_ += seconds;
    if (!status.ok() && error_.ok()) {
      error_ = absl::Status(status.code(),
                            absl::StrCat("gradient all-reduce ", done_ + 1, ": ", status.message()));
    }
    ++done_;
    changed_.SignalAll();
  }
}

}  // namespace loom

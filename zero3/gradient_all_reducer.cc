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
  return std::shared_ptr<GradientAllReducer>(new GradientAllReducer(dp, options));
}

int64_t GradientAllReducer::Enqueue(absl::Span<float> data) {
  const int64_t number = ++enqueued_;  // the worker's ticket too: it has no other submitter
  return worker_.Submit([this, data, number]() -> absl::Status {
    const absl::Time start = absl::Now();
    const absl::Status status = dp_->AllReduce(data, options_.op);
    busy_nanoseconds_ += absl::ToInt64Nanoseconds(absl::Now() - start);
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrCat("gradient all-reduce ", number, ": ", status.message()));
  });
}

absl::Status GradientAllReducer::Wait(int64_t ticket) {
  return worker_.Wait(ticket, absl::Now() + options_.wait_timeout);
}

}  // namespace loom

#include "integrations/torch/work.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {
namespace pytorch {

LoomWork::LoomWork(int rank, c10d::OpType type, const char* profiling_title,
                   std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                   std::string call, absl::Time finished_by)
    : c10d::Work(rank, type, profiling_title),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))),
      call_(std::move(call)),
      finished_by_(finished_by) {}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  const bool bounded = timeout != kNoTimeout;
  const absl::Time asked = bounded ? absl::Now() + absl::FromChrono(timeout) : absl::InfiniteFuture();
  const absl::Time deadline = std::min(asked, finished_by_);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!completed_) {
    if (absl::Now() >= deadline) {
      if (deadline == asked) {
        throw std::runtime_error(absl::StrCat("loom: ", call_, ": wait timed out after ",
                                              timeout.count(),
                                              " ms (the call goes on; its own timeout ends it)"));
      }
      throw std::runtime_error(absl::StrCat(
          "loom: ", call_, ": not finished by ", absl::FormatTime(finished_by_),
          ", when its progress thread should have ended it (a bug in loom_torch)"));
    }
    cv_.wait_until(lock, absl::ToChronoTime(std::min(deadline, absl::Now() + absl::Seconds(1))));
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() { return future_; }

std::vector<at::Tensor> LoomWork::result() { return outputs_; }

int LoomWork::sourceRank() const { return source_rank_.load(); }

void LoomWork::Complete(const absl::Status& status, const std::string& message) {
  if (status.ok()) {
    finish();
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  std::exception_ptr error = std::make_exception_ptr(std::runtime_error(message));
  finish(error);
  future_->setError(error);
}

}  // namespace pytorch
}  // namespace loom

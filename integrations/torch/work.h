// LoomWork: what every call of Loom's process group returns to PyTorch. The call runs
// on the group's progress thread (collectives/comm_worker.h); the work completes when
// it has run, with the call's output tensors or with Loom's error, and so does its
// future (DistributedDataParallel's reducer chains its gradient averaging on it).
//
// Example (inside the process group; `run` is the Loom call):
//   auto work = c10::make_intrusive<LoomWork>(rank, c10d::OpType::ALLREDUCE,
//                                             "loom:all_reduce", inputs, outputs, call, bound);
//   ... on the progress thread: work->Complete(status, "loom: rank 0 of 2 ...");
//   work->wait();         // true; or throws std::runtime_error with Loom's message
//   work->getFuture();    // completed with `outputs`, or with that error
#ifndef LOOM_INTEGRATIONS_TORCH_WORK_H_
#define LOOM_INTEGRATIONS_TORCH_WORK_H_

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace loom {
namespace pytorch {

class LoomWork final : public c10d::Work {
 public:
  // `inputs` and `outputs` are the tensors the call reads and writes: the work keeps
  // them alive until it is destroyed (the call borrows them). `call` names the call
  // in errors ("all_reduce #3 (f32, 1000 elements, sum)"); `finished_by` is when the
  // progress thread will have finished it whatever happens (every call before it and
  // it ran into its timeout), past which a wait reports a bug rather than blocking on.
  LoomWork(int rank, c10d::OpType type, const char* profiling_title,
           std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs, std::string call,
           absl::Time finished_by);

  // wait blocks until the call has run, or `timeout` (when not zero) has passed:
  // true, or throws std::runtime_error with the call's error, or with "wait timed
  // out" naming the call (which goes on: its own timeout ends it).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  // sourceRank: for recvAnysource, the rank the message came from (-1 before).
  int sourceRank() const override;

  // Complete finishes the work: OK completes the future with the outputs; otherwise
  // `message` (Loom's error, naming the rank and the call) becomes the exception of
  // wait() and of the future. Once, from the progress thread.
  void Complete(const absl::Status& status, const std::string& message);
  void SetSourceRank(int rank) { source_rank_.store(rank); }
  const std::string& call() const { return call_; }
  const std::vector<at::Tensor>& inputs() const { return inputs_; }
  const std::vector<at::Tensor>& outputs() const { return outputs_; }

 private:
  const std::vector<at::Tensor> inputs_;
  const std::vector<at::Tensor> outputs_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  const std::string call_;
  const absl::Time finished_by_;
  std::atomic<int> source_rank_{-1};
};

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_WORK_H_

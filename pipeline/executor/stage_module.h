// StageModule: the part of a model one pipeline rank holds, as the executor calls
// it: forward and backward passes of its stages, and, on the ranks that hold the
// ends of the pipeline, the microbatch inputs and the loss.
//
// The executor (executor.h) owns no weights and does no math. It runs a rank's
// schedule, calls these methods in the schedule's order, and moves the tensors they
// return: a stage's forward output to the next stage, its input gradient to the
// previous one, over the transport when that stage lives on another rank. The
// module keeps whatever a backward needs from its forward (activations), keyed by
// (stage, microbatch), and accumulates its own weight gradients.
//
// Calls for one (stage, microbatch), in this order:
//   Input(mb)                       stage 0 only, right before its Forward
//   Forward(s, mb, input)           returns the stage's output
//   Loss(mb, output)                last stage only, right after its Forward;
//                                   returns d loss / d output
//   Backward(s, mb, output_grad)    returns d loss / d input (and adds the weight
//                                   gradient), or, in the zero-bubble schedules:
//   BackwardInput(s, mb, output_grad)   the input gradient only; then later
//   BackwardWeight(s, mb)               the weight gradient
// Stage 0's input gradient is dropped (there is no earlier stage), so a module may
// return an empty tensor there.
//
// A forward-only schedule (an evaluation, pipeline/generators.h's
// MakeForwardOnlySchedule) calls only Input, Forward and Loss: Loss records the
// loss as usual, and the gradient it returns is dropped. What Forward keeps for a
// backward is then never consumed; a module that holds such state drops it where
// it starts its next step (or keeps none when told the run is forward-only).
//
// The executor checks every tensor it hands to Forward, Backward or BackwardInput
// against InputShape / OutputShape before the call, and a tensor arriving from
// another rank before its bytes are received: a mismatch is FailedPrecondition
// naming both sides, never a silently reinterpreted buffer.
//
// Gradient order. A module that adds each microbatch's weight gradient into one
// accumulator gets bitwise reproducible results only if the microbatches come in a
// fixed order. Every generator in pipeline/generators.h runs each stage's B (or W)
// in ascending microbatch order (executor_test checks this), so accumulating in
// call order equals accumulating in microbatch order, whatever the schedule.
//
// Tensors are core/tensor.h's. What crosses ranks (activations and their
// gradients) is f32; stage 0's Input may be of any dtype (token ids as i64), since
// it goes from Input to the Forward of the same rank.
//
// Example (a stage that doubles its input, on a one-stage pipeline):
//   class Doubler : public StageModule {
//    public:
//     std::vector<int64_t> InputShape(int64_t, int64_t) const override { return {2}; }
//     std::vector<int64_t> OutputShape(int64_t, int64_t) const override { return {2}; }
//     absl::StatusOr<Tensor> Input(int64_t mb) override {
//       return Tensor::FromValues({2}, {1.0f * mb, 1});
//     }
//     absl::StatusOr<Tensor> Loss(int64_t, const Tensor& y) override {
//       return y.Clone();   // loss = sum(y^2) / 2, so d loss / d y = y
//     }
//     absl::StatusOr<Tensor> Forward(int64_t, int64_t, const Tensor& x) override {
//       Tensor y = x.Clone();
//       for (float& v : *y.As<float>()) v *= 2;
//       return y;
//     }
//     absl::StatusOr<Tensor> Backward(int64_t, int64_t, const Tensor& dy) override {
//       return Forward(0, 0, dy);   // d loss / d x = 2 dy
//     }
//   };
//   Doubler().SupportsSplitBackward();   // false: cannot run zb-h1 or zb-v
#ifndef LOOM_PIPELINE_EXECUTOR_STAGE_MODULE_H_
#define LOOM_PIPELINE_EXECUTOR_STAGE_MODULE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace loom {

class StageModule {
 public:
  virtual ~StageModule() = default;

  // InputShape returns the shape of the activation `stage` takes for `microbatch`
  // (for stage 0, the shape Input returns).
  virtual std::vector<int64_t> InputShape(int64_t stage, int64_t microbatch) const = 0;

  // OutputShape returns the shape of `stage`'s forward output for `microbatch`,
  // which is also the shape of the output gradient its backward takes.
  virtual std::vector<int64_t> OutputShape(int64_t stage, int64_t microbatch) const = 0;

  // Input returns microbatch `microbatch`'s input to stage 0. Called only on the
  // rank that holds stage 0. The default returns Unimplemented.
  virtual absl::StatusOr<Tensor> Input(int64_t microbatch);

  // Loss takes the last stage's forward output for `microbatch` and returns the
  // gradient of the loss with respect to it (the module records the loss value
  // itself). Called only on the rank that holds the last stage. The default
  // returns Unimplemented.
  virtual absl::StatusOr<Tensor> Loss(int64_t microbatch, const Tensor& output);

  // Forward runs `stage` on `input` and returns its output.
  virtual absl::StatusOr<Tensor> Forward(int64_t stage, int64_t microbatch,
                                            const Tensor& input) = 0;

  // Backward takes the gradient of the loss with respect to `stage`'s output,
  // adds the stage's weight gradients for `microbatch`, and returns the gradient
  // with respect to its input.
  virtual absl::StatusOr<Tensor> Backward(int64_t stage, int64_t microbatch,
                                             const Tensor& output_grad) = 0;

  // SupportsSplitBackward is true when BackwardInput and BackwardWeight are
  // implemented; the zero-bubble schedules (I and W actions) need it. The
  // executor refuses such a schedule with InvalidArgument before any message
  // moves otherwise.
  virtual bool SupportsSplitBackward() const { return false; }

  // BackwardInput returns the input gradient as Backward does, without the weight
  // gradient, and keeps what BackwardWeight will need. The default returns
  // Unimplemented.
  virtual absl::StatusOr<Tensor> BackwardInput(int64_t stage, int64_t microbatch,
                                                  const Tensor& output_grad);

  // BackwardWeight adds the weight gradients of (stage, microbatch), after its
  // BackwardInput. The default returns Unimplemented.
  virtual absl::Status BackwardWeight(int64_t stage, int64_t microbatch);
};

}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_STAGE_MODULE_H_

// ParameterSource: where a model's parameters live when the model does not own
// them. A model that borrows its weights (models/gpt's GptModel::UseParameterSource)
// asks the source for each parameter just before it computes with it, drops the
// view when the pass moves on, and hands its gradients back to the source, so the
// source decides what is resident: zero3's Zero3Engine all-gathers a block's
// parameters from the data-parallel shards and frees them after use (FSDP's
// reshard after forward), a plain store keeps everything, a test store records
// the calls.
//
// Calls come in passes. A pass visits the model's units (a GPT block, the
// embeddings, the head: the parameters gathered and released together) in one
// order: a forward pass in the model's parameter order, a backward pass in
// reverse. Parameters are numbered in the model's Parameters() order.
//
//   kForward    Acquire in forward order.
//   kBackward   Acquire in reverse order; AddGrad gives this pass's gradients.
//   kRegather   Acquire in reverse order; no gradients (the model keeps them and
//               hands them back in one kGradients pass at the end of the step).
//   kGradients  AddGrad only, in reverse order (a zero-bubble schedule's weight
//               pass, or the end of a step that kept its gradients).
//
// Example (one block of a model that borrows its weights):
//   LOOM_RETURN_IF_ERROR(source.BeginPass(ParameterPass::kForward));
//   LOOM_ASSIGN_OR_RETURN(absl::Span<const float> w, source.Acquire(2));
//   ...compute with w (valid until the pass moves past its unit, or EndPass)...
//   LOOM_RETURN_IF_ERROR(source.EndPass());
//   LOOM_RETURN_IF_ERROR(source.BeginPass(ParameterPass::kBackward));
//   LOOM_ASSIGN_OR_RETURN(w, source.Acquire(2));
//   LOOM_RETURN_IF_ERROR(source.AddGrad(2, dw));
//   LOOM_RETURN_IF_ERROR(source.EndPass());
//   source.Acquire(2);   // outside a pass: FailedPrecondition naming the parameter
#ifndef LOOM_CORE_PARAMETER_SOURCE_H_
#define LOOM_CORE_PARAMETER_SOURCE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {

enum class ParameterPass { kForward, kBackward, kRegather, kGradients };

// ParameterUnit: parameters [first, end) (in the model's Parameters() order) that
// the model uses together, so a source gathers, releases, offloads and keeps them
// whole or sharded as one (FSDP2's fully_shard(module)). The model declares its
// units (e.g. GptModel::Units()); a source is laid out from them, never from
// parameter names. Units cover the parameters in order, each at least one.
struct ParameterUnit {
  std::string name;  // e.g. "blocks.3", "embed", "head" (the final norm with the head)
  int first = 0;
  int end = 0;
  int size() const { return end - first; }
};

class ParameterSource {
 public:
  virtual ~ParameterSource() = default;

  // BeginParameterPass starts a pass; FailedPrecondition inside one.
  virtual absl::Status BeginParameterPass(ParameterPass pass) = 0;
  // Acquire returns parameter `param` (f32, this rank's tensor-parallel shard,
  // row-major), valid until the pass releases its unit (moves past it, or ends).
  // FailedPrecondition outside an acquiring pass or for a unit already released.
  virtual absl::StatusOr<absl::Span<const float>> Acquire(int param) = 0;
  // AcquireBf16 returns the same parameter's bf16 compute copy where the source keeps
  // one (mixed precision: Acquire's values are this copy widened), valid as long as
  // Acquire's view, so that a bf16 product need not round the weights again; call it
  // after Acquire(param). Unimplemented where the source keeps none (the default):
  // the caller rounds Acquire's values itself.
  virtual absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param) {
    return absl::UnimplementedError(
        absl::StrCat("this parameter source keeps no bf16 copy (parameter ", param, ")"));
  }
  // AddGrad adds `grad` (the parameter's element count) to `param`'s gradient, in
  // a kBackward or kGradients pass.
  virtual absl::Status AddGrad(int param, absl::Span<const float> grad) = 0;
  // EndPass finishes the pass (its collectives, for a distributed source) and
  // returns the pass's first error.
  virtual absl::Status EndPass() = 0;
};

}  // namespace loom

#endif  // LOOM_CORE_PARAMETER_SOURCE_H_

// ColumnParallelLinear: y = x W^T + b with W [out, in] split by rows (output
// features) across the tensor-parallel group, as in Megatron-LM. Each rank computes
// its slice of y's features; nothing is communicated in the forward pass unless the
// output is gathered, and the backward pass all-reduces the input gradient.
//
// Sequence parallelism (options.sequence_parallel): the input arrives split along
// dimension 0 (the sequence, Megatron's [s, b, h] layout) and is all-gathered before
// the product; the input gradient is reduce-scattered back to the sequence pieces
// instead of all-reduced. Pieces follow ShardExtentOf(sequence_length, tp, rank,
// rule); uneven pieces are padded to the largest for the equal-block collectives.
//
// Activations and gradients are f32; the weight (and bias) may be stored as bf16
// (options.weight_dtype). The products run in options.precision (gemm.h): f32, or
// with their inputs rounded to bf16 (always so with bf16 storage). Gradients are f32.
//
// Example (tp = 2, in = 4, out = 6; every rank holds the same full weight):
//   LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
//                         ColumnParallelLinear::Create(w /*[6,4]*/, &b /*[6]*/, tp, {}));
//   fc.weight().shape();                                  // {3, 4}: rows 3*rank..
//   LOOM_ASSIGN_OR_RETURN(Tensor y, fc.Forward(x /*[5,4]*/));   // [5,3], local features
//   LOOM_ASSIGN_OR_RETURN(Tensor dx, fc.Backward(dy /*[5,3]*/));// [5,4], all-reduced
//   fc.weight_grad().shape();                             // {3, 4}
//   fc.Forward(x2 /*[5,7]*/);
//   // InvalidArgument: "ColumnParallelLinear: input shape [5,7] must be [..., 4]"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_COLUMN_PARALLEL_LINEAR_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_COLUMN_PARALLEL_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {

struct ColumnParallelOptions {
  // Gather the output features (all ranks get [.., out]); not with sequence_parallel,
  // whose consumer is a row-parallel layer that wants the split features.
  bool gather_output = false;
  bool sequence_parallel = false;
  // Full length of input dimension 0 under sequence parallelism (fixed per layer,
  // as Megatron fixes seq_length): each rank's piece is ShardExtentOf of it.
  int64_t sequence_length = 0;
  // How output features (and the sequence, under sequence parallelism) are split.
  ShardRule rule = ShardRule::kBalanced;
  // Storage of the weight shard and bias: f32 or bf16 (bf16 storage computes as
  // `precision` kBf16).
  DType weight_dtype = DType::kF32;
  // What the layer's products multiply (gemm.h): kBf16 rounds the input, the weight
  // and the output gradient to bf16 for the forward, input-gradient and
  // weight-gradient products, accumulating in f32 (bf16 hardware GEMMs where the CPU
  // has them). For f32 storage whose values are bf16 anyway, such as borrowed weights
  // of a bf16 model (the training job's --dtype bf16).
  GemmPrecision precision = GemmPrecision::kF32;
};

class ColumnParallelLinear {
 public:
  // Create takes this rank's rows of `full_weight` [out, in] (and of `full_bias`
  // [out], if given), per options.rule, converted to options.weight_dtype.
  // InvalidArgument naming the shapes for a weight that is not 2-D, a bias that is not
  // [out], sequence parallelism without a positive sequence_length or with
  // gather_output, or a storage dtype other than f32/bf16.
  static absl::StatusOr<ColumnParallelLinear> Create(const Tensor& full_weight,
                                                     const Tensor* full_bias, Communicator& tp,
                                                     const ColumnParallelOptions& options);

  // FromShard takes a shard the caller cut itself (e.g. an attention block's Q, K
  // and V rows of its heads): local_weight [out_widths[rank], in], local_bias
  // [out_widths[rank]] or null; out_widths lists every rank's rows (for
  // gather_output). options.rule still splits the sequence. InvalidArgument as in
  // Create, or when out_widths has not tp.size() entries or disagrees with the shard.
  static absl::StatusOr<ColumnParallelLinear> FromShard(const Tensor& local_weight,
                                                        const Tensor* local_bias,
                                                        std::vector<int64_t> out_widths,
                                                        Communicator& tp,
                                                        const ColumnParallelOptions& options);

  ColumnParallelLinear(ColumnParallelLinear&&) = default;
  ColumnParallelLinear& operator=(ColumnParallelLinear&&) = default;

  // Forward returns x W_local^T + b_local, of shape [s, ..., out_local] ([s, ..., out]
  // with gather_output), where s is the full sequence (gathered under sequence
  // parallelism). Keeps the gathered input for Backward. InvalidArgument naming the
  // shape for an input that is not f32 [..., in] (dim 0 = this rank's sequence piece
  // under sequence parallelism); otherwise a collective's error.
  absl::StatusOr<Tensor> Forward(const Tensor& input);

  // Backward takes dL/dy (the shape Forward returned), sets weight_grad() and
  // bias_grad(), and returns dL/dx in the input's shape: the sum over ranks
  // (all-reduce, or reduce-scatter to the sequence piece). FailedPrecondition before
  // any Forward; InvalidArgument naming both shapes for a mismatched gradient;
  // otherwise a collective's error.
  absl::StatusOr<Tensor> Backward(const Tensor& grad_output);

  // Split backward (weight_grad_work.h): BackwardInput returns dL/dx as Backward
  // does (with its collective), moves what the weight gradient needs into `work`
  // and forgets the forward (Backward then needs a new Forward). BackwardWeight
  // sets weight_grad() and bias_grad() from a work this layer filled, bitwise as
  // Backward would have; other Forwards may run in between. Errors as Backward;
  // BackwardWeight is InvalidArgument naming the sizes for a work of another shape.
  absl::StatusOr<Tensor> BackwardInput(const Tensor& grad_output, WeightGradWork& work);
  //
  // With `weight_grad_into` (the weight's element count, e.g. a source's
  // GradientSlot) BackwardWeight's product writes the weight gradient there and
  // weight_grad() stays empty (InvalidArgument naming the sizes for another count).
  absl::Status BackwardWeight(const WeightGradWork& work, absl::Span<float> weight_grad_into = {});

  // The local shards: weight [out_local, in] and bias [out_local] (empty without
  // bias) in the storage dtype; their gradients in f32 (empty before Backward).
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& weight_grad() const { return weight_grad_; }
  const Tensor& bias_grad() const { return bias_grad_; }
  bool has_bias() const { return has_bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features_local() const { return out_widths_[static_cast<size_t>(rank_)]; }

  // Borrowed weights (ZeRO-3 and parameter offload; models/gpt borrows from a
  // ParameterSource): BorrowWeights makes Forward and Backward compute with
  // `weight` and `bias`, f32 views of this rank's shards (the shards' element
  // counts; bias empty without one), which the caller keeps alive and unchanged
  // until ReturnWeights. DropOwnedWeights frees the layer's own shards for good:
  // from then on a Forward or Backward without borrowed weights is
  // FailedPrecondition, and weight() / bias() are empty. BackwardWeight needs no
  // weights. `weight_bf16`, when given, is the weight's bf16 rounding (a mixed-
  // precision lender's compute copy, kept alive as `weight`): a kBf16 layer
  // multiplies by it instead of rounding `weight` for every product; f32 ignores
  // it. `weight` may be empty when `weight_bf16` is given (a lender that keeps no
  // f32 widening of it): the layer then multiplies in kBf16 only, and a kF32
  // product is InvalidArgument (an empty A or B). InvalidArgument naming the
  // counts for views of another size.
  absl::Status BorrowWeights(absl::Span<const float> weight, absl::Span<const float> bias,
                             absl::Span<const BFloat16> weight_bf16 = {});
  void ReturnWeights() { borrowed_ = {false, borrowed_.owned_dropped, {}, {}, {}}; }
  void DropOwnedWeights() {
    weight_ = Tensor();
    bias_ = Tensor();
    borrowed_.owned_dropped = true;
  }
  // ReleaseWeightGradients frees weight_grad() and bias_grad() (a caller that
  // added them into its accumulators, or handed them to its source).
  void ReleaseWeightGradients() {
    weight_grad_ = Tensor();
    bias_grad_ = Tensor();
  }

  // saved_activation_bytes returns the bytes Forward keeps for Backward.
  // ReleaseActivations frees them (activation checkpointing drops a layer's state
  // and recomputes it); Backward then returns FailedPrecondition until the next
  // Forward.
  size_t saved_activation_bytes() const { return state_.bytes(); }
  void ReleaseActivations() { state_ = ForwardState(); }

  // ForwardState: what one Forward keeps for its Backward, a microbatch's context.
  // TakeForwardState moves it out (the layer then holds none, as after
  // ReleaseActivations) and RestoreForwardState puts one back, so a caller with
  // several microbatches in flight keeps each one's state apart and runs any of
  // their backwards (models/gpt's GptActivations).
  using ForwardState = tp_layers_internal::LinearForwardState;
  ForwardState TakeForwardState() { return std::exchange(state_, ForwardState()); }
  void RestoreForwardState(ForwardState state) { state_ = std::move(state); }

  // comm_tally returns the collective payloads this layer has issued since Create.
  const CommTally& comm_tally() const { return tally_; }

  // gemm_precision returns the precision of the layer's products: kBf16 with bf16
  // storage, otherwise options.precision. SetGemmPrecision changes options.precision
  // (for a layer built by another, such as an attention block's projections);
  // InvalidArgument naming a value outside the enum.
  GemmPrecision gemm_precision() const {
    return tp_layers_internal::LayerPrecision(options_.weight_dtype, options_.precision);
  }
  absl::Status SetGemmPrecision(GemmPrecision precision);

 private:
  ColumnParallelLinear() = default;

  // LocalGradient checks grad_output and returns this rank's columns of it: a
  // view of grad_output, or of `storage` when they had to be picked out.
  absl::StatusOr<absl::Span<const float>> LocalGradient(const Tensor& grad_output,
                                                        std::vector<float>& storage) const;
  // WeightGradient sets the gradients from g [rows, out_local] and x [rows, in]
  // (each f32 or already bf16) and the bias gradient summed already; InputGradient
  // returns dx for g, summed over the ranks; BiasGradient sums the f32 g's rows
  // (empty without a bias).
  absl::Status WeightGradient(const GemmBf16Input& g, const GemmBf16Input& x,
                              absl::Span<const float> bias_grad, absl::Span<float> into = {});
  absl::StatusOr<Tensor> InputGradient(const GemmBf16Input& g);
  std::vector<float> BiasGradient(absl::Span<const float> g) const;

  Communicator* tp_ = nullptr;
  CommTally tally_;
  int rank_ = 0;
  ColumnParallelOptions options_;
  int64_t in_ = 0;
  std::vector<int64_t> out_widths_;
  Tensor weight_, bias_, weight_grad_, bias_grad_;
  tp_layers_internal::BorrowedWeights borrowed_;
  bool has_bias_ = false;
  // Saved by Forward: the (gathered) input, its shape on this rank, the output shape.
  ForwardState state_;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_COLUMN_PARALLEL_LINEAR_H_

// RowParallelLinear: y = x W^T + b with W [out, in] split by columns (input
// features) across the tensor-parallel group, as in Megatron-LM. The input arrives
// already split along its last dimension (a ColumnParallelLinear's output); each rank
// multiplies its piece, the partial products are all-reduced, and the bias, which
// every rank holds whole, is added once after the sum. The backward pass needs no
// communication.
//
// Sequence parallelism (options.sequence_parallel): the partial products are
// reduce-scattered along dimension 0 (the sequence) instead of all-reduced, so each
// rank gets its piece ShardExtentOf(sequence_length, tp, rank, rule) of y; the
// backward pass all-gathers the output gradient first. Uneven pieces are padded to
// the largest for the equal-block collectives.
//
// Activations and gradients are f32; the weight and bias may be stored as bf16. The
// products run in options.precision (gemm.h): f32, or with their inputs rounded to
// bf16 (always so with bf16 storage).
//
// Example (tp = 2, in = 6, out = 4):
//   LOOM_ASSIGN_OR_RETURN(RowParallelLinear proj,
//                         RowParallelLinear::Create(w /*[4,6]*/, &b /*[4]*/, tp, {}));
//   proj.weight().shape();                                  // {4, 3}
//   LOOM_ASSIGN_OR_RETURN(Tensor y, proj.Forward(x /*[5,3]*/));    // [5,4], summed
//   LOOM_ASSIGN_OR_RETURN(Tensor dx, proj.Backward(dy /*[5,4]*/)); // [5,3]
//   proj.Forward(x /*[5,6]*/);
//   // InvalidArgument: "RowParallelLinear: input shape [5,6] must be [..., 3]"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_ROW_PARALLEL_LINEAR_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_ROW_PARALLEL_LINEAR_H_

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
#include "tensor_parallel/placement.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "core/tensor.h"

namespace loom {

struct RowParallelOptions {
  bool sequence_parallel = false;
  // Full length of dimension 0 under sequence parallelism (see ColumnParallelOptions).
  int64_t sequence_length = 0;
  // How input features (and the sequence, under sequence parallelism) are split.
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

class RowParallelLinear {
 public:
  // Create takes this rank's columns of `full_weight` [out, in] per options.rule and
  // the whole `full_bias` [out] (or none). InvalidArgument naming the shapes for a
  // weight that is not 2-D, a bias that is not [out], sequence parallelism without a
  // positive sequence_length, or a storage dtype other than f32/bf16.
  static absl::StatusOr<RowParallelLinear> Create(const Tensor& full_weight,
                                                  const Tensor* full_bias, Communicator& tp,
                                                  const RowParallelOptions& options);

  // FromShard takes a shard the caller cut itself, local_weight [out, in_local]
  // (e.g. the columns of an attention block's local heads), and the whole bias [out]
  // or null. InvalidArgument as in Create.
  static absl::StatusOr<RowParallelLinear> FromShard(const Tensor& local_weight,
                                                     const Tensor* full_bias, Communicator& tp,
                                                     const RowParallelOptions& options);

  RowParallelLinear(RowParallelLinear&&) = default;
  RowParallelLinear& operator=(RowParallelLinear&&) = default;

  // Forward returns sum over ranks of x_r W_r^T, plus the bias: [s, ..., out], or
  // this rank's sequence piece [s_r, ..., out] under sequence parallelism. Keeps x
  // for Backward. InvalidArgument naming the shape for an input that is not f32
  // [..., in_local] (dim 0 = sequence_length under sequence parallelism); otherwise
  // a collective's error.
  absl::StatusOr<Tensor> Forward(const Tensor& input);

  // Backward takes dL/dy (the shape Forward returned), sets weight_grad() (local
  // columns) and bias_grad() (whole, identical on every rank), and returns dL/dx in
  // the input's shape. FailedPrecondition before any Forward; InvalidArgument naming
  // both shapes for a mismatched gradient; otherwise a collective's error.
  absl::StatusOr<Tensor> Backward(const Tensor& grad_output);

  // Split backward (weight_grad_work.h): BackwardInput returns dL/dx as Backward
  // does (all-gathering the gradient under sequence parallelism), moves what the
  // weight gradient needs into `work` and forgets the forward (Backward then needs
  // a new Forward). BackwardWeight sets weight_grad() and bias_grad() from a work
  // this layer filled, bitwise as Backward would have; other Forwards may run in
  // between. Errors as Backward; BackwardWeight is InvalidArgument naming the sizes
  // for a work of another shape.
  absl::StatusOr<Tensor> BackwardInput(const Tensor& grad_output, WeightGradWork& work);
  //
  // With `weight_grad_into` (the weight's element count, e.g. a source's
  // GradientSlot) BackwardWeight's product writes the weight gradient there and
  // weight_grad() stays empty (InvalidArgument naming the sizes for another count).
  absl::Status BackwardWeight(const WeightGradWork& work, absl::Span<float> weight_grad_into = {});

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& weight_grad() const { return weight_grad_; }
  const Tensor& bias_grad() const { return bias_grad_; }
  bool has_bias() const { return has_bias_; }
  int64_t in_features_local() const { return in_local_; }
  int64_t out_features() const { return out_; }

  // Borrowed weights, as ColumnParallelLinear's: BorrowWeights lends f32 views of
  // this rank's weight shard [out, in_local] and of the whole bias [out] until
  // ReturnWeights (and, optionally, the weight's bf16 copy, as there);
  // DropOwnedWeights frees the layer's own for good.
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

  // ForwardState: what one Forward keeps for its Backward, a microbatch's context
  // (TakeForwardState / RestoreForwardState as ColumnParallelLinear's).
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
  RowParallelLinear() = default;

  // WholeGradient checks grad_output and returns the whole output gradient: a
  // view of grad_output, or of `storage` when it was gathered (sequence
  // parallelism).
  absl::StatusOr<absl::Span<const float>> WholeGradient(const Tensor& grad_output,
                                                        std::vector<float>& storage);
  // WeightGradient sets the gradients from g [rows, out] and x [rows, in_local]
  // (each f32 or already bf16) and the bias gradient summed already; InputGradient
  // returns dx for g; BiasGradient sums the f32 g's rows (empty without a bias).
  absl::Status WeightGradient(const GemmBf16Input& g, const GemmBf16Input& x,
                              absl::Span<const float> bias_grad, absl::Span<float> into = {});
  absl::StatusOr<Tensor> InputGradient(const GemmBf16Input& g);
  std::vector<float> BiasGradient(absl::Span<const float> g) const;

  Communicator* tp_ = nullptr;
  CommTally tally_;
  int rank_ = 0;
  RowParallelOptions options_;
  int64_t in_local_ = 0;
  int64_t out_ = 0;
  Tensor weight_, bias_, weight_grad_, bias_grad_;
  tp_layers_internal::BorrowedWeights borrowed_;
  bool has_bias_ = false;
  ForwardState state_;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_ROW_PARALLEL_LINEAR_H_

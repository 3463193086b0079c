// GptBlock: one pre-norm decoder block of the GPT model on a tensor-parallel
// group, built from the tensor_parallel layers:
//
//   x1 = x  + ParallelSelfAttention(LayerNorm1(x))            (causal, heads split)
//   y  = x1 + RowParallel(GELU(ColumnParallel(LayerNorm2(x1))))   (MLP width split)
//
// Activations are [s, b, hidden] (Megatron's sequence-first layout), replicated on
// every tensor-parallel rank; the attention's and the MLP's all-reduces make them
// so. The layer norms run redundantly on every rank.
//
// Forward keeps what Backward needs (its own inputs of the layer norms and the
// GELU, plus the layers' saved state); Backward consumes it, adds this block's
// parameter gradients into its accumulators and frees the state, so a block holds
// activations from a Forward until its Backward or ReleaseActivations.
//
// Example (inside a rank's thread, tp = 2):
//   LOOM_ASSIGN_OR_RETURN(GptBlock block, GptBlock::Create(config, /*index=*/0, tp));
//   LOOM_ASSIGN_OR_RETURN(Tensor y, block.Forward(x /*[32,4,64]*/));     // [32,4,64]
//   block.saved_activation_bytes();                                      // > 0
//   LOOM_ASSIGN_OR_RETURN(Tensor dx, block.Backward(dy /*[32,4,64]*/));  // [32,4,64]
//   block.saved_activation_bytes();                                      // 0
//   block.Forward(x2 /*[32,4,63]*/);
//   // InvalidArgument: "GptBlock 0: input shape [32,4,63] must be [s, b, 64] (f32)"
#ifndef LOOM_MODELS_GPT_GPT_BLOCK_H_
#define LOOM_MODELS_GPT_GPT_BLOCK_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/internal/model_util.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tensor_parallel/layers/row_parallel_linear.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "core/tensor.h"

namespace loom {

// GptBlockWeightGradWork: what a block's weight gradients need from one split
// backward (tensor_parallel/layers/weight_grad_work.h): the four projections'
// works and the layer norms' parameter gradients, which BackwardInput computes
// alongside their input gradients (they are cheap) and BackwardWeight adds, so
// that every accumulator of the block is added to in W order.
struct GptBlockWeightGradWork {
  AttentionWeightGradWork attn;
  WeightGradWork fc, proj;
  std::vector<float> ln1_dgamma, ln1_dbeta, ln2_dgamma, ln2_dbeta;
  size_t bytes() const;
};

// GptContextParallel: the context-parallel group a model's attention runs over
// (ring attention, parallel_self_attention.h) and how the sequence is laid out on it;
// a null group (or one rank) is none. Not owned.
struct GptContextParallel {
  Communicator* group = nullptr;
  CpLayout layout = CpLayout::kZigzag;
  // Ring attention, or the all-to-all variant (cp must divide each tp rank's heads).
  CpComm comm = CpComm::kRing;
  bool active() const { return group != nullptr && group->size() > 1; }
};

// LocalPositions returns the global positions of a seq_len sequence that this rank
// of `cp` holds, in its row order (CpChunks); 0..seq_len-1 when cp is not active.
// CpChunks' errors.
absl::StatusOr<std::vector<int64_t>> LocalPositions(int64_t seq_len, const GptContextParallel& cp);

class GptBlock {
 public:
  // Create builds block `index` with its seeded parameters (gpt_init.h), this
  // rank's shards of them, whose four projections multiply in `precision` (gemm.h;
  // kBf16 for a bf16 model: the parameters stay f32 here, bf16 values in the
  // parameter source). Under context parallelism (`cp`), x holds this rank's rows of
  // the sequence (CpChunks of config.seq_len) and attention spans the whole sequence.
  // InvalidArgument from config.Validate(tp.size()) or naming a precision outside the
  // enum.
  static absl::StatusOr<GptBlock> Create(const GptConfig& config, int64_t index, Communicator& tp,
                                         GemmPrecision precision = GemmPrecision::kF32,
                                         const GptContextParallel& cp = {});

  GptBlock(GptBlock&&) = default;
  GptBlock& operator=(GptBlock&&) = default;

  // Forward returns the block's output for x [s, b, hidden] and keeps what
  // Backward needs. InvalidArgument naming the shape for another input;
  // otherwise a layer's (collective's) error.
  absl::StatusOr<Tensor> Forward(const Tensor& x);

  // Backward takes dL/dy of the last Forward, adds the parameter gradients into
  // the accumulators, frees the forward state and returns dL/dx.
  // FailedPrecondition without a Forward since the last Backward or release;
  // InvalidArgument naming both shapes for a gradient of another shape.
  absl::StatusOr<Tensor> Backward(const Tensor& dy);

  // Split backward: BackwardInput returns dL/dx as Backward does, frees the
  // forward state and leaves the weight gradients' inputs in `work`;
  // BackwardWeight adds them into the accumulators, bitwise as Backward would
  // have, even after other Forwards. Backward is the two in a row. Errors as
  // Backward, and the layers' BackwardWeight errors for a work of another block.
  absl::StatusOr<Tensor> BackwardInput(const Tensor& dy, GptBlockWeightGradWork& work);
  absl::Status BackwardWeight(const GptBlockWeightGradWork& work);

  // ReleaseActivations drops the forward state (activation checkpointing).
  void ReleaseActivations();

  // saved_activation_bytes returns the bytes the block holds for Backward.
  size_t saved_activation_bytes() const;

  // OwnState: the block's own part of a forward's state (the layer-norm inputs
  // with their statistics, the GELU input); the layers keep theirs.
  struct OwnState {
    std::vector<float> x0, mean1, rstd1, x1, mean2, rstd2;
    // The fc layer's output itself, kept (not copied) for GELU's backward.
    Tensor pre_gelu;
    std::vector<int64_t> shape;
    bool valid = false;
    size_t bytes() const;
  };
  // ForwardState: what one Forward keeps for its Backward (the block's and its
  // layers'), a microbatch's context. TakeForwardState moves it out, leaving the
  // block as after ReleaseActivations; RestoreForwardState puts one back, so a
  // pipeline stage with several microbatches in flight runs any one's backward
  // without running its forward again (GptModel::TakeActivations).
  struct ForwardState {
    OwnState own;
    ParallelSelfAttention::ForwardState attn;
    ColumnParallelLinear::ForwardState fc;
    RowParallelLinear::ForwardState proj;
    size_t bytes() const { return own.bytes() + attn.bytes() + fc.bytes() + proj.bytes(); }
  };
  ForwardState TakeForwardState();
  void RestoreForwardState(ForwardState state);

  // AppendParameters appends the block's parameters, in a fixed order, named
  // "blocks.<index>.<ln1|attn|ln2|mlp>.<...>", with views of the values the block
  // was created with (empty after DropOwnedWeights): the model copies them into
  // its parameter store and the block borrows from then on.
  void AppendParameters(gpt_internal::ParameterList& out);

  // kNumParameters: the block's parameters, in AppendParameters order (kLn1Gamma
  // first, kProjBias last).
  static constexpr int kNumParameters = 12;
  // IsProjectionWeight: whether parameter k is one of the four projections' weights
  // (what multiplies in the block's precision; layer norms and biases stay f32).
  static bool IsProjectionWeight(int k);

  // Borrowed weights (GptModel::UseParameterSource): BorrowWeights lends the block
  // its parameters, f32 views of this rank's shards in AppendParameters order, for
  // Forward, BackwardInput and Backward (BackwardWeight needs none) until
  // ReturnWeights; DropOwnedWeights frees the block's own for good (a Forward
  // without lent weights is then FailedPrecondition). `bf16_views`, empty or one
  // per parameter (each empty or the same parameter's bf16 rounding, kept alive as
  // `views`), gives the bf16 products of a kBf16 block their weights already
  // rounded (ColumnParallelLinear::BorrowWeights). InvalidArgument naming the counts
  // for a wrong number of views or a view of the wrong size.
  absl::Status BorrowWeights(absl::Span<const absl::Span<const float>> views,
                             absl::Span<const absl::Span<const BFloat16>> bf16_views = {});
  void ReturnWeights();
  void DropOwnedWeights();

  // GradSink receives parameter k's gradient (AppendParameters order) from
  // BackwardWeight. SetGradSink sends the gradients there instead of into the
  // block's accumulators, which it frees (ZeroGrad then has none to zero, and
  // AppendParameters gives empty gradient views).
  using GradSink = std::function<absl::Status(int k, absl::Span<const float> grad)>;
  // GradSlot, when given with the sink, offers where a projection's weight gradient
  // lies (ParameterSource::GradientSlot): BackwardWeight's product then writes it
  // there instead of handing it to the sink; an empty span means the sink.
  using GradSlot = std::function<absl::StatusOr<absl::Span<float>>(int k)>;
  void SetGradSink(GradSink sink, GradSlot slot = nullptr);

  // ZeroGrad sets every gradient accumulator to 0.
  void ZeroGrad();

 private:
  // AppendGradAccumulators appends the block's accumulators (any order).
  void AppendGradAccumulators(std::vector<gpt_internal::GradAccumulator*>& out);
  GptBlock(ParallelSelfAttention attn, ColumnParallelLinear fc, RowParallelLinear proj)
      : attn_(std::move(attn)), fc_(std::move(fc)), proj_(std::move(proj)) {}

  // LayerNorm parameter k (kLn1Gamma, kLn1Beta, kLn2Gamma, kLn2Beta): the lent
  // view while borrowing, else the block's own.
  absl::Span<const float> Norm(int k) const;
  // CheckWeights: FailedPrecondition naming `call` when the block dropped its own
  // weights and borrows none.
  absl::Status CheckWeights(const char* call) const;
  // Give hands parameter k's gradient to the sink, or adds it into its accumulator.
  absl::Status Give(int k, absl::Span<const float> grad);
  absl::Status Give(int k, const Tensor& grad);
  // Slot: where projection weight k's gradient goes in place (GradSlot), or empty.
  absl::StatusOr<absl::Span<float>> Slot(int k);
  gpt_internal::GradAccumulator& AccumulatorOf(int k);

  GptConfig config_;
  int64_t index_ = 0;
  bool borrowing_ = false;
  bool dropped_ = false;  // DropOwnedWeights ran
  std::vector<absl::Span<const float>> lent_;  // while borrowing: kNumParameters views
  GradSink sink_;
  GradSlot slot_;
  // Layer norms (replicated) and their gradients.
  std::vector<float> ln1_gamma_, ln1_beta_, ln2_gamma_, ln2_beta_;
  gpt_internal::GradAccumulator ln1_gamma_grad_, ln1_beta_grad_, ln2_gamma_grad_,
      ln2_beta_grad_;
  ParallelSelfAttention attn_;
  ColumnParallelLinear fc_;
  RowParallelLinear proj_;
  // Gradient accumulators of the layers' weights and biases (the layers' own
  // gradients hold one Backward's only).
  gpt_internal::GradAccumulator qkv_w_grad_, qkv_b_grad_, out_w_grad_, out_b_grad_;
  gpt_internal::GradAccumulator fc_w_grad_, fc_b_grad_, proj_w_grad_, proj_b_grad_;
  OwnState state_;  // the block's part of the live forward state
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_BLOCK_H_

// GptModel: a small GPT-style decoder on one tensor-parallel rank, built from the
// tensor_parallel layers: token embedding (VocabParallelEmbedding) plus a learned
// position embedding, `layers` pre-norm blocks (gpt_block.h: LayerNorm ->
// causal ParallelSelfAttention -> residual -> LayerNorm -> ColumnParallel -> GELU ->
// RowParallel -> residual), a final LayerNorm, an untied column-parallel LM head over
// the vocabulary and VocabParallelCrossEntropy, averaged over all tokens.
//
// A model may hold a contiguous piece of the network, a pipeline stage: blocks
// [first_block, end_block), with the embeddings in front (stage 0) and the final
// LayerNorm, head and loss at the back (last stage) as the options say. A piece's
// input is the tokens (with the embeddings) or the hidden activations [s, b, hidden];
// its output is the loss (with the head, a tensor of shape {1}) or the hidden
// activations. gpt_stage_module.h runs the pieces under the pipeline executor.
//
// Gradients accumulate: Backward adds into every parameter's gradient (zeroed by
// Create and ZeroGrad), so microbatches add up. Parameters (gpt_parameter.h) come
// in a fixed order with views of values and gradients that stay valid for the
// model's lifetime. Initial values depend only on the seed (gpt_init.h): a tp = 2
// model holds the shards of the tp = 1 model.
//
// Activation checkpointing: with Recompute::kFull, Forward keeps only each block's
// input and Backward recomputes the block (bitwise the same forward) before its
// backward. peak_activation_bytes() reports the high-water mark of the bytes held
// for Backward (the blocks', the layers', the embeddings' and the head's saved
// state, and the checkpoints), measured after every step of Forward and Backward.
// The model holds one Forward's state at a time (a second Forward replaces the
// first); TakeActivations moves it out into a GptActivations context and
// RestoreActivations puts it back, so a caller keeps as many microbatches in flight
// as it likes (gpt_stage_module.h keeps one context per stage and microbatch).
//
// Example (a whole model on one rank):
//   GptConfig config;                       // V=64, seq=32, hidden=64, heads=4, layers=4
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
//   // tokens and targets: [batch, seq_len] row-major, here batch 2
//   LOOM_ASSIGN_OR_RETURN(float loss, model->Forward(tokens, targets));   // ~log(64)
//   LOOM_RETURN_IF_ERROR(model->Backward());                              // fills grads
//   for (GptParameter& p : model->Parameters()) { /* p.values -= lr * p.grad */ }
//   model->Forward(tokens_with_65, targets);
//   // InvalidArgument: "VocabParallelEmbedding: id 65 at position 3 is outside the
//   //   vocabulary [0, 64)"
#ifndef LOOM_MODELS_GPT_GPT_MODEL_H_
#define LOOM_MODELS_GPT_GPT_MODEL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/borrowing_model.h"
#include "core/parameter_source.h"
#include "models/gpt/gpt_block.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/internal/model_util.h"
#include "models/gpt/internal/own_parameter_store.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/vocab_parallel_cross_entropy.h"
#include "tensor_parallel/layers/vocab_parallel_embedding.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "core/tensor.h"
#include "topology/recompute.h"

namespace loom {

struct GptModelOptions {
  // The blocks this model holds: [first_block, end_block); -1 means config.layers.
  int64_t first_block = 0;
  int64_t end_block = -1;
  // Token and position embeddings in front (the input is tokens).
  bool embedding = true;
  // Final LayerNorm, LM head and loss at the back (the output is the loss).
  bool head = true;
  Recompute recompute = Recompute::kNone;
  // What the blocks' projections and the LM head multiply (gemm.h): kBf16 rounds
  // their inputs to bf16 (a bf16 model: its parameter source holds bf16 values, the
  // model's own store and gradients stay f32). Attention scores, embeddings and the
  // loss stay f32.
  GemmPrecision precision = GemmPrecision::kF32;
  // Context parallelism (gpt_block.h): each rank of the group holds its rows of every
  // sequence (CpChunks(seq_len, cp, cp rank, layout): tokens, targets and hidden
  // activations have local_seq_len() positions, in the rank's row order), position
  // embeddings go by global position, and attention spans the whole sequence.
  GptContextParallel context_parallel;

  // Stage returns the options of the pipeline piece [first_block, end_block): the
  // embeddings when it starts at block 0, the head when it ends at the last.
  static GptModelOptions Stage(const GptConfig& config, int64_t first_block, int64_t end_block,
                               Recompute recompute = Recompute::kNone);
};

// The input of a piece: `tokens` for a piece with the embeddings, otherwise
// `hidden` [seq_len, batch, hidden]; `targets` for a piece with the head. Tokens and
// targets are [batch, seq_len], row-major.
struct GptStageInput {
  absl::Span<const int64_t> tokens;
  const Tensor* hidden = nullptr;
  absl::Span<const int64_t> targets;
};

// GptWeightGradWork: what a piece's weight gradients need from one split backward
// (zero-bubble schedules: BackwardStageInput, later BackwardStageWeight): the
// blocks' works, the token embedding's ids and output gradient (the position
// embedding's gradient is summed from the same gradient), the head's work and the
// final layer norm's parameter gradients.
struct GptWeightGradWork {
  WeightGradWork token_embedding;
  std::vector<GptBlockWeightGradWork> blocks;  // in block order
  WeightGradWork head;
  std::vector<float> final_dgamma, final_dbeta;
  size_t bytes() const;
};

// GptActivations: what one ForwardStage keeps for its backward (every layer's
// forward state, the blocks' checkpoints under Recompute::kFull, the final layer
// norm's input and statistics): one microbatch's context. A pipeline stage with
// several microbatches in flight takes each one's out after its forward
// (GptModel::TakeActivations) and puts it back for its backward
// (RestoreActivations), so no forward runs twice (gpt_stage_module.h). Moving one
// copies no activation.
struct GptActivations {
  VocabParallelEmbedding::ForwardState embedding;
  std::vector<GptBlock::ForwardState> blocks;
  std::vector<Tensor> checkpoints;
  std::vector<float> final_x, final_mean, final_rstd;
  ColumnParallelLinear::ForwardState head;
  VocabParallelCrossEntropy::ForwardState cross_entropy;
  int64_t batch = 0;
  bool valid = false;  // a forward's state (not an empty context)
  size_t bytes() const;
};

class GptModel : public BorrowingModel {
 public:
  // Create builds this rank's piece with seeded parameters and zero gradients.
  // InvalidArgument from config.Validate(tp.size()), or naming the values for a
  // block range outside [0, layers] or reversed; otherwise a layer's error.
  static absl::StatusOr<std::unique_ptr<GptModel>> Create(const GptConfig& config,
                                                          Communicator& tp,
                                                          const GptModelOptions& options = {});

  // Forward runs a whole model (embeddings and head) on tokens and targets
  // ([batch, seq_len] row-major) and returns the mean loss over all tokens. Under
  // context parallelism tokens and targets are [batch, local_seq_len()] and the loss
  // is this rank's share: its tokens' sum over the whole batch's token count, so the
  // cp group's shares add up to the mean, and so do its gradients (sum them over cp).
  // FailedPrecondition for a piece without both ends; otherwise as ForwardStage.
  absl::StatusOr<float> Forward(absl::Span<const int64_t> tokens,
                                absl::Span<const int64_t> targets);

  // Backward adds d(loss_grad * loss)/d(parameter) into the gradients of the last
  // Forward. FailedPrecondition as BackwardStage.
  absl::Status Backward(float loss_grad = 1.0f);

  // ForwardStage runs the piece and returns its output: the loss, shape {1}, with
  // the head; the hidden activations [seq_len, batch, hidden] without. Keeps what
  // BackwardStage needs, replacing an earlier Forward's state. InvalidArgument
  // naming the sizes for a missing input, a token count that is not a positive
  // multiple of seq_len, targets of another count, or hidden activations of
  // another shape; the layers' InvalidArgument for ids outside the vocabulary;
  // otherwise a collective's error.
  absl::StatusOr<Tensor> ForwardStage(const GptStageInput& input);

  // BackwardStage takes the gradient of the output (shape {1} with the head, the
  // hidden shape without), adds the parameter gradients and returns the gradient
  // of the hidden input, or an empty tensor for a piece with the embeddings.
  // FailedPrecondition without a ForwardStage since the last BackwardStage;
  // InvalidArgument naming both shapes for a gradient of another shape.
  absl::StatusOr<Tensor> BackwardStage(const Tensor& output_grad);

  // Split backward, for the zero-bubble schedules: BackwardStageInput returns the
  // input gradient as BackwardStage does and frees the forward state, leaving what
  // the parameter gradients need in `work`; BackwardStageWeight adds them, bitwise
  // as BackwardStage would have, even after other ForwardStages. BackwardStage is
  // the two in a row. The bytes of a work count as held activations until it comes
  // back to BackwardStageWeight (or ReleaseActivations). Errors as BackwardStage;
  // InvalidArgument for a work of another piece.
  absl::StatusOr<Tensor> BackwardStageInput(const Tensor& output_grad, GptWeightGradWork& work);
  absl::Status BackwardStageWeight(const GptWeightGradWork& work);

  // Parameters returns this rank's parameters in a fixed order: "embed.token",
  // "embed.position" (with the embeddings), each block's (gpt_block.h), then
  // "final_ln.gamma", "final_ln.beta", "head.weight" (with the head). The views
  // stay valid for the model's lifetime (values until UseParameterSource).
  std::vector<GptParameter> Parameters();

  // Units returns how the model uses its parameters, in Parameters() order: "embed"
  // (embed.token, embed.position; with the embeddings), "blocks.<k>" (a block's
  // twelve), "head" (final_ln.gamma, final_ln.beta, head.weight; with the head).
  // Each unit's parameters are borrowed together (the Lend* helpers below), so a
  // parameter source laid out from these units (zero3's Partition) never sees a
  // unit's parameters asked for apart, in either pass direction.
  std::vector<ParameterUnit> Units() const override;
  // ParameterViews: Parameters() as core/borrowing_model.h lists them (name,
  // shape, values, gradient), for zero3's DataParallelOptimizer.
  std::vector<ModelParameter> ParameterViews() override;

  // ZeroGrad sets every gradient to 0.
  void ZeroGrad();

  // Where the weights live. The layers never own them: Create puts them in a
  // store of the model's own (Parameters() writes them in place, gradients stay
  // in the model), which UseParameterSource replaces for good (ZeRO-3
  // reshard-after-use, parameter offload, plain data parallelism). The model then
  // holds no weights at all: it asks `source`
  // (not owned; it must outlive the model) for each unit's parameters (the
  // embeddings, each block, the head: the parameters of one unit are gathered and
  // released together) just before it computes with them and gives them back
  // right after, numbering them in Parameters() order:
  //   - ForwardStage is one kForward pass of the source;
  //   - BackwardStage is one kBackward pass (gradients to the source, `grads`
  //     kSource) or one kRegather pass (gradients into the model's accumulators,
  //     kModel: the caller hands them over once per step, e.g. a deferred
  //     reduce-scatter that keeps the bits of plain data parallelism);
  //   - BackwardStageInput is a kRegather pass; BackwardStageWeight a kGradients
  //     pass (kSource) or no pass (kModel).
  // Parameters() then gives the same names, shapes and splits with empty values
  // (the source holds them), and with kSource empty gradients too (the model keeps
  // none). Results are bitwise those of the owning model given the same values.
  // The owning model runs the same passes over its own store.
  // FailedPrecondition when called twice; InvalidArgument for a null source.
  using GradientHome = ::loom::GradientHome;  // core/borrowing_model.h
  absl::Status UseParameterSource(ParameterSource* source, GradientHome grads) override;
  bool borrows_weights() const { return own_store_ == nullptr; }

  // TakeActivations moves the last ForwardStage's state out (the model then holds
  // none, as after a backward); RestoreActivations makes `activations` the state
  // the next BackwardStage or BackwardStageInput uses. FailedPrecondition when the
  // model holds a forward's state already, or for an empty context (one taken
  // with no forward held); InvalidArgument for the state of another piece (another
  // block count). `activations` is moved from only on success: a refused context
  // stays whole with its caller. held_activation_bytes() counts only the state
  // inside the model.
  GptActivations TakeActivations();
  absl::Status RestoreActivations(GptActivations&& activations);

  // ReleaseActivations drops any forward state and stops counting the works out
  // (e.g. after a failed step, whose works the caller drops).
  void ReleaseActivations();

  // The bytes held for Backward now (forward state, checkpoints and the works out
  // between BackwardStageInput and BackwardStageWeight), and their high-water mark
  // since Create or ResetPeakActivationBytes.
  size_t held_activation_bytes() const;
  size_t peak_activation_bytes() const { return peak_bytes_; }
  void ResetPeakActivationBytes() { peak_bytes_ = held_activation_bytes(); }

  const GptConfig& config() const { return config_; }
  // local_seq_len: the positions of a sequence this rank holds (seq_len without
  // context parallelism); local_positions: their global indices, in row order.
  int64_t local_seq_len() const { return static_cast<int64_t>(positions_.size()); }
  const std::vector<int64_t>& local_positions() const { return positions_; }
  const GptModelOptions& options() const { return options_; }

 private:
  GptModel() = default;
  void Observe(size_t extra = 0);
  // SeqName names what a sequence's length is here, for errors.
  const char* SeqName() const {
    return options_.context_parallel.active() ? "this cp rank's positions" : "seq_len";
  }
  // ListParameters lists the parameters with the values the layers were created
  // with (and the three that have no layer); Borrow makes `source` the home of
  // the weights, dropping the layers' own.
  gpt_internal::ParameterList ListParameters(absl::Span<const float> position,
                                               absl::Span<const float> final_gamma,
                                               absl::Span<const float> final_beta);
  void Borrow(ParameterSource* source, GradientHome grads, std::vector<GptParameter> params);
  absl::StatusOr<Tensor> RunForward(const GptStageInput& input);
  // ApplyWeightWork adds a split backward's weight gradients (BackwardStageWeight
  // without the pass).
  absl::Status ApplyWeightWork(const GptWeightGradWork& work);
  // InPass runs `body` inside one pass of the source (directly without one): every
  // lent weight goes back and the pass ends even when body fails; the first error
  // wins.
  template <typename Body>
  auto InPass(ParameterPass pass, Body body) -> decltype(body());
  // Lend* borrow a unit's parameters from the source;
  // ReturnLent gives back everything lent.
  // LeaseUnit leases unit `index` of Units() from the source: the model holds
  // each unit it computes with under a lease, ended by ReturnLent.
  absl::StatusOr<UnitLease> LeaseUnit(size_t index);
  absl::Status LendEmbedding();
  // AcquireBf16: the source's bf16 copy of `param` for a kBf16 model's products;
  // empty for an f32 model or a source that keeps none (the layers round then).
  absl::StatusOr<absl::Span<const BFloat16>> AcquireBf16(int param);
  absl::Status LendBlock(size_t k);
  absl::Status LendHead();
  void ReturnLent();
  // Where unit parameters start in Parameters() order.
  int BlockBase(size_t k) const;
  int HeadBase() const;
  // Give hands a gradient of parameter `param` to the source (kSource) or adds it
  // into `accumulator`.
  absl::Status Give(gpt_internal::GradAccumulator& accumulator, int param,
                    absl::Span<const float> grad);
  absl::Status Give(gpt_internal::GradAccumulator& accumulator, int param, const Tensor& grad);
  void ReleaseForwardState();
  absl::StatusOr<Tensor> RunBackward(const Tensor& output_grad, GptWeightGradWork* deferred);
  absl::Status HeadBackwardWeight(const GptWeightGradWork& work);
  absl::StatusOr<Tensor> Embed(absl::Span<const int64_t> tokens, int64_t batch);
  absl::StatusOr<float> HeadForward(const Tensor& x, absl::Span<const int64_t> targets,
                                    int64_t batch);
  absl::StatusOr<Tensor> HeadBackwardInput(float loss_grad, GptWeightGradWork& work);
  absl::Status EmbedBackwardWeight(const WeightGradWork& work);

  GptConfig config_;
  GptModelOptions options_;
  std::vector<int64_t> positions_;  // local_positions()
  Communicator* tp_ = nullptr;
  std::optional<VocabParallelEmbedding> token_embedding_;
  gpt_internal::GradAccumulator token_grad_, position_grad_;
  std::vector<GptBlock> blocks_;
  gpt_internal::GradAccumulator final_gamma_grad_, final_beta_grad_;
  std::optional<ColumnParallelLinear> lm_head_;
  gpt_internal::GradAccumulator head_grad_;
  std::optional<VocabParallelCrossEntropy> cross_entropy_;
  // Forward state of the model itself.
  std::vector<Tensor> checkpoints_;  // Recompute::kFull: each block's input
  std::vector<float> final_x_, final_mean_, final_rstd_;
  int64_t batch_ = 0;
  bool has_forward_ = false;
  size_t pending_work_bytes_ = 0;  // works handed out by BackwardStageInput
  // Where the weights live: own_store_ until UseParameterSource, then the source.
  std::unique_ptr<gpt_internal::OwnParameterStore> own_store_;
  ParameterSource* source_ = nullptr;
  GradientHome grads_ = GradientHome::kModel;
  std::vector<GptParameter> params_;  // Parameters()
  absl::Span<const float> lent_position_, lent_final_gamma_, lent_final_beta_;
  bool embedding_lent_ = false, head_lent_ = false;
  std::vector<size_t> lent_blocks_;
  std::vector<UnitLease> leases_;  // the units lent now
  std::vector<ParameterUnit> lease_units_;  // Units(), listed at the first lease
  size_t peak_bytes_ = 0;
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_MODEL_H_

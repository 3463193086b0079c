// GptStageModule: the GPT model of gpt_model.h cut into pipeline stages, as the
// StageModule the pipeline executor (pipeline/executor) runs microbatch by
// microbatch. Each pipeline rank builds one for the stages its StageLayout gives it
// (a GptModel piece per stage: stage 0 with the embeddings, the last stage with the
// final LayerNorm, head and loss), on its tensor-parallel communicator.
//
// What moves between stages: stage 0's input is the microbatch's tokens as floats,
// [micro_batch, seq_len] (exact for any vocabulary below 2^24); a stage's output is
// the hidden activations [seq_len, micro_batch, hidden]; the last stage's output is
// its microbatch's mean loss, shape {1}. Loss records it and returns 1 /
// num_microbatches (times options.loss_gradient_scale), so the gradients of a step
// are those of the mean loss over all its tokens, summed microbatch by microbatch in
// ascending order (the order every schedule's backwards come in, see stage_module.h).
//
// Forward state: every microbatch in flight has a context of its own
// (GptActivations, keyed by stage and microbatch): after a stage's Forward the
// module moves the state the model saved into the microbatch's context, and its
// Backward (or BackwardInput) puts that context back and frees it, so no forward
// runs twice whatever the schedule (recompute is the model's Recompute option, never
// a side effect of the schedule). A stage holds as many contexts as its schedule
// keeps in flight: 1F1B's first stage p, GPipe's every microbatch. Gradients are
// bitwise those of running the microbatches one after another.
//
// Evaluation: BeginForwardOnly, then a forward-only schedule on the same layout
// (MakeForwardOnlySchedule(layout, m)) on the training mesh. Its forwards keep
// nothing for a backward (no stage input, no model state past the call), the
// loss is the mean over the microbatches run, and the gradients stay as they are,
// so training resumes with BeginStep as if no evaluation had run.
//
// Example (2 pipeline ranks, tp = 1, 1F1B over 4 microbatches; in rank r's thread):
//   LOOM_ASSIGN_OR_RETURN(StageLayout layout, StageLayout::Loop(2)->WithEvenLayers(4));
//   GptStageModuleOptions options;
//   options.micro_batch = 2;
//   options.num_microbatches = 4;
//   auto data_fn = [&](int64_t step, int64_t mb) {
//     return data.Microbatch(batch_layout, step, mb, dp_rank);
//   };
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptStageModule> module,
//       GptStageModule::Create(config, layout, r, tp, data_fn, options));
//   module->BeginStep(/*step=*/0);
//   LOOM_ASSIGN_OR_RETURN(RankExecution run, executor.Run(*endpoint, *module));
//   module->loss();           // rank 1: mean loss of the step's 4 microbatches
//   module->Parameters();     // rank 0: embeddings + blocks 0, 1, with gradients
//   // Held-out loss on the same mesh; the gradients above stay as they are.
//   LOOM_ASSIGN_OR_RETURN(PipelineExecutor eval,
//       PipelineExecutor::Create(*MakeForwardOnlySchedule(layout, 4)));
//   module->BeginForwardOnly(/*step=*/0, held_out_fn);
//   LOOM_RETURN_IF_ERROR(eval.Run(*endpoint, *module).status());
//   module->loss();           // rank 1: mean held-out loss of the 4 microbatches
#ifndef LOOM_MODELS_GPT_GPT_STAGE_MODULE_H_
#define LOOM_MODELS_GPT_GPT_STAGE_MODULE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/markov_data.h"
#include "pipeline/executor/stage_module.h"
#include "pipeline/stage_layout.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

struct GptStageModuleOptions {
  int64_t micro_batch = 1;  // sequences per microbatch
  int64_t num_microbatches = 1;
  Recompute recompute = Recompute::kNone;
  // The stage models' GEMM precision (GptModelOptions::precision).
  GemmPrecision precision = GemmPrecision::kF32;
  // Context parallelism (GptModelOptions::context_parallel): the data function still
  // gives whole sequences; the module keeps this rank's positions of each, and the
  // stages' activations are [local positions, micro_batch, hidden]. The loss is this
  // rank's share (gpt_model.h): the cp group sums it.
  GptContextParallel context_parallel;
  // Multiplies the loss gradient Loss returns (1 / num_microbatches). A job that
  // averages the gradients over a dp x cp group sets cp, since its cp ranks'
  // gradients are shares that add up (Megatron-LM scales its loss by cp the same way);
  // one that sums over cp leaves 1.
  float loss_gradient_scale = 1.0f;
};

// GptMicrobatchFn returns this data-parallel rank's microbatch `microbatch` of step
// `step` (e.g. MarkovData::Microbatch), with micro_batch sequences.
using GptMicrobatchFn = std::function<absl::StatusOr<GptBatch>(int64_t step, int64_t microbatch)>;

class GptStageModule : public StageModule {
 public:
  // Create builds the models of `rank`'s stages. The layout's layers, if assigned,
  // are the blocks of each stage (and must total config.layers); otherwise the
  // blocks are balanced (StageLayout::WithBalancedLayers: the inner stages take
  // what does not divide). InvalidArgument naming the values for a rank outside
  // the layout, options below 1, a missing data function, or blocks that do not
  // fit; config and model errors as GptModel::Create.
  static absl::StatusOr<std::unique_ptr<GptStageModule>> Create(
      const GptConfig& config, const StageLayout& layout, int64_t rank, Communicator& tp,
      GptMicrobatchFn data, const GptStageModuleOptions& options);

  std::vector<int64_t> InputShape(int64_t stage, int64_t microbatch) const override;
  std::vector<int64_t> OutputShape(int64_t stage, int64_t microbatch) const override;
  absl::StatusOr<Tensor> Input(int64_t microbatch) override;
  absl::StatusOr<Tensor> Loss(int64_t microbatch, const Tensor& output) override;
  absl::StatusOr<Tensor> Forward(int64_t stage, int64_t microbatch,
                                    const Tensor& input) override;
  absl::StatusOr<Tensor> Backward(int64_t stage, int64_t microbatch,
                                     const Tensor& output_grad) override;

  // Zero-bubble schedules (zb-h1, zb-v): BackwardInput returns the input gradient
  // and keeps the stage's weight-gradient work (GptWeightGradWork) for
  // (stage, microbatch); BackwardWeight adds it into the gradients. Parameters end
  // bitwise as with Backward, since every schedule runs a stage's W (or B) in
  // ascending microbatch order. FailedPrecondition for a BackwardWeight without
  // its BackwardInput, or a BackwardInput before its Forward.
  bool SupportsSplitBackward() const override { return true; }
  absl::StatusOr<Tensor> BackwardInput(int64_t stage, int64_t microbatch,
                                          const Tensor& output_grad) override;
  absl::Status BackwardWeight(int64_t stage, int64_t microbatch) override;

  // BeginStep zeroes the gradients and losses, drops any forward state a failed
  // step left, and makes `step` the step whose data Input and the loss read.
  void BeginStep(int64_t step);

  // BeginForwardOnly prepares a forward-only run (an evaluation): it clears the
  // losses and drops any forward state as BeginStep does, leaves the gradients
  // as they are, and until the next BeginStep makes Input and the last stage's
  // targets read data(step, microbatch) (the training data function when `data`
  // is empty). Forward then keeps nothing for a backward, and Backward or
  // BackwardInput is FailedPrecondition. The run may have fewer microbatches
  // than options.num_microbatches; loss() averages those it ran.
  void BeginForwardOnly(int64_t step, GptMicrobatchFn data = nullptr);

  // Parameters returns the parameters of this rank's stages, stage by stage.
  std::vector<GptParameter> Parameters();

  // stages returns this rank's stages, ascending; model(stage) the piece of one.
  const std::vector<int64_t>& stages() const { return stages_; }
  GptModel& model(int64_t stage) { return *models_.at(stage); }

  // holds_loss is true on the rank of the last stage, whose losses are filled in.
  bool holds_loss() const { return layout_.RankOf(layout_.num_stages() - 1) == rank_; }
  // microbatch_losses has num_microbatches entries, 0 for a microbatch not run.
  const std::vector<float>& microbatch_losses() const { return losses_; }
  // loss returns the run's mean loss: the microbatch losses summed in order,
  // divided by the number of microbatches whose Loss ran since BeginStep or
  // BeginForwardOnly (num_microbatches in a training step; 0 when none ran).
  float loss() const;

  // peak_activation_bytes returns the most activation bytes this rank's stage
  // models held at once since Create (forward state, checkpoints and weight-
  // gradient works): the other stages' held bytes plus the called stage's peak
  // during each call, which matters when a rank holds two stages (interleaved
  // 1F1B, ZB-V).
  size_t peak_activation_bytes() const { return peak_bytes_; }
  // held_activation_bytes returns the activation bytes held now: the stage
  // models' (weight-gradient works included) and every microbatch context's.
  size_t held_activation_bytes() const;

  // training_forwards counts the stage forwards the models ran in training steps
  // since Create (not in forward-only runs). A backward runs none, so a step adds
  // this rank's stages x num_microbatches: what a job reports as forwards run
  // again is the difference (0).
  int64_t training_forwards() const { return training_forwards_; }
  // SavedContexts counts the (stage, microbatch) contexts still held (0 after a
  // step); PendingWeightWorks the BackwardInputs whose BackwardWeight has not run.
  int64_t SavedContexts() const { return static_cast<int64_t>(contexts_.size()); }
  int64_t PendingWeightWorks() const { return static_cast<int64_t>(works_.size()); }

 private:
  GptStageModule(GptConfig config, StageLayout layout, int64_t rank, GptMicrobatchFn data,
                 GptStageModuleOptions options)
      : config_(std::move(config)),
        layout_(std::move(layout)),
        rank_(rank),
        data_(std::move(data)),
        options_(options) {}

  absl::Status Check(int64_t stage, int64_t microbatch) const;
  absl::StatusOr<const GptBatch*> BatchOf(int64_t microbatch);
  absl::StatusOr<Tensor> RunForward(int64_t stage, int64_t microbatch, const Tensor& input);
  // Reset drops the forward state, the batches and the losses, for `step`.
  void Reset(int64_t step);
  // PrepareBackward checks a backward's arguments and restores (stage,
  // microbatch)'s context into its stage's model.
  absl::StatusOr<Tensor> PrepareBackward(const char* what, int64_t stage, int64_t microbatch,
                                         const Tensor& output_grad);
  // Tracked runs `call` on `stage`'s model and updates peak_bytes_.
  template <typename Call>
  auto Tracked(int64_t stage, Call call) -> decltype(call());
  // FinishBackward returns dx as the executor takes it.
  absl::StatusOr<Tensor> FinishBackward(int64_t stage, Tensor dx);

  // SeqRows: the positions of a sequence this rank holds (seq_len without cp).
  int64_t SeqRows() const { return static_cast<int64_t>(positions_.size()); }

  const GptConfig config_;
  const StageLayout layout_;
  std::vector<int64_t> positions_;  // this rank's global positions, in row order
  const int64_t rank_;
  const GptMicrobatchFn data_;
  const GptStageModuleOptions options_;
  std::vector<int64_t> stages_;
  std::map<int64_t, std::unique_ptr<GptModel>> models_;
  // (stage, microbatch) -> the microbatch's saved state, from its Forward to its
  // backward.
  std::map<std::pair<int64_t, int64_t>, GptActivations> contexts_;
  std::map<std::pair<int64_t, int64_t>, GptWeightGradWork> works_;
  std::map<int64_t, GptBatch> batches_;
  std::vector<float> losses_;
  std::vector<bool> has_loss_;  // by microbatch: its Loss ran since the last Reset
  bool forward_only_ = false;
  GptMicrobatchFn eval_data_;  // BeginForwardOnly's data; empty: data_
  int64_t step_ = 0;
  int64_t training_forwards_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_STAGE_MODULE_H_

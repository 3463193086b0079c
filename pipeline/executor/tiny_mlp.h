// TinyMlp (testonly): a small multilayer perceptron, every layer tanh(x W + b), cut
// into pipeline stages as a StageModule, with seeded parameters and data and an
// unpipelined reference. The executor's test model and the workload of
// executor_vs_simulator.
//
// The loss is the mean squared error over all rows of all microbatches,
//   L = sum over microbatches mb, rows i, columns j of (y - t)^2 / (2 * rows * m),
// so the gradient of a step is the sum of the microbatches' gradients. Every
// floating-point operation of a layer is one function (tiny_mlp.cc), called in
// the same order by the stage module and by the reference, and weight gradients
// are added into one accumulator per layer in call order. So a pipelined run
// whose backwards come in ascending microbatch order gives gradients, losses and
// SGD updates bitwise equal to MlpReference's.
//
// Example (8 layers of width 16 on 2 ranks, 4 microbatches of 4 rows):
//   MlpConfig config;
//   config.widths = std::vector<int64_t>(9, 16);
//   config.num_microbatches = 4;
//   MlpParameters params = MakeMlpParameters(config);
//   MlpData data = MakeMlpData(config);
//   StageLayout layout = *StageLayout::Loop(2)->WithLayers(8, {3, 5});
//   auto module = *MlpStageModule::Create(config, layout, /*rank=*/1, params, data);
//   module->InputShape(1, 0);   // {4, 16}
//   module->layers();           // {3, 4, 5, 6, 7}
//   MlpGradients expected = MlpReference(config, params, data);
//   // after PipelineExecutor::Run on both ranks:
//   GatherGradients(config, {rank0_module.get(), module.get()}).grads == expected.grads
//   // true, bitwise
#ifndef LOOM_PIPELINE_EXECUTOR_TINY_MLP_H_
#define LOOM_PIPELINE_EXECUTOR_TINY_MLP_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "pipeline/executor/stage_module.h"
#include "pipeline/stage_layout.h"

namespace loom {

struct MlpConfig {
  // widths[0] input features; layer l maps widths[l] to widths[l + 1] columns.
  std::vector<int64_t> widths = {8, 8};
  int64_t rows = 4;  // Rows of every microbatch.
  int64_t num_microbatches = 1;
  uint64_t seed = 1;

  int64_t num_layers() const { return static_cast<int64_t>(widths.size()) - 1; }
};

// Per layer: weights[l] is widths[l] x widths[l + 1], row-major; biases[l] has
// widths[l + 1] entries.
struct MlpParameters {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> biases;

  friend bool operator==(const MlpParameters& a, const MlpParameters& b) {
    return a.weights == b.weights && a.biases == b.biases;
  }
};

// Per microbatch: inputs[mb] is rows x widths[0], targets[mb] rows x widths.back().
struct MlpData {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<float>> targets;
};

// Gradients of the whole model, laid out as MlpParameters, and the loss.
struct MlpGradients {
  MlpParameters grads;
  std::vector<float> microbatch_losses;
  float loss = 0;  // microbatch_losses summed in microbatch order.
};

// MakeMlpParameters returns seeded weights, uniform in +-1/sqrt(fan_in) (tanh stays
// away from saturation), and biases in +-0.1, all distinct in practice.
MlpParameters MakeMlpParameters(const MlpConfig& config);

// MakeMlpData returns seeded inputs and targets in [-1, 1], another stream than the
// parameters'.
MlpData MakeMlpData(const MlpConfig& config);

// MlpReference runs every microbatch, in order, forward through all layers, the
// loss, and backward through all layers, on this thread: the unpipelined model.
MlpGradients MlpReference(const MlpConfig& config, const MlpParameters& params,
                          const MlpData& data);

// ApplySgd does params -= learning_rate * grads, element by element.
void ApplySgd(float learning_rate, const MlpParameters& grads, MlpParameters& params);

// MlpStageModule: the stages of one rank of a pipeline over the MLP.
class MlpStageModule : public StageModule {
 public:
  // Create takes the layers of `rank`'s stages (per layout.layers_per_stage(); a
  // stage may have none and passes its input through) from `params`, with zero
  // gradients. split_backward = false makes a module that refuses I and W.
  // InvalidArgument when the layout has no layers, a number of layers other than
  // the config's, or `rank` is outside it, or when params or data do not fit the
  // config.
  static absl::StatusOr<std::unique_ptr<MlpStageModule>> Create(
      const MlpConfig& config, const StageLayout& layout, int64_t rank, const MlpParameters& params,
      const MlpData& data, bool split_backward = true);

  std::vector<int64_t> InputShape(int64_t stage, int64_t microbatch) const override;
  std::vector<int64_t> OutputShape(int64_t stage, int64_t microbatch) const override;
  absl::StatusOr<Tensor> Input(int64_t microbatch) override;
  absl::StatusOr<Tensor> Loss(int64_t microbatch, const Tensor& output) override;
  absl::StatusOr<Tensor> Forward(int64_t stage, int64_t microbatch,
                                    const Tensor& input) override;
  absl::StatusOr<Tensor> Backward(int64_t stage, int64_t microbatch,
                                     const Tensor& output_grad) override;
  bool SupportsSplitBackward() const override { return split_backward_; }
  absl::StatusOr<Tensor> BackwardInput(int64_t stage, int64_t microbatch,
                                          const Tensor& output_grad) override;
  absl::Status BackwardWeight(int64_t stage, int64_t microbatch) override;

  // layers returns the model layers this rank holds, ascending.
  const std::vector<int64_t>& layers() const { return layers_; }
  const std::vector<float>& weights(int64_t layer) const { return weights_.at(layer); }
  const std::vector<float>& biases(int64_t layer) const { return biases_.at(layer); }
  const std::vector<float>& weight_grads(int64_t layer) const { return weight_grads_.at(layer); }
  const std::vector<float>& bias_grads(int64_t layer) const { return bias_grads_.at(layer); }
  // holds_loss is true on the rank that holds the last stage, the one whose
  // microbatch_losses are filled in (one entry per microbatch, 0 until its Loss).
  bool holds_loss() const { return layout_.RankOf(layout_.num_stages() - 1) == rank_; }
  const std::vector<float>& microbatch_losses() const { return losses_; }
  // SavedActivations counts the (stage, microbatch) pairs whose forward state is
  // still held (0 after a complete step).
  int64_t SavedActivations() const { return static_cast<int64_t>(saved_.size()); }

  // ApplySgd updates this rank's layers as ::loom::ApplySgd does the whole model.
  void ApplySgd(float learning_rate);
  // BeginStep zeroes the gradients and losses, and drops forward state a failed
  // step left behind.
  void BeginStep();

 private:
  // What a stage keeps of one microbatch between its passes.
  struct Saved {
    std::vector<std::vector<float>> layer_inputs;   // x of each layer of the stage
    std::vector<std::vector<float>> layer_outputs;  // tanh(x W + b) of each layer
    std::vector<std::vector<float>> pre_grads;      // d loss / d (x W + b), after I
  };

  MlpStageModule(MlpConfig config, StageLayout layout, int64_t rank, MlpData data,
                 bool split_backward)
      : config_(std::move(config)),
        layout_(std::move(layout)),
        rank_(rank),
        data_(std::move(data)),
        split_backward_(split_backward) {}

  absl::Status CheckStage(int64_t stage, int64_t microbatch) const;
  absl::StatusOr<Tensor> InputGradient(int64_t stage, int64_t microbatch,
                                          const Tensor& output_grad);
  absl::Status WeightGradient(int64_t stage, int64_t microbatch);

  const MlpConfig config_;
  const StageLayout layout_;
  const int64_t rank_;
  const MlpData data_;
  const bool split_backward_;
  std::vector<int64_t> layers_;
  // By layer index; only this rank's layers are present.
  std::map<int64_t, std::vector<float>> weights_, biases_, weight_grads_, bias_grads_;
  std::map<std::pair<int64_t, int64_t>, Saved> saved_;
  std::vector<float> losses_;
};

// GatherGradients assembles the whole model's gradients from the modules of all
// ranks (each layer from the module that holds it) and the losses from the one
// holding the last layer (summed in microbatch order).
MlpGradients GatherGradients(const MlpConfig& config,
                             absl::Span<const MlpStageModule* const> modules);

// GatherParameters assembles the whole model's parameters likewise.
MlpParameters GatherParameters(const MlpConfig& config,
                               absl::Span<const MlpStageModule* const> modules);

}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_TINY_MLP_H_

#include "pipeline/executor/tiny_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {
namespace {

std::vector<float> Uniform(std::mt19937_64& rng, int64_t count, float bound) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = dist(rng);
  return values;
}

// Dot sums a[j] * b[j] with eight partial sums combined in a fixed order: the
// compiler can keep them in one vector register, and the result is the same on
// every call with the same inputs.
float Dot(const float* a, const float* b, int64_t n) {
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int t = 0; t < 8; ++t) partial[t] += a[j + t] * b[j + t];
  }
  for (int t = 0; j < n; ++j, ++t) partial[t] += a[j] * b[j];
  return ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
         ((partial[4] + partial[5]) + (partial[6] + partial[7]));
}

// The layer's three passes. x is rows x in, w is in x out (row-major), h and the
// gradients are rows x out.

// LayerForward returns h = tanh(x w + b).
std::vector<float> LayerForward(const std::vector<float>& x, const std::vector<float>& w,
                                const std::vector<float>& b, int64_t rows, int64_t in,
                                int64_t out) {
  std::vector<float> h(static_cast<size_t>(rows * out));
  for (int64_t i = 0; i < rows; ++i) {
    float* hi = &h[i * out];
    for (int64_t j = 0; j < out; ++j) hi[j] = b[j];
    for (int64_t k = 0; k < in; ++k) {
      const float xik = x[i * in + k];
      const float* wk = &w[k * out];
      for (int64_t j = 0; j < out; ++j) hi[j] += xik * wk[j];
    }
    for (int64_t j = 0; j < out; ++j) hi[j] = std::tanh(hi[j]);
  }
  return h;
}

// LayerInputGrad turns dh (d loss / d h) into dz = dh * (1 - h^2), the gradient
// before the tanh, which it stores for the weight pass, and returns dx = dz w^T.
std::vector<float> LayerInputGrad(const std::vector<float>& h, const std::vector<float>& dh,
                                  const std::vector<float>& w, int64_t rows, int64_t in,
                                  int64_t out, std::vector<float>& dz) {
  dz.resize(static_cast<size_t>(rows * out));
  for (size_t e = 0; e < dz.size(); ++e) dz[e] = dh[e] * (1.0f - h[e] * h[e]);
  std::vector<float> dx(static_cast<size_t>(rows * in));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t k = 0; k < in; ++k) dx[i * in + k] = Dot(&dz[i * out], &w[k * out], out);
  }
  return dx;
}

// LayerWeightGrad adds x^T dz to dw and the column sums of dz to db, row by row.
void LayerWeightGrad(const std::vector<float>& x, const std::vector<float>& dz, int64_t rows,
                     int64_t in, int64_t out, std::vector<float>& dw, std::vector<float>& db) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* dzi = &dz[i * out];
    for (int64_t k = 0; k < in; ++k) {
      const float xik = x[i * in + k];
      float* dwk = &dw[k * out];
      for (int64_t j = 0; j < out; ++j) dwk[j] += xik * dzi[j];
    }
    for (int64_t j = 0; j < out; ++j) db[j] += dzi[j];
  }
}

// LossGrad returns the microbatch's loss and writes d loss / d y into `grad`.
float LossGrad(const std::vector<float>& y, const std::vector<float>& target, float scale,
               std::vector<float>& grad) {
  grad.resize(y.size());
  float loss = 0;
  for (size_t e = 0; e < y.size(); ++e) {
    const float diff = y[e] - target[e];
    loss += 0.5f * diff * diff * scale;
    grad[e] = diff * scale;
  }
  return loss;
}

float LossScale(const MlpConfig& config) {
  return 1.0f / static_cast<float>(config.rows * config.num_microbatches);
}

int64_t Width(const MlpConfig& config, int64_t index) { return config.widths[index]; }

}  // namespace

MlpParameters MakeMlpParameters(const MlpConfig& config) {
  std::mt19937_64 rng(config.seed);
  MlpParameters params;
  for (int64_t l = 0; l < config.num_layers(); ++l) {
    const int64_t in = Width(config, l), out = Width(config, l + 1);
    params.weights.push_back(
        Uniform(rng, in * out, 1.0f / std::sqrt(static_cast<float>(std::max<int64_t>(in, 1)))));
    params.biases.push_back(Uniform(rng, out, 0.1f));
  }
  return params;
}

MlpData MakeMlpData(const MlpConfig& config) {
  std::mt19937_64 rng(config.seed ^ 0x9E3779B97F4A7C15ull);
  MlpData data;
  for (int64_t mb = 0; mb < config.num_microbatches; ++mb) {
    data.inputs.push_back(Uniform(rng, config.rows * config.widths.front(), 1.0f));
    data.targets.push_back(Uniform(rng, config.rows * config.widths.back(), 1.0f));
  }
  return data;
}

MlpGradients MlpReference(const MlpConfig& config, const MlpParameters& params,
                          const MlpData& data) {
  const int64_t layers = config.num_layers();
  const int64_t rows = config.rows;
  MlpGradients result;
  for (int64_t l = 0; l < layers; ++l) {
    result.grads.weights.emplace_back(params.weights[l].size(), 0.0f);
    result.grads.biases.emplace_back(params.biases[l].size(), 0.0f);
  }
  for (int64_t mb = 0; mb < config.num_microbatches; ++mb) {
    std::vector<std::vector<float>> activations = {data.inputs[mb]};
    for (int64_t l = 0; l < layers; ++l) {
      activations.push_back(LayerForward(activations.back(), params.weights[l], params.biases[l],
                                         rows, Width(config, l), Width(config, l + 1)));
    }
    std::vector<float> grad;
    result.microbatch_losses.push_back(
        LossGrad(activations.back(), data.targets[mb], LossScale(config), grad));
    for (int64_t l = layers - 1; l >= 0; --l) {
      std::vector<float> dz;
      std::vector<float> dx = LayerInputGrad(activations[l + 1], grad, params.weights[l], rows,
                                             Width(config, l), Width(config, l + 1), dz);
      LayerWeightGrad(activations[l], dz, rows, Width(config, l), Width(config, l + 1),
                      result.grads.weights[l], result.grads.biases[l]);
      grad = std::move(dx);
    }
  }
  for (const float loss : result.microbatch_losses) result.loss += loss;
  return result;
}

void ApplySgd(float learning_rate, const MlpParameters& grads, MlpParameters& params) {
  for (size_t l = 0; l < params.weights.size(); ++l) {
    for (size_t e = 0; e < params.weights[l].size(); ++e) {
      params.weights[l][e] -= learning_rate * grads.weights[l][e];
    }
    for (size_t e = 0; e < params.biases[l].size(); ++e) {
      params.biases[l][e] -= learning_rate * grads.biases[l][e];
    }
  }
}

absl::StatusOr<std::unique_ptr<MlpStageModule>> MlpStageModule::Create(
    const MlpConfig& config, const StageLayout& layout, int64_t rank, const MlpParameters& params,
    const MlpData& data, bool split_backward) {
  if (config.num_layers() < 0 || config.rows < 0 || config.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MlpConfig needs at least one width, rows >= 0 and num_microbatches >= 1; got ",
        config.widths.size(), " widths, rows=", config.rows, ", num_microbatches=",
        config.num_microbatches));
  }
  if (!layout.has_layers() || layout.num_layers() != config.num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout ", layout.ToString(), " must assign the MLP's ", config.num_layers(),
                     " layers to its stages"));
  }
  if (rank < 0 || rank >= layout.num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is outside layout ", layout.ToString()));
  }
  const size_t layers = static_cast<size_t>(config.num_layers());
  const size_t microbatches = static_cast<size_t>(config.num_microbatches);
  bool fits = params.weights.size() == layers && params.biases.size() == layers &&
              data.inputs.size() == microbatches && data.targets.size() == microbatches;
  for (size_t l = 0; fits && l < layers; ++l) {
    fits = params.weights[l].size() == static_cast<size_t>(config.widths[l] * config.widths[l + 1]) &&
           params.biases[l].size() == static_cast<size_t>(config.widths[l + 1]);
  }
  for (size_t mb = 0; fits && mb < microbatches; ++mb) {
    fits = data.inputs[mb].size() == static_cast<size_t>(config.rows * config.widths.front()) &&
           data.targets[mb].size() == static_cast<size_t>(config.rows * config.widths.back());
  }
  if (!fits) {
    return absl::InvalidArgumentError("MLP parameters or data do not fit the config's widths");
  }
  std::unique_ptr<MlpStageModule> module(
      new MlpStageModule(config, layout, rank, data, split_backward));
  for (const int64_t stage : layout.StagesOf(rank)) {
    const int64_t first = layout.FirstLayer(stage);
    for (int64_t l = first; l < first + layout.layers_per_stage()[stage]; ++l) {
      module->layers_.push_back(l);
      module->weights_[l] = params.weights[l];
      module->biases_[l] = params.biases[l];
    }
  }
  module->BeginStep();
  return module;
}

void MlpStageModule::BeginStep() {
  for (const int64_t l : layers_) {
    weight_grads_[l].assign(weights_[l].size(), 0.0f);
    bias_grads_[l].assign(biases_[l].size(), 0.0f);
  }
  losses_.assign(static_cast<size_t>(config_.num_microbatches), 0.0f);
  saved_.clear();
}

void MlpStageModule::ApplySgd(float learning_rate) {
  for (const int64_t l : layers_) {
    for (size_t e = 0; e < weights_[l].size(); ++e) {
      weights_[l][e] -= learning_rate * weight_grads_[l][e];
    }
    for (size_t e = 0; e < biases_[l].size(); ++e) {
      biases_[l][e] -= learning_rate * bias_grads_[l][e];
    }
  }
}

std::vector<int64_t> MlpStageModule::InputShape(int64_t stage, int64_t) const {
  if (stage < 0 || stage >= layout_.num_stages()) return {};
  return {config_.rows, Width(config_, layout_.FirstLayer(stage))};
}

std::vector<int64_t> MlpStageModule::OutputShape(int64_t stage, int64_t) const {
  if (stage < 0 || stage >= layout_.num_stages()) return {};
  return {config_.rows,
          Width(config_, layout_.FirstLayer(stage) + layout_.layers_per_stage()[stage])};
}

absl::Status MlpStageModule::CheckStage(int64_t stage, int64_t microbatch) const {
  if (layout_.RankOf(stage) != rank_ || microbatch < 0 ||
      microbatch >= config_.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat("MLP module of rank ", rank_, " (",
                                                   layout_.ToString(), ") has no stage ", stage,
                                                   " microbatch ", microbatch));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MlpStageModule::Input(int64_t microbatch) {
  LOOM_RETURN_IF_ERROR(CheckStage(0, microbatch));
  return Tensor::FromValues({config_.rows, config_.widths.front()}, data_.inputs[microbatch]);
}

absl::StatusOr<Tensor> MlpStageModule::Loss(int64_t microbatch, const Tensor& output) {
  LOOM_RETURN_IF_ERROR(CheckStage(layout_.num_stages() - 1, microbatch));
  const std::vector<float> values = output.ToF32();
  if (output.dtype() != DType::kF32 || values.size() != data_.targets[microbatch].size()) {
    return absl::InvalidArgumentError(absl::StrCat("the MLP's output for microbatch ", microbatch,
                                                   " has ", values.size(), " ",
                                                   DTypeName(output.dtype()),
                                                   " values, its target ",
                                                   data_.targets[microbatch].size(), " f32"));
  }
  std::vector<float> grad;
  losses_[microbatch] = LossGrad(values, data_.targets[microbatch], LossScale(config_), grad);
  return Tensor::FromValues(output.shape(), grad);
}

absl::StatusOr<Tensor> MlpStageModule::Forward(int64_t stage, int64_t microbatch,
                                                  const Tensor& input) {
  LOOM_RETURN_IF_ERROR(CheckStage(stage, microbatch));
  if (input.shape() != InputShape(stage, microbatch) || input.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("MLP stage ", stage, " takes f32 ",
                                                   ShapeString(InputShape(stage, microbatch)),
                                                   ", got ", DTypeName(input.dtype()), " ",
                                                   ShapeString(input.shape())));
  }
  Saved saved;
  std::vector<float> x = input.ToF32();
  const int64_t first = layout_.FirstLayer(stage);
  for (int64_t l = first; l < first + layout_.layers_per_stage()[stage]; ++l) {
    std::vector<float> h = LayerForward(x, weights_[l], biases_[l], config_.rows, Width(config_, l),
                                        Width(config_, l + 1));
    saved.layer_inputs.push_back(std::move(x));
    x = h;
    saved.layer_outputs.push_back(std::move(h));
  }
  if (!saved_.emplace(std::make_pair(stage, microbatch), std::move(saved)).second) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage, " ran forward twice for microbatch ", microbatch));
  }
  return Tensor::FromValues(OutputShape(stage, microbatch), x);
}

absl::StatusOr<Tensor> MlpStageModule::InputGradient(int64_t stage, int64_t microbatch,
                                                        const Tensor& output_grad) {
  LOOM_RETURN_IF_ERROR(CheckStage(stage, microbatch));
  if (output_grad.shape() != OutputShape(stage, microbatch) ||
      output_grad.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLP stage ", stage, " takes an f32 output gradient of ",
                     ShapeString(OutputShape(stage, microbatch)), ", got ",
                     DTypeName(output_grad.dtype()), " ", ShapeString(output_grad.shape())));
  }
  auto it = saved_.find({stage, microbatch});
  if (it == saved_.end() || !it->second.pre_grads.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("stage ", stage, " microbatch ", microbatch,
                                                      " has no forward state for a backward"));
  }
  Saved& saved = it->second;
  const int64_t first = layout_.FirstLayer(stage);
  const int64_t count = layout_.layers_per_stage()[stage];
  saved.pre_grads.resize(static_cast<size_t>(count));
  std::vector<float> grad = output_grad.ToF32();
  for (int64_t i = count - 1; i >= 0; --i) {
    const int64_t l = first + i;
    grad = LayerInputGrad(saved.layer_outputs[i], grad, weights_[l], config_.rows,
                          Width(config_, l), Width(config_, l + 1), saved.pre_grads[i]);
  }
  return Tensor::FromValues(InputShape(stage, microbatch), grad);
}

absl::Status MlpStageModule::WeightGradient(int64_t stage, int64_t microbatch) {
  LOOM_RETURN_IF_ERROR(CheckStage(stage, microbatch));
  auto it = saved_.find({stage, microbatch});
  const int64_t count = layout_.layers_per_stage()[stage];
  if (it == saved_.end() || static_cast<int64_t>(it->second.pre_grads.size()) != count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", stage, " microbatch ", microbatch, " has no input gradient for its W"));
  }
  const Saved& saved = it->second;
  const int64_t first = layout_.FirstLayer(stage);
  // Each layer has its own accumulator, so only the order of microbatches matters.
  for (int64_t i = count - 1; i >= 0; --i) {
    const int64_t l = first + i;
    LayerWeightGrad(saved.layer_inputs[i], saved.pre_grads[i], config_.rows, Width(config_, l),
                    Width(config_, l + 1), weight_grads_[l], bias_grads_[l]);
  }
  saved_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MlpStageModule::Backward(int64_t stage, int64_t microbatch,
                                                   const Tensor& output_grad) {
  LOOM_ASSIGN_OR_RETURN(Tensor input_grad, InputGradient(stage, microbatch, output_grad));
  LOOM_RETURN_IF_ERROR(WeightGradient(stage, microbatch));
  return input_grad;
}

absl::StatusOr<Tensor> MlpStageModule::BackwardInput(int64_t stage, int64_t microbatch,
                                                        const Tensor& output_grad) {
  if (!split_backward_) return StageModule::BackwardInput(stage, microbatch, output_grad);
  return InputGradient(stage, microbatch, output_grad);
}

absl::Status MlpStageModule::BackwardWeight(int64_t stage, int64_t microbatch) {
  if (!split_backward_) return StageModule::BackwardWeight(stage, microbatch);
  return WeightGradient(stage, microbatch);
}

MlpGradients GatherGradients(const MlpConfig& config,
                             absl::Span<const MlpStageModule* const> modules) {
  MlpGradients result;
  result.grads.weights.resize(static_cast<size_t>(config.num_layers()));
  result.grads.biases.resize(static_cast<size_t>(config.num_layers()));
  result.microbatch_losses.assign(static_cast<size_t>(config.num_microbatches), 0.0f);
  for (const MlpStageModule* module : modules) {
    for (const int64_t l : module->layers()) {
      result.grads.weights[l] = module->weight_grads(l);
      result.grads.biases[l] = module->bias_grads(l);
    }
  }
  for (const MlpStageModule* module : modules) {
    if (module->holds_loss()) result.microbatch_losses = module->microbatch_losses();
  }
  for (const float loss : result.microbatch_losses) result.loss += loss;
  return result;
}

MlpParameters GatherParameters(const MlpConfig& config,
                               absl::Span<const MlpStageModule* const> modules) {
  MlpParameters result;
  result.weights.resize(static_cast<size_t>(config.num_layers()));
  result.biases.resize(static_cast<size_t>(config.num_layers()));
  for (const MlpStageModule* module : modules) {
    for (const int64_t l : module->layers()) {
      result.weights[l] = module->weights(l);
      result.biases[l] = module->biases(l);
    }
  }
  return result;
}

}  // namespace loom

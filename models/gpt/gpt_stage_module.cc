#include "models/gpt/gpt_stage_module.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/tensor.h"

namespace loom {

namespace {

constexpr char kName[] = "GptStageModule";

}  // namespace

absl::StatusOr<std::unique_ptr<GptStageModule>> GptStageModule::Create(
    const GptConfig& config, const StageLayout& layout, int64_t rank, Communicator& tp,
    GptMicrobatchFn data, const GptStageModuleOptions& options) {
  LOOM_RETURN_IF_ERROR(config.Validate(tp.size()));
  if (rank < 0 || rank >= layout.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": rank ", rank, " is outside ",
                                                   layout.ToString()));
  }
  if (options.micro_batch < 1 || options.num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": micro_batch ", options.micro_batch,
                                                   " and num_microbatches ",
                                                   options.num_microbatches, " must be >= 1"));
  }
  if (!(std::isfinite(options.loss_gradient_scale) && options.loss_gradient_scale > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": loss_gradient_scale ",
                                                   options.loss_gradient_scale,
                                                   " must be finite and > 0"));
  }
  if (!data) return absl::InvalidArgumentError(absl::StrCat(kName, ": no data function"));
  StageLayout blocks = layout;
  if (!blocks.has_layers()) {
    LOOM_ASSIGN_OR_RETURN(blocks, layout.WithBalancedLayers(config.layers));
  } else if (blocks.num_layers() != config.layers) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": layout ", layout.ToString(),
                                                   " has ", layout.num_layers(),
                                                   " layers, the model ", config.layers));
  }
  std::unique_ptr<GptStageModule> module(
      new GptStageModule(config, blocks, rank, std::move(data), options));
  LOOM_ASSIGN_OR_RETURN(module->positions_,
                        LocalPositions(config.seq_len, options.context_parallel));
  for (const int64_t stage : blocks.StagesOf(rank)) {
    const int64_t first = blocks.FirstLayer(stage);
    const int64_t end = first + blocks.layers_per_stage()[static_cast<size_t>(stage)];
    GptModelOptions model_options = GptModelOptions::Stage(config, first, end, options.recompute);
    model_options.embedding = stage == 0;
    model_options.head = stage == blocks.num_stages() - 1;
    model_options.precision = options.precision;
    model_options.context_parallel = options.context_parallel;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                          GptModel::Create(config, tp, model_options));
    module->models_[stage] = std::move(model);
    module->stages_.push_back(stage);
  }
  module->BeginStep(0);
  return module;
}

std::vector<int64_t> GptStageModule::InputShape(int64_t stage, int64_t) const {
  if (stage == 0) return {options_.micro_batch, SeqRows()};
  return {SeqRows(), options_.micro_batch, config_.hidden};
}

std::vector<int64_t> GptStageModule::OutputShape(int64_t stage, int64_t) const {
  if (stage == layout_.num_stages() - 1) return {1};
  return {SeqRows(), options_.micro_batch, config_.hidden};
}

absl::Status GptStageModule::Check(int64_t stage, int64_t microbatch) const {
  if (models_.count(stage) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": stage ", stage,
                                                   " is not on rank ", rank_, " in ",
                                                   layout_.ToString()));
  }
  if (microbatch < 0 || microbatch >= options_.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": microbatch ", microbatch,
                                                   " is outside [0, ", options_.num_microbatches,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<const GptBatch*> GptStageModule::BatchOf(int64_t microbatch) {
  auto it = batches_.find(microbatch);
  if (it == batches_.end()) {
    const GptMicrobatchFn& data = eval_data_ ? eval_data_ : data_;
    LOOM_ASSIGN_OR_RETURN(GptBatch batch, data(step_, microbatch));
    const size_t expected = static_cast<size_t>(options_.micro_batch * config_.seq_len);
    if (batch.tokens.size() != expected || batch.targets.size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": the data function gave ", batch.tokens.size(), " tokens and ",
          batch.targets.size(), " targets for microbatch ", microbatch, "; expected ", expected,
          " (micro_batch ", options_.micro_batch, " x seq_len ", config_.seq_len, ")"));
    }
    if (options_.context_parallel.active()) {
      // Context parallelism: this rank's positions of every sequence.
      GptBatch local;
      local.batch = batch.batch;
      local.seq_len = SeqRows();
      for (int64_t j = 0; j < options_.micro_batch; ++j) {
        for (const int64_t p : positions_) {
          local.tokens.push_back(batch.tokens[j * config_.seq_len + p]);
          local.targets.push_back(batch.targets[j * config_.seq_len + p]);
        }
      }
      batch = std::move(local);
    }
    it = batches_.emplace(microbatch, std::move(batch)).first;
  }
  return &it->second;
}

absl::StatusOr<Tensor> GptStageModule::Input(int64_t microbatch) {
  LOOM_RETURN_IF_ERROR(Check(0, microbatch));
  LOOM_ASSIGN_OR_RETURN(const GptBatch* batch, BatchOf(microbatch));
  // Token ids travel as what they are, i64.
  return Tensor::FromInts(InputShape(0, microbatch), batch->tokens);
}

absl::StatusOr<Tensor> GptStageModule::Loss(int64_t microbatch, const Tensor& output) {
  LOOM_RETURN_IF_ERROR(Check(layout_.num_stages() - 1, microbatch));
  if (output.numel() != 1 || output.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": loss output is ",
                                                   DTypeName(output.dtype()), " ",
                                                   ShapeString(output.shape()),
                                                   ", not one f32 value"));
  }
  losses_[static_cast<size_t>(microbatch)] = output.ToF32()[0];
  has_loss_[static_cast<size_t>(microbatch)] = true;
  return Tensor::FromValues(
      {1}, {options_.loss_gradient_scale / static_cast<float>(options_.num_microbatches)});
}

absl::StatusOr<Tensor> GptStageModule::RunForward(int64_t stage, int64_t microbatch,
                                                     const Tensor& input) {
  GptStageInput in;
  if (stage == 0) {
    if (input.dtype() != DType::kI64) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": stage 0 takes i64 token ids, got ", DTypeName(input.dtype()), " ",
          ShapeString(input.shape()), " for microbatch ", microbatch));
    }
    LOOM_ASSIGN_OR_RETURN(in.tokens, input.As<int64_t>());
    for (const int64_t id : in.tokens) {
      if (id < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            kName, ": stage 0 input value ", id, " of microbatch ", microbatch,
            " is not a token id"));
      }
    }
  } else {
    if (input.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          kName, ": stage ", stage, " takes f32 activations, got ", DTypeName(input.dtype())));
    }
    in.hidden = &input;
  }
  if (stage == layout_.num_stages() - 1) {
    LOOM_ASSIGN_OR_RETURN(const GptBatch* batch, BatchOf(microbatch));
    in.targets = batch->targets;
  }
  LOOM_ASSIGN_OR_RETURN(Tensor out, models_.at(stage)->ForwardStage(in));
  if (!forward_only_) ++training_forwards_;
  if (out.dtype() != DType::kF32) return out.ConvertTo(DType::kF32);
  return out;
}

template <typename Call>
auto GptStageModule::Tracked(int64_t stage, Call call) -> decltype(call()) {
  // The other stages' live state and every microbatch context held apart (the
  // called stage's own live state is in its model's peak).
  size_t others = 0;
  for (const auto& [s, model] : models_) {
    if (s != stage) others += model->held_activation_bytes();
  }
  for (const auto& [key, context] : contexts_) others += context.bytes();
  GptModel& model = *models_.at(stage);
  model.ResetPeakActivationBytes();
  auto result = call();
  peak_bytes_ = std::max(peak_bytes_, others + model.peak_activation_bytes());
  return result;
}

absl::StatusOr<Tensor> GptStageModule::Forward(int64_t stage, int64_t microbatch,
                                                  const Tensor& input) {
  LOOM_RETURN_IF_ERROR(Check(stage, microbatch));
  if (forward_only_) {
    // No backward follows: nothing of this forward outlives the call.
    return Tracked(stage, [&]() -> absl::StatusOr<Tensor> {
      absl::StatusOr<Tensor> output = RunForward(stage, microbatch, input);
      models_.at(stage)->ReleaseActivations();
      return output;
    });
  }
  if (contexts_.count({stage, microbatch}) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": Forward of stage ", stage,
                                                      " microbatch ", microbatch,
                                                      " again before its backward"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor output,
                        Tracked(stage, [&] { return RunForward(stage, microbatch, input); }));
  // The microbatch's saved state goes into its own context until its backward.
  contexts_[{stage, microbatch}] = models_.at(stage)->TakeActivations();
  return output;
}

absl::StatusOr<Tensor> GptStageModule::PrepareBackward(const char* what, int64_t stage,
                                                       int64_t microbatch,
                                                       const Tensor& output_grad) {
  LOOM_RETURN_IF_ERROR(Check(stage, microbatch));
  if (forward_only_) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": ", what, " of stage ", stage, " microbatch ", microbatch,
        " in a forward-only run (BeginForwardOnly); BeginStep starts a training step"));
  }
  auto it = contexts_.find({stage, microbatch});
  if (it == contexts_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(
        kName, ": ", what, " of stage ", stage, " microbatch ", microbatch, " before its Forward"));
  }
  if (output_grad.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", what, " of stage ", stage,
                                                   " takes an f32 output gradient, got ",
                                                   DTypeName(output_grad.dtype())));
  }
  Tensor grad = output_grad.Clone();
  LOOM_RETURN_IF_ERROR(models_.at(stage)->RestoreActivations(std::move(it->second)));
  contexts_.erase(it);
  return grad;
}

absl::StatusOr<Tensor> GptStageModule::FinishBackward(int64_t stage, Tensor dx) {
  if (stage == 0) return Tensor();
  if (dx.dtype() != DType::kF32) return dx.ConvertTo(DType::kF32);
  return dx;
}

absl::StatusOr<Tensor> GptStageModule::Backward(int64_t stage, int64_t microbatch,
                                                   const Tensor& output_grad) {
  LOOM_RETURN_IF_ERROR(Check(stage, microbatch));
  LOOM_ASSIGN_OR_RETURN(Tensor grad, PrepareBackward("Backward", stage, microbatch, output_grad));
  return Tracked(stage, [&]() -> absl::StatusOr<Tensor> {
    LOOM_ASSIGN_OR_RETURN(Tensor dx, models_.at(stage)->BackwardStage(grad));
    return FinishBackward(stage, std::move(dx));
  });
}

absl::StatusOr<Tensor> GptStageModule::BackwardInput(int64_t stage, int64_t microbatch,
                                                        const Tensor& output_grad) {
  LOOM_RETURN_IF_ERROR(Check(stage, microbatch));
  LOOM_ASSIGN_OR_RETURN(Tensor grad,
                        PrepareBackward("BackwardInput", stage, microbatch, output_grad));
  return Tracked(stage, [&]() -> absl::StatusOr<Tensor> {
    GptWeightGradWork work;
    LOOM_ASSIGN_OR_RETURN(Tensor dx, models_.at(stage)->BackwardStageInput(grad, work));
    works_[{stage, microbatch}] = std::move(work);
    return FinishBackward(stage, std::move(dx));
  });
}

absl::Status GptStageModule::BackwardWeight(int64_t stage, int64_t microbatch) {
  LOOM_RETURN_IF_ERROR(Check(stage, microbatch));
  auto it = works_.find({stage, microbatch});
  if (it == works_.end()) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": BackwardWeight of stage ", stage,
                                                      " microbatch ", microbatch,
                                                      " before its BackwardInput"));
  }
  const GptWeightGradWork work = std::move(it->second);
  works_.erase(it);
  return Tracked(stage, [&] { return models_.at(stage)->BackwardStageWeight(work); });
}

void GptStageModule::Reset(int64_t step) {
  step_ = step;
  for (auto& [stage, model] : models_) model->ReleaseActivations();
  contexts_.clear();
  works_.clear();
  batches_.clear();
  losses_.assign(static_cast<size_t>(options_.num_microbatches), 0.0f);
  has_loss_.assign(static_cast<size_t>(options_.num_microbatches), false);
}

void GptStageModule::BeginStep(int64_t step) {
  Reset(step);
  for (auto& [stage, model] : models_) model->ZeroGrad();
  forward_only_ = false;
  eval_data_ = nullptr;
}

void GptStageModule::BeginForwardOnly(int64_t step, GptMicrobatchFn data) {
  Reset(step);
  forward_only_ = true;
  eval_data_ = std::move(data);
}

std::vector<GptParameter> GptStageModule::Parameters() {
  std::vector<GptParameter> params;
  for (const int64_t stage : stages_) {
    for (GptParameter& p : models_.at(stage)->Parameters()) params.push_back(std::move(p));
  }
  return params;
}

size_t GptStageModule::held_activation_bytes() const {
  size_t bytes = 0;
  for (const auto& [stage, model] : models_) bytes += model->held_activation_bytes();
  for (const auto& [key, context] : contexts_) bytes += context.bytes();
  return bytes;
}

float GptStageModule::loss() const {
  float sum = 0.0f;
  for (const float l : losses_) sum += l;
  const int64_t count = std::count(has_loss_.begin(), has_loss_.end(), true);
  return count == 0 ? 0.0f : sum / static_cast<float>(count);
}

}  // namespace loom

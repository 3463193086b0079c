// DeviceGptModel: the GptModel of models/gpt (one rank: tp, pp, cp 1) trained whole
// on one CUDA device. Parameters, gradients, AdamW moments and every activation live
// in device memory; the products run on cuBLAS (f32, or bf16 operands with f32
// accumulation), the rest in the kernels of gpt_kernels.h, the optimizer step in
// offload/gpu's GpuAdamWStep. The host sees the loss (one double a step), the
// gradient norm when it asks, and the parameters when it copies them in or out
// (checkpoints).
//
// It computes GptModel's function: the same parameters (names, shapes and order of
// GptModel::Parameters() at tp 1), the same pre-norm blocks, tanh GELU, causal
// attention scaled by 1/sqrt(head_dim), final norm, bias-free head and mean
// cross-entropy over the microbatch's tokens, so a CPU model's values can be copied
// in and its loss and gradients compared (device_gpt_model_test).
//
// Attention either materializes each head's [s, s] probabilities (of the compute
// type; the scores before the softmax in f32) and keeps them for the backward, or
// (bf16, head_dim 64 or 128) runs tiled on the tensor cores and keeps only each
// row's log-sum-exp (DeviceAttention). Everything a backward needs is kept for one
// microbatch, so ForwardBackward runs each forward once.
//
// Example:
//   GptConfig config;                                  // V=64, seq=32, hidden=64, ...
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGptModel> model,
//                         DeviceGptModel::Create(config, {.micro_batch = 4, .bf16 = true}));
//   for (int p = 0; p < model->parameters().size(); ++p)
//     LOOM_RETURN_IF_ERROR(model->SetParameter(p, 0, host_values[p], {}, {}));
//   LOOM_RETURN_IF_ERROR(model->ZeroGrad());
//   for (const GptBatch& mb : microbatches)
//     LOOM_RETURN_IF_ERROR(model->ForwardBackward(mb, 1.0f / microbatches.size()));
//   LOOM_ASSIGN_OR_RETURN(double loss, model->TakeLoss());   // the step's mean loss
//   LOOM_RETURN_IF_ERROR(model->Step(hyper));                // AdamW on the device
//   model->ForwardBackward(batch_of_the_wrong_shape, 1);
//   // InvalidArgument: "DeviceGptModel: batch of 3 sequences of 32; the model was made
//   //                   for 4 of 32"
#ifndef LOOM_MODELS_GPT_GPU_DEVICE_GPT_MODEL_H_
#define LOOM_MODELS_GPT_GPU_DEVICE_GPT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "models/gpt/batch.h"
#include "models/gpt/gpt_config.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {

// How the model attends.
enum class DeviceAttention {
  kAuto,          // kFlash where it applies (bf16, head_dim 64 or 128), else kMaterialized
  kMaterialized,  // cuBLAS products over each head's [s, s] scores and probabilities, kept
  kFlash,         // flash_attention_kernels.h: tiles, nothing of [s, s] kept
};
const char* DeviceAttentionName(DeviceAttention attention);

struct DeviceGptOptions {
  // Sequences per ForwardBackward (the job's micro batch).
  int64_t micro_batch = 1;
  // bf16 operands (weights and the activations the products read) with f32
  // accumulation; f32 products (no TF32) otherwise. Master weights, gradients,
  // moments, the residual stream and every reduction stay f32 either way.
  bool bf16 = false;
  int device = 0;
  DeviceAttention attention = DeviceAttention::kAuto;
  // How long a wait for the device may take before it is DeadlineExceeded.
  absl::Duration timeout = absl::Minutes(5);
};

// One parameter: its name and full shape (GptModel's), and where it lies in the
// model's flat f32 buffers.
struct DeviceParameter {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel = 0;
};

// What Create would allocate on the device, in bytes.
struct DeviceGptBytes {
  int64_t state = 0;        // parameters, gradients, moments, the bf16 copy
  int64_t activations = 0;  // what a microbatch keeps for its backward
  int64_t scratch = 0;      // buffers reused from layer to layer
  int64_t total() const { return state + activations + scratch; }
};

class DeviceGptModel {
 public:
  // DeviceGptBytesOf: the device memory a model of `config` and `options` needs.
  // InvalidArgument as Create.
  static absl::StatusOr<DeviceGptBytes> BytesOf(const GptConfig& config,
                                                const DeviceGptOptions& options);

  // Create allocates the model on `options.device`, every parameter, moment and
  // gradient zero (SetParameter gives them values). InvalidArgument for a config
  // that fails GptConfig::Validate(1), micro_batch < 1, or kFlash where it does not
  // apply (f32, or head_dim not 64 or 128); ResourceExhausted naming
  // the bytes needed and free when the device cannot hold it; FailedPrecondition
  // without a CUDA device.
  static absl::StatusOr<std::unique_ptr<DeviceGptModel>> Create(const GptConfig& config,
                                                                const DeviceGptOptions& options);
  ~DeviceGptModel();
  DeviceGptModel(const DeviceGptModel&) = delete;
  DeviceGptModel& operator=(const DeviceGptModel&) = delete;

  const GptConfig& config() const { return config_; }
  const DeviceGptOptions& options() const { return options_; }
  // Whether attention runs tiled (options().attention resolved).
  bool flash() const { return flash_; }
  // In GptModel::Parameters() order (tp 1).
  const std::vector<DeviceParameter>& parameters() const { return params_; }
  // The index of `name`, or -1.
  int ParameterIndex(absl::string_view name) const;
  int64_t parameter_count() const;  // elements, all parameters
  DeviceGptBytes bytes() const { return bytes_; }

  // SetParameter copies elements [begin, begin + values.size()) of parameter p from
  // the host, and the same range of its AdamW moments m and v (both values' size, or
  // both empty to leave the moments as they are); the bf16 copy follows. GetParameter
  // copies a whole parameter back (m and v may be empty). GetGradient copies p's
  // accumulated gradient. Synchronous. InvalidArgument for a parameter index out of
  // range or spans of other sizes, OutOfRange for a range past the parameter's end,
  // naming the parameter and the sizes.
  absl::Status SetParameter(int p, int64_t begin, absl::Span<const float> values,
                            absl::Span<const float> m, absl::Span<const float> v);
  absl::Status GetParameter(int p, absl::Span<float> values, absl::Span<float> m,
                            absl::Span<float> v) const;
  absl::Status GetGradient(int p, absl::Span<float> grad) const;

  // ZeroGrad clears the gradients and the loss accumulator (enqueued).
  absl::Status ZeroGrad();
  // ForwardBackward runs one microbatch (micro_batch sequences of seq_len) forward
  // and backward, adding loss_weight times the gradient of its mean loss to the
  // gradients and loss_weight times the mean loss to the accumulator. Enqueued; the
  // host returns once the work is. InvalidArgument naming the values for a batch of
  // another shape or a token or target outside [0, vocab).
  absl::Status ForwardBackward(const GptBatch& batch, float loss_weight);
  // ForwardLoss runs a forward only and returns its mean loss (waits for it). The
  // gradients and the accumulator are left alone.
  absl::StatusOr<double> ForwardLoss(const GptBatch& batch);
  // TakeLoss waits for the work enqueued so far and returns the accumulator.
  absl::StatusOr<double> TakeLoss();
  // GradSquaredNorm waits and returns the sum of every gradient element's square.
  absl::StatusOr<double> GradSquaredNorm();
  // Step enqueues one AdamW step over every parameter (hyper.grad_scale applies);
  // with bf16 the weights' bf16 copy is written in the same pass.
  absl::Status Step(const AdamWHyper& hyper);
  // Synchronize waits for everything enqueued (options.timeout).
  absl::Status Synchronize();

  struct Impl;

 private:
  DeviceGptModel(const GptConfig& config, const DeviceGptOptions& options);

  GptConfig config_;
  DeviceGptOptions options_;
  std::vector<DeviceParameter> params_;
  DeviceGptBytes bytes_;
  bool flash_ = false;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPU_DEVICE_GPT_MODEL_H_

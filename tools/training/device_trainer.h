// DeviceTrainer: `train --device=cuda` on one rank with the whole training state on
// CUDA device 0: the model's parameters, gradients, AdamW moments and activations
// (models/gpt/gpu/device_gpt_model.h). The host keeps the rank's ordinary optimizer
// as the checkpoints' mirror only: Load fills the device from its state (a fresh
// start or a resumed checkpoint), MirrorInto writes the device's state back into it
// before a save, so checkpoints are the CPU job's and resume on either device.
//
// Built both ways, as device_gemm.h: with --config=cuda it trains on the GPU;
// without, DeviceTrainingAvailable() is false and MakeDeviceTrainer Unimplemented.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceTrainer> gpu,
//                         MakeDeviceTrainer(options.model, /*micro_batch=*/2, /*bf16=*/true));
//   LOOM_RETURN_IF_ERROR(gpu->Load(params, *optimizer->ReadState()));
//   LOOM_ASSIGN_OR_RETURN(double loss, gpu->ForwardBackward(batch_of, microbatches));
//   LOOM_RETURN_IF_ERROR(gpu->Step(hyper));
//   LOOM_RETURN_IF_ERROR(gpu->MirrorInto(*optimizer));   // before SaveCheckpoint
#ifndef LOOM_TOOLS_TRAINING_DEVICE_TRAINER_H_
#define LOOM_TOOLS_TRAINING_DEVICE_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/optimizer_state.h"
#include "models/gpt/batch.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "offload/adamw/cpu_adamw.h"
#include "zero3/data_parallel.h"

namespace loom {

// Microbatch `mb` of the step (or of the held-out set).
using DeviceBatchFn = std::function<absl::StatusOr<GptBatch>(int64_t mb)>;

class DeviceTrainer {
 public:
  virtual ~DeviceTrainer() = default;

  // Load copies the host optimizer's state (`state`, its ReadState: f32 masters and
  // moments of `params`, GptModel's parameters in order) into the device.
  // InvalidArgument when a parameter's name or size is not the device model's.
  virtual absl::Status Load(const std::vector<GptParameter>& params,
                            const std::vector<StateSlice>& state) = 0;
  // ForwardBackward clears the gradients, runs `microbatches` microbatches forward
  // and backward (each weighted 1 / microbatches) and returns the step's mean loss.
  virtual absl::StatusOr<double> ForwardBackward(const DeviceBatchFn& batch_of,
                                                 int64_t microbatches) = 0;
  // The whole gradient's squared L2 norm (for clipping).
  virtual absl::StatusOr<double> GradSquaredNorm() = 0;
  // One AdamW step on the device; returns when it is done.
  virtual absl::Status Step(const AdamWHyper& hyper) = 0;
  // The mean loss over `microbatches` held-out microbatches (forward only).
  virtual absl::StatusOr<double> Evaluate(const DeviceBatchFn& batch_of,
                                          int64_t microbatches) = 0;
  // MirrorInto writes the device's masters and moments into `optimizer`
  // (WriteState), for a checkpoint save.
  virtual absl::Status MirrorInto(DataParallelOptimizer& optimizer) = 0;
  // The parameters' current values, in order.
  virtual absl::StatusOr<std::vector<std::vector<float>>> Weights() = 0;

  virtual int64_t state_bytes() const = 0;
  virtual int64_t activation_bytes() const = 0;
  // e.g. "NVIDIA H100 80GB HBM3 (device 0, driver 580.159, CUDA runtime 13.0), bf16
  // products on cuBLAS".
  virtual std::string Describe() const = 0;
};

// Whether this binary was built with CUDA (--config=cuda).
bool DeviceTrainingAvailable();

// MakeDeviceTrainer allocates `config`'s model on CUDA device 0 for microbatches of
// `micro_batch` sequences. Unimplemented in a build without CUDA; otherwise
// DeviceGptModel::Create's errors.
// `attention`: "auto", "materialized" or "flash" (DeviceAttention).
absl::StatusOr<std::unique_ptr<DeviceTrainer>> MakeDeviceTrainer(const GptConfig& config,
                                                                 int64_t micro_batch, bool bf16,
                                                                 const std::string& attention);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_DEVICE_TRAINER_H_

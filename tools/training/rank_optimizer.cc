#include "tools/training/rank_optimizer.h"

#include <memory>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "models/gpt/gpt_model.h"
#include "offload/device_adamw.h"

namespace loom {

LrSchedule ScheduleOf(const TrainJobOptions& options) {
  return LrSchedule{options.lr, options.lr_min.value_or(options.lr), options.warmup_steps,
                    options.steps};
}

AdamWHyper AdamWHyperAt(const TrainJobOptions& options, int64_t step) {
  AdamWHyper hyper;
  hyper.lr = ScheduleOf(options).LrAt(step);
  hyper.weight_decay = options.weight_decay;
  hyper.eps = options.adam_eps;
  hyper.step = step;
  return hyper;
}

DataParallelOptions DataParallelOptionsOf(const TrainJobOptions& options, DiskTier* disk,
                                          const std::string& disk_prefix) {
  DataParallelOptions dp;
  dp.stage = options.zero;
  dp.compute_dtype = options.dtype;
  dp.reshard = EffectiveReshard(options) == Reshard::kStep ? DataParallelOptions::Reshard::kStep
                                                           : DataParallelOptions::Reshard::kBlock;
  dp.defer_reduce_scatter = options.defer_reduce_scatter;
  dp.prefetch_depth = options.prefetch_depth;
  dp.max_live_gathered_bytes = options.param_budget;
  dp.persist_below_bytes = options.persist_below_bytes;
  // Any --offload runs ZeRO's AdamW on threads over host memory; at zero 0 only
  // cpu does (gpu steps on the device instead).
  dp.offload_optimizer = options.zero > 0 ? options.offload != OffloadKind::kNone
                                          : options.offload == OffloadKind::kCpu;
  dp.adamw_threads = options.adamw_threads;
  if (options.zero > 0) {
    dp.optimizer_disk = options.offload == OffloadKind::kNvme ? disk : nullptr;
    dp.param_disk = options.offload_params == OffloadKind::kNvme ? disk : nullptr;
    dp.grad_disk = options.offload_grads == OffloadKind::kNvme ? disk : nullptr;
  }
  dp.disk_prefix = disk_prefix;
  dp.overlap_grad_reduce = options.overlap_grad_reduce;
  dp.grad_bucket_bytes = options.grad_bucket_bytes;
  // One backward pass per microbatch (and stage model), each the gradient of a
  // loss already scaled by 1 / microbatches.
  dp.backward_passes_per_step = options.microbatches;
  if (options.zero == 0 && options.offload == OffloadKind::kGpu) {
    // --offload gpu: one GpuAdamWStep over the whole bucket, the moments on the
    // device. Bitwise the CPU step.
    dp.make_replicated_step =
        [](int64_t numel) -> absl::StatusOr<DataParallelOptions::ReplicatedStep> {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceAdamW> made, MakeDeviceAdamW(/*device=*/0, numel));
      std::shared_ptr<DeviceAdamW> device(std::move(made));
      return [device](const AdamWHyper& hyper, absl::Span<const absl::Span<float>> weights,
                      absl::Span<const float> gradient) {
        return device->Step(hyper, weights, gradient);
      };
    };
  }
  dp.timeout = kCollectiveTimeout;
  return dp;
}

absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> MakeRankOptimizer(
    const TrainJobOptions& options, GptStageModule& module, Communicator* dp, DiskTier* disk,
    const std::string& disk_prefix) {
  std::vector<BorrowingModel*> models;
  for (const int64_t stage : module.stages()) models.push_back(&module.model(stage));
  return MakeDataParallelOptimizer(models, dp, DataParallelOptionsOf(options, disk, disk_prefix));
}

}  // namespace loom

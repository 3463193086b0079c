#include "tools/training/offload_mapping.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "offload/offload_plan.h"

namespace loom {
namespace {

OffloadKind KindOf(OffloadDevice device) {
  switch (device) {
    case OffloadDevice::kNone: return OffloadKind::kNone;
    case OffloadDevice::kCpu: return OffloadKind::kCpu;
    case OffloadDevice::kNvme: return OffloadKind::kNvme;
  }
  return OffloadKind::kNone;
}

OffloadDevice DeviceOf(OffloadKind kind) {
  switch (kind) {
    case OffloadKind::kCpu: return OffloadDevice::kCpu;
    case OffloadKind::kNvme: return OffloadDevice::kNvme;
    case OffloadKind::kNone:
    case OffloadKind::kGpu: return OffloadDevice::kNone;
  }
  return OffloadDevice::kNone;
}

absl::Status Unsupported(absl::string_view key_value, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("--offload_config: ", key_value, ": ", why));
}

}  // namespace

absl::Status ApplyOffloadConfig(const OffloadConfig& config, TrainJobOptions* options) {
  if (config.compression != OffloadCompression::kNone) {
    return Unsupported(absl::StrCat("compression=", OffloadCompressionName(config.compression)),
                       "the ZeRO engine stores its shards uncompressed (compression=none)");
  }
  if (config.state_format != OptimizerStateFormat::kF32) {
    return Unsupported(absl::StrCat("state=", OptimizerStateFormatName(config.state_format)),
                       "the ZeRO engine's AdamW keeps f32 moments (state=f32)");
  }
  if (config.host_memory == HostMemoryKind::kPinned) {
    return Unsupported("pinned=pinned",
                       "this job computes on the CPU; nothing is copied to a device "
                       "(pinned=auto or pageable)");
  }
  // The library's own mapping (offload_plan.h) validates the config against this
  // machine and resolves what it leaves open (threads=0: the online cores).
  absl::StatusOr<OffloadPlan> plan = PlanOffload(config);
  if (!plan.ok()) {
    return absl::Status(plan.status().code(),
                        absl::StrCat("--offload_config: ", plan.status().message()));
  }
  options->offload = KindOf(config.optimizer_state);
  options->offload_params = KindOf(config.parameters);
  options->offload_grads = KindOf(config.gradients);
  options->nvme_dir = absl::StrJoin(config.nvme_directories, ":");
  options->prefetch_depth = config.prefetch_depth;
  options->adamw_threads = plan->adamw.threads;
  return absl::OkStatus();
}

OffloadConfig JobOffloadConfig(const TrainJobOptions& options) {
  OffloadConfig config;
  config.optimizer_state = DeviceOf(options.offload);
  config.parameters = DeviceOf(options.offload_params);
  config.gradients = DeviceOf(options.offload_grads);
  if (!options.nvme_dir.empty()) {
    config.nvme_directories = absl::StrSplit(options.nvme_dir, ':', absl::SkipEmpty());
  }
  config.prefetch_depth = options.prefetch_depth;
  config.cpu_threads = options.adamw_threads;
  return config;
}

}  // namespace loom

#include "tools/training/offload_mapping.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

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
  if (config.gradients == OffloadDevice::kNvme) {
    return Unsupported("grads=nvme",
                       "the ZeRO engine keeps its gradient shards in memory (grads=none or cpu)");
  }
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
  options->offload = KindOf(config.optimizer_state);
  options->offload_params = KindOf(config.parameters);
  options->nvme_dir = absl::StrJoin(config.nvme_directories, ":");
  options->prefetch_depth = config.prefetch_depth;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  options->adamw_threads = config.cpu_threads > 0 ? config.cpu_threads : (cores > 0 ? cores : 1);
  return absl::OkStatus();
}

OffloadConfig JobOffloadConfig(const TrainJobOptions& options) {
  OffloadConfig config;
  config.optimizer_state = DeviceOf(options.offload);
  config.parameters = DeviceOf(options.offload_params);
  // The ZeRO engine's gradient shards are in host memory, as everything is here.
  config.gradients = OffloadDevice::kNone;
  if (!options.nvme_dir.empty()) {
    config.nvme_directories = absl::StrSplit(options.nvme_dir, ':', absl::SkipEmpty());
  }
  config.prefetch_depth = options.prefetch_depth;
  config.cpu_threads = options.adamw_threads;
  return config;
}

}  // namespace loom

#include "offload/offload_plan.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "offload/adamw/blockwise8.h"

namespace loom {
namespace {

// Online cores, for threads=0; at least 1, at most AdamWStep's limit.
int OnlineCores() {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<int>(std::clamp<long>(cores, 1, 256));
}

bool AnyToNvme(const OffloadConfig& config) {
  return config.parameters == OffloadDevice::kNvme || config.gradients == OffloadDevice::kNvme ||
         config.optimizer_state == OffloadDevice::kNvme;
}

}  // namespace

CodecKind CodecKindFor(OffloadCompression compression) {
  switch (compression) {
    case OffloadCompression::kNone:
      return CodecKind::kRaw;
    case OffloadCompression::kFp16:
      return CodecKind::kFp16;
    case OffloadCompression::kBf16:
      return CodecKind::kBf16;
    case OffloadCompression::kInt8:
      return CodecKind::kInt8Blockwise;
    case OffloadCompression::kLz4:
      return CodecKind::kLz4;
    case OffloadCompression::kZstd:
      return CodecKind::kZstd;
  }
  return CodecKind::kRaw;
}

StateFormat StateFormatFor(OptimizerStateFormat format) {
  switch (format) {
    case OptimizerStateFormat::kF32:
      return StateFormat::kF32;
    case OptimizerStateFormat::kBf16:
      return StateFormat::kBF16;
    case OptimizerStateFormat::kBlockwise8:
      return StateFormat::kBlockwise8;
  }
  return StateFormat::kF32;
}

absl::StatusOr<OffloadPlan> PlanOffload(const OffloadConfig& config) {
  LOOM_RETURN_IF_ERROR(ValidateOffloadConfig(config));
  OffloadPlan plan;
  plan.host_pool.budget_bytes = config.host_budget_bytes;
  plan.host_pool.kind = config.host_memory;
  plan.stream.depth = config.prefetch_depth;
  plan.codec.kind = CodecKindFor(config.compression);
  plan.state_format = StateFormatFor(config.state_format);
  plan.state_block_size = config.state_block_size;
  plan.adamw.threads = config.cpu_threads == 0 ? OnlineCores() : config.cpu_threads;
  if (AnyToNvme(config)) {
    DiskTierOptions disk;
    disk.directories = config.nvme_directories;
    LOOM_RETURN_IF_ERROR(ValidateDiskTierOptions(disk));
    plan.disk = std::move(disk);
    plan.disk_budget_bytes = config.nvme_budget_bytes;
  }
  LOOM_RETURN_IF_ERROR(ValidateOptions(plan.codec));
  if (plan.state_format == StateFormat::kBlockwise8) {
    LOOM_RETURN_IF_ERROR(ValidateBlockSize(plan.state_block_size));
  }
  return plan;
}

}  // namespace loom

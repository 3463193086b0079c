// OffloadConfig: what a ZeRO-3 job keeps off the accelerator, where, and within
// which budgets. It replaces the prototypes' CPU-offload config, which had a boolean
// per tensor kind and no budgets, so a model too large for host memory was found out
// by the OOM killer.
//
// The spec string (flags, config files) lists key=value pairs; sizes take K/M/G/T
// suffixes (powers of 1024). Keys: params, grads, optimizer (none|cpu|nvme),
// host_budget, nvme_budget, nvme_dirs (':'-separated), prefetch, pinned
// (auto|pageable|pinned), compression (none|fp16|bf16|int8|lz4|zstd), state
// (f32|bf16|blockwise8), state_block, threads.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(OffloadConfig config, ParseOffloadConfig(
//       "optimizer=cpu,params=nvme,host_budget=16G,nvme_budget=200G,"
//       "nvme_dirs=/nvme0/swap:/nvme1/swap,prefetch=2,state=bf16"));
//   config.optimizer_state;                 // OffloadDevice::kCpu
//   LOOM_RETURN_IF_ERROR(ValidateOffloadConfig(config));
//   // A zero budget, a budget above physical memory or the directories' free space,
//   // missing directories, prefetch=0 ... are InvalidArgument naming the values:
//   //   "offload: prefetch depth 0 must be at least 1 (tensors fetched ahead of use)"
//   FormatOffloadConfig(config);            // the spec again, every key spelled out
#ifndef LOOM_OFFLOAD_OFFLOAD_CONFIG_H_
#define LOOM_OFFLOAD_OFFLOAD_CONFIG_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "offload/host_pool.h"

namespace loom {

// Where a kind of tensor lives between its uses.
enum class OffloadDevice { kNone, kCpu, kNvme };

// How offloaded parameters and gradients are stored (optimizer state has its own
// format below, applied inside the CPU optimizer).
enum class OffloadCompression { kNone, kFp16, kBf16, kInt8, kLz4, kZstd };

// How the CPU optimizer stores Adam's m and v.
enum class OptimizerStateFormat { kF32, kBf16, kBlockwise8 };

struct OffloadConfig {
  OffloadDevice parameters = OffloadDevice::kNone;
  OffloadDevice gradients = OffloadDevice::kNone;
  OffloadDevice optimizer_state = OffloadDevice::kNone;
  // Host memory for everything offloaded to the CPU, and the staging buffers of
  // the NVMe tier. Required (> 0) once anything is offloaded.
  size_t host_budget_bytes = 0;
  // Disk space the NVMe tier may use, summed over its directories.
  size_t nvme_budget_bytes = 0;
  // Where the NVMe tier stripes its files (existing, writable directories).
  std::vector<std::string> nvme_directories;
  // Tensors fetched ahead of their use (double buffering is 1 ahead: compute on k
  // while k+1 arrives). At least 1, at most 64.
  int prefetch_depth = 2;
  HostMemoryKind host_memory = HostMemoryKind::kAuto;
  OffloadCompression compression = OffloadCompression::kNone;
  OptimizerStateFormat state_format = OptimizerStateFormat::kF32;
  // Elements per quantization block for kBlockwise8: a power of two in [256, 2048].
  int state_block_size = 2048;
  // CPU optimizer threads, at most 256 (AdamWStep's limit); 0 means one per core.
  int cpu_threads = 0;
};

const char* OffloadDeviceName(OffloadDevice device);
const char* OffloadCompressionName(OffloadCompression compression);
const char* OptimizerStateFormatName(OptimizerStateFormat format);

// ValidateOffloadConfig checks `config` against itself and this machine (physical
// memory, the NVMe directories and their free space). InvalidArgument naming the
// key and its value for every problem it finds (all of them, one per line);
// FailedPrecondition when pinned memory is required but unavailable.
absl::Status ValidateOffloadConfig(const OffloadConfig& config);

// ParseOffloadConfig reads a spec string (see the top of this file). Unknown keys,
// bad values and repeated keys are InvalidArgument naming them. It does not
// validate: call ValidateOffloadConfig.
absl::StatusOr<OffloadConfig> ParseOffloadConfig(absl::string_view spec);

// FormatOffloadConfig writes the spec string ParseOffloadConfig reads back equal.
std::string FormatOffloadConfig(const OffloadConfig& config);


}  // namespace loom

#endif  // LOOM_OFFLOAD_OFFLOAD_CONFIG_H_

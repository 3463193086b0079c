// The training job's offload settings as the offload library's OffloadConfig
// (offload/offload_config.h): what a ZeRO-3 rank keeps off the compute path, where,
// and within which budgets. `train --offload_config=SPEC` takes the library's spec
// string instead of the separate flags; ApplyOffloadConfig maps it onto the job's
// options, and JobOffloadConfig maps the options back (the spec the job prints).
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(OffloadConfig config, ParseOffloadConfig(
//       "optimizer=nvme,params=nvme,host_budget=8G,nvme_dirs=/nvme0/swap,prefetch=1"));
//   LOOM_RETURN_IF_ERROR(ApplyOffloadConfig(config, &options));  // validates it too
//   options.offload;          // OffloadKind::kNvme (AdamW's state on disk)
//   options.offload_params;   // OffloadKind::kNvme (zero 3's parameter shards)
//   options.prefetch_depth;   // 1
//   // What the job cannot do is InvalidArgument naming the key, e.g.
//   //   "--offload_config: compression=lz4: the ZeRO engine stores its shards
//   //    uncompressed (compression=none)"
#ifndef LOOM_TOOLS_TRAINING_OFFLOAD_MAPPING_H_
#define LOOM_TOOLS_TRAINING_OFFLOAD_MAPPING_H_

#include "absl/status/status.h"
#include "offload/offload_config.h"
#include "tools/training/train_options.h"

namespace loom {

// ApplyOffloadConfig sets options->offload (from optimizer), offload_params (from
// params), offload_grads (from grads: none, cpu or nvme), nvme_dir, prefetch_depth
// and adamw_threads (cpu_threads; 0: one per online core) from `config`.
// InvalidArgument naming the key for what the job does not do: compression other
// than none, an optimizer state format other than f32, pinned memory (this job
// computes on the CPU). Otherwise the config goes
// through the library's PlanOffload (offload_plan.h), which validates it against
// this machine (ValidateOffloadConfig) and each part's options; its errors come
// back prefixed "--offload_config: ".
absl::Status ApplyOffloadConfig(const OffloadConfig& config, TrainJobOptions* options);

// JobOffloadConfig: the options as an OffloadConfig (--offload gpu, AdamW on the
// device, is optimizer=none: nothing is offloaded from it). Budgets stay 0.
OffloadConfig JobOffloadConfig(const TrainJobOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_OFFLOAD_MAPPING_H_

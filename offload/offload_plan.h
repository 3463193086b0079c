// OffloadPlan: an OffloadConfig turned into the options of the parts that carry it
// out: the host pool, the prefetch engine and stream, the codec for offloaded
// parameters and gradients, the CPU AdamW state and step, and the disk tier. One
// place decides how a config key maps onto each part, so a ZeRO-3 job (or a test)
// never repeats that mapping, and a config key no part honours cannot slip by.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(OffloadConfig config, ParseOffloadConfig(
//       "optimizer=cpu,params=nvme,host_budget=16G,nvme_budget=200G,"
//       "nvme_dirs=/nvme0/swap:/nvme1/swap,prefetch=2,compression=bf16,state=blockwise8"));
//   LOOM_ASSIGN_OR_RETURN(OffloadPlan plan, PlanOffload(config));  // validates first
//   LOOM_ASSIGN_OR_RETURN(auto pool, HostMemoryPool::Create(plan.host_pool));
//   LOOM_ASSIGN_OR_RETURN(auto engine, PrefetchEngine::Create(plan.engine));
//   LOOM_ASSIGN_OR_RETURN(AdamWState state,
//                         AdamWState::Create(count, plan.state_format, plan.state_block_size));
//   if (plan.disk.has_value()) {
//     LOOM_ASSIGN_OR_RETURN(auto tier, DiskTier::Create(*plan.disk));
//   }
//   // plan.codec: EncodeTensor's options for parameters and gradients (kBf16 here).
#ifndef LOOM_OFFLOAD_OFFLOAD_PLAN_H_
#define LOOM_OFFLOAD_OFFLOAD_PLAN_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/codecs/codec.h"
#include "offload/disk/disk_tier.h"
#include "offload/host_pool.h"
#include "offload/offload_config.h"
#include "offload/prefetch_engine.h"
#include "offload/prefetch_stream.h"

namespace loom {

struct OffloadPlan {
  HostPoolOptions host_pool;      // budget = host_budget, kind = pinned
  PrefetchEngineOptions engine;   // workers: 2 (one keeps the disk busy while one decodes)
  PrefetchStreamOptions stream;   // depth = prefetch
  CodecOptions codec;             // compression; kRaw for none
  StateFormat state_format = StateFormat::kF32;  // state
  int64_t state_block_size = AdamWState::kDefaultBlockSize;  // state_block
  AdamWOptions adamw;             // threads (0: one per online core)
  std::optional<DiskTierOptions> disk;  // set when anything goes to nvme
  size_t disk_budget_bytes = 0;   // nvme_budget: the caller keeps the tier under it
};

// PlanOffload validates `config` (ValidateOffloadConfig: every problem, with its
// value) and maps it onto the parts' options; each part's own validation of the
// result is checked too, so a plan that is returned is one every part accepts.
absl::StatusOr<OffloadPlan> PlanOffload(const OffloadConfig& config);

// The codec kind that stores tensors under `compression` (none is kRaw: the f32
// bytes, still checksummed); and the AdamW state format for `format`.
CodecKind CodecKindFor(OffloadCompression compression);
StateFormat StateFormatFor(OptimizerStateFormat format);

}  // namespace loom

#endif  // LOOM_OFFLOAD_OFFLOAD_PLAN_H_

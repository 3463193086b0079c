#include "tools/training/reference.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "models/gpt/gpt_parameter.h"
#include "tools/training/train_job.h"

namespace loom {

absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary) {
  TrainJobOptions one = options;
  one.dp = 1;
  one.pp = 1;
  one.tp = 1;
  // Plain one-rank training (bf16 keeps its f32 master beside the weights); the
  // optimizer state stays in memory.
  one.zero = 0;
  one.offload = OffloadKind::kNone;
  one.reshard = Reshard::kStep;  // nothing is sharded on one rank
  one.device = ComputeDevice::kCpu;  // the CPU run a --device cuda job is held to
  one.defer_reduce_scatter = false;
  one.nvme_dir.clear();
  one.schedule = PipelineScheduleKind::kGPipe;
  // From scratch, saving nothing: the reference of the whole run.
  one.checkpoint_dir.clear();
  one.checkpoint_every = 0;
  one.resume_dir.clear();
  one.testing_halt_after_step = 0;
  // The same global batch: dp ranks' microbatches, one after another.
  one.microbatches = options.microbatches * options.dp;
  LOOM_ASSIGN_OR_RETURN(const TrainSummary reference, RunTrainJob(one, nullptr));
  std::map<std::string, const std::vector<float>*> full;
  const RankParameters& ref = reference.final_params[0];
  ReferenceComparison out;
  out.reference_final_loss = reference.final_loss;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    full[ref.params[i].name] = &ref.values[i];
    for (const float v : ref.values[i]) {
      out.max_abs_param = std::max(out.max_abs_param, std::fabs(double{v}));
    }
  }
  // Each rank's tp shard against the same shard of the reference.
  for (size_t r = 0; r < summary.final_params.size(); ++r) {
    const RankParameters& rank = summary.final_params[r];
    for (size_t i = 0; i < rank.params.size(); ++i) {
      const GptParameter& meta = rank.params[i];
      auto it = full.find(meta.name);
      if (it == full.end()) {
        return absl::InternalError(absl::StrCat("parameter ", meta.name, " of rank ", r,
                                                " is not in the one-rank reference"));
      }
      LOOM_ASSIGN_OR_RETURN(std::vector<float> shard,
                            ShardOf(meta, *it->second, options.tp, rank.tp_rank));
      const std::vector<float>& values = rank.values[i];
      if (shard.size() != values.size()) {
        return absl::InternalError(absl::StrCat("parameter ", meta.name, " of rank ", r, " has ",
                                                values.size(), " elements, its reference shard ",
                                                shard.size()));
      }
      for (size_t k = 0; k < values.size(); ++k) {
        out.max_abs_param_diff =
            std::max(out.max_abs_param_diff, std::fabs(double{values[k]} - double{shard[k]}));
      }
    }
  }
  return out;
}

}  // namespace loom

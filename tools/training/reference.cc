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

TrainJobOptions ReferenceOptions(const TrainJobOptions& options) {
  // A fresh set of options with only what defines the mathematics copied in, so
  // that a placement, memory or speed option added to the job later can never
  // make the reference a different (or an invalid) run.
  TrainJobOptions one;
  one.model = options.model;
  one.dtype = options.dtype;  // bf16: plain one-rank training, its f32 master beside
  one.steps = options.steps;
  one.micro_batch = options.micro_batch;
  // The same global batch: dp ranks' microbatches, one after another.
  one.microbatches = options.microbatches * options.dp;
  one.lr = options.lr;
  one.warmup_steps = options.warmup_steps;
  one.lr_min = options.lr_min;
  one.weight_decay = options.weight_decay;
  one.adam_eps = options.adam_eps;
  one.clip_grad_norm = options.clip_grad_norm;
  one.data_seed = options.data_seed;
  one.markov_branching = options.markov_branching;
  one.data = options.data;
  one.eval_fraction = options.eval_fraction;
  one.eval_every = options.eval_every;
  // One rank, plain data parallelism (nothing is sharded on one rank), the
  // optimizer state in memory, on the CPU (what a --device cuda job is held to),
  // from scratch and saving nothing: the reference of the whole run.
  one.dp = 1;
  one.pp = 1;
  one.tp = 1;
  one.zero = 0;
  one.offload = OffloadKind::kNone;
  one.offload_params = OffloadKind::kNone;
  one.offload_grads = OffloadKind::kNone;
  one.reshard = Reshard::kStep;
  one.schedule = PipelineScheduleKind::kGPipe;
  one.device = ComputeDevice::kCpu;
  return one;
}

absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary) {
  const TrainJobOptions one = ReferenceOptions(options);
  LOOM_ASSIGN_OR_RETURN(const TrainSummary reference, RunTrainJob(one, nullptr));
  std::map<std::string, const std::vector<float>*> full;
  const RankParameters& ref = reference.final_params[0];
  ReferenceComparison out;
  out.reference_final_loss = reference.final_loss;
  for (size_t i = 0; i < ref.params.size(); ++i) {
    full[ref.params[i].name] = &ref.values[i];
    for (const float v : ref.values[i]) {
      out.max_abs_param = std::max(out.max_abs_param, std::fabs(static_cast<double>(v)));
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
            std::max(out.max_abs_param_diff,
                     std::fabs(static_cast<double>(values[k]) - static_cast<double>(shard[k])));
      }
    }
  }
  return out;
}

}  // namespace loom

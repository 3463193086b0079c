// PlanTrainJob: `train --plan=N`. The planner (tools/planner) ranks the ways to run
// this model on N ranks of this CPU (measured on the spot, fitted to one-rank runs of
// the job where the caller has them), and the job takes the first configuration it
// can run: dp, tp, pp, cp, ZeRO stage, schedule, microbatches and their size, and
// recompute; everything else stays as the flags say.
//
// Example:
//   // calibrations: ParseJobSummary of one-rank `train --summary_json` runs
//   LOOM_ASSIGN_OR_RETURN(PlannedJob job, PlanTrainJob(options, /*world=*/2,
//                                                       /*global_batch=*/16, calibrations));
//   job.line;   // "plan: dp=2 tp=1 pp=1 cp=1 zero=1 1f1b microbatches=8 micro_batch=1
//               //  recompute=none, ranked first of 98 configurations for 2 ranks of this
//               //  CPU by tools/planner with constants fitted to a one-rank run
//               //  (predicted 0.216 s a step, 9486 tokens/s)" (train's 4-layer,
//               //  hidden-256 model)
//   job.options.dp;   // 2
#ifndef LOOM_TOOLS_TRAINING_JOB_PLAN_H_
#define LOOM_TOOLS_TRAINING_JOB_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/planner/this_cpu.h"
#include "tools/training/train_options.h"

namespace loom {

struct PlannedJob {
  TrainJobOptions options;
  std::string line;  // what the job prints first
};

// PlanTrainJob returns `base` with the planner's choice. InvalidArgument for a world
// or batch below 1, the planner's errors (the model fits nowhere, heads not
// splitting), or when none of its 20 best configurations passes ValidateTrainJob.
absl::StatusOr<PlannedJob> PlanTrainJob(const TrainJobOptions& base, int64_t world,
                                        int64_t global_batch,
                                        const std::vector<planner::JobRun>& calibrations);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_PLAN_H_

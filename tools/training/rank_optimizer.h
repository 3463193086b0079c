// The job's optimizer: zero3's DataParallelOptimizer (zero3/data_parallel.h) over
// the stage models a rank holds, configured from the job's options. This file only
// maps options; the optimizer, its gradient reduction and its state live in zero3:
//   - zero 0: plain data parallelism (ReplicatedStore, each unit all-reduced beside
//     the backward with --overlap_grad_reduce);
//   - zero 1, 2, 3: Zero3Engine per stage model. --reshard block gathers each unit
//     before use and releases it after; --reshard step gathers the whole stage once
//     per step. --offload cpu runs AdamW on threads over host memory; --offload nvme
//     (and --offload_params / --offload_grads nvme) puts that state in `disk`;
//     --offload gpu (zero 0, f32) steps on the device.
//
// Example (one rank; the job's rank loop):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelOptimizer> optimizer,
//       MakeRankOptimizer(options, *module, dp_comm, disk, "train.s0.t1"));
//   for (int64_t step = 1; step <= steps; ++step) {
//     ...forward and backward: the models lease their units from the optimizer...
//     LOOM_RETURN_IF_ERROR(optimizer->ReduceGradients());
//     LOOM_RETURN_IF_ERROR(optimizer->Step(AdamWHyperAt(options, step)));
//   }
#ifndef LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_
#define LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_stage_module.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/lr_schedule.h"
#include "tools/training/train_options.h"
#include "zero3/data_parallel.h"

namespace loom {

// kCollectiveTimeout: how long the job's collectives may wait.
inline constexpr absl::Duration kCollectiveTimeout = absl::Seconds(120);

// DataParallelOptionsOf: the library's options for the job's --zero, --reshard,
// --dtype, --offload*, --persist_below, --param_budget, --prefetch_depth,
// --overlap_grad_reduce and --microbatches; `disk` and `disk_prefix` place the
// NVMe state.
DataParallelOptions DataParallelOptionsOf(const TrainJobOptions& options, DiskTier* disk,
                                          const std::string& disk_prefix);

// MakeRankOptimizer: the optimizer over every stage model of `module` (their
// parameters stage after stage, as Parameters() lists them), which borrow their
// weights from it from now on. `dp` is this rank's communicator over the ranks
// holding the same parameters, dp x cp (ParameterGroupSize ranks), not owned,
// driven by the optimizer alone.
absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> MakeRankOptimizer(
    const TrainJobOptions& options, GptStageModule& module, Communicator* dp, DiskTier* disk,
    const std::string& disk_prefix);

// ScheduleOf: the job's learning-rate schedule (constant `lr` unless warm-up or
// lr_min ask otherwise).
LrSchedule ScheduleOf(const TrainJobOptions& options);

// AdamWHyperAt: the AdamW hyperparameters of step `step` (from 1).
AdamWHyper AdamWHyperAt(const TrainJobOptions& options, int64_t step);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_

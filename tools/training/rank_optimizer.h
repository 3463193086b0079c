// RankOptimizer: one rank's optimizer in the training job, over the parameters of
// its pipeline stage(s) (tp shards). Each stage model borrows its weights
// (GptModel::UseParameterSource) from one library source, made here:
//   - zero 0: zero3/ReplicatedStore, plain data parallelism (the whole model and
//     AdamW state on every rank, gradients averaged by one all-reduce of a bucket);
//   - zero 1, 2, 3: zero3/Zero3Engine, which shards the AdamW state (also the
//     gradients, also the parameters) over dp. --reshard block gathers each block
//     before use and releases it after; --reshard step gathers the whole stage once
//     per step. With offload cpu the optimizer runs as offload's CPU AdamW on
//     threads, with offload nvme its state (and with offload_params nvme the
//     parameter shards) lives in a DiskTier.
//
// Example (one rank; the job's rank loop):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<RankOptimizer> optimizer,
//       MakeRankOptimizer(options, *module, dp_comm, disk, "train.s0.t1"));
//   for (int64_t step = 1; step <= steps; ++step) {
//     ...forward and backward: the models acquire their weights from the sources...
//     LOOM_RETURN_IF_ERROR(optimizer->ReduceGradients());
//     LOOM_RETURN_IF_ERROR(optimizer->ApplyStep(step, /*grad_scale=*/1.0f));
//   }
#ifndef LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_
#define LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "checkpoint/optimizer_state.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/gpt_stage_module.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/lr_schedule.h"
#include "tools/training/train_options.h"

namespace loom {

class RankOptimizer {
 public:
  virtual ~RankOptimizer() = default;
  // After the backward: ReduceGradients averages the gradients over dp;
  // GradSquaredNorm (optional, for clipping) is this rank's share of the averaged
  // gradient's squared L2 norm, each parameter's elements weighted by
  // param_weight[k] (0 leaves out a tp-replicated parameter on tp ranks other than
  // 0), elements every dp rank holds counted on dp rank 0 only, so that its sum over
  // the whole job is every element of the model once; ApplyStep runs AdamW step
  // `step` (from 1) on the averaged gradient times `grad_scale`.
  virtual absl::Status ReduceGradients() = 0;
  virtual absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const = 0;
  virtual absl::Status ApplyStep(int64_t step, float grad_scale) = 0;
  // Bytes of model state this rank holds (see TrainSummary), the ZeRO engine's part
  // of it, and the part on disk.
  virtual int64_t StateBytes() const = 0;
  virtual int64_t ShardedBytes() const = 0;
  virtual int64_t DiskBytes() const { return 0; }
  // The part of StateBytes that is communication buffers (ZeRO's gathered units
  // and gradient buckets).
  virtual int64_t BufferBytes() const { return 0; }
  // WaitSeconds: the seconds this rank's thread has waited, since the optimizer
  // was made, for the ZeRO engine's communication thread (a gathered unit, a
  // gradient buffer); 0 without one.
  virtual double WaitSeconds() const { return 0; }
  // The elements the ZeRO engines gather and reduce (their padded buckets) and
  // keep whole (persistent parameters); 0 at zero 0.
  virtual int64_t BucketNumel() const { return 0; }
  virtual int64_t PersistentNumel() const { return 0; }
  // The engines' units (buckets), and since the optimizer was made the units its
  // passes took over still gathered from the pass before, with their padded
  // elements (Zero3Stats::gathers_kept, gathered_numel_kept).
  virtual int64_t Units() const { return 0; }
  virtual int64_t KeptUnits() const { return 0; }
  virtual int64_t KeptNumel() const { return 0; }
  // EstimatedStateBytes: topology/memory_estimate's prediction of StateBytes() +
  // DiskBytes() at the worst moment of a step, from this optimizer's configuration
  // (its parameter count, ZeRO stage, precision, buffer bounds and what the model
  // keeps itself), not from what it holds.
  virtual absl::StatusOr<int64_t> EstimatedStateBytes() const = 0;
  // GatherWeights returns this rank's current weights, one vector per parameter
  // (its tp shard, whole over dp; the compute copy the models use), which the
  // models do not hold. Collective over dp; outside a step.
  virtual absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() = 0;

  // ReadState returns the state this rank holds, as slices that cover every
  // element of its parameters' shards it owns (zero 1-3: its dp range of each;
  // zero 0: everything). Outside a step. With offload nvme it reads the disk.
  virtual absl::StatusOr<std::vector<StateSlice>> ReadState() const = 0;
  // WriteState replaces this rank's state with what `source` gives for the ranges
  // it owns; the weights the models compute with follow. Every dp rank calls it
  // (stages 1 and 2 gather the whole parameters again at the next pass).
  virtual absl::Status WriteState(const StateSource& source) = 0;
};

// MakeRankOptimizer: the optimizer `options.zero` and `options.reshard` ask for,
// a source per stage model of `module` over that model's parameters; the models
// borrow their weights from the sources from now on (their own are freed). The
// parameters are the module's, stage after stage, as Parameters() lists them. `dp`
// is this rank's communicator over the ranks holding the same parameters, dp x cp
// (ParameterGroupSize ranks; "dp" elsewhere in this file means this group), not
// owned, driven by the sources alone; `disk` and `disk_prefix` place the state with
// offload nvme.
absl::StatusOr<std::unique_ptr<RankOptimizer>> MakeRankOptimizer(const TrainJobOptions& options,
                                                                 GptStageModule& module,
                                                                 Communicator* dp, DiskTier* disk,
                                                                 const std::string& disk_prefix);

// ScheduleOf: the job's learning-rate schedule (constant `lr` unless warm-up or
// lr_min ask otherwise).
LrSchedule ScheduleOf(const TrainJobOptions& options);

// AdamWHyperAt: the AdamW hyperparameters of step `step` (from 1).
AdamWHyper AdamWHyperAt(const TrainJobOptions& options, int64_t step);

// kCollectiveTimeout: how long the job's collectives may wait.
inline constexpr absl::Duration kCollectiveTimeout = absl::Seconds(120);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_RANK_OPTIMIZER_H_

// RankOptimizer: one rank's optimizer in the training job, over the parameters of
// its pipeline stage(s) (tp shards, owned by the stage's layers):
//   - zero 0: plain data parallelism. Gradients are averaged over dp by one
//     all-reduce of the flattened gradients (a bucket, as DDP's) and every rank
//     steps the whole AdamW state (with an f32 master beside bf16 weights);
//   - zero 1, 2, 3: zero3/Zero3Engine shards the AdamW state (also the gradients,
//     also the parameters) over dp; with offload cpu the optimizer runs as offload's
//     CPU AdamW on threads, with offload nvme its state lives in a DiskTier.
//
// Example (one rank; the job's rank loop):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<RankOptimizer> optimizer,
//       MakeRankOptimizer(options, module->Parameters(), dp_comm, disk, "train.s0.t1"));
//   for (int64_t step = 1; step <= steps; ++step) {
//     LOOM_RETURN_IF_ERROR(optimizer->BeforeStep());     // zero 3: gathers the weights
//     ...forward and backward into the parameters' gradients...
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
#include "collectives/communicator.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/gpt_stage_module.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/lr_schedule.h"
#include "tools/training/train_options.h"

namespace loom {

// StateSlice: the optimizer state of elements [begin, end) of one parameter's tp
// shard (parameter `param` of the list the optimizer was made with): the f32
// master weights and AdamW's two moments, what a checkpoint must keep to continue
// bitwise (the AdamW step count is the job's step). `dp_replicated`: every dp rank
// holds the same slice (zero 0; ZeRO's persistent parameters), so one saves it.
struct StateSlice {
  int param = 0;
  int64_t begin = 0, end = 0;
  bool dp_replicated = false;
  std::vector<float> master, exp_avg, exp_avg_sq;
};

// StateSource fills the three fields of elements [begin, end) of parameter
// `param`'s tp shard (each span has end - begin elements), e.g. from a checkpoint.
using StateSource =
    std::function<absl::Status(int param, int64_t begin, int64_t end, absl::Span<float> master,
                               absl::Span<float> exp_avg, absl::Span<float> exp_avg_sq)>;

class RankOptimizer {
 public:
  virtual ~RankOptimizer() = default;
  // BeforeStep makes the model's weights current (zero 3: gathers them).
  virtual absl::Status BeforeStep() = 0;
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
  // (its tp shard, whole over dp), for a model that borrows them (block reshard),
  // whose Parameters() hold none. Collective over dp; outside a step.
  virtual absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() {
    return absl::UnimplementedError("GatherWeights: the model holds its weights");
  }

  // ReadState returns the state this rank holds, as slices that cover every
  // element of its parameters' shards it owns (zero 1-3: its dp range of each;
  // zero 0: everything). Outside a step. With offload nvme it reads the disk.
  virtual absl::StatusOr<std::vector<StateSlice>> ReadState() const = 0;
  // WriteState replaces this rank's state with what `source` gives for the ranges
  // it owns; the weights the layers compute with follow (zero 0 at once, ZeRO at
  // the next BeforeStep). Collective over dp only at the next BeforeStep.
  virtual absl::Status WriteState(const StateSource& source) = 0;
};

// GradientBinder moves the model's gradient accumulators into `memory` (the
// parameters' gradients back to back, in list order; GptStageModule::BindGradients)
// and returns the parameters with their new gradient views.
using GradientBinder =
    std::function<absl::StatusOr<std::vector<GptParameter>>(absl::Span<float> memory)>;

// MakeRankOptimizer: the optimizer `options.zero` asks for over `params` (the
// stage's parameters, whose spans stay valid while it lives). `dp` is this rank's
// data-parallel communicator (not owned, driven by the optimizer alone); `disk` and
// `disk_prefix` place the state with offload nvme. With `bind_gradients`, zero 0
// has the model accumulate its gradients in the all-reduce bucket itself
// (communication memory from dp), so averaging them copies nothing first; the
// caller takes the parameters' views again afterwards.
absl::StatusOr<std::unique_ptr<RankOptimizer>> MakeRankOptimizer(
    const TrainJobOptions& options, std::vector<GptParameter> params, Communicator* dp,
    DiskTier* disk, const std::string& disk_prefix, const GradientBinder& bind_gradients = nullptr);

// MakeBlockOptimizer: --zero 3 --reshard block. An engine per stage of `module`,
// each over its stage model's parameters, each block one bucket; the models
// borrow their weights from the engines from now on (their own are freed), the
// gradients going to the engines per backward, or (defer_reduce_scatter) staying
// in the models until ReduceGradients. The parameters are the module's, stage
// after stage, as Parameters() lists them.
absl::StatusOr<std::unique_ptr<RankOptimizer>> MakeBlockOptimizer(const TrainJobOptions& options,
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

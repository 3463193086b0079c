// DataParallelOptimizer: data parallelism at any ZeRO stage for models that borrow
// their weights (core/borrowing_model.h), one object per rank over the models it
// holds (a rank's pipeline stages, or just one model). The stage is an option, not
// a different API:
//   - stage 0, plain data parallelism (DDP): every rank keeps the whole model and
//     AdamW state in a zero3/ReplicatedStore; each unit's gradient is all-reduced
//     (averaged over dp) as soon as the step's last backward pass has given it,
//     beside the rest of the backward (a GradientAllReducer thread shared by the
//     rank's models), or once after it with overlap_grad_reduce off;
//   - stages 1, 2, 3 (ZeRO): a zero3/Zero3Engine per model shards the AdamW state
//     (1), also the gradients (2), also the parameters (3) over dp; reshard kBlock
//     gathers each unit before use and releases it after (FSDP's reshard after
//     forward), kStep gathers the whole model at the step's first forward and keeps
//     it until Step, the gradients in the model until one reduction at the end.
// Gradients of a step's backward passes are summed (scale each microbatch's loss
// by 1 / microbatches), then averaged over dp. Every model's units are the model's
// own (BorrowingModel::Units): a unit is gathered, released, reduced and kept whole
// or sharded as one.
//
// Example (each of 4 data-parallel ranks on its own thread or process):
//   DataParallelOptions options;
//   options.stage = 3;
//   std::vector<BorrowingModel*> models = {&model};
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DataParallelOptimizer> optimizer,
//                         MakeDataParallelOptimizer(models, dp_comm, options));
//   for (int64_t step = 1; step <= steps; ++step) {
//     ...model forward and backward: the model leases its units from the optimizer...
//     LOOM_RETURN_IF_ERROR(optimizer->ReduceGradients());
//     AdamWHyper hyper;
//     hyper.lr = 1e-3f;
//     hyper.step = step;
//     LOOM_RETURN_IF_ERROR(optimizer->Step(hyper));
//   }
//   options.stage = 4;   // MakeDataParallelOptimizer: InvalidArgument "stage 4 is not 0..3"
#ifndef LOOM_ZERO3_DATA_PARALLEL_H_
#define LOOM_ZERO3_DATA_PARALLEL_H_

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
#include "core/borrowing_model.h"
#include "core/dtype.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/disk/disk_tier.h"

namespace loom {

struct DataParallelOptions {
  int stage = 3;  // 0 (plain data parallelism) to 3
  // kF32, or kBF16: bf16 compute (and, at stages 1-3, bf16 traffic) with an f32
  // master for AdamW.
  DType compute_dtype = DType::kF32;

  // Stages 1-3.
  enum class Reshard { kBlock, kStep };
  Reshard reshard = Reshard::kBlock;
  // kBlock: the gradients stay in the model until ReduceGradients, one reduction
  // per step (the bits of plain data parallelism), instead of one per backward.
  bool defer_reduce_scatter = false;
  int prefetch_depth = 2;                // units gathered ahead of the one in use
  int64_t max_live_gathered_bytes = 0;   // 0: only prefetch_depth bounds them
  // A unit of fewer f32 bytes than this stays whole on every rank (0: none).
  int64_t persist_below_bytes = 0;
  // AdamW on adamw_threads threads over host memory (ZeRO-Offload).
  bool offload_optimizer = false;
  int adamw_threads = 1;
  // NVMe homes (ZeRO-Infinity), not owned: the optimizer state, the parameter
  // shards (stage 3) and the gradient shards (stages 2, 3); each model's tensors
  // are named "<disk_prefix>.m<model index>...".
  DiskTier* optimizer_disk = nullptr;
  DiskTier* param_disk = nullptr;
  DiskTier* grad_disk = nullptr;
  std::string disk_prefix = "dp";

  // Stage 0: overlap each unit's all-reduce with the backward (DDP); and how many
  // backward passes (microbatches) a step has, which tells the overlap when a
  // unit's gradient is final.
  bool overlap_grad_reduce = true;
  int backward_passes_per_step = 1;
  // Stage 0 with overlap: a unit's gradient is all-reduced in buckets of at most
  // this many bytes, cut from its last parameter backwards (a larger parameter
  // alone; 0: one bucket per unit), so that a block's first gradients travel while
  // the rest of its backward runs (DDP's bucket_cap_mb). 1 MiB: one large matrix of
  // a transformer block a bucket, the small vectors beside it together.
  int64_t grad_bucket_bytes = int64_t{1} << 20;
  // Stage 0: a step to run in place of the CPU AdamW (a device AdamW), made once
  // for the model's element count; null: the CPU AdamW (on adamw_threads with
  // offload_optimizer).
  using ReplicatedStep =
      std::function<absl::Status(const AdamWHyper& hyper, absl::Span<const absl::Span<float>> weights,
                                 absl::Span<const float> gradient)>;
  std::function<absl::StatusOr<ReplicatedStep>(int64_t numel)> make_replicated_step;

  // How long any collective wait may take.
  absl::Duration timeout = absl::Seconds(120);
};

class DataParallelOptimizer {
 public:
  virtual ~DataParallelOptimizer() = default;

  // After the step's backward passes: ReduceGradients averages the gradients over
  // dp (optional before Step, which reduces what was not; at stage 0 with overlap,
  // leaving it to Step lets AdamW run on the units already reduced while the last
  // ones are in flight); GradSquaredNorm (optional, for clipping, after
  // ReduceGradients) is this rank's share of the
  // averaged gradient's squared L2 norm, each parameter's elements weighted by
  // param_weight[k] (one per parameter of every model, in order; 0 leaves out a
  // tensor-parallel replica), elements every dp rank holds counted on dp rank 0
  // only, so that its sum over the job is every element once; Step runs AdamW
  // (hyper.step from 1) on the averaged gradient times hyper.grad_scale.
  virtual absl::Status ReduceGradients() = 0;
  virtual absl::StatusOr<double> GradSquaredNorm(absl::Span<const float> param_weight) const = 0;
  virtual absl::Status Step(const AdamWHyper& hyper) = 0;

  // Bytes of model state this rank holds (sharded state, communication buffers
  // and what the models keep), the ZeRO engines' part of it, the part on disk, and
  // the communication buffers (gathered units and gradient buckets).
  virtual int64_t StateBytes() const = 0;
  virtual int64_t ShardedBytes() const = 0;
  virtual int64_t DiskBytes() const { return 0; }
  virtual int64_t BufferBytes() const { return 0; }
  // Seconds this rank's thread waited for the engines' communication threads (a
  // gathered unit, a gradient buffer) since the optimizer was made; 0 at stage 0.
  virtual double WaitSeconds() const { return 0; }
  // Seconds Step has waited for gradient communication since the optimizer was
  // made: stage 0 with overlap, called without ReduceGradients, steps each unit as
  // its all-reduce finishes and waits only for those still running; the rest of
  // Step is the optimizer's own work. 0 where Step does not wait.
  virtual double StepCommSeconds() const { return 0; }
  // Elements the engines gather and reduce (padded buckets) and keep whole
  // (persistent units); 0 at stage 0.
  virtual int64_t BucketNumel() const { return 0; }
  virtual int64_t PersistentNumel() const { return 0; }
  // The units (stage 0: the buckets the gradient is all-reduced by, one call
  // each), and since the optimizer was made the units a pass took over still
  // gathered from the pass before, with their padded elements.
  virtual int64_t Units() const { return 0; }
  virtual int64_t KeptUnits() const { return 0; }
  virtual int64_t KeptNumel() const { return 0; }
  // EstimatedStateBytes: topology/memory_estimate's prediction of StateBytes() +
  // DiskBytes() at the worst moment of a step, from the configuration alone.
  virtual absl::StatusOr<int64_t> EstimatedStateBytes() const = 0;
  // GatherWeights: this rank's current weights, one vector per parameter (whole
  // over dp; the compute copy the models use). Collective over dp; outside a step.
  virtual absl::StatusOr<std::vector<std::vector<float>>> GatherWeights() = 0;
  // ReadState: the optimizer state this rank owns (stages 1-3: its dp range of
  // each parameter; stage 0: everything), as checkpoint slices. WriteState
  // replaces it from `source`; every dp rank calls it. Outside a step.
  virtual absl::StatusOr<std::vector<StateSlice>> ReadState() const = 0;
  virtual absl::Status WriteState(const StateSource& source) = 0;
};

// MakeDataParallelOptimizer makes the optimizer `options` asks for over `models`
// (one source each; their parameters are numbered model after model), which borrow
// their weights from it from now on. `dp` (not owned; it must outlive the
// optimizer and be driven by nobody else) holds the ranks that keep the same
// parameters. InvalidArgument naming the option for bad options, no models, or a
// null communicator.
absl::StatusOr<std::unique_ptr<DataParallelOptimizer>> MakeDataParallelOptimizer(
    absl::Span<BorrowingModel* const> models, Communicator* dp,
    const DataParallelOptions& options);

}  // namespace loom

#endif  // LOOM_ZERO3_DATA_PARALLEL_H_

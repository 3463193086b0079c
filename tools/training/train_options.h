// The training job's options and what it reports: TrainJobOptions (what
// //tools:train's flags set), StepReport (one line per step) and TrainSummary (the
// run). See tools/training/train_job.h for the job itself.
#ifndef LOOM_TOOLS_TRAINING_TRAIN_OPTIONS_H_
#define LOOM_TOOLS_TRAINING_TRAIN_OPTIONS_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/cost_model.h"
#include "core/dtype.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_parameter.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "topology/parallel_config.h"

namespace loom {

// Where AdamW runs: kNone inline on the rank's thread, kCpu on `adamw_threads` CPU
// threads, kNvme with its state on disk between steps, kGpu on CUDA device 0 with the
// moments there (zero 0, f32; offload/device_adamw.h).
enum class OffloadKind { kNone, kCpu, kNvme, kGpu };

// "none", "cpu", "nvme" or "gpu".
const char* OffloadName(OffloadKind kind);

// The Markov chain's held-out sequences are those of this step, which no run
// reaches (ValidateTrainJob keeps --steps below it).
inline constexpr int64_t kEvalStep = int64_t{1} << 40;

// Reshard (zero 3): kStep gathers every parameter of the rank's stages once per
// step into the layers and keeps them for the whole step; kBlock has the model
// borrow its weights from the ZeRO engine, which gathers each unit (a block, the
// embeddings, the head) just before use, prefetches the next and frees it after,
// in every forward and again in every backward (FSDP's reshard after forward).
// kAuto (the default): kBlock at zero 3, kStep otherwise (stages 0-2 keep the
// whole weights anyway). EffectiveReshard resolves it.
enum class Reshard { kAuto, kStep, kBlock };

// Where the layers' matrix products run: kCpu on OpenBLAS; kCuda on CUDA device 0
// through cuBLAS (tools/training/device_gemm.h; needs a --config=cuda build), with
// activations, weights and the optimizer still in host memory.
enum class ComputeDevice { kCpu, kCuda };

// "cpu" or "cuda".
const char* ComputeDeviceName(ComputeDevice device);

struct TrainJobOptions {
  GptConfig model;  // models/gpt/gpt_config.h; defaults: V=64, 4 layers
  int dp = 2;
  int pp = 2;
  int tp = 2;
  // Context parallelism: the mesh's fourth axis (job_mesh.h). Each rank of a cp
  // group holds CpChunks(seq_len, cp, its cp rank, cp_layout) of every sequence, and
  // attention runs as ring attention over the group (GptModelOptions::
  // context_parallel). The cp ranks hold the same parameters: the ZeRO engine (or the
  // zero 0 all-reduce) runs over the dp x cp group (ParameterGroupSize).
  int cp = 1;
  CpLayout cp_layout = CpLayout::kZigzag;
  // Ring attention or the all-to-all variant (a2a: cp must divide each tp rank's
  // heads); //tools:train's --cp_comm auto picks by ChooseCpComm (cp_comm_choice.h).
  CpComm cp_comm = CpComm::kRing;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int64_t microbatches = 4;  // per step and dp rank; >= pp
  int64_t micro_batch = 2;   // sequences per microbatch
  int64_t steps = 100;
  int zero = 3;  // 0 (plain data parallel), 1, 2 or 3
  OffloadKind offload = OffloadKind::kCpu;
  // Where zero 3's parameter shards live between uses (ZeRO-Infinity's
  // offload_param): kNone or kCpu in host memory (this job keeps every weight in
  // host memory, also with --device cuda, so the two are the same placement); kNvme
  // on disk (the DiskTier of --nvme_dir), each read just before its all-gather.
  OffloadKind offload_params = OffloadKind::kNone;
  // Where zero 2 and 3 keep their gradient shards (ZeRO-Infinity's gradients on
  // NVMe): kNone or kCpu in host memory (the same placement here); kNvme on disk
  // (the DiskTier of --nvme_dir), added into by each reduce-scatter and read by
  // the step.
  OffloadKind offload_grads = OffloadKind::kNone;
  // Zero 3: the most gathered parameter bytes alive at once on a rank (the
  // engine's max_live_gathered_bytes; 0: prefetch depth alone bounds them). A unit
  // that alone needs more is ResourceExhausted naming its parameters.
  int64_t param_budget = 0;
  // Zero 3: units gathered ahead of the one in use (the engine's prefetch_depth).
  int prefetch_depth = 2;
  // Zero 1-3: a unit the model declares (GptModel::Units: a block, the embeddings,
  // the final norm with the head) whose parameters take fewer f32 bytes than this
  // is kept whole on every rank instead of sharded (DeepSpeed's persistence
  // threshold, applied to whole units); 0: every unit is sharded.
  int64_t persist_below_bytes = 0;
  Reshard reshard = Reshard::kAuto;
  ComputeDevice device = ComputeDevice::kCpu;
  // --device cuda on one rank: "auto", "materialized" or "flash" (DeviceAttention of
  // models/gpt/gpu/device_gpt_model.h, named here so a CPU build needs none of it).
  std::string device_attention = "auto";
  // kBlock: the gradients stay in the model, summed over the microbatches, and
  // are reduce-scattered once after the last (the bits of zero 0 and kStep, at
  // the memory of whole gradients); otherwise each backward reduce-scatters its
  // block as it leaves it (no whole gradients; the microbatch sums round
  // differently, within the one-rank reference bound).
  bool defer_reduce_scatter = false;
  // Zero 0: all-reduce each unit's gradient (a block, the embeddings, the head) on
  // a communication thread as soon as the step's last backward has added into it,
  // beside the rest of the backward (DDP's overlap); false: one all-reduce of the
  // whole gradient after the backward. The same bits at dp 2.
  bool overlap_grad_reduce = true;
  // Zero 0 with overlap: the largest all-reduce bucket a unit is cut into (a
  // larger parameter alone; 0: one bucket per unit); DataParallelOptions's
  // grad_bucket_bytes.
  int64_t grad_bucket_bytes = int64_t{1} << 20;
  // The cost model the job's communicators choose their algorithms by: a file
  // (collective_bench --calibrate --save_cost_model), read by every rank. Empty: a
  // data-parallel (or cp) group across hosts measures one on its own hosts, once
  // per set of hosts, and caches it in `cost_model_cache` (empty: the default,
  // collectives/auto_calibration.h); a group inside one host keeps the formulas.
  std::string cost_model;
  std::string cost_model_cache;
  // How many jobs' calibrations that cache merges (their median) before later jobs
  // only read it (AutoCalibrationOptions::calibrations_merged).
  int cost_model_calibrations = 3;
  // offload nvme: where the optimizer state goes (a directory per drive, ':'
  // separated); empty: a fresh directory under $TMPDIR (or /tmp), removed after.
  std::string nvme_dir;
  DType dtype = DType::kF32;  // f32 or bf16 (bf16: zero 1, 2 or 3)
  Recompute recompute = Recompute::kNone;
  float lr = 3e-3f;
  // The schedule (tools/training/lr_schedule.h): linear warm-up over
  // `warmup_steps`, then cosine decay to `lr_min` at the last step; without lr_min
  // the rate stays `lr` after the warm-up.
  int64_t warmup_steps = 0;
  std::optional<float> lr_min;
  float weight_decay = 0.0f;
  // AdamW's epsilon. 1e-6 rather than PyTorch's 1e-8: a gradient that is zero up
  // to rounding noise (1e-11, where summation orders differ between parallel
  // layouts) moves its parameter by lr * g / (|g| + eps), which eps = 1e-8 turns
  // into a visible step and 1e-6 keeps a hundred times smaller.
  float adam_eps = 1e-6f;
  uint64_t data_seed = 7;
  int64_t markov_branching = 3;
  // Byte-level text to train on (files read as one text; vocab must be 256); empty:
  // the Markov chain. Its last `eval_fraction` is held out (not trained on).
  std::vector<std::string> data;
  double eval_fraction = 0.05;
  // Every `eval_every` steps (and after the last), the mean loss over a fixed
  // held-out set (one global batch), computed on the training mesh; 0: never.
  int64_t eval_every = 0;
  // Global-norm gradient clipping: the dp-averaged gradient of the whole model
  // (each element once) is scaled to this L2 norm when longer; 0: off.
  float clip_grad_norm = 0;
  int adamw_threads = 2;  // with offload = cpu
  // Threads for each rank's matrix products; 0: this host's CPUs divided by its
  // ranks. //tools:train resolves it (tools/training/compute_report.h) and calls
  // SetGemmThreads (tensor_parallel/layers/gemm.h, process-wide) before the ranks
  // start; RunTrainJob itself leaves that process-wide setting alone.
  int threads_per_rank = 0;

  // Checkpoints (tools/training/job_checkpoint.h): with a directory, every
  // `checkpoint_every` steps (0: only at the end) and after the last step; the
  // newest `keep_checkpoints` are kept.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  int keep_checkpoints = 2;
  // Continue from the checkpoint committed in `resume_dir`, on this job's mesh
  // (any valid one). With `resume_required` false, a directory without a
  // checkpoint starts the run from step 0 (what a restarted job wants).
  std::string resume_dir;
  bool resume_required = true;
  // The step reports TrainSummary::steps keeps (the newest); the summary's totals
  // are running aggregates, so a run's memory does not grow with its steps.
  int64_t step_history = 1024;
  // Test hook, never set by the flags: after this step (and its checkpoint, if
  // due) every rank stops with Aborted, as if the job had been killed.
  int64_t testing_halt_after_step = 0;
};

// How a job's ranks run: threads of one process, processes over shared memory
// (//tools:train launches them) or the processes of an mpirun job.
enum class RankTransport { kThreads, kShm, kMpi };

// "threads", "shm" or "mpi".
const char* RankTransportName(RankTransport transport);

// TrainLaunchOptions: how //tools:train starts and watches its ranks (what they
// train is TrainJobOptions). ValidateTrainJob checks both.
struct TrainLaunchOptions {
  RankTransport transport = RankTransport::kThreads;
  // kShm: the job's id, 1 to 64 characters from [A-Za-z0-9_-] (its segments are
  // /dev/shm/loom.<id>-*); empty: a fresh one.
  std::string job_id;
  // kShm and kMpi: a peer silent this long is reported and ends the job; at least
  // 200ms, or absl::InfiniteDuration() (off).
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // kShm: restarts from the latest checkpoint after a rank fails, in [0, 100]
  // (needs TrainJobOptions::checkpoint_dir).
  int max_restarts = 0;
  // With max_restarts: a restart continues with fewer dp replicas, keeping the
  // global batch, while at least `min_ranks` ranks remain.
  bool elastic_dp = false;
  int min_ranks = 1;
};

// EffectiveReshard: options.reshard with kAuto resolved (kBlock at zero 3, kStep
// otherwise); ReshardName its flag spelling ("step", "block" or "auto").
Reshard EffectiveReshard(const TrainJobOptions& options);
const char* ReshardName(Reshard reshard);

// LoadJobCostModel reads options.cost_model (nullopt when empty); InvalidArgument
// naming the file when it cannot be read or parsed.
absl::StatusOr<std::optional<CostModel>> LoadJobCostModel(const TrainJobOptions& options);

// JobWorldSize: the job's ranks, dp x pp x cp x tp (ValidateTrainJob bounds it).
int JobWorldSize(const TrainJobOptions& options);

// ParameterGroupSize: the ranks that hold the same parameters and average their
// gradients, dp x cp (the group the ZeRO engine shards over).
int ParameterGroupSize(const TrainJobOptions& options);

// UsesDisk: whether a rank needs a DiskTier (--offload, --offload_params or
// --offload_grads nvme).
bool UsesDisk(const TrainJobOptions& options);

// StepReport: one step as rank 0 sees it, with figures gathered from every rank.
// StepBreakdown: where a step's seconds go on a rank, measured on the rank's own
// thread (the mean over ranks in a StepReport):
//   compute    the pipeline executor's time in the stage module (forward,
//              backward, loss), which includes the tensor-parallel layers' own
//              collectives over tp, less param_wait; of which
//     gemm       the matrix products (Gemm, core/compute_timer.h) outside attention,
//     attention  the heads' fused attention, forward and backward (its own products
//                included), and the rest of compute is element-wise work (layer
//                norm, GELU, bias, loss, copies) and the tp collectives;
//   param_wait the part of the module's time spent waiting for the ZeRO engine
//              (block reshard): for a gathered unit the prefetch had not finished,
//              or for a gradient buffer still held by a running reduce-scatter;
//   dp_comm    blocked on data-parallel communication: gathering the weights before
//              the step (zero 3), averaging the gradients over dp (zero 0: the
//              all-reduce; zero 1-3: the engine's reduce-scatter), and the clipping
//              norm's all-reduce;
//   pp_comm    the executor blocked waiting for activations and gradients from the
//              neighbouring stages (and for its sends to complete);
//   optimizer  AdamW on this rank's state (zero 1 and 2: with the all-gather of
//              the updated shards, which the step does);
//   other      the rest of the step (checkpoint saves, bookkeeping).
// With --cp, ring attention's hops run on a communication thread beside the rank's:
//   cp_hops    that thread's time in the hops of the step (not part of the sum);
//   cp_exposed the part of attention the rank waited for a hop its compute had not
//              covered (ring_attention.h's RingOverlapStats).
struct StepBreakdown {
  double compute = 0, dp_comm = 0, pp_comm = 0, optimizer = 0, other = 0, param_wait = 0;
  double gemm = 0, attention = 0;  // parts of compute
  double cp_hops = 0, cp_exposed = 0;
  // Adds `weight` times each of `more`'s figures to this one's.
  void Add(const StepBreakdown& more, double weight = 1.0);
};

// DpTraffic: what one rank sent through its data-parallel communicator in one
// step, by collective (bytes and calls), and the elements its ZeRO engines gather
// and reduce: the padded buckets (units under block reshard) and the persistent
// parameters, kept whole and all-reduced. tools/docs/memory.md, "Reshard", gives
// each mode's formula in these terms.
struct DpTraffic {
  int64_t all_gather_bytes = 0, reduce_scatter_bytes = 0, all_reduce_bytes = 0;
  int64_t all_gather_calls = 0, reduce_scatter_calls = 0, all_reduce_calls = 0;
  int64_t zero_bucket_numel = 0, zero_persistent_numel = 0;
  // Stage forwards this step beyond one per stage and microbatch (measured by the
  // stage module's count): 0, since each microbatch keeps its own context for its
  // backward; more would mean a forward ran twice (and gathered its units again).
  int64_t recomputed_forwards = 0;
  // The engines' units, and those of this step's passes that took a unit over
  // still gathered from the pass before (Zero3Stats::gathers_kept: no all-gather)
  // with their padded elements.
  int64_t zero_units = 0, zero_kept_units = 0, zero_kept_numel = 0;
};

struct StepReport {
  int64_t step = 0;
  double loss = 0;  // mean over the step's tokens
  double seconds = 0;
  double tokens_per_second = 0;
  int64_t model_state_bytes = 0;  // the largest over ranks (see TrainSummary)
  // The largest sent by one rank this step through its dp and tp communicators
  // (the pipeline's activations and gradients between stages are not counted).
  int64_t comm_bytes = 0;
  double checkpoint_seconds = 0;  // the save after this step (within `seconds`), if any
  double lr = 0;                  // the learning rate of the step
  std::optional<double> eval_loss;  // --eval_every: the held-out loss after the step
  double grad_norm = 0;             // --clip_grad_norm: the norm before clipping
  StepBreakdown breakdown;          // seconds, the mean over ranks
  // The share of rank 0's host's CPU time that was busy during the step (all
  // processes, /proc/stat: host_cpu.h); -1 where it cannot be read.
  double host_cpu_busy = -1;
  // Page faults rank 0's process took during the step (host_cpu.h: every rank of
  // a thread-rank job; rank 0 alone with processes); -1 where not counted.
  int64_t page_faults = -1;
  std::string ToString() const;
};

// RankParameters: one rank's final parameters, its tp shards (the spans of
// `params` are empty; `values` holds the numbers, in the same order).
struct RankParameters {
  int tp_rank = 0;
  std::vector<GptParameter> params;
  std::vector<std::vector<float>> values;
};

struct TrainSummary {
  // The last TrainJobOptions::step_history steps this run trained (every one in a
  // shorter run); the totals below cover all of them.
  std::deque<StepReport> steps;
  int64_t resumed_from_step = 0;  // the checkpoint's step (0: a fresh start)
  double final_loss = 0;
  std::optional<double> final_eval_loss;  // --eval_every: after the last step
  double uniform_loss = 0;  // log(vocab)
  double entropy_rate = 0;  // the lowest loss the data allows (Markov data; 0
                            // for text, where it is not known)
  // The largest over ranks: parameters, gradients and AdamW state this rank holds
  // for its piece of the model — at zero 1-3 the engine's shards and persistent
  // tensors (16 bytes per element) and its communication buffers (gathered units,
  // gradient buckets), plus what the layers keep themselves: at --reshard step the
  // stage's whole weights and gradients (8 bytes per local element), with a
  // deferred reduce-scatter the gradient sums (4).
  int64_t peak_model_state_bytes_per_rank = 0;
  // topology/memory_estimate's prediction for the same ranks (the largest over
  // ranks), from each rank's optimizer configuration (DataParallelOptimizer::
  // EstimatedStateBytes); memory and disk together.
  int64_t estimated_model_state_bytes_per_rank = 0;
  int64_t sharded_state_bytes_per_rank = 0;  // zero 1-3: the engine's part alone
  int64_t disk_state_bytes_per_rank = 0;     // offload nvme: the state on disk
  int64_t comm_bytes_per_rank_per_step = 0;  // mean over steps, largest rank
  // World rank 0's data-parallel traffic in the last step.
  DpTraffic dp_traffic;
  // The largest activation bytes any rank's stage models held at once (measured by
  // the model; --recompute=full lowers it).
  int64_t peak_activation_bytes_per_rank = 0;
  // topology/memory_estimate's prediction of the same (activation_estimate.h),
  // largest over ranks.
  int64_t estimated_activation_bytes_per_rank = 0;
  double tokens_per_second = 0;
  // --device cuda: the matrix products rank 0 ran on the GPU (0 on the CPU).
  int64_t device_gemm_products = 0;
  // --device cuda on one rank (device_trainer.h): the device and what ran there;
  // empty when only the products went to the GPU.
  std::string device_description;
  // Where world rank 0's data-parallel group got its cost model (AutoCalibration's
  // line, or the --cost_model file); empty: the formulas.
  std::string cost_model_source;
  // The job's hosts and how it numbered their processes (JobHosts::Describe); empty
  // on one host.
  std::string hosts;
  // Mean over ranks and steps (the first step, which warms up, left out when there
  // are more), in seconds.
  StepBreakdown step_breakdown_s;
  // StepReport::host_cpu_busy, the mean over the same steps; -1 where unknown.
  double host_cpu_busy = -1;
  // StepReport::page_faults, the mean over the steady steps: the third (the
  // first two touch the buffers they keep for the run) to the one before the last
  // (whose count, in a job of thread ranks, also holds the other ranks' end of the
  // run); -1 where unknown or the run has fewer than four steps.
  double page_faults_per_step = -1;
  // Final parameters of every rank.
  std::vector<RankParameters> final_params;
  // Per rank: the pipeline executions of the last step (for --trace).
  std::string trace_json;
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_OPTIONS_H_

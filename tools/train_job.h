// TrainJob: Loom's end-to-end training job, the library behind //tools:train. It
// trains the GPT decoder of tools/gpt on MarkovData (or, with `data`, on the bytes
// of text files: tools/gpt/byte_corpus.h) over a dp x pp x tp mesh of
// ranks, threads (RunTrainJob) or processes over shm (RunTrainJobRank):
//   - tp: the tensor_parallel layers on a tp communicator;
//   - pp: the stages run by pipeline/executor under a pipeline schedule;
//   - dp: plain data parallelism (zero 0: gradients all-reduced, every rank steps
//     the whole AdamW state) or ZeRO stage 1, 2 or 3 (zero3/Zero3Engine shards the
//     AdamW state, also the gradients, also the parameters over dp); with offload
//     cpu the optimizer runs as offload's CPU AdamW on threads, with offload nvme
//     its state lives in an offload/disk DiskTier between steps.
// Every step reports the loss (averaged over dp), the step time, tokens/s, the
// model-state bytes per rank and the bytes each rank sent.
//
// Example:
//   TrainJobOptions options;          // dp=2 pp=2 tp=2, zero 3, cpu offload
//   options.steps = 40;
//   LOOM_ASSIGN_OR_RETURN(TrainSummary summary,
//       RunTrainJob(options, [](const StepReport& r) { std::cout << r.ToString(); }));
//   summary.final_loss;               // well below log(vocab)
//   options.dp = 3;                   // 12 ranks; layers 4 do not split into pp 3:
//   options.pp = 3;
//   RunTrainJob(options, nullptr);
//   // InvalidArgument: "--layers 4 is not divisible by --pp 3 ..."
#ifndef LOOM_TOOLS_GPT_JOB_H_
#define LOOM_TOOLS_GPT_JOB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/dtype.h"
#include "tools/gpt/gpt_config.h"
#include "tools/gpt/gpt_model.h"
#include "tools/gpt/gpt_parameter.h"
#include "topology/parallel_config.h"

namespace loom {

enum class OffloadKind { kNone, kCpu, kNvme };

struct TrainJobOptions {
  GptConfig model;            // tools/gpt/gpt_config.h; defaults: V=64, 4 layers
  int dp = 2;
  int pp = 2;
  int tp = 2;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int64_t microbatches = 4;   // per step and dp rank; >= pp
  int64_t micro_batch = 2;    // sequences per microbatch
  int64_t steps = 100;
  int zero = 3;               // 0 (plain data parallel), 1, 2 or 3
  OffloadKind offload = OffloadKind::kCpu;
  // offload nvme: where the optimizer state goes (a directory per drive, ':'
  // separated); empty: a fresh directory under $TMPDIR (or /tmp), removed after.
  std::string nvme_dir;
  DType dtype = DType::kF32;  // f32 or bf16 (bf16: zero 1, 2 or 3)
  Recompute recompute = Recompute::kNone;
  float lr = 3e-3f;
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
  int adamw_threads = 2;      // with offload = cpu
};

// StepReport: one step as rank 0 sees it, with figures gathered from every rank.
struct StepReport {
  int64_t step = 0;
  double loss = 0;                      // mean over the step's tokens
  double seconds = 0;
  double tokens_per_second = 0;
  int64_t model_state_bytes = 0;        // the largest over ranks (see TrainSummary)
  // The largest sent by one rank this step through its dp and tp communicators
  // (the pipeline's activations and gradients between stages are not counted).
  int64_t comm_bytes = 0;
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
  std::vector<StepReport> steps;
  double final_loss = 0;
  double uniform_loss = 0;              // log(vocab)
  double entropy_rate = 0;              // the lowest loss the data allows (Markov data; 0
                                        // for text, where it is not known)
  // The largest over ranks: parameters, gradients and AdamW state this rank holds
  // for its piece of the model — under zero 3 the engine's shards and persistent
  // tensors (16 bytes per element), plus the stage's resident weights and
  // gradients (8 bytes per local element: the tensor-parallel layers own their
  // weights, so a gathered stage stays resident for the step).
  int64_t peak_model_state_bytes_per_rank = 0;
  int64_t sharded_state_bytes_per_rank = 0;   // zero 1-3: the engine's part alone
  int64_t disk_state_bytes_per_rank = 0;      // offload nvme: the state on disk
  int64_t comm_bytes_per_rank_per_step = 0;   // mean over steps, largest rank
  // The largest activation bytes any rank's stage models held at once (measured by
  // the model; --recompute=full lowers it).
  int64_t peak_activation_bytes_per_rank = 0;
  double tokens_per_second = 0;
  // Final parameters of every rank.
  std::vector<RankParameters> final_params;
  // Per rank: the pipeline executions of the last step (for --trace).
  std::string trace_json;
};

// RunTrainJob trains and returns the summary; `on_step` (may be null) sees each
// step as it ends. InvalidArgument with one line naming the flag and the values for
// a mesh, model, schedule or option that does not fit.
absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step);

// GroupConnector: how one process of a job joins one line of a mesh dimension.
// connect(dimension, group, rank, size) returns this process's endpoint in group
// `group` of `dimension` ("w": the world, group 0; "t", "d", "p": the tp, dp and pp
// lines, numbered as ShmGroupIds numbers them), where it is rank `rank` of `size`.
// Every process calls it in the same order (world, tp, dp, pp), so connects that are
// collective over the whole job (MPI_Comm_split) meet.
using GroupConnector = std::function<absl::StatusOr<std::unique_ptr<Transport>>(
    absl::string_view dimension, int group, int rank, int size)>;

// RunTrainJobProcess runs world rank `rank` of a job of `size` processes as this
// process, its groups joined by `connect` (separate transports per dimension, as
// with threads). World rank 0 returns the summary, the other ranks nullopt. A rank
// that fails aborts its transports, so the others fail at once (Unavailable naming
// it) instead of at their deadlines. InvalidArgument when `size` is not
// dp x pp x tp, naming `transport` (the flag's value) and the counts.
absl::StatusOr<std::optional<TrainSummary>> RunTrainJobProcess(
    const TrainJobOptions& options, int rank, int size, absl::string_view transport,
    const GroupConnector& connect, const std::function<void(const StepReport&)>& on_step);

// RunTrainJobRank is RunTrainJobProcess over shm (--transport shm): `process` names
// the job, this process's world rank and the world size (as //tools:launch passes
// them; ShmOptionsFromEnvironment); each group connects its own shm transport
// (ShmGroupIds).
absl::StatusOr<std::optional<TrainSummary>> RunTrainJobRank(
    const TrainJobOptions& options, const ShmOptions& process,
    const std::function<void(const StepReport&)>& on_step);

// ShmGroupIds returns the shm job ids the ranks of job `job_id` connect: the world
// and each line of tp, dp and pp. A launcher removes their leftover segments.
std::vector<std::string> ShmGroupIds(const TrainJobOptions& options, absl::string_view job_id);
std::string ShmGroupId(absl::string_view job_id, absl::string_view dimension, int group);

// kMaxTrainRanks: the most ranks (dp x pp x tp) of a job, threads or processes.
inline constexpr int64_t kMaxTrainRanks = 64;

// ValidateTrainJob is RunTrainJob's check of the options, without training:
// InvalidArgument naming the flags and values for a bad mesh, model, schedule or
// option, for size flags whose products overflow an int64, and for a job whose model
// state, tokens and activations could not fit this machine's physical memory (so no
// allocation of the run fails). `transport` ("threads", "shm", "mpi") names the ranks
// in the message ("thread ranks", "processes over shm").
absl::Status ValidateTrainJob(const TrainJobOptions& options);
absl::Status ValidateTrainJob(const TrainJobOptions& options, absl::string_view transport);

// CompareWithReference trains the same model with the same seed and the same
// global batch on one rank (dp = pp = tp = 1, zero 0) and returns the largest
// absolute difference between `summary`'s final parameters (every rank's tp shard)
// and the reference's, and the reference's final loss.
struct ReferenceComparison {
  double max_abs_param_diff = 0;
  double max_abs_param = 0;     // the reference's largest magnitude, for a relative bound
  double reference_final_loss = 0;
};
absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary);

}  // namespace loom

#endif  // LOOM_TOOLS_GPT_JOB_H_

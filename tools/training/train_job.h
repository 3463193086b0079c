// TrainJob: Loom's end-to-end training job, the library behind //tools:train. It
// trains the GPT decoder of models/gpt on MarkovData (or, with `data`, on the bytes
// of text files: models/gpt/byte_corpus.h) over a dp x pp x cp x tp mesh of
// ranks, threads (RunTrainJob) or processes over shm or MPI (RunTrainJobProcess):
//   - tp: the tensor_parallel layers on a tp communicator;
//   - cp: context parallelism, each rank of a cp ring holding its positions of every
//     sequence (zigzag chunks by default) and attention run as ring attention;
//   - pp: the stages run by pipeline/executor under a pipeline schedule;
//   - dp: plain data parallelism (zero 0: gradients all-reduced, every rank steps
//     the whole AdamW state) or ZeRO stage 1, 2 or 3 (zero3/Zero3Engine shards the
//     AdamW state, also the gradients, also the parameters over dp x cp, the ranks
//     that hold the same parameters); with offload
//     cpu the optimizer runs as offload's CPU AdamW on threads, with offload nvme
//     its state lives in an offload/disk DiskTier between steps.
// Every step reports the loss (summed over cp, averaged over dp), the step time, tokens/s, the
// model-state bytes per rank and the bytes each rank sent.
//
// Example:
//   TrainJobOptions options;          // dp=2 pp=2 tp=2, zero 3, cpu offload
//   options.steps = 40;
//   LOOM_ASSIGN_OR_RETURN(TrainSummary summary,
//       RunTrainJob(options, [](const StepReport& r) { std::cout << r.ToString(); }));
//   summary.final_loss;               // well below log(vocab)
//   options.pp = 5;                   // 4 layers cannot fill 5 stages:
//   RunTrainJob(options, nullptr);
//   // InvalidArgument: "--layers 4 is fewer than the 5 pipeline stages (--pp 5)"
//
// The package, one concept per file: train_options.h (options and reports),
// validate.h (the options' check), job_setup.h (schedule, data, offload disk),
// rank_optimizer.h (the job's options for zero3/data_parallel.h), rank_loop.h (one
// rank's steps), wire.h (results to rank 0), reference.h (the one-rank
// comparison); this file wires ranks as threads or processes.
#ifndef LOOM_TOOLS_TRAINING_TRAIN_JOB_H_
#define LOOM_TOOLS_TRAINING_TRAIN_JOB_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport.h"
#include "tools/training/job_hosts.h"
#include "tools/training/train_options.h"
#include "tools/training/validate.h"

namespace loom {

// RunTrainJob trains and returns the summary; `on_step` (may be null) sees each
// step as it ends. InvalidArgument with one line naming the flag and the values for
// a mesh, model, schedule or option that does not fit.
absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step);

// GroupConnector: how one process of a job joins one line of a mesh dimension.
// connect(dimension, group, rank, size) returns this process's endpoint in group
// `group` of `dimension` ("w": the world, group 0; "t", "d", "c", "p": the tp group,
// the parameters' dp x cp group, the cp ring and the pp group, numbered as the job
// mesh's AllGroups numbers "tp", "dp-cp", "cp" and "pp": job_mesh.h), where it is rank
// `rank` of `size`. Every process calls it in the same order (world, tp, dp x cp, cp
// when cp > 1, pp), so connects that are collective over the whole job
// (MPI_Comm_split) meet.
using GroupConnector = std::function<absl::StatusOr<std::unique_ptr<Transport>>(
    absl::string_view dimension, int group, int rank, int size)>;

// RunTrainJobProcess runs job rank `rank` of a job of hosts.size() processes as this
// process, its groups joined by `connect` (separate transports per dimension, as
// with threads). `hosts` numbers the processes by host (job_hosts.h): the mesh places
// job ranks, and each group's Communicator is told which of its members share a host.
// Job rank 0 returns the summary, the other ranks nullopt. A rank that fails aborts
// its transports, so the others fail at once (Unavailable naming it) instead of at
// their deadlines. InvalidArgument when the job's size is not dp x pp x cp x tp,
// naming `transport` (the flag's value) and the counts.
absl::StatusOr<std::optional<TrainSummary>> RunTrainJobProcess(
    const TrainJobOptions& options, int rank, const JobHosts& hosts, absl::string_view transport,
    const GroupConnector& connect, const std::function<void(const StepReport&)>& on_step);

// RunTrainJobRank is RunTrainJobProcess over shm (--transport shm): `process` names
// the job, this process's world rank and the world size (as //tools:launch passes
// them; ShmOptionsFromEnvironment); each group connects its own shm transport
// (ShmGroupId, numbered as mesh.AllGroups numbers each dimension's groups).
absl::StatusOr<std::optional<TrainSummary>> RunTrainJobRank(
    const TrainJobOptions& options, const ShmOptions& process,
    const std::function<void(const StepReport&)>& on_step);

// ShmGroupId returns the shm job id of group `group` (its index in the job mesh's
// AllGroups(dimension)) of job `job_id`: "<job_id>.<letter><group>", where the letter
// is "w" (the world), "t", "d" or "p"; every segment of the job thus starts with
// /dev/shm/loom.<job_id>., which a launcher removes.
std::string ShmGroupId(absl::string_view job_id, absl::string_view dimension, int group);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_JOB_H_

#include "tools/training/train_job.h"

#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/auto_calibration.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/job_mesh.h"
#include "tools/training/job_setup.h"
#include "tools/training/rank_loop.h"
#include "tools/training/rank_optimizer.h"

namespace loom {

absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, SetupJob(options));
  LOOM_ASSIGN_OR_RETURN(const Mesh mesh, JobMeshOf(options));
  const int world = static_cast<int>(mesh.world_size());
  // One inproc group per group of each dimension (mesh.AllGroups order), plus the
  // world. Separate transports for each dimension, since the ZeRO engine drives dp
  // from its own thread while the layers drive tp and the executor drives pp.
  // Every rank is a thread with a communication thread beside it (the ZeRO
  // engine's): with more of them than CPUs, waiters block rather than spin.
  InprocOptions inproc;
  inproc.host_threads = 2 * world;
  // The parameters' group is dp x cp ("dp-cp": the dp groups when cp is 1); a cp ring
  // only when cp > 1.
  std::map<std::string, std::vector<std::shared_ptr<InprocGroup>>> groups;
  std::vector<const char*> dimensions = {"tp", "pp", "dp-cp"};
  if (options.cp > 1) dimensions.push_back("cp");
  for (const char* dimension : dimensions) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> members,
                          mesh.AllGroups(dimension));
    for (const std::vector<int64_t>& group : members) {
      LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> made,
                            InprocGroup::Create(static_cast<int>(group.size()), inproc));
      groups[dimension].push_back(std::move(made));
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> world_group, InprocGroup::Create(world, inproc));
  std::vector<RankWiring> wiring(world);
  CommunicatorOptions comm_options;
  comm_options.timeout = kCollectiveTimeout;
  // Thread ranks share one host: a model file, or the formulas.
  LOOM_ASSIGN_OR_RETURN(std::optional<CostModel> given, LoadJobCostModel(options));
  if (given.has_value()) comm_options.cost_model = *given;
  for (int rank = 0; rank < world; ++rank) {
    RankWiring& w = wiring[rank];
    LOOM_ASSIGN_OR_RETURN(w.place, PlaceRank(mesh, rank));
    const RankPlace& at = w.place;
    auto make = [&](const std::shared_ptr<InprocGroup>& g,
                    int r) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, g->Endpoint(r));
      w.endpoints.push_back(std::move(endpoint));
      return Communicator::Create(w.endpoints.back(), comm_options);
    };
    LOOM_ASSIGN_OR_RETURN(w.tp, make(groups["tp"][at.tp_group], at.t));
    LOOM_ASSIGN_OR_RETURN(w.dp, make(groups["dp-cp"][at.dpcp_group], at.dpcp_index));
    if (options.cp > 1) {
      LOOM_ASSIGN_OR_RETURN(w.cp, make(groups["cp"][at.cp_group], at.c));
    }
    LOOM_ASSIGN_OR_RETURN(w.world, make(world_group, at.rank));
    LOOM_ASSIGN_OR_RETURN(w.pp, groups["pp"][at.pp_group]->Endpoint(at.s));
  }
  // --offload, --offload_params or --offload_grads nvme: one DiskTier for every rank (names carry
  // the rank's stage, tp and dp coordinates).
  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  if (UsesDisk(options)) {
    // A directory of this job's own under --nvme_dir, so that its removal removes
    // nothing of the user's.
    LOOM_ASSIGN_OR_RETURN(disk,
                          OpenOffloadDisk(options, absl::StrCat("train.", getpid()), &made_dirs));
  }

  TrainSummary summary;
  if (given.has_value()) summary.cost_model_source = absl::StrCat("from ", options.cost_model);
  std::vector<absl::Status> results(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      results[r] =
          RunRank(options, *setup, wiring[r], disk.get(), on_step, r == 0 ? &summary : nullptr);
      if (!results[r].ok()) AbortRank(wiring[r], results[r]);
    });
  }
  for (std::thread& thread : threads) thread.join();
  // The first failure that is not just another rank's abort.
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok() && results[r].code() != absl::StatusCode::kUnavailable) {
      return absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  for (int r = 0; r < world; ++r) {
    if (!results[r].ok()) {
      return absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message()));
    }
  }
  return summary;
}

std::string ShmGroupId(absl::string_view job_id, absl::string_view dimension, int group) {
  // "<job>.<dimension><group>": every segment of the job starts with
  // /dev/shm/loom.<job>., which the launcher and its janitor remove. Launcher job ids
  // hold no dot and are at most 64 characters: this fits ShmOptions' 96.
  return absl::StrCat(job_id, ".", dimension, group);
}

absl::StatusOr<std::optional<TrainSummary>> RunTrainJobRank(
    const TrainJobOptions& options, const ShmOptions& process,
    const std::function<void(const StepReport&)>& on_step) {
  // One shm group per line of each dimension, as with threads.
  auto connect = [&](absl::string_view dimension, int group, int rank,
                     int size) -> absl::StatusOr<std::unique_ptr<Transport>> {
    ShmOptions shm = process;
    shm.job_id = ShmGroupId(process.job_id, dimension, group);
    shm.rank = rank;
    shm.size = size;
    return ConnectShmTransport(shm);
  };
  return RunTrainJobProcess(options, process.rank, JobHosts::OneHost(process.size), "shm", connect,
                            on_step);
}

absl::StatusOr<std::optional<TrainSummary>> RunTrainJobProcess(
    const TrainJobOptions& options, int rank, const JobHosts& hosts, absl::string_view transport,
    const GroupConnector& connect, const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, SetupJob(options));
  const int world = JobWorldSize(options);
  const int size = hosts.size();
  if (size != world) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--transport ", transport, ": the job has ", size, " processes, --dp ", options.dp,
        " x --pp ", options.pp, " x --cp ", options.cp, " x --tp ", options.tp, " needs ", world));
  }
  LOOM_ASSIGN_OR_RETURN(const Mesh mesh, JobMeshOf(options));
  RankWiring w;
  LOOM_ASSIGN_OR_RETURN(w.place, PlaceRank(mesh, rank));
  const RankPlace& at = w.place;
  CommunicatorOptions comm_options;
  comm_options.timeout = kCollectiveTimeout;
  LOOM_ASSIGN_OR_RETURN(std::optional<CostModel> given, LoadJobCostModel(options));
  if (given.has_value()) comm_options.cost_model = *given;
  // Each group is told which of its members share a host (job_hosts.h): its
  // algorithms then cross the link as little as they can, and its calibration and
  // cost-model curves are those of its node layout (so many ranks per node).
  auto make = [&](absl::string_view dimension, absl::StatusOr<std::unique_ptr<Transport>> endpoint)
      -> absl::StatusOr<std::unique_ptr<Communicator>> {
    if (!endpoint.ok()) return endpoint.status();
    w.endpoints.push_back(std::move(*endpoint));
    CommunicatorOptions group_options = comm_options;
    LOOM_ASSIGN_OR_RETURN(group_options.node_of_rank,
                          GroupNodeOfRank(mesh, at.rank, dimension, hosts));
    return Communicator::Create(w.endpoints.back(), group_options);
  };
  // Every process joins its groups in the same order (an MPI split is collective
  // over the world): the world, tp, the parameters' dp x cp group, the cp ring (when
  // cp > 1), pp.
  LOOM_ASSIGN_OR_RETURN(w.world, make("world", connect("w", 0, at.rank, world)));
  LOOM_ASSIGN_OR_RETURN(w.tp, make("tp", connect("t", at.tp_group, at.t, options.tp)));
  LOOM_ASSIGN_OR_RETURN(w.dp, make("dp-cp", connect("d", at.dpcp_group, at.dpcp_index,
                                                    ParameterGroupSize(options))));
  if (options.cp > 1) {
    LOOM_ASSIGN_OR_RETURN(w.cp, make("cp", connect("c", at.cp_group, at.c, options.cp)));
  }
  LOOM_ASSIGN_OR_RETURN(w.pp, connect("p", at.pp_group, at.s, options.pp));
  // Without a file, the groups that carry the gradients and cp's hops price their
  // algorithms by what they measure across their hosts (nothing inside one host).
  std::string cost_model_source =
      given.has_value() ? absl::StrCat("from ", options.cost_model) : std::string();
  if (!given.has_value()) {
    AutoCalibrationOptions automatic;
    automatic.cache_dir = options.cost_model_cache;
    automatic.calibrations_merged = options.cost_model_calibrations;
    for (Communicator* group : {w.dp.get(), w.cp.get()}) {
      if (group == nullptr || group->size() < 2) continue;
      absl::StatusOr<AutoCalibration> calibrated = AutoCalibrate(*group, automatic);
      if (!calibrated.ok()) {
        AbortRank(w, calibrated.status());
        return absl::Status(calibrated.status().code(),
                            absl::StrCat("rank ", at.rank, ": calibrating the cost model: ",
                                         calibrated.status().message()));
      }
      if (group == w.dp.get() &&
          calibrated->source != AutoCalibration::Source::kFormula) {
        cost_model_source = calibrated->ToString();
      }
    }
  }

  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  std::optional<TrainSummary> summary;
  if (at.rank == 0) {
    summary.emplace();
    summary->cost_model_source = cost_model_source;
    LOOM_ASSIGN_OR_RETURN(const std::string tp_across, TensorParallelAcrossHosts(mesh, hosts));
    summary->hosts = absl::StrCat(hosts.Describe(transport), tp_across);
  }
  absl::Status status;
  if (UsesDisk(options)) {
    absl::StatusOr<std::unique_ptr<DiskTier>> opened =
        OpenOffloadDisk(options, absl::StrCat("rank", at.rank), &made_dirs);
    status = opened.status();
    if (opened.ok()) disk = std::move(*opened);
  }
  if (status.ok()) {
    status =
        RunRank(options, *setup, w, disk.get(), on_step, summary.has_value() ? &*summary : nullptr);
  }
  if (!status.ok()) {
    AbortRank(w, status);
    return absl::Status(status.code(), absl::StrCat("rank ", at.rank, ": ", status.message()));
  }
  return summary;
}

}  // namespace loom

#include "tools/training/train_job.h"

#include <unistd.h>

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
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/job_setup.h"
#include "tools/training/rank_loop.h"
#include "tools/training/rank_optimizer.h"

namespace loom {

absl::StatusOr<TrainSummary> RunTrainJob(const TrainJobOptions& options,
                                         const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, SetupJob(options));
  const int dp = options.dp, pp = options.pp, tp = options.tp;
  const int world = dp * pp * tp;
  // One inproc group per line of each dimension, plus the world. Separate
  // transports for each dimension, since the ZeRO engine drives dp from its own
  // thread while the layers drive tp and the executor drives pp.
  std::vector<std::shared_ptr<InprocGroup>> tp_groups, pp_groups, dp_groups;
  for (const auto& [groups, count, size] :
       {std::make_tuple(&tp_groups, dp * pp, tp), std::make_tuple(&pp_groups, dp * tp, pp),
        std::make_tuple(&dp_groups, pp * tp, dp)}) {
    for (int i = 0; i < count; ++i) {
      LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(size));
      groups->push_back(std::move(group));
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> world_group, InprocGroup::Create(world));
  std::vector<RankWiring> wiring(world);
  CommunicatorOptions comm_options;
  comm_options.timeout = kCollectiveTimeout;
  for (int rank = 0; rank < world; ++rank) {
    RankWiring& w = wiring[rank];
    PlaceRank(options, rank, w);
    auto make = [&](const std::shared_ptr<InprocGroup>& g,
                    int r) -> absl::StatusOr<std::unique_ptr<Communicator>> {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, g->Endpoint(r));
      w.endpoints.push_back(std::move(endpoint));
      return Communicator::Create(w.endpoints.back(), comm_options);
    };
    LOOM_ASSIGN_OR_RETURN(w.tp, make(tp_groups[w.d * pp + w.s], w.t));
    LOOM_ASSIGN_OR_RETURN(w.dp, make(dp_groups[w.s * tp + w.t], w.d));
    LOOM_ASSIGN_OR_RETURN(w.world, make(world_group, w.rank));
    LOOM_ASSIGN_OR_RETURN(w.pp, pp_groups[w.d * tp + w.t]->Endpoint(w.s));
  }
  // --offload nvme: one DiskTier for every rank (names carry the rank's stage, tp
  // and dp coordinates).
  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  if (options.offload == OffloadKind::kNvme) {
    // A directory of this job's own under --nvme_dir, so that its removal removes
    // nothing of the user's.
    LOOM_ASSIGN_OR_RETURN(disk,
                          OpenOffloadDisk(options, absl::StrCat("train.", getpid()), &made_dirs));
  }

  TrainSummary summary;
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

std::vector<std::string> ShmGroupIds(const TrainJobOptions& o, absl::string_view job_id) {
  std::vector<std::string> ids = {ShmGroupId(job_id, "w", 0)};
  for (int i = 0; i < o.dp * o.pp; ++i) ids.push_back(ShmGroupId(job_id, "t", i));
  for (int i = 0; i < o.pp * o.tp; ++i) ids.push_back(ShmGroupId(job_id, "d", i));
  for (int i = 0; i < o.dp * o.tp; ++i) ids.push_back(ShmGroupId(job_id, "p", i));
  return ids;
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
  return RunTrainJobProcess(options, process.rank, process.size, "shm", connect, on_step);
}

absl::StatusOr<std::optional<TrainSummary>> RunTrainJobProcess(
    const TrainJobOptions& options, int rank, int size, absl::string_view transport,
    const GroupConnector& connect, const std::function<void(const StepReport&)>& on_step) {
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<JobSetup> setup, SetupJob(options));
  const int world = options.dp * options.pp * options.tp;
  if (size != world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport ", transport, ": the job has ", size, " processes, --dp ",
                     options.dp, " x --pp ", options.pp, " x --tp ", options.tp, " needs ", world));
  }
  RankWiring w;
  PlaceRank(options, rank, w);
  CommunicatorOptions comm_options;
  comm_options.timeout = kCollectiveTimeout;
  auto make = [&](absl::StatusOr<std::unique_ptr<Transport>> endpoint)
      -> absl::StatusOr<std::unique_ptr<Communicator>> {
    if (!endpoint.ok()) return endpoint.status();
    w.endpoints.push_back(std::move(*endpoint));
    return Communicator::Create(w.endpoints.back(), comm_options);
  };
  const int dp = options.dp, pp = options.pp, tp = options.tp;
  LOOM_ASSIGN_OR_RETURN(w.world, make(connect("w", 0, w.rank, world)));
  LOOM_ASSIGN_OR_RETURN(w.tp, make(connect("t", w.d * pp + w.s, w.t, tp)));
  LOOM_ASSIGN_OR_RETURN(w.dp, make(connect("d", w.s * tp + w.t, w.d, dp)));
  LOOM_ASSIGN_OR_RETURN(w.pp, connect("p", w.d * tp + w.t, w.s, pp));

  std::vector<std::string> made_dirs;
  std::unique_ptr<DiskTier> disk;
  auto remove_dirs = absl::MakeCleanup([&] {
    disk.reset();
    RemoveDirectories(made_dirs);
  });
  std::optional<TrainSummary> summary;
  if (w.rank == 0) summary.emplace();
  absl::Status status;
  if (options.offload == OffloadKind::kNvme) {
    absl::StatusOr<std::unique_ptr<DiskTier>> opened =
        OpenOffloadDisk(options, absl::StrCat("rank", w.rank), &made_dirs);
    status = opened.status();
    if (opened.ok()) disk = std::move(*opened);
  }
  if (status.ok()) {
    status =
        RunRank(options, *setup, w, disk.get(), on_step, summary.has_value() ? &*summary : nullptr);
  }
  if (!status.ok()) {
    AbortRank(w, status);
    return absl::Status(status.code(), absl::StrCat("rank ", w.rank, ": ", status.message()));
  }
  return summary;
}

}  // namespace loom

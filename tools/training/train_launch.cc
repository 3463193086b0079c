#include "tools/training/train_launch.h"

#include <unistd.h>

#include <climits>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/launcher.h"
#include "tools/training/job_checkpoint.h"

namespace loom {

std::optional<std::pair<int, int64_t>> SmallerDataParallel(int dp, int64_t microbatches, int pp) {
  const int64_t global = int64_t{dp} * microbatches;
  for (int smaller = dp - 1; smaller >= 1; --smaller) {
    if (global % smaller == 0 && global / smaller >= pp) {
      return std::make_pair(smaller, global / smaller);
    }
  }
  return std::nullopt;
}

int LaunchTrainRanks(const TrainCommand& command, int argc, char** argv) {
  const TrainJobOptions& o = command.options;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    cli::PrintError("train", absl::StrCat("--transport shm: cannot find this binary: "
                                          "readlink(/proc/self/exe): ",
                                          StrError(errno)));
    return cli::kExitRuntime;
  }
  LaunchOptions launch;
  launch.num_ranks = JobWorldSize(o);
  launch.argv.push_back(std::string(self, static_cast<size_t>(n)));
  for (int i = 1; i < argc; ++i) launch.argv.push_back(argv[i]);
  launch.job_id = command.launch.job_id;
  if (launch.job_id.empty()) launch.job_id = GenerateJobId();
  // A restart resumes from the newest checkpoint of --checkpoint_dir (the later
  // flags win over the user's own --resume_from).
  RestartPolicy restarts;
  restarts.max_restarts = command.launch.max_restarts;
  restarts.restart_argv = launch.argv;
  restarts.restart_argv.push_back("--resume");
  restarts.restart_argv.push_back("--resume_from=");
  int dp = o.dp;
  int64_t microbatches = o.microbatches;
  restarts.on_restart = [&](int restart, const LaunchResult& failed, LaunchOptions* next) {
    std::cerr << Describe(failed);
    std::string mesh;
    if (command.launch.elastic_dp) {
      // The failed rank's host is gone: fewer dp replicas, the same global batch.
      const std::optional<std::pair<int, int64_t>> smaller =
          SmallerDataParallel(dp, microbatches, o.pp);
      const int min_ranks = command.launch.min_ranks;
      if (!smaller.has_value() || smaller->first * o.tp * o.pp * o.cp < min_ranks) {
        std::cerr << absl::StrFormat(
            "train: no restart: --elastic_dp has no smaller dp for dp %d x %d microbatches "
            "with at least --min_ranks %d ranks\n",
            dp, microbatches, min_ranks);
        return false;
      }
      dp = smaller->first;
      microbatches = smaller->second;
      next->num_ranks = int64_t{dp} * o.tp * o.pp * o.cp;
      next->argv.push_back(absl::StrCat("--dp=", dp));
      next->argv.push_back(absl::StrCat("--microbatches=", microbatches));
      mesh = absl::StrFormat(" at dp %d (%d microbatches, %d ranks)", dp, microbatches,
                             next->num_ranks);
    }
    const absl::StatusOr<int64_t> step = LatestCheckpointStep(o.checkpoint_dir);
    std::cerr << absl::StrFormat(
        "train: restart %d of %d: rank %d %s; resuming from %s%s\n", restart, restarts.max_restarts,
        failed.first_failed_rank.value_or(-1), failed.first_failure,
        step.ok() ? absl::StrFormat("the checkpoint of step %d in %s", *step, o.checkpoint_dir)
                  : std::string("step 0 (no checkpoint yet)"),
        mesh);
    return true;
  };
  const absl::StatusOr<RestartedLaunch> result = LaunchWithRestarts(launch, restarts);
  // The launcher removed each job's segments (/dev/shm/loom.<job_id>.*, every
  // group's) and its directory.
  if (!result.ok()) return cli::Fail("train", result.status());
  if (result->last.ExitCode() != 0) std::cerr << Describe(result->last);
  if (result->restarts > 0) {
    std::cerr << absl::StrFormat("train: %d restart%s\n", result->restarts,
                                 result->restarts == 1 ? "" : "s");
  }
  return result->last.ExitCode();
}

absl::StatusOr<ProcessRank> JoinShmJob(const TrainLaunchOptions& launch) {
  absl::StatusOr<ShmOptions> process = ShmOptionsFromEnvironment();
  if (!process.ok()) return process.status();
  process->heartbeat_timeout = launch.heartbeat_timeout;
  ProcessRank me;
  me.rank = process->rank;
  me.hosts = JobHosts::OneHost(process->size);
  me.connect = [process = *process](absl::string_view dimension, int group, int group_rank,
                                    int group_size) -> absl::StatusOr<std::unique_ptr<Transport>> {
    ShmOptions shm = process;
    shm.job_id = ShmGroupId(process.job_id, dimension, group);
    shm.rank = group_rank;
    shm.size = group_size;
    return ConnectShmTransport(shm);
  };
  return me;
}

absl::StatusOr<ProcessRank> JoinMpiJob(const TrainLaunchOptions& launch,
                                       const MpiSession& session) {
  ProcessRank me;
  LOOM_ASSIGN_OR_RETURN(const std::vector<int> host_of_process, MpiNodeOfRank(MPI_COMM_WORLD));
  if (static_cast<int>(host_of_process.size()) != session.world_size()) {
    return absl::InternalError(absl::StrCat("MpiNodeOfRank named ", host_of_process.size(),
                                            " hosts' ranks for a world of ", session.world_size()));
  }
  LOOM_ASSIGN_OR_RETURN(me.hosts, JobHosts::Number(host_of_process));
  me.rank = me.hosts.JobRankOf(session.world_rank());
  // The group number is the split's color, the rank in the group its key.
  MpiTransportOptions mpi_options;
  mpi_options.heartbeat_timeout = launch.heartbeat_timeout;
  me.connect = [mpi_options](absl::string_view, int group, int group_rank,
                             int) -> absl::StatusOr<std::unique_ptr<Transport>> {
    return ConnectMpiTransportSplit(MPI_COMM_WORLD, group, group_rank, mpi_options);
  };
  return me;
}

}  // namespace loom

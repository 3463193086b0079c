// How //tools:train's ranks come to exist when they are processes:
//   - LaunchTrainRanks: run directly with --transport shm, train starts its ranks
//     itself (tools/launcher.h), restarting them from the latest checkpoint after a
//     failure (--max_restarts), at a smaller dp with --elastic_dp;
//   - JoinShmJob / JoinMpiJob: a process that is one rank learns its job rank (its
//     launcher's rank, numbered host by host: job_hosts.h), the job's hosts, and how
//     it joins each mesh dimension's groups (GroupConnector, train_job.h).
//
//   if (launcher) return LaunchTrainRanks(command, argc, argv);   // the job's exit code
//   LOOM_ASSIGN_OR_RETURN(ProcessRank me, JoinShmJob(command.launch));
//   RunTrainJobProcess(command.options, me.rank, me.hosts, "shm", me.connect, on_step);
#ifndef LOOM_TOOLS_TRAINING_TRAIN_LAUNCH_H_
#define LOOM_TOOLS_TRAINING_TRAIN_LAUNCH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "tools/training/job_hosts.h"
#include "tools/training/train_command.h"
#include "tools/training/train_job.h"

namespace loom {

// SmallerDataParallel: the largest dp' < dp whose replicas split the global batch
// (dp x microbatches) evenly into at least `pp` microbatches each, with that count;
// nullopt when there is none.
std::optional<std::pair<int, int64_t>> SmallerDataParallel(int dp, int64_t microbatches, int pp);

// LaunchTrainRanks runs the job as processes over shm: this binary again (argv[0]
// resolved through /proc/self/exe), once per rank, with the same arguments. Returns
// the job's exit code; a failing rank is named on stderr, and every segment and
// directory the job made is removed.
int LaunchTrainRanks(const TrainCommand& command, int argc, char** argv);

// One process's place in a job of processes: its job rank (numbered by host,
// job_hosts.h), the job's hosts, and how it joins its groups.
struct ProcessRank {
  int rank = 0;
  JobHosts hosts = JobHosts::OneHost(1);
  GroupConnector connect;
};

// JoinShmJob: a rank started by LaunchTrainRanks (its environment names the job).
absl::StatusOr<ProcessRank> JoinShmJob(const TrainLaunchOptions& launch);

// JoinMpiJob: a rank of the mpirun job `session` belongs to; each line of a mesh
// dimension is an MPI_Comm_split of the world, keyed by job rank. The hosts come from
// MpiNodeOfRank: a job that mpirun dealt over its hosts (--map-by node) is numbered
// host by host. Collective over MPI_COMM_WORLD; errors as MpiNodeOfRank's.
absl::StatusOr<ProcessRank> JoinMpiJob(const TrainLaunchOptions& launch,
                                       const MpiSession& session);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_LAUNCH_H_

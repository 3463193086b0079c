// RunRank: one rank of the training job, from its wiring (a communicator per mesh
// dimension and the pipeline endpoint) to its last step. Ranks may be threads of
// one process or processes: everything a rank reports to world rank 0 travels
// through the world communicator.
//
// Example (one rank; tools/training/train_job.cc wires them for threads and processes):
//   RankWiring w;
//   w.place = *PlaceRank(mesh, rank);       // its coordinates and groups (job_mesh.h)
//   ...w.tp, w.dp, w.cp, w.world = communicators; w.pp = the pipeline endpoint...
//   absl::Status s = RunRank(options, *setup, w, disk, on_step, rank == 0 ? &summary : nullptr);
//   if (!s.ok()) AbortRank(w, s);           // its peers stop at once
#ifndef LOOM_TOOLS_TRAINING_RANK_LOOP_H_
#define LOOM_TOOLS_TRAINING_RANK_LOOP_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "collectives/communicator.h"
#include "collectives/transport/transport.h"
#include "offload/disk/disk_tier.h"
#include "tools/training/job_mesh.h"
#include "tools/training/job_setup.h"
#include "tools/training/train_options.h"

namespace loom {

// The communicators and the pipeline endpoint of one rank: separate transports
// for each dimension, since the ZeRO engine drives dp from its own thread while
// the layers drive tp and the executor drives pp.
struct RankWiring {
  RankPlace place;
  // dp is the parameters' group, dp x cp (place.dpcp_group; the dp group when cp is
  // 1), where the optimizer averages the gradients; cp the context-parallel ring the
  // attention layers drive (null when cp is 1).
  std::unique_ptr<Communicator> tp, dp, cp, world;
  // Every endpoint of the rank, aborted when it fails so that its peers in each
  // group stop waiting at once instead of at their deadlines.
  std::vector<std::shared_ptr<Transport>> endpoints;
  std::unique_ptr<Transport> pp;
};

// RunRank trains one rank. World rank 0 collects every rank's figures each step
// (through the world communicator), calls `on_step` and fills `*summary` (null on
// the other ranks).
absl::Status RunRank(const TrainJobOptions& options, const JobSetup& setup, RankWiring& w,
                     DiskTier* disk, const std::function<void(const StepReport&)>& on_step,
                     TrainSummary* summary);

// AbortRank aborts every endpoint of a failed rank, which tells its peers in each
// group at once, instead of at their deadlines.
void AbortRank(RankWiring& w, const absl::Status& reason);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_RANK_LOOP_H_

// JobMesh: where each rank of the training job sits and which groups it joins,
// computed by topology's ParallelConfig and Mesh (the same code behind //tools:mesh),
// so that the job and the mesh tool print the same groups for the same flags.
//
// The job lays its ranks out tensor-parallel fastest, then context parallel, then
// pipeline, then data parallel (Megatron's order string "tp-cp-pp-dp", picotron's
// dp x pp x cp x tp grid): a node of consecutive ranks holds whole tp groups, then
// whole cp rings, then whole pipelines.
//
// Example (--dp=2 --pp=2 --tp=2):
//   LOOM_ASSIGN_OR_RETURN(Mesh mesh, JobMeshOf(options));
//   LOOM_ASSIGN_OR_RETURN(RankPlace place, PlaceRank(mesh, 5));
//   // place.d == 1, place.s == 0, place.t == 1: dp coordinate, pipeline stage, tp rank
//   // place.tp_group == 2: mesh.AllGroups("tp")[2] == {4, 5}, where 5 is rank place.t
//   // place.dp_group == 1: {1, 5};  place.pp_group == 3: {5, 7}
//   JobMeshCommand(options);  // "--shape=dp=2,pp=2,cp=1,tp=2 --order=tp-cp-pp-dp"
//   // With options.cp = 2 (16 ranks), rank 5: t 1, c 0, s 1, d 0; its cp ring is
//   // {5, 7}, and its dp x cp group (where the ZeRO engine runs) {5, 7, 13, 15}.
#ifndef LOOM_TOOLS_TRAINING_JOB_MESH_H_
#define LOOM_TOOLS_TRAINING_JOB_MESH_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/training/train_options.h"
#include "topology/mesh.h"

namespace loom {

// The job's layout, first name fastest (ParallelConfig::ToMesh's order string).
inline constexpr char kJobMeshOrder[] = "tp-cp-pp-dp";

// JobMeshOf returns the mesh of dp, pp, cp and tp in kJobMeshOrder.
// InvalidArgument (from ParallelConfig) for a size below 1.
absl::StatusOr<Mesh> JobMeshOf(const TrainJobOptions& options);

// A rank's coordinates and, for each dimension, the index of its group in
// mesh.AllGroups(dimension) (groups ordered by their first rank; the job names
// its transports' groups by these indices).
struct RankPlace {
  int rank = 0;
  int d = 0, s = 0, c = 0, t = 0;  // dp coordinate, pipeline stage, cp rank, tp rank
  int dp_group = 0, pp_group = 0, cp_group = 0, tp_group = 0;
  // The dp x cp group (mesh.AllGroups("dp-cp")): the ranks that hold the same
  // parameters, and this rank's index in it (d * cp + c).
  int dpcp_group = 0, dpcp_index = 0;
};

// PlaceRank returns where `rank` sits in `mesh` (a mesh with dp, pp, cp and tp
// dimensions). OutOfRange for a rank outside the mesh; NotFound for a mesh
// without one of those dimensions.
absl::StatusOr<RankPlace> PlaceRank(const Mesh& mesh, int rank);

// JobMeshCommand returns the //tools:mesh flags that print the job's mesh.
std::string JobMeshCommand(const TrainJobOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_MESH_H_

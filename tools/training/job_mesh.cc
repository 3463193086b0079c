#include "tools/training/job_mesh.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

ParallelConfig ConfigOf(const TrainJobOptions& options) {
  ParallelConfig config;
  config.dp = options.dp;
  config.pp = options.pp;
  config.tp = options.tp;
  config.cp = options.cp;
  return config;
}

// The index of the group along `dimension` that holds `rank`.
absl::StatusOr<int> GroupIndex(const Mesh& mesh, int64_t rank, absl::string_view dimension) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> groups, mesh.AllGroups(dimension));
  LOOM_ASSIGN_OR_RETURN(const int64_t first, mesh.GroupFirst(rank, dimension));
  // AllGroups orders the groups by their first rank.
  const auto it = std::lower_bound(
      groups.begin(), groups.end(), first,
      [](const std::vector<int64_t>& group, int64_t value) { return group.front() < value; });
  if (it == groups.end() || it->front() != first) {
    return absl::InternalError(absl::StrCat("rank ", rank, " is in no ", dimension, " group"));
  }
  return static_cast<int>(it - groups.begin());
}

}  // namespace

absl::StatusOr<Mesh> JobMeshOf(const TrainJobOptions& options) {
  return ConfigOf(options).ToMesh(kJobMeshOrder);
}

absl::StatusOr<RankPlace> PlaceRank(const Mesh& mesh, int rank) {
  RankPlace place;
  place.rank = rank;
  LOOM_ASSIGN_OR_RETURN(const int64_t d, mesh.Coordinate(rank, "dp"));
  LOOM_ASSIGN_OR_RETURN(const int64_t s, mesh.Coordinate(rank, "pp"));
  LOOM_ASSIGN_OR_RETURN(const int64_t c, mesh.Coordinate(rank, "cp"));
  LOOM_ASSIGN_OR_RETURN(const int64_t t, mesh.Coordinate(rank, "tp"));
  LOOM_ASSIGN_OR_RETURN(const int64_t cp, mesh.DimSize("cp"));
  place.d = static_cast<int>(d);
  place.s = static_cast<int>(s);
  place.c = static_cast<int>(c);
  place.t = static_cast<int>(t);
  LOOM_ASSIGN_OR_RETURN(place.dp_group, GroupIndex(mesh, rank, "dp"));
  LOOM_ASSIGN_OR_RETURN(place.pp_group, GroupIndex(mesh, rank, "pp"));
  LOOM_ASSIGN_OR_RETURN(place.cp_group, GroupIndex(mesh, rank, "cp"));
  LOOM_ASSIGN_OR_RETURN(place.tp_group, GroupIndex(mesh, rank, "tp"));
  LOOM_ASSIGN_OR_RETURN(place.dpcp_group, GroupIndex(mesh, rank, "dp-cp"));
  place.dpcp_index = static_cast<int>(d * cp + c);
  return place;
}

std::string JobMeshCommand(const TrainJobOptions& options) {
  return absl::StrCat("--shape=dp=", options.dp, ",pp=", options.pp, ",cp=", options.cp,
                      ",tp=", options.tp, " --order=", kJobMeshOrder);
}

}  // namespace loom

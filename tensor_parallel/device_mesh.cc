#include "tensor_parallel/device_mesh.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<DeviceMesh> DeviceMesh::Create(const Mesh& mesh, const Communicator& world) {
  if (mesh.world_size() != world.size()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMesh: mesh ", mesh.ToString(), " has ",
                                                   mesh.world_size(), " ranks, world size is ",
                                                   world.size()));
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> coords, mesh.Coordinates(world.rank()));
  std::vector<int> coordinates(coords.begin(), coords.end());
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const MeshDim& dim : mesh.dims()) {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, world.SplitByMesh(mesh, dim.name));
    comms.push_back(std::move(comm));
  }
  return DeviceMesh(mesh, world.rank(), std::move(coordinates), std::move(comms));
}

}  // namespace loom

// DeviceMesh: this rank's view of a topology Mesh for tensor parallelism: the mesh,
// the rank's coordinates, and one Communicator per mesh dimension (the group of
// ranks that differ only along that dimension), so a placement on mesh dimension i
// communicates over comm(i).
//
// Create is collective over `world`: every rank of the mesh calls it, with the same
// mesh, in the same order relative to its other Split calls.
//
// Example (4 ranks as dp=2 x tp=2; rank 3 shown):
//   LOOM_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
//   LOOM_ASSIGN_OR_RETURN(DeviceMesh dm, DeviceMesh::Create(mesh, *world));
//   dm.ndim();            // 2
//   dm.coordinate(1);     // 1      (tp coordinate of rank 3)
//   dm.size(1);           // 2
//   dm.comm(1).size();    // 2      (ranks {2, 3})
#ifndef LOOM_TENSOR_PARALLEL_DEVICE_MESH_H_
#define LOOM_TENSOR_PARALLEL_DEVICE_MESH_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "topology/mesh.h"

namespace loom {

class DeviceMesh {
 public:
  // Create splits `world` along every dimension of `mesh`. InvalidArgument when the
  // mesh's world size differs from world.size() (both named).
  static absl::StatusOr<DeviceMesh> Create(const Mesh& mesh, const Communicator& world);

  DeviceMesh(DeviceMesh&&) = default;
  DeviceMesh& operator=(DeviceMesh&&) = default;

  const Mesh& mesh() const { return mesh_; }
  int ndim() const { return static_cast<int>(comms_.size()); }
  int64_t rank() const { return rank_; }
  // coordinate / size of this rank along mesh dimension `dim` (0 <= dim < ndim()).
  int coordinate(int dim) const { return coordinates_[static_cast<size_t>(dim)]; }
  int size(int dim) const { return comms_[static_cast<size_t>(dim)]->size(); }
  // comm returns the communicator along mesh dimension `dim`; its rank() equals
  // coordinate(dim).
  Communicator& comm(int dim) const { return *comms_[static_cast<size_t>(dim)]; }

 private:
  DeviceMesh(Mesh mesh, int64_t rank, std::vector<int> coordinates,
             std::vector<std::unique_ptr<Communicator>> comms)
      : mesh_(std::move(mesh)),
        rank_(rank),
        coordinates_(std::move(coordinates)),
        comms_(std::move(comms)) {}

  Mesh mesh_;
  int64_t rank_ = 0;
  std::vector<int> coordinates_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_DEVICE_MESH_H_

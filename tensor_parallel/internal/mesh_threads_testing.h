// RunOnMesh (testonly): runs `body` once per rank of `mesh`, each rank a thread with
// its own DeviceMesh over a fresh inproc group, and returns every rank's status.
//
// Example:
//   std::vector<absl::Status> s = RunOnMesh(mesh, [&](const DeviceMesh& dm) {
//     return dm.comm(0).Barrier();
//   });   // one OK status per rank
#ifndef LOOM_TENSOR_PARALLEL_INTERNAL_MESH_THREADS_TESTING_H_
#define LOOM_TENSOR_PARALLEL_INTERNAL_MESH_THREADS_TESTING_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tensor_parallel/device_mesh.h"
#include "topology/mesh.h"

namespace loom {
namespace tensor_parallel_internal {

// RunOnMesh returns one status per rank: the body's, or the error that kept the
// rank from reaching it. A stuck collective fails after `timeout` rather than hang.
std::vector<absl::Status> RunOnMesh(const Mesh& mesh,
                                    const std::function<absl::Status(const DeviceMesh&)>& body,
                                    absl::Duration timeout = absl::Seconds(30));

}  // namespace tensor_parallel_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_INTERNAL_MESH_THREADS_TESTING_H_

#include "tensor_parallel/internal/mesh_threads_testing.h"

#include <memory>
#include <thread>
#include <utility>

#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

absl::Status RunRank(InprocGroup& group, int rank, const Mesh& mesh,
                     const std::function<absl::Status(const DeviceMesh&)>& body,
                     absl::Duration timeout) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, group.Endpoint(rank));
  CommunicatorOptions options;
  options.timeout = timeout;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world,
                        Communicator::Create(std::move(endpoint), options));
  LOOM_ASSIGN_OR_RETURN(DeviceMesh device_mesh, DeviceMesh::Create(mesh, *world));
  return body(device_mesh);
}

}  // namespace

std::vector<absl::Status> RunOnMesh(const Mesh& mesh,
                                    const std::function<absl::Status(const DeviceMesh&)>& body,
                                    absl::Duration timeout) {
  const int world = static_cast<int>(mesh.world_size());
  std::vector<absl::Status> statuses(static_cast<size_t>(world));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(world);
  if (!group.ok()) {
    for (absl::Status& s : statuses) s = group.status();
    return statuses;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      statuses[static_cast<size_t>(r)] = RunRank(**group, r, mesh, body, timeout);
    });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

}  // namespace tensor_parallel_internal
}  // namespace loom

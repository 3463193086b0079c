// GroupLayout: where the ranks of a process group live, and so which transports
// connect them. Every rank publishes its identity (host id, hostname, pid) in the
// group's store; from the same list each rank plans the same layout:
//   - one host: Loom's shm transport among all ranks;
//   - several hosts: two levels, MPI (under mpirun) or Gloo over TCP between hosts
//     and shm inside each host, when every host holds the same number k > 1 of
//     ranks, in blocks (torchrun's and mpirun's by slot) or in any order (mpirun
//     --map-by node: the Communicator then numbers them host by host,
//     CommunicatorOptions::node_of_rank); otherwise MPI or Gloo among all ranks,
//     without the shm level, still numbered host by host;
//   - TransportChoice::kGloo: Gloo among all ranks, without the shm level.
//
// Example (4 ranks, two per host):
//   std::vector<RankIdentity> ids = {{"a", "a", 10, -1}, {"a", "a", 11, -1},
//                                    {"b", "b", 20, -1}, {"b", "b", 21, -1}};
//   GroupLayout layout = *PlanGroupLayout(ids, 2, TransportChoice::kAuto);
//   // layout.two_level == true, layout.hosts == 2, layout.ranks_per_node == 2,
//   // layout.node_of_rank == {0, 0, 1, 1},
//   // layout.node == 1, layout.local_rank == 0, layout.local_size == 2
//   layout.Describe();  // "gloo between 2 hosts, shm inside each (2 ranks per host)"
#ifndef LOOM_INTEGRATIONS_TORCH_GROUP_LAYOUT_H_
#define LOOM_INTEGRATIONS_TORCH_GROUP_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "integrations/torch/backend_options.h"

namespace loom {
namespace pytorch {

// What a rank tells the others about itself.
struct RankIdentity {
  std::string host_id;   // ranks with equal ids share /dev/shm
  std::string hostname;  // for messages
  int64_t pid = 0;
  int mpi_rank = -1;     // in MPI_COMM_WORLD, when started by mpirun
};

// RankIdentity as one line of text for the store ("host_id\thostname\tpid\tmpi_rank"),
// and back.
// ParseRankIdentity: InvalidArgument quoting the text when it is malformed.
std::string FormatRankIdentity(const RankIdentity& identity);
absl::StatusOr<RankIdentity> ParseRankIdentity(absl::string_view text);

struct GroupLayout {
  // MPI or Gloo between hosts (and shm inside, when ranks_per_node > 0), or shm alone.
  bool two_level = false;
  // Two levels: whether MPI connects the hosts (else Gloo).
  bool mpi = false;
  // Distinct host ids, numbered in order of their first rank.
  int hosts = 1;
  // Two levels: ranks per host when every host holds that many (more than one), in
  // any order, and shm is allowed (then shm carries the intra-host phases); 0
  // otherwise.
  int ranks_per_node = 0;
  // Two levels with shm allowed and a host of two or more ranks: every rank's host
  // number, for
  // CommunicatorOptions::node_of_rank (the Communicator numbers the ranks host by
  // host); empty otherwise (transport gloo keeps the launcher's order).
  std::vector<int> node_of_rank;
  // node_of_rank puts ranks of one host apart (the Communicator renumbers them).
  bool numbered_by_host = false;
  // This rank's host number, its rank among the group's ranks on that host and
  // their number (in group-rank order).
  int node = 0;
  int local_rank = 0;
  int local_size = 1;
  // Two levels over gloo with shm allowed, and some host holding two or more ranks:
  // every message between two ranks of a host takes shm (a routed transport,
  // collectives/transport/routed), whether or not the hosts hold equal blocks.
  bool routed = false;
  // The group ranks on this rank's host, in rank order (local_rank indexes it).
  std::vector<int> host_ranks;

  std::string Describe() const;
};

// PlanGroupLayout plans rank `rank`'s view of the group whose ranks are `ranks` (in
// group-rank order); MPI connects hosts when every rank has an MPI rank (mpirun
// started them) and `choice` is kAuto or kMpi. FailedPrecondition naming the hosts
// when `choice` is kShm and the ranks span several hosts, or kMpi and some rank was
// not started by mpirun; InvalidArgument for a rank outside the list.
absl::StatusOr<GroupLayout> PlanGroupLayout(absl::Span<const RankIdentity> ranks, int rank,
                                            TransportChoice choice);

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_GROUP_LAYOUT_H_

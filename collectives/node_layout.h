// NodeLayout: which ranks of a communicator share a host, found from the ranks' own
// host names, for transports that do not know it (gloo: one TCP pair per pair of
// ranks, wherever they run). With it a program gives the Communicator its node layout
// (CommunicatorOptions::ranks_per_node and a node transport), so that direct, the
// trees and hierarchical run by nodes and bytes cross each host's link once each way.
//
// Example (every rank of a gloo job, after connecting):
//   LOOM_ASSIGN_OR_RETURN(auto probe, Communicator::Create(transport, {}));
//   LOOM_ASSIGN_OR_RETURN(NodeLayout layout, FindNodeLayout(*probe));
//   // hosts h1,h1,h2,h2: layout.ranks_per_node == 2, layout.node == rank / 2,
//   // layout.local_rank == rank % 2;
//   // hosts h1,h2,h1,h2: ranks_per_node 0 (not in blocks) but ranks_per_host 2 and
//   // node_of_rank {0,1,0,1}: CommunicatorOptions::node_of_rank numbers them host by
//   // host; h1,h1,h1,h2: ranks_per_host 0 (hosts of 3 and 1), node_of_rank {0,0,0,1}.
//   CommunicatorOptions options;
//   options.node_of_rank = layout.node_of_rank;
#ifndef LOOM_COLLECTIVES_NODE_LAYOUT_H_
#define LOOM_COLLECTIVES_NODE_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace loom {

// A host name as the ranks exchange it: at most this many bytes with its terminator.
inline constexpr size_t kHostNameBytes = 64;

// SentHostName: `host_name` as AllGatherHostNames sends it: itself when shorter than
// kHostNameBytes, else its first 46 bytes, "~" and 16 hex digits of a hash of all of
// it (63 bytes), so that long names that differ only at their ends stay apart.
std::string SentHostName(const std::string& host_name);

// AllGatherHostNames: every rank's `host_name` (empty: gethostname()), as
// SentHostName makes it, in rank order,
// on every rank. A collective call (one all-gather of kHostNameBytes per rank, by the
// ring, whatever the communicator's model would choose).
absl::StatusOr<std::vector<std::string>> AllGatherHostNames(Communicator& comm,
                                                            const std::string& host_name = "");

struct NodeLayout {
  // Ranks per node when there are two or more hosts and every host holds the same
  // number k > 1 of consecutive ranks (CommunicatorOptions::ranks_per_node's layout);
  // 0 otherwise.
  int ranks_per_node = 0;
  // Ranks per host when there are two or more hosts and each holds the same number
  // k > 1, in any order; 0 otherwise.
  int ranks_per_host = 0;
  int node = 0;        // this rank's host, numbered as node_of_rank numbers it
  int local_rank = 0;  // and its place among that host's ranks, in rank order
  int hosts = 1;       // distinct host names
  std::vector<std::string> host_names;  // every rank's, in rank order
  // Every rank's host, numbered in the order of each host's lowest rank (rank 0's is
  // 0): the layout CommunicatorOptions::node_of_rank takes, whatever the order.
  std::vector<int> node_of_rank;
};

// PlanNodeLayout: the layout of ranks on `host_names` (rank order), seen by `rank`.
NodeLayout PlanNodeLayout(const std::vector<std::string>& host_names, int rank);

// FindNodeLayout: AllGatherHostNames, then PlanNodeLayout for this rank.
absl::StatusOr<NodeLayout> FindNodeLayout(Communicator& comm, const std::string& host_name = "");

}  // namespace loom

#endif  // LOOM_COLLECTIVES_NODE_LAYOUT_H_

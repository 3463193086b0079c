// NodeLayout: which host ("node") each rank runs on, for hierarchical collectives.
// Ranks are packed onto nodes in contiguous blocks, as mpirun's default by-slot
// mapping and torchrun do: node = rank / ranks_per_node.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(NodeLayout layout, NodeLayout::Create(8, 4));
//   layout.num_nodes();                  // 2
//   layout.NodeOf(5);                    // 1
//   layout.LocalRank(5);                 // 1
//   layout.RanksOnNode(1);               // {4, 5, 6, 7}
//   layout.CrossesNodes({0, 4});         // true   (a dp group spanning hosts)
//   layout.CrossesNodes({4, 5});         // false  (a tp group inside a host)
//   NodeLayout::Create(8, 3);            // InvalidArgument: ranks_per_node=3 does not divide world size 8
#ifndef LOOM_TOPOLOGY_NODE_LAYOUT_H_
#define LOOM_TOPOLOGY_NODE_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

class NodeLayout {
 public:
  // Create returns InvalidArgument when world_size or ranks_per_node is below 1, or
  // when ranks_per_node does not divide world_size.
  static absl::StatusOr<NodeLayout> Create(int64_t world_size, int64_t ranks_per_node);

  int64_t world_size() const { return world_size_; }
  int64_t ranks_per_node() const { return ranks_per_node_; }
  int64_t num_nodes() const { return world_size_ / ranks_per_node_; }

  // NodeOf / LocalRank: OutOfRange for a rank outside [0, world_size).
  absl::StatusOr<int64_t> NodeOf(int64_t rank) const;
  absl::StatusOr<int64_t> LocalRank(int64_t rank) const;
  // RanksOnNode lists a node's ranks in ascending order; OutOfRange for a bad node.
  absl::StatusOr<std::vector<int64_t>> RanksOnNode(int64_t node) const;
  // CrossesNodes is true when the ranks of `group` are not all on one node;
  // OutOfRange if a rank is invalid. An empty group does not cross.
  absl::StatusOr<bool> CrossesNodes(absl::Span<const int64_t> group) const;

 private:
  NodeLayout(int64_t world_size, int64_t ranks_per_node)
      : world_size_(world_size), ranks_per_node_(ranks_per_node) {}
  absl::Status CheckRank(int64_t rank) const;

  int64_t world_size_;
  int64_t ranks_per_node_;
};

}  // namespace loom

#endif  // LOOM_TOPOLOGY_NODE_LAYOUT_H_

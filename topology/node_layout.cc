#include "topology/node_layout.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<NodeLayout> NodeLayout::Create(int64_t world_size, int64_t ranks_per_node) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " must be >= 1"));
  }
  if (ranks_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ranks_per_node=", ranks_per_node, " must be >= 1"));
  }
  if (world_size % ranks_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ranks_per_node=", ranks_per_node,
                                                   " does not divide world size ", world_size));
  }
  return NodeLayout(world_size, ranks_per_node);
}

absl::Status NodeLayout::CheckRank(int64_t rank) const {
  if (rank < 0 || rank >= world_size_) {
    return absl::OutOfRangeError(
        absl::StrCat("rank ", rank, " is outside world of ", world_size_, " ranks"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NodeLayout::NodeOf(int64_t rank) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  return rank / ranks_per_node_;
}

absl::StatusOr<int64_t> NodeLayout::LocalRank(int64_t rank) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  return rank % ranks_per_node_;
}

absl::StatusOr<std::vector<int64_t>> NodeLayout::RanksOnNode(int64_t node) const {
  if (node < 0 || node >= num_nodes()) {
    return absl::OutOfRangeError(
        absl::StrCat("node ", node, " is outside [0, ", num_nodes(), ")"));
  }
  std::vector<int64_t> ranks(ranks_per_node_);
  for (int64_t i = 0; i < ranks_per_node_; ++i) ranks[i] = node * ranks_per_node_ + i;
  return ranks;
}

absl::StatusOr<bool> NodeLayout::CrossesNodes(absl::Span<const int64_t> group) const {
  bool crosses = false;
  for (const int64_t rank : group) {
    LOOM_RETURN_IF_ERROR(CheckRank(rank));
    if (rank / ranks_per_node_ != group.front() / ranks_per_node_) crosses = true;
  }
  return crosses;
}

}  // namespace loom

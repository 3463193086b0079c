// ResolveNodeOrder: the numbering a Communicator's algorithms run in, from its
// options' node layout (CommunicatorOptions::node_of_rank): the ranks node by node,
// nodes in the order of their lowest rank, ranks in order within a node.
//
// Example (ranks dealt round-robin over two hosts):
//   CommunicatorOptions options;
//   options.node_of_rank = {0, 1, 0, 1};
//   ResolveNodeOrder(4, &options);   // {0, 2, 1, 3}; options.ranks_per_node == 2
#ifndef LOOM_COLLECTIVES_INTERNAL_NODE_ORDER_H_
#define LOOM_COLLECTIVES_INTERNAL_NODE_ORDER_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/algorithm_registry.h"
#include "collectives/communicator.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// ResolveNodeOrder returns the algorithms' order of `size` ranks (element i: the rank
// the algorithms number i) and sets options->ranks_per_node to the ranks every node
// holds (0 where nodes differ). The identity where node_of_rank is empty.
// InvalidArgument naming the values where node_of_rank does not have `size` entries
// or ranks_per_node was given and differs.
absl::StatusOr<std::vector<int>> ResolveNodeOrder(int size, CommunicatorOptions* options);

// RunInNodeOrder runs `fn` on `args`, given in the caller's numbering, over
// `ctx`, whose transport numbers the ranks in `order` (element i: the caller's rank
// the algorithms call i; `position` its inverse). The root is mapped; the blocks
// that are by rank (reduce-scatter's and scatter's input, all-gather's and gather's
// output, both sides of the all-to-alls) go through scratch slots
// kNodeOrderInputSlot and kNodeOrderOutputSlot in the algorithms' order and come
// back in the caller's. All-reduce, broadcast, reduce and barrier move no extra byte.
inline constexpr int kNodeOrderInputSlot = 58;
inline constexpr int kNodeOrderOutputSlot = 59;
absl::Status RunInNodeOrder(AlgorithmFn fn, const CallContext& ctx, absl::Span<const int> order,
                            absl::Span<const int> position, CollectiveArgs args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_NODE_ORDER_H_

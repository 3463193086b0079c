// Hierarchical all-reduce, two levels, for ranks spread over nodes whose links
// inside a node are faster than between nodes (shared memory vs network; NVLink vs
// InfiniBand). With k ranks per node (ctx.ranks_per_node, numbered as topology's
// NodeLayout does: node i holds ranks i*k .. i*k+k-1):
//   1. intra-node reduce-scatter: local rank l ends with block l of its node's sum;
//   2. inter-node all-reduce of block l among the ranks with local rank l, one per
//      node, so only 1/k of the data crosses nodes per rank;
//   3. intra-node all-gather of the k blocks.
// Each level runs the ring over a GroupTransport view of the ranks involved, except
// that phases 1 and 3 run over ctx.node_transport where the communicator has one
// (Loom's shm inside a host while the communicator runs over MPI between hosts).
//
// Example (8 ranks, 4 per node: phase 2 runs on {0,4}, {1,5}, {2,6}, {3,7}):
//   ctx.ranks_per_node = 4;
//   LOOM_RETURN_IF_ERROR(HierarchicalAllReduce(ctx, args));
#ifndef LOOM_COLLECTIVES_HIERARCHICAL_H_
#define LOOM_COLLECTIVES_HIERARCHICAL_H_

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// HierarchicalAllReduce all-reduces args.input into args.output over the node
// layout in ctx.ranks_per_node (0, or the whole group, is one node: a plain ring).
// InvalidArgument when the group size is not a multiple of ranks_per_node; the
// transport's error when a step fails.
absl::Status HierarchicalAllReduce(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_HIERARCHICAL_H_

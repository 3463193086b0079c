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
// The same three phases make the all-reduces that know nothing of nodes node-aware
// (ByNodes below): direct, the binomial tree and the double binary tree run as
// phase 2, between nodes, on 1/k of the data, as NCCL's tree runs between nodes only.
// Run flat with two ranks behind each link, they send more of the buffer across it
// than the ring does (direct on 3 nodes x 2: 8/3 of a buffer each way per node
// against the ring's 5/3), so with k ranks per node they reached 0.51..0.71 of a
// 2 Gbit/s link where the ring reaches 0.92 (collectives/README.md, "At link speed").
//
// Example (8 ranks, 4 per node: phase 2 runs on {0,4}, {1,5}, {2,6}, {3,7}):
//   ctx.ranks_per_node = 4;
//   LOOM_RETURN_IF_ERROR(HierarchicalAllReduce(ctx, args));
//   // direct between the nodes instead of the ring (from kNodeAwareBytes):
//   LOOM_RETURN_IF_ERROR(ByNodes<DirectAllReduce>(ctx, args));
#ifndef LOOM_COLLECTIVES_HIERARCHICAL_H_
#define LOOM_COLLECTIVES_HIERARCHICAL_H_

#include <cstddef>

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"
#include "core/dtype.h"

namespace loom {
namespace collectives_internal {

// HierarchicalAllReduce all-reduces args.input into args.output over the node
// layout in ctx.ranks_per_node (0, or the whole group, is one node: a plain ring).
// InvalidArgument when the group size is not a multiple of ranks_per_node; the
// transport's error when a step fails.
absl::Status HierarchicalAllReduce(const CallContext& ctx, const CollectiveArgs& args);

// An all-reduce over the ranks of ctx.transport, as the algorithms' files define it.
using AllReduceFn = absl::Status (*)(const CallContext&, const CollectiveArgs&);

// NodeAwareAllReduce: the three phases with `across` as phase 2 (HierarchicalAllReduce
// is NodeAwareAllReduce with RingAllReduce). `across` runs on a view of one rank per
// node with ranks_per_node 0 and no node transport, in its own quarter of the steps.
// The bits are the same on every rank (each block is folded in one place inside a
// node and then by `across`, which gives all its ranks the same bits), but they are
// not the rank-order fold: the Communicator's deterministic mode never runs this.
// InvalidArgument when ranks_per_node is not in [1, size) or does not divide the
// group, or the buffers are not `count` elements; else the first phase's error.
absl::Status NodeAwareAllReduce(const CallContext& ctx, const CollectiveArgs& args,
                                AllReduceFn across);

// From this size on, with several ranks on each of several nodes, ByNodes runs by
// nodes. Below it a call is latency-bound: the flat algorithm's one or log n rounds
// beat the 2 (k - 1) ring steps inside a node that the node-aware form adds.
inline constexpr size_t kNodeAwareBytes = size_t{64} << 10;

// AllReduceByNodes: whether ByNodes takes the node-aware form for `bytes` per rank
// on `ranks` ranks with `ranks_per_node` per node (the cost model prices the same).
constexpr bool AllReduceByNodes(int ranks, int ranks_per_node, size_t bytes) {
  return ranks_per_node > 1 && ranks_per_node < ranks && ranks % ranks_per_node == 0 &&
         bytes >= kNodeAwareBytes;
}

// ByNodes<kFlat> is kFlat's all-reduce as the Communicator runs it: node-aware with
// kFlat between nodes where AllReduceByNodes holds, kFlat itself otherwise (one
// node, one rank per node, or small calls). The algorithm table lists direct, the
// binomial tree and the double binary tree this way.
template <AllReduceFn kFlat>
absl::Status ByNodes(const CallContext& ctx, const CollectiveArgs& args) {
  const size_t bytes = args.count * DTypeSize(args.input.dtype());
  if (!AllReduceByNodes(ctx.size(), ctx.ranks_per_node, bytes)) return kFlat(ctx, args);
  return NodeAwareAllReduce(ctx, args, kFlat);
}

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_HIERARCHICAL_H_

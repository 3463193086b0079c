#include "collectives/hierarchical.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/group_transport.h"
#include "collectives/ring.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// Each phase gets its own quarter of the call's steps, so the three phases' messages
// can never match each other even between the same two ranks.
constexpr uint32_t kPhaseSteps = kMaxSteps / 4;

CallContext PhaseContext(const CallContext& ctx, Transport* transport, int phase) {
  CallContext phase_ctx = ctx;
  phase_ctx.transport = transport;
  phase_ctx.tag_base = ctx.tag_base + phase * kPhaseSteps;
  phase_ctx.ranks_per_node = 0;
  phase_ctx.node_transport = nullptr;
  return phase_ctx;
}

}  // namespace

absl::Status HierarchicalAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  const int k = ctx.ranks_per_node;
  if (k <= 0 || k >= ctx.size()) return RingAllReduce(ctx, args);
  return NodeAwareAllReduce(ctx, args, RingAllReduce);
}

absl::Status NodeAwareAllReduce(const CallContext& ctx, const CollectiveArgs& args,
                                AllReduceFn across) {
  const int n = ctx.size();
  const int k = ctx.ranks_per_node;
  if (k < 1 || k >= n || n % k != 0) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchical all-reduce over ", n,
                                                   " ranks with ", k,
                                                   " ranks per node: ", n, " is not a multiple of ",
                                                   k, " or not more than one node"));
  }
  if (args.input.size() != args.count || args.output.size() != args.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hierarchical all-reduce of ", args.count, " elements: input has ", args.input.size(),
        ", output ", args.output.size()));
  }
  const int node = ctx.rank() / k;
  const int local = ctx.rank() % k;
  std::vector<int> node_ranks, peer_ranks;
  for (int l = 0; l < k; ++l) node_ranks.push_back(node * k + l);
  for (int m = 0; m < n / k; ++m) peer_ranks.push_back(m * k + local);

  // The views borrow the call's transport; they live only for this call. Inside the
  // node, the node transport (shm under MPI) replaces the view where there is one.
  const std::shared_ptr<Transport> borrowed(ctx.transport, [](Transport*) {});
  std::unique_ptr<GroupTransport> intra_view;
  Transport* intra = ctx.node_transport;
  if (intra == nullptr) {
    LOOM_ASSIGN_OR_RETURN(intra_view, GroupTransport::Create(borrowed, node_ranks));
    intra = intra_view.get();
  } else if (intra->size() != k || intra->rank() != local) {
    return absl::InvalidArgumentError(absl::StrCat("hierarchical all-reduce: node transport of rank ",
                                                   intra->rank(), " in ", intra->size(),
                                                   " for local rank ", local, " of ", k));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GroupTransport> inter,
                        GroupTransport::Create(borrowed, peer_ranks));

  // 1. Intra-node reduce-scatter: block `local` of output holds the node's sum.
  LOOM_RETURN_IF_ERROR(
      RingReduceScatterBlocks(PhaseContext(ctx, intra, 0), args.op, args.input, args.output));

  // 2. Inter-node all-reduce of that block, in place.
  const BlockRange mine = Block(args.count, k, local);
  CollectiveArgs between = args;
  between.count = mine.count;
  between.input = Slice(args.output, mine);
  between.output = Slice(args.output, mine);
  LOOM_RETURN_IF_ERROR(across(PhaseContext(ctx, inter.get(), 1), between));

  // 3. Intra-node all-gather of the k reduced blocks.
  return RingAllGatherBlocks(PhaseContext(ctx, intra, 2), args.output);
}

}  // namespace collectives_internal
}  // namespace loom

#include "collectives/internal/node_order.h"

#include <cstring>
#include <map>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {

absl::StatusOr<std::vector<int>> ResolveNodeOrder(int size, CommunicatorOptions* options) {
  std::vector<int> order(static_cast<size_t>(size));
  std::iota(order.begin(), order.end(), 0);
  const std::vector<int>& nodes = options->node_of_rank;
  if (nodes.empty()) return order;
  if (nodes.size() != order.size()) {
    return absl::InvalidArgumentError(absl::StrCat("node_of_rank has ", nodes.size(),
                                                   " entries for a group of ", size));
  }
  // Nodes in the order of their lowest rank; each node's ranks in rank order.
  std::vector<int> first_seen;
  std::map<int, std::vector<int>> members;
  for (int r = 0; r < size; ++r) {
    std::vector<int>& of_node = members[nodes[r]];
    if (of_node.empty()) first_seen.push_back(nodes[r]);
    of_node.push_back(r);
  }
  order.clear();
  std::vector<size_t> counts;
  for (int node : first_seen) {
    order.insert(order.end(), members[node].begin(), members[node].end());
    counts.push_back(members[node].size());
  }
  bool equal = true;
  for (size_t c : counts) equal = equal && c == counts.front();
  const int k = equal ? static_cast<int>(counts.front()) : 0;
  if (options->ranks_per_node != 0 && options->ranks_per_node != k) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ranks_per_node ", options->ranks_per_node, " does not fit node_of_rank [",
        absl::StrJoin(nodes, ","), "]: ",
        equal ? absl::StrCat(k, " ranks on each of ", counts.size(), " nodes")
              : absl::StrCat("nodes of ", absl::StrJoin(counts, ", "), " ranks")));
  }
  options->ranks_per_node = k;
  return order;
}

namespace {

// ToNodeOrder: block order[v] of `from` becomes block v of `to`.
void ToNodeOrder(const std::byte* from, std::byte* to, size_t block_bytes,
                 absl::Span<const int> order) {
  for (size_t v = 0; v < order.size(); ++v) {
    std::memcpy(to + v * block_bytes, from + static_cast<size_t>(order[v]) * block_bytes,
                block_bytes);
  }
}

// FromNodeOrder: block v of `from` becomes block order[v] of `to`.
void FromNodeOrder(const std::byte* from, std::byte* to, size_t block_bytes,
                   absl::Span<const int> order) {
  for (size_t v = 0; v < order.size(); ++v) {
    std::memcpy(to + static_cast<size_t>(order[v]) * block_bytes, from + v * block_bytes,
                block_bytes);
  }
}

// Offsets: the prefix sums of `counts` (counts.size() + 1 entries).
std::vector<size_t> Offsets(absl::Span<const size_t> counts) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

absl::Status AllToAllVInNodeOrder(AlgorithmFn fn, const CallContext& ctx,
                                  absl::Span<const int> order, CollectiveArgs args) {
  const size_t n = order.size();
  const size_t width = DTypeSize(args.input.dtype());
  const std::vector<size_t> send_from = Offsets(args.send_counts);
  const std::vector<size_t> receive_at = Offsets(args.recv_counts);
  std::vector<size_t> send(n), receive(n);
  for (size_t v = 0; v < n; ++v) {
    send[v] = args.send_counts[order[v]];
    receive[v] = args.recv_counts[order[v]];
  }
  const std::vector<size_t> staged_send_from = Offsets(send);
  const std::vector<size_t> staged_receive_at = Offsets(receive);
  const BufferView output = args.output;
  if (args.input.size() > 0) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> staged,
                          ctx.scratch->Get(kNodeOrderInputSlot, args.input.size_bytes()));
    for (size_t v = 0; v < n; ++v) {
      std::memcpy(staged.data() + staged_send_from[v] * width,
                  args.input.data() + send_from[order[v]] * width, send[v] * width);
    }
    args.input = ConstBufferView(staged.data(), args.input.size(), args.input.dtype());
  }
  if (output.size() > 0) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> staged,
                          ctx.scratch->Get(kNodeOrderOutputSlot, output.size_bytes()));
    args.output = BufferView(staged.data(), output.size(), output.dtype());
  }
  args.send_counts = send;
  args.recv_counts = receive;
  LOOM_RETURN_IF_ERROR(fn(ctx, args));
  for (size_t v = 0; v < n && output.size() > 0; ++v) {
    std::memcpy(output.data() + receive_at[order[v]] * width,
                args.output.data() + staged_receive_at[v] * width, receive[v] * width);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunInNodeOrder(AlgorithmFn fn, const CallContext& ctx, absl::Span<const int> order,
                            absl::Span<const int> position, CollectiveArgs args) {
  if (args.root >= 0) args.root = position[args.root];
  if (args.kind == CollectiveKind::kAllToAllV) return AllToAllVInNodeOrder(fn, ctx, order, args);
  const bool root = args.root == ctx.rank();
  bool stage_input = false, stage_output = false;
  switch (args.kind) {
    case CollectiveKind::kReduceScatter: stage_input = true; break;
    case CollectiveKind::kScatter: stage_input = root; break;
    case CollectiveKind::kAllGather: stage_output = true; break;
    case CollectiveKind::kGather: stage_output = root; break;
    case CollectiveKind::kAllToAll: stage_input = stage_output = true; break;
    default: break;  // all-reduce, broadcast, reduce, barrier: nothing is by rank
  }
  const DType dtype = args.input.dtype();
  const size_t block = args.count * DTypeSize(dtype);
  const size_t whole = order.size() * args.count;
  if (block == 0) return fn(ctx, args);
  if (stage_input) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> staged,
                          ctx.scratch->Get(kNodeOrderInputSlot, order.size() * block));
    ToNodeOrder(args.input.data(), staged.data(), block, order);
    args.input = ConstBufferView(staged.data(), whole, dtype);
  }
  const BufferView output = args.output;
  if (stage_output) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<std::byte> staged,
                          ctx.scratch->Get(kNodeOrderOutputSlot, order.size() * block));
    args.output = BufferView(staged.data(), whole, dtype);
  }
  LOOM_RETURN_IF_ERROR(fn(ctx, args));
  if (stage_output) FromNodeOrder(args.output.data(), output.data(), block, order);
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom

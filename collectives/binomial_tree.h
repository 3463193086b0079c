// Binomial tree collectives: the latency-optimal algorithms for small messages,
// ceil(log2 n) rounds each, as MPICH's binomial broadcast, reduce, gather and
// scatter (Thakur, Rabenseifner, Gropp 2005, "Optimization of collective
// communication operations in MPICH").
//
// The tree is rooted at args.root by rotating ranks: vrank = (rank - root + n) % n.
// Virtual rank v's parent is v with its lowest set bit b cleared, and its children
// are v + m for every power of two m < b (m < n for the root), as long as v + m < n.
// The subtree of v is the vranks [v, v + b) clipped to n: contiguous, which is what
// lets gather and scatter forward a whole subtree as one message.
//
// Broadcast and reduce are cut into chunks of about ctx.chunk_bytes and pipelined:
// while a rank forwards chunk c, chunk c + 1 is already on its way to it, so a large
// message pays for the depth of the tree once rather than once per chunk.
//
// Buffers follow CollectiveArgs (call_context.h); a buffer that the kind uses only on
// the root (the input of broadcast and scatter, the output of reduce and gather) is
// not looked at on other ranks.
//
// Example (8 ranks, each calls with its own input; n = 8, root = 2):
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kAllReduce;
//   args.op = ReduceOp::kSum;
//   args.count = 3;
//   args.input = ConstBufferView::Of(absl::MakeConstSpan(mine));   // {r, r, r} on rank r
//   args.output = BufferView::Of(absl::MakeSpan(result));
//   LOOM_RETURN_IF_ERROR(BinomialAllReduce(ctx, args));
//   // result == {28, 28, 28} on every rank, the same bits everywhere.
//
//   args.kind = CollectiveKind::kBroadcast;
//   args.root = 2;
//   LOOM_RETURN_IF_ERROR(BinomialBroadcast(ctx, args));
//   // result == {2, 2, 2} on every rank.
#ifndef LOOM_COLLECTIVES_BINOMIAL_TREE_H_
#define LOOM_COLLECTIVES_BINOMIAL_TREE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// BinomialBroadcast copies the root's input (count elements) into every rank's
// output; the root's output may alias its input. Returns InvalidArgument naming the
// values for a root outside [0, n), mismatched dtypes or buffer sizes other than
// count (the input is only read on the root); otherwise the transport's error
// (DeadlineExceeded, Unavailable, ...).
absl::Status BinomialBroadcast(const CallContext& ctx, const CollectiveArgs& args);

// BinomialReduce reduces every rank's input (count elements) with args.op into the
// root's output; other ranks' output is empty and untouched. Each interior rank
// reduces its children's partial results into its own before passing it up. Errors
// as BinomialBroadcast.
absl::Status BinomialReduce(const CallContext& ctx, const CollectiveArgs& args);

// BinomialAllReduce reduces every rank's input into every rank's output: a binomial
// reduce to rank 0 and a binomial broadcast from it, pipelined against each other
// chunk by chunk (a chunk's result goes down while later chunks still go up), so
// every element is reduced once, every rank holds the same bits, and each link
// carries data both ways at once. args.root is ignored. Errors as BinomialBroadcast.
// From kBinomialTwoTreeBytes on two or more ranks the data is cut into blocks, each
// reduced over a tree of its own, the trees' pipelines taking turns. Two trees,
// rooted at rank 0 and rank n - 1: one tree's root, whose children share its link,
// is a leaf of the other (one tree gave the root's link a whole buffer per child:
// at 3 hosts 2 buffers each way; at 2 ranks each rank reduces half the data, and
// over a paced link 16 MiB took 83 ms where one tree took 93). Where two trees still leave some rank's link more
// than the ring's 2 (n - 1) / n of the data each way (3, 5..8 ranks; 4 is even), and
// n <= kBinomialMaxTrees, a tree per rank, rooted at it: every rank is then once at
// every position of a tree, and its link carries what the ring's does.
inline constexpr size_t kBinomialTwoTreeBytes = size_t{64} << 10;
inline constexpr int kBinomialMaxTrees = 8;

// BinomialDegree: the links (children, and the parent unless it is the root) of
// virtual rank v in a binomial tree over n ranks.
constexpr int BinomialDegree(int v, int n) {
  const int64_t span = v == 0 ? int64_t{1} << 31 : (v & -v);
  int degree = v == 0 ? 0 : 1;
  for (int64_t child = 1; child < span && v + child < n; child <<= 1) ++degree;
  return degree;
}

// TwoTreesOverloadALink: whether, with two trees over half the data each, some rank
// moves more than the ring's 2 (n - 1) / n of the data each way (its links in both
// trees, half a buffer each, against 2 (n - 1) / n). Rank r is vrank r in the tree
// rooted at 0 and vrank r + 1 in the one rooted at n - 1.
constexpr bool TwoTreesOverloadALink(int n) {
  for (int r = 0; r < n; ++r) {
    if ((BinomialDegree(r, n) + BinomialDegree((r + 1) % n, n)) * n > 4 * (n - 1)) return true;
  }
  return false;
}

// BinomialAllReduceTrees: how many trees BinomialAllReduce runs on `ranks` ranks for
// `bytes` per rank (1, 2, or `ranks`).
constexpr int BinomialAllReduceTrees(int ranks, size_t bytes) {
  if (ranks < 2 || bytes < kBinomialTwoTreeBytes) return 1;
  return ranks <= kBinomialMaxTrees && TwoTreesOverloadALink(ranks) ? ranks : 2;
}
static_assert(BinomialAllReduceTrees(2, kBinomialTwoTreeBytes - 1) == 1);
static_assert(BinomialAllReduceTrees(2, kBinomialTwoTreeBytes) == 2);
static_assert(BinomialAllReduceTrees(3, kBinomialTwoTreeBytes) == 3);
static_assert(BinomialAllReduceTrees(4, kBinomialTwoTreeBytes) == 2);
static_assert(BinomialAllReduceTrees(8, kBinomialTwoTreeBytes) == 8);
static_assert(BinomialAllReduceTrees(16, kBinomialTwoTreeBytes) == 2);
absl::Status BinomialAllReduce(const CallContext& ctx, const CollectiveArgs& args);

// BinomialGather concatenates every rank's input (count elements) in rank order into
// the root's output (n * count elements); other ranks' output is empty. The root's
// input may be its own block of the output (in place). Each rank sends its whole
// subtree's blocks to its parent in one message. Errors as BinomialBroadcast, plus
// InvalidArgument when the root's input overlaps its output other than as its own
// block.
absl::Status BinomialGather(const CallContext& ctx, const CollectiveArgs& args);

// BinomialScatter sends block r (count elements) of the root's input (n * count
// elements) to rank r's output; other ranks' input is empty. The root's output may be
// its own block of the input (in place). Each rank receives its whole subtree's blocks
// from its parent in one message and passes the children theirs. Errors as
// BinomialGather.
absl::Status BinomialScatter(const CallContext& ctx, const CollectiveArgs& args);

// BinomialBarrier returns on every rank only after every rank has entered it: empty
// messages up a binomial tree to rank 0 and back down. Returns InvalidArgument for
// non-empty buffers; otherwise the transport's error.
absl::Status BinomialBarrier(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_BINOMIAL_TREE_H_

// Double binary tree all-reduce (Sanders, Speck, Träff 2009, "Two-tree algorithms
// for full bandwidth broadcast, reduction and scan"; the layout NCCL uses).
//
// A single binary tree is latency-optimal but leaves half its ranks (the leaves)
// idle and sends twice through each interior rank. Two complementary trees fix
// that: tree 0 is the in-order binary tree over ranks 0..n-1 (rank 0 at the top
// with a single child; the leaves are the odd ranks), tree 1 is its mirror image
// (rank r takes tree 0's place of n-1-r) when n is even and tree 0 shifted by one
// (r takes the place of r-1) when n is odd, so that a rank that is interior in one
// tree is a leaf in the other. Half 0 of the data is reduced up tree 0 and
// broadcast back down it, half 1 on tree 1, both at once.
//
// Each half is cut into chunks of about ctx.chunk_bytes and pipelined: a rank at
// depth d handles the reduction of chunk u in round u - g d and the broadcast of
// chunk v in round v + g d, so in every round chunks flow up and other chunks flow
// down both trees, and everything a round waits for was sent g rounds before. The
// lag g is 1 on a short path; where the communicator's cost model gives a long one
// (CallContext::agreed_path), g chunks hold twice its bandwidth-delay product. A
// call takes about chunks + 2 g depth rounds. Each element is reduced exactly once,
// at its tree's root, and copied to everyone else, so every rank ends with the same
// bits.
//
// Example (4 ranks; rank r's input is {r, 10 * r}):
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kAllReduce;
//   args.op = ReduceOp::kMax;
//   args.count = 2;
//   args.input = ConstBufferView::Of(absl::MakeConstSpan(mine));
//   args.output = BufferView::Of(absl::MakeSpan(result));
//   LOOM_RETURN_IF_ERROR(DoubleBinaryTreeAllReduce(ctx, args));
//   // result == {3, 30} on every rank: element 0 went up and down tree 0
//   // (root rank 0), element 1 tree 1 (root rank 3).
//
//   DoubleBinaryTreeLinks(/*n=*/4, /*rank=*/2, /*tree=*/0);
//   // {parent 0, children {1, 3}}; in tree 1 rank 2 is a leaf under rank 1.
#ifndef LOOM_COLLECTIVES_DOUBLE_BINARY_TREE_H_
#define LOOM_COLLECTIVES_DOUBLE_BINARY_TREE_H_

#include <array>

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// BinaryTreeLinks: one rank's neighbours in one tree; -1 where there is none (the
// root's parent; unused children, which come after the used ones).
struct BinaryTreeLinks {
  int parent = -1;
  std::array<int, 2> children = {-1, -1};
};

// DoubleBinaryTreeLinks returns `rank`'s neighbours in tree 0 or 1 of the double
// binary tree over n ranks (n >= 1, 0 <= rank < n, tree 0 or 1; anything else is a
// programming error and returns no links). Tree 0's root is rank 0; tree 1's is
// n - 1 for even n and 1 for odd n (none for n == 1).
BinaryTreeLinks DoubleBinaryTreeLinks(int n, int rank, int tree);

// DoubleBinaryTreeAllReduce reduces every rank's input (count elements) with args.op
// into every rank's output, in place or out of place (the input is never written
// then). Returns InvalidArgument naming the values when a buffer does not hold count
// elements or the dtypes differ, ResourceExhausted when scratch cannot grow, and
// otherwise the transport's error (DeadlineExceeded, Unavailable, FailedPrecondition
// for a size mismatch between ranks, ...).
absl::Status DoubleBinaryTreeAllReduce(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_DOUBLE_BINARY_TREE_H_

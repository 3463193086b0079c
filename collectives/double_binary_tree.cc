#include "collectives/double_binary_tree.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/internal/in_flight.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

constexpr int kNumTrees = 2;
// Scratch slot of the children's chunks: [tree][buffer][child][largest chunk], chunk
// c in buffer c % (lag + 1).
constexpr int kChildChunksSlot = 0;
// Sends of one round: per tree, one up and two down.
constexpr int kMaxSendsPerRound = 3 * kNumTrees;

// InOrderTree: rank r's place in the in-order binary tree over ranks 0..n-1 (NCCL's
// ncclGetBtree). A rank r whose lowest set bit is b sits at height log2(b): its
// parent is (r ^ b) | 2b, that is whichever of r - b and r + b has 2b as its lowest
// set bit, or r - b when that would be r + b >= n; its children are r - b/2 and the
// first of r + b/2, r + b/4, ... that is below n. Rank 0 is the root, with the one
// child 2^k / 2 for the smallest 2^k >= n. The depth is at most ceil(log2 n).
BinaryTreeLinks InOrderTree(int n, int r) {
  BinaryTreeLinks links;
  if (n <= 1) return links;
  int64_t bit = 1;
  while (bit < n && (r & bit) == 0) bit <<= 1;
  if (r == 0) {
    links.children[0] = static_cast<int>(bit >> 1);
    return links;
  }
  const int64_t up = (r ^ bit) | (bit << 1);
  links.parent = static_cast<int>(up < n ? up : (r ^ bit));
  int64_t low = bit >> 1;
  if (low == 0) return links;
  links.children[0] = static_cast<int>(r - low);
  while (low > 0 && r + low >= n) low >>= 1;
  if (low > 0) links.children[1] = static_cast<int>(r + low);
  return links;
}

int Depth(int n, int rank, int tree) {
  int depth = 0;
  for (int r = rank; (r = DoubleBinaryTreeLinks(n, r, tree).parent) >= 0;) ++depth;
  return depth;
}

// HalfTree: one rank's part in moving one half of the data up and down one tree, in
// chunks, `lag` (g >= 1) rounds a level. Round i reduces chunk i + g d (children's
// partial sums into this rank's input, then up to the parent) and passes chunk
// i - g d down (from the parent into the output, then on to the children), d the
// rank's depth. A child is one level deeper, so the chunk a rank reduces in round i
// left its children in round i - g, and the chunk it passes down in round i left its
// parent in round i - g. Receives are posted g rounds before the round that waits
// for them (g + 1 buffers a child), and a round's sends are waited for g rounds
// later, so each stream keeps about g chunks in flight. No round waits for
// anything a peer posts in the same round or later: the two trees (and the ranks)
// never wait on each other in a cycle, and over a long link a rank's round does not
// wait a round trip for its peers' last round.
//
// g is 1 on a short path (two chunks in flight), more where the communicator's
// agreed path needs more bytes in flight to fill the link (AgreedChunksInFlight).
class HalfTree {
 public:
  HalfTree(const CallContext& ctx, const CollectiveArgs& args, int tree, int lag,
           absl::Span<std::byte> tmp, size_t tmp_chunk)
      : ctx_(ctx),
        op_(args.op),
        tree_(tree),
        lag_(lag),
        links_(DoubleBinaryTreeLinks(ctx.size(), ctx.rank(), tree)),
        depth_(static_cast<int64_t>(lag) * Depth(ctx.size(), ctx.rank(), tree)),
        input_(Slice(args.input, Block(args.count, kNumTrees, tree))),
        output_(Slice(args.output, Block(args.count, kNumTrees, tree))),
        chunks_(NumChunks(ctx, input_.size(), input_.dtype())),
        tmp_(tmp),
        tmp_chunk_(tmp_chunk) {
    while (num_children_ < 2 && links_.children[num_children_] >= 0) ++num_children_;
    for (int b = 0; b <= lag_; ++b) {
      up_recvs_.emplace_back(ctx);
      down_recvs_.emplace_back(ctx);
    }
  }

  bool active() const { return !input_.empty(); }
  int64_t first_round() const { return -depth_; }
  int64_t last_round() const { return chunks_ - 1 + depth_; }

  // PostReceives posts what round i will wait for: the children's partial sums of
  // chunk i + g d and the parent's result of chunk i - g d (depth_ is g d).
  absl::Status PostReceives(int64_t i) {
    const int64_t up = i + depth_;
    if (InRange(up)) {
      for (int c = 0; c < num_children_; ++c) {
        LOOM_RETURN_IF_ERROR(
            up_recvs_[Buffer(up)].Recv(UpStep(), links_.children[c], ChildChunk(up, c)));
      }
    }
    const int64_t down = i - depth_;
    if (InRange(down) && links_.parent >= 0) {
      LOOM_RETURN_IF_ERROR(
          down_recvs_[Buffer(down)].Recv(DownStep(), links_.parent, Chunk(output_, down)));
    }
    return absl::OkStatus();
  }

  // Run runs round i, posting its sends into `sends`.
  absl::Status Run(int64_t i, InFlight<kMaxSendsPerRound>& sends) {
    const int64_t up = i + depth_;
    if (InRange(up)) {
      // Reduce: own input, then the children in order, into the output (or, on a
      // leaf, the input as it is), and pass the partial result up. At the root this
      // is the final value of the chunk, computed here once.
      LOOM_RETURN_IF_ERROR(up_recvs_[Buffer(up)].Wait());
      ConstBufferView partial = Chunk(input_, up);
      if (num_children_ > 0) {
        const BufferView acc = Chunk(output_, up);
        LOOM_RETURN_IF_ERROR(ReduceTo(op_, partial, ChildChunk(up, 0), acc));
        for (int c = 1; c < num_children_; ++c) {
          LOOM_RETURN_IF_ERROR(ReduceInto(op_, ChildChunk(up, c), acc));
        }
        partial = acc;
      } else if (links_.parent < 0) {
        return absl::InternalError(absl::StrCat("tree ", tree_, ": root ", ctx_.rank(), " of ",
                                                ctx_.size(), " ranks has no children"));
      }
      if (links_.parent >= 0) LOOM_RETURN_IF_ERROR(sends.Send(UpStep(), links_.parent, partial));
    }
    const int64_t down = i - depth_;
    if (InRange(down)) {
      // Broadcast: the root's result of the chunk arrives from the parent (the root
      // computed it just above) and goes on to the children.
      LOOM_RETURN_IF_ERROR(down_recvs_[Buffer(down)].Wait());
      for (int c = 0; c < num_children_; ++c) {
        LOOM_RETURN_IF_ERROR(sends.Send(DownStep(), links_.children[c], Chunk(output_, down)));
      }
    }
    return absl::OkStatus();
  }

 private:
  bool InRange(int64_t chunk) const { return chunk >= 0 && chunk < chunks_; }
  // The buffer (and request ring entry) of an in-range chunk.
  size_t Buffer(int64_t chunk) const { return static_cast<size_t>(chunk % (lag_ + 1)); }
  // Steps: each tree has its own up and down streams; chunks of a stream match in order.
  uint32_t UpStep() const { return static_cast<uint32_t>(2 * tree_); }
  uint32_t DownStep() const { return static_cast<uint32_t>(2 * tree_ + 1); }
  template <typename View>
  View Chunk(View half, int64_t chunk) const {
    return Slice(half, Block(half.size(), chunks_, static_cast<int>(chunk)));
  }
  BufferView ChildChunk(int64_t chunk, int child) const {
    const DType dtype = input_.dtype();
    const size_t slot = (static_cast<size_t>(tree_) * (lag_ + 1) + Buffer(chunk)) * 2 + child;
    return BufferView(tmp_.data() + slot * tmp_chunk_ * DTypeSize(dtype),
                      Block(input_.size(), chunks_, static_cast<int>(chunk)).count, dtype);
  }

  const CallContext& ctx_;
  const ReduceOp op_;
  const int tree_;
  const int lag_;
  const BinaryTreeLinks links_;
  const int64_t depth_;  // rounds: lag x the rank's depth in this tree
  const ConstBufferView input_;
  const BufferView output_;
  const int chunks_;
  const absl::Span<std::byte> tmp_;
  const size_t tmp_chunk_;
  int num_children_ = 0;
  // Rings of lag + 1, indexed by chunk: round i waits for chunk u while u + 1 .. u + g
  // are posted. Deques: InFlight is neither copied nor moved.
  std::deque<InFlight<2>> up_recvs_;
  std::deque<InFlight<1>> down_recvs_;
};

}  // namespace

BinaryTreeLinks DoubleBinaryTreeLinks(int n, int rank, int tree) {
  if (n < 1 || rank < 0 || rank >= n || (tree != 0 && tree != 1)) return BinaryTreeLinks();
  if (tree == 0) return InOrderTree(n, rank);
  // Tree 1 relabels tree 0: mirrored for even n, shifted by one for odd n (a mirror
  // of an odd-sized tree would keep the middle rank interior in both).
  const bool mirror = n % 2 == 0;
  auto to_tree0 = [&](int r) { return mirror ? n - 1 - r : (r - 1 + n) % n; };
  auto from_tree0 = [&](int r) { return r < 0 ? -1 : mirror ? n - 1 - r : (r + 1) % n; };
  const BinaryTreeLinks base = InOrderTree(n, to_tree0(rank));
  BinaryTreeLinks links;
  links.parent = from_tree0(base.parent);
  links.children = {from_tree0(base.children[0]), from_tree0(base.children[1])};
  return links;
}

absl::Status DoubleBinaryTreeAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  if (args.input.size() != args.count || args.output.size() != args.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("DoubleBinaryTreeAllReduce: input has ", args.input.size(),
                     " elements and output ", args.output.size(), ", want count ", args.count));
  }
  if (args.input.dtype() != args.output.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DoubleBinaryTreeAllReduce: input is ", DTypeName(args.input.dtype()), " but output is ",
        DTypeName(args.output.dtype())));
  }
  if (args.count == 0) return absl::OkStatus();
  if (ctx.size() == 1) return Copy(args.input, args.output);

  // The halves may be cut into different numbers of chunks (32769 and 32768 f32 in
  // 4 KiB chunks: 33 of at most 993, 32 of 1024), so size for the larger chunk.
  const DType dtype = args.input.dtype();
  size_t tmp_chunk = 0;
  for (int tree = 0; tree < kNumTrees; ++tree) {
    const size_t half = Block(args.count, kNumTrees, tree).count;
    tmp_chunk = std::max(tmp_chunk, Block(half, NumChunks(ctx, half, dtype), 0).count);
  }
  // The lag: w - 1 for the agreed window of w chunks of half 0, the same on every
  // rank (2 on a short path: lag 1).
  const int lag = AgreedWindow(ctx, Block(args.count, kNumTrees, 0).count, dtype) - 1;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> tmp,
                        ctx.scratch->Get(kChildChunksSlot, static_cast<size_t>(kNumTrees) *
                                                               (lag + 1) * 2 * tmp_chunk *
                                                               DTypeSize(dtype)));

  HalfTree trees[kNumTrees] = {HalfTree(ctx, args, 0, lag, tmp, tmp_chunk),
                               HalfTree(ctx, args, 1, lag, tmp, tmp_chunk)};
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const HalfTree& tree : trees) {
    if (!tree.active()) continue;  // count 1: half 1 is empty on every rank
    first = std::min(first, tree.first_round());
    last = std::max(last, tree.last_round());
  }
  // Round i's sends stay in flight until round i + lag. They are matched by receives
  // their peers posted in round i (lag rounds before the round that consumes them),
  // so waiting for them never waits for a later round. They are waited for before
  // the round posts its receives: a rank's result of a chunk lands where it sent its
  // partial sum of that chunk from, at least lag rounds before.
  std::deque<InFlight<kMaxSendsPerRound>> sends;
  for (int b = 0; b < lag; ++b) sends.emplace_back(ctx);
  for (int64_t i = first - lag; i <= last; ++i) {
    InFlight<kMaxSendsPerRound>& round_sends = sends[static_cast<size_t>(((i % lag) + lag) % lag)];
    LOOM_RETURN_IF_ERROR(round_sends.Wait());  // round i - lag's
    for (HalfTree& tree : trees) {
      if (tree.active()) LOOM_RETURN_IF_ERROR(tree.PostReceives(i + lag));
    }
    if (i < first) continue;
    for (HalfTree& tree : trees) {
      if (tree.active()) LOOM_RETURN_IF_ERROR(tree.Run(i, round_sends));
    }
  }
  absl::Status status;
  for (InFlight<kMaxSendsPerRound>& round_sends : sends) status.Update(round_sends.Wait());
  return status;
}

}  // namespace collectives_internal
}  // namespace loom

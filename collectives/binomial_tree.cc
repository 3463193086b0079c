#include "collectives/binomial_tree.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/internal/arg_checks.h"
#include "collectives/internal/in_flight.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// A rank has at most one child per bit of an int rank.
constexpr int kMaxChildren = 31;

// Scratch slots; different slots for buffers in use at the same time.
constexpr int kTreeSlot = 0;  // children's chunks (reduce), subtree blocks (gather, scatter)
constexpr int kAccSlot = 1;   // an interior rank's partial result (reduce)
// The children's chunks of the all-reduce's trees after the first: slots 2, 3, ...
constexpr int kSecondTreeSlot = 2;

// BinomialNode: where one rank sits in the binomial tree over n ranks rooted at
// `root`, in virtual ranks v = (rank - root + n) % n. The subtree of v is the vranks
// [v, v + span) clipped to n, where span is v's lowest set bit (for the root: the
// smallest power of two >= n). Child i is v + 2^i for 2^i < span and v + 2^i < n; its
// subtree has min(2^i, n - v - 2^i) ranks. The parent of v is v - span.
struct BinomialNode {
  BinomialNode(int rank, int root_rank, int world) : n(world), root(root_rank) {
    vrank = (rank - root + n) % n;
    if (vrank == 0) {
      while (span < n) span <<= 1;
    } else {
      span = vrank & -vrank;
    }
    while ((int64_t{1} << num_children) < span && vrank + (int64_t{1} << num_children) < n) {
      ++num_children;
    }
  }

  bool is_root() const { return vrank == 0; }
  int Real(int64_t v) const { return static_cast<int>((v + root) % n); }
  int parent() const { return Real(vrank - span); }
  // Vranks in this rank's subtree, itself included.
  int64_t subtree() const { return std::min<int64_t>(span, n - vrank); }
  // Child i's offset in vranks from this rank, the size of its subtree, its rank.
  int64_t child_offset(int i) const { return int64_t{1} << i; }
  int64_t child_subtree(int i) const {
    return std::min<int64_t>(child_offset(i), n - vrank - child_offset(i));
  }
  int child(int i) const { return Real(vrank + child_offset(i)); }

  int n;
  int root;
  int64_t vrank = 0;
  int64_t span = 1;
  int num_children = 0;
};

// BinomialTreeDepth: the deepest level of a binomial tree over n >= 1 ranks, the
// most set bits of any vrank below n: floor(log2 n) (2^k - 1 is the least number
// with k bits set).
int BinomialTreeDepth(int n) { return 63 - __builtin_clzll(static_cast<uint64_t>(n)); }

// Chunks: a reduction's elements cut into chunks of about ctx.chunk_bytes, and where
// a rank's children's chunks land: scratch, `buffers` chunks deep (chunk c in buffer
// c % buffers), [buffer][child][max_chunk].
struct Chunks {
  static absl::StatusOr<Chunks> Make(const CallContext& ctx, int fan_in, size_t count,
                                     DType dtype, int slot = kTreeSlot, int buffers = 2) {
    Chunks c;
    c.count = count;
    c.dtype = dtype;
    c.width = DTypeSize(dtype);
    c.chunks = NumChunks(ctx, count, dtype);
    c.max_chunk = Block(count, c.chunks, 0).count;
    c.fan_in = fan_in;
    c.buffers = std::max(buffers, 1);
    if (fan_in > 0) {
      LOOM_ASSIGN_OR_RETURN(
          c.children, ctx.scratch->Get(slot, static_cast<size_t>(c.buffers) * fan_in *
                                                 c.max_chunk * c.width));
    }
    return c;
  }
  BlockRange Range(int c) const { return Block(count, chunks, c); }
  // Where child i's part of chunk c lands.
  BufferView Child(int c, int i) const {
    const size_t offset = (static_cast<size_t>(c % buffers) * fan_in + i) * max_chunk;
    return BufferView(children.data() + offset * width, Range(c).count, dtype);
  }

  size_t count = 0;
  DType dtype = DType::kF32;
  size_t width = 0;
  int chunks = 1;
  size_t max_chunk = 0;
  int fan_in = 0;
  int buffers = 2;
  absl::Span<std::byte> children;
};

// TreeBroadcast: the root sends `source` down the tree; every other rank receives it
// into `dest` and forwards it to its children, largest subtree first (so the deepest
// subtree starts earliest). With a window of w chunks (AgreedWindow), chunks
// c + 1 .. c + w - 1 are already posted while chunk c is forwarded, and a chunk's
// sends stay in flight until chunk c + w is sent.
absl::Status TreeBroadcast(const CallContext& ctx, const BinomialNode& node,
                           ConstBufferView source, BufferView dest, uint32_t step) {
  const size_t count = node.is_root() ? source.size() : dest.size();
  const DType dtype = node.is_root() ? source.dtype() : dest.dtype();
  const int chunks = NumChunks(ctx, count, dtype);
  const int window = AgreedWindow(ctx, count, dtype);
  // Rings indexed by chunk (c % window). Deques: InFlight is neither copied nor moved.
  std::deque<InFlight<1>> recvs;
  std::deque<InFlight<kMaxChildren>> sends;
  for (int i = 0; i < window; ++i) {
    recvs.emplace_back(ctx);
    sends.emplace_back(ctx);
  }
  auto post_recv = [&](int c) {
    return recvs[c % window].Recv(step, node.parent(), Slice(dest, Block(count, chunks, c)));
  };
  if (!node.is_root()) {
    for (int c = 0; c + 1 < window && c < chunks; ++c) LOOM_RETURN_IF_ERROR(post_recv(c));
  }
  for (int c = 0; c < chunks; ++c) {
    const BlockRange range = Block(count, chunks, c);
    if (!node.is_root()) {
      if (c + window - 1 < chunks) LOOM_RETURN_IF_ERROR(post_recv(c + window - 1));
      LOOM_RETURN_IF_ERROR(recvs[c % window].Wait());
    }
    const ConstBufferView chunk = node.is_root() ? Slice(source, range) : Slice(dest, range);
    LOOM_RETURN_IF_ERROR(sends[c % window].Wait());  // chunk c - w
    for (int i = node.num_children - 1; i >= 0; --i) {
      LOOM_RETURN_IF_ERROR(sends[c % window].Send(step, node.child(i), chunk));
    }
  }
  absl::Status status;
  for (InFlight<kMaxChildren>& chunk_sends : sends) status.Update(chunk_sends.Wait());
  return status;
}

// TreeReduce: every rank reduces its children's partial results for a chunk into
// its own input and sends the sum up (MPICH's binomial reduce); children are taken
// smallest subtree first, the order in which their results become ready. An interior
// rank accumulates into `result` when it has one (the root; every rank of an
// all-reduce) and otherwise into w chunk buffers of scratch. With a window of w chunks
// (AgreedWindow) a parent keeps receives for chunks c .. c + w - 1 posted from each child
// (w scratch buffers a child) and a child w sends in flight. On return the root's
// `result` holds the reduction.
absl::Status TreeReduce(const CallContext& ctx, const BinomialNode& node, ReduceOp op,
                        ConstBufferView input, BufferView result, uint32_t step) {
  const int fan_in = node.num_children;
  if (node.is_root() && fan_in == 0) return Copy(input, result);
  const int window = AgreedWindow(ctx, input.size(), input.dtype());
  LOOM_ASSIGN_OR_RETURN(const Chunks plan, Chunks::Make(ctx, fan_in, input.size(), input.dtype(),
                                                        kTreeSlot, window));
  const DType dtype = plan.dtype;
  const size_t width = plan.width;
  const int chunks = plan.chunks;
  const size_t max_chunk = plan.max_chunk;
  auto child_chunk = [&](int c, int i) { return plan.Child(c, i); };
  absl::Span<std::byte> partial;  // [c % window][max_chunk]
  if (result.empty() && fan_in > 0) {
    LOOM_ASSIGN_OR_RETURN(partial, ctx.scratch->Get(kAccSlot, static_cast<size_t>(window) *
                                                                  max_chunk * width));
  }

  // Rings indexed by chunk (c % window). Deques: InFlight is neither copied nor moved.
  std::deque<InFlight<kMaxChildren>> recvs;
  std::deque<InFlight<1>> sends;
  for (int i = 0; i < window; ++i) {
    recvs.emplace_back(ctx);
    sends.emplace_back(ctx);
  }
  auto post_recvs = [&](int c) -> absl::Status {
    for (int i = 0; i < fan_in; ++i) {
      LOOM_RETURN_IF_ERROR(recvs[c % window].Recv(step, node.child(i), child_chunk(c, i)));
    }
    return absl::OkStatus();
  };
  for (int c = 0; c + 1 < window && c < chunks; ++c) LOOM_RETURN_IF_ERROR(post_recvs(c));
  for (int c = 0; c < chunks; ++c) {
    const BlockRange range = plan.Range(c);
    // Chunk c + w - 1 lands where chunk c - 1 did (reduced in the last iteration).
    if (c + window - 1 < chunks) LOOM_RETURN_IF_ERROR(post_recvs(c + window - 1));
    LOOM_RETURN_IF_ERROR(recvs[c % window].Wait());
    // The send of chunk c - w may still read this entry's partial buffer.
    LOOM_RETURN_IF_ERROR(sends[c % window].Wait());
    ConstBufferView up = Slice(input, range);
    if (fan_in > 0) {
      const BufferView acc =
          result.empty()
              ? BufferView(partial.data() + static_cast<size_t>(c % window) * max_chunk * width,
                           range.count, dtype)
              : Slice(result, range);
      LOOM_RETURN_IF_ERROR(ReduceTo(op, up, child_chunk(c, 0), acc));
      for (int i = 1; i < fan_in; ++i) {
        LOOM_RETURN_IF_ERROR(ReduceInto(op, child_chunk(c, i), acc));
      }
      up = acc;
    }
    if (!node.is_root()) LOOM_RETURN_IF_ERROR(sends[c % window].Send(step, node.parent(), up));
  }
  absl::Status status;
  for (InFlight<1>& chunk_sends : sends) status.Update(chunk_sends.Wait());
  return status;
}

// TreeAllReducePass: TreeReduce to vrank 0 and TreeBroadcast back, in one loop, so
// that both directions of every link carry data at once: in iteration t a rank
// reduces a chunk and sends it up, and forwards a finished chunk of the result down.
// Run one after the other, the two would move every byte of a link twice in turn
// (half the link's rate at two ranks).
//
// The window w (AgreedChunksInFlight: 2, or more over a long path that every rank
// knows alike) sets how far each direction runs ahead. D is the tree's depth and d
// a rank's (the number of set bits of its vrank):
//   - up: a rank reduces and sends up chunk c in iteration c + w (D - d), w
//     iterations after its children sent it. A parent keeps receives for chunks
//     c .. c + w - 1 posted from its children (w scratch buffers a child), and a
//     child waits for its send of chunk c in its iteration c + w (D - d + 1), w
//     iterations after sending it (w + 1 sends outstanding). The parent posted that
//     receive w - 1 iterations before, when it reduced chunk c - w + 1.
//   - down: a rank forwards chunk s down in iteration s + w D + L (d + 1),
//     L = 2w + 1, L iterations after its parent did. Its parent had reduced the
//     chunk by then (the root in iteration s + w D); the rank posted its receive for
//     it once the up send of the same memory had left (iteration s + w (D - d + 1)),
//     and waits for its own sends of chunk s - w to its children before sending s.
// Every wait in iteration t is then for something another rank posted in an earlier
// iteration: no cycle, as long as every rank uses the same w (w >= 2). A rank's
// iteration t needs no other rank to have finished its iteration t - 1, so passes
// that take turns iteration by iteration (several trees over blocks of the data,
// ManyTreeAllReduce), where each rank is a parent in one and a child in another, do
// not wait a round trip for each other every iteration. (Reducing chunk t in iteration t at every level did: at 3
// ranks 2 ms apart a tree per rank moved 16 MiB in 570 ms, and in 111 with the
// w-iteration step a level.) Up to w + 1 chunks are in flight on each link each way.
//
// Use: Start(), then Step(t) for t = 0 .. last(), then Finish().
class TreeAllReducePass {
 public:
  TreeAllReducePass(const CallContext& ctx, const BinomialNode& node, ReduceOp op,
                    ConstBufferView input, BufferView output, uint32_t first_step,
                    int scratch_slot)
      : ctx_(ctx),
        node_(node),
        op_(op),
        input_(input),
        output_(output),
        up_step_(first_step),
        down_step_(first_step + 1),
        scratch_slot_(scratch_slot) {}
  TreeAllReducePass(const TreeAllReducePass&) = delete;
  TreeAllReducePass& operator=(const TreeAllReducePass&) = delete;

  absl::Status Start() {
    const int fan_in = node_.num_children;
    window_ = AgreedWindow(ctx_, input_.size(), input_.dtype());
    LOOM_ASSIGN_OR_RETURN(plan_, Chunks::Make(ctx_, fan_in, input_.size(), input_.dtype(),
                                              scratch_slot_, window_));
    for (int i = 0; i < window_; ++i) {
      child_recvs_.emplace_back(ctx_);
      down_sends_.emplace_back(ctx_);
    }
    for (int i = 0; i <= window_; ++i) up_sends_.emplace_back(ctx_);
    // A child runs up to w iterations ahead of its parent's receives, so a lag of
    // 2w + 1 a level down leaves w + 1 chunks in flight (w + 1 alone left one: over
    // a 4 ms round trip a window of 5 then moved 16 MiB in 166 ms, and 120 ms with
    // this lag; the 2-chunk window took 270 ms).
    const int lag = 2 * window_ + 1;
    const int depth = __builtin_popcountll(static_cast<uint64_t>(node_.vrank));
    const int tree_depth = BinomialTreeDepth(node_.n);
    up_delay_ = window_ * (tree_depth - depth);
    down_lag_ = window_ * tree_depth + lag * (depth + 1);
    if (node_.is_root() && fan_in == 0) return Copy(input_, output_);
    for (int c = 0; c + 1 < window_ && c < plan_.chunks; ++c) {
      LOOM_RETURN_IF_ERROR(PostChildRecvs(c));
    }
    return absl::OkStatus();
  }

  // The last iteration this rank has work in.
  int last() const {
    if (node_.is_root() && node_.num_children == 0) return -1;
    return plan_.chunks - 1 + down_lag_;
  }

  absl::Status Step(int t) {
    const int chunks = plan_.chunks;
    const int fan_in = node_.num_children;
    if (const int c = t - up_delay_; c >= 0 && c < chunks) {
      const BlockRange range = plan_.Range(c);
      // Chunk c + w - 1 lands where chunk c - 1 did (read in the last such step).
      if (const int ahead = c + window_ - 1; ahead < chunks) {
        LOOM_RETURN_IF_ERROR(PostChildRecvs(ahead));
      }
      LOOM_RETURN_IF_ERROR(child_recvs_[c % window_].Wait());
      ConstBufferView up = Slice(input_, range);
      if (fan_in > 0) {
        const BufferView acc = Slice(output_, range);
        LOOM_RETURN_IF_ERROR(ReduceTo(op_, up, plan_.Child(c, 0), acc));
        for (int i = 1; i < fan_in; ++i) {
          LOOM_RETURN_IF_ERROR(ReduceInto(op_, plan_.Child(c, i), acc));
        }
        up = acc;
      }
      if (!node_.is_root()) {
        LOOM_RETURN_IF_ERROR(up_sends_[c % (window_ + 1)].Send(up_step_, node_.parent(), up));
      }
    }
    const int sent = t - up_delay_ - window_;
    if (!node_.is_root() && sent >= 0 && sent < chunks) {
      LOOM_RETURN_IF_ERROR(up_sends_[sent % (window_ + 1)].Wait());
      down_recvs_.emplace_back(ctx_);
      LOOM_RETURN_IF_ERROR(down_recvs_.back().Recv(down_step_, node_.parent(),
                                                   Slice(output_, plan_.Range(sent))));
    }
    const int s = t - down_lag_;
    if (s < 0 || s >= chunks) return absl::OkStatus();
    if (!node_.is_root()) {
      LOOM_RETURN_IF_ERROR(down_recvs_.front().Wait());
      down_recvs_.pop_front();
    }
    LOOM_RETURN_IF_ERROR(down_sends_[s % window_].Wait());  // chunk s - w
    const ConstBufferView chunk = Slice(output_, plan_.Range(s));
    for (int i = node_.num_children - 1; i >= 0; --i) {
      LOOM_RETURN_IF_ERROR(down_sends_[s % window_].Send(down_step_, node_.child(i), chunk));
    }
    return absl::OkStatus();
  }

  absl::Status Finish() {
    absl::Status status;
    for (auto& sends : down_sends_) status.Update(sends.Wait());
    return status;
  }

 private:
  absl::Status PostChildRecvs(int c) {
    for (int i = 0; i < node_.num_children; ++i) {
      LOOM_RETURN_IF_ERROR(
          child_recvs_[c % window_].Recv(up_step_, node_.child(i), plan_.Child(c, i)));
    }
    return absl::OkStatus();
  }

  const CallContext& ctx_;
  const BinomialNode node_;
  const ReduceOp op_;
  const ConstBufferView input_;
  const BufferView output_;
  const uint32_t up_step_;
  const uint32_t down_step_;
  const int scratch_slot_;
  Chunks plan_;
  int window_ = 2;
  int up_delay_ = 0;   // iterations from a chunk's index to this rank's reduce of it
  int down_lag_ = 3;  // ... to this rank's forwarding of its result
  // Deques: InFlight is neither copied nor moved. Each is a ring, indexed by chunk:
  // child_recvs_ and down_sends_ w deep, up_sends_ w + 1 (a chunk's result lands where
  // its partial sum was sent from, so its receive is posted once that send has left).
  std::deque<InFlight<kMaxChildren>> child_recvs_;
  std::deque<InFlight<kMaxChildren>> down_sends_;
  std::deque<InFlight<1>> up_sends_;
  std::deque<InFlight<1>> down_recvs_;  // one per chunk, in chunk order
};

// TreeAllReduce runs one pass over the whole of input.
absl::Status TreeAllReduce(const CallContext& ctx, const BinomialNode& node, ReduceOp op,
                           ConstBufferView input, BufferView output) {
  TreeAllReducePass pass(ctx, node, op, input, output, /*first_step=*/0, kTreeSlot);
  LOOM_RETURN_IF_ERROR(pass.Start());
  for (int t = 0; t <= pass.last(); ++t) LOOM_RETURN_IF_ERROR(pass.Step(t));
  return pass.Finish();
}

// ManyTreeAllReduce: the elements cut into `trees` blocks, block t over the tree
// rooted at rank t (n - 1) / (trees - 1), the passes taking turns iteration by
// iteration. A rank with many children in one tree is a leaf or near one in the
// others. Two trees (roots 0 and n - 1) leave the busiest link of 3 ranks 1.5
// buffers each way against the 4/3 of a bus-optimal schedule; n trees, rooted at
// every rank, put each rank once at every position of the tree, so every rank's
// link carries 2 (n - 1) / n of the data each way, as the ring's does.
absl::Status ManyTreeAllReduce(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                               BufferView output, int trees) {
  const int n = ctx.size();
  std::deque<TreeAllReducePass> passes;  // a deque: passes are neither copied nor moved
  int last = -1;
  for (int t = 0; t < trees; ++t) {
    const BlockRange block = Block(input.size(), trees, t);
    const int root = t * (n - 1) / (trees - 1);
    passes.emplace_back(ctx, BinomialNode(ctx.rank(), root, n), op, Slice(input, block),
                        Slice(output, block), /*first_step=*/static_cast<uint32_t>(2 * t),
                        t == 0 ? kTreeSlot : kSecondTreeSlot + t - 1);
    LOOM_RETURN_IF_ERROR(passes.back().Start());
    last = std::max(last, passes.back().last());
  }
  for (int i = 0; i <= last; ++i) {
    for (TreeAllReducePass& pass : passes) {
      if (i <= pass.last()) LOOM_RETURN_IF_ERROR(pass.Step(i));
    }
  }
  for (TreeAllReducePass& pass : passes) LOOM_RETURN_IF_ERROR(pass.Finish());
  return absl::OkStatus();
}

}  // namespace

absl::Status BinomialBroadcast(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialBroadcast";
  const int n = ctx.size();
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, kName));
  const bool is_root = ctx.rank() == args.root;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, is_root ? args.count : kUnchecked, args.count));
  if (is_root) LOOM_RETURN_IF_ERROR(Copy(args.input, args.output));
  if (n == 1 || args.count == 0) return absl::OkStatus();
  return TreeBroadcast(ctx, BinomialNode(ctx.rank(), args.root, n), args.input, args.output,
                       /*step=*/0);
}

absl::Status BinomialReduce(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialReduce";
  const int n = ctx.size();
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, kName));
  const bool is_root = ctx.rank() == args.root;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, args.count, is_root ? args.count : kUnchecked));
  if (args.count == 0) return absl::OkStatus();
  return TreeReduce(ctx, BinomialNode(ctx.rank(), args.root, n), args.op, args.input,
                    is_root ? args.output : BufferView(), /*step=*/0);
}

absl::Status BinomialAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialAllReduce";
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, args.count, args.count));
  if (args.count == 0) return absl::OkStatus();
  // Every rank accumulates in its own output, which the broadcast then overwrites
  // with the root's result: the one place where each element is reduced.
  if (const int trees = BinomialAllReduceTrees(ctx.size(), args.count * DTypeSize(args.input.dtype()));
      trees > 1) {
    return ManyTreeAllReduce(ctx, args.op, args.input, args.output, trees);
  }
  return TreeAllReduce(ctx, BinomialNode(ctx.rank(), /*root_rank=*/0, ctx.size()), args.op,
                       args.input, args.output);
}

absl::Status BinomialGather(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialGather";
  const int n = ctx.size();
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, kName));
  const BinomialNode node(ctx.rank(), args.root, n);
  LOOM_RETURN_IF_ERROR(
      CheckArgs(ctx, args, kName, count, node.is_root() ? n * count : kUnchecked));
  if (node.is_root()) {
    LOOM_RETURN_IF_ERROR(CheckBlockAliasing(kName, args.input, args.output, args.root));
  }
  if (count == 0) return absl::OkStatus();
  if (n == 1) return Copy(args.input, args.output);

  // `tree` holds the blocks of this rank's subtree in vrank order: on root 0 that
  // is rank order, so the output itself; a leaf sends its input as it is.
  const DType dtype = args.input.dtype();
  const int64_t blocks = node.subtree();
  BufferView tree;
  if (node.is_root() && args.root == 0) {
    tree = args.output;
  } else if (blocks > 1) {
    LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> bytes,
                          ctx.scratch->Get(kTreeSlot, blocks * count * DTypeSize(dtype)));
    tree = BufferView(bytes.data(), blocks * count, dtype);
  }
  if (blocks > 1) {
    LOOM_RETURN_IF_ERROR(Copy(args.input, Slice(tree, 0, count)));
    InFlight<kMaxChildren> recvs(ctx);
    for (int i = 0; i < node.num_children; ++i) {
      const BufferView part =
          Slice(tree, node.child_offset(i) * count, node.child_subtree(i) * count);
      LOOM_RETURN_IF_ERROR(recvs.Recv(/*step=*/0, node.child(i), part));
    }
    LOOM_RETURN_IF_ERROR(recvs.Wait());
  }
  if (!node.is_root()) {
    InFlight<1> send(ctx);
    LOOM_RETURN_IF_ERROR(
        send.Send(/*step=*/0, node.parent(), blocks > 1 ? ConstBufferView(tree) : args.input));
    return send.Wait();
  }
  if (args.root == 0) return absl::OkStatus();
  // Undo the rotation: vrank v is rank (v + root) % n.
  const size_t tail = static_cast<size_t>(n - args.root) * count;
  LOOM_RETURN_IF_ERROR(Copy(Slice(tree, 0, tail), Slice(args.output, args.root * count, tail)));
  return Copy(Slice(tree, tail, args.root * count), Slice(args.output, 0, args.root * count));
}

absl::Status BinomialScatter(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialScatter";
  const int n = ctx.size();
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, kName));
  const BinomialNode node(ctx.rank(), args.root, n);
  LOOM_RETURN_IF_ERROR(
      CheckArgs(ctx, args, kName, node.is_root() ? n * count : kUnchecked, count));
  if (node.is_root()) {
    LOOM_RETURN_IF_ERROR(CheckBlockAliasing(kName, args.output, args.input, args.root));
  }
  if (count == 0) return absl::OkStatus();
  if (n == 1) return Copy(args.input, args.output);

  // `tree` holds the blocks of this rank's subtree in vrank order (see Gather).
  const DType dtype = args.output.dtype();
  const int64_t blocks = node.subtree();
  ConstBufferView tree;
  if (node.is_root() && args.root == 0) {
    tree = args.input;
  } else if (blocks > 1) {
    LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> bytes,
                          ctx.scratch->Get(kTreeSlot, blocks * count * DTypeSize(dtype)));
    const BufferView staging(bytes.data(), blocks * count, dtype);
    if (node.is_root()) {
      // Rotate so that vrank v's block is block v: rank (v + root) % n's.
      const size_t tail = static_cast<size_t>(n - args.root) * count;
      LOOM_RETURN_IF_ERROR(Copy(Slice(args.input, args.root * count, tail), Slice(staging, 0, tail)));
      LOOM_RETURN_IF_ERROR(
          Copy(Slice(args.input, 0, args.root * count), Slice(staging, tail, args.root * count)));
    } else {
      InFlight<1> recv(ctx);
      LOOM_RETURN_IF_ERROR(recv.Recv(/*step=*/0, node.parent(), staging));
      LOOM_RETURN_IF_ERROR(recv.Wait());
    }
    tree = staging;
  } else {
    InFlight<1> recv(ctx);
    LOOM_RETURN_IF_ERROR(recv.Recv(/*step=*/0, node.parent(), args.output));
    return recv.Wait();
  }
  InFlight<kMaxChildren> sends(ctx);
  for (int i = node.num_children - 1; i >= 0; --i) {
    const ConstBufferView part =
        Slice(tree, node.child_offset(i) * count, node.child_subtree(i) * count);
    LOOM_RETURN_IF_ERROR(sends.Send(/*step=*/0, node.child(i), part));
  }
  LOOM_RETURN_IF_ERROR(sends.Wait());
  return Copy(Slice(tree, 0, count), args.output);
}

absl::Status BinomialBarrier(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "BinomialBarrier";
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, 0, 0));
  const BinomialNode node(ctx.rank(), /*root_rank=*/0, ctx.size());
  // Arrival: rank 0 hears from every rank through its subtree; release: back down.
  InFlight<kMaxChildren> up(ctx);
  for (int i = 0; i < node.num_children; ++i) {
    LOOM_RETURN_IF_ERROR(up.Recv(/*step=*/0, node.child(i), BufferView()));
  }
  LOOM_RETURN_IF_ERROR(up.Wait());
  InFlight<kMaxChildren> down(ctx);
  if (!node.is_root()) {
    LOOM_RETURN_IF_ERROR(up.Send(/*step=*/0, node.parent(), ConstBufferView()));
    LOOM_RETURN_IF_ERROR(up.Wait());
    LOOM_RETURN_IF_ERROR(down.Recv(/*step=*/1, node.parent(), BufferView()));
    LOOM_RETURN_IF_ERROR(down.Wait());
  }
  for (int i = node.num_children - 1; i >= 0; --i) {
    LOOM_RETURN_IF_ERROR(down.Send(/*step=*/1, node.child(i), ConstBufferView()));
  }
  return down.Wait();
}

}  // namespace collectives_internal
}  // namespace loom

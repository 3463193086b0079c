#include "collectives/ring.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/internal/arg_checks.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// One step number per phase: a phase's messages between two ranks are posted in the
// same order on both sides, so FIFO matching pairs them; distinct phases never match.
constexpr uint32_t kReduceScatterStep = 0;
constexpr uint32_t kAllGatherStep = 1;
constexpr uint32_t kGatherStep = 2;
constexpr uint32_t kBroadcastStep = 3;

// Chunks a rank keeps posted in each direction, at least. Two is double buffering:
// the next chunk arrives while this one is reduced, so a received chunk is reduced
// about one chunk's time after it arrived, while it is still in cache. More would
// only let neighbours drift further apart and hold more staging memory, except over
// a long link, whose bandwidth-delay product two chunks do not fill: there the
// window grows with the measured path (ChunksInFlight, up to kMaxChunksInFlight).
constexpr int kMinChunksInFlight = 2;

int Mod(int a, int n) { return ((a % n) + n) % n; }

// RequestQueue: one direction's posted requests (sends, or receives), oldest first,
// at most `capacity` (<= kMaxChunksInFlight), held on the stack. Destroying a queue
// that still holds requests (an early return on an error) cancels them: Wait with a
// deadline in the past finishes, fails or withdraws each one (transport.h), after
// which no peer touches their buffers. Cancelling at once rather than at the deadline returns the
// error promptly; the call has failed anyway.
class RequestQueue {
 public:
  RequestQueue(const CallContext& ctx, int capacity)
      : ctx_(ctx), capacity_(std::clamp(capacity, 1, kMaxChunksInFlight)) {}
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;
  ~RequestQueue() {
    while (size_ > 0) ctx_.transport->Wait({Pop()}, absl::InfinitePast()).IgnoreError();
  }

  int size() const { return size_; }

  // Push records a posted request; returns the error of posting it, or Internal
  // (after cancelling it) when the queue is full.
  absl::Status Push(absl::StatusOr<Request> posted) {
    if (!posted.ok()) return posted.status();
    if (size_ == capacity_) {
      ctx_.transport->Wait({*posted}, absl::InfinitePast()).IgnoreError();
      return absl::InternalError(
          absl::StrCat("ring: more than ", capacity_, " requests in flight"));
    }
    requests_[(head_ + size_) % capacity_] = *posted;
    ++size_;
    return absl::OkStatus();
  }

  // WaitOldest waits for the oldest request, which is then gone even if it failed.
  absl::Status WaitOldest() {
    const Request oldest = Pop();
    return ctx_.transport->Wait({oldest}, ctx_.deadline);
  }

  absl::Status WaitAll() {
    while (size_ > 0) LOOM_RETURN_IF_ERROR(WaitOldest());
    return absl::OkStatus();
  }

 private:
  Request Pop() {
    const Request oldest = requests_[head_];
    head_ = (head_ + 1) % capacity_;
    --size_;
    return oldest;
  }

  const CallContext& ctx_;
  const int capacity_;
  std::array<Request, kMaxChunksInFlight> requests_{};
  int head_ = 0;
  int size_ = 0;
};

// RingPlan: `count` elements cut into n blocks, Block(count, n, b), and every block
// into the same number of chunks, so that the chunk c a rank sends in a step and the
// chunk c it receives pair up with its neighbours' whatever the two blocks' sizes.
// Blocks shorter than the chunk count have empty chunks: zero-byte messages.
struct RingPlan {
  RingPlan(const CallContext& ctx, size_t elements, DType dtype)
      : n(ctx.size()),
        count(elements),
        chunks(NumChunks(ctx, Block(elements, ctx.size(), 0).count, dtype)) {}

  BlockRange Chunk(int block, int chunk) const {
    const BlockRange whole = Block(count, n, block);
    const BlockRange part = Block(whole.count, chunks, chunk);
    return BlockRange{whole.offset + part.offset, part.count};
  }
  // Block 0 is a longest block and its chunk 0 a longest chunk.
  size_t max_chunk() const { return Block(Block(count, n, 0).count, chunks, 0).count; }

  int n;
  size_t count;
  int chunks;
};

// RingItem: chunk `chunk` of step `step` of a ring phase. `slot` (the item's number
// modulo the window) names the staging buffer its receive may use.
struct RingItem {
  int step;
  int chunk;
  int slot;
};

// RingRecv: where a ring item's receive lands and how it is written there.
struct RingRecv {
  BufferView into;
  Delivery how;
};

// RunRingPhase drives the n-1 steps of one ring phase. Item (s, c) sends
// send_chunk(item) to the right neighbour and receives recv_chunk(item) from the left
// one, which delivers it (copied, or combined with this rank's data as it lands).
// Items are posted in order, sends before receives, at most plan.window() ahead of
// the item being finished. A phase forwards at step s+1 what it received at step s,
// so an item's send may read what the item `chunks` earlier received; window <=
// chunks has that item finished before the send is posted, and has the send of item
// j - chunks complete before item j's receive may overwrite what it read. A send is
// waited for only when its place in the window is needed again, so a slow right
// neighbour does not hold up what the left one sent. `most_in_flight` caps the window
// further (see RingReduce).
template <typename SendChunk, typename RecvChunk>
absl::Status RunRingPhase(const CallContext& ctx, uint32_t step, const RingPlan& plan,
                          SendChunk send_chunk, RecvChunk recv_chunk,
                          int most_in_flight = kMaxChunksInFlight) {
  const int right = Mod(ctx.rank() + 1, plan.n);
  const int left = Mod(ctx.rank() - 1, plan.n);
  const int64_t items = int64_t{plan.n - 1} * plan.chunks;
  const int window = std::min(
      {ChunksInFlight(ctx, ctx.chunk_bytes, {left, right}, kMinChunksInFlight), plan.chunks,
       std::max(most_in_flight, 1)});
  const auto item_at = [&](int64_t i) {
    return RingItem{static_cast<int>(i / plan.chunks), static_cast<int>(i % plan.chunks),
                    static_cast<int>(i % window)};
  };
  // One Delivery per slot: a slot is reused only after its receive was waited for.
  // Declared before the queues, whose destructors may still cancel receives.
  std::array<Delivery, kMaxChunksInFlight> deliveries;
  RequestQueue sends(ctx, window);
  RequestQueue recvs(ctx, window);
  int64_t posted = 0;
  for (int64_t done = 0; done < items; ++done) {
    for (; posted < items && posted < done + window; ++posted) {
      const RingItem item = item_at(posted);
      if (sends.size() == window) LOOM_RETURN_IF_ERROR(sends.WaitOldest());
      LOOM_RETURN_IF_ERROR(sends.Push(PostSend(ctx, step, right, send_chunk(item))));
      RingRecv recv = recv_chunk(item);
      deliveries[item.slot] = std::move(recv.how);
      LOOM_RETURN_IF_ERROR(
          recvs.Push(PostRecv(ctx, step, left, recv.into, deliveries[item.slot])));
    }
    LOOM_RETURN_IF_ERROR(recvs.WaitOldest());
    LOOM_RETURN_IF_ERROR(deliveries[item_at(done).slot].failure);
  }
  return sends.WaitAll();
}

// ReduceScatterPass: the reduce-scatter phase over the n blocks of `input`. At step s
// the partial reduction of block b = r-s-2 arrives from the left; with this rank's
// input block b folded in, it becomes accumulator(s, b) (a view of block b's size),
// which step s+1 forwards to the right. Rank r's result is accumulator(n-2, r). Every
// chunk is reduced as it is received (acc = input op theirs), so there is no staging
// buffer, in place or not, and the output is never copied from the input first.
template <typename Accumulator>
absl::Status ReduceScatterPass(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                               Accumulator accumulator, int most_in_flight = kMaxChunksInFlight) {
  const RingPlan plan(ctx, input.size(), input.dtype());
  const int n = plan.n;
  const int r = ctx.rank();
  const auto recv_block = [&](int s) { return Mod(r - s - 2, n); };
  const auto input_chunk = [&](int block, int chunk) {
    return Slice(input, plan.Chunk(block, chunk));
  };
  const auto acc_chunk = [&](int s, int chunk) {
    const BufferView acc = accumulator(s, recv_block(s));
    return Slice(acc, Block(acc.size(), plan.chunks, chunk));
  };
  return RunRingPhase(
      ctx, kReduceScatterStep, plan,
      [&](const RingItem& item) -> ConstBufferView {
        // Step 0 sends this rank's own block r-1; later steps forward the block the
        // previous step reduced.
        if (item.step == 0) return input_chunk(Mod(r - 1, n), item.chunk);
        return acc_chunk(item.step - 1, item.chunk);
      },
      [&](const RingItem& item) {
        return RingRecv{acc_chunk(item.step, item.chunk),
                        Delivery::Reduce(op, input_chunk(recv_block(item.step), item.chunk))};
      },
      most_in_flight);
}

}  // namespace

absl::Status RingReduceScatterBlocks(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                                     BufferView output) {
  if (input.size() != output.size() || (!input.empty() && input.dtype() != output.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring reduce-scatter blocks: input has ", input.size(), " ", DTypeName(input.dtype()),
        ", output ", output.size(), " ", DTypeName(output.dtype())));
  }
  const int n = ctx.size();
  if (input.empty()) return absl::OkStatus();
  if (n == 1) return Copy(input, output);
  const size_t count = input.size();
  return ReduceScatterPass(ctx, op, input,
                           [&](int, int block) { return Slice(output, Block(count, n, block)); });
}

absl::Status RingAllGatherBlocks(const CallContext& ctx, BufferView buffer) {
  const int n = ctx.size();
  if (n == 1 || buffer.empty()) return absl::OkStatus();
  const RingPlan plan(ctx, buffer.size(), buffer.dtype());
  const int r = ctx.rank();
  return RunRingPhase(
      ctx, kAllGatherStep, plan,
      [&](const RingItem& item) -> ConstBufferView {
        // Step 0 sends this rank's own block; later steps forward what arrived.
        return Slice(buffer, plan.Chunk(Mod(r - item.step, n), item.chunk));
      },
      [&](const RingItem& item) {
        return RingRecv{Slice(buffer, plan.Chunk(Mod(r - item.step - 1, n), item.chunk)),
                        Delivery::Copy()};
      });
}

absl::Status RingAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring all_reduce", args.count, args.count));
  LOOM_RETURN_IF_ERROR(RingReduceScatterBlocks(ctx, args.op, args.input, args.output));
  return RingAllGatherBlocks(ctx, args.output);
}

absl::Status RingReduceScatter(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring reduce_scatter", n * count, count));
  if (count == 0) return absl::OkStatus();
  if (n == 1) return Copy(args.input, args.output);
  // The output holds one block, so partial reductions alternate between two blocks
  // of scratch: step s+1 forwards step s's block while receiving into the other.
  BufferView partial;
  if (n > 2) {
    const size_t width = DTypeSize(args.output.dtype());
    LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> bytes,
                          ctx.scratch->Get(kRingAccumulatorSlot, 2 * count * width));
    partial = BufferView(bytes.data(), 2 * count, args.output.dtype());
  }
  return ReduceScatterPass(ctx, args.op, args.input, [&](int s, int) {
    return s == n - 2 ? args.output : Slice(partial, (s % 2) * count, count);
  });
}

absl::Status RingAllGather(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring all_gather", args.count, n * args.count));
  if (args.count == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(
      Copy(args.input, Slice(args.output, Block(args.output.size(), n, ctx.rank()))));
  return RingAllGatherBlocks(ctx, args.output);
}

absl::Status RingReduce(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "ring reduce"));
  const int n = ctx.size();
  const int r = ctx.rank();
  const bool is_root = r == args.root;
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring reduce", count, is_root ? count : 0));
  if (count == 0) return absl::OkStatus();
  if (n == 1) return Copy(args.input, args.output);

  // 1. Reduce-scatter. The root reduces into its output; the others have none, so
  //    their partial reductions alternate between two blocks of scratch.
  const DType dtype = args.input.dtype();
  const size_t max_block = Block(count, n, 0).count;
  BufferView partial;
  if (!is_root) {
    LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> bytes,
                          ctx.scratch->Get(kRingAccumulatorSlot, 2 * max_block * DTypeSize(dtype)));
    partial = BufferView(bytes.data(), 2 * max_block, dtype);
  }
  const auto accumulator = [&](int s, int block) {
    const BlockRange range = Block(count, n, block);
    if (is_root) return Slice(args.output, range);
    return Slice(partial, (s % 2) * max_block, range.count);
  };
  // A non-root's step s+2 reduces into the scratch block that step s+1 forwards
  // from, but blocks differ in length by one element, so their chunk c ends differ
  // and step s+2's chunk c overlaps step s+1's chunk c+1: that send must be complete
  // before the receive is posted, which a window of fewer than `chunks` items keeps
  // (RunRingPhase's argument, one chunk later). Found when the window first went
  // past two chunks; with two it held for three chunks or more.
  const int most_in_flight = is_root ? kMaxChunksInFlight
                                     : std::max(1, RingPlan(ctx, count, dtype).chunks - 1);
  LOOM_RETURN_IF_ERROR(
      ReduceScatterPass(ctx, args.op, args.input, accumulator, most_in_flight));

  // 2. Gather: every rank sends its reduced block to the root, which takes at most
  //    kMinChunksInFlight of them at a time.
  if (!is_root) {
    RequestQueue send(ctx, 1);
    LOOM_RETURN_IF_ERROR(send.Push(PostSend(ctx, kGatherStep, args.root, accumulator(n - 2, r))));
    return send.WaitAll();
  }
  RequestQueue recvs(ctx, kMinChunksInFlight);
  for (int k = 1; k < n; ++k) {
    const int peer = Mod(r + k, n);
    if (recvs.size() == kMinChunksInFlight) LOOM_RETURN_IF_ERROR(recvs.WaitOldest());
    LOOM_RETURN_IF_ERROR(
        recvs.Push(PostRecv(ctx, kGatherStep, peer, Slice(args.output, Block(count, n, peer)))));
  }
  return recvs.WaitAll();
}

absl::Status RingBroadcast(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "ring broadcast"));
  const int n = ctx.size();
  const int r = ctx.rank();
  const bool is_root = r == args.root;
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring broadcast", is_root ? count : kUnchecked, count));
  if (count == 0) return absl::OkStatus();
  if (is_root) LOOM_RETURN_IF_ERROR(Copy(args.input, args.output));
  if (n == 1) return absl::OkStatus();

  // The chain root, root+1, ..., root-1: every rank but the root receives chunk c
  // from its left neighbour, and every rank but the last forwards it to the right as
  // soon as it has arrived, so all links are busy at once with different chunks.
  const int position = Mod(r - args.root, n);
  const bool receives = position != 0;
  const bool forwards = position != n - 1;
  const int left = Mod(r - 1, n);
  const int right = Mod(r + 1, n);
  const int chunks = NumChunks(ctx, count, args.output.dtype());
  const int window =
      std::min(ChunksInFlight(ctx, ctx.chunk_bytes, {left, right}, kMinChunksInFlight), chunks);
  const auto chunk = [&](int c) { return Block(count, chunks, c); };
  const ConstBufferView source = is_root ? args.input : ConstBufferView(args.output);
  RequestQueue sends(ctx, window);
  RequestQueue recvs(ctx, window);
  int posted = 0;
  for (int c = 0; c < chunks; ++c) {
    if (receives) {
      for (; posted < chunks && posted < c + window; ++posted) {
        LOOM_RETURN_IF_ERROR(
            recvs.Push(PostRecv(ctx, kBroadcastStep, left, Slice(args.output, chunk(posted)))));
      }
      LOOM_RETURN_IF_ERROR(recvs.WaitOldest());
    }
    if (forwards) {
      if (sends.size() == window) LOOM_RETURN_IF_ERROR(sends.WaitOldest());
      LOOM_RETURN_IF_ERROR(
          sends.Push(PostSend(ctx, kBroadcastStep, right, Slice(source, chunk(c)))));
    }
  }
  return sends.WaitAll();
}

}  // namespace collectives_internal
}  // namespace loom

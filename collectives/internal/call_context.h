// What an algorithm gets for one collective call on one rank: the transport of the
// communicator (ranks 0..size-1), a tag range of its own, a deadline, a pipelining
// chunk size and a scratch arena that outlives the call. Algorithms (ring.h, tree.h,
// ...) are written against this and the few primitives below: send, receive, wait,
// reduce-into, copy.
//
// Example (one step of a ring: pass a block to the right, take one from the left):
//   LOOM_RETURN_IF_ERROR(Exchange(ctx, /*step=*/s, RightPeer(ctx), ToSend(args, block),
//                                 LeftPeer(ctx), ScratchBytes));
#ifndef LOOM_COLLECTIVES_INTERNAL_CALL_CONTEXT_H_
#define LOOM_COLLECTIVES_INTERNAL_CALL_CONTEXT_H_

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/collective_kind.h"
#include "collectives/reduce/reduce_kernels.h"
#include "collectives/transport/transport.h"
#include "core/aligned_buffer.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {
namespace collectives_internal {

// The low kStepBits bits of a tag number an algorithm's steps within one call; the
// bits above them are the call's (the communicator's id and sequence number).
inline constexpr int kStepBits = 16;
inline constexpr uint32_t kMaxSteps = uint32_t{1} << kStepBits;

// CollectiveArgs: the operands of one call. `count` is the per-rank element count
// the Communicator checked; buffer sizes by kind (n = ranks):
//   all_reduce      input count          output count
//   reduce_scatter  input n * count      output count
//   all_gather      input count          output n * count
//   broadcast       input count (root)   output count (every rank; root may alias)
//   reduce          input count          output count (root only; empty elsewhere)
//   all_to_all      input n * count      output n * count
//   all_to_allv     input sum(send_counts) output sum(recv_counts)
//   gather          input count          output n * count (root only)
//   scatter         input n * count (root only) output count
//   barrier         empty                empty
// `input` and `output` are either the same memory (in place; for reduce_scatter and
// all_gather "in place" means output is rank's block of input, or input rank's block
// of output, as in NCCL) or disjoint. `op` is never kAvg: the Communicator reduces
// an average as a sum and divides once at the end.
struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  size_t count = 0;
  ConstBufferView input;
  BufferView output;
  // all_to_allv: elements this rank sends to / receives from each rank, packed in
  // rank order in input / output.
  absl::Span<const size_t> send_counts;
  absl::Span<const size_t> recv_counts;
};

// Scratch: per-communicator working memory that survives calls, so a large
// collective does not page-fault fresh memory in every call. Slots are independent
// buffers; Get keeps a slot's old contents only up to its old size. The memory
// comes from the transport's AllocateBuffer (shm: buffers the peers map, so the
// partial results an algorithm sends out of its scratch skip the kernel copy too),
// or is ordinary where there is no transport or it has no host buffers (nccl).
class Scratch {
 public:
  explicit Scratch(Transport* allocator = nullptr) : allocator_(allocator) {}

  // Get returns at least `bytes` bytes of slot `slot`, 64-byte aligned.
  // ResourceExhausted when the allocation fails. Inline where the slot is already
  // large enough, as it is in every call of a loop after the first.
  absl::StatusOr<absl::Span<std::byte>> Get(int slot, size_t bytes) {
    if (slot >= 0 && static_cast<size_t>(slot) < slots_.size() && slots_[slot].size() >= bytes) {
      return slots_[slot].bytes().subspan(0, bytes);
    }
    return Grow(slot, bytes);
  }

 private:
  absl::StatusOr<absl::Span<std::byte>> Grow(int slot, size_t bytes);

  Transport* allocator_;
  std::vector<CommBuffer> slots_;
};

// CallCounters: one collective's counters in a communicator: calls, and the payload
// bytes its calls posted to send and to receive (PostSend and PostRecv add them).
// Atomics, so that other threads may read them while the driving thread adds to
// them; only that one thread writes them, so Add is a plain load and store rather
// than a locked read-modify-write on every message.
struct CallCounters {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> failed_calls{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};

  // Add adds `n` to a counter of the driving thread.
  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

// CallContext: one rank's view of one collective call.
struct CallContext {
  Transport* transport = nullptr;
  // Where PostSend and PostRecv count the bytes they post; none when null.
  CallCounters* counters = nullptr;
  // Tags of this call are tag_base + step, step < kMaxSteps.
  Tag tag_base = 0;
  // The call's stamp: every message of the call carries it, so a peer in another
  // call fails at once instead of waiting (transport.h, "Stamps"). Unstamped: none.
  Stamp stamp;
  absl::Time deadline = absl::InfiniteFuture();
  // Large messages are cut into chunks of about this many bytes, so that sending
  // one chunk overlaps reducing the previous one and a chunk stays in cache
  // between its receive and its reduction.
  size_t chunk_bytes = size_t{256} << 10;
  Scratch* scratch = nullptr;
  // Ranks per node for the hierarchical algorithm (ranks node*k .. node*k+k-1 share
  // a node, as topology's NodeLayout numbers them); 0 means one node.
  int ranks_per_node = 0;
  // This rank's endpoint among its node's ranks (CommunicatorOptions::node_transport),
  // for the hierarchical algorithm's intra-node phases; null: use `transport`.
  Transport* node_transport = nullptr;
  // The path between hosts as every rank of the call holds it alike (the
  // communicator's cost model, when its constants were measured or given: round trip
  // 2 x inter_node_alpha, rate 1 / inter_node_beta), for the algorithms whose window
  // must be the same on every rank (AgreedChunksInFlight). Zeros: none known.
  PathEstimate agreed_path;

  int rank() const { return transport->rank(); }
  int size() const { return transport->size(); }
  Tag StepTag(uint32_t step) const { return tag_base + step; }
};

// BlockRange: elements [offset, offset + count) of a buffer.
struct BlockRange {
  size_t offset = 0;
  size_t count = 0;
};

// Block cuts `count` elements into `parts` contiguous blocks whose sizes differ by at
// most one (the first count % parts blocks are one longer) and returns block
// `index`. Used wherever a buffer is divided among ranks or chunks.
inline BlockRange Block(size_t count, int parts, int index) {
  const size_t n = static_cast<size_t>(parts);
  const size_t i = static_cast<size_t>(index);
  const size_t base = count / n;
  const size_t extra = count % n;
  return BlockRange{i * base + (i < extra ? i : extra), base + (i < extra ? 1 : 0)};
}

// Slice returns the elements [offset, offset + count) of a view (no bounds check
// beyond a debug assertion: callers compute ranges with Block from the view's own
// size).
inline ConstBufferView Slice(ConstBufferView view, size_t offset, size_t count) {
  assert(offset + count <= view.size());
  return ConstBufferView(view.data() + offset * DTypeSize(view.dtype()), count, view.dtype());
}
inline BufferView Slice(BufferView view, size_t offset, size_t count) {
  assert(offset + count <= view.size());
  return BufferView(view.data() + offset * DTypeSize(view.dtype()), count, view.dtype());
}
// Slice returns the elements `range` of a view.
inline ConstBufferView Slice(ConstBufferView view, BlockRange range) {
  return Slice(view, range.offset, range.count);
}
inline BufferView Slice(BufferView view, BlockRange range) {
  return Slice(view, range.offset, range.count);
}

// SameMemory reports whether two views start at the same address (an in-place call).
inline bool SameMemory(ConstBufferView a, ConstBufferView b) { return a.data() == b.data(); }

// NumChunks returns how many chunks of about ctx.chunk_bytes a block of `count`
// elements of `dtype` is cut into (at least 1).
int NumChunks(const CallContext& ctx, size_t count, DType dtype);

// kMaxChunksInFlight bounds ChunksInFlight (and the staging a window holds).
inline constexpr int kMaxChunksInFlight = 32;

// ChunksInFlight returns how many chunks of `chunk_bytes` a pipelined algorithm keeps
// posted towards `peers`: `least`, or more where the transport has measured a path
// whose bandwidth-delay product they would not fill (Transport::EstimatePath; the
// longest round trip and fastest rate over `peers`, which may each be measured on
// a different one). Each
// chunk is a message whose handshake costs a round trip before its data moves, so a
// window of w chunks keeps the link busy when (w - 1) chunks cover about two
// bandwidth-delay products. At most kMaxChunksInFlight. Every rank of a call must
// agree on the window where the algorithm pairs slots across ranks: the ring does not
// (each side's window is its own).
int ChunksInFlight(const CallContext& ctx, size_t chunk_bytes, std::initializer_list<int> peers,
                   int least);

// SendWindow: how many of `chunks` chunks of `chunk_bytes` an exchange with `peer`
// keeps posted to send when every receive is posted up front (each side's window is
// then its own): where the transport measures the path (between hosts: mpi, gloo),
// ChunksInFlight with at least 2, never more than `chunks`; over memory (nothing
// measured) all of them, since a memory transport finishes a send only once the
// receiver has copied it and a window leaves the sender waiting (halving-doubling's
// 64 MiB on 2 ranks over shm: 37..39 ms with a window of 2, 27..29 without). Over
// gloo, posting every chunk of halving-doubling's 16 MiB exchange at once was 6..10%
// slower than two at a time. (Direct's exchanges keep posting all their chunks: the
// same window there gained 2..4% over gloo at 16 MiB and lost 2..4% at 64 MiB, over
// gloo on a 2 ms link and over mpi on 3 hosts.)
int SendWindow(const CallContext& ctx, size_t chunk_bytes, int peer, int chunks);

// AgreedChunksInFlight: the same window for ctx.agreed_path, so the same on every
// rank of the call (the trees, whose ranks forward chunks a fixed number of
// iterations after their parents, need one window everywhere). `least` without one.
int AgreedChunksInFlight(const CallContext& ctx, size_t chunk_bytes, int least);

// AgreedWindow: the agreed window (at least 2) for `count` elements of `dtype` cut into
// NumChunks chunks, never more than the chunks there are (nor below 2). The same on
// every rank that passes the same count: the trees' pipelines set their lags by it.
int AgreedWindow(const CallContext& ctx, size_t count, DType dtype);

// Delivery: how a receive writes what arrives (a Combiner for the transport; see
// transport.h). kCopy: dst = theirs, the transport's own copy. kReduce:
// dst = op(mine, theirs), `mine` being this rank's operand of dst's size (dst itself
// for in place): the reduction reads the message where the transport has it (over
// shm, straight out of the sender's mapped buffer), with no staging buffer and no
// second pass over the data. A Delivery must outlive its request; after the request
// completes, `failure` holds what went wrong in a piece (never expected: the
// algorithms build every Delivery to match its receive).
struct Delivery {
  enum class Kind : uint8_t { kCopy, kReduce };

  static Delivery Copy() { return Delivery(); }
  static Delivery Reduce(ReduceOp op, ConstBufferView mine) {
    Delivery delivery;
    delivery.kind = Kind::kReduce;
    delivery.op = op;
    delivery.mine = mine;
    return delivery;
  }

  Combiner AsCombiner() const {
    if (kind == Kind::kCopy) return Combiner{};
    return Combiner{&Apply, this};
  }

  Kind kind = Kind::kCopy;
  ReduceOp op = ReduceOp::kSum;
  ConstBufferView mine;
  mutable absl::Status failure;

 private:
  static void Apply(const void* state, std::byte* dst, const std::byte* src, size_t offset,
                    size_t bytes);
};

// Primitives. `step` selects the tag (ctx.StepTag(step)); messages of one step
// between the same two ranks match in order, so chunks of a step share its tag.
absl::StatusOr<Request> PostSend(const CallContext& ctx, uint32_t step, int peer,
                                 ConstBufferView data);
absl::StatusOr<Request> PostRecv(const CallContext& ctx, uint32_t step, int peer,
                                 BufferView data);
// PostRecv with a Delivery (which must outlive the request).
absl::StatusOr<Request> PostRecv(const CallContext& ctx, uint32_t step, int peer, BufferView data,
                                 const Delivery& delivery);
absl::Status WaitAll(const CallContext& ctx, absl::Span<const Request> requests);
// Exchange sends `send` to `send_peer` and receives `recv` from `recv_peer` at once
// and waits for both.
absl::Status Exchange(const CallContext& ctx, uint32_t step, int send_peer, ConstBufferView send,
                      int recv_peer, BufferView recv);
// Copy copies src into dst (same dtype and size; a no-op when they alias).
absl::Status Copy(ConstBufferView src, BufferView dst);
// (dst = a op b is collectives/reduce's ReduceTo: one pass, dst may be a or b.)

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_CALL_CONTEXT_H_

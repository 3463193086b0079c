// Ring algorithms: the bandwidth-optimal collectives for large messages. The n ranks
// form a ring (rank r sends to r+1 and receives from r-1, mod n); a buffer is cut
// into n blocks (Block(count, n, b)) and each block into chunks of about
// ctx.chunk_bytes, and chunks flow around the ring one step behind each other, so
// every link carries data all the time and a chunk received is reduced while it is
// still in cache (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for
// clusters of workstations", 2009; the chunked pipeline as in NCCL and Gloo).
//
// All-reduce is a reduce-scatter followed by an all-gather:
//   reduce-scatter, step s = 0 .. n-2: send block r-s-1 to the right; receive block
//     r-s-2 from the left and fold this rank's own block into it. After n-1 steps
//     block r holds the reduction of every rank's block r.
//   all-gather, step s = 0 .. n-2: send block r-s to the right; receive block r-s-1
//     from the left. After n-1 steps every rank holds every block.
// Each rank sends and receives 2 (n-1)/n of the buffer, whatever n.
//
// Example (4 ranks, on each rank's thread; sizes per CollectiveArgs):
//   std::vector<float> grads = ...;   // 1000 floats, x_r on rank r
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kAllReduce;
//   args.op = ReduceOp::kSum;
//   args.count = grads.size();
//   args.input = ConstBufferView::Of(absl::MakeConstSpan(grads));
//   args.output = BufferView::Of(absl::MakeSpan(grads));   // in place
//   LOOM_RETURN_IF_ERROR(RingAllReduce(ctx, args));
//   // grads == x_0 + x_1 + x_2 + x_3 on every rank, bitwise the same everywhere
//
// Every function returns InvalidArgument naming the sizes when the buffers do not
// have the sizes CollectiveArgs lists for the kind (or the root is not a rank), and
// otherwise the first error of the transport (see transport.h: FailedPrecondition
// when ranks disagree on sizes, DeadlineExceeded, Unavailable, Aborted). On an error
// the rank's requests still in flight are cancelled before it returns, so nothing
// writes its buffers afterwards; its peers may then wait until their deadline.
//
// Bits: each element of an all-reduce's result is the same on every rank, but the
// order in which ranks' values are combined depends on the element's block, so a
// float sum differs from the rank-order fold (direct.h) in its last bits.
//
// Tags: each phase uses one step number (messages of a phase between two ranks are
// posted in the same order on both sides, so FIFO matching pairs them); a call uses
// steps 0 to 3 only.
//
// Receives reduce as they land (call_context.h Delivery), so no chunk is staged.
// Scratch: slot kRingAccumulatorSlot holds partial reductions where the output is too
// small to (reduce-scatter, and reduce on ranks other than the root). Buffers passed
// in must not live in it.
#ifndef LOOM_COLLECTIVES_RING_H_
#define LOOM_COLLECTIVES_RING_H_

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"

namespace loom {
namespace collectives_internal {

inline constexpr int kRingAccumulatorSlot = 1;

// RingAllReduce: output = op over all ranks' input (count elements each), in place
// when SameMemory(input, output). RingReduceScatterBlocks then RingAllGatherBlocks;
// n == 1 is a copy. Errors as above.
absl::Status RingAllReduce(const CallContext& ctx, const CollectiveArgs& args);

// RingReduceScatter: input n * count, output count; rank r's output is op over all
// ranks' input block r. In place when output is rank r's block of input. Errors as
// above.
absl::Status RingReduceScatter(const CallContext& ctx, const CollectiveArgs& args);

// RingAllGather: input count, output n * count; block b of output is rank b's input.
// In place when input is rank r's block of output. Errors as above.
absl::Status RingAllGather(const CallContext& ctx, const CollectiveArgs& args);

// RingBroadcast: the root's input (count) reaches every rank's output along a chain
// root, root+1, ..., root-1, chunk by chunk, so that a large broadcast takes about
// the time of one transfer rather than n-1. The root's output may alias its input;
// other ranks' input is not read. Errors as above.
absl::Status RingBroadcast(const CallContext& ctx, const CollectiveArgs& args);

// RingReduce: the root's output (count) = op over all ranks' input; other ranks'
// output is empty. A ring reduce-scatter, then every rank sends its reduced block to
// the root. The root's output may alias its input. Errors as above.
absl::Status RingReduce(const CallContext& ctx, const CollectiveArgs& args);

// RingReduceScatterBlocks: the reduce-scatter half of an all-reduce. `input` and
// `output` both have `count` elements (same dtype; the same memory or disjoint);
// afterwards block Block(count, n, r) of rank r's output holds op over every rank's
// input block r, and output's other blocks hold partial results (unspecified).
// InvalidArgument naming the sizes and dtypes when they differ; transport errors as
// above.
absl::Status RingReduceScatterBlocks(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                                     BufferView output);

// RingAllGatherBlocks: the all-gather half of an all-reduce. Rank r's block
// Block(count, n, r) of `buffer` is in place on entry; afterwards every rank's
// buffer holds every rank's block. Returns only transport errors (as above).
absl::Status RingAllGatherBlocks(const CallContext& ctx, BufferView buffer);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_RING_H_

// Direct algorithms: one-shot collectives for tiny messages and deterministic mode.
// Every rank posts all of its sends and receives at once and waits for them, so a call
// costs one message latency whatever n, at the price of n-1 messages per rank (n-1
// copies of the data for all-reduce below kDirectTwoShotBytes). Latency-bound calls (a
// few KiB, barriers, flags, scalars) are where they win; the ring (ring.h) wins for
// large messages.
//
// Deterministic reductions. Every reduction here (all-reduce, reduce-scatter,
// reduce) gathers the n contributions first and folds them in rank order:
//   out = x_0;  out = out op x_1;  ...;  out = out op x_{n-1}
// that is ((x_0 op x_1) op x_2) ... with the reduction kernels, one element-wise
// ReduceInto per rank. The result is therefore bitwise identical on every rank, in
// every run, for every chunk size, and equal to the sequential rank-order fold
// (RankOrderReduce in algorithm_testing.h): what the Communicator's deterministic
// mode promises. (The kernels' ops are commutative bit for bit, NaNs included, so
// only the association matters.)
//
// Example (4 ranks, on each rank's thread):
//   std::vector<float> x = {...};   // 3 floats, x_r on rank r
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kAllReduce;
//   args.op = ReduceOp::kSum;
//   args.count = 3;
//   args.input = ConstBufferView::Of(absl::MakeConstSpan(x));
//   args.output = BufferView::Of(absl::MakeSpan(x));   // in place
//   LOOM_RETURN_IF_ERROR(DirectAllReduce(ctx, args));
//   // x == ((x_0 + x_1) + x_2) + x_3 on every rank, the same bits everywhere
//
// Every function returns InvalidArgument naming the sizes when the buffers do not
// have the sizes CollectiveArgs lists for the kind (or the root is not a rank), and
// otherwise the first error of the transport (FailedPrecondition when ranks
// disagree on sizes, DeadlineExceeded, Unavailable, Aborted). On an error the rank's
// requests still in flight are cancelled before it returns, so nothing writes its
// buffers afterwards; its peers may then wait until their deadline.
//
// Tags: each function uses a step number of its own (every ordered pair of ranks
// exchanges at most one message per call), steps 0 to 7.
//
// Scratch: slot kDirectContributionsSlot holds the received contributions of a
// reduction (n times the rank's result size), slot kDirectRequestsSlot the posted
// requests (2 (n-1) of them). Buffers passed in must not live in these slots.
#ifndef LOOM_COLLECTIVES_DIRECT_H_
#define LOOM_COLLECTIVES_DIRECT_H_

#include <cstddef>

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"

namespace loom {
namespace collectives_internal {

inline constexpr int kDirectContributionsSlot = 2;
inline constexpr int kDirectRequestsSlot = 3;

// DirectAllReduce: every rank sends its whole input (count) to every rank; each rank
// folds the n inputs in rank order into its output. In place when
// SameMemory(input, output). From kDirectTwoShotBytes on more than two ranks it runs
// in two shots instead: DirectReduceScatterBlocks, then DirectAllGatherBlocks, so a
// rank sends 2 (n-1)/n of the data rather than n-1 copies of it (at 3 ranks across
// hosts, 2/3 of the link's rate became 0.9); the folds, and so the bits, are the
// same. (At two ranks both move the data once, and one shot has one latency.)
// Every exchange is cut into up to 8 chunks, folded as each lands: the transfer of
// the rest overlaps the fold, and a transport that stages messages (gloo) stages a
// chunk at a time. Errors as above.
inline constexpr size_t kDirectTwoShotBytes = size_t{64} << 10;
constexpr bool DirectAllReduceInTwoShots(int ranks, size_t bytes) {
  return ranks > 2 && bytes >= kDirectTwoShotBytes;
}
absl::Status DirectAllReduce(const CallContext& ctx, const CollectiveArgs& args);

// DirectReduceScatter: input n * count, output count; rank r's output is the rank-order
// fold of every rank's input block r. In place when output is rank r's block of
// input. Errors as above.
absl::Status DirectReduceScatter(const CallContext& ctx, const CollectiveArgs& args);

// DirectReduceScatterBlocks: as RingReduceScatterBlocks (ring.h), folding in rank
// order: `input` and `output` have `count` elements each (same dtype; the same
// memory or disjoint), and afterwards block Block(count, n, r) of rank r's output is
// the rank-order fold of every rank's input block r; output's other blocks are left
// as they were. InvalidArgument naming the sizes and dtypes when they differ;
// transport errors as above.
absl::Status DirectReduceScatterBlocks(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                                       BufferView output);

// DirectAllGather: input count, output n * count; block b of every rank's output is
// rank b's input. In place when input is rank r's block of output. Errors as above.
absl::Status DirectAllGather(const CallContext& ctx, const CollectiveArgs& args);

// DirectAllGatherBlocks: as RingAllGatherBlocks (ring.h): rank r's block
// Block(count, n, r) of `buffer` is in place on entry; afterwards every rank's buffer
// holds every rank's block. Returns only transport errors (as above).
absl::Status DirectAllGatherBlocks(const CallContext& ctx, BufferView buffer);

// DirectBroadcast: the root sends its input (count) to every other rank's output;
// other ranks' input is not read. The root's output may alias its input. Errors as
// above.
absl::Status DirectBroadcast(const CallContext& ctx, const CollectiveArgs& args);

// DirectReduce: every rank sends its input (count) to the root, which folds them in
// rank order into its output; other ranks' output is empty. The root's output may
// alias its input. Errors as above.
absl::Status DirectReduce(const CallContext& ctx, const CollectiveArgs& args);

// DirectGather: every rank sends its input (count) to the root, whose output
// (n * count) gets rank b's input as block b; other ranks' output is not touched. In
// place at the root when its input is its block of output. Errors as above.
absl::Status DirectGather(const CallContext& ctx, const CollectiveArgs& args);

// DirectScatter: the root's input (n * count) is cut into n blocks and block b goes
// to rank b's output (count); other ranks' input is not read. In place at the root
// when its output is its block of input. Errors as above.
absl::Status DirectScatter(const CallContext& ctx, const CollectiveArgs& args);

// DirectBarrier: returns on each rank only once every rank has entered. Every rank
// sends a zero-byte message to every other rank and waits to receive one from each;
// a rank's message leaves only after it entered, so no rank can leave before the
// last one arrives. input and output must be empty (InvalidArgument otherwise);
// transport errors as above.
absl::Status DirectBarrier(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_DIRECT_H_

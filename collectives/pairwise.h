// Pairwise exchange: the all-to-all of MPI libraries for medium and large messages
// (Thakur, Rabenseifner and Gropp, "Optimization of collective communication
// operations in MPICH", 2005). In n-1 steps every rank exchanges one block with one
// peer: at step s rank r sends its block for rank r+s to r+s and receives rank
// r-s's block for it from r-s (mod n), so every rank sends and receives exactly one
// message per step and no rank is the target of two at once. Its own block is copied
// locally.
//
// Example (3 ranks, 2 elements per block, on each rank's thread):
//   // rank r's input: {r0 r0 | r1 r1 | r2 r2}, block b meant for rank b
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kAllToAll;
//   args.count = 2;
//   args.input = ...;    // 6 elements
//   args.output = ...;   // 6 elements
//   LOOM_RETURN_IF_ERROR(PairwiseAllToAll(ctx, args));
//   // rank 1's output: {01 01 | 11 11 | 21 21}: block b came from rank b
//
// Both functions return InvalidArgument naming the sizes when the buffers or counts
// do not fit each other, and otherwise the first error of the transport
// (FailedPrecondition when two ranks disagree on a message's size,
// DeadlineExceeded, Unavailable, Aborted). On an error nothing is left in flight.
//
// In place (input and output the same memory) a block would be overwritten before it
// is sent, so the input is first copied into scratch slot kPairwiseInputSlot.
#ifndef LOOM_COLLECTIVES_PAIRWISE_H_
#define LOOM_COLLECTIVES_PAIRWISE_H_

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

inline constexpr int kPairwiseInputSlot = 4;

// PairwiseAllToAll: input and output n * count; block b of rank r's output (elements
// [b * count, (b + 1) * count)) is block r of rank b's input.
absl::Status PairwiseAllToAll(const CallContext& ctx, const CollectiveArgs& args);

// PairwiseAllToAllV: rank r sends args.send_counts[b] elements to rank b and receives
// args.recv_counts[b] from it, blocks packed in rank order in input and output. Both
// count lists have n entries, their sums are the input's and output's sizes, and
// send_counts[r] == recv_counts[r] (the block kept); InvalidArgument naming them
// otherwise. A rank's send_counts[b] must equal rank b's recv_counts[r]: a mismatch
// fails both with FailedPrecondition at that step.
absl::Status PairwiseAllToAllV(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_PAIRWISE_H_

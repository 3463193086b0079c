// Recursive halving and doubling (Thakur, Rabenseifner, Gropp 2005, "Optimization of
// collective communication operations in MPICH"): the bandwidth-optimal
// reduce-scatter and all-gather in log2(n) exchanges, and Rabenseifner's all-reduce
// built from them.
//
// Reduce-scatter by recursive halving: in the first step each rank swaps half of
// its vector with the rank n/2 away, sending the half the partner keeps and
// reducing the half it keeps; the next step does the same within the kept half at
// distance n/4, and so on, until each rank holds the reduction of its own block.
// Halving the distance (rather than doubling it, as MPICH's all-reduce does) is what
// leaves rank i with block i, in rank order, without a bit-reversal permutation.
// All-gather by recursive doubling runs the same exchanges backwards: distance 1, 2,
// 4, ..., each swapping everything gathered so far. All-reduce (Rabenseifner's
// algorithm) is the one followed by the other, on the `count` elements cut into
// blocks with Block(count, p, i), but taking its partners nearest first (1, 2, 4, ...
// in the halving): a rank then ends the halving with a block other than its own,
// which an all-reduce does not mind, and where consecutive ranks share a node the
// full-size first exchanges stay inside it (2 hosts of 2 ranks: 0.67 of the link's
// bus share became 1.1..1.2).
//
// n that is not a power of two: with p the largest power of two <= n and r = n - p,
// the first 2r ranks pair up. For reduce-scatter and all-gather, as in the paper,
// each even one sends its whole input to the odd one above it (which reduces or
// keeps it) and then waits, the remaining p ranks run the power-of-two algorithm, and
// the odd ranks hand the result back to their even partners at the end. All-reduce
// splits the pair's part instead: the even rank holds the lower half of the slots and
// the odd one the upper half, the two swap halves first and last, and each half goes
// straight between its holders in the first halving and the last doubling (at 3
// ranks across hosts, 0.42..0.48 of the link became 0.62..0.66, of a ceiling of 2/3;
// PairedFold in the .cc).
// An all-reduce of at least kHalvingDoublingRadixBytes on n = p * m ranks, m odd and
// 3 <= m <= kHalvingDoublingMaxRadix, instead runs a radix-m step inside the
// power-of-two algorithm (the "recursive multiplying" of Ruefenacht et al. 2017):
// each block of p consecutive ranks reduce-scatters by halving, the m ranks that hold
// the same slot (one per block) all-reduce it directly (direct.h, folding in rank
// order), and each block all-gathers by doubling. A rank then sends 2 (n-1)/n of the
// data, as the ring does, where the fold sends more through the pair's links (at 3
// ranks the fold's ceiling is 2/3 of that rate); and with several ranks per node the
// full-size exchanges stay in the node. Smaller calls keep the fold's 2 log2(p) + 2
// latencies against the radix step's 2 (m - 1) messages.
// In the all-reduce of a power of two the last halving and the first doubling have
// the same partner; they run as one exchange cut into chunks (at most 8, of about
// the pipeline chunk), each chunk of the kept slot reduced as it lands and sent back
// at once, so the doubling starts while the halving still moves; the halving chunks
// go out a window at a time, sized from the measured path (at 2 ranks across hosts
// 2 ms apart over gloo, 29.0 / 88.5 ms at 4 / 16 MiB became 20.9 / 85.5).
// All of them keep every element's reduction in one place, so every rank ends with
// the same bits.
//
// Example (4 ranks, rank r's input is {r, r, r, r, r, r, r, r}, count 2):
//   CollectiveArgs args;
//   args.kind = CollectiveKind::kReduceScatter;
//   args.op = ReduceOp::kSum;
//   args.count = 2;
//   args.input = ConstBufferView::Of(absl::MakeConstSpan(mine));   // 8 elements
//   args.output = BufferView::Of(absl::MakeSpan(block));            // 2 elements
//   LOOM_RETURN_IF_ERROR(HalvingDoublingReduceScatter(ctx, args));
//   // block == {6, 6} on every rank: elements [2r, 2r + 2) summed over the ranks.
//
//   args.kind = CollectiveKind::kAllGather;   // input 2 elements, output 8
//   LOOM_RETURN_IF_ERROR(HalvingDoublingAllGather(ctx, args));
//   // output == {b0, b0, b1, b1, b2, b2, b3, b3}: rank r's input at [2r, 2r + 2).
#ifndef LOOM_COLLECTIVES_HALVING_DOUBLING_H_
#define LOOM_COLLECTIVES_HALVING_DOUBLING_H_

#include <cstddef>

#include "absl/status/status.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// The radix step's limits (above): the largest odd part m of n it takes, and the
// smallest all-reduce (bytes) it runs for.
inline constexpr int kHalvingDoublingMaxRadix = 7;
inline constexpr size_t kHalvingDoublingRadixBytes = size_t{64} << 10;

// HalvingDoublingRadix returns the m of the radix step an all-reduce of `bytes` on
// `ranks` ranks runs, or 1 when it runs the power-of-two algorithm or the fold.
constexpr int HalvingDoublingRadix(int ranks, size_t bytes) {
  if (ranks < 3 || bytes < kHalvingDoublingRadixBytes) return 1;
  int m = ranks;
  while (m % 2 == 0) m /= 2;
  return m >= 3 && m <= kHalvingDoublingMaxRadix ? m : 1;
}

// HalvingDoublingAllReduce reduces every rank's input (count elements) with args.op
// into every rank's output, in place or out of place (the input is never written
// then); count may be anything, including 0 and fewer than n. Returns
// InvalidArgument naming the values when a buffer does not hold count elements or
// the dtypes differ, ResourceExhausted when scratch cannot grow, and otherwise the
// transport's error (DeadlineExceeded, Unavailable, FailedPrecondition for a size
// mismatch between ranks, ...).
absl::Status HalvingDoublingAllReduce(const CallContext& ctx, const CollectiveArgs& args);

// HalvingDoublingReduceScatter reduces every rank's input (n * count elements) with
// args.op and leaves block r (elements [r * count, (r + 1) * count)) of the result
// in rank r's output (count elements). The output may be the rank's own block of the
// input (in place); the input is never written. Errors as HalvingDoublingAllReduce,
// plus InvalidArgument when the output overlaps the input other than as that block.
absl::Status HalvingDoublingReduceScatter(const CallContext& ctx, const CollectiveArgs& args);

// HalvingDoublingAllGather concatenates every rank's input (count elements) in rank
// order into every rank's output (n * count elements). The input may be the rank's
// own block of the output (in place). Errors as HalvingDoublingReduceScatter, with
// the roles of input and output swapped.
absl::Status HalvingDoublingAllGather(const CallContext& ctx, const CollectiveArgs& args);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_HALVING_DOUBLING_H_

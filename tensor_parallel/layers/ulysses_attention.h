// Ulysses attention (DeepSpeed-Ulysses): multi-head attention over a sequence split
// across the `cp` ranks of a context-parallel group, by re-sharding heads instead of
// passing keys and values around a ring (ring_attention.h). Each rank holds the
// queries, keys and values of every head at its positions (CpChunks, either layout);
// one all-to-all gives rank j the whole sequence of head group j (heads [j H / cp,
// (j + 1) H / cp)), each row placed at its global position; rank j runs plain flash
// attention (flash_attention.h) on the whole sequence of each of its heads, and a
// second all-to-all returns every output row and log-sum-exp to the rank holding that
// position. The backward does the same with Q, K, V, out, dL/d(out) and lse going out
// in one all-to-all and dQ, dK, dV coming home in another. It needs cp to divide the
// number of heads (CheckUlyssesHeads); where it does not, use ring attention.
//
// Same calling convention as the multi-head ring calls: RingAttentionHead /
// RingAttentionHeadGrad views of this rank's rows (the rows of CpChunks(seq_len,
// cp.size(), cp.rank(), options.layout), chunk after chunk), RingAttentionOptions, and
// the same results: out and lse assigned, gradients added.
//
// Traffic (elements sent per rank, f32, to other ranks only: an all-to-all's block to
// the rank itself is a local copy and is not counted). With H heads of d columns,
// G = H / cp heads per rank, S = seq_len and R this rank's rows:
//   forward   G (3 d R (cp - 1) + (d + 1) (S - R))    Q, K, V out; out and lse home
//   backward  G ((5 d + 1) R (cp - 1) + 3 d (S - R))  Q, K, V, out, dO, lse out; dQ, dK,
//                                                     dV home
// When the sequence divides evenly (R = S / cp) that is H (cp - 1) / cp R (4 d + 1)
// forward and H (cp - 1) / cp R (8 d + 1) backward, against ring attention's
// 2 H (cp - 1) R d and H (4 (cp - 1) + 2) R d: about 2 / cp of the ring's elements
// forward and a little less backward, in two all-to-all calls each way instead of
// cp - 1 and cp hops. UlyssesAttentionSentElements gives the exact counts for any
// split; they equal the Communicator's all_to_allv counters.
//
// Memory: a rank holds the whole sequence of its G heads (3 G S d + G S (d + 1) floats
// forward, 8 G S d + G S backward, beside what it sends and receives), where ring
// attention holds one visiting block.
//
// Example (cp = 4 thread ranks, seq_len = 100, 8 heads of d = 16; on rank 1, which
// holds rows at positions 13-25 and 76-87 and computes heads 2 and 3):
//   std::vector<RingAttentionHead> heads;  // 8 views of [25, 16] q, k, v, out; lse [25]
//   LOOM_RETURN_IF_ERROR(UlyssesAttentionForward(comm, heads, 100, {}));
//   // out, lse: every head's attention over the whole sequence at this rank's rows
//   // (grad views zeroed first: Backward adds into them)
//   LOOM_RETURN_IF_ERROR(UlyssesAttentionBackward(comm, head_grads, 100, {}));
//   UlyssesAttentionSentElements(100, 4, 1, CpLayout::kZigzag, 8, 16);
//   // {forward = 9750, backward = 19350} (ring attention: 19200 and 44800)
//   CheckUlyssesHeads(4, 3);
//   // InvalidArgument: "UlyssesAttention: 4 heads do not divide over cp 3; use ring
//   // attention"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_ULYSSES_ATTENTION_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_ULYSSES_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {

// UlyssesAttentionBuffers: one rank's staging buffers (what it sends, what it
// receives, its heads' whole sequence and their results), kept from call to call so
// that a training loop allocates them once; they grow to the largest call and never
// shrink. Forward and Backward calls of any shape may share one; one thread at a time.
class UlyssesAttentionBuffers {
 public:
  UlyssesAttentionBuffers() = default;

 private:
  friend struct UlyssesAttentionBuffersAccess;
  std::vector<float> send_, recv_, sequence_, result_;
};

// CheckUlyssesHeads returns InvalidArgument naming the values unless num_heads >= 0,
// cp >= 1 and cp divides num_heads.
absl::Status CheckUlyssesHeads(int64_t num_heads, int cp);

// UlyssesAttentionForward writes, for every head, this rank's rows of
// softmax(scale Q K^T + mask) V over the whole sequence of seq_len positions into out,
// and their log-sum-exp into lse, where q, k, v are this rank's rows (as
// RingAttentionForward). This rank computes heads [r H / cp, (r + 1) H / cp) of the
// whole sequence, each head on one of the rank's threads (core/parallel_for.h), so
// the bits do not depend on the thread count; cp = 1 gives plain flash attention's
// bits. Every rank of `cp` calls it with the same seq_len, number of heads, d and
// options. InvalidArgument from CpChunks, from CheckUlyssesHeads, naming the head and
// the shapes when a view or lse does not have this rank's rows or the first head's d
// columns, or flash attention's; the Communicator's errors when an all-to-all fails
// (a rank that fails before it leaves its peers waiting until their deadline). With
// buffers null, the call allocates its own.
absl::Status UlyssesAttentionForward(Communicator& cp, absl::Span<const RingAttentionHead> heads,
                                     int64_t seq_len, const RingAttentionOptions& options,
                                     UlyssesAttentionBuffers* buffers = nullptr);

// UlyssesAttentionBackward adds, for every head, dL/dQ, dL/dK and dL/dV of this rank's
// rows to grad_q, grad_k and grad_v, given Forward's out and lse and dL/d(out). The
// gradients are added, not assigned: zero them first. Errors as Forward's.
absl::Status UlyssesAttentionBackward(Communicator& cp,
                                      absl::Span<const RingAttentionHeadGrad> heads,
                                      int64_t seq_len, const RingAttentionOptions& options,
                                      UlyssesAttentionBuffers* buffers = nullptr);

// The elements (f32) one rank sends to other ranks in one forward and one backward
// call of all its heads.
struct UlyssesAttentionTraffic {
  int64_t forward = 0;
  int64_t backward = 0;
};

// UlyssesAttentionSentElements returns what `rank` of `cp` sends for a sequence of
// seq_len positions, num_heads heads and head dimension d (the formula at the top of
// this file). Errors as CpChunks' and CheckUlyssesHeads', and InvalidArgument naming d
// when it is negative.
absl::StatusOr<UlyssesAttentionTraffic> UlyssesAttentionSentElements(int64_t seq_len, int cp,
                                                                     int rank, CpLayout layout,
                                                                     int64_t num_heads, int64_t d);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_ULYSSES_ATTENTION_H_

// Ring attention: one head's attention over a sequence split across the `cp` ranks of
// a context-parallel group. Each rank holds the queries, keys and values of some
// positions (CpChunks); the keys and values travel around the ring rank -> rank + 1,
// cp - 1 hops, and at each hop every rank attends its queries to the visiting block
// (flash_attention.h, with global positions, so the causal mask holds across blocks)
// and folds the result into its running (out, lse) by log-sum-exp
// (MergeAttentionBlocks). The backward sends the keys and values around again with
// their gradients dK, dV riding along: each rank adds its queries' share and passes the
// sum on, and one last hop of dK, dV alone brings every block's gradients home.
//
// Layouts (CpLayout): the sequence is cut into pieces whose sizes differ by at most one
// (placement.h's ShardExtentOf, kBalanced), so any sequence length works.
//   kZigzag      2 cp chunks; rank r holds chunks r and 2 cp - 1 - r, an early and a
//                late one, so under a causal mask every rank has the same work (to a
//                chunk's rounding): seq 64, cp 4 gives 520 visible pairs on each rank;
//                CpWorkImbalance (max / mean) is 1.000 at seq 1024 and cp 2 or 4, 1.004
//                at seq 250 and cp 4, and grows only where chunks are a few rows (1.06
//                at seq 64, cp 3).
//   kContiguous  cp chunks; rank r holds chunk r. Under a causal mask the last rank
//                does the most work (seq 64, cp 4: 136 pairs on rank 0, 904 on rank 3;
//                CpWorkImbalance tends to 2 cp / (cp + 1): 1.75 at cp 4).
// A rank's rows are its chunks' positions in order, chunk after chunk.
//
// Traffic (elements sent per rank, f32; RingAttentionSentElements gives them for any
// split): forward 2 (cp - 1) rows d (K and V, cp - 1 hops); backward (4 (cp - 1) + 2)
// rows d (K and V for cp - 1 hops; the dK, dV sums for cp - 1 hops, one behind, then
// the last home), where rows is the rows of the block each hop carries: local_rows
// when the sequence divides by the chunk count.
//
// Overlap: the hops run on a communication thread (collectives/comm_worker.h) while
// the calling thread computes: in the forward, the block in hand goes on to the next
// rank and the next block lands in a second buffer while this one is attended to. In
// the backward, the keys and values travel the same way, and the gradients one hop
// behind them: each rank computes its queries' share of dK, dV for the block in hand
// into a fresh buffer while the sum of the earlier ranks' shares for that block
// arrives, adds the two, and sends the sum on during the next block's compute; so
// no hop waits for compute and no compute waits for a hop it could have overlapped.
// The calling thread waits for a hop only when it finishes its block first
// (RingOverlapStats::exposed_seconds).
//
// Deadlock: Communicator::Send may block until the peer receives, and one thread
// drives a communicator, so every hop orders its two calls by rank parity: even ranks
// send to rank + 1 then receive from rank - 1, odd ranks receive then send. An odd
// rank's predecessor is even, so its first call (a receive) meets a send; every even
// rank's first send goes to an odd rank that is receiving, except, for odd cp, rank
// cp - 1's send to rank 0, which completes once rank 0's own send (to odd rank 1) has.
// So the waits form no cycle. cp = 2 puts both calls on one pair, in the same order.
// Every rank's communication thread runs the same hops in the same order (a backward
// hop of keys and values, then one of gradients), each a complete exchange, so the
// argument holds hop by hop. The calling thread never touches `cp` while a hop runs.
//
// Example (cp = 4 thread ranks, seq_len = 100, one head of d = 16; on rank 1):
//   CpChunks(100, 4, 1, CpLayout::kZigzag);  // {{13, 13}, {76, 12}}: rows 0-12, 13-24
//   const int64_t rows = 25;                  // this rank's queries, keys and values
//   std::vector<float> out(rows * 16), lse(rows);
//   LOOM_RETURN_IF_ERROR(RingAttentionForward(comm, Dense(q, rows, 16), Dense(k, rows, 16),
//                                             Dense(v, rows, 16), 100, {},
//                                             Dense(absl::MakeSpan(out), rows, 16),
//                                             absl::MakeSpan(lse)));
//   // out, lse: rows of the full sequence's attention at this rank's positions
//   // dq, dk, dv zeroed first: Backward adds into them.
//   LOOM_RETURN_IF_ERROR(RingAttentionBackward(comm, ..., Dense(out, rows, 16),
//                                              Dense(dout, rows, 16), lse, dq, dk, dv));
//   CpChunks(100, 0, 0, CpLayout::kZigzag);
//   // InvalidArgument: "CpChunks: cp is 0 (seq_len 100, rank 0): it must be at least 1"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_RING_ATTENTION_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_RING_ATTENTION_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

enum class CpLayout { kZigzag, kContiguous };

// CpLayoutName returns "zigzag" or "contiguous".
absl::string_view CpLayoutName(CpLayout layout);

// A run of global sequence positions [offset, offset + length).
struct PositionRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// CpChunks returns the position ranges that `rank` of `cp` holds of a sequence of
// seq_len positions under `layout`, in the order of the rank's rows: two for kZigzag
// (either may be empty when seq_len < 2 cp), one for kContiguous. InvalidArgument
// naming the values unless cp >= 1, seq_len >= 0 and 0 <= rank < cp.
absl::StatusOr<std::vector<PositionRange>> CpChunks(int64_t seq_len, int cp, int rank,
                                                    CpLayout layout);

struct RingAttentionOptions {
  CpLayout layout = CpLayout::kZigzag;
  // Mask keys at later positions than the query (a decoder).
  bool causal = true;
  // Multiplies the scores; 0 means 1 / sqrt(d).
  float scale = 0.0f;
  // Flash attention's tiles (FlashAttentionOptions), each in [1, 4096].
  int64_t tile_q = 64;
  int64_t tile_k = 64;
};

// RingAttentionBuffers: one rank's block buffers (the visiting keys and values, the
// next hop's landing place, a block's partial output), kept from call to call so that
// a training loop allocates them once; they grow to the largest call and never
// shrink. Forward and Backward calls of any shape may share one; one thread at a time.
// How much of the ring's communication the compute hid (RingAttentionBuffers::stats):
// hop_seconds is the communication thread's time in the hops, exposed_seconds the
// part of it the calling thread waited for after its own block's compute; hidden is
// hop_seconds - exposed_seconds.
struct RingOverlapStats {
  int64_t hops = 0;
  double hop_seconds = 0;
  double exposed_seconds = 0;
};

class RingAttentionBuffers {
 public:
  RingAttentionBuffers() = default;
  // The calls' overlap figures since construction (or ResetStats).
  const RingOverlapStats& stats() const { return stats_; }
  void ResetStats() { stats_ = RingOverlapStats(); }

 private:
  friend struct RingAttentionBuffersAccess;
  std::vector<float> held_, landing_, block_out_, block_lse_;
  // The backward's gradients: this hop's share, the sum sent on, the sum arriving.
  std::vector<float> grads_, grads_out_, grads_in_;
  RingOverlapStats stats_;
};

// One head of a multi-head call: this rank's rows of its queries, keys and values
// [rows, d], and where its output [rows, d] and log-sum-exp [rows] go.
struct RingAttentionHead {
  ConstMatrixView q, k, v;
  MatrixView out;
  absl::Span<float> lse;
};

// One head of a multi-head backward: Forward's operands and results, dL/d(out), and
// the gradients dL/dQ, dL/dK, dL/dV [rows, d] to add into.
struct RingAttentionHeadGrad {
  ConstMatrixView q, k, v, out, grad_out;
  absl::Span<const float> lse;
  MatrixView grad_q, grad_k, grad_v;
};

// RingAttentionForward writes, for every head, this rank's rows of
// softmax(scale Q K^T + mask) V over the whole sequence of seq_len positions into out,
// and their log-sum-exp into lse, where q, k, v are this rank's rows (rows = the total
// length of CpChunks(seq_len, cp.size(), cp.rank(), options.layout)). All heads travel
// together: one message per hop carries every head's keys and values, and a hop's
// heads run on the rank's threads (core/parallel_for.h), each head on one, so the bits
// do not depend on the thread count. Every rank of `cp` calls it with the same
// seq_len, number of heads, d and options. InvalidArgument naming the head and the
// shapes when a view or lse does not have this rank's rows or the first head's d
// columns, or Flash attention's errors; the Communicator's errors when a hop fails (a
// rank that fails before its first hop leaves its peers waiting until their deadline).
// With buffers null, the call allocates its own.
absl::Status RingAttentionForward(Communicator& cp, absl::Span<const RingAttentionHead> heads,
                                  int64_t seq_len, const RingAttentionOptions& options,
                                  RingAttentionBuffers* buffers = nullptr);

// RingAttentionBackward adds, for every head, dL/dQ, dL/dK and dL/dV of this rank's
// rows to grad_q, grad_k and grad_v, given Forward's out and lse and dL/d(out). The
// gradients are added, not assigned: zero them first. Errors as Forward's.
absl::Status RingAttentionBackward(Communicator& cp,
                                   absl::Span<const RingAttentionHeadGrad> heads,
                                   int64_t seq_len, const RingAttentionOptions& options,
                                   RingAttentionBuffers* buffers = nullptr);

// One head: the calls above with a single head.
absl::Status RingAttentionForward(Communicator& cp, ConstMatrixView q, ConstMatrixView k,
                                  ConstMatrixView v, int64_t seq_len,
                                  const RingAttentionOptions& options, MatrixView out,
                                  absl::Span<float> lse, RingAttentionBuffers* buffers = nullptr);
absl::Status RingAttentionBackward(Communicator& cp, ConstMatrixView q, ConstMatrixView k,
                                   ConstMatrixView v, int64_t seq_len,
                                   const RingAttentionOptions& options, ConstMatrixView out,
                                   ConstMatrixView grad_out, absl::Span<const float> lse,
                                   MatrixView grad_q, MatrixView grad_k, MatrixView grad_v,
                                   RingAttentionBuffers* buffers = nullptr);

// CpVisiblePairs returns the (query, key) score pairs `rank` of `cp` attends over a
// sequence of seq_len positions: under a causal mask each of its queries at position p
// sees p + 1 keys; otherwise every query sees seq_len. Its attention work, forward and
// backward. Errors as CpChunks'.
absl::StatusOr<int64_t> CpVisiblePairs(int64_t seq_len, int cp, int rank, CpLayout layout,
                                       bool causal = true);

// CpWorkImbalance returns the most visible pairs of a rank over the mean of the cp
// ranks (1 when every rank does the same work; CpVisiblePairs, causal): the time the
// slowest rank adds to a ring step. Errors as CpChunks'; 1 for an empty sequence.
absl::StatusOr<double> CpWorkImbalance(int64_t seq_len, int cp, CpLayout layout);

// The elements (f32) one rank sends in one forward and one backward call of one head
// (a multi-head call sends heads times as many, in the same number of messages).
struct RingAttentionTraffic {
  int64_t forward = 0;
  int64_t backward = 0;
};

// RingAttentionSentElements returns what `rank` of `cp` sends for a sequence of seq_len
// positions and head dimension d (see the top of this file). Errors as CpChunks', and
// InvalidArgument naming d when it is negative.
absl::StatusOr<RingAttentionTraffic> RingAttentionSentElements(int64_t seq_len, int cp, int rank,
                                                               CpLayout layout, int64_t d);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_RING_ATTENTION_H_

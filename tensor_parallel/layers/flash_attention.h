// Fused blockwise scaled dot-product attention of one head (FlashAttention-2's loop
// order), forward and backward, never holding a score matrix larger than one tile.
//
// Forward walks the queries in tiles of tile_q rows and, for each, the keys and values
// in tiles of tile_k rows, keeping a running row maximum m and sum l (the online
// softmax): S = scale Q_i K_j^T, m' = max(m, rowmax S), P = exp(S - m'),
// l = l exp(m - m') + rowsum P, O = O exp(m - m') + P V_j. At the end O is divided
// by l and lse = m + log(l), the log-sum-exp of each query's scores, is returned.
// Backward recomputes P = exp(S - lse) tile by tile from Q, K and lse (no
// probabilities are saved) and forms dV = P^T dO, dS = P (dP - rowsum(dO O)) with
// dP = dO V^T, dQ = scale dS K and dK = scale dS^T Q.
//
// Positions: Q's and K's rows carry global sequence positions, q_position and
// k_position for their first rows, so a block of queries can attend to a block of
// keys from elsewhere in the sequence (ring attention, context parallelism). Under
// causal masking a query sees the keys whose position is at most its own; tiles
// wholly above that diagonal are skipped. A query that sees no key of this block gets
// a zero output row and lse = -infinity. MergeAttentionBlocks combines the results of
// two key blocks for the same queries; Backward takes the merged output and lse and
// adds each block's share to the gradients, so the gradients of a sequence split
// into key blocks are the sums over the blocks.
//
// Matrices are row-major views (gemm.h), so one head's columns of a [s, b, width]
// activation are used in place. Products go through Gemm, in f32. Sequence lengths
// need not be multiples of the tiles.
//
// Accuracy: the online softmax rescales partial sums, so results differ from an
// unfused softmax in the last places; flash_attention_test asserts them against a
// double-precision reference within 2e-5 (outputs, lse) and 5e-5 (gradients) relative
// to the largest magnitude, for causal edges, ragged tiles and split key blocks.
//
// Example (one head, s = 100 positions of d = 32; q, k, v, o, do_ [100, 32]):
//   std::vector<float> lse(100);
//   LOOM_RETURN_IF_ERROR(FlashAttentionForward({Dense(q, 100, 32), Dense(k, 100, 32),
//                                               Dense(v, 100, 32)},
//                                              Dense(absl::MakeSpan(o), 100, 32),
//                                              absl::MakeSpan(lse), {}));
//   // dq, dk, dv zeroed first: Backward adds into them.
//   LOOM_RETURN_IF_ERROR(FlashAttentionBackward({Dense(q, 100, 32), ...}, Dense(o, 100, 32),
//                                               Dense(do_, 100, 32), lse, dq_view, dk_view,
//                                               dv_view, {}));
//   FlashAttentionForward({Dense(q, 100, 32), Dense(k, 90, 32), Dense(v, 100, 32)}, ...);
//   // InvalidArgument: "FlashAttention: k is [90,32] and v [100,32]: they must have the
//   // same rows"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_FLASH_ATTENTION_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_FLASH_ATTENTION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

// AttentionBlock: one head's queries [sq, d], keys and values [sk, d], and the global
// positions of their first rows.
struct AttentionBlock {
  ConstMatrixView q, k, v;
  int64_t q_position = 0;
  int64_t k_position = 0;
};

struct FlashAttentionOptions {
  // Mask keys at later positions than the query (a decoder).
  bool causal = true;
  // Multiplies the scores; 0 means 1 / sqrt(d).
  float scale = 0.0f;
  // Tile rows of Q and of K and V, each in [1, 4096].
  int64_t tile_q = 64;
  int64_t tile_k = 64;
};

// FlashAttentionForward writes softmax(scale Q K^T + mask) V into out [sq, d] and
// each query's log-sum-exp of its visible scaled scores into lse [sq]. InvalidArgument
// naming the shapes when q, k, v, out and lse disagree, when a view does not fit its
// span, or for options out of range.
absl::Status FlashAttentionForward(const AttentionBlock& block, MatrixView out,
                                   absl::Span<float> lse, const FlashAttentionOptions& options);

// FlashAttentionBackward adds dL/dQ, dL/dK and dL/dV of this block to grad_q [sq, d],
// grad_k and grad_v [sk, d], given the attention output `out` and log-sum-exp `lse`
// for these queries over all key blocks (Forward's, or MergeAttentionBlocks') and
// dL/d(out), grad_out [sq, d]. The gradients are added, not assigned: zero them
// first. InvalidArgument naming the shapes as Forward's.
absl::Status FlashAttentionBackward(const AttentionBlock& block, ConstMatrixView out,
                                    ConstMatrixView grad_out, absl::Span<const float> lse,
                                    MatrixView grad_q, MatrixView grad_k, MatrixView grad_v,
                                    const FlashAttentionOptions& options);

// MergeAttentionBlocks folds the attention of the same queries over another key
// block (out_b [sq, d], lse_b) into (out, lse): lse = log(exp(lse) + exp(lse_b)) and
// out = out exp(lse_old - lse) + out_b exp(lse_b - lse). Rows where both are
// -infinity stay zero. InvalidArgument naming the shapes when they disagree.
absl::Status MergeAttentionBlocks(MatrixView out, absl::Span<float> lse, ConstMatrixView out_b,
                                  absl::Span<const float> lse_b);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_FLASH_ATTENTION_H_

// ParallelSelfAttention: a Megatron-LM self-attention block split by heads across
// the tensor-parallel group: a column-parallel QKV projection that gives each rank
// the queries, keys and values of its own heads, causal scaled dot-product
// attention per local head (fused, flash_attention.h; no communication), and a
// row-parallel output projection whose all-reduce (or, with sequence parallelism,
// reduce-scatter) sums the heads' contributions. Heads are split by
// ShardExtentOf(num_heads, tp, rank, rule), so 5 heads on 3 ranks give 2, 2, 1
// (kBalanced); a rank may hold none. The (batch, head) pairs run on GemmThreads()
// threads (gemm.h), each pair on one, so the bits do not depend on the count.
//
// Layout: activations are [s, b, hidden] (Megatron's sequence-first layout). The
// QKV weight is [3 * hidden, hidden] with rows [Q; K; V], head h's rows of each
// being [h * head_dim, (h + 1) * head_dim); the output weight is [hidden, hidden].
// With sequence parallelism the input and output are each rank's piece of s.
//
// Context parallelism: with options.context_parallel, a group of cp ranks, each rank's
// input is its rows of a longer sequence (ring_attention.h's CpChunks of
// cp_sequence_length under cp_layout: zigzag by default), and the heads attend over
// the whole sequence by ring attention, all of a rank's (batch, head) pairs in one
// message per hop. The projections see only the rank's rows: their weight gradients
// are this rank's share, which the caller sums over the cp group (as over dp). Tensor
// and context parallelism combine (a rank's heads of its rows); with sequence
// parallelism too, sequence_length is the rank's cp rows, which the tp group splits.
//
// Example (tp = 2, hidden = 8, 4 heads of 2 dims; each rank holds 2 heads):
//   ParallelSelfAttentionOptions options;
//   options.num_heads = 4;
//   LOOM_ASSIGN_OR_RETURN(ParallelSelfAttention attn,
//       ParallelSelfAttention::Create(wqkv /*[24,8]*/, &bqkv, wo /*[8,8]*/, &bo, tp, options));
//   attn.local_heads();                                  // 2
//   LOOM_ASSIGN_OR_RETURN(Tensor y, attn.Forward(x /*[5,3,8]*/));     // [5,3,8]
//   LOOM_ASSIGN_OR_RETURN(Tensor dx, attn.Backward(dy /*[5,3,8]*/));  // [5,3,8]
//   attn.qkv().weight_grad().shape();                    // {12, 8}: this rank's Q, K, V rows
//   attn.Forward(x /*[5,8]*/);
//   // InvalidArgument: "ParallelSelfAttention: input shape [5,8] must be [s, b, 8]"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_PARALLEL_SELF_ATTENTION_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_PARALLEL_SELF_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/communicator.h"
#include "core/dtype.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/ring_attention.h"
#include "tensor_parallel/layers/ulysses_attention.h"
#include "tensor_parallel/layers/row_parallel_linear.h"
#include "tensor_parallel/layers/weight_grad_work.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {

// AttentionWeightGradWork: the two projections' weight-gradient work of one split
// backward (weight_grad_work.h).
struct AttentionWeightGradWork {
  WeightGradWork qkv, out;
  size_t bytes() const { return qkv.bytes() + out.bytes(); }
};

// How attention crosses the context-parallel group: kRing passes K/V blocks around the
// ring (ring_attention.h; any head count); kAllToAll re-shards heads for the whole
// sequence and back (ulysses_attention.h; cp must divide this rank's heads).
enum class CpComm { kRing, kAllToAll };

// CpCommName returns "ring" or "a2a".
absl::string_view CpCommName(CpComm comm);

struct ParallelSelfAttentionOptions {
  int64_t num_heads = 1;
  // Mask future positions (a decoder's self-attention).
  bool causal = true;
  bool sequence_parallel = false;
  // Full sequence length under sequence parallelism (see ColumnParallelOptions).
  int64_t sequence_length = 0;
  // How heads (and the sequence, under sequence parallelism) are split.
  ShardRule rule = ShardRule::kBalanced;
  // Storage of the projection weights: f32 or bf16.
  DType weight_dtype = DType::kF32;
  // The context-parallel group (see the top of this file); null or one rank: none.
  // Not owned; it must outlive the layer.
  Communicator* context_parallel = nullptr;
  CpLayout cp_layout = CpLayout::kZigzag;
  CpComm cp_comm = CpComm::kRing;
  // The whole sequence's length under context parallelism.
  int64_t cp_sequence_length = 0;
};

class ParallelSelfAttention {
 public:
  // Create takes this rank's heads from the full weights: qkv_weight [3h, h],
  // qkv_bias [3h] or null, out_weight [h, h], out_bias [h] or null. InvalidArgument
  // naming the shapes when they disagree, when num_heads < 1 or does not divide h,
  // or for the options the projections reject.
  static absl::StatusOr<ParallelSelfAttention> Create(const Tensor& qkv_weight,
                                                      const Tensor* qkv_bias,
                                                      const Tensor& out_weight,
                                                      const Tensor* out_bias, Communicator& tp,
                                                      const ParallelSelfAttentionOptions& options);

  ParallelSelfAttention(ParallelSelfAttention&&) = default;
  ParallelSelfAttention& operator=(ParallelSelfAttention&&) = default;

  // Forward returns the block's output, the input's shape ([s, b, h], or this
  // rank's sequence piece under sequence parallelism). InvalidArgument naming the
  // shape for an input that is not f32 [s, b, h] (dim 0 = this rank's piece under
  // sequence parallelism; this rank's cp rows under context parallelism); otherwise a
  // collective's error.
  absl::StatusOr<Tensor> Forward(const Tensor& input);

  // Backward takes dL/dy (Forward's shape), fills the projections' gradients and
  // returns dL/dx. FailedPrecondition before any Forward; InvalidArgument naming
  // both shapes for a mismatched gradient; otherwise a collective's error.
  absl::StatusOr<Tensor> Backward(const Tensor& grad_output);

  // Split backward (weight_grad_work.h): BackwardInput returns dL/dx as Backward
  // does, moves the projections' weight-gradient inputs into `work` and forgets
  // the forward; BackwardWeight fills the projections' gradients from it, bitwise
  // as Backward would have, even after other Forwards. Errors as Backward and the
  // projections' BackwardWeight. The projections' weight gradients go where given
  // (their BackwardWeight's weight_grad_into), else into their own tensors.
  absl::StatusOr<Tensor> BackwardInput(const Tensor& grad_output, AttentionWeightGradWork& work);
  absl::Status BackwardWeight(const AttentionWeightGradWork& work,
                              absl::Span<float> qkv_weight_grad_into = {},
                              absl::Span<float> out_weight_grad_into = {});

  // The projections, for their weights and gradients.
  const ColumnParallelLinear& qkv() const { return qkv_; }
  const RowParallelLinear& out() const { return out_; }
  // mutable_qkv / mutable_out give access to the projections (to lend them
  // weights, or to release their gradients).
  ColumnParallelLinear& mutable_qkv() { return qkv_; }
  RowParallelLinear& mutable_out() { return out_; }

  // saved_activation_bytes returns the bytes Forward keeps for Backward: the local
  // Q, K, V, the heads' context and log-sum-exp (no s x s probabilities: the fused
  // attention recomputes them) and the projections' inputs.
  // ReleaseActivations frees them; Backward then returns FailedPrecondition until
  // the next Forward.
  size_t saved_activation_bytes() const {
    return state_.bytes() + qkv_.saved_activation_bytes() + out_.saved_activation_bytes();
  }
  void ReleaseActivations() {
    state_ = CoreState();
    qkv_.ReleaseActivations();
    out_.ReleaseActivations();
  }

  // ForwardState: what one Forward keeps for its Backward (the core's Q, K, V,
  // context and log-sum-exp, and the projections' states), a microbatch's context
  // (TakeForwardState / RestoreForwardState as ColumnParallelLinear's).
  // CoreState: the core's part; the projections keep theirs.
  // Q, K, V are the qkv projection's output itself and the context the tensor the
  // out projection is given (moved and made in place: no copy of either).
  struct CoreState {
    Tensor qkv, ctx;
    std::vector<float> lse;
    int64_t seq = 0, batch = 0;
    bool valid = false;
    size_t bytes() const {
      return qkv.size_bytes() + ctx.size_bytes() + lse.capacity() * sizeof(float);
    }
  };
  struct ForwardState {
    CoreState core;
    ColumnParallelLinear::ForwardState qkv;
    RowParallelLinear::ForwardState out;
    size_t bytes() const {
      return core.bytes() + qkv.bytes() + out.bytes();
    }
  };
  ForwardState TakeForwardState() {
    return ForwardState{std::exchange(state_, CoreState()), qkv_.TakeForwardState(),
                        out_.TakeForwardState()};
  }
  void RestoreForwardState(ForwardState state) {
    state_ = std::move(state.core);
    qkv_.RestoreForwardState(std::move(state.qkv));
    out_.RestoreForwardState(std::move(state.out));
  }
  // comm_tally returns the projections' collective payloads since Create.
  CommTally comm_tally() const { return qkv_.comm_tally() + out_.comm_tally(); }
  int64_t local_heads() const { return heads_.length; }
  ShardExtent head_extent() const { return heads_; }

 private:
  ParallelSelfAttention(ColumnParallelLinear qkv, RowParallelLinear out)
      : qkv_(std::move(qkv)), out_(std::move(out)) {}

  // CoreBackward returns dL/d(local Q, K, V) [s, b, 3 * local width] for the
  // gradient of the heads' context, grad_ctx [s, b, local width].
  absl::StatusOr<Tensor> CoreBackward(const Tensor& grad_ctx);
  // The heads' forward over the whole sequence (flash attention, or ring attention
  // under context parallelism): fills ctx and lse from qkv.
  absl::Status CoreForward(int64_t s, int64_t b);
  bool ContextParallel() const {
    return options_.context_parallel != nullptr && options_.context_parallel->size() > 1;
  }

  ColumnParallelLinear qkv_;
  RowParallelLinear out_;
  ParallelSelfAttentionOptions options_;
  int64_t hidden_ = 0;
  int64_t head_dim_ = 0;
  ShardExtent heads_;
  // Saved by Forward: the local Q, K, V [s, b, 3 * local_heads * head_dim], the
  // heads' context [s, b, local_heads * head_dim] and its log-sum-exp
  // [b][local head][s] (flash_attention.h).
  CoreState state_;  // the core's part of the live forward state
};

// ThisThreadRingOverlap: the overlap figures (ring_attention.h) of every ring
// attention call the layers made on this thread: a rank's layers share one set of
// ring buffers per thread.
RingOverlapStats ThisThreadRingOverlap();

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_PARALLEL_SELF_ATTENTION_H_

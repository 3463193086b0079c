// VocabParallelCrossEntropy: softmax cross-entropy over logits whose vocabulary
// dimension is split across the tensor-parallel group (a column-parallel output
// layer's result), as in Megatron-LM, without ever gathering the full vocabulary.
// Per token: an all-reduce (max) of the local maxima; then one all-reduce (sum) of
// two values per token, the target's logit (non-zero only on the rank that owns the
// target) and the sum of exp(logit - max). The loss is log(sum) - (target - max),
// the same on every rank. Backward is local: (softmax - onehot) * dL/dloss on the
// rank's own vocabulary columns.
//
// Example (tp = 2, vocab = 4; rank 0 holds columns 0..1, rank 1 columns 2..3):
//   LOOM_ASSIGN_OR_RETURN(VocabParallelCrossEntropy ce,
//                         VocabParallelCrossEntropy::Create(4, tp, ShardRule::kBalanced));
//   // one token, full logits {0, 0, 0, 0}, target 3: rank r passes its [1,2] piece
//   LOOM_ASSIGN_OR_RETURN(Tensor loss, ce.Forward(local_logits, {3}));  // {log 4}
//   LOOM_ASSIGN_OR_RETURN(Tensor dlogits, ce.Backward(ones /*[1]*/));
//   // rank 0: {0.25, 0.25}; rank 1: {0.25, -0.75}
//   ce.Forward(local_logits, {9});
//   // InvalidArgument: "VocabParallelCrossEntropy: target 9 at position 0 is outside
//   //   the vocabulary [0, 4)"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_CROSS_ENTROPY_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_CROSS_ENTROPY_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/placement.h"
#include "core/aligned_buffer.h"
#include "core/tensor.h"

namespace loom {

class VocabParallelCrossEntropy {
 public:
  // Create prepares the loss for a vocabulary of `vocab_size` split by `rule`.
  // InvalidArgument for a vocab_size below 1.
  static absl::StatusOr<VocabParallelCrossEntropy> Create(int64_t vocab_size, Communicator& tp,
                                                          ShardRule rule);

  VocabParallelCrossEntropy(VocabParallelCrossEntropy&&) = default;
  VocabParallelCrossEntropy& operator=(VocabParallelCrossEntropy&&) = default;

  // Forward takes this rank's logits [..., vocab_local] (f32) and every token's
  // target (the same on every rank), and returns the per-token loss, shape [...].
  // Keeps the local softmax for Backward. InvalidArgument naming the shape for
  // logits that are not [..., vocab_local], naming both counts for a target count
  // that differs from the tokens, or naming the target and position for a target
  // outside [0, vocab); otherwise a collective's error.
  absl::StatusOr<Tensor> Forward(const Tensor& logits, absl::Span<const int64_t> targets);

  // Backward takes dL/dloss (the shape Forward returned) and returns dL/dlogits for
  // this rank's columns. FailedPrecondition before any Forward; InvalidArgument
  // naming both shapes for a mismatched gradient.
  absl::StatusOr<Tensor> Backward(const Tensor& grad_loss);

  ShardExtent vocab_extent() const { return extent_; }

  // saved_activation_bytes returns the bytes Forward keeps for Backward (the local
  // softmax and the targets). ReleaseActivations frees them; Backward then returns
  // FailedPrecondition until the next Forward.
  size_t saved_activation_bytes() const { return state_.bytes(); }
  void ReleaseActivations() { state_ = ForwardState(); }

  // ForwardState: what one Forward keeps for its Backward, a microbatch's context
  // (TakeForwardState / RestoreForwardState as ColumnParallelLinear's).
  struct ForwardState {
    // [tokens, vocab_local]; an AlignedBuffer, whose large blocks the job's
    // core/large_block_cache.h reuses step after step (128 MiB a microbatch at
    // vocabulary 32768 and 2 x 512 tokens).
    AlignedBuffer<float> softmax;
    std::vector<int64_t> targets, logits_shape, loss_shape;
    bool valid = false;
    size_t bytes() const {
      return softmax.size_bytes() + targets.capacity() * sizeof(int64_t);
    }
  };
  ForwardState TakeForwardState() { return std::exchange(state_, ForwardState()); }
  void RestoreForwardState(ForwardState state) { state_ = std::move(state); }

  // comm_tally returns the collective payloads this layer has issued since Create.
  const CommTally& comm_tally() const { return tally_; }

 private:
  VocabParallelCrossEntropy() = default;

  Communicator* tp_ = nullptr;
  CommTally tally_;
  int64_t vocab_ = 0;
  ShardExtent extent_;
  ForwardState state_;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_VOCAB_PARALLEL_CROSS_ENTROPY_H_
